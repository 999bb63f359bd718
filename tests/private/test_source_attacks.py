"""A malicious analyst or server against a DataSource's row splits: what it may ask, what the
ledger must charge, and what the source's report must state.

Answers on the two sides of one row split ``(key, fraction)`` compose in parallel: the source
charges the larger side's total. The attacks below try to make a side's total count a spend the
ledger never took (a refused answer), and to make the report state less than the ledger charged.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from privcal.privacy import BudgetExceededError, PrivacyOdometer, SeededNoise
from privcal.private import DataSource

EDGES = np.linspace(0.0, 1.0, 5)


def _source(budget: float = 1.0, ledger: Path | None = None) -> DataSource:
    rng = np.random.default_rng(0)
    z, y = rng.normal(size=(200, 3)), rng.integers(0, 3, size=200)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return DataSource(z, y, budget=budget, ledger=ledger, noise=SeededNoise(0))


def test_a_refused_answer_on_one_side_pays_for_nothing_on_the_other() -> None:
    """Before the fix a refused side-0 query of epsilon 1e9 still raised side 0's total to 1e9,
    so every side-1 answer up to 1e9 in all was free: a budget of 1 released at epsilon 5000."""
    src = _source(budget=1.0)
    with pytest.raises(BudgetExceededError):
        src.score_histogram(EDGES, 1e9, part=(7, 0.5, 0))
    with pytest.raises(BudgetExceededError):
        src.score_histogram(EDGES, 1000.0, part=(7, 0.5, 1))
    assert src.spent == 0.0 and src.history == []
    src.score_histogram(EDGES, 1.0, part=(7, 0.5, 1))  # the budget is still whole
    assert src.spent == pytest.approx(1.0)


def test_a_side_pays_beyond_what_the_other_side_was_charged() -> None:
    """Side 0 charged 0.8 (a further 0.5 refused): side 1 rides free up to 0.8, not up to 1.3."""
    src = _source(budget=1.0)
    src.score_histogram(EDGES, 0.8, part=(7, 0.5, 0))
    with pytest.raises(BudgetExceededError):
        src.score_histogram(EDGES, 0.5, part=(7, 0.5, 0))
    src.score_histogram(EDGES, 0.8, part=(7, 0.5, 1))  # parallel: free
    assert src.spent == pytest.approx(0.8)
    with pytest.raises(BudgetExceededError):  # side 1 would hold 1.1 > 1
        src.score_histogram(EDGES, 0.3, part=(7, 0.5, 1))
    assert src.spent == pytest.approx(0.8)


def test_a_server_cannot_free_a_side_through_a_node_ledger(tmp_path: Path) -> None:
    """Over Flower the node keeps one source per run: a second run on a ledger with 0.1 left
    asks side 0 at its policy's 1.0 (refused by the ledger), then side 1 at 1.0 again and
    again. Before the fix every side-1 answer (and then every side-0 one) went out uncharged."""
    pytest.importorskip("flwr")
    from privcal.federated.flower.sources import answer_source_query

    src = _source(budget=1.0, ledger=tmp_path / "l.sqlite")
    src.count(0.9)  # an earlier run
    z, y = src._z, src._y
    node = {"ledger": str(tmp_path / "l.sqlite"), "budget": 1.0, "max-epsilon": 1.0}

    def ask(side: int) -> dict[str, str]:
        kwargs = {"edges": EDGES.tolist(), "epsilon": 1.0, "part": [7, 0.5, side]}
        cfg = {"query": "score_histogram", "kwargs": json.dumps(kwargs)}
        return answer_source_query(z, y, node, cfg, run_id=2)

    for side in (0, 1, 1, 0, 0, 1):
        assert "Privacy budget" in ask(side).get("refused", ""), side
    assert PrivacyOdometer(1.0, ledger=node["ledger"]).spent == pytest.approx(0.9)


def test_the_report_never_states_less_than_the_ledger_charged() -> None:
    """Side 0 of two different keys overlaps (a row may be on side 0 of both), and so does a
    side with the whole data; before the fix each side label composed in parallel with the
    rest: the report stated epsilon 1 for a ledger charge of 3."""
    src = _source(budget=10.0)
    src.score_histogram(EDGES, 1.0, part=(1, 0.5, 0))
    src.score_histogram(EDGES, 1.0, part=(2, 0.5, 0))
    src.count(1.0)
    assert src.spent == pytest.approx(3.0)
    assert src.privacy_report().epsilon == pytest.approx(3.0)

    one_split = _source(budget=10.0)
    one_split.score_histogram(EDGES, 1.0, part=(1, 0.5, 0))
    one_split.score_histogram(EDGES, 1.0, part=(1, 0.5, 1))
    assert one_split.spent == one_split.privacy_report().epsilon == pytest.approx(1.0)

    with_whole = _source(budget=10.0)
    with_whole.score_histogram(EDGES, 1.0, part=(1, 0.5, 0))
    with_whole.count(1.0)
    assert with_whole.privacy_report().epsilon == pytest.approx(2.0)


def test_splits_of_one_key_at_other_fractions_overlap_and_compose() -> None:
    """Side 1 at fraction 0.3 and side 0 at 0.5 share the rows between: basic composition."""
    src = _source(budget=10.0)
    src.score_histogram(EDGES, 1.0, part=(7, 0.3, 1))
    src.score_histogram(EDGES, 1.0, part=(7, 0.5, 0))
    assert src.spent == pytest.approx(2.0)
    assert src.privacy_report().epsilon == pytest.approx(2.0)


# ------------------------------------------------- seeded noise on an owner's source ledger
def test_an_analyst_cannot_take_seeded_noise_on_an_owners_source(tmp_path: Path) -> None:
    """The owner made the ledger (budget 1); the analyst opens it with the seed it chose. Before
    the fix the source answered with ``SeededNoise(0)``: the analyst redraws the noise from the
    seed and subtracts it, so the exact count came out while the owner's ledger recorded an
    epsilon-0.5 Laplace release (true epsilon: unbounded). Only the owner opts in."""
    from privcal.data import write_scores

    rng = np.random.default_rng(0)
    z, y = rng.normal(size=(200, 3)), rng.integers(0, 3, size=200)
    data = write_scores(tmp_path / "val.npz", z, y)
    ledger = tmp_path / "owner.sqlite"
    DataSource.init_ledger(data, ledger, budget=1.0, name="owner")
    with pytest.raises(ValueError, match="accepts secure noise only"):
        DataSource.open(ledger, noise=SeededNoise(0))
    # re-initialising the owner's ledger cannot add the opt-in either
    DataSource.init_ledger(data, ledger, budget=1.0, name="owner", allow_seeded_noise=True)
    with pytest.raises(ValueError, match="accepts secure noise only"):
        DataSource.open(ledger, noise=SeededNoise(0))
    assert DataSource.open(ledger).spent == 0.0  # nothing was charged, secure noise still opens
    # an owner who opts in at creation (tests, simulations) gets the seeded source
    opted = tmp_path / "sim.sqlite"
    DataSource.init_ledger(data, opted, budget=1.0, allow_seeded_noise=True)
    with pytest.warns(UserWarning, match="not private"):
        src = DataSource.open(opted, noise=SeededNoise(0))
    noisy = src.count(0.5)
    assert noisy - float(SeededNoise(0).laplace(2.0)) == pytest.approx(200.0)  # the leak itself


def test_the_seeded_noise_opt_in_cannot_be_added_to_an_existing_ledger(tmp_path: Path) -> None:
    """The owner keeps its ledger from Python (``DataSource(..., ledger=PATH)``, no source row);
    the analyst runs ``source init --allow-seeded-noise`` on it to add a source row that opts in,
    then opens it with its own seed. The opt-in is made only by the call that creates a ledger."""
    from privcal.data import write_scores

    rng = np.random.default_rng(1)
    z, y = rng.normal(size=(200, 3)), rng.integers(0, 3, size=200)
    data = write_scores(tmp_path / "val.npz", z, y)
    ledger = tmp_path / "owner.sqlite"
    DataSource(z, y, budget=1.0, ledger=ledger, name="owner")
    with pytest.raises(ValueError, match="existed before"):
        DataSource.init_ledger(data, ledger, budget=1.0, allow_seeded_noise=True)
    with pytest.raises(ValueError, match="accepts secure noise only"):
        DataSource.open(ledger, noise=SeededNoise(0))
    assert DataSource.open(ledger).spent == 0.0


def test_a_sources_share_records_the_threshold_its_epsilon_rests_on() -> None:
    """A share carries ``1 / t`` of the noise: its epsilon holds only while ``t`` honest shares
    reach the sum. ``t`` is the analyst's argument, not the owner's, so the owner's own record
    (its ledger's release, ``history``) states it: with t=3 of K=3 a ledger that said only
    'distributed discrete laplace, epsilon 1' stood for a share that, seen alone, has a third
    of that release's noise variance."""
    from privcal.private import PrivateHistogramBinning

    rng = np.random.default_rng(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        srcs = [
            DataSource(rng.normal(size=(100, 3)), rng.integers(0, 3, 100), budget=1.0,
                       noise=SeededNoise(k), name=f"s{k}")
            for k in range(3)
        ]  # fmt: skip
        PrivateHistogramBinning(epsilon=1.0, aggregation="distributed", threshold=3).fit(
            sources=srcs
        )
    for src in srcs:
        assert src.history and all("t=3 of K=3" in r.mechanism for r in src.history)
        assert all("t=3 of K=3" in r.mechanism for r in src.privacy_report().releases)
        assert all("t=3 of K=3" in r.mechanism for r in src.odometer.releases)

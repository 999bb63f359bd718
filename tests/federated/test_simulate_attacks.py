"""Attacks on the in-process simulator's distributed noise (``simulate``) and the Flower
simulation's configuration, as the server that picks the run's settings would try them.

What must hold: the aggregator's view (``aggregator_views_``: the modular sums and who dropped)
and whether a run releases at all depend on no client's data; a ledger is charged only for a
run that can release; seeded noise warns in the caller's process.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import numpy as np
import pytest

from privcal.federated import simulate
from privcal.federated.methods import get_method
from privcal.privacy import InsecureNoiseWarning, PrivacyOdometer
from privcal.privacy.distributed import TooFewSurvivorsError

C = 3


def _data(big: bool) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """Three clients of 40 rows; ``big``: client 0 holds one row with a class-0 logit of 9."""
    rng = np.random.default_rng(0)
    z = np.clip(rng.normal(size=(120, C)), -2.0, 2.0)
    y = rng.integers(0, C, 120)
    if big:
        z[0, 0] = 9.0
    return z, y, [np.arange(40 * k, 40 * (k + 1)) for k in range(3)]


def _fragile_method() -> Any:
    """FedTemp (parameter averaging) whose step is NaN for a client holding a logit above 5:
    a step the method cannot compute on some data only (as an overflow would be)."""
    fm = get_method("fedtemp-averaging", local_iters=2)
    steps = fm.client_steps

    def client_steps(state: Any, z: np.ndarray, y: np.ndarray, clients: Any) -> Any:
        out = np.array([np.asarray(p, dtype=np.float64) for p in steps(state, z, y, clients)])
        for i, idx in enumerate(clients):
            if (z[idx] > 5).any():
                out[i] = np.nan
        return out

    fm.client_steps = client_steps  # type: ignore[method-assign]
    return fm


@pytest.mark.parametrize("aggregation", ["distributed", "trusted"])
def test_a_non_finite_payload_is_summed_as_zeros_whatever_the_data(
    aggregation: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A client whose step is not finite on its data uploads zeros with its share (as a deployed
    client does, ``task.client_payload``): dropping it would name it in the aggregator's view,
    fail a round whose threshold counts it (a refusal that depends on one client's data), and
    log its index. The run, the view and the log are those of the neighbour without the row."""
    seen = []
    for big in (False, True):
        z, y, parts = _data(big)
        threshold = {"threshold": 3} if aggregation == "distributed" else {}
        with warnings.catch_warnings(), caplog.at_level(logging.WARNING, "privcal.federated"):
            warnings.simplefilter("ignore")
            caplog.clear()
            cal, _ = simulate(
                _fragile_method(), z, y, parts, rounds=2, epsilon=1.0, delta=1e-5,
                aggregation=aggregation, **threshold,
            )  # fmt: skip
        views = getattr(cal, "aggregator_views_", [])
        seen.append(([v.dropped for v in views], [r.getMessage() for r in caplog.records]))
    assert seen[0] == seen[1]


def test_a_run_whose_cohorts_miss_the_threshold_is_refused_before_the_ledger() -> None:
    """Client sampling is public (``seed``), so a distributed run whose sampled cohort falls
    below ``t`` in some round is known before any data is read: it is refused then, and the
    pipeline ledger keeps its budget (it was charged 2.14 for a run that released nothing)."""
    z, y, parts = _data(False)
    parts = [np.arange(12 * k, 12 * (k + 1)) for k in range(10)]
    ledger = PrivacyOdometer(budget=100.0, delta_budget=1e-3)
    with warnings.catch_warnings(), pytest.raises(TooFewSurvivorsError, match="threshold t=8"):
        warnings.simplefilter("ignore")
        simulate("fedtemp", z, y, parts, rounds=5, epsilon=1.0, delta=1e-5, sample_rate=0.5,
                 ledger=ledger)  # fmt: skip
    assert ledger.spent == 0.0 and not ledger.releases


def test_seeded_noise_of_a_flower_simulation_warns_the_caller(tmp_path: Any) -> None:
    """``simulate_flower(noise="seeded")`` (and ``privcal federate simulate --noise seeded``)
    warns in the caller's process, as every seeded entry point does; the ServerApp's own warning
    goes to a subprocess's log."""
    from privcal.federated.flower.simulation import simulation_config

    rng = np.random.default_rng(0)
    np.savez(tmp_path / "all.npz", logits=rng.normal(size=(60, C)), labels=rng.integers(0, C, 60))
    with pytest.warns(InsecureNoiseWarning, match="not private"):
        simulation_config("fedtemp", tmp_path / "all.npz", 3, 2, epsilon=1.0, noise="seeded")
    with warnings.catch_warnings():
        warnings.simplefilter("error", InsecureNoiseWarning)
        simulation_config("fedtemp", tmp_path / "all.npz", 3, 2, epsilon=None, noise="seeded")
        simulation_config("fedtemp", tmp_path / "all.npz", 3, 2, epsilon=1.0)


@pytest.mark.parametrize("overlap", ["indices", "copies"])
def test_a_ledger_refuses_clients_that_share_rows(overlap: str) -> None:
    """The pipeline ledger converts the user-level run to one example as a group of two users
    (``4 rho``), which holds only when an example lies in one client. Rows given to several
    clients (the same indices, or copies of the rows) would make one example ``m`` users: with
    10 clients over the same rows the run is ``400 rho``-zCDP per example (epsilon 34.5 at
    delta 1e-5 for a run of epsilon 1) where the ledger was charged ``4 rho`` (epsilon 2.14).
    Refused before the charge."""
    z, y, _ = _data(False)
    if overlap == "copies":
        z, y = np.concatenate([z] * 10), np.concatenate([y] * 10)
        parts = [np.arange(120 * k, 120 * (k + 1)) for k in range(10)]
    else:
        parts = [np.arange(120)] * 10
    ledger = PrivacyOdometer(budget=100.0, delta_budget=1e-3)
    with warnings.catch_warnings(), pytest.raises(ValueError, match="share 120 identical rows"):
        warnings.simplefilter("ignore")
        simulate("fedtemp", z, y, parts, rounds=2, epsilon=1.0, delta=1e-5, ledger=ledger)
    assert ledger.spent == 0.0 and not ledger.releases


def test_bad_evaluation_data_is_refused_before_the_ledger() -> None:
    """The evaluation set was checked after the pipeline ledger was charged: a run refused for
    its eval_labels had spent 2.14 (epsilon 1, example level) on nothing."""
    z, y, parts = _data(False)
    ledger = PrivacyOdometer(budget=100.0, delta_budget=1e-3)
    with warnings.catch_warnings(), pytest.raises(ValueError):
        warnings.simplefilter("ignore")
        simulate("fedtemp", z, y, parts, rounds=2, epsilon=1.0, delta=1e-5, ledger=ledger,
                 eval_logits=z[:10], eval_labels=y[:9])  # fmt: skip
    assert ledger.spent == 0.0 and not ledger.releases


def test_a_ledger_refuses_an_evaluation_set_holding_the_clients_rows() -> None:
    """The history's metrics are exact statistics of the evaluation set, which the report lists
    as public: evaluated on the clients' own rows, a run charged 2.14 to the ledger would release
    exact (noise-free: unbounded epsilon) statistics of the rows that ledger protects."""
    z, y, parts = _data(False)
    ledger = PrivacyOdometer(budget=100.0, delta_budget=1e-3)
    with warnings.catch_warnings(), pytest.raises(ValueError, match="evaluation set"):
        warnings.simplefilter("ignore")
        simulate("fedtemp", z, y, parts, rounds=2, epsilon=1.0, delta=1e-5, ledger=ledger,
                 eval_logits=z[30:50], eval_labels=y[30:50])  # fmt: skip
    assert ledger.spent == 0.0 and not ledger.releases

"""Federated conformal prediction with user-level DP (``"conformal-lac"``, ``"conformal-aps"``)."""

from __future__ import annotations

import logging
import warnings

import numpy as np
import pytest

from privcal.conformal import FullSetWarning
from privcal.federated import dirichlet_partition, simulate
from privcal.federated.dp import DPConfig
from privcal.federated.methods import conformal as fc
from privcal.federated.methods import get_method
from privcal.privacy import SeededNoise

# the seeded runs reproduce their noise on purpose
pytestmark = pytest.mark.filterwarnings("ignore::privcal.privacy.noise.InsecureNoiseWarning")


def _data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Five classes; logits the one-hot label times 4 plus unit noise."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 5, n)
    return 4.0 * np.eye(5)[y] + rng.normal(size=(n, 5)), y


def test_registered_and_runs_with_defaults() -> None:
    z, y = _data(400, 0)
    parts = dirichlet_partition(y, n_clients=10, beta=0.5, seed=0)
    for name, score in (("conformal-lac", "lac"), ("conformal-aps", "aps")):
        assert get_method(name).score == score
        sets, history = simulate(name, z, y, parts, rounds=1, seed=0)
        assert sets.predict_set(z[:3]).shape == (3, 5)
        assert history[-1]["round"] == 1


def test_without_dp_equals_split_conformal_on_the_grid() -> None:
    """v = 0: J is the first edge with at most alpha (N + 1) - 1 scores above it."""
    z, y = _data(600, 1)
    parts = [np.arange(k, 600, 6) for k in range(6)]
    sets, _ = simulate("conformal-lac", z, y, parts, rounds=1, row_cap=1000, n_bins=64)
    s = fc.conformity("lac", fc.softmax(z))[np.arange(600), y]
    above = np.array([(s > e).sum() for e in sets.edges_])
    j = int(np.flatnonzero(above <= 0.1 * 601 - 1)[0])
    assert sets.bin_ == j and sets.threshold_ == sets.edges_[j]


def test_payload_sensitivity_one_client_moves_the_sum_by_at_most_r() -> None:
    """Adding a client with many rows in one bin moves the clipped sum by at most r (L1, L2)."""
    fm = get_method("conformal-lac", row_cap=5, seed=0)
    dp = DPConfig(epsilon=1.0, delta=1e-5, rounds=1, noise=SeededNoise(0))
    z, y = _data(200, 2)
    heavy = np.tile([9.0, 0, 0, 0, 0], (80, 1)), np.zeros(80, dtype=np.int64)
    state = fm.init(5)
    base = fm.clip(fm.client_step(state, z, y), dp)
    added = fm.clip(fm.client_step(state, *heavy), dp)
    assert np.abs(added).sum() <= 5 + 1e-9 and np.linalg.norm(added) <= 5 + 1e-9
    assert np.abs((base + added) - base).sum() <= 5 + 1e-9
    assert fm.noise_groups(dp, (fm.m,))[0].sensitivity == 5.0
    # a payload that skipped the cap is clipped back to L2 norm r
    assert np.linalg.norm(fm.clip(np.full(fm.m, 10.0), dp)) == pytest.approx(5.0)


def test_rows_kept_are_a_fixed_random_subset() -> None:
    keep = fc.cap_rows(50, 5, seed=3)
    assert keep.size == 5 and np.array_equal(keep, fc.cap_rows(50, 5, seed=3))
    assert np.array_equal(fc.cap_rows(4, 5, seed=3), np.arange(4))


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"alpha": 1.5}, "alpha"),
        ({"n_bins": 1}, "n_bins"),
        ({"row_cap": 0}, "row_cap"),
        ({"seed": -1}, "seed"),
    ],
)
def test_bad_input_is_refused(params: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        get_method("conformal-lac", **params)


def test_bad_score_is_refused() -> None:
    with pytest.raises(ValueError, match="score"):
        fc.FedConformal(score="aps-randomized")


@pytest.mark.statistical
@pytest.mark.slow
def test_coverage_at_least_one_minus_alpha_within_3_se() -> None:
    """100 seeded federations of 100 clients (2000 rows, Dirichlet 0.5), user-level epsilon 4
    (trusted), 8 equal-width bins: the mean test coverage is at least 1 - alpha - r_n minus 3
    standard errors (r_n of Theorem F is below 1e-3 here); SE from the 100 coverages."""
    logging.disable(logging.WARNING)
    z, y = _data(12000, 3)
    alpha, cov, size = 0.1, [], []
    for rep in range(100):
        perm = np.random.default_rng(rep).permutation(12000)
        cal, test = perm[:2000], perm[2000:]
        parts = dirichlet_partition(y[cal], n_clients=100, beta=0.5, seed=rep)
        sets, _ = simulate(
            "conformal-lac",
            z[cal],
            y[cal],
            parts,
            rounds=1,
            epsilon=4.0,
            delta=1e-5,
            aggregation="trusted",
            noise=SeededNoise(rep),
            seed=rep,
            row_cap=20,
            alpha=alpha,
            n_bins=np.linspace(0.0, 1.0, 9),
        )
        s = sets.predict_set(z[test])
        cov.append(s[np.arange(test.size), y[test]].mean())
        size.append(s.sum(axis=1).mean())
    logging.disable(logging.NOTSET)
    se = np.std(cov, ddof=1) / np.sqrt(len(cov))
    assert np.mean(cov) >= 1 - alpha - 3 * se
    assert np.mean(cov) < 0.999 and np.mean(size) < 4.5  # not the full set: the test can fail


def test_release_summary_states_the_sets() -> None:
    """What a Flower run writes to privacy_report.json's ``released``: threshold, bin, margin."""
    from privcal.calibrators.summary import release_summary

    z, y = _data(300, 4)
    sets, _ = simulate(
        "conformal-lac", z, y, [np.arange(0, 300, 2), np.arange(1, 300, 2)], rounds=1, seed=0
    )
    released = release_summary(sets)
    assert released["class"] == "FederatedConformalSets" and "fallback" not in released
    params = released["parameters"]
    assert (params["threshold"], params["bin"], params["margin"]) == (
        sets.threshold_,
        sets.bin_,
        sets.margin_,
    )
    assert released["text"].startswith(f"sets {{y : S(x, y) <= {sets.threshold_:.4g}}}")


def test_full_federated_sets_warn_and_say_what_helps() -> None:
    """APS scores of an over-confident network lie within 1e-5 of 1, above the default grid's
    top edge below 1 (1 - 1e-4): every set is then the full set, which warns (it used to be
    silent) and names the floor; a smaller floor gives informative sets without a warning."""
    rng = np.random.default_rng(0)
    z = 8.0 * rng.normal(size=(2000, 10))
    y = (z / 8.0 + 0.7 * rng.normal(size=z.shape)).argmax(1)
    parts = np.array_split(np.arange(2000), 20)
    with pytest.warns(FullSetWarning, match=r"floor=0\.0001\).*smaller floor"):
        full, _ = simulate("conformal-aps", z, y, parts, rounds=1, row_cap=100)
    assert full.threshold_ == 1.0 and full.predict_set(z).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error", FullSetWarning)
        fine, _ = simulate("conformal-aps", z, y, parts, rounds=1, row_cap=100, floor=1e-10)
    assert fine.predict_set(z).sum(1).mean() < 7.0

"""Private calibrators: exact budget accounting, bad input, predict paths, baselines."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from privcal.calibrators import HistogramBinning, TemperatureScaling, calibrator_from_dict
from privcal.calibrators.temperature import fit_temperature_acc
from privcal.metrics.statistics import accuracy_gap_sum, softmax
from privcal.privacy import BudgetExceededError, SeededNoise
from privcal.private import (
    DataSource,
    NoRecalibration,
    PrivateHistogramBinning,
    PrivateTemperatureScaling,
    one_source,
    search_plan,
)

pytestmark = pytest.mark.filterwarnings("ignore::privcal.private.InsecureNoiseWarning")

CONFIGS = [
    {"objective": "acc"},
    {"objective": "acc", "t_range": (0.5, 8.0)},
    {"objective": "acc", "search": "golden-section"},
    {"objective": "acc", "search": "golden"},
    {"objective": "acc", "search": "golden", "t_range": (0.5, 3.0)},
    {"objective": "acc", "search": "bisect", "t_range": (0.25, 8.0)},
    {"objective": "nll"},
    {"objective": "nll", "t_range": (0.5, 3.0)},
    {"objective": "nll", "search": "golden"},
    {"objective": "ece"},
    {"objective": "ece", "t_range": (0.5, 3.0), "n_bins": 10},
]


def make(cfg: dict[str, Any], eps: float, k: int = 5, seed: int = 0) -> Any:
    if cfg.get("objective") == "hist":
        return PrivateHistogramBinning(epsilon=eps, noise=SeededNoise(seed))
    return PrivateTemperatureScaling(epsilon=eps, iterations=k, noise=SeededNoise(seed), **cfg)


def sources(z: np.ndarray, y: np.ndarray, d: int, budget: float = 1.0) -> list[DataSource]:
    return [
        DataSource(z[i::d], y[i::d], budget=budget, noise=SeededNoise(i), name=f"s{i}")
        for i in range(d)
    ]


# the accounting is the check; small-epsilon fits may be noise-dominated and say so
@pytest.mark.filterwarnings("ignore::privcal.private.NoiseDominatedWarning")
@pytest.mark.parametrize("cfg", [*CONFIGS, {"objective": "hist"}])
@pytest.mark.parametrize("eps", [1.0, 0.3, 0.7, 2.9])
@pytest.mark.parametrize("k", [1, 4, 5])
def test_report_epsilon_is_exact_on_arrays(
    overconfident: Any, cfg: dict[str, Any], eps: float, k: int
) -> None:
    z, y = overconfident
    est = make(cfg, eps, k).fit(z, y)
    rep = est.privacy_report_
    assert rep.epsilon == eps
    assert [g.epsilon for g in rep.per_source().values()] == [eps]
    if cfg["objective"] != "hist":
        plan = est.plan()
        queries = 1 if plan.search == "curve" else k + 1 + int(plan.locate)
        assert len(rep) == plan.evaluations + int(plan.locate) == queries
    assert all(r.mechanism == "laplace" and r.sensitivity > 0 for r in rep.releases)


@pytest.mark.filterwarnings("ignore::privcal.private.NoiseDominatedWarning")
@pytest.mark.parametrize("cfg", [*CONFIGS, {"objective": "hist"}])
def test_report_epsilon_is_exact_per_source(overconfident: Any, cfg: dict[str, Any]) -> None:
    z, y = overconfident
    srcs = sources(z, y, 6, budget=1.0)
    est = make(cfg, 0.7).fit(sources=srcs)
    rep = est.privacy_report_
    assert rep.epsilon == 0.7
    per = rep.per_source()
    assert list(per) == [f"s{i}" for i in range(6)]
    assert all(g.epsilon == 0.7 for g in per.values())
    assert all(s.spent == 0.7 for s in srcs)
    assert est.n_sources_ == 6


def test_unnamed_sources_are_reported_apart(overconfident: Any) -> None:
    z, y = overconfident
    srcs = [DataSource(z[i::3], y[i::3], noise=SeededNoise(i)) for i in range(3)]
    rep = PrivateTemperatureScaling(epsilon=1.0).fit(sources=srcs).privacy_report_
    assert list(rep.per_source()) == ["source0", "source1", "source2"]
    assert rep.epsilon == 1.0


def test_sensitivities_in_report(overconfident: Any) -> None:
    z, y = overconfident
    cfg = {"objective": "nll", "nll_bound": 4.0, "search": "golden"}
    rep = make(cfg, 1.0).fit(z, y).privacy_report_
    # first the locating accuracy-gap query (sensitivity 1), then clipped NLL sums (B = 4)
    assert [r.sensitivity for r in rep.releases] == [1.0] + [4.0] * 6
    assert rep.releases[0].query.startswith("accuracy_gap_sum(T=3")
    # the default: one release of the increments, B + min(B, log C) with C = 4 classes
    (rel,) = make({"objective": "nll", "nll_bound": 4.0}, 1.0).fit(z, y).privacy_report_.releases
    assert rel.query.startswith("clipped_nll_increments(T=0.25..64, k=17, B=4")
    assert (rel.sensitivity, rel.epsilon) == (4.0 + np.log(4.0), 1.0)


@pytest.mark.parametrize(("search", "rel"), [("bisect", 1e-3), ("golden", 1e-3), ("curve", 0.02)])
def test_large_epsilon_recovers_the_nonprivate_fit(
    overconfident: Any, search: str, rel: float
) -> None:
    z, y = overconfident
    exact = fit_temperature_acc(z, y, (0.05, 20.0))
    est = PrivateTemperatureScaling(
        "acc", epsilon=1e7, iterations=30, search=search, noise=SeededNoise(0)
    ).fit(z, y)
    # the curve interpolates linearly in log T between grid points sqrt(2) apart: a few % off
    assert est.temperature_ == pytest.approx(exact, rel=rel)
    assert est.t_range_[0] <= exact <= est.t_range_[1]


def test_auto_range_follows_the_gap_sign(sample_labels: Any) -> None:
    rng = np.random.default_rng(3)
    z = 4.0 * rng.normal(size=(3000, 5))
    y = sample_labels(z, 8.0, rng)  # calibrated temperature ~8 > 3
    for obj in ("nll", "ece", "acc"):
        est = PrivateTemperatureScaling(obj, epsilon=50.0, search="golden", noise=SeededNoise(1))
        assert est.fit(z, y).t_range_ == (3.0, 30.0)
        assert est.temperature_ > 4.0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"epsilon": 0.0}, "epsilon"),
        ({"epsilon": -1.0}, "epsilon"),
        ({"epsilon": float("inf")}, "epsilon"),
        ({"iterations": 0}, "iterations"),
        ({"iterations": 2.5}, "iterations"),
        ({"t_range": (0.0, 3.0)}, "t_range"),
        ({"t_range": (3.0, 0.5)}, "t_range"),
        ({"t_range": (1.0, 1.0)}, "t_range"),
        ({"t_range": "wide"}, "t_range"),
        ({"objective": "brier"}, "objective"),
        ({"search": "grid"}, "search"),
        ({"objective": "nll", "search": "bisect"}, "bisect"),
        ({"objective": "ece", "search": "curve"}, "curve"),
        ({"n_bins": 0}, "n_bins"),
        ({"nll_bound": 0.0}, "nll_bound"),
    ],
)
def test_bad_parameters_spend_nothing(
    overconfident: Any, kwargs: dict[str, Any], match: str
) -> None:
    z, y = overconfident
    srcs = sources(z, y, 2)
    with pytest.raises(ValueError, match=match):
        PrivateTemperatureScaling(**kwargs).fit(sources=srcs)
    assert all(s.spent == 0.0 for s in srcs)


def test_bad_sources_spend_nothing(overconfident: Any) -> None:
    z, y = overconfident
    srcs = sources(z, y, 2)
    other = DataSource(np.zeros((4, 3)), np.array([0, 1, 2, 0]), noise=SeededNoise(0))
    for bad, match in (
        ([], "non-empty"),
        ([*srcs, other], "number of classes"),
        ([srcs[0], srcs[0]], "twice"),
    ):
        for est in (PrivateTemperatureScaling(), PrivateHistogramBinning()):
            with pytest.raises(ValueError, match=match):
                est.fit(sources=bad)
    with pytest.raises(ValueError, match="epsilon"):
        PrivateHistogramBinning(epsilon=0).fit(sources=srcs)
    with pytest.raises(ValueError, match="either"):
        PrivateTemperatureScaling().fit()
    with pytest.raises(ValueError, match="not both"):
        PrivateTemperatureScaling().fit(z, y, sources=srcs)
    assert all(s.spent == 0.0 for s in [*srcs, other])


def test_spent_budget_refuses_before_any_query(overconfident: Any) -> None:
    z, y = overconfident
    srcs = sources(z, y, 3, budget=1.0)
    srcs[2].count(0.5)  # this source has only 0.5 left
    with pytest.raises(BudgetExceededError):
        PrivateTemperatureScaling(epsilon=0.75).fit(sources=srcs)
    assert [s.spent for s in srcs] == [0.0, 0.0, 0.5]
    PrivateTemperatureScaling(epsilon=0.5).fit(sources=srcs)
    assert [s.spent for s in srcs] == [0.5, 0.5, 1.0]
    with pytest.raises(BudgetExceededError):
        PrivateHistogramBinning(epsilon=0.6).fit(sources=srcs)
    assert [s.spent for s in srcs] == [0.5, 0.5, 1.0]


@pytest.mark.filterwarnings("ignore::privcal.private.NoiseDominatedWarning")  # bins kept: any
def test_predict_paths_are_the_nonprivate_ones(overconfident: Any) -> None:
    z, y = overconfident
    ts = make({"objective": "acc"}, 1.0).fit(z, y)
    np.testing.assert_allclose(ts.predict_proba(z), softmax(z, ts.temperature_))
    hb = make({"objective": "hist"}, 1.0).fit(z, y)
    ref = HistogramBinning(n_bins=15)
    ref.bin_values_ = hb.bin_values_
    ref.n_classes_ = 4
    np.testing.assert_array_equal(hb.predict_proba(z), ref.predict_proba(z))
    assert np.all(hb.bin_values_[np.isfinite(hb.bin_values_)] >= 0)
    assert np.all(hb.bin_values_[np.isfinite(hb.bin_values_)] <= 1)


def test_curve_release_is_the_accuracy_gap_curve(overconfident: Any) -> None:
    """The curve query answers accuracy_gap_sum at every grid point (huge epsilon), and its one
    release is reported with sensitivity 2 and the whole budget."""
    z, y = overconfident
    est = PrivateTemperatureScaling("acc", epsilon=1e9, noise=SeededNoise(0)).fit(z, y)
    (rel,) = est.privacy_report_.releases
    assert rel.query.startswith("accuracy_gap_curve(T=0.25..64, k=17, anchor=2")
    assert (rel.sensitivity, rel.epsilon) == (2.0, 1e9)
    grid = np.asarray(est.plan().grid)
    src = DataSource(z, y, budget=1e9, noise=SeededNoise(1))
    curve = src.accuracy_gap_curve(grid, epsilon=1e9, anchor=6)
    exact = [accuracy_gap_sum(z, y, t) for t in grid]  # the shared statistic, one T at a time
    np.testing.assert_allclose(curve, exact, atol=1e-6)
    assert np.all(np.diff(exact) > 0)  # the gap is increasing in T


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"temperatures": [1.0, 0.5]}, "temperatures"),
        ({"temperatures": []}, "temperatures"),
        ({"temperatures": [0.0, 1.0]}, "temperatures"),
        ({"temperatures": [1.0, 2.0], "anchor": 2}, "anchor"),
        ({"temperatures": [1.0, 2.0], "anchor": -1}, "anchor"),
    ],
)
def test_bad_curve_queries_spend_nothing(
    overconfident: Any, kwargs: dict[str, Any], match: str
) -> None:
    z, y = overconfident
    src = DataSource(z, y, budget=1.0, noise=SeededNoise(0))
    with pytest.raises(ValueError, match=match):
        src.accuracy_gap_curve(epsilon=0.5, **kwargs)
    assert src.spent == 0.0 and not src.history


@pytest.mark.filterwarnings("ignore::privcal.private.NoiseDominatedWarning")
@pytest.mark.parametrize("cfg", [{"objective": "acc"}, {"objective": "hist"}])
def test_json_roundtrip(overconfident: Any, cfg: dict[str, Any]) -> None:
    z, y = overconfident
    est = make(cfg, 1.0).fit(z, y)
    back = calibrator_from_dict(json.loads(json.dumps(est.to_dict())))
    np.testing.assert_array_equal(back.predict_proba(z), est.predict_proba(z))
    assert back.privacy_report_.epsilon == 1.0
    assert len(back.privacy_report_) == len(est.privacy_report_)


def test_search_plan_counts() -> None:
    plan = search_plan("acc", 1.0, 5)
    assert (plan.search, plan.t_range, plan.evaluations, plan.epsilons) == (
        "curve",
        (0.25, 64.0),
        1,
        (1.0,),
    )
    assert len(plan.grid) == 17 and plan.grid[plan.anchor] == pytest.approx(2.0)
    assert plan.grid[0] == 0.25 and plan.grid[-1] == 64.0
    paper = search_plan("acc", 1.0, 5, search="golden-section")
    assert (paper.t_range, paper.locate, len(paper.epsilons)) == ((0.5, 3.0), False, 6)
    plan = search_plan("nll", 1.0, 5)
    assert (plan.search, plan.t_range, plan.epsilons, len(plan.grid)) == (
        "curve",
        (0.25, 64.0),
        (1.0,),
        17,
    )
    plan = search_plan("nll", 1.0, 5, search="golden")
    assert (plan.search, plan.locate, plan.evaluations, len(plan.epsilons)) == (
        "golden",
        True,
        6,
        7,
    )
    assert search_plan("ece", 1.0, 5).search == "golden"
    with pytest.raises(ValueError, match="'curve' only with objective='acc' or objective='nll'"):
        search_plan("ece", 1.0, 5, search="curve")
    with pytest.raises(ValueError, match="'bisect' only with objective='acc'"):
        search_plan("nll", 1.0, 5, search="bisect")
    plan = search_plan("ece", 1.0, 5, t_range=(0.5, 3.0))
    assert (plan.locate, len(plan.epsilons)) == (False, 6)


def test_baselines(overconfident: Any) -> None:
    z, y = overconfident
    np.testing.assert_array_equal(NoRecalibration().fit(z, y).predict_proba(z), softmax(z))
    cal = one_source(z[:50], y[:50])
    ref = TemperatureScaling("nll").fit(z[:50], y[:50])
    assert cal.temperature_ == ref.temperature_


def test_isotonic_increasing_is_pool_adjacent_violators(rng: np.random.Generator) -> None:
    from sklearn.isotonic import IsotonicRegression

    from privcal.calibrators.search import isotonic_increasing

    v = rng.normal(size=(30, 9)).cumsum(axis=1) + 2.0 * rng.normal(size=(30, 9))
    want = [IsotonicRegression().fit_transform(np.arange(9), row) for row in v]
    np.testing.assert_allclose(isotonic_increasing(v), want, atol=1e-12)


def test_monotone_root_ties_edges_and_a_stray_zero() -> None:
    from privcal.calibrators.search import monotone_root

    t = np.array([1.0, 2.0, 4.0, 8.0, 16.0, 32.0])
    rows = np.array(
        [
            [-5.0, -3.0, -1.0, 1.0, 3.0, 5.0],  # crossing halfway between 4 and 8 (in log T)
            [-2.0, -1.0, 0.0, 0.0, 2.0, 3.0],  # a run of exact zeros: its midpoint
            [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],  # no sign change: the edge toward the root
            [-6.0, -5.0, -4.0, -3.0, -2.0, -1.0],
            [-5.0, -3.0, -1.0, 1.0, 3.0, 0.0],  # a stray exact zero at the edge: pooled away
        ]
    )
    got = monotone_root(rows, t)
    np.testing.assert_allclose(got, [4 * 2**0.5, 4 * 2**0.5, 1.0, 32.0, 4 * 2**0.5])
    assert monotone_root(rows[0], t) == pytest.approx(4 * 2**0.5)


def test_weighted_isotonic_is_weighted_pava(rng: np.random.Generator) -> None:
    from sklearn.isotonic import IsotonicRegression

    from privcal.calibrators.search import isotonic_increasing

    v = rng.normal(size=(20, 8)).cumsum(axis=1) + 2.0 * rng.normal(size=(20, 8))
    w = rng.uniform(0.01, 5.0, size=8)
    want = [IsotonicRegression().fit_transform(np.arange(8), row, sample_weight=w) for row in v]
    np.testing.assert_allclose(isotonic_increasing(v, weights=w), want, atol=1e-10)


def test_convex_argmin_reads_the_minimiser_of_exact_nll_sums(sample_labels: Any) -> None:
    """Without noise the increments of the clipped NLL sum give its minimiser to within the
    spline's error (< 2% with factor-sqrt(2) steps), vectorised over rows."""
    from privcal.calibrators.search import convex_argmin, geometric_grid
    from privcal.metrics.statistics import clipped_nll_sum

    rng = np.random.default_rng(4)
    grid = geometric_grid(0.25, 64.0, np.sqrt(2.0))
    fine = np.exp(np.linspace(np.log(0.3), np.log(50.0), 3000))
    for t_true in (0.6, 2.5, 9.0):
        z = 3.0 * rng.normal(size=(4000, 5))
        y = sample_labels(z, t_true, rng)
        best = fine[np.argmin(clipped_nll_sum(z, y, fine, 10.0))]
        inc = np.diff(clipped_nll_sum(z, y, grid, 10.0))
        assert convex_argmin(inc, grid) == pytest.approx(best, rel=0.02)
        np.testing.assert_allclose(convex_argmin(np.stack([inc, inc]), grid), best, rtol=0.02)
    # a minimum beyond the grid is read at its edge
    assert convex_argmin(np.full(16, -1.0), grid) == pytest.approx(64.0)
    assert convex_argmin(np.full(16, 1.0), grid) == pytest.approx(0.25)


def test_nll_increments_are_the_clipped_nll_curve(overconfident: Any) -> None:
    """The increments query answers diff(clipped_nll_sum) on the grid (huge epsilon)."""
    from privcal.metrics.statistics import clipped_nll_sum

    z, y = overconfident
    grid = np.asarray(search_plan("nll", 1.0, 5).grid)
    src = DataSource(z, y, budget=1e9, noise=SeededNoise(1))
    got = src.clipped_nll_increments(grid, epsilon=1e9, bound=4.0)
    exact = [clipped_nll_sum(z, y, t, 4.0) for t in grid]  # the shared statistic, one T at a time
    np.testing.assert_allclose(got, np.diff(exact), atol=1e-6)
    for kwargs in ({"temperatures": [1.0]}, {"temperatures": [2.0, 1.0]}, {"bound": 0.0}):
        with pytest.raises(ValueError, match=r"temperatures|bound"):
            src.clipped_nll_increments(**{"temperatures": grid, "epsilon": 1.0, **kwargs})
    assert src.spent == 1e9 and len(src.history) == 1


@pytest.mark.parametrize("bound", [0.5, 3.0, 10.0])
def test_one_rows_nll_variation_is_within_the_sensitivity(bound: float) -> None:
    """The derived bound B + min(B, log C) on one example's total variation along any grid,
    checked on rows from calm to extreme (logits down to -700, ties, valleys)."""
    from privcal.metrics.statistics import nll_terms
    from privcal.private.queries import nll_curve_sensitivity

    rng = np.random.default_rng(11)
    grid = np.exp(np.linspace(np.log(0.01), np.log(1000.0), 400))
    for c in (2, 3, 10, 100):
        z = rng.normal(size=(3000, c)) * rng.choice([0.1, 1.0, 10.0, 300.0], size=(3000, 1))
        z[:50, :2] = [0.0, -2.5]  # valleys: label second, the rest far below
        z[:50, 2:] = -42.0
        y = np.where(np.arange(3000) < 50, 1, rng.integers(0, c, 3000))
        f = np.minimum(nll_terms(z, y, grid), bound)  # (k, n)
        tv = np.abs(np.diff(f, axis=0)).sum(axis=0)
        assert tv.max() <= nll_curve_sensitivity(bound, c)
        # not loose: valleys reach most of it (below B = log 2 a wrong label's NLL is always
        # clipped, so only the label-on-top rows move, by at most B)
        assert tv.max() > 0.6 * (nll_curve_sensitivity(bound, c) if bound > 1 else bound)


def test_privacy_report_before_fit_is_not_fitted() -> None:
    """Before fit, privacy_report_ raises scikit-learn's NotFittedError (an AttributeError, so
    hasattr stays False) that says what sets it, not a bare AttributeError."""
    from sklearn.exceptions import NotFittedError

    from privcal.private import PrivateHistogramBinning, PrivateTemperatureScaling

    for est in (PrivateTemperatureScaling(), PrivateHistogramBinning()):
        assert not hasattr(est, "privacy_report_")
        with pytest.raises(NotFittedError, match="has no privacy_report_ yet: fit sets it"):
            _ = est.privacy_report_

"""Theorem L (privcal.conformal.localize): the plan, the report, the estimator and the simulator."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from privcal.conformal import PrivateConformal, lac_scores, logit_edges, rank_target
from privcal.conformal.localize import (
    LOCALIZE_FRACTION,
    LOCALIZE_MIN_N,
    SOURCES,
    localization,
    window_edges,
)
from privcal.conformal.simulate import SplitSimulator
from privcal.metrics.statistics import softmax
from privcal.privacy import InsecureNoiseWarning, SeededNoise

E = logit_edges(4096)


def _data(n: int, c: int = 5, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    z = 3.0 * rng.normal(size=(n, c))
    y = np.where(rng.random(n) < 0.8, z.argmax(1), rng.integers(0, c, n))
    return z, y


def _fit(n: int, **kwargs: object) -> PrivateConformal:
    z, y = _data(n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InsecureNoiseWarning)
        return PrivateConformal(**{"noise": SeededNoise(0), **kwargs}).fit(z, y)


def test_auto_localises_from_the_public_threshold_on() -> None:
    m = E.size - 1
    assert localization(LOCALIZE_MIN_N - 1, 0.1, 1.0, m, "rank", "auto", "t") is None
    loc = localization(5000, 0.1, 1.0, m, "rank", "auto", "t")
    assert loc is not None and loc.n1 == round(LOCALIZE_FRACTION * 5000) and loc.n2 == 5000 - loc.n1
    # the half-width: z standard errors of the quantile plus log(m) over the fast tail's rate
    se = math.sqrt(0.09 / loc.n1)
    assert loc.delta == pytest.approx(2.5 * se + math.log(m) / (0.375 * loc.n1))
    assert loc.k_lo == math.floor((loc.n1 + 1) * (0.9 - loc.delta))
    assert loc.k_hi == math.ceil((loc.n1 + 1) * (0.9 + loc.delta))
    for method in ("bounded-range", "angelopoulos2022"):
        assert localization(5000, 0.1, 1.0, m, method, "auto", "t") is None
    assert localization(5000, 0.1, 1.0, m, "rank", None, "t") is None


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"localize": 0.0}, "'localize' parameter of PrivateConformal"),
        ({"localize": 0.7}, "'localize' parameter of PrivateConformal"),
        ({"localize": "yes"}, "'localize' parameter of PrivateConformal must be 'auto'"),
        ({"localize": True}, "'localize' parameter of PrivateConformal must be 'auto'"),
        ({"localize": 0.2, "method": "bounded-range"}, "applies to method='rank' only"),
        ({"localize": 0.01}, "each part needs at least 100"),
    ],
)
def test_bad_localize_is_refused_with_the_fix(kwargs: dict, match: str) -> None:
    z, y = _data(500)
    with pytest.raises(ValueError, match=match):
        PrivateConformal(**kwargs).fit(z, y)  # refused before any noise is drawn


def test_window_edges_keep_the_grid_between_the_ends() -> None:
    lo, hi = E[1000], E[1100]
    e2 = window_edges(E, hi, lo)  # order of the ends does not matter
    assert e2[0] == 0.0 and e2[-1] == 1.0 and e2.size == 101 + 2
    assert np.array_equal(e2[1:-1], E[1000:1101])
    assert np.array_equal(window_edges(E, 1.0, 1.0), [0.0, 1.0])


def test_localised_fit_reports_three_releases_composed_in_parallel() -> None:
    pc = _fit(5000)
    rep = pc.privacy_report_
    assert pc.localize_n_ == 1250 and pc.n_bins_ < E.size - 1
    assert [r.source for r in rep.releases] == [SOURCES[0], SOURCES[0], SOURCES[1]]
    assert [r.epsilon for r in rep.releases] == [0.5, 0.5, 1.0]
    assert rep.epsilon == 1.0 and rep.relation == "substitute"  # parallel: max of the parts' sums
    assert any("Theorem L" in p for p in rep.public)
    assert not any(p.startswith("target rank k = ") for p in rep.public)  # not the one-stage k
    lo, hi = pc.window_
    assert 0.0 < lo <= pc.threshold_ <= hi or pc.threshold_ == 1.0
    assert pc.rank_ == rank_target(3750, 0.1, 1.0, pc.n_bins_)  # Theorem R on the threshold part
    one = _fit(5000, localize=None)
    assert one.localize_n_ == 0 and one.n_bins_ == E.size - 1 and len(one.privacy_report_) == 1


def test_secure_noise_partition_changes_between_fits() -> None:
    """Secure noise draws the split from fresh entropy: two fits differ (with prob ~1)."""
    z, y = _data(5000)
    wins = {PrivateConformal().fit(z, y).window_ for _ in range(4)}
    assert len(wins) > 1


def test_simulator_runs_the_estimators_function_split_by_split() -> None:
    """Same calibration rows, same seeded noise: the same window, grid and threshold."""
    z, y = _data(6000, seed=3)
    S = lac_scores(softmax(z))
    sim = SplitSimulator(S, y, n=5000, splits=3, seed=1)
    res = sim.private(0.1, 1.0, noise=SeededNoise(7))
    noise = SeededNoise(7)
    for r in range(3):
        cal = sim.permutations[r, :5000]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", InsecureNoiseWarning)
            pc = PrivateConformal(noise=noise).fit(z[cal], y[cal])
        assert res.threshold[r] == pc.threshold_
        te = sim.permutations[r, 5000:]
        assert res.coverage[r] == pytest.approx((S[te, y[te]] <= pc.threshold_).mean())


def test_localised_release_lands_near_the_target_quantile() -> None:
    """On 5000 uniform-ish scores the threshold's rank is within a few ranks of k_2."""
    pc = _fit(5000, alpha=0.1, epsilon=4.0)
    z, y = _data(5000)
    s = np.sort(lac_scores(softmax(z))[np.arange(5000), y])
    # the full set's rank of the threshold, over the whole calibration set
    got = np.searchsorted(s, pc.threshold_, side="right") / 5000
    assert abs(got - 0.9) < 0.02


@pytest.mark.parametrize(
    ("n", "eps", "localised"),
    [
        (5000, 1.0, True),
        (5000, 2.0, True),  # one stage's guard: 3 ranks
        (5000, 4.0, False),  # 1 rank: nothing to gain
        (5000, 0.5, False),  # epsilon n_1 = 625: windows too wide and too often wrong
        (8000, 0.5, True),  # epsilon n_1 = 1000
        (3999, 1.0, False),
    ],
)
def test_auto_localises_where_it_pays(n: int, eps: float, localised: bool) -> None:
    from privcal.conformal.localize import LOCALIZE_MIN_EPS_N1, LOCALIZE_MIN_GUARD
    from privcal.conformal.private import conformal_plan, plan_localization

    plan = conformal_plan(n, 0.1, eps)
    loc = plan_localization(n, 0.1, eps, plan, "rank", "auto", "t")
    guard = plan.rank - math.ceil((n + 1) * 0.9)
    expect = (
        n >= LOCALIZE_MIN_N
        and guard >= LOCALIZE_MIN_GUARD
        and eps * round(LOCALIZE_FRACTION * n) >= LOCALIZE_MIN_EPS_N1
    )
    assert (loc is not None) == localised == expect
    # a hand-set fraction is taken as given
    assert plan_localization(n, 0.1, eps, plan, "rank", 0.25, "t") is not None


def test_auto_keeps_one_stage_where_the_threshold_part_could_have_no_valid_target() -> None:
    """alpha = 0.003, n = 4000: one stage has k = 3998 <= n, the threshold part (n_2 = 3000)
    would need k_2 = 3003 > n_2 with every edge in the window; "auto" keeps one stage."""
    assert rank_target(4000, 0.003, 1.0, E.size - 1) <= 4000
    assert rank_target(3000, 0.003, 1.0, E.size - 1) > 3000
    pc = _fit(4000, alpha=0.003)
    assert pc.localize_n_ == 0 and np.isfinite(pc.threshold_)
    assert _fit(4000, alpha=0.004).localize_n_ == 1000  # valid there: localised


def test_a_hand_set_fraction_without_a_valid_target_warns_full_sets() -> None:
    from privcal.conformal import FullSetWarning

    z, y = _data(4000)
    assert rank_target(3000, 0.0005, 1.0, 2) > 3000  # k_2 > n_2 even for one inner edge
    with pytest.warns(FullSetWarning, match="threshold part .* no valid target"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", InsecureNoiseWarning)
            pc = PrivateConformal(alpha=0.0005, localize=0.25, noise=SeededNoise(0)).fit(z, y)
    assert pc.threshold_ == math.inf and pc.localize_n_ == 1000
    assert len(pc.privacy_report_) == 2  # the window was released; no threshold


def test_a_hand_set_fraction_with_few_points_for_the_window_warns() -> None:
    """epsilon * n_1 < 1000: the window is often wide or wrong; said, not silently accepted."""
    z, y = _data(4000)
    with pytest.warns(UserWarning, match="epsilon \\* n_1 = 400 < 1000"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", InsecureNoiseWarning)
            PrivateConformal(localize=0.1, noise=SeededNoise(0)).fit(z, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        PrivateConformal(localize=0.25).fit(z, y)  # epsilon * n_1 = 1000: no warning

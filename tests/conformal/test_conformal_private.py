"""private_quantile, adjusted_level, optimal_gamma, optimal_bins, PrivateConformal, simulator."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy.special import softmax as sp_softmax
from scipy.stats import chisquare

from privcal.conformal import (
    CANDIDATE_BINS,
    FullSetWarning,
    PrivateConformal,
    SplitConformal,
    adjusted_level,
    coverage_upper_bound,
    lac_scores,
    min_calibration_size,
    optimal_bins,
    optimal_gamma,
    private_quantile,
    private_quantile_report,
    rank_slope,
    rank_target,
)
from privcal.conformal.private.angelopoulos2022 import _expected_threshold
from privcal.conformal.quantile import (
    bin_edges,
    logit_edges,
    quantile_counts,
    quantile_scale,
    quantile_sensitivity,
    quantile_utilities,
    rank_utilities,
)
from privcal.conformal.simulate import SplitSimulator
from privcal.metrics.statistics import softmax
from privcal.privacy import NOT_PRIVATE, InsecureNoiseWarning, PrivacyReport, SeededNoise
from privcal.privacy.mechanisms import exponential_log_weights

# seeded noise throughout (reproducible tests); test_private_conformal_report_states_relation_
# public_n_and_noise and tests/private/test_private_noise_warning.py assert the warning itself
pytestmark = pytest.mark.filterwarnings("ignore::privcal.privacy.InsecureNoiseWarning")


def test_utilities_hand_computed() -> None:
    # m = 4 bins on [0,1]: scores 0.1 (bin 1), 0.3, 0.3 (bin 2), 1.0 (bin 4)
    counts = quantile_counts([0.1, 0.3, 0.3, 1.0], bin_edges(4))
    np.testing.assert_array_equal(counts, [1, 2, 0, 1])
    w = quantile_utilities(counts, 0.5)
    # e1: less 0, greater 3 -> 6; e2: less 1, greater 1 -> 2; e3: less 3, greater 1 -> 6;
    # e4: less 3, greater 0 -> 6
    np.testing.assert_allclose(w, [6, 2, 6, 6])
    assert quantile_sensitivity(0.9) == pytest.approx(10.0)
    assert quantile_sensitivity(0.5) == 2.0
    assert quantile_sensitivity(0.2) == pytest.approx(5.0)


def test_edges_are_exact_in_floating_point() -> None:
    """A score equal to an edge belongs to the bin it closes; 0 goes to the first bin."""
    e = bin_edges(10)
    counts = quantile_counts(e, e)  # every edge value, 0 and 1 included
    assert counts[0] == 2 and np.all(counts[1:] == 1)


def test_utilities_vectorised_over_rows(rng: np.random.Generator) -> None:
    c = rng.integers(0, 5, size=(3, 7))
    w = quantile_utilities(c, 0.8)
    for r in range(3):
        np.testing.assert_allclose(w[r], quantile_utilities(c[r], 0.8))


def _loop_law(scores: np.ndarray, q: float, eps: float, m: int) -> np.ndarray:
    """The per-bin loop of Algorithm 2 (reference implementation)."""
    e = np.linspace(0, 1, m + 1)
    disc = np.array([e[max(1, int(np.searchsorted(e, s, side="left")))] for s in scores])
    w = np.array(
        [max((disc < e[j]).sum() / q, (disc > e[j]).sum() / (1 - q)) for j in range(1, m + 1)]
    )
    return sp_softmax(-eps * w / (2 * max(1 / q, 1 / (1 - q))))


@pytest.mark.parametrize("q", [0.1, 0.5, 0.93])
def test_law_matches_per_bin_loop(q: float, rng: np.random.Generator) -> None:
    s = np.round(rng.random(40), 2)
    m = 17
    w = quantile_utilities(quantile_counts(s, bin_edges(m)), q)
    lw = exponential_log_weights(-w, quantile_sensitivity(q), 2.0)
    np.testing.assert_allclose(sp_softmax(lw), _loop_law(s, q, 2.0, m), atol=1e-12)


@pytest.mark.parametrize("weights", ["bounded-range", "sensitivity"])
def test_private_quantile_draws_through_exponential_index(weights: str) -> None:
    s = np.random.default_rng(1).random(200)
    q, eps, m = 0.9, 1.0, 50
    w = quantile_utilities(quantile_counts(s, bin_edges(m)), q)
    if weights == "bounded-range":  # exp(-eps q (1-q) w)
        lw = exponential_log_weights(-w, 1 / (q * (1 - q)), eps, monotonic=True)
    else:  # seed 002 with the sensitivity: exp(-eps w / (2 max(1/q, 1/(1-q))))
        lw = exponential_log_weights(-w, quantile_sensitivity(q), eps)
    for seed in range(5):
        got = private_quantile(s, q, eps, m, noise=SeededNoise(seed), weights=weights)
        j = SeededNoise(seed).exponential_index(lw)
        assert got == bin_edges(m)[j + 1]
    assert quantile_scale(q) == pytest.approx(1 / q + 1 / (1 - q))
    assert quantile_scale(0.5) == quantile_scale(0.5, "sensitivity") == 4.0


def test_private_quantile_law_chi_square() -> None:
    s = np.linspace(0, 1, 101)
    q, eps, m = 0.7, 0.5, 8
    w = quantile_utilities(quantile_counts(s, bin_edges(m)), q)
    p = sp_softmax(-eps * w * q * (1 - q))  # the default, bounded-range weights
    noise = SeededNoise(7)
    draws = np.array([private_quantile(s, q, eps, m, noise=noise) for _ in range(3000)])
    obs = np.array([(draws == e).sum() for e in bin_edges(m)[1:]])
    keep = p * 3000 > 5
    assert chisquare(obs[keep], p[keep] / p[keep].sum() * obs[keep].sum()).pvalue > 1e-4


def test_private_quantile_accurate_for_large_epsilon() -> None:
    s = np.random.default_rng(0).random(20000)
    got = private_quantile(s, 0.9, 50.0, 1000, noise=SeededNoise(0))
    assert abs(got - 0.9) < 0.01


def test_private_quantile_million_bins_is_stable() -> None:
    s = np.random.default_rng(0).random(1000)
    got = private_quantile(s, 0.95, 1.0, 10**6, noise=SeededNoise(0))
    assert 0.8 < got <= 1.0


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (([0.5], 0.0, 1.0, 10), "'q' parameter of private_quantile"),
        (([0.5], 1.0, 1.0, 10), "'q' parameter of private_quantile"),
        (([0.5], 0.5, 0.0, 10), "'epsilon' parameter of private_quantile"),
        (([0.5], 0.5, -1.0, 10), "'epsilon' parameter of private_quantile"),
        (([0.5], 0.5, 1.0, 1), "'n_bins' parameter of private_quantile"),
        (([0.5], 0.5, 1.0, [0.0, 0.5]), "'n_bins' parameter of private_quantile"),
        (([0.5], 0.5, 1.0, [0.0, 0.6, 0.5, 1.0]), "'n_bins' parameter of private_quantile"),
        (([1.5], 0.5, 1.0, 10), "must lie in \\[0, 1\\]"),
        (([-0.1], 0.5, 1.0, 10), "must lie in \\[0, 1\\]"),
        (([np.nan], 0.5, 1.0, 10), "must lie in \\[0, 1\\]"),
        (([], 0.5, 1.0, 10), "empty"),
    ],
)
def test_private_quantile_errors(args: tuple, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        private_quantile(*args, noise=SeededNoise(0))


def test_adjusted_level_eq3() -> None:
    n, a, eps, m, g = 1000, 0.1, 2.0, 500, 0.05
    expected = (n + 1) * (1 - a) / (n * (1 - g * a)) + 2 / (eps * n) * math.log(m / (g * a))
    assert adjusted_level(n, a, eps, m, g) == pytest.approx(expected)
    assert adjusted_level(n, a, eps, np.linspace(0, 1, m + 1), g) == pytest.approx(expected)
    # q~ -> the non-private level as eps -> inf, gamma -> 0 (with m fixed)
    assert adjusted_level(n, a, 1e12, m, 1e-9) == pytest.approx((n + 1) * (1 - a) / n, abs=1e-6)


@pytest.mark.parametrize(
    ("n", "alpha", "eps", "m"),
    [(5000, 0.1, 1.0, 1000), (300, 0.05, 10.0, 100), (100, 0.1, 0.1, 10**6)],
)
def test_optimal_gamma_minimises_level(n: int, alpha: float, eps: float, m: int) -> None:
    g = optimal_gamma(n, alpha, eps, m)
    grid = np.concatenate((np.logspace(-12, -1e-9, 4000), [g]))
    levels = np.array([adjusted_level(n, alpha, eps, m, x) for x in grid])
    if g > 1e-12:
        assert adjusted_level(n, alpha, eps, m, g) <= levels.min() + 1e-12
        b = alpha * (1 - alpha) * eps * (n + 1) / 2 + 2 * alpha
        assert alpha**2 * g**2 - b * g + 1 == pytest.approx(0.0, abs=1e-9)
    else:
        # no root in (0, 1): q~ decreases on (0, 1) towards (n+1)/n + ... > 1, so every gamma
        # gives q~ > 1 and the fallback of Eq. 10 is harmless
        assert levels.min() > 1.0


def test_optimal_bins_deterministic_and_on_grid() -> None:
    m = optimal_bins(5000, 0.1, 1.0)
    assert m in CANDIDATE_BINS and m == optimal_bins(5000, 0.1, 1.0, seed=0)
    assert len(CANDIDATE_BINS) == 50 and CANDIDATE_BINS[0] == 100 and CANDIDATE_BINS[-1] == 10**6
    assert optimal_bins(5000, 0.1, 1.0, candidates=[50]) == 50


def test_expected_threshold_grouped_matches_direct() -> None:
    u = np.sort(np.random.default_rng(3).random(700))
    for m in (2, 9, 300, 5000, 10**5):
        e = np.linspace(0, 1, m + 1)
        w = quantile_utilities(quantile_counts(u, e), 0.9)
        p = sp_softmax(-1.0 * w / (2 * quantile_sensitivity(0.9)))
        assert _expected_threshold(u, 0.9, 1.0, m) == pytest.approx(p @ e[1:], rel=1e-9)


def test_min_calibration_size_is_the_boundary() -> None:
    n = min_calibration_size(0.1, 1.0, n_bins=100, method="angelopoulos2022")

    def best(k: int) -> float:
        return adjusted_level(k, 0.1, 1.0, 100, optimal_gamma(k, 0.1, 1.0, 100))

    assert best(n) < 1.0 <= best(n - 1)
    n = min_calibration_size(0.1, 1.0)  # the default, method="rank", 3915 logit bins
    assert rank_target(n, 0.1, 1.0, 3915) <= n < rank_target(n - 1, 0.1, 1.0, 3915) + 1


def _data(n: int, c: int = 5, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    z = 2.0 * rng.normal(size=(n, c))
    p = softmax(z)
    y = (p.cumsum(1) < rng.random((n, 1))).sum(1)
    return z, np.minimum(y, c - 1)


def test_private_conformal_fit_and_report() -> None:
    z, y = _data(3000)
    pc = PrivateConformal(
        alpha=0.1, epsilon=2.0, noise=SeededNoise(0), method="angelopoulos2022"
    ).fit(z, y)
    assert pc.n_bins_ == optimal_bins(3000, 0.1, 2.0)
    assert pc.gamma_ == optimal_gamma(3000, 0.1, 2.0, pc.n_bins_)
    assert pc.level_ == pytest.approx(adjusted_level(3000, 0.1, 2.0, pc.n_bins_, pc.gamma_))
    assert pc.threshold_ in bin_edges(pc.n_bins_)[1:]
    rep = pc.privacy_report_
    assert isinstance(rep, PrivacyReport) and len(rep) == 1 and rep.epsilon == 2.0
    r = rep.releases[0]
    assert r.mechanism == "exponential"
    assert r.sensitivity == pytest.approx(1 / (1 - pc.level_))
    sets = pc.predict_set(z)
    np.testing.assert_array_equal(sets, lac_scores(softmax(z)) <= pc.threshold_)
    # private threshold is at least as conservative as the non-private one, typically
    assert pc.threshold_ >= SplitConformal(alpha=0.1).fit(z, y).threshold_ - 0.05


def test_private_conformal_report_states_relation_public_n_and_noise() -> None:
    z, y = _data(400)
    with pytest.warns(InsecureNoiseWarning, match="PrivateConformal draws noise from SeededNoise"):
        seeded = PrivateConformal(alpha=0.1, epsilon=1.0, noise=SeededNoise(0)).fit(z, y)
    rep = seeded.privacy_report_
    assert rep.unit == "example" and rep.relation == "substitute"
    assert "n = 400 (number of calibration examples)" in rep.public
    assert any(p.startswith("alpha = 0.1") for p in rep.public)
    assert any(p.startswith(f"bins m = {seeded.n_bins_}") for p in rep.public)
    assert any("score function" in p for p in rep.public)
    assert rep.noise == "seeded" and rep.status == NOT_PRIVATE == "not private: seeded noise"
    assert NOT_PRIVATE in str(rep) and rep.to_dict()["status"] == NOT_PRIVATE
    assert PrivacyReport.from_dict(rep.to_dict()).relation == "substitute"
    with warnings.catch_warnings():
        warnings.simplefilter("error", InsecureNoiseWarning)
        secure = PrivateConformal(alpha=0.1, epsilon=1.0).fit(z, y)
    assert secure.privacy_report_.status == "private"
    assert secure.privacy_report_.public == rep.public  # public quantities, not the draw


def test_private_quantile_report_and_relation() -> None:
    s = np.random.default_rng(0).random(300)
    with warnings.catch_warnings():
        warnings.simplefilter("error", InsecureNoiseWarning)
        assert isinstance(private_quantile(s, 0.9, 1.0, 50), float)
        value, rep = private_quantile_report(s, 0.9, 1.0, 50)
    assert value in bin_edges(50)[1:]
    assert rep.relation == "add/remove" and rep.epsilon == 1.0 and rep.status == "private"
    assert rep.releases[0].sensitivity == pytest.approx(1 / (0.9 * 0.1))  # the range R
    assert rep.releases[0].mechanism == "exponential (bounded range)"
    _, old = private_quantile_report(s, 0.9, 1.0, 50, weights="sensitivity")
    assert old.releases[0].sensitivity == pytest.approx(quantile_sensitivity(0.9))
    assert not any(p.startswith("n =") for p in rep.public)  # n is not needed under add/remove
    with pytest.warns(InsecureNoiseWarning):
        _, sub = private_quantile_report(s, 0.9, 1.0, 50, SeededNoise(0), relation="substitute")
    assert sub.relation == "substitute" and sub.public[0] == "n = 300 (number of scores)"
    assert sub.status == NOT_PRIVATE
    with pytest.raises(ValueError, match="'relation' parameter of private_quantile"):
        private_quantile(s, 0.9, 1.0, 50, relation="replace")


def test_private_conformal_fixed_bins_gamma_and_seed() -> None:
    z, y = _data(2000)
    for method in ("angelopoulos2022", "bounded-range"):
        kw = {"n_bins": 200, "gamma": 0.01, "method": method}
        a = PrivateConformal(noise=SeededNoise(4), **kw).fit(z, y)  # type: ignore[arg-type]
        b = PrivateConformal(noise=SeededNoise(4), **kw).fit(z, y)  # type: ignore[arg-type]
        m = 200 if method == "angelopoulos2022" else 199  # equal-width / logit grid
        assert a.threshold_ == b.threshold_ and a.n_bins_ == m and a.gamma_ == 0.01
    a = PrivateConformal(n_bins=200, slope=2.0, noise=SeededNoise(4)).fit(z, y)
    e = logit_edges(200)  # 199 bins: two edges near 1 round to the same double
    assert a.n_bins_ == e.size - 1 == 199 and a.slope_ == 2.0 and a.threshold_ in e


def test_private_conformal_full_set_when_level_too_high() -> None:
    z, y = _data(50)
    with pytest.warns(FullSetWarning, match=r"k = \d+ > n.*at least n = (\d+)") as rec:
        pc = PrivateConformal(alpha=0.1, epsilon=1.0).fit(z, y)
    assert pc.threshold_ == np.inf and pc.predict_set(z).all()
    rep = pc.privacy_report_
    # nothing released, but the relation and the public n are still stated
    assert len(rep) == 0 and rep.epsilon == 0.0 and rep.status == "private"
    assert rep.relation == "substitute" and rep.unit == "example"
    assert rep.public[0] == "n = 50 (number of calibration examples)"
    need = int(str(rec[0].message).split("at least n = ")[1].split()[0])
    assert need == min_calibration_size(0.1, 1.0)
    zz, yy = _data(need)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FullSetWarning)
        PrivateConformal(alpha=0.1, epsilon=1.0, noise=SeededNoise(0)).fit(zz, yy)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"alpha": 0.0}, "'alpha' parameter of PrivateConformal"),
        ({"alpha": 1.2}, "'alpha' parameter of PrivateConformal"),
        ({"epsilon": 0.0}, "'epsilon' parameter of PrivateConformal"),
        ({"epsilon": -2}, "'epsilon' parameter of PrivateConformal"),
        ({"n_bins": 1}, "'n_bins' parameter of PrivateConformal"),
        ({"n_bins": "many"}, "'n_bins' parameter of PrivateConformal"),
        ({"gamma": 1.0, "method": "angelopoulos2022"}, "'gamma' parameter of PrivateConformal"),
        ({"gamma": 0.01}, "'gamma' parameter of PrivateConformal applies to"),
        ({"slope": 0.0}, "'slope' parameter of PrivateConformal"),
        ({"slope": 2.0, "method": "bounded-range"}, "'slope' parameter of PrivateConformal"),
        ({"method": "ppc"}, "'method' parameter of PrivateConformal"),
        ({"score": "raps"}, "'score' parameter of PrivateConformal"),
        ({"noise": 3}, "'noise' parameter of PrivateConformal"),
    ],
)
def test_private_conformal_bad_parameters(kwargs: dict, match: str) -> None:
    z, y = _data(500)
    with pytest.raises(ValueError, match=match):
        PrivateConformal(**{"noise": SeededNoise(0), **kwargs}).fit(z, y)


def test_private_conformal_empty_calibration_set() -> None:
    with pytest.raises(ValueError, match="empty"):
        PrivateConformal(noise=SeededNoise(0)).fit(np.zeros((0, 3)), [])


def test_coverage_upper_bound_formula() -> None:
    n, a, eps, m, g, pmax = 5000, 0.1, 1.0, 500, 0.01, 0.002
    q = adjusted_level(n, a, eps, m, g)
    expected = (
        1
        - (1 - g) * a
        + (1 - g * a)
        * (2 * pmax + 2 * (1 + max(q / (1 - q), 1)) * math.log(m / (g * a)) / ((n + 1) * eps))
    )
    assert coverage_upper_bound(n, a, eps, m, g, pmax) == pytest.approx(expected)


# ---------------------------------------------------------------------------------------------
# the vectorised simulator agrees with the estimators


def test_simulator_matches_split_conformal() -> None:
    z, y = _data(1500, c=6, seed=2)
    S = lac_scores(softmax(z))
    sim = SplitSimulator(S, y, n=600, splits=20, seed=1)
    res = sim.split(0.1)
    for r in range(20):
        cal, te = sim.permutations[r, :600], sim.permutations[r, 600:]
        cp = SplitConformal(alpha=0.1).fit(z[cal], y[cal])
        sets = cp.predict_set(z[te])
        assert res.threshold[r] == cp.threshold_
        assert res.coverage[r] == pytest.approx(sets[np.arange(te.size), y[te]].mean(), abs=1e-12)
        assert res.size[r] == pytest.approx(sets.sum(1).mean(), abs=1e-12)


def test_simulator_private_counts_are_consistent() -> None:
    z, y = _data(1500, c=6, seed=2)
    S = lac_scores(softmax(z))
    sim = SplitSimulator(S, y, n=600, splits=30, seed=1)
    for bins in (50, 10**5):
        res = sim.private(0.1, 2.0, n_bins=bins, noise=SeededNoise(0))
        assert np.all(np.isin(res.threshold, logit_edges(bins)[1:]))
        for r in range(30):
            te = sim.permutations[r, 600:]
            t = res.threshold[r]
            assert res.coverage[r] == pytest.approx((S[te, y[te]] <= t).mean(), abs=1e-12)
            assert res.size[r] == pytest.approx((S[te] <= t).sum(1).mean(), abs=1e-12)


def test_simulator_private_law_matches_private_quantile() -> None:
    """The simulator's thresholds follow private_quantile's exact law, split by split: summed
    over splits, the count of each edge has mean sum_r p_r(edge) and variance
    sum_r p_r (1 - p_r) (independent draws); a chi-square on the standardised counts."""
    rng = np.random.default_rng(0)
    N, n, R, m, eps = 120, 80, 4000, 10, 1.0
    S = np.round(rng.random((N, 2)), 3)
    y = rng.integers(0, 2, N)
    sim = SplitSimulator(S, y, n=n, splits=R, seed=0, sizes=False)
    res = sim.private(
        0.3, eps, n_bins=m, gamma=0.5, noise=SeededNoise(5), method="angelopoulos2022"
    )
    assert res.level < 1
    e = bin_edges(m)
    s = S[np.arange(N), y]
    counts = np.stack([quantile_counts(s[sim.permutations[r, :n]], e) for r in range(R)])
    w = quantile_utilities(counts, res.level)
    p = sp_softmax(-eps * w / (2 * quantile_sensitivity(res.level)), axis=1)  # R x m
    obs = np.array([(res.threshold == edge).sum() for edge in e[1:]])
    mean = p.sum(0)
    var = (p * (1 - p)).sum(0)
    keep = mean > 10
    assert obs[~keep].sum() <= 5 + 3 * mean[~keep].sum()
    stat = (((obs - mean) ** 2)[keep] / var[keep]).sum()
    from scipy.stats import chi2

    assert chi2.sf(stat, keep.sum()) > 1e-4, (obs, mean.round(1))


# ---------------------------------------------------------------------------------------------
# method="rank" (the default) and the logit grid


def test_logit_edges_are_public_symmetric_and_fine_near_both_ends() -> None:
    e = logit_edges(4096)
    assert e[0] == 0.0 and e[-1] == 1.0 and np.all(np.diff(e) > 0)
    assert e.size == 3916  # duplicates near 1 dropped
    inner = np.log(e[1:-1] / (1 - e[1:-1]))
    np.testing.assert_allclose(np.diff(inner[:3000]), 74 / 4096, rtol=1e-6)  # even in logit
    assert e[1] < 1e-16 and 0 < 1 - e[-2] < 1e-15  # fine near 0 and near 1
    np.testing.assert_array_equal(bin_edges(4096, grid="logit"), e)


def test_rank_utilities_hand_computed_and_zero_at_the_kth_bin() -> None:
    counts = np.array([2, 0, 3, 1, 0])  # c = 2, 2, 5, 6, 6
    p = rank_utilities(counts, k=4, slope=2.0)
    # e1: max(0-3, 2(4-2), 0) = 4; e2: max(2-3, 4, 0) = 4; e3 (holds the 4th): 0;
    # e4: max(5-3, 2(4-6), 0) = 2; e5: max(6-3, .., 0) = 3
    np.testing.assert_allclose(p, [4, 4, 0, 2, 3])


def _rank_law(s: np.ndarray, k: int, r: float, eps: float, e: np.ndarray) -> np.ndarray:
    """Reference: the per-edge loop of the rank mechanism."""
    c = np.array([(s <= edge).sum() for edge in e])  # c_0 .. c_m
    p = np.array([max(c[j - 1] - k + 1, r * (k - c[j]), 0) for j in range(1, e.size)])
    return sp_softmax(-eps * p / (1 + r))


def test_rank_release_law_chi_square() -> None:
    """PrivateConformal(method='rank') draws from exp(-eps p_j / (1 + r)) (chi-square)."""
    rng = np.random.default_rng(3)
    z = rng.normal(size=(40, 3))
    y = rng.integers(0, 3, 40)
    e = logit_edges(6)
    est = PrivateConformal(alpha=0.3, n_bins=6, slope=1.5, noise=SeededNoise(2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InsecureNoiseWarning)
        draws = np.array([est.fit(z, y).threshold_ for _ in range(800)])
    s = lac_scores(softmax(z))[np.arange(40), y]
    assert est.rank_ == rank_target(40, 0.3, 1.0, 6, 1.5) <= 40
    p = _rank_law(s, est.rank_, 1.5, 1.0, e)
    obs = np.array([(draws == edge).sum() for edge in e[1:]])
    assert obs.sum() == 800
    keep = p * 800 > 5
    assert chisquare(obs[keep], p[keep] / p[keep].sum() * obs[keep].sum()).pvalue > 1e-4


def _guard_reference(n: int, k: int, m: int, lam: float) -> float:
    """Theorem R's guard ``G``, every term ``t = 1..k`` and ``d = t..k`` written out (no tails)."""
    from scipy.stats import binom

    ell = np.arange(k + 1)
    b = binom.pmf(ell, n + 1, ell / (n + 1))  # max_g P(Bin(n+1, g) = l), at the mode
    t = np.arange(1, k + 1)
    decay = np.exp(-lam * t)
    below = np.array([np.sum(decay[i:] * b[k - t[i:]]) for i in range(k)])  # sum over d >= t
    beta = (m - 1) * below
    a = np.minimum((m - 1) * decay, beta)
    return float(np.sum(a / (1 + a)))


@pytest.mark.parametrize(("n", "alpha", "eps", "m"), [(5000, 0.1, 1.0, 3915), (60, 0.2, 2.0, 40)])
def test_rank_target_is_the_smallest_k_its_guard_allows(
    n: int, alpha: float, eps: float, m: int
) -> None:
    """k - G(k) >= (n+1)(1-alpha) > (k-1) - G(k-1), G from an independent term-by-term sum."""
    from privcal.conformal.private.rank import _rank_guard

    r = rank_slope(m, eps)
    lam = eps * r / (1 + r)
    k = rank_target(n, alpha, eps, m)
    assert k <= n
    x = (m - 1) * np.exp(-lam * np.arange(1, 10_000))
    s_sum = (x / (1 + x)).sum()
    need = (n + 1) * (1 - alpha)
    for kk in (k - 1, k):
        ref = _guard_reference(n, kk, m, lam)
        got = _rank_guard(n, kk, m, lam)
        assert ref <= got <= ref + 1e-6 and got < s_sum  # an upper bound, and below S
    assert k - _guard_reference(n, k, m, lam) >= need > k - 1 - _guard_reference(n, k - 1, m, lam)
    assert k <= math.ceil(need + s_sum)  # never above the target of the cruder guard S


def test_rank_target_tail_sum_and_report() -> None:
    n, a, eps, m = 5000, 0.1, 1.0, 3915
    r = 3.0
    lam = eps * r / (1 + r)
    x = (m - 1) * np.exp(-lam * np.arange(1, 10_000))
    s_sum = (x / (1 + x)).sum()
    assert rank_slope(m, eps) == r
    # the binomial guard G = 6.1 ranks against S = 10.5: five ranks lower than with S
    assert rank_target(n, a, eps, m, r) == math.ceil((n + 1) * (1 - a) + s_sum) - 5 == 4507
    z, y = _data(3000)
    pc = PrivateConformal(noise=SeededNoise(0)).fit(z, y)
    assert pc.n_bins_ == 3915 and pc.gamma_ != pc.gamma_  # nan: no gamma for "rank"
    assert pc.rank_ == rank_target(3000, 0.1, 1.0, 3915) and pc.level_ == pc.rank_ / 3000
    rel = pc.privacy_report_.releases[0]
    assert rel.mechanism == "exponential (bounded range)" and rel.sensitivity == 1 + pc.slope_
    assert pc.threshold_ in logit_edges(4096)
    assert any(p.startswith("target rank k = ") for p in pc.privacy_report_.public)


def test_simulator_rank_law_matches_the_estimator() -> None:
    """Split by split, the simulator's rank release has the estimator's exact law."""
    rng = np.random.default_rng(0)
    N, n, R, m, eps = 120, 80, 2000, 10, 1.0
    S = np.round(rng.random((N, 2)), 3)
    y = rng.integers(0, 2, N)
    sim = SplitSimulator(S, y, n=n, splits=R, seed=0, sizes=False)
    res = sim.private(0.3, eps, n_bins=m, noise=SeededNoise(5))
    e = logit_edges(m)
    s = S[np.arange(N), y]
    k = rank_target(n, 0.3, eps, m)
    r_auto = rank_slope(m, eps)
    p = np.stack([_rank_law(s[sim.permutations[r, :n]], k, r_auto, eps, e) for r in range(R)])
    obs = np.array([(res.threshold == edge).sum() for edge in e[1:]])
    mean, var = p.sum(0), (p * (1 - p)).sum(0)
    keep = mean > 10
    from scipy.stats import chi2

    stat = (((obs - mean) ** 2)[keep] / var[keep]).sum()
    assert chi2.sf(stat, keep.sum()) > 1e-4, (obs, mean.round(1))


def test_coverage_upper_bound_rank_and_bounded_range() -> None:
    n, a, eps, m, pmax = 5000, 0.1, 1.0, 3915, 0.001
    k = rank_target(n, a, eps, m)
    lam = eps / (1 + 3.0)
    y = (m - 1) * np.exp(-lam * np.arange(1, 10_000))
    up = (y / (1 + y)).sum()
    got = coverage_upper_bound(n, a, eps, m, math.nan, pmax, method="rank")
    assert got == pytest.approx((k + up) / (n + 1) + pmax)
    br = coverage_upper_bound(n, a, eps, m, 0.01, pmax, method="bounded-range")
    assert 1 - a < br < 1

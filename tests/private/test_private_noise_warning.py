"""The private temperature searches fall back to ``T = 1`` when their release cannot tell T from 1.

The rule is post-processing of the release (no budget): NLL-T's curve compares the released
clipped NLL at ``T = 1`` and at the fitted ``T``, Acc-T the released accuracy gap at (or next to)
``T = 1`` in the direction of ``T``, and golden section (ECE-T's search) its evaluation next to
``T = 1`` with the one next to the fitted ``T``, each against ``NOISE_Z`` standard deviations of
its own noise (:func:`privcal.private.release_check`). ``fallback="none"`` keeps seed 000's fit.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

from privcal.calibrators.search import geometric_grid
from privcal.metrics import ece
from privcal.metrics.statistics import softmax
from privcal.privacy import SeededNoise
from privcal.private import (
    DataSource,
    NoiseDominatedWarning,
    PrivateHistogramBinning,
    PrivateTemperatureScaling,
    TooFewRowsError,
    release_check,
)
from privcal.private.fallback import (
    NOISE_Z,
    drop_coefficients,
    gap_evidence,
    golden_evidence,
    identity_index,
)
from privcal.private.plan import CURVE_HIGH, CURVE_LOW, CURVE_RATIO
from privcal.private.temperature import _coordinate_variance

# seeded noise throughout (reproducible fits); private/test_private_source.py asserts its warning
pytestmark = pytest.mark.filterwarnings("ignore::privcal.privacy.InsecureNoiseWarning")


def _calibrated(n: int, seed: int, scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Labels drawn from softmax(z), calibrated at T = 1; ``scale > 1`` makes z over-confident."""
    rng = np.random.default_rng(seed)
    z = 2.0 * rng.normal(size=(n, 5))
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    y = (rng.random(n)[:, None] > np.cumsum(p, 1)).sum(1)
    return scale * z, y


def _fit(objective: str, z: np.ndarray, y: np.ndarray, eps: float) -> PrivateTemperatureScaling:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return PrivateTemperatureScaling(objective, epsilon=eps, noise=SeededNoise(0)).fit(z, y)


def _fit_recorded(z: np.ndarray, y: np.ndarray, noise: Any) -> tuple[Any, list[Any]]:
    """A default ``PrivateHistogramBinning`` fitted with ``noise``, and the warnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fitted = PrivateHistogramBinning(epsilon=1.0, noise=noise).fit(z, y)
    return fitted, caught


@pytest.mark.parametrize("objective", ["nll", "acc", "ece"])
def test_noise_dominated_fit_falls_back_to_one(objective: str) -> None:
    z, y = _calibrated(300, 1)
    with pytest.warns(NoiseDominatedWarning, match="falls back to T = 1"):
        cal = PrivateTemperatureScaling(objective, epsilon=0.5, noise=SeededNoise(0)).fit(z, y)
    assert cal.temperature_ == 1.0
    assert cal.release_temperature_ != 1.0
    assert cal.release_check_["fell_back"] and cal.release_check_["noise_dominated"]
    assert any("falls back" in w for w in cal.fit_warnings_)
    assert cal.to_dict()["fitted"]["fit_warnings_"] == cal.fit_warnings_
    np.testing.assert_allclose(cal.predict_proba(z), softmax(z))  # the uncalibrated model


@pytest.mark.parametrize("objective", ["nll", "acc", "ece"])
def test_fallback_none_keeps_the_fit_and_warns(objective: str) -> None:
    """Seed 000's behaviour: the same release and the same check, the fitted T kept."""
    z, y = _calibrated(300, 1)
    with pytest.warns(NoiseDominatedWarning, match="is kept"):
        kept = PrivateTemperatureScaling(
            objective, epsilon=0.5, noise=SeededNoise(0), fallback="none"
        ).fit(z, y)
    ref = _fit(objective, z, y, 0.5)  # the default, on the same noise
    assert kept.temperature_ == ref.release_temperature_ != 1.0
    assert kept.release_check_["noise_dominated"] and not kept.release_check_["fell_back"]


@pytest.mark.parametrize(
    ("objective", "search", "scale"),
    [
        ("nll", "auto", 3.0),
        ("acc", "auto", 3.0),
        ("ece", "auto", 3.0),
        ("acc", "bisect", 3.0),
        ("acc", "golden", 8.0),
    ],
)
def test_clear_signal_keeps_its_temperature(objective: str, search: str, scale: float) -> None:
    """Over-confident models: every search keeps its fit (the golden search at 8x over-confidence
    locates [3, 30] and reads its evidence from the locating gap at T = 3)."""
    z, y = _calibrated(5000, 2, scale=scale)
    cal = PrivateTemperatureScaling(objective, epsilon=1.0, search=search, noise=SeededNoise(0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=__import__("privcal").privacy.InsecureNoiseWarning)
        cal.fit(z, y)
    assert cal.fit_warnings_ == []
    assert cal.temperature_ == cal.release_temperature_ > 2.0
    assert cal.release_check_["z"] >= NOISE_Z
    if search == "golden":
        assert cal.t_range_ == (3.0, 30.0)
        assert "T = 3" in cal.release_check_["compared"]


@pytest.mark.parametrize(("objective", "rows"), [("nll", 200), ("ece", 300)])
def test_falls_back_on_noise_and_not_on_signal_over_seeds(objective: str, rows: int) -> None:
    """With no signal at all (a calibrated model, huge noise) almost every fit falls back; with
    the signal of a twice over-confident model on 4000 rows none of 20 seeded fits does (NLL-T's
    curve search; ECE-T's golden section)."""
    z0, y0 = _calibrated(rows, 3)
    z1, y1 = _calibrated(4000, 4, scale=2.0)
    quiet = loud = 0
    for s in range(20):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            a = PrivateTemperatureScaling(objective, epsilon=0.5, noise=SeededNoise(s)).fit(z0, y0)
            b = PrivateTemperatureScaling(objective, epsilon=1.0, noise=SeededNoise(s)).fit(z1, y1)
        quiet += a.release_check_["fell_back"]
        loud += b.release_check_["fell_back"]
    assert quiet >= 15
    assert loud == 0


def test_tiny_data_at_small_epsilon_is_refused_before_any_release() -> None:
    """The issue's case: 20 rows, 100 classes, epsilon 0.1 (Acc-T). The released gap's noise SD
    at T = 1 is about 49 while |gap| <= 20, so no data of this size can show a temperature beats
    T = 1 by 2 SDs: the default fit refuses (98 rows needed) before drawing any noise. With
    fallback="none" (seed 000) the same fits run; the rule alone would still keep those whose
    noise passes 2 SDs: P(|Laplace| > 2 SD) = exp(-2 sqrt 2) = 5.9 % of fits (the sum of three
    draws has a lighter tail), so at most 6 of 40 (mean 2.4, SD 1.5; seeded, so fixed), and
    most of the rule-free fits calibrate held-out data worse than doing nothing."""
    rng = np.random.default_rng(5)
    z = 3.0 * rng.normal(size=(5020, 100))
    y = np.argmax(z / 3.0 + rng.normal(size=z.shape), axis=1)
    zt, yt = z[20:], y[20:]
    base = ece(zt, yt, input="logits")

    class Counting(SeededNoise):
        draws = 0

        def laplace(self, *args: Any, **kwargs: Any) -> Any:
            Counting.draws += 1
            return super().laplace(*args, **kwargs)

    est = PrivateTemperatureScaling("acc", epsilon=0.1, noise=Counting(0))
    assert est.informative_rows(100) == pytest.approx(2.0 * np.sqrt(3 * 2 * 20.0**2))
    with pytest.raises(TooFewRowsError, match="at least 98 rows") as err:
        est.fit(z[:20], y[:20])
    assert (err.value.rows, err.value.needed) == (20, 98)
    assert err.value.epsilon_needed == pytest.approx(0.1 * 97.98 / 20, rel=1e-3)
    assert Counting.draws == 0 and not hasattr(est, "temperature_")
    est.set_params(epsilon=0.5)  # 20 rows inform a fit from epsilon 0.49 on
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(z[:20], y[:20])
    assert Counting.draws > 0
    kept, without = 0, []
    for s in range(40):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cal = PrivateTemperatureScaling(
                "acc", epsilon=0.1, noise=SeededNoise(s), fallback="none"
            ).fit(z[:20], y[:20])
        kept += not cal.release_check_["noise_dominated"]
        without.append(ece(softmax(zt, cal.release_temperature_), yt) - base)
    assert kept <= 6
    assert sum(d > 0 for d in without) >= 20


def test_release_check_rule() -> None:
    kept = release_check(1.5, (NOISE_Z + 0.01, "x"))
    assert not kept["fell_back"] and kept["temperature"] == 1.5 and kept["warning"] == ""
    low = release_check(1.5, (NOISE_Z - 0.01, "x"))
    assert low["fell_back"] and low["temperature"] == 1.0 and "falls back" in low["warning"]
    none = release_check(0.5, None)  # nothing compares with T = 1: falls back too
    assert none["fell_back"] and none["z"] is None and "no value" in none["warning"]
    paper = release_check(0.5, None, fallback="none")
    assert (
        paper["temperature"] == 0.5 and paper["noise_dominated"] and "is kept" in paper["warning"]
    )
    at_one = release_check(1.0, None)  # nothing to fall back from
    assert not at_one["fell_back"] and not at_one["noise_dominated"] and at_one["warning"] == ""
    with pytest.raises(ValueError, match="'fallback'"):
        release_check(1.5, None, fallback="maybe")
    with pytest.raises(ValueError, match="'fallback'"):
        PrivateTemperatureScaling(fallback="maybe").fit(*_calibrated(50, 0))


def test_gap_evidence_reads_the_gap_between_one_and_t_in_the_fit_direction() -> None:
    seen = [(0.8, 30.0, 4.0), (1.0, -10.0, 4.0), (1.5, -4.0, 4.0), (5.0, 9.0, 4.0)]
    z, what = gap_evidence(seen, 2.0)  # type: ignore[misc]
    assert z == pytest.approx(5.0) and "T = 1 is -10" in what  # the value at 1: -(-10) / 2
    assert gap_evidence(seen[2:], 2.0)[0] == pytest.approx(2.0)  # type: ignore[index]
    assert gap_evidence(seen, 0.8)[0] == pytest.approx(-5.0)  # type: ignore[index]
    off = [(0.8, 30.0, 4.0), (1.5, -4.0, 4.0)]  # no value at T = 1
    assert gap_evidence(off, 0.9) is None  # nothing in [0.9, 1]
    assert gap_evidence(off, 0.8)[0] == pytest.approx(15.0)  # type: ignore[index]
    assert gap_evidence([(3.0, 10.0, 4.0)], 2.0) is None  # 3 is beyond t = 2


def test_drop_coefficients_reproduce_the_spline_of_a_cubic() -> None:
    """The not-a-knot spline reproduces cubics in log T exactly, so the linear map must too."""
    grid = geometric_grid(CURVE_LOW, CURVE_HIGH, CURVE_RATIO)
    i = identity_index(grid)
    assert i is not None and abs(grid[i] - 1.0) < 1e-12
    x = np.log(grid)

    def f(u: np.ndarray | float) -> np.ndarray | float:
        return u**3 - 2.0 * u**2 + 0.5 * u

    for t in (0.3, 0.9, 1.05, 1.7, 20.0):
        coef = drop_coefficients(grid, i, t)
        assert coef @ np.diff(f(x)) == pytest.approx(f(0.0) - f(np.log(t)), abs=1e-9)


def test_coordinate_variance_sums_the_sources_laplace_variances() -> None:
    rng = np.random.default_rng(0)
    z, y = rng.normal(size=(50, 3)), rng.integers(0, 3, 50)
    grid = geometric_grid(CURVE_LOW, CURVE_HIGH, CURVE_RATIO)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sources = [DataSource(z, y, budget=1.0, noise=SeededNoise(i)) for i in range(3)]
        for s in sources:
            s.clipped_nll_increments(grid, epsilon=0.5, bound=10.0)
    sens = 10.0 + np.log(3.0)
    expected = 3 * 2.0 * (sens / 0.5) ** 2
    assert _coordinate_variance([s.history[-1] for s in sources]) == pytest.approx(expected)


def test_golden_evidence_reads_the_evaluations_next_to_one_and_to_t() -> None:
    sd = np.sqrt(2.0)  # two evaluations of variance 1
    near_one, far = (0.991, 100.0, 1.0), (2.5, 0.0, 1.0)
    z, what = golden_evidence([near_one, (1.5, 100.0 - 3 * sd, 1.0)], 1.5)  # type: ignore[misc]
    assert z == pytest.approx(3.0) and "T = 0.991" in what
    assert golden_evidence([(3.4, 100.0, 1.0), far], 2.5) is None  # nothing within 5% of 1
    assert golden_evidence([near_one, far], 1.0) is None  # the fitted T is next to 1 itself
    z, _ = golden_evidence([near_one, (1.5, 100.0 - 1.5 * sd, 1.0), far], 1.5)  # type: ignore[misc]
    assert z == pytest.approx(1.5)


def test_value_variance_bound_of_the_ece_objective() -> None:
    """``sum_m |g_m + L_m|`` with independent Laplace(b) ``L_m`` has variance at most ``M 2 b^2``
    (Efron-Stein), the bound the golden check uses; tight for large ``|g_m|``, below it near 0.
    Monte Carlo with 20000 draws: the sample variance's relative SE is about 1.5%."""
    rng = np.random.default_rng(0)
    b, m = 3.0, 15
    for g in (np.zeros(m), np.full(m, 50.0), rng.normal(0.0, 4.0, m)):
        f = np.abs(g + rng.laplace(0.0, b, size=(20000, m))).sum(1)
        assert f.var() <= m * 2.0 * b**2 * 1.05
    f = np.abs(50.0 + rng.laplace(0.0, b, size=(20000, m))).sum(1)
    assert f.var() >= m * 2.0 * b**2 * 0.9  # the bound is attained away from 0


def test_histogram_binning_keeps_only_readable_bins_and_refuses_too_few_rows() -> None:
    """A bin keeps its released accuracy only when the noise SD of ``c / t`` is at most half
    its width; below ``2 / (epsilon w)`` rows no bin can, and the fit refuses before any
    release. Both directions of the rule, on released counts chosen by hand."""

    from privcal.private.binning import readable_bins

    var = 2.0  # Laplace(1): one count at epsilon 1
    # t = 200 at v = 0.5: SD sqrt(0.5 * 2) / 200 = 0.005 <= 1/30, kept
    # t = 20: SD 0.05 > 1/30: falls back; t = 0 (clipped): NaN already
    values = np.array([0.5, 0.5, np.nan])
    out = readable_bins(values, [100.0, 10.0, -3.0], [100.0, 10.0, -1.0], var, 1.0 / 15)
    assert out[0] == 0.5 and np.isnan(out[1]) and np.isnan(out[2])
    # the boundary: t with sqrt(0.5 var) / t == w / 2 is kept, a hair less is not
    t = np.sqrt(0.5 * var) / (0.5 / 15)
    assert readable_bins([0.5], [t / 2], [t / 2], var, 1.0 / 15)[0] == 0.5
    assert np.isnan(readable_bins([0.5], [t / 2 - 1e-6], [t / 2 - 1e-6], var, 1.0 / 15)[0])

    est = PrivateHistogramBinning(epsilon=1.0, noise=SeededNoise(0))
    assert est.informative_rows(10) == pytest.approx(30.0)
    rng = np.random.default_rng(0)
    z = 3.0 * rng.normal(size=(2000, 10))
    y = np.argmax(z / 3.0 + rng.normal(size=z.shape), axis=1)
    with pytest.raises(TooFewRowsError, match="below 30 rows"):
        est.fit(z[:29], y[:29])
    with pytest.warns(NoiseDominatedWarning, match="bins released an accuracy") as caught:
        est.fit(z, y)
    assert 0 < est.bins_fell_back_ < 15 and np.isfinite(est.bin_values_).sum() >= 8
    # the warning accounts for every bin: fell back, released empty, or calibrated (400 rows,
    # seed 1: 5, 1 and 9)
    for fitted, found in ((est, caught), _fit_recorded(z[:400], y[:400], SeededNoise(1))):
        text = next(str(w.message) for w in found if w.category is NoiseDominatedWarning)
        left = int(np.isfinite(fitted.bin_values_).sum())
        empty = int(np.isnan(fitted.release_bin_values_).sum())
        assert fitted.bins_fell_back_ + empty + left == 15 and f"{left} bins are calibrated" in text
        assert (f"as do the {empty} bins released empty" in text) == (empty > 0)
    assert empty == 1
    seed000 = PrivateHistogramBinning(epsilon=1.0, noise=SeededNoise(0), fallback="none")
    seed000.fit(z, y)  # the same release, every bin with a positive count kept
    kept = np.isfinite(est.bin_values_)
    assert np.array_equal(est.bin_values_[kept], seed000.bin_values_[kept])
    assert np.isfinite(seed000.bin_values_).sum() > kept.sum()

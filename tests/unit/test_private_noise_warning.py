"""The private temperature searches say when the release cannot tell T from 1.

The check is post-processing of the release (no budget): NLL-T's curve compares the released
clipped NLL at ``T = 1`` and at the fitted ``T``, Acc-T's curve the released accuracy gap at
``T = 1`` with 0, and golden section (ECE-T's search) its evaluation next to ``T = 1`` with the
one next to the fitted ``T``, each against ``NOISE_Z`` standard deviations of its own noise.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from privcal.calibrators.search import geometric_grid
from privcal.privacy import SeededNoise
from privcal.private import DataSource, NoiseDominatedWarning, PrivateTemperatureScaling
from privcal.private.temperature import (
    CURVE_HIGH,
    CURVE_LOW,
    CURVE_RATIO,
    _check_golden_identity,
    _coordinate_variance,
    _drop_coefficients,
    _identity_index,
)

# seeded noise throughout (reproducible fits); tests/unit/test_private_source.py asserts its warning
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


@pytest.mark.parametrize("objective", ["nll", "acc", "ece"])
def test_noise_dominated_fit_warns_and_records(objective: str) -> None:
    z, y = _calibrated(300, 1)
    with pytest.warns(NoiseDominatedWarning, match="T = 1"):
        cal = PrivateTemperatureScaling(objective, epsilon=0.5, noise=SeededNoise(0)).fit(z, y)
    assert any("T = 1" in w for w in cal.fit_warnings_)
    assert cal.to_dict()["fitted"]["fit_warnings_"] == cal.fit_warnings_


@pytest.mark.parametrize("objective", ["nll", "acc", "ece"])
def test_clear_signal_does_not_warn(objective: str) -> None:
    z, y = _calibrated(5000, 2, scale=3.0)  # three times over-confident
    cal = _fit(objective, z, y, 1.0)
    assert cal.fit_warnings_ == []
    assert cal.temperature_ > 2.0


@pytest.mark.parametrize(("objective", "rows"), [("nll", 200), ("ece", 300)])
def test_warns_on_noise_and_not_on_signal_over_seeds(objective: str, rows: int) -> None:
    """With no signal at all (a calibrated model, huge noise) almost every fit warns; with the
    signal of a twice over-confident model on 4000 rows none of 20 seeded fits does (NLL-T's
    curve search; ECE-T's golden section)."""
    z0, y0 = _calibrated(rows, 3)
    z1, y1 = _calibrated(4000, 4, scale=2.0)
    quiet = loud = 0
    for s in range(20):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            a = PrivateTemperatureScaling(objective, epsilon=0.5, noise=SeededNoise(s)).fit(z0, y0)
            b = PrivateTemperatureScaling(objective, epsilon=1.0, noise=SeededNoise(s)).fit(z1, y1)
        quiet += bool(a.fit_warnings_)
        loud += bool(b.fit_warnings_)
    assert quiet >= 15
    assert loud == 0


def test_drop_coefficients_reproduce_the_spline_of_a_cubic() -> None:
    """The not-a-knot spline reproduces cubics in log T exactly, so the linear map must too."""
    grid = geometric_grid(CURVE_LOW, CURVE_HIGH, CURVE_RATIO)
    i = _identity_index(grid)
    assert i is not None and abs(grid[i] - 1.0) < 1e-12
    x = np.log(grid)

    def f(u: np.ndarray | float) -> np.ndarray | float:
        return u**3 - 2.0 * u**2 + 0.5 * u

    for t in (0.3, 0.9, 1.05, 1.7, 20.0):
        coef = _drop_coefficients(grid, i, t)
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


def test_golden_identity_check_reads_the_evaluations_next_to_one_and_to_t() -> None:
    sd = np.sqrt(2.0)  # two evaluations of variance 1
    near_one, far = (0.991, 100.0, 1.0), (2.5, 0.0, 1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _check_golden_identity([near_one, (1.5, 100.0 - 3 * sd, 1.0)], 1.5)  # 3 SD: clear
        _check_golden_identity([(3.4, 100.0, 1.0), far], 2.5)  # nothing within 5% of T = 1
        _check_golden_identity([near_one, far], 1.0)  # the fitted T is next to T = 1 itself
    with pytest.warns(NoiseDominatedWarning, match="T = 0.991"):
        _check_golden_identity([near_one, (1.5, 100.0 - 1.5 * sd, 1.0), far], 1.5)


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

"""Mechanisms: validation, calibration of the noise, returned guarantees."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from privcal.privacy import Guarantee, SeededNoise, exponential, gaussian, laplace
from privcal.privacy.mechanisms import (
    analytic_gaussian_delta,
    analytic_gaussian_sigma,
    exponential_log_weights,
)

BAD_POSITIVE = [0.0, -1.0, math.inf, math.nan, "1", None]


@pytest.mark.parametrize("bad", BAD_POSITIVE)
def test_laplace_rejects_bad_epsilon_and_sensitivity(bad) -> None:
    with pytest.raises(
        ValueError,
        match=r"The 'epsilon' parameter of laplace must be a finite real number in \(0, inf\)\.",
    ):
        laplace(1.0, 1.0, bad, SeededNoise(0))
    with pytest.raises(ValueError, match=r"The 'sensitivity' parameter of laplace must be"):
        laplace(1.0, bad, 1.0, SeededNoise(0))


def test_error_message_template_exact() -> None:
    with pytest.raises(ValueError) as info:
        laplace(1.0, 1.0, 0, SeededNoise(0))
    assert str(info.value) == (
        "The 'epsilon' parameter of laplace must be a finite real number in (0, inf). "
        "Got 0 instead."
    )


@pytest.mark.parametrize("bad", BAD_POSITIVE)
def test_gaussian_rejects_bad_epsilon_and_sensitivity(bad) -> None:
    with pytest.raises(ValueError, match="'epsilon' parameter of gaussian"):
        gaussian(1.0, 1.0, bad, 1e-5, SeededNoise(0))
    with pytest.raises(ValueError, match="'sensitivity' parameter of gaussian"):
        gaussian(1.0, bad, 1.0, 1e-5, SeededNoise(0))


@pytest.mark.parametrize("bad", [0.0, 1.0, 1.5, -1e-6, math.nan])
def test_gaussian_rejects_delta_outside_open_unit_interval(bad) -> None:
    with pytest.raises(
        ValueError,
        match=r"The 'delta' parameter of gaussian must be a finite real number in \(0, 1\)",
    ):
        gaussian(1.0, 1.0, 1.0, bad, SeededNoise(0))


@pytest.mark.parametrize("bad", BAD_POSITIVE)
def test_exponential_rejects_bad_epsilon_and_sensitivity(bad) -> None:
    with pytest.raises(ValueError, match="'epsilon' parameter of exponential"):
        exponential([0.0, 1.0], 1.0, bad, SeededNoise(0))
    with pytest.raises(ValueError, match="'sensitivity' parameter of exponential"):
        exponential([0.0, 1.0], bad, 1.0, SeededNoise(0))


@pytest.mark.parametrize("bad", [[], [[1.0, 2.0]], [1.0, math.nan], [1.0, math.inf]])
def test_exponential_rejects_bad_utilities(bad) -> None:
    with pytest.raises(ValueError, match="'utilities' parameter of exponential"):
        exponential(bad, 1.0, 1.0, SeededNoise(0))


def test_bad_value_noise_and_unit() -> None:
    with pytest.raises(ValueError, match="'value' parameter of laplace"):
        laplace([1.0, math.inf], 1.0, 1.0, SeededNoise(0))
    with pytest.raises(ValueError, match="'noise' parameter of gaussian"):
        gaussian(1.0, 1.0, 1.0, 1e-5, np.random.default_rng(0))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'unit' parameter of laplace"):
        laplace(1.0, 1.0, 1.0, SeededNoise(0), unit="row")
    with pytest.raises(ValueError, match="'monotonic' parameter of exponential"):
        exponential([0.0, 1.0], 1.0, 1.0, SeededNoise(0), monotonic="yes")  # type: ignore[arg-type]


def test_laplace_scale_and_guarantee() -> None:
    value = np.array([1.0, 2.0, 3.0])
    out, g = laplace(value, 2.0, 0.5, SeededNoise(7))
    expected = value + SeededNoise(7).laplace(4.0, size=3)  # scale = sensitivity / epsilon
    np.testing.assert_allclose(out, expected)
    assert g == Guarantee(0.5)
    scalar, g2 = laplace(3.0, 1.0, 1.0, SeededNoise(0), unit="user")
    assert isinstance(scalar, float) and g2.unit == "user"


def test_gaussian_uses_analytic_sigma() -> None:
    out, g = gaussian(np.zeros(4), 2.0, 1.0, 1e-5, SeededNoise(7))
    sigma = analytic_gaussian_sigma(1.0, 1e-5, 2.0)
    np.testing.assert_allclose(out, SeededNoise(7).gaussian(sigma, size=4))
    assert g == Guarantee(1.0, 1e-5)


def _delta_reference(sigma: float, eps: float, sens: float) -> float:
    # Balle & Wang (2018) Thm. 8 with scipy's norm.cdf: independent of the log_ndtr version
    return norm.cdf(sens / (2 * sigma) - eps * sigma / sens) - math.exp(eps) * norm.cdf(
        -sens / (2 * sigma) - eps * sigma / sens
    )


@pytest.mark.parametrize("eps", [0.1, 0.5, 1.0, 4.0])
@pytest.mark.parametrize("delta", [1e-3, 1e-5, 1e-8])
@pytest.mark.parametrize("sens", [0.5, 1.0, 3.0])
def test_analytic_sigma_is_tight_and_errs_noisier(eps: float, delta: float, sens: float) -> None:
    sigma = analytic_gaussian_sigma(eps, delta, sens)
    assert _delta_reference(sigma, eps, sens) <= delta
    assert _delta_reference(sigma * (1 - 1e-6), eps, sens) > delta * (1 - 1e-5)
    assert analytic_gaussian_delta(sigma, eps, sens) == pytest.approx(
        _delta_reference(sigma, eps, sens), rel=1e-6, abs=1e-15
    )
    if eps <= 1.0:  # never noisier than the classical calibration where it applies
        assert sigma <= sens * math.sqrt(2 * math.log(1.25 / delta)) / eps


def test_analytic_sigma_known_value_and_linearity() -> None:
    assert analytic_gaussian_sigma(1.0, 1e-5) == pytest.approx(3.7306, abs=1e-4)
    assert analytic_gaussian_sigma(1.0, 1e-5, 4.0) == pytest.approx(
        4.0 * analytic_gaussian_sigma(1.0, 1e-5), rel=1e-10
    )


def test_exponential_weights_and_result() -> None:
    np.testing.assert_allclose(exponential_log_weights([0.0, 1.0, 2.0], 2.0, 1.0), [0, 0.25, 0.5])
    np.testing.assert_allclose(
        exponential_log_weights([0.0, 1.0, 2.0], 2.0, 1.0, monotonic=True), [0, 0.5, 1.0]
    )
    idx, g = exponential([0.0, 0.0, 1000.0, 0.0], 1.0, 1.0, SeededNoise(0))
    assert idx == 2 and isinstance(idx, int) and g == Guarantee(1.0)


def test_secure_default_noise() -> None:
    out, _ = laplace(0.0, 1.0, 1.0)  # noise=None -> SecureNoise()
    assert isinstance(out, float)

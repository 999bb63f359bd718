"""The three mechanisms of privcal, each returned together with its privacy guarantee.

Every mechanism takes the sensitivity of the statistic (derived by the caller, next to the
statistic) and a budget, draws its noise from a :class:`~privcal.privacy.noise.NoiseSource`, and
returns ``(release, Guarantee)``; the guarantee is the mechanism's privacy map evaluated at the
given sensitivity.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.special import log_ndtr

from privcal._params import EPSILON, POSITIVE, check_option, check_probability
from privcal.privacy.accounting import bisect_boundary
from privcal.privacy.guarantee import UNITS, Guarantee
from privcal.privacy.noise import NoiseSource, _check_value, _shown, check_noise

__all__ = [
    "analytic_gaussian_delta",
    "analytic_gaussian_sigma",
    "exponential",
    "exponential_log_weights",
    "gaussian",
    "laplace",
]


def laplace(
    value: Any,
    sensitivity: float,
    epsilon: float,
    noise: NoiseSource | None = None,
    *,
    unit: str = "example",
) -> tuple[float | np.ndarray, Guarantee]:
    """Laplace mechanism: ``value + Laplace(0, sensitivity / epsilon)`` in each coordinate.

    Parameters
    ----------
    value : float or array_like of float
        The exact statistic ``f(D)`` (a scalar or a vector), finite.
    sensitivity : float
        L1 sensitivity ``max_{D ~ D'} ||f(D) - f(D')||_1 > 0``.
    epsilon : float
        Privacy loss, in ``(0, inf)``.
    noise : NoiseSource or None, default=None
        ``None`` means ``SecureNoise()``.
    unit : {"example", "user"}, default="example"
        The unit the sensitivity is computed for.

    Returns
    -------
    release : float or ndarray
        Same shape as ``value``.
    guarantee : Guarantee
        ``Guarantee(epsilon)``.

    Privacy
    -------
    Neighbouring relation: add/remove one ``unit`` (the caller's sensitivity must be for that
    relation). With ``b = sensitivity / epsilon`` the density ratio of the output at any ``y`` is
    ``exp((||y - f(D')||_1 - ||y - f(D)||_1) / b) <= exp(||f(D) - f(D')||_1 / b) <= e^epsilon``
    (Dwork, McSherry, Nissim & Smith 2006; Dwork & Roth 2014, Thm. 3.6). Output measure: pure
    ``epsilon``-DP.

    Examples
    --------
    >>> from privcal.privacy import SeededNoise
    >>> y, g = laplace(10.0, sensitivity=1.0, epsilon=1.0, noise=SeededNoise(0))
    >>> g.epsilon
    1.0
    """
    owner = "laplace"
    sens = POSITIVE.check(sensitivity, "sensitivity", owner)
    eps = EPSILON.check(epsilon, "epsilon", owner)
    check_option(unit, "unit", owner, UNITS)
    src = check_noise(noise, owner)
    v = _check_value(value, owner)
    scale = sens / eps
    return src.add_laplace(v, scale), Guarantee(eps, 0.0, unit)


def analytic_gaussian_delta(sigma: float, epsilon: float, sensitivity: float = 1.0) -> float:
    """Exact ``delta`` of the Gaussian mechanism with noise ``sigma`` at ``epsilon``.

    ``delta = Phi(D/(2 s) - eps s/D) - e^eps Phi(-D/(2 s) - eps s/D)`` with ``D`` the L2
    sensitivity and ``s = sigma`` (Balle & Wang 2018, Theorem 8), computed with ``log_ndtr``.
    """
    u = sigma / sensitivity
    a = 1.0 / (2.0 * u) - epsilon * u
    b = -1.0 / (2.0 * u) - epsilon * u
    return float(math.exp(log_ndtr(a)) - math.exp(epsilon + log_ndtr(b)))


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest noise ``sigma`` making the Gaussian mechanism ``(epsilon, delta)``-DP.

    Solves ``analytic_gaussian_delta(sigma, epsilon, sensitivity) = delta`` (decreasing in sigma)
    by bisection on ``sigma / sensitivity`` and returns the upper (noisier) end of the final
    bracket, for the slightly stricter target ``delta * (1 - 1e-9)`` so that rounding in the
    evaluation cannot make it too small.

    Parameters
    ----------
    epsilon : float
        In ``(0, inf)``.
    delta : float
        In ``(0, 1)``.
    sensitivity : float, default=1.0
        L2 sensitivity, ``> 0``.

    References
    ----------
    B. Balle and Y.-X. Wang, "Improving the Gaussian mechanism for differential privacy:
    analytical calibration and optimal denoising", ICML 2018 (Theorem 8, Algorithm 1).

    Examples
    --------
    >>> round(analytic_gaussian_sigma(1.0, 1e-5), 3)
    3.731
    """
    owner = "analytic_gaussian_sigma"
    eps = EPSILON.check(epsilon, "epsilon", owner)
    dlt = check_probability(delta, "delta", owner)
    sens = POSITIVE.check(sensitivity, "sensitivity", owner)
    target = dlt * (1.0 - 1e-9)

    def ok(u: float) -> bool:
        return analytic_gaussian_delta(u, eps, 1.0) <= target

    lo, hi = 1e-3, 1.0
    while not ok(hi):
        lo, hi = hi, hi * 2.0
    while ok(lo) and lo > 1e-12:
        lo /= 2.0
    return bisect_boundary(ok, lo, hi, 1e-13)[1] * sens


def gaussian(
    value: Any,
    sensitivity: float,
    epsilon: float,
    delta: float,
    noise: NoiseSource | None = None,
    *,
    unit: str = "example",
) -> tuple[float | np.ndarray, Guarantee]:
    """Analytic Gaussian mechanism: ``value + N(0, sigma^2)`` in each coordinate.

    Parameters
    ----------
    value : float or array_like of float
        The exact statistic ``f(D)``, finite.
    sensitivity : float
        L2 sensitivity ``max_{D ~ D'} ||f(D) - f(D')||_2 > 0``.
    epsilon : float
        In ``(0, inf)``.
    delta : float
        In ``(0, 1)``.
    noise : NoiseSource or None, default=None
        ``None`` means ``SecureNoise()``.
    unit : {"example", "user"}, default="example"

    Returns
    -------
    release : float or ndarray
    guarantee : Guarantee
        ``Guarantee(epsilon, delta)``.

    Privacy
    -------
    Neighbouring relation: add/remove one ``unit``. ``sigma`` is
    :func:`analytic_gaussian_sigma` ``(epsilon, delta, sensitivity)``: the smallest noise for
    which the privacy-loss tail of ``N(f(D), sigma^2 I)`` vs ``N(f(D'), sigma^2 I)`` gives
    ``(epsilon, delta)``-DP for every ``||f(D) - f(D')||_2 <= sensitivity`` (Balle & Wang 2018,
    Thm. 8; valid for every ``epsilon > 0``, unlike the classical ``sqrt(2 log(1.25/delta))``
    bound). Output measure: approximate ``(epsilon, delta)``-DP.
    """
    owner = "gaussian"
    sens = POSITIVE.check(sensitivity, "sensitivity", owner)
    eps = EPSILON.check(epsilon, "epsilon", owner)
    dlt = check_probability(delta, "delta", owner)
    check_option(unit, "unit", owner, UNITS)
    src = check_noise(noise, owner)
    v = _check_value(value, owner)
    sigma = analytic_gaussian_sigma(eps, dlt, sens)
    return src.add_gaussian(v, sigma), Guarantee(eps, dlt, unit)


def exponential_log_weights(
    utilities: Any, sensitivity: float, epsilon: float, monotonic: bool = False
) -> np.ndarray:
    """Log-weights of the exponential mechanism: ``eps u / (2 sens)``, or ``eps u / sens``.

    The second form is used when ``monotonic`` is true.

    Validates like :func:`exponential`; public so that audits draw from exactly these weights.
    """
    owner = "exponential"
    sens = POSITIVE.check(sensitivity, "sensitivity", owner)
    eps = EPSILON.check(epsilon, "epsilon", owner)
    try:
        u = np.asarray(utilities, dtype=float)
    except (TypeError, ValueError):
        u = None
    if u is None or u.ndim != 1 or u.size == 0 or not np.isfinite(u).all():
        raise ValueError(
            "The 'utilities' parameter of exponential must be a non-empty 1-D array of finite "
            f"floats. Got {_shown(utilities)!r} instead."
        )
    factor = eps / sens if monotonic else eps / (2.0 * sens)
    return factor * u


def exponential(
    utilities: Any,
    sensitivity: float,
    epsilon: float,
    noise: NoiseSource | None = None,
    monotonic: bool = False,
    *,
    unit: str = "example",
) -> tuple[int, Guarantee]:
    """Exponential mechanism: index ``j`` with probability ``propto exp(eps u_j / (2 sens))``.

    Parameters
    ----------
    utilities : array_like of float, shape (m,)
        Utility of each candidate on the private data (higher is better). The candidates are
        public.
    sensitivity : float
        ``max_{D ~ D'} max_j |u_j(D) - u_j(D')| > 0``.
    epsilon : float
        In ``(0, inf)``.
    noise : NoiseSource or None, default=None
        ``None`` means ``SecureNoise()``.
    monotonic : bool, default=False
        Set when, for every neighbouring pair, all utilities move in the same direction (e.g.
        counts under add/remove); the weights are then ``exp(eps u_j / sens)``.
    unit : {"example", "user"}, default="example"

    Returns
    -------
    index : int
    guarantee : Guarantee
        ``Guarantee(epsilon)``.

    Privacy
    -------
    Neighbouring relation: add/remove one ``unit``. ``P(j | D) / P(j | D')`` is a ratio of
    weights, at most ``exp(eps/2)``, times a ratio of normalisers, at most ``exp(eps/2)``, so
    ``epsilon``-DP (McSherry & Talwar 2007; Dwork & Roth 2014, Thm. 3.10). In the monotonic case
    the two factors cannot both be large, so ``eps u / sens`` is ``epsilon``-DP (Dwork & Roth
    2014, Remark after Thm. 3.10). Output measure: pure ``epsilon``-DP.
    """
    owner = "exponential"
    if not isinstance(monotonic, bool | np.bool_):
        raise ValueError(
            f"The 'monotonic' parameter of {owner} must be a bool. Got {monotonic!r} instead."
        )
    lw = exponential_log_weights(utilities, sensitivity, epsilon, bool(monotonic))
    check_option(unit, "unit", owner, UNITS)
    src = check_noise(noise, owner)
    eps = float(epsilon)
    return int(src.exponential_index(lw)), Guarantee(eps, 0.0, unit)

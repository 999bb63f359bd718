"""Accountants for composed Gaussian releases: RDP (DP-SGD), zCDP (federated rounds), GDP.

Thin wrappers: Rényi-DP accounting of subsampled Gaussian steps is delegated to Google's
``dp_accounting`` (:class:`dp_accounting.rdp.RdpAccountant`); privcal only adds the inverse
(noise for a target epsilon, returning the noisier end) and closed-form zCDP / Gaussian-DP
conversions, which are a few lines each.

zCDP conversion used (documented choice)
----------------------------------------
``rho``-zCDP implies ``(epsilon, delta)``-DP with (Canonne, Kamath & Steinke 2020, Prop. 12;
the same conversion ``dp_accounting`` applies to RDP curves, Asoodeh et al. 2021)::

    epsilon(rho, delta) = inf_{alpha > 1} alpha rho + log(1 - 1/alpha)
                                          - (log(delta) + log(alpha)) / (alpha - 1)

It holds for *every* ``alpha > 1``, so minimising numerically can only err toward a larger (safe)
epsilon. We also take the minimum with the classical ``rho + 2 sqrt(rho log(1/delta))`` (Bun &
Steinke 2016, Prop. 1.3), which is never tighter in practice but is always valid.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.special import log_ndtr

from privcal._params import check_int, check_probability, check_real

__all__ = [
    "ZCDPAccountant",
    "gaussian_zcdp_rho",
    "gdp_delta",
    "gdp_epsilon",
    "rdp_epsilon",
    "rdp_noise_multiplier",
    "zcdp_epsilon",
    "zcdp_gaussian_sigma",
    "zcdp_rho",
]


def _pos(value: Any, name: str, owner: str) -> float:
    return check_real(value, name, owner, low=0.0, low_open=True)


# ---------------------------------------------------------------------------------------- RDP
def rdp_epsilon(
    noise_multiplier: float,
    sample_rate: float,
    steps: int,
    delta: float,
) -> float:
    """Epsilon of ``steps`` Poisson-subsampled Gaussian steps (DP-SGD), by RDP accounting.

    Parameters
    ----------
    noise_multiplier : float
        Noise standard deviation divided by the clipping norm (L2 sensitivity), ``> 0``.
    sample_rate : float
        Poisson sampling probability ``q`` in ``(0, 1]``.
    steps : int
        Number of steps, ``>= 0``.
    delta : float
        In ``(0, 1)``.

    Returns
    -------
    float
        ``dp_accounting.rdp.RdpAccountant`` (default orders, add/remove-one neighbours) after
        composing ``PoissonSampledDpEvent(q, GaussianDpEvent(noise_multiplier))`` ``steps``
        times, converted with ``get_epsilon(delta)``.

    References
    ----------
    Mironov (2017), Rényi differential privacy; Mironov, Talwar & Zhang (2019), Rényi DP of the
    sampled Gaussian mechanism; Abadi et al. (2016), Deep learning with DP.
    """
    owner = "rdp_epsilon"
    z = _pos(noise_multiplier, "noise_multiplier", owner)
    q = check_real(sample_rate, "sample_rate", owner, low=0.0, high=1.0, low_open=True)
    n = check_int(steps, "steps", owner, low=0)
    dlt = check_probability(delta, "delta", owner)
    if n == 0:
        return 0.0
    import dp_accounting
    from dp_accounting import rdp

    acc = rdp.RdpAccountant()
    event = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z))
    acc.compose(event, n)
    return float(acc.get_epsilon(dlt))


def rdp_noise_multiplier(
    epsilon: float,
    delta: float,
    sample_rate: float,
    steps: int,
    *,
    rel_tol: float = 1e-4,
) -> float:
    """Smallest noise multiplier whose :func:`rdp_epsilon` is ``<= epsilon``; noisier end.

    Bisection on a log scale; returns the upper end of the final bracket (its epsilon was
    evaluated and is ``<= epsilon``), like Opacus's ``get_noise_multiplier``.
    """
    owner = "rdp_noise_multiplier"
    eps = _pos(epsilon, "epsilon", owner)
    dlt = check_probability(delta, "delta", owner)
    q = check_real(sample_rate, "sample_rate", owner, low=0.0, high=1.0, low_open=True)
    n = check_int(steps, "steps", owner, low=1)
    lo, hi = 0.0, 1.0
    while rdp_epsilon(hi, q, n, dlt) > eps:
        lo, hi = hi, 2.0 * hi
        if hi > 1e6:
            raise ValueError(f"{owner}: no noise multiplier <= 1e6 reaches epsilon={eps!r}.")
    while hi - lo > rel_tol * hi:
        mid = 0.5 * (lo + hi)
        if rdp_epsilon(mid, q, n, dlt) > eps:
            lo = mid
        else:
            hi = mid
    return hi


# --------------------------------------------------------------------------------------- zCDP
def _cks_epsilon(rho: float, log_delta: float) -> float:
    def f(t: float) -> float:
        alpha = 1.0 + math.exp(t)
        return alpha * rho + math.log1p(-1.0 / alpha) - (log_delta + math.log(alpha)) / (alpha - 1)

    ts = np.linspace(-15.0, 30.0, 901)
    vals = np.array([f(t) for t in ts])
    i = int(np.argmin(vals))
    lo, hi = ts[max(i - 1, 0)], ts[min(i + 1, ts.size - 1)]
    best = float(vals[i])
    if hi > lo:
        res = minimize_scalar(f, bounds=(lo, hi), method="bounded", options={"xatol": 1e-10})
        best = min(best, float(res.fun))
    return best


def zcdp_epsilon(rho: float, delta: float) -> float:
    """Epsilon such that ``rho``-zCDP implies ``(epsilon, delta)``-DP (CKS 2020 conversion).

    Parameters
    ----------
    rho : float
        ``>= 0``.
    delta : float
        In ``(0, 1)``.

    Returns
    -------
    float
        ``min(CKS(rho, delta), rho + 2 sqrt(rho log(1/delta)))``, at least 0; see the module
        docstring.

    Examples
    --------
    >>> round(zcdp_epsilon(0.5, 1e-5), 3)
    4.728
    """
    owner = "zcdp_epsilon"
    r = check_real(rho, "rho", owner, low=0.0)
    dlt = check_probability(delta, "delta", owner)
    if r == 0.0:
        return 0.0
    classical = r + 2.0 * math.sqrt(r * math.log(1.0 / dlt))
    return max(0.0, min(classical, _cks_epsilon(r, math.log(dlt))))


def zcdp_rho(epsilon: float, delta: float) -> float:
    """Largest ``rho`` (up to ``1e-10`` relative) with ``zcdp_epsilon(rho, delta) <= epsilon``.

    Returns the lower (more private) end of the bisection bracket.
    """
    owner = "zcdp_rho"
    eps = _pos(epsilon, "epsilon", owner)
    dlt = check_probability(delta, "delta", owner)
    lo, hi = 0.0, max(eps, 1e-3)
    while zcdp_epsilon(hi, dlt) <= eps:
        lo, hi = hi, 2.0 * hi
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if zcdp_epsilon(mid, dlt) <= eps:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-10 * hi:
            break
    return lo


def gaussian_zcdp_rho(sigma: float, sensitivity: float = 1.0, rounds: int = 1) -> float:
    """zCDP of ``rounds`` Gaussian releases: ``rho = rounds * sensitivity^2 / (2 sigma^2)``.

    Bun & Steinke (2016), Prop. 1.6 (Gaussian) and Lemma 2.3 (composition adds rho).
    """
    owner = "gaussian_zcdp_rho"
    s = _pos(sigma, "sigma", owner)
    d = _pos(sensitivity, "sensitivity", owner)
    k = check_int(rounds, "rounds", owner, low=0)
    return k * d * d / (2.0 * s * s)


def zcdp_gaussian_sigma(
    epsilon: float, delta: float, sensitivity: float = 1.0, rounds: int = 1
) -> float:
    """Noise ``sigma`` so that ``rounds`` Gaussian releases are ``(epsilon, delta)``-DP via zCDP.

    ``rho = zcdp_rho(epsilon, delta)`` (lower end), then
    ``sigma = sensitivity * sqrt(rounds / (2 rho))``, nudged up by ``1e-9`` relative: the noisier
    end. Used for the federated rounds (seed 003 App. B.1): each round adds
    ``N(0, sigma^2)`` to a sum of clipped client updates with L2 sensitivity ``sensitivity``.

    Examples
    --------
    >>> s = zcdp_gaussian_sigma(1.0, 1e-5, sensitivity=1.0, rounds=10)
    >>> zcdp_epsilon(gaussian_zcdp_rho(s, 1.0, 10), 1e-5) <= 1.0
    True
    """
    owner = "zcdp_gaussian_sigma"
    eps = _pos(epsilon, "epsilon", owner)
    dlt = check_probability(delta, "delta", owner)
    d = _pos(sensitivity, "sensitivity", owner)
    k = check_int(rounds, "rounds", owner, low=1)
    rho = zcdp_rho(eps, dlt)
    return d * math.sqrt(k / (2.0 * rho)) * (1.0 + 1e-9)


class ZCDPAccountant:
    """Running zCDP account of Gaussian (or any rho-zCDP) releases; one per run, not per round.

    Examples
    --------
    >>> acc = ZCDPAccountant()
    >>> acc.step(sigma=2.0, sensitivity=1.0)
    >>> acc.rho
    0.125
    """

    def __init__(self) -> None:
        self.history: list[float] = []

    def step(self, *, sigma: float, sensitivity: float = 1.0) -> None:
        """Record one Gaussian release with noise ``sigma`` and L2 sensitivity ``sensitivity``."""
        self.history.append(gaussian_zcdp_rho(sigma, sensitivity, 1))

    def step_rho(self, rho: float) -> None:
        """Record one ``rho``-zCDP release."""
        self.history.append(check_real(rho, "rho", "ZCDPAccountant.step_rho", low=0.0))

    @property
    def rho(self) -> float:
        return math.fsum(self.history)

    def get_epsilon(self, delta: float) -> float:
        return zcdp_epsilon(self.rho, delta)

    def state_dict(self) -> dict[str, Any]:
        return {"kind": "zcdp", "history": list(self.history)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("kind") != "zcdp":
            raise ValueError(f"ZCDPAccountant.load_state_dict needs kind 'zcdp'. Got {state!r}.")
        self.history = [float(r) for r in state["history"]]


# ---------------------------------------------------------------------------------------- GDP
def gdp_delta(mu: float, epsilon: float) -> float:
    """``delta(epsilon)`` of ``mu``-Gaussian DP (Dong, Roth & Su 2022, Corollary 2.13).

    ``delta = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)``. ``mu``-GDP composes as
    ``sqrt(sum mu_i^2)``; a Gaussian release with noise ``sigma`` and sensitivity ``D`` is
    ``D/sigma``-GDP.
    """
    owner = "gdp_delta"
    m = _pos(mu, "mu", owner)
    eps = check_real(epsilon, "epsilon", owner, low=0.0)
    a = -eps / m + m / 2.0
    b = -eps / m - m / 2.0
    return max(0.0, float(math.exp(log_ndtr(a)) - math.exp(eps + log_ndtr(b))))


def gdp_epsilon(mu: float, delta: float) -> float:
    """Smallest epsilon with ``gdp_delta(mu, epsilon) <= delta``; returns the larger (safe) end."""
    owner = "gdp_epsilon"
    m = _pos(mu, "mu", owner)
    dlt = check_probability(delta, "delta", owner)
    if gdp_delta(m, 0.0) <= dlt:
        return 0.0
    lo, hi = 0.0, 1.0
    while gdp_delta(m, hi) > dlt:
        lo, hi = hi, 2.0 * hi
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if gdp_delta(m, mid) > dlt:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    return hi

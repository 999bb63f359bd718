"""Accountants for composed Gaussian releases: RDP (DP-SGD), zCDP (federated rounds), GDP.

Thin wrappers: Rényi-DP accounting of subsampled Gaussian steps is delegated to Google's
``dp_accounting`` (:class:`dp_accounting.rdp.RdpAccountant`); privcal only adds the inverse
(noise for a target epsilon, returning the noisier end) and closed-form zCDP / Gaussian-DP
conversions.

* *zCDP conversion* (Canonne, Kamath & Steinke 2020, Prop. 12; the one ``dp_accounting`` applies
  to RDP curves): ``epsilon(rho, delta) = inf_{alpha > 1} alpha rho + log(1 - 1/alpha) -
  (log(delta) + log(alpha)) / (alpha - 1)``, valid at every ``alpha`` (numerical minimisation
  errs toward a larger epsilon), capped by ``rho + 2 sqrt(rho log(1/delta))`` (Bun & Steinke
  2016, Prop. 1.3).
* *Plans fixed in advance (PLD).* ``T`` Gaussian releases planned before the first compose to
  one Gaussian with noise multiplier ``z / sqrt(T)``; :func:`pld_gaussian_epsilon` and
  :func:`pld_gaussian_sigma` read ``dp_accounting``'s PLD accountant (pessimistic, an upper
  bound; 7.8% less noise than the zCDP conversion at 12 rounds and ``(1, 1e-5)``). Not for
  adaptively chosen steps (the ledger's rule is :mod:`privcal.privacy.filter`).
* *Continuous Gaussian releases* compose to ``sqrt(2 rho)``-GDP, adaptively too
  (:func:`gaussian_epsilon`, :func:`gaussian_rho`; ``ZCDPAccountant(conversion="gaussian")``, the
  trusted federated runs); discrete Gaussian shares keep the zCDP conversion.

More: docs/privacy.md#composition-rules-used-in-privcal.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.special import log_ndtr

from privcal._params import EPSILON, FRACTION, NON_NEGATIVE, POSITIVE, check_int, check_probability

__all__ = [
    "ZCDPAccountant",
    "gaussian_epsilon",
    "gaussian_rho",
    "gaussian_zcdp_rho",
    "gdp_delta",
    "gdp_epsilon",
    "pld_gaussian_epsilon",
    "pld_gaussian_sigma",
    "rdp_epsilon",
    "rdp_noise_multiplier",
    "zcdp_epsilon",
    "zcdp_gaussian_sigma",
    "zcdp_rho",
]


# ---------------------------------------------------------------------------------------- RDP
def _sigma_target(
    epsilon: Any, delta: Any, sensitivity: Any, rounds: Any, owner: str
) -> tuple[float, float, float, int]:
    """The checked ``(epsilon, delta, sensitivity, rounds)`` a Gaussian sigma is calibrated to."""
    eps = EPSILON.check(epsilon, "epsilon", owner)
    dlt = check_probability(delta, "delta", owner)
    d = POSITIVE.check(sensitivity, "sensitivity", owner)
    k = check_int(rounds, "rounds", owner, low=1)
    return eps, dlt, d, k


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
    z = POSITIVE.check(noise_multiplier, "noise_multiplier", owner)
    q = FRACTION.check(sample_rate, "sample_rate", owner)
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
    eps = EPSILON.check(epsilon, "epsilon", owner)
    dlt = check_probability(delta, "delta", owner)
    q = FRACTION.check(sample_rate, "sample_rate", owner)
    n = check_int(steps, "steps", owner, low=1)
    lo, hi = 0.0, 1.0
    while rdp_epsilon(hi, q, n, dlt) > eps:
        lo, hi = hi, 2.0 * hi
        if hi > 1e6:
            raise ValueError(f"{owner}: no noise multiplier <= 1e6 reaches epsilon={eps!r}.")
    return bisect_boundary(lambda z: rdp_epsilon(z, q, n, dlt) <= eps, lo, hi, rel_tol)[1]


# ---------------------------------------------------------------------------------------- PLD
def _gaussian_rounds(noise_multiplier: float, rounds: int) -> Any:
    import dp_accounting

    gaussian = dp_accounting.GaussianDpEvent(noise_multiplier)
    return dp_accounting.SelfComposedDpEvent(gaussian, rounds)


def pld_gaussian_epsilon(noise_multiplier: float, delta: float, rounds: int = 1) -> float:
    """Epsilon of ``rounds`` Gaussian releases (plan fixed in advance) by PLD accounting.

    Parameters
    ----------
    noise_multiplier : float
        Noise standard deviation divided by the L2 sensitivity, ``> 0``.
    delta : float
        In ``(0, 1)``.
    rounds : int, default=1

    Returns
    -------
    float
        ``dp_accounting.pld.PLDAccountant`` (add/remove, pessimistic) after composing
        ``GaussianDpEvent(noise_multiplier)`` ``rounds`` times, ``get_epsilon(delta)``.
    """
    from dp_accounting.pld import pld_privacy_accountant

    owner = "pld_gaussian_epsilon"
    z = POSITIVE.check(noise_multiplier, "noise_multiplier", owner)
    dlt = check_probability(delta, "delta", owner)
    k = check_int(rounds, "rounds", owner, low=1)
    acc = pld_privacy_accountant.PLDAccountant()
    acc.compose(_gaussian_rounds(z, k))
    return float(acc.get_epsilon(dlt))


def pld_gaussian_sigma(
    epsilon: float, delta: float, sensitivity: float = 1.0, rounds: int = 1
) -> float:
    """Noise ``sigma`` so that ``rounds`` Gaussian releases are ``(epsilon, delta)``-DP by PLD.

    ``dp_accounting.mechanism_calibration.calibrate_dp_mechanism`` finds the noise multiplier
    on the PLD accountant; the result is checked with :func:`pld_gaussian_epsilon` and nudged up
    until it meets the target (the noisier end), then scaled by ``sensitivity``. Plans fixed in
    advance only (module docstring).

    Examples
    --------
    >>> s = pld_gaussian_sigma(1.0, 1e-5, rounds=12)
    >>> s < zcdp_gaussian_sigma(1.0, 1e-5, rounds=12) * 0.93
    True
    """
    from dp_accounting import mechanism_calibration
    from dp_accounting.pld import pld_privacy_accountant

    eps, dlt, d, k = _sigma_target(epsilon, delta, sensitivity, rounds, "pld_gaussian_sigma")
    z = float(
        mechanism_calibration.calibrate_dp_mechanism(
            pld_privacy_accountant.PLDAccountant,
            lambda m: _gaussian_rounds(m, k),
            eps,
            dlt,
            tol=1e-6,
        )
    )
    while pld_gaussian_epsilon(z, dlt, k) > eps:
        z *= 1.0 + 1e-6
    return d * z


# --------------------------------------------------------------------------------------- zCDP
def _cks_epsilon(rho: float, log_delta: float) -> float:
    def f(t: float) -> float:
        alpha = 1.0 + math.exp(t)
        return alpha * rho + math.log1p(-1.0 / alpha) - (log_delta + math.log(alpha)) / (alpha - 1)

    ts = np.linspace(-15.0, 30.0, 901)
    vals = np.array([f(t) for t in ts])
    i = int(np.argmin(vals))
    lo, hi = ts[max(i - 1, 0)], ts[min(i + 1, ts.size - 1)]
    res = minimize_scalar(f, bounds=(lo, hi), method="bounded", options={"xatol": 1e-10})
    return min(float(vals[i]), float(res.fun))


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
    r = NON_NEGATIVE.check(rho, "rho", owner)
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
    eps = EPSILON.check(epsilon, "epsilon", owner)
    dlt = check_probability(delta, "delta", owner)
    return _largest_within(lambda r: zcdp_epsilon(r, dlt), eps, max(eps, 1e-3), 1e-10)


def _largest_within(epsilon_of: Any, epsilon: float, start: float, rtol: float) -> float:
    """Largest ``x`` (up to ``rtol`` relative) with ``epsilon_of(x) <= epsilon``, for an
    increasing ``epsilon_of``: doubling from ``start``, then bisection; the lower end."""
    lo, hi = 0.0, start
    while epsilon_of(hi) <= epsilon:
        lo, hi = hi, 2.0 * hi
    return bisect_boundary(lambda x: epsilon_of(x) > epsilon, lo, hi, rtol)[0]


def bisect_boundary(
    ok: Callable[[float], bool], lo: float, hi: float, rtol: float
) -> tuple[float, float]:
    """The bracket ``(lo, hi)`` of where a monotone ``ok`` turns true, halved from ``ok(lo)``
    false and ``ok(hi)`` true until ``hi - lo <= rtol hi`` (at most 200 halvings)."""
    for _ in range(200):
        if hi - lo <= rtol * hi:
            break
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return lo, hi


def gaussian_zcdp_rho(sigma: float, sensitivity: float = 1.0, rounds: int = 1) -> float:
    """zCDP of ``rounds`` Gaussian releases: ``rho = rounds * sensitivity^2 / (2 sigma^2)``.

    Bun & Steinke (2016), Prop. 1.6 (Gaussian) and Lemma 2.3 (composition adds rho).
    """
    owner = "gaussian_zcdp_rho"
    s = POSITIVE.check(sigma, "sigma", owner)
    d = POSITIVE.check(sensitivity, "sensitivity", owner)
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
    eps, dlt, d, k = _sigma_target(epsilon, delta, sensitivity, rounds, "zcdp_gaussian_sigma")
    rho = zcdp_rho(eps, dlt)
    return d * math.sqrt(k / (2.0 * rho)) * (1.0 + 1e-9)


#: How an accountant turns its total ``rho`` into ``(epsilon, delta)`` (:class:`ZCDPAccountant`).
CONVERSIONS = ("zcdp", "gaussian")


def gaussian_epsilon(rho: float, delta: float) -> float:
    """Exact epsilon at ``delta`` of continuous Gaussian releases whose zCDP parameters sum to
    ``rho``.

    A Gaussian release with ratio ``D / sigma`` is ``D/sigma``-GDP and GDP composes, adaptively,
    as ``mu = sqrt(sum mu_i^2)`` (Dong, Roth & Su 2022, Cor. 3.3); its ``rho = mu^2 / 2`` (Bun &
    Steinke 2016, Prop. 1.6), so the composition is ``sqrt(2 rho)``-GDP, whose privacy profile is
    exactly the analytic Gaussian's (Balle & Wang 2018, Thm. 8): :func:`gdp_epsilon`. Tighter
    than :func:`zcdp_epsilon` for Gaussian releases only (a discrete Gaussian or any other
    ``rho``-zCDP release needs the zCDP conversion). It equals the PLD accountant's figure for
    the same plan (:func:`pld_gaussian_epsilon`, tested), at a fraction of its cost.
    """
    owner = "gaussian_epsilon"
    r = NON_NEGATIVE.check(rho, "rho", owner)
    dlt = check_probability(delta, "delta", owner)
    return 0.0 if r == 0.0 else gdp_epsilon(math.sqrt(2.0 * r), dlt)


def gaussian_rho(epsilon: float, delta: float) -> float:
    """Largest total ``rho`` of continuous Gaussian releases that is ``(epsilon, delta)``-DP
    (:func:`gaussian_epsilon`; the lower, more private end of the bisection bracket).

    Examples
    --------
    >>> gaussian_rho(1.0, 1e-5) > zcdp_rho(1.0, 1e-5)  # the exact conversion leaves more rho
    True
    """
    owner = "gaussian_rho"
    eps = EPSILON.check(epsilon, "epsilon", owner)
    dlt = check_probability(delta, "delta", owner)
    mu = _largest_within(lambda m: gdp_epsilon(m, dlt), eps, 1.0, 1e-12)
    return mu * mu / 2.0


class ZCDPAccountant:
    """Running zCDP account of Gaussian (or any rho-zCDP) releases; one per run, not per round.

    Parameters
    ----------
    conversion : {"zcdp", "gaussian"}, default="zcdp"
        How the total ``rho`` becomes ``(epsilon, delta)``: :func:`zcdp_epsilon` (valid for any
        ``rho``-zCDP release), or :func:`gaussian_epsilon` (exact, for continuous Gaussian
        releases only: such an accountant refuses :meth:`step_rho`).

    Examples
    --------
    >>> acc = ZCDPAccountant()
    >>> acc.step(sigma=2.0, sensitivity=1.0)
    >>> acc.rho
    0.125
    """

    def __init__(self, conversion: str = "zcdp") -> None:
        if conversion not in CONVERSIONS:
            raise ValueError(
                f"The 'conversion' parameter of ZCDPAccountant must be one of {CONVERSIONS}. "
                f"Got {conversion!r} instead."
            )
        self.conversion = conversion
        self.history: list[float] = []

    def step(self, *, sigma: float, sensitivity: float = 1.0) -> None:
        """Record one Gaussian release with noise ``sigma`` and L2 sensitivity ``sensitivity``."""
        self.history.append(gaussian_zcdp_rho(sigma, sensitivity, 1))

    def step_rho(self, rho: float) -> None:
        """Record one ``rho``-zCDP release (not a continuous Gaussian one: zCDP conversion only)."""
        if self.conversion == "gaussian":
            raise ValueError(
                "This ZCDPAccountant converts with the exact Gaussian profile, which holds for "
                "continuous Gaussian releases only: record them with step(sigma=...), or use "
                "ZCDPAccountant(conversion='zcdp') for other rho-zCDP releases."
            )
        self.history.append(NON_NEGATIVE.check(rho, "rho", "ZCDPAccountant.step_rho"))

    @property
    def rho(self) -> float:
        return math.fsum(self.history)

    def get_epsilon(self, delta: float) -> float:
        convert = gaussian_epsilon if self.conversion == "gaussian" else zcdp_epsilon
        return convert(self.rho, delta)

    def state_dict(self) -> dict[str, Any]:
        return {"kind": "zcdp", "conversion": self.conversion, "history": list(self.history)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("kind") != "zcdp":
            raise ValueError(f"ZCDPAccountant.load_state_dict needs kind 'zcdp'. Got {state!r}.")
        self.conversion = str(state.get("conversion", "zcdp"))
        self.history = [float(r) for r in state["history"]]


# ---------------------------------------------------------------------------------------- GDP
def gdp_delta(mu: float, epsilon: float) -> float:
    """``delta(epsilon)`` of ``mu``-Gaussian DP (Dong, Roth & Su 2022, Corollary 2.13).

    ``delta = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)``. ``mu``-GDP composes as
    ``sqrt(sum mu_i^2)``; a Gaussian release with noise ``sigma`` and sensitivity ``D`` is
    ``D/sigma``-GDP.
    """
    owner = "gdp_delta"
    m = POSITIVE.check(mu, "mu", owner)
    eps = NON_NEGATIVE.check(epsilon, "epsilon", owner)
    a = -eps / m + m / 2.0
    b = -eps / m - m / 2.0
    return max(0.0, float(math.exp(log_ndtr(a)) - math.exp(eps + log_ndtr(b))))


def gdp_epsilon(mu: float, delta: float) -> float:
    """Smallest epsilon with ``gdp_delta(mu, epsilon) <= delta``; returns the larger (safe) end."""
    owner = "gdp_epsilon"
    m = POSITIVE.check(mu, "mu", owner)
    dlt = check_probability(delta, "delta", owner)
    if gdp_delta(m, 0.0) <= dlt:
        return 0.0
    lo, hi = 0.0, 1.0
    while gdp_delta(m, hi) > dlt:
        lo, hi = hi, 2.0 * hi
    return bisect_boundary(lambda e: gdp_delta(m, e) <= dlt, lo, hi, 1e-12)[1]

"""Theorem R (``method="rank"``, the default): the exponential mechanism with a rank penalty.

*Mechanism.* Public logit grid (:data:`~privcal.conformal.private.DEFAULT_LOGIT_BINS`), target
rank ``k`` and slope ``r > 0`` (public). With ``c_j = #{i : s_i <= e_j}`` the penalty of edge
``j`` is

.. math::  p_j = \\max(c_{j-1} - k + 1,\\; r (k - c_j),\\; 0),

zero at the edge of the bin holding the ``k``-th smallest score, ``+1`` per order statistic
passed above it, ``+r`` per order statistic missing below it
(:func:`~privcal.conformal.quantile.rank_penalties`). The release is ``e_J`` with
:math:`P(J = j) \\propto \\exp(-\\epsilon p_j / (1 + r))`.

*Privacy (substitute one calibration example, n public).* Substituting one score moves every
``c_j`` by 0 or 1 in one direction, so every :math:`p_j(D') - p_j(D) \\in [-1, r]`: one
interval of width ``1 + r`` for all ``j``, and the bounded-range argument
(:mod:`privcal.conformal.quantile`) makes the weights pure epsilon-DP. ``k`` is a function of
``n``, so add/remove is not claimed.

*Coverage.* Calibration and test scores i.i.d. (ties allowed): with the guard
``G = sum_{t=1}^{k} h(min(x_t, beta_t)) <= S = sum_{t >= 1} x_t/(1 + x_t)``,
``h(a) = a/(1+a)``, ``x_t = (m - 1) e^{-lambda t}``, ``lambda = epsilon r/(1 + r)``,
``beta_t = (m - 1) sum_{d >= t} e^{-lambda d} b(k - d)`` and ``b(l) = max_g P(Bin(n+1, g) =
l)``,

.. math::  P(Y \\in C(X)) \\ge \\frac{k - G}{n + 1},

so :func:`rank_target` (the smallest ``k`` with ``k - G(k) >= (n+1)(1-alpha)``) gives coverage
``>= 1 - alpha``; no ``k <= n`` qualifying means full sets. Upper bound: coverage ``<= (k +
sum_u y_u/(1 + y_u))/(n+1) + p_max`` with ``y_u = (m-1) e^{-epsilon u/(1+r)}``. :func:`rank_slope`
picks ``r`` (``r = 3`` at ``m = 3915``, epsilon = 1; then ``k = 4507`` at ``n = 5000``, alpha =
0.1, against split conformal's 4501).

Proof (privacy, deficit tail, coverage by leave-one-out, upper bound, slope):
docs/conformal.md#proof-of-theorem-r.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
from scipy.special import gammaln

from privcal._params import EPSILON, check_int, check_probability, renamed
from privcal.conformal.private.mechanism import (
    Plan,
    ThresholdMechanism,
    Tuning,
    bin_count,
    check_slope,
    register_mechanism,
)
from privcal.conformal.quantile import (
    _private_rank_quantile,
    rank_penalties,
    rank_quantile_release,
)
from privcal.privacy.guarantee import Release
from privcal.privacy.noise import NoiseSource

__all__ = ["RANK", "RankMechanism", "rank_release", "rank_slope", "rank_target"]

#: Slopes searched by :func:`rank_slope`.
_SLOPES = np.round(np.arange(0.25, 20.0 + 1e-9, 0.25), 2)


def _tail_sum(m: int, lam: Any) -> Any:
    """``S = sum_{t >= 1} x_t / (1 + x_t)`` with ``x_t = (m - 1) exp(-lam t)`` (Theorem R), for
    one ``lam`` or an array of them (one sum each).

    Summed term by term until ``x_t < 1e-17``; the rest (at most ``sum x_t``, a geometric series)
    is added as its bound, so the returned value is never below the true sum.
    """
    lam = np.asarray(lam, dtype=np.float64)
    x0 = math.log(max(m - 1, 1))
    t_max = np.maximum(1.0, np.ceil((x0 + 40.0) / lam))
    if lam.size * t_max.max() > 1 << 22:  # tiny epsilon: one sum at a time bounds the memory
        return np.array([_tail_sum(m, v) for v in lam.ravel()]).reshape(lam.shape)
    t = np.arange(1.0, t_max.max() + 1.0)
    x = np.exp(x0 - np.multiply.outer(lam, t))
    terms = np.where(t <= t_max[..., None], x / (1.0 + x), 0.0)
    rest = np.exp(x0 - lam * (t_max + 1.0)) / -np.expm1(-lam)
    return terms.sum(axis=-1) + rest


@functools.lru_cache(maxsize=256)
def _rank_slope(m: int, eps: float) -> float:
    """The slope minimising ``S(r) + 1/(exp(eps/(1+r)) - 1)`` over :data:`_SLOPES`."""
    cost = _tail_sum(m, eps * _SLOPES / (1 + _SLOPES)) + 1.0 / np.expm1(eps / (1 + _SLOPES))
    return float(_SLOPES[int(np.argmin(cost))])


def _mode_pmf(size: int, ell: np.ndarray) -> np.ndarray:
    """``b(l) = max_g P(Bin(size, g) = l)``, attained at ``g = l / size`` (Theorem R's guard).

    Evaluated in log space; the factor ``1 + 1e-9`` covers the rounding of ``gammaln``, so the
    result is never below the exact value (the guard only needs upper bounds).
    """
    ell = np.asarray(ell, dtype=np.float64)
    rest = size - ell
    with np.errstate(divide="ignore", invalid="ignore"):
        up = np.where(ell > 0, ell * np.log(ell / size), 0.0)
        down = np.where(rest > 0, rest * np.log(rest / size), 0.0)
    log_b = gammaln(size + 1.0) - gammaln(ell + 1.0) - gammaln(rest + 1.0) + up + down
    return np.minimum(np.exp(log_b) * (1.0 + 1e-9), 1.0)


def _rank_guard(n: int, k: int, m: int, lam: float) -> float:
    """``G = sum_t h(min(x_t, beta_t))`` of Theorem R, an upper bound computed in ``O(1/lam)``.

    ``h(a) = a/(1 + a)``, ``x_t = (m-1) e^{-lam t}`` and ``beta_t = (m-1) sum_{d >= t}
    e^{-lam d} b(k-d)`` with ``b`` of :func:`_mode_pmf` (``Bin(n+1, .)``).
    Terms are summed up to ``T = min(k, ceil((log(m-1) + 40)/lam))``; beyond ``T`` the sum over
    ``d`` is bounded by ``sum_{d > T} e^{-lam d}`` (``b <= 1``) and the sum over ``t`` by
    ``sum_{t > T} x_t``, two geometric series, so the result is never below the exact ``G``.
    """
    x0 = math.log(max(m - 1, 1))
    big_t = min(k, max(1, math.ceil((x0 + 40.0) / lam)))
    t = np.arange(1, big_t + 1, dtype=np.float64)
    decay = np.exp(-lam * t)
    beyond = math.exp(-lam * (big_t + 1)) / -math.expm1(-lam) if big_t < k else 0.0
    below = decay * _mode_pmf(n + 1, k - t)
    suffix = np.cumsum(below[::-1])[::-1] + beyond  # sum_{d >= t} e^{-lam d} b(k - d)
    beta = (m - 1) * suffix
    a = np.minimum((m - 1) * decay, beta)
    return float(np.sum(a / (1.0 + a)) + (m - 1) * beyond)  # beyond is 0 when T = k


@functools.lru_cache(maxsize=1024)
def _rank_target(n: int, a: float, eps: float, m: int, r: float) -> int:
    """The smallest ``k`` with ``k - G(k) >= (n+1)(1-alpha)`` (Theorem R; a margin of 1e-9).

    ``G(k) <= S``, so ``k_S = ceil((n+1)(1-alpha) + S)`` always qualifies and the search runs
    over at most ``S + 1`` values; when none is ``<= n``, ``k_S > n`` is returned (full sets).
    """
    lam = eps * r / (1.0 + r)
    need = (n + 1) * (1.0 - a) + 1e-9
    k_s = math.ceil(need + float(_tail_sum(m, lam)))
    for k in range(max(1, math.ceil(need)), min(k_s, n + 1)):
        if k - _rank_guard(n, k, m, lam) >= need:
            return k
    return k_s


def rank_slope(m: int, epsilon: float) -> float:
    """The default ``slope`` of ``method="rank"``: a public function of ``m`` and ``epsilon``.

    It minimises the guard ``S`` (module docstring, Theorem R) plus ``1/(exp(epsilon/(1+r)) - 1)``,
    the mean overshoot of the release above the target rank when every rank step has one edge,
    over ``r`` in ``0.25, 0.5, ..., 20``.

    Examples
    --------
    >>> rank_slope(3915, 1.0)
    3.0
    """
    owner = "rank_slope"
    m = check_int(m, "m", owner, low=2)
    return _rank_slope(m, EPSILON.check(epsilon, "epsilon", owner))


@renamed(old="bins", new="n_bins", owner="rank_target")
def rank_target(n: int, alpha: float, epsilon: float, n_bins: Any, slope: Any = "auto") -> int:
    """The target rank ``k`` of ``method="rank"``; ``k > n`` means no valid threshold.

    The smallest ``k`` with ``k - G(k) >= (n+1)(1-alpha)``, where the guard ``G`` (module
    docstring, Theorem R) bounds the expected number of order statistics the release misses,
    ``G <= S = sum_{t>=1} x_t/(1 + x_t)``, ``x_t = (m-1) exp(-epsilon r t/(1+r))``; coverage is
    then ``>= (k - G)/(n+1) >= 1 - alpha``.

    Examples
    --------
    >>> rank_target(5000, 0.1, 1.0, 3915), math.ceil(5001 * 0.9)
    (4507, 4501)
    """
    owner = "rank_target"
    n = check_int(n, "n", owner, low=1)
    a = check_probability(alpha, "alpha", owner)
    eps = EPSILON.check(epsilon, "epsilon", owner)
    m = bin_count(n_bins, owner)
    r = check_slope(slope, owner)
    return _rank_target(n, a, eps, m, _rank_slope(m, eps) if r is None else r)


def rank_release(plan: Plan, epsilon: float, source: str = "calibration") -> Release:
    """The :class:`~privcal.privacy.Release` of one ``method="rank"`` threshold."""
    return rank_quantile_release(plan.rank, plan.n_bins, plan.slope, epsilon, source)


class RankMechanism(ThresholdMechanism):
    """Theorem R: rank penalty on the logit grid, weights ``exp(-epsilon p_j / (1 + r))``."""

    name = "rank"
    tuning = ("slope",)

    def plan(self, n: int, alpha: float, epsilon: float, edges: np.ndarray, tuning: Tuning) -> Plan:
        """Slope ``r`` (:func:`rank_slope` for ``None``) and target ``k`` (:func:`rank_target`);
        valid when ``k <= n``, level ``k / n``."""
        m = edges.size - 1
        r = _rank_slope(m, epsilon) if tuning.slope is None else tuning.slope
        k = _rank_target(n, alpha, epsilon, m, r)
        return Plan(self.name, edges, m, k / n, k <= n, slope=r, rank=k)

    def scale(self, plan: Plan) -> float:
        """The range ``1 + r`` of the penalties' changes under substitute."""
        return 1.0 + plan.slope

    def penalties(self, plan: Plan, less: Any, upto: Any, n: Any) -> np.ndarray:
        """:func:`~privcal.conformal.quantile.rank_penalties` at ``plan``'s ``k`` and ``r``."""
        return rank_penalties(less, upto, plan.rank, plan.slope)

    def release(
        self, scores: np.ndarray, plan: Plan, epsilon: float, noise: NoiseSource, source: str
    ) -> tuple[float, Release]:
        """The rank-penalty draw (:data:`~privcal.conformal.quantile.RANK_QUANTILE`)."""
        value = _private_rank_quantile(scores, plan.rank, plan.slope, epsilon, plan.edges, noise)
        return value, rank_release(plan, epsilon, source)

    def shortfall(self, plan: Plan) -> str:
        return f"k = {plan.rank} > n"

    def tuning_terms(self, plan: Plan) -> list[str]:
        return [
            f"slope = {plan.slope:g}",
            f"target rank k = {plan.rank} (Theorem R from n, alpha, epsilon, m, slope)",
        ]

    def coverage_bound(
        self, n: int, alpha: float, epsilon: float, m: int, p_max: float, tuning: Tuning
    ) -> float:
        """Theorem R's upper bound (module docstring; one stage, ``gamma`` is ignored)."""
        r = _rank_slope(m, epsilon) if tuning.slope is None else tuning.slope
        k = _rank_target(n, alpha, epsilon, m, r)
        return (k + float(_tail_sum(m, epsilon / (1.0 + r)))) / (n + 1) + p_max


#: The registered ``method="rank"``.
RANK = register_mechanism(RankMechanism())

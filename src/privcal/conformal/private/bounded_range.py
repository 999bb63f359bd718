"""Theorem BR (``method="bounded-range"``): seed 002's utility with bounded-range weights.

*Mechanism.* Public logit grid, seed 002's utility ``w_j`` at the level ``q~`` below, weights
:math:`\\exp(-\\epsilon q(1-q) w_j)` (:class:`~privcal.conformal.private.level.LevelMechanism`).

*Privacy (substitute one calibration example, n public).* The changes of ``w_j`` lie in one
interval of width ``1/q + 1/(1-q)``, so the weights are pure epsilon-DP (derived in
docs/conformal.md#proof-of-the-bounded-range-weights; epsilon-DP under both relations, but ``q~``
is a function of ``n``, so only substitute is claimed).

*Coverage.* With probability ``>= 1 - delta`` the release has ``#{s_i <= e_J} > qn -
log(m/delta)/(epsilon q)``; so coverage ``>= K/(n+1) - delta >= 1 - alpha`` for ``K =
ceil((n+1)(1 - alpha + delta))``. With ``delta = gamma alpha``, ``b = (K-1)/n`` and ``c =
log(m/(gamma alpha))/(epsilon n)`` the smallest such level is

.. math::  \\tilde q = (b + \\sqrt{b^2 + 4c})/2

(:func:`bounded_range_level`; ``gamma`` minimises it over a public grid); ``q~ >= 1`` means
full sets. At ``n = 5000``, epsilon = 1, alpha = 0.1, ``m = 3915``: ``q~ = 0.9039`` against
seed 002's 0.9070 at the same ``m``. Upper bound: coverage ``<= delta + ceil(q~ n +
log(m/delta)/(epsilon (1-q~)))/(n+1) + p_max``.

Proof: docs/conformal.md#proof-of-theorem-br.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from privcal._params import EPSILON, check_int, check_probability, renamed
from privcal.conformal.private.level import LevelMechanism
from privcal.conformal.private.mechanism import Plan, Tuning, auto_or, bin_count, register_mechanism

__all__ = ["BOUNDED_RANGE", "BoundedRangeMechanism", "bounded_range_level"]

#: The ``gamma`` values searched by :func:`bounded_range_level`: 240 log-spaced in [1e-12, 1).
_BR_GAMMAS = np.logspace(-12.0, 0.0, 241)[:-1]


def _level_br(n: int, a: float, eps: float, m: int, g: Any) -> Any:
    """The bounded-range level for validated arguments; ``g`` may be an array of gammas."""
    d = np.asarray(g, dtype=np.float64) * a
    k = np.ceil((n + 1) * (1.0 - a + d))  # rounding up only makes q~ larger (safe)
    b = (k - 1.0) / n
    c = np.log(m / d) / (eps * n)
    q = (b + np.sqrt(b * b + 4.0 * c)) / 2.0
    return float(q) if q.ndim == 0 else q


def _gamma_br(n: int, a: float, eps: float, m: int) -> float:
    levels = _level_br(n, a, eps, m, _BR_GAMMAS)
    return float(_BR_GAMMAS[int(np.argmin(levels))])


@renamed(old="bins", new="n_bins", owner="bounded_range_level")
def bounded_range_level(
    n: int, alpha: float, epsilon: float, n_bins: Any, gamma: Any = "auto"
) -> float:
    """The adjusted level ``q~`` of ``method="bounded-range"`` (``>= 1``: no valid threshold).

    ``q~ = (b + sqrt(b^2 + 4c)) / 2`` with ``b = (K - 1)/n``,
    ``K = ceil((n+1)(1 - alpha + gamma alpha))`` and ``c = log(m/(gamma alpha))/(epsilon n)``:
    the smallest ``q`` with ``q n - log(m/(gamma alpha))/(epsilon q) >= K - 1`` (module
    docstring, Theorem BR). ``gamma="auto"`` minimises ``q~`` over 240 values log-spaced in
    ``[1e-12, 1)``.

    Examples
    --------
    >>> from privcal.conformal import adjusted_level, optimal_gamma
    >>> round(bounded_range_level(5000, 0.1, 1.0, 4096), 4)
    0.9039
    >>> round(adjusted_level(5000, 0.1, 1.0, 4096, optimal_gamma(5000, 0.1, 1.0, 4096)), 4)
    0.907
    """
    owner = "bounded_range_level"
    n = check_int(n, "n", owner, low=1)
    a = check_probability(alpha, "alpha", owner)
    eps = EPSILON.check(epsilon, "epsilon", owner)
    m = bin_count(n_bins, owner)
    g = auto_or(gamma, "gamma", owner, check_probability)
    return _level_br(n, a, eps, m, _gamma_br(n, a, eps, m) if g is None else g)


class BoundedRangeMechanism(LevelMechanism):
    """Theorem BR: seed 002's utility on the logit grid, weights ``exp(-epsilon q~(1-q~) w_j)``."""

    name = "bounded-range"
    weights = "bounded-range"
    level_source = "bounded range, from n, alpha, epsilon, m"

    def plan(self, n: int, alpha: float, epsilon: float, edges: np.ndarray, tuning: Tuning) -> Plan:
        """``gamma`` (minimising ``q~`` for ``None``) and ``q~`` of :func:`bounded_range_level`;
        valid when ``q~ < 1``."""
        m = edges.size - 1
        g = _gamma_br(n, alpha, epsilon, m) if tuning.gamma is None else tuning.gamma
        q = _level_br(n, alpha, epsilon, m, g)
        return Plan(self.name, edges, m, q, q < 1.0, gamma=g, weights=self.weights)

    def coverage_bound(
        self, n: int, alpha: float, epsilon: float, m: int, p_max: float, tuning: Tuning
    ) -> float:
        """Theorem BR's upper bound (module docstring), ``delta = gamma alpha``."""
        gamma: Any = tuning.gamma  # coverage_upper_bound's gamma, as given
        q = _level_br(n, alpha, epsilon, m, gamma)
        d = gamma * alpha
        top = math.ceil(q * n + math.log(m / d) / (epsilon * (1.0 - q)))
        return d + top / (n + 1) + p_max


#: The registered ``method="bounded-range"``.
BOUNDED_RANGE = register_mechanism(BoundedRangeMechanism())

"""Theorem L: localise the threshold on part of the calibration set, release it on the rest.

The guard ``G`` of Theorem R (:mod:`privcal.conformal.private.rank`) grows with ``log m``: any of
the ``m - 1`` edges of the public grid could sit a few ranks below the target, and the mechanism
must be paid for all of them. Yet only the edges near the ``(1 - alpha)``-quantile of the scores
matter. ``PrivateConformal(method="rank", localize=...)`` therefore spends a public fraction of
the calibration set on finding where that quantile lies, and runs Theorem R on the rest of the
set with only the grid's edges there (``m_2`` of them: 44-1231 on the shared networks instead of
3915).

Mechanism
---------
``n`` public; ``f`` (the fraction), ``z = 2.5`` and the slopes are public constants.

1. *Partition.* A uniformly random permutation, drawn independently of the data, splits the
   ``n`` calibration scores into a localisation part of ``n_1 = round(f n)`` and a threshold
   part of ``n_2 = n - n_1``.
2. *Localise* (part 1). Two releases of Theorem R's rank mechanism on the ``n_1`` scores and
   the full grid ``E``, each at ``epsilon / 2``: ``lo`` with target ``k_lo = floor((n_1 + 1)(1 -
   alpha - delta))`` and slope ``1/3`` (its overshoot decays at ``epsilon/2 * 3/4`` per rank,
   so it seldom lands above the quantile), ``hi`` with target ``k_hi = ceil((n_1 + 1)(1 - alpha
   + delta))`` and slope ``3`` (its deficit decays at the same rate). The half-width

   .. math::  \\delta = z \\sqrt{\\alpha(1-\\alpha)/n_1} + \\log(m) / (0.375\\, \\epsilon\\, n_1)

   covers the sampling spread of an empirical quantile of ``n_1`` points (``z`` standard
   errors) and the rank error of the releases (``log m`` over the fast tail's rate).
3. *Release* (part 2). The grid ``E_2 = {0} ∪ {e in E : min(lo, hi) <= e <= max(lo, hi)} ∪
   {1}`` (``m_2`` bins) and Theorem R on the ``n_2`` scores: target ``k_2`` of
   :func:`~privcal.conformal.rank_target` ``(n_2, alpha, epsilon, m_2)``, slope
   :func:`~privcal.conformal.rank_slope` ``(m_2, epsilon)``, one release at ``epsilon``.

*Privacy (substitute, n public).* Fix the permutation (it is independent of the data, so a
mixture over it keeps the bound). The substituted example lies in one part. In part 2: the
part-1 releases have the same law on both neighbours, ``E_2`` is a function of them, and for
every fixed grid the part-2 release is epsilon-DP (Theorem R). In part 1: ``(lo, hi)`` is
``epsilon/2 + epsilon/2``-DP (basic composition), and the part-2 release reads only part-2
data, the same on both neighbours, so it adds no loss. Hence epsilon-DP: parallel composition
over the two disjoint parts, which :class:`~privcal.privacy.PrivacyReport` computes from the
three releases and their sources.

*Coverage.* The part-2 scores and the test score are i.i.d. and independent of part 1 (the
permutation does not look at the data). Given part 1, ``E_2`` is a fixed grid, so Theorem R
gives ``P(Y in C(X) | part 1) >= 1 - alpha``, and averaging over part 1 gives ``>= 1 - alpha``.
A window that misses the quantile costs set size, never coverage; ``k_2 > n_2`` gives the full
label set (coverage 1).

*When it pays.* The guard shrinks by about ``log(m/m_2)/lambda`` ranks of ``n_2`` while the
ranks themselves coarsen from ``1/(n+1)`` to ``1/(n_2+1)``, and the window must hold the
quantile (a window that misses it from below leaves only the edge 1 above the quantile: full
sets on that split, 12 of 20 000 splits on the shared networks at epsilon = 1, 11 of them
imdb APS, a binary task). Measured on the shared networks (``bench/RESULTS.md``, issue 13,
sixth pass; alpha = 0.1): at ``n = 5000``, epsilon = 1, ``f = 0.25`` every row's mean set size
is at or below one stage's but 20news APS (+0.06%), WRN-16-4 CIFAR-100 LAC going from 1.024x to
1.018x split conformal's; it also helps at epsilon 0.7 and 2 (``n = 5000``) and 0.5 (``n =
8000``), not at epsilon 4 (one stage's guard is 1 rank) nor at epsilon 0.5 with ``n = 5000``
(windows miss); at ``n = 3000`` imdb APS loses 2.4%, at ``n = 2000`` most rows lose. Hence
``"auto"`` localises with ``f = 0.25`` (:data:`LOCALIZE_FRACTION`) when ``n >= 4000``
(:data:`LOCALIZE_MIN_N`), one stage's guard is at least 3 ranks
(:data:`LOCALIZE_MIN_GUARD`), ``epsilon n_1 >= 1000`` (:data:`LOCALIZE_MIN_EPS_N1`) and part 2
has a valid target for any window; else one stage. All public.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from privcal._params import check_real
from privcal.conformal.quantile import _private_rank_quantile, rank_quantile_release
from privcal.privacy.guarantee import Release
from privcal.privacy.noise import NoiseSource, SeededNoise

__all__ = [
    "LOCALIZE_FRACTION",
    "LOCALIZE_MIN_EPS_N1",
    "LOCALIZE_MIN_GUARD",
    "LOCALIZE_MIN_N",
    "SOURCES",
    "Localization",
    "check_localize",
    "localization",
    "localized_release",
    "partition",
    "window_edges",
]

#: Smallest ``n`` at which ``localize="auto"`` spends part of the calibration set on localising.
LOCALIZE_MIN_N = 4000
#: The fraction ``f`` of the calibration set that ``localize="auto"`` spends on localising.
LOCALIZE_FRACTION = 0.25
#: ``"auto"`` localises only where one stage's guard ``k - ceil((n+1)(1-alpha))`` is at least
#: this many ranks (at epsilon = 4 it is 1 rank, and one stage is smaller)...
LOCALIZE_MIN_GUARD = 3
#: ... and where ``epsilon * n_1`` is at least this (the window's accuracy; at epsilon = 0.5,
#: ``n = 5000`` windows miss often enough that one stage is as small).
LOCALIZE_MIN_EPS_N1 = 1000.0
#: The slope of ``hi`` (and ``1 /`` that of ``lo``): the fast tail decays at ``eps/2 * 3/4``.
_WINDOW_SLOPE = 3.0
#: Standard errors of the empirical quantile that the window's half-width covers.
_WINDOW_Z = 2.5
#: Fewest points either part may hold.
_MIN_PART = 100

#: The source names of the two disjoint parts in the privacy report.
SOURCES = ("calibration: localisation part", "calibration: threshold part")


@dataclass(frozen=True)
class Localization:
    """The public quantities of stages 1 and 2 that do not depend on the data.

    Attributes
    ----------
    n1, n2 : int
        Sizes of the localisation and threshold parts.
    delta : float
        Half-width of the window in quantile level.
    k_lo, k_hi : int
        Targets of the two localisation releases (each at ``epsilon / 2``).
    """

    n1: int
    n2: int
    delta: float
    k_lo: int
    k_hi: int


def check_localize(localize: Any, method: str, owner: str) -> float | str | None:
    """Validate ``localize``: ``"auto"``, ``None`` or a fraction in ``(0, 0.5]`` (rank only)."""
    if localize is None or (isinstance(localize, str) and localize == "auto"):
        return localize
    if isinstance(localize, str) or isinstance(localize, bool):
        raise ValueError(
            f"The 'localize' parameter of {owner} must be 'auto', None or a fraction in (0, 0.5]. "
            f"Got {localize!r} instead."
        )
    f = check_real(localize, "localize", owner, low=0.0, low_open=True, high=0.5)
    if method != "rank":
        raise ValueError(
            f"The 'localize' parameter of {owner} applies to method='rank' only. Got "
            f"{localize!r} with method={method!r} instead (use localize=None or 'auto')."
        )
    return f


def localization(
    n: int, alpha: float, epsilon: float, m: int, method: str, localize: Any, owner: str
) -> Localization | None:
    """The two-stage plan for validated arguments, or ``None`` for one stage.

    ``"auto"``: :data:`LOCALIZE_FRACTION` when ``method == "rank"`` and ``n >=``
    :data:`LOCALIZE_MIN_N`, else one stage; the other conditions of ``"auto"`` need Theorem R's
    guard and are applied by :func:`privcal.conformal.private.localized.plan_localization`, which
    the estimator and the simulator call. A fraction ``f`` given by hand must lie in ``(0, 0.5]``
    and leave at least 100 points in each part.
    """
    f = check_localize(localize, method, owner)
    if f is None or method != "rank":
        return None
    if f == "auto":
        if n < LOCALIZE_MIN_N:
            return None
        f = LOCALIZE_FRACTION
    n1 = round(float(f) * n)
    if min(n1, n - n1) < _MIN_PART:
        raise ValueError(
            f"The 'localize' parameter of {owner} leaves {n1} of n = {n} calibration points for "
            f"localisation and {n - n1} for the threshold; each part needs at least {_MIN_PART}. "
            "Use a larger calibration set, another fraction, or localize=None."
        )
    delta = _WINDOW_Z * math.sqrt(alpha * (1.0 - alpha) / n1) + math.log(m) / (0.375 * epsilon * n1)
    k_lo = min(n1, max(1, math.floor((n1 + 1) * (1.0 - alpha - delta))))
    k_hi = min(n1, max(1, math.ceil((n1 + 1) * (1.0 - alpha + delta))))
    return Localization(n1, n - n1, delta, k_lo, k_hi)


def partition(n: int, noise: NoiseSource) -> np.ndarray:
    """A uniformly random permutation of ``range(n)``, independent of the data.

    Seeded noise draws it from its generator (reproducible); secure noise from a fresh
    ``numpy.random.default_rng()`` (operating-system entropy). The split need not be secret,
    only independent of the scores: the guarantee holds for every fixed permutation.
    """
    rng = noise.rng if isinstance(noise, SeededNoise) else np.random.default_rng()
    return rng.permutation(n)


def window_edges(edges: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """``E_2``: 0, the edges of ``edges`` in ``[min(lo, hi), max(lo, hi)]`` inside (0, 1), and 1."""
    a, b = min(lo, hi), max(lo, hi)
    inner = edges[(edges >= a) & (edges <= b) & (edges > 0.0) & (edges < 1.0)]
    return np.concatenate(([0.0], inner, [1.0]))


def localized_release(
    s1: np.ndarray, loc: Localization, epsilon: float, edges: np.ndarray, noise: NoiseSource
) -> tuple[float, float, list[Release]]:
    """Stage 1: ``(lo, hi)`` from the localisation scores ``s1`` and their two release records."""
    half = epsilon / 2.0
    lo = _private_rank_quantile(s1, loc.k_lo, 1.0 / _WINDOW_SLOPE, half, edges, noise)
    hi = _private_rank_quantile(s1, loc.k_hi, _WINDOW_SLOPE, half, edges, noise)
    m = edges.size - 1
    releases = [
        rank_quantile_release(k, m, r, half, SOURCES[0], f" [window {side}]")
        for side, k, r in (("lo", loc.k_lo, 1.0 / _WINDOW_SLOPE), ("hi", loc.k_hi, _WINDOW_SLOPE))
    ]
    return lo, hi, releases

"""Theorem L: localise the threshold on part of the calibration set, release it on the rest.

Theorem R's guard (:mod:`privcal.conformal.private.rank`) grows with ``log m``, yet only the grid
edges near the ``(1 - alpha)``-quantile matter. ``PrivateConformal(method="rank", localize=...)``
spends a public fraction ``f`` of the calibration set on finding that quantile and runs Theorem R
on the rest with only the edges there.

*Mechanism* (``n`` public; ``f``, ``z = 2.5`` and the slopes public constants).

1. *Partition.* A uniformly random permutation, drawn independently of the data
   (:func:`partition`), splits the scores into ``n_1 = round(f n)`` and ``n_2 = n - n_1``.
2. *Localise* (part 1). Two releases of Theorem R's rank mechanism on the full grid ``E``, each
   at ``epsilon / 2``: ``lo`` at target ``k_lo = floor((n_1 + 1)(1 - alpha - delta))``, slope
   ``1/3``, and ``hi`` at ``k_hi = ceil((n_1 + 1)(1 - alpha + delta))``, slope ``3``, with

   .. math::  \\delta = z \\sqrt{\\alpha(1-\\alpha)/n_1} + \\log(m) / (0.375\\, \\epsilon\\, n_1).

3. *Release* (part 2). Theorem R on the ``n_2`` scores over ``E_2 = {0} ∪ {e in E : min(lo, hi)
   <= e <= max(lo, hi)} ∪ {1}`` (:func:`window_edges`, ``m_2`` bins), target
   :func:`~privcal.conformal.rank_target` ``(n_2, alpha, epsilon, m_2)``, slope
   :func:`~privcal.conformal.rank_slope` ``(m_2, epsilon)``, at ``epsilon``.

*Privacy (substitute one calibration example, n public).* Epsilon-DP: the two parts are
disjoint and the split ignores the data, so a substituted example changes part 1 (two releases,
``epsilon/2 + epsilon/2``) or part 2 (one release at ``epsilon`` for every window), never both;
:class:`~privcal.privacy.PrivacyReport` composes the three releases in parallel over the two
sources (:data:`SOURCES`).

*Coverage.* Given part 1, ``E_2`` is a fixed grid and Theorem R gives ``P(Y in C(X)) >= 1 -
alpha``; a window that misses the quantile costs set size, never coverage.

``"auto"`` localises with ``f = 0.25`` (:data:`LOCALIZE_FRACTION`) when ``n >=``
:data:`LOCALIZE_MIN_N`, one stage's guard is at least :data:`LOCALIZE_MIN_GUARD` ranks,
``epsilon n_1 >=`` :data:`LOCALIZE_MIN_EPS_N1` and part 2 has a valid target for any window (all
public); where that pays is measured in docs/conformal.md#private-prediction-sets-privateconformal.

Proof: docs/conformal.md#proof-of-theorem-l.
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
    if isinstance(localize, str | bool):
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
    :data:`LOCALIZE_MIN_N` (the conditions that need Theorem R's guard:
    :func:`privcal.conformal.private.localized.plan_localization`). A fraction given by hand
    must leave at least 100 points in each part.
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
    ends = (("lo", loc.k_lo, 1.0 / _WINDOW_SLOPE), ("hi", loc.k_hi, _WINDOW_SLOPE))
    lo, hi = (_private_rank_quantile(s1, k, r, half, edges, noise) for _, k, r in ends)
    releases = [
        rank_quantile_release(k, edges.size - 1, r, half, SOURCES[0], f" [window {side}]")
        for side, k, r in ends
    ]
    return lo, hi, releases

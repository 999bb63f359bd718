"""Theorem L run on Theorem R: the two-stage threshold of ``method="rank"`` (``localize=``).

Window on a localisation part, then the rank mechanism (:mod:`~privcal.conformal.private.rank`)
on the threshold part with only the window's edges. The mechanism, its privacy (parallel
composition over the two disjoint parts: ``epsilon`` in total under substitute with ``n``
public) and its coverage (Theorem R given part 1) are stated and proved in
:mod:`privcal.conformal.localize`. One implementation for :class:`~privcal.conformal.
PrivateConformal` and :meth:`~privcal.conformal.simulate.SplitSimulator.private`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from privcal.conformal.localize import (
    LOCALIZE_MIN_EPS_N1,
    LOCALIZE_MIN_GUARD,
    SOURCES,
    Localization,
    localization,
    localized_release,
    partition,
    window_edges,
)
from privcal.conformal.private.mechanism import Plan, conformal_plan
from privcal.conformal.private.rank import RANK, _rank_slope, _rank_target
from privcal.conformal.split import conformal_rank
from privcal.privacy.guarantee import Release
from privcal.privacy.noise import NoiseSource

__all__ = ["localization_terms", "localized_threshold", "plan_localization"]


def plan_localization(
    n: int, alpha: float, epsilon: float, plan: Plan, method: str, localize: Any, owner: str
) -> Localization | None:
    """:func:`~privcal.conformal.localize.localization`; ``"auto"`` keeps one stage unless one
    stage's guard is at least :data:`~privcal.conformal.localize.LOCALIZE_MIN_GUARD` ranks,
    ``epsilon n_1 >=`` :data:`~privcal.conformal.localize.LOCALIZE_MIN_EPS_N1` and the
    threshold part has a valid target for a window holding every edge (the largest guard).
    Public checks."""
    loc = localization(n, alpha, epsilon, plan.n_bins, method, localize, owner)
    if loc is None or localize != "auto":
        return loc
    r = _rank_slope(plan.n_bins, epsilon)
    guard = plan.rank - conformal_rank(n, alpha)
    if guard < LOCALIZE_MIN_GUARD or epsilon * loc.n1 < LOCALIZE_MIN_EPS_N1:
        return None
    return loc if _rank_target(loc.n2, alpha, epsilon, plan.n_bins, r) <= loc.n2 else None


def localized_threshold(
    s: np.ndarray,
    loc: Localization,
    alpha: float,
    epsilon: float,
    plan: Plan,
    slope: Any,
    noise: NoiseSource,
) -> tuple[float, Plan, tuple[float, float], list[Release]]:
    """Theorem L on the calibration scores ``s``: ``(threshold, part-2 plan, window, releases)``.

    ``threshold`` is ``inf`` when ``k_2 > n_2`` (full sets; the part-1 releases were still made
    and are returned).
    """
    order = partition(s.size, noise)
    s1, s2 = s[order[: loc.n1]], s[order[loc.n1 :]]
    lo, hi, releases = localized_release(s1, loc, epsilon, plan.edges, noise)
    edges2 = window_edges(plan.edges, lo, hi)
    window = (min(lo, hi), max(lo, hi))
    if edges2.size < 3:  # a grid of 2 bins with lo = hi = 1: the only edge is 1, full sets
        return math.inf, Plan(RANK.name, edges2, 1, 1.0, False), window, releases
    plan2 = conformal_plan(loc.n2, alpha, epsilon, RANK.name, edges2, "auto", slope)
    if not plan2.valid:
        return math.inf, plan2, window, releases
    value, release = RANK.release(s2, plan2, epsilon, noise, SOURCES[1])
    releases.append(release)
    return value, plan2, window, releases


def localization_terms(loc: Localization) -> list[str]:
    """The report's public lines of a localised fit (in place of the one-stage tuning lines)."""
    return [
        f"localisation (Theorem L): n_1 = {loc.n1} and n_2 = {loc.n2} points, split "
        "by a random permutation drawn independently of the data",
        f"window targets k_lo = {loc.k_lo}, k_hi = {loc.k_hi} (delta = "
        f"{loc.delta:.4g}), two releases at epsilon/2 on part 1",
        "the part-2 grid (the edges between the window's ends), its slope and the "
        "target rank k_2 (Theorem R from n_2) are functions of the part-1 releases",
    ]

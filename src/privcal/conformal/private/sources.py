"""Private prediction sets across private data sources: one noisy pooled histogram, one threshold.

Each of ``K`` sources answers one query, :meth:`~privcal.private.DataSource.score_histogram`: the
counts of its calibration scores in the ``m`` public bins ``(e_{j-1}, e_j]`` of a grid fixed
before the data. With ``aggregation="local"`` each count carries the source's own Laplace noise;
with ``"distributed"`` each source uploads its exact counts plus a discrete Laplace share to a
secure sum, so the pooled counts carry the noise of one release. The threshold is computed from
the pooled noisy counts ``H~`` alone (post-processing):

* ``U~_j = sum_{i > j} H~_i`` (the noisy number of scores above ``e_j``; ``U~_m = 0`` exactly),
  ``N~ = U~_0`` (the noisy number of scores: ``n`` is never read);
* ``J = min{j : U~_j <= alpha (N~ + 1) - 1 - t}`` (``J = m``, the full set, when none, and
  whenever ``N~ < 3 t / alpha``, too few scores for the margin), with the public margin
  ``t = sqrt(m v)``, ``v`` the public noise variance of one pooled count;
* the sets are ``{y : S(x, y) <= e_J}``.

**Theorem S (coverage).** Let the ``n`` pooled calibration scores and a test score be
exchangeable, and let the noise ``eta_1..eta_m`` of the pooled counts be independent of the
data, independent across bins and symmetric (Laplace, a sum of Laplace, a discrete Laplace or a
sum of its shares: all are). Then ``P(S_{n+1} <= e_J) >= 1 - alpha - r_n``, with
``r_n = alpha^2 m v / (4 (n + 1) (alpha (n + 1) - t))`` for ``alpha (n + 1) > t``, and
``P(S_{n+1} <= e_J) >= 1 - alpha - alpha^3 / 8`` for every ``n`` (``1.25e-4`` at
``alpha = 0.1``): the same form as the single-party theorem.

Proof: docs/conformal.md#proof-of-theorem-s.

**Privacy.** Each source's answer is ``epsilon``-DP for add/remove one of its examples
(:meth:`~privcal.private.DataSource.score_histogram`: L1 sensitivity 1; with ``"distributed"``,
against the aggregator while ``threshold`` sources are honest: :meth:`DataSource.share`); the
sources hold disjoint rows (checked), so the fit is ``epsilon``-DP per example of each source,
and the threshold and every set are post-processing. Public: ``K``, the grid, ``alpha``, ``t``,
the score function and the model; each source's ``n`` stays private.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass
from typing import Any

import numpy as np

from privcal.privacy.distributed import AggregatorView
from privcal.privacy.guarantee import Release
from privcal.private.parallel import answer_all, share_all
from privcal.private.queries import RowPart
from privcal.private.source import DataSource

__all__ = [
    "ABOVE_BINS",
    "SOURCE_BINS",
    "STAGE1_BINS",
    "WINDOW_BINS",
    "PooledHistogram",
    "check_sources_score",
    "coverage_slack",
    "noise_margin",
    "pooled_histogram",
    "pooled_threshold",
    "split_counts",
    "split_key",
    "staged_thresholds",
    "suffix_counts",
    "window",
    "window_edges",
]

#: ``m`` of ``n_bins="auto"`` over sources in one stage (``localize=None``): logit-spaced bins
#: (the margin grows as sqrt(m), the rounding to an edge shrinks as 1/m).
SOURCE_BINS = 256
#: Two stages (the default): stage 1's logit-spaced bins, then stage 2's bins inside the window
#: and above it.
STAGE1_BINS = 64
WINDOW_BINS = 64
ABOVE_BINS = 4


@dataclass(frozen=True)
class PooledHistogram:
    """The pooled noisy counts of one fit over sources and what the aggregator saw.

    Attributes
    ----------
    counts : ndarray of shape (m,)
        ``H~``: the sum of the sources' noisy counts (or the decoded secure sum).
    variance : float
        ``v``: the public noise variance of one pooled count.
    releases : list of Release
        Every source's release, labelled by source.
    views : list of AggregatorView
        With ``"distributed"``, the aggregator's view of the secure sum (empty otherwise).
    """

    counts: np.ndarray
    variance: float
    releases: list[Release]
    views: list[AggregatorView]


def pooled_histogram(
    sources: list[DataSource],
    labels: list[str],
    edges: np.ndarray | list[np.ndarray],
    score: str,
    epsilon: float,
    aggregation: str,
    threshold: int | None,
    part: tuple[int, float, int] | None = None,
    by: str | None = None,
) -> PooledHistogram:
    """Ask every source for its score histogram once (``epsilon`` each) and pool the answers
    (``part``: the side of the row split every source counts; ``by="predicted"``: ``edges`` is
    one grid per predicted class and the counts are concatenated)."""
    k = len(sources)
    query: dict[str, Any] = {"edges": edges, "score": score, "part": part}
    if by is not None:
        query["by"] = by
    before = [len(src.history) for src in sources]
    views: list[AggregatorView] = []
    if aggregation == "distributed":
        view, plan, finish = share_all(
            sources, "score_histogram", epsilon, int(threshold or k), **query
        )
        counts = np.asarray(finish(plan.release(view)), dtype=np.float64)
        variance = plan.law.variance(k) / plan.encoding.scale**2
        views.append(view)
    else:
        answers = answer_all(sources, "score_histogram", epsilon=epsilon, **query)
        counts = np.sum(np.asarray(answers, dtype=np.float64), axis=0)
        variance = k * 2.0 / epsilon**2  # k independent Laplace(1 / epsilon) per count
    side = None if part is None else RowPart(*part)  # disjoint sides compose in parallel
    releases = [
        r.for_source(label if side is None else side.label(label))
        for src, label, b in zip(sources, labels, before, strict=True)
        for r in src.history[b:]
    ]
    return PooledHistogram(counts, float(variance), releases, views)


def suffix_counts(counts: np.ndarray) -> np.ndarray:
    """``U~_0 = N~, ..., U~_m = 0``: the noisy number of scores above each edge."""
    return np.append(np.cumsum(counts[::-1])[::-1], 0.0)


def window(counts: np.ndarray, alpha: float, variance: float) -> tuple[int, int]:
    """Stage 1: the edges ``(lo, hi)`` between which the ``(1 - alpha)``-quantile lies with high
    probability: the noisy fraction above ``e_lo`` is at least ``alpha + w`` and above ``e_hi``
    at most ``alpha - w``, ``w`` three standard errors (noise and sampling). Post-processing of
    the stage-1 release; a wrong window costs set size, never coverage (Theorem S holds on any
    grid fixed before the stage-2 rows)."""
    m = counts.size
    n1 = max(float(counts.sum()), 1.0)
    w = 3.0 * (noise_margin(m, variance) / n1 + math.sqrt(alpha * (1.0 - alpha) / n1))
    frac = suffix_counts(counts) / n1
    below = np.flatnonzero(frac >= alpha + w)
    above = np.flatnonzero(frac <= alpha - w)
    lo = int(below[-1]) if below.size else 0
    hi = int(above[0]) if above.size else m
    return min(lo, m - 1), max(hi, lo + 1)


def window_edges(coarse: np.ndarray, fine: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Stage 2's grid: one bin below ``coarse[lo]``, :data:`WINDOW_BINS` bins of ``fine``
    inside the window, at most :data:`ABOVE_BINS` bins of ``coarse`` above it."""
    inside = fine[(fine >= coarse[lo]) & (fine <= coarse[hi])]
    pick = np.unique(np.linspace(0, inside.size - 1, min(WINDOW_BINS, inside.size - 1) + 1))
    top = coarse[hi:]
    up = np.unique(np.linspace(0, top.size - 1, min(ABOVE_BINS, top.size - 1) + 1))
    edges = np.concatenate([[0.0], inside[pick.round().astype(int)], top[up.round().astype(int)]])
    return np.unique(np.append(edges, 1.0))


def noise_margin(m: int, variance: float) -> float:
    """``t = sqrt(m v)``: bounds ``E|S_0|``, the mean absolute noise of all ``m`` counts."""
    return math.sqrt(m * variance)


def pooled_threshold(counts: np.ndarray, alpha: float, margin: float, guard: float = 3.0) -> int:
    """``J``: the smallest ``j`` with ``U~_j <= alpha (N~ + 1) - 1 - t`` (``m`` when none, or
    when ``N~ < guard t / alpha``; Theorem S's uniform bound takes ``guard = 3``, its ``r_n``
    holds for every ``guard >= 0``)."""
    upper = suffix_counts(counts)
    if upper[0] < guard * margin / alpha:  # too few scores for the margin: the full set
        return int(counts.size)
    ok = np.flatnonzero(upper <= alpha * (upper[0] + 1.0) - 1.0 - margin)
    return int(ok[0]) if ok.size else int(counts.size)


def coverage_slack(n: float, alpha: float, m: int, variance: float) -> float:
    """``r_n`` of Theorem S (``inf`` when ``alpha (n + 1) <= t``)."""
    t = noise_margin(m, variance)
    room = alpha * (n + 1.0) - t
    if room <= 0:
        return math.inf
    return alpha**2 * m * variance / (4.0 * (n + 1.0) * room)


def split_key(noise: Any, seed: int | None) -> int:
    """The public key of the row split, drawn independently of the data: from the OS CSPRNG
    under secure noise, from ``seed`` when the noise is seeded (a reproducible simulation)."""
    if noise is None or getattr(noise, "secure", True) or seed is None:
        return secrets.randbits(63)
    return int(np.random.default_rng(seed).integers(2**63))


def staged_thresholds(
    ask: Any, grids: list[np.ndarray], alpha: float, fine: np.ndarray, part: Any
) -> tuple[list[np.ndarray], list[PooledHistogram], list[float], list[tuple[float, float]]]:
    """Theorem S for each group's grid in ``grids`` (one group: the pooled fit).

    ``ask(grids, part)`` releases every group's histogram in one query. With ``part`` (``None``:
    one stage), side 0's answer gives each group a window (:func:`window`) and side 1 answers on
    each group's stage-2 grid (:func:`window_edges` of ``fine``). Returns the final grids, the
    stages' releases, each group's threshold (``inf``: the full set) and each window.
    """
    stages: list[PooledHistogram] = []
    windows = [(0.0, 1.0)] * len(grids)
    if part is not None:
        first = ask(grids, (*part, 0))
        stages.append(first)
        new, windows = [], []
        for e, counts in zip(grids, split_counts(first.counts, grids), strict=True):
            lo, hi = window(counts, alpha, first.variance)
            windows.append((float(e[lo]), float(e[hi])))
            new.append(window_edges(e, fine, lo, hi))
        grids = new
    stages.append(ask(grids, None if part is None else (*part, 1)))
    last = stages[-1]
    thresholds = []
    for e, counts in zip(grids, split_counts(last.counts, grids), strict=True):
        j = pooled_threshold(counts, alpha, noise_margin(e.size - 1, last.variance))
        thresholds.append(math.inf if j == e.size - 1 else float(e[j]))
    return grids, stages, thresholds, windows


def split_counts(counts: np.ndarray, grids: list[np.ndarray]) -> list[np.ndarray]:
    """The concatenated counts of ``grids`` (one block of ``len(e) - 1`` per grid), split."""
    return np.split(np.asarray(counts), np.cumsum([e.size - 1 for e in grids])[:-1])


def check_sources_score(score: str, calibrator: Any, owner: str) -> None:
    """Sources compute LAC or APS on the softmax of their logits: refuse the rest up front."""
    if score not in ("lac", "aps"):
        raise ValueError(
            f"The 'score' parameter of {owner} must be 'lac' or 'aps' with sources=[...] (a "
            f"source computes its scores itself; randomised APS is not offered). Got {score!r}."
        )
    if calibrator is not None:
        raise ValueError(
            f"The 'calibrator' parameter of {owner} must be None with sources=[...]: each "
            "source scores the softmax of its own logits. Calibrate the logits before building "
            "the sources instead."
        )

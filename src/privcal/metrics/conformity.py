"""Conformity scores for classification: LAC and APS (non-randomised and randomised), and
their histogram on a public grid.

A conformity score :math:`S(x, y) \\in [0, 1]` is small when label ``y`` conforms to the model's
output at ``x``. Split conformal prediction returns the set :math:`\\{y : S(x, y) \\le \\hat s\\}`
for a threshold :math:`\\hat s` fitted on held-out calibration data (seed 002, Eq. 2).

Both functions take an ``N x C`` matrix of probabilities (the softmax of the logits, or the
output of a fitted calibrator) and return the ``N x C`` matrix of scores of **every** label, so
that the calibration score of example ``i`` is ``S[i, y_i]`` and the prediction set of a test
point is one row compared with the threshold.

* **LAC** (least ambiguous set-valued classifier, Sadinle, Lei & Wasserman 2019; the score of the
  seed paper's experiments): :math:`S(x, y) = 1 - p_y(x)`.
* **APS** (adaptive prediction sets, Romano, Sesia & Candès 2020): with the labels sorted by
  decreasing probability, :math:`S(x, y) = \\sum_{y' : p_{y'} > p_y} p_{y'} + u \\, p_y`, the
  probability mass of the labels ranked strictly above ``y`` plus a fraction ``u`` of ``p_y``.
  Non-randomised APS takes ``u = 1`` (the mass ranked above ``y``, ``y`` included); randomised APS
  draws ``u ~ U(0, 1)`` once per example. Ties in probability are broken by label index (a stable
  sort), so every label gets a distinct rank.

Scores are clipped to ``[0, 1]`` (cumulative sums of float probabilities can exceed 1 by a few
ulps), which the private quantile requires.

They live here, below the conformal estimators, because a private data source
(:class:`~privcal.private.DataSource`) computes the same statistic (:func:`score_histogram`) for
prediction sets across parties; :mod:`privcal.conformal.scores` is their public path.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "SCORES",
    "aps_scores",
    "conformity",
    "grouped_score_histogram",
    "lac_scores",
    "score_histogram",
]

#: Names accepted by ``SplitConformal(score=...)`` and ``PrivateConformal(score=...)``.
SCORES: tuple[str, ...] = ("lac", "aps", "aps-randomized")


def _probs(probs: Any) -> np.ndarray:
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 2:
        raise ValueError(f"'probs' must be an N x C matrix of probabilities; got shape {p.shape}.")
    return p


def lac_scores(probs: Any) -> np.ndarray:
    """LAC scores :math:`S(x, y) = 1 - p_y(x)` of every label.

    Parameters
    ----------
    probs : array_like of shape (N, C)
        Probabilities (rows sum to 1).

    Returns
    -------
    ndarray of shape (N, C)
        Scores in ``[0, 1]``.

    Examples
    --------
    >>> lac_scores([[0.7, 0.2, 0.1]]).round(2)
    array([[0.3, 0.8, 0.9]])
    """
    return np.clip(1.0 - _probs(probs), 0.0, 1.0)


def aps_scores(probs: Any, u: Any = None) -> np.ndarray:
    """APS scores of every label: the probability mass ranked above ``y`` plus ``u p_y``.

    Parameters
    ----------
    probs : array_like of shape (N, C)
        Probabilities (rows sum to 1).
    u : None or array_like of shape (N,)
        ``None`` gives non-randomised APS (``u = 1``). Otherwise one value in ``[0, 1]`` per
        example (randomised APS draws ``u ~ U(0, 1)``; pass the same draws you would use at test
        time, the guarantee needs calibration and test ``u`` to be i.i.d.).

    Returns
    -------
    ndarray of shape (N, C)
        Scores in ``[0, 1]``; with ``u = None`` the top label has score ``p_max`` and the lowest
        ranked label has score 1.

    Notes
    -----
    With the labels sorted by decreasing probability (stable, so ties go by label index) and
    ``c_r`` the cumulative sum up to rank ``r`` included, the label at rank ``r`` has score
    ``c_r - (1 - u) p_(r)``. One ``argsort`` and one ``cumsum`` per call (``O(N C log C)``).

    Examples
    --------
    >>> aps_scores([[0.2, 0.7, 0.1]]).round(2)
    array([[0.9, 0.7, 1. ]])
    >>> aps_scores([[0.2, 0.7, 0.1]], u=[0.5]).round(2)
    array([[0.8 , 0.35, 0.95]])
    """
    p = _probs(probs)
    order = np.argsort(-p, axis=1, kind="stable")
    sorted_p = np.take_along_axis(p, order, axis=1)
    cum = np.cumsum(sorted_p, axis=1)
    if u is not None:
        uu = np.asarray(u, dtype=np.float64).reshape(-1)
        if uu.shape[0] != p.shape[0] or not np.all((uu >= 0.0) & (uu <= 1.0)):
            raise ValueError(
                f"'u' must hold one value in [0, 1] per row of probs ({p.shape[0]}); got "
                f"shape {uu.shape}."
            )
        cum = cum - (1.0 - uu[:, None]) * sorted_p
    out = np.empty_like(p)
    np.put_along_axis(out, order, cum, axis=1)
    return np.clip(out, 0.0, 1.0)


def conformity(score: str, probs: np.ndarray, u: np.ndarray | None = None) -> np.ndarray:
    """Score matrix for a score name of :data:`SCORES` (``u`` is used by ``"aps-randomized"``)."""
    if score == "lac":
        return lac_scores(probs)
    if score == "aps":
        return aps_scores(probs)
    return aps_scores(probs, u)


def score_histogram(scores: Any, edges: np.ndarray) -> np.ndarray:
    """Counts of ``scores`` in the bins ``(e_{j-1}, e_j]`` of the public grid ``edges``.

    ``edges`` is increasing with ``e_0 = 0`` and ``e_m = 1``; a score of exactly 0 counts in the
    first bin, so the ``m`` counts sum to the number of scores (all in ``[0, 1]``). The number of
    scores above ``e_j`` is the sum of the counts after bin ``j``; the set
    ``{y : S(x, y) <= e_j}`` keeps a calibration score exactly when it lies in bins ``1..j``.
    One example adds 1 to exactly one count.
    """
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    bins = np.clip(np.searchsorted(edges, s, side="left"), 1, edges.size - 1) - 1
    return np.bincount(bins, minlength=edges.size - 1).astype(np.float64)


def grouped_score_histogram(scores: Any, groups: Any, edges: list[np.ndarray]) -> np.ndarray:
    """:func:`score_histogram` of each group's scores on that group's grid, concatenated.

    ``groups[i]`` in ``0..G-1`` is row ``i``'s group and ``edges[g]`` group ``g``'s grid; the
    result holds ``sum_g (len(edges[g]) - 1)`` counts, group 0's first. One example adds 1 to
    exactly one count.
    """
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    g = np.asarray(groups).reshape(-1)
    return np.concatenate([score_histogram(s[g == k], e) for k, e in enumerate(edges)])

"""The differentially private quantile of seed 002 (Algorithm 2), with two valid weightings.

Setting
-------
Scores :math:`s_1, \\dots, s_n \\in [0, 1]`; public bin edges
:math:`0 = e_0 < e_1 < \\dots < e_m = 1` with bins :math:`I_1 = [e_0, e_1]` and
:math:`I_j = (e_{j-1}, e_j]` for ``j >= 2`` (the paper writes :math:`(e_0, e_1]`; a score of
exactly 0 goes to the first bin). The discretised score :math:`[s_i]` is the right edge of its
bin. The candidates are the ``m`` edges :math:`e_1, \\dots, e_m`; for level :math:`q \\in (0, 1)`

.. math::

    w_j = \\max\\Big(\\frac{\\#\\{i : [s_i] < e_j\\}}{q},\\;
                     \\frac{\\#\\{i : [s_i] > e_j\\}}{1 - q}\\Big),

the utility of :math:`e_j` is :math:`-w_j` (small when :math:`e_j` splits the scores ``q : 1-q``),
and the release is :math:`e_J` with :math:`P(J = j) \\propto \\exp(-\\epsilon w_j / r(q))`, where
the *scale* ``r(q)`` (:func:`quantile_scale`) is one of

* ``weights="bounded-range"`` (the default): :math:`r = R = 1/q + 1/(1-q) = 1/(q(1-q))`, i.e.
  weights :math:`\\exp(-\\epsilon q(1-q) w_j)` (derived below, "Bounded range");
* ``weights="sensitivity"`` (seed 002 with the scaling corrected in issue 12,
  :func:`quantile_sensitivity`): :math:`r = 2\\Delta = 2\\max(1/q, 1/(1-q))`.

Since :math:`1/q + 1/(1-q) \\le 2\\max(1/q, 1/(1-q))` the bounded-range scale is never larger:
equal at ``q = 1/2``, :math:`1.8\\times` smaller at ``q = 0.9`` (less noise, same epsilon).

Bin edges (:func:`bin_edges`) are public and fixed before the data are seen: ``grid="uniform"``
gives ``m`` equal-width bins (seed 002); ``grid="logit"`` (:func:`logit_edges`) spaces the inner
edges evenly in :math:`\\operatorname{logit}(s) = \\log(s/(1-s))` on :math:`[-T, T]`,
:math:`T =` :data:`LOGIT_SPAN`, so the bins are fine near 0 *and* near 1, where the scores of
confident networks crowd (APS scores of correct predictions are :math:`p_{\\max} \\approx 1`, LAC
scores :math:`1 - p_y \\approx 0`). They depend on ``m`` alone, never on the scores.

Sensitivity (the derivation behind :func:`quantile_sensitivity`)
-------------------------------------------------------------------
Write :math:`L_j = \\#\\{i : [s_i] < e_j\\}` and :math:`U_j = \\#\\{i : [s_i] > e_j\\}`, so
:math:`w_j = \\max(L_j/q, U_j/(1-q))`. ``q``, the edges and ``epsilon`` are public. Both
neighbouring relations give the same bound, so one weight serves both:

* **Add/remove one score** :math:`s` (``n`` changes). For every ``j`` exactly one of
  :math:`[s] < e_j` (``L_j`` moves by 1), :math:`[s] > e_j` (``U_j`` moves by 1) or
  :math:`[s] = e_j` (neither moves) holds.
* **Substitute one score** :math:`s \\to s'` (``n`` fixed and public). Swapping the roles of
  ``D`` and ``D'`` if needed, :math:`[s] \\le [s']`. Then
  :math:`L_j(D') - L_j(D) = 1[[s'] < e_j] - 1[[s] < e_j] \\in \\{-1, 0\\}` (since
  :math:`[s'] < e_j` implies :math:`[s] < e_j`) and likewise
  :math:`U_j(D') - U_j(D) \\in \\{0, +1\\}`: each count moves by at most one, and both move (in
  opposite directions) for the edges strictly between :math:`[s]` and :math:`[s']`.

In both cases :math:`|L_j(D) - L_j(D')| \\le 1` and :math:`|U_j(D) - U_j(D')| \\le 1` for every
``j``, and since :math:`|\\max(a, b) - \\max(a', b')| \\le \\max(|a - a'|, |b - b'|)`,

.. math::  \\Delta = \\max_j |w_j(D) - w_j(D')| \\le \\max(1/q,\\; 1/(1-q)),

attained (e.g. :math:`s = 0 \\to s' = 1` at an edge where :math:`U_j/(1-q)` is the larger term
on both sides, for ``q >= 1/2``). The exponential mechanism (McSherry & Talwar 2007; Dwork & Roth
2014, Thm. 3.10) with utility :math:`-w_j` and weights :math:`\\exp(-\\epsilon w_j / (2\\Delta))` is
therefore :math:`\\epsilon`-DP for either relation: the weight ratio is at most
:math:`e^{\\epsilon/2}` and so is the ratio of the normalisers. The weight does not involve ``n``,
which is why add/remove also holds for :func:`private_quantile` on its own; a caller that derives
``q`` or the edges from ``n`` (as :class:`~privcal.conformal.PrivateConformal` does) must declare
``n`` public and use ``relation="substitute"``.

*How much of epsilon is really lost* for the ``"sensitivity"`` weights (this explains
the audits' lower bounds). Under add/remove
all :math:`w_j` move in the same direction, so the loss is at most :math:`\\epsilon/2`. Under
substitute with :math:`[s] \\le [s']`, every :math:`w_j(D') - w_j(D)` lies in :math:`[-1/q,
1/(1-q)]` (the first term can only drop, the second only rise), an interval of width
:math:`R = 1/q + 1/(1-q)`. If every utility difference lies in :math:`[c, c + R]`, the weight
ratio of ``j`` is :math:`e^{\\epsilon d_j/(2\\Delta)}` (:math:`d_j = w_j(D') - w_j(D)`) and the
ratio :math:`Z(D)/Z(D')` of the normalisers lies between :math:`e^{\\epsilon c/(2\\Delta)}` and
:math:`e^{\\epsilon (c+R)/(2\\Delta)}`, so the loss is at most
:math:`\\epsilon R/(2\\Delta) = \\epsilon / (2\\max(q, 1-q))`: ``epsilon`` at ``q = 1/2``, about
:math:`0.52\\epsilon` at the adjusted levels of :class:`~privcal.conformal.PrivateConformal`. (The
same bounded-range argument, Durfee & Rogers 2019, with the scale chosen for it, is the
``"bounded-range"`` weighting: see the next section.)

*The paper's Algorithm 2 prints* :math:`\\exp(-\\epsilon w_j / 2)`, i.e. :math:`\\Delta = 1`. By
the bounded-range argument its loss is at most :math:`\\epsilon R / 2` (``5.9 epsilon`` at
``q = 0.906``; the sensitivity argument gives :math:`\\epsilon \\max(1/q, 1/(1-q))`): not
``epsilon``-DP. Lemma 1 (the utility bound with :math:`2 \\max(1/q, 1/(1-q)) \\log(m/\\delta) /
\\epsilon`) and hence Theorem 2 assume the scaled weights used here. The authors' code scales by
:math:`\\min(\\alpha, 1-\\alpha)` (i.e. :math:`\\Delta = 1/\\alpha`). The sensitivity argument
cannot certify that once :math:`\\tilde q > 1 - \\alpha` (always the case for the level of
:class:`~privcal.conformal.PrivateConformal`), but the bounded-range argument does: the loss is
at most :math:`\\epsilon \\min(\\alpha, 1-\\alpha) R / 2` (``0.59 epsilon`` at seed 002's
``alpha = 0.1, n = 5000, epsilon = 1``, ``q~ = 0.906``), so it is ``epsilon``-DP whenever
:math:`\\tilde q (1 - \\tilde q) \\ge \\min(\\alpha, 1-\\alpha) / 2`. The difference from the
``"sensitivity"`` weights here is the scale (``epsilon alpha / 2`` against ``epsilon (1 - q) /
2``, 6% less noise at that level), not the validity.
``tests/statistical/test_conformal_audit.py`` audits both: the scaled version passes, the
unscaled one fails. The deployed path (:func:`private_quantile` and ``PrivateConformal`` with
their defaults and ``SecureNoise``) is audited by :mod:`privcal.audits.conformal`.

Bounded range (the derivation behind ``weights="bounded-range"``)
------------------------------------------------------------------
*Claim.* With :math:`R = 1/q + 1/(1-q)` the weights :math:`\\exp(-\\epsilon w_j / R)` give an
:math:`\\epsilon`-DP release under **both** relations.

*Utility differences.* Write :math:`d_j = w_j(D') - w_j(D)`.

* Substitute :math:`s \\to s'` with :math:`[s] \\le [s']` (otherwise swap ``D`` and ``D'``): the
  first term of the max moves by :math:`a_j \\in \\{-1/q, 0\\}` and the second by
  :math:`b_j \\in \\{0, 1/(1-q)\\}` (above). As :math:`\\max(x + a, y + b) - \\max(x, y)` lies
  between :math:`\\min(a, b)` and :math:`\\max(a, b)`, every :math:`d_j \\in [-1/q, 1/(1-q)]`, an
  interval of width ``R`` that is the same for every ``j`` (it depends only on the direction of
  the substitution).
* Add one score (remove is the mirror image): each of ``L_j``, ``U_j`` rises by 0 or 1, so
  :math:`d_j \\in [0, \\max(1/q, 1/(1-q))]`, an interval of width :math:`\\Delta < R`.

*Privacy (bounded range, Durfee & Rogers 2019).* Suppose every :math:`d_j \\in [c, c + R]` for a
``c`` that does not depend on ``j``. With :math:`Z(D) = \\sum_k e^{-\\epsilon w_k(D)/R}`,

.. math::

    \\frac{P_D(j)}{P_{D'}(j)} = e^{\\epsilon d_j / R}\\,\\frac{Z(D')}{Z(D)},\\qquad
    \\frac{Z(D')}{Z(D)} = \\frac{\\sum_k e^{-\\epsilon w_k(D)/R}\\, e^{-\\epsilon d_k/R}}{Z(D)}
    \\in \\big[e^{-\\epsilon (c + R)/R},\\; e^{-\\epsilon c/R}\\big],

so the ratio lies in :math:`[e^{\\epsilon (c - c - R)/R}, e^{\\epsilon (c + R - c)/R}] =
[e^{-\\epsilon}, e^{\\epsilon}]`. Both relations satisfy the premise (widths ``R`` and
:math:`\\Delta \\le R`). The bound is nearly reached: on the substitute pair of the
``private-quantile-substitute`` audit (``q = 1/2``, where both scales equal 4) the loss is
``0.954 epsilon``. Using the add/remove width :math:`\\Delta` as the scale under substitute
would be wrong (loss up to :math:`\\epsilon R/\\Delta`, ``2 epsilon`` at ``q = 1/2``): that is
the planted defect ``tests/statistical/test_deployed_audits_conformal.py`` must catch.
:func:`privcal.privacy.exponential` with ``sensitivity=R, monotonic=True`` has weights
:math:`\\exp(\\epsilon u / R)`, exactly these, and draws the release.

*Utility (the analogue of seed 002's Lemma 1).* With :math:`\\beta = \\epsilon / R =
\\epsilon q (1-q)`, for every ``t > 0``

.. math::

    P(w_J \\ge \\min_k w_k + t) \\le \\sum_{j : w_j \\ge \\min w + t}
    \\frac{e^{-\\beta w_j}}{e^{-\\beta \\min w}} \\le m e^{-\\beta t},

and :math:`\\min_k w_k \\le n` (seed 002, proof of Lemma 1: the first edge with more than ``qn``
scores at or below it). With :math:`t = \\log(m/\\delta)/\\beta`, with probability
:math:`\\ge 1 - \\delta`: :math:`\\#\\{i : [s_i] > e_J\\} \\le (1-q) w_J < (1-q) n +
\\log(m/\\delta)/(\\epsilon q)`, i.e.

.. math::  \\#\\{i : s_i \\le e_J\\} > q n - \\frac{\\log(m/\\delta)}{\\epsilon q}.

Seed 002's Lemma 1 has :math:`2\\log(m/\\delta)/\\epsilon` here (for ``q >= 1/2``): the deficit
is :math:`2q` times smaller (:math:`1.8\\times` at ``q = 0.9``).
:class:`~privcal.conformal.PrivateConformal` turns this into its adjusted level.

Computation
-----------
Per-bin counts :math:`c_j` by one ``bincount`` of the bin indices
(:func:`privcal.metrics.statistics.bin_indices`, ``searchsorted`` on the actual edges, so that
:math:`[s] \\le e_j \\iff s \\le e_j` holds exactly in floating point), then
:math:`\\#\\{[s] < e_j\\} = C_{j-1}` and :math:`\\#\\{[s] > e_j\\} = n - C_j` with
:math:`C = \\mathrm{cumsum}(c)`: :math:`O(n \\log m + m)` time, no loop over bins. The draw is
made in log space by :meth:`~privcal.privacy.NoiseSource.exponential_index` (Gumbel-max), so
``m = 10^6`` candidates and log-weights of any magnitude are safe.
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any, Literal, overload

import numpy as np

from privcal._params import check_int, check_option, check_probability, check_real, renamed
from privcal.metrics.statistics import bin_indices
from privcal.privacy.guarantee import RELATIONS, Guarantee, PrivacyReport, Release
from privcal.privacy.measurement import Measurement, register_measurement
from privcal.privacy.mechanisms import exponential, exponential_log_weights
from privcal.privacy.noise import NoiseSource, noise_kind, resolve_noise

__all__ = [
    "GRIDS",
    "LOGIT_SPAN",
    "QUANTILE",
    "QUANTILE_BOUNDED_RANGE",
    "RANK_QUANTILE",
    "WEIGHTS",
    "bin_edges",
    "logit_edges",
    "private_quantile",
    "private_quantile_report",
    "quantile_counts",
    "quantile_penalties",
    "quantile_release",
    "quantile_scale",
    "quantile_sensitivity",
    "quantile_utilities",
    "rank_penalties",
    "rank_quantile_release",
    "rank_utilities",
]


#: Shapes of the public grid for an int number of bins (module docstring).
GRIDS: tuple[str, ...] = ("uniform", "logit")
#: Weightings of the exponential mechanism (module docstring).
WEIGHTS: tuple[str, ...] = ("bounded-range", "sensitivity")
#: ``T``: the inner edges of the logit grid span ``logit(s)`` in ``[-T, T]``; ``expit(-37)`` is
#: ``8.5e-17`` and ``1 - expit(37)`` is below the spacing of doubles near 1, so every score a
#: float64 softmax can produce away from exact 0 and 1 lies inside.
LOGIT_SPAN = 37.0


def logit_edges(m: int) -> np.ndarray:
    """Edges ``0 < expit(-T + 2Tj/m) < 1`` (``j = 1..m-1``) with 0 and 1 added; public, from ``m``.

    Near 1 neighbouring values round to the same double once the spacing of the grid in
    ``1 - s`` falls below that of doubles (``1.1e-16``); duplicates are dropped, so the result can
    have fewer than ``m + 1`` edges (``m = 4096`` gives 3916 edges, i.e. 3915 bins).

    Examples
    --------
    >>> e = logit_edges(4)
    >>> float(e[0]), float(e[2]), float(e[-1]), e.size
    (0.0, 0.5, 1.0, 5)
    """
    return _logit_edges(check_int(m, "m", "logit_edges", low=2)).copy()


@functools.lru_cache(maxsize=32)
def _logit_edges(m: int) -> np.ndarray:
    t = np.linspace(-LOGIT_SPAN, LOGIT_SPAN, m + 1)[1:-1]
    inner = np.exp(-np.logaddexp(0.0, -t))  # expit(t), overflow-free
    edges = np.unique(np.concatenate(([0.0], inner, [1.0])))
    edges.flags.writeable = False
    return edges


@renamed(old="bins", new="n_bins", owner="bin_edges")
def bin_edges(n_bins: Any, owner: str = "private_quantile", grid: str = "uniform") -> np.ndarray:
    """Edges ``0 = e_0 < ... < e_m = 1``: built from an int ``m`` by ``grid``, or validated.

    Parameters
    ----------
    n_bins : int or array_like of float
        ``m >= 2`` or the edges themselves (strictly increasing, first 0, last 1, at least 3).
    owner : str
        Named in error messages.
    grid : {"uniform", "logit"}, default="uniform"
        For an int: ``m`` equal-width bins, or :func:`logit_edges`. Ignored for edges.
    """
    if isinstance(n_bins, int | np.integer) and not isinstance(n_bins, bool):
        m = check_int(n_bins, "n_bins", owner, low=2)
        check_option(grid, "grid", owner, GRIDS)
        return np.linspace(0.0, 1.0, m + 1) if grid == "uniform" else _logit_edges(m)
    allowed = "an int >= 2 or increasing bin edges from 0 to 1 (at least 3)"
    try:
        e = np.asarray(n_bins, dtype=np.float64)
    except (TypeError, ValueError):
        e = None
    if (
        e is None
        or e.ndim != 1
        or e.size < 3
        or e[0] != 0.0
        or e[-1] != 1.0
        or not np.all(np.diff(e) > 0)
    ):
        shown = n_bins if np.size(n_bins) <= 10 else f"array of shape {np.shape(n_bins)}"
        raise ValueError(
            f"The 'n_bins' parameter of {owner} must be {allowed}. Got {shown!r} instead."
        )
    return e


def _check_unit_scores(scores: Any, owner: str) -> np.ndarray:
    try:
        s = np.asarray(scores, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise ValueError(
            f"The 'scores' parameter of {owner} must be a 1-D array of floats in [0, 1]."
        ) from None
    if s.size == 0:
        raise ValueError(
            f"The 'scores' parameter of {owner} is empty: the calibration set needs at least one "
            "score."
        )
    bad = ~((s >= 0.0) & (s <= 1.0))  # also catches NaN
    if bad.any():
        raise ValueError(
            f"The 'scores' parameter of {owner} must lie in [0, 1] (the bins cover [0, 1]); "
            f"{int(bad.sum())} values do not, e.g. {s[bad][0]!r}."
        )
    return s


def quantile_counts(scores: Any, edges: np.ndarray) -> np.ndarray:
    """Per-bin counts ``c_j`` (length ``m``) of scores in ``[0, 1]`` under the bins of ``edges``."""
    m = edges.size - 1
    return np.bincount(bin_indices(scores, m, edges), minlength=m)


def quantile_sensitivity(q: float) -> float:
    """Every utility ``w_j`` moves by at most ``max(1/q, 1/(1-q))`` under either relation
    (module docstring, "Sensitivity"): sensitivity ``max(1/q, 1/(1-q))``."""
    return max(1.0 / q, 1.0 / (1.0 - q))


def quantile_scale(q: float, weights: str = "bounded-range") -> float:
    """``r(q)`` of the weights ``exp(-epsilon w_j / r(q))`` (module docstring).

    ``"bounded-range"``: ``1/q + 1/(1-q)``, since the penalties' changes lie in one interval
    of width ``1/q + 1/(1-q)`` under either relation (module docstring, "Bounded range");
    ``"sensitivity"``: ``2 max(1/q, 1/(1-q))``. Read from the measurements :data:`QUANTILE`
    and :data:`QUANTILE_BOUNDED_RANGE`.

    Examples
    --------
    >>> round(quantile_scale(0.9), 4), round(quantile_scale(0.9, "sensitivity"), 4)
    (11.1111, 20.0)
    """
    if weights == "bounded-range":
        return QUANTILE_BOUNDED_RANGE.sensitivity_at(q=q)
    return 2.0 * QUANTILE.sensitivity_at(q=q)


def quantile_penalties(less: Any, upto: Any, n: Any, q: float) -> np.ndarray:
    """``w = max(less/q, (n - upto)/(1-q))`` from the counts below and at-or-below each edge.

    ``less`` is ``C_{j-1} = #{[s] < e_j}`` and ``upto`` is ``C_j = #{[s] <= e_j}``; any shapes
    that broadcast.
    """
    return np.maximum(np.asarray(less) / q, (n - np.asarray(upto)) / (1.0 - q))


def quantile_utilities(counts: Any, q: float) -> np.ndarray:
    """``w_j = max(C_{j-1}/q, (n - C_j)/(1-q))`` from per-bin counts; vectorised over rows.

    Parameters
    ----------
    counts : array_like of int, shape (..., m)
        Per-bin counts; leading axes are independent data sets (e.g. random splits).
    q : float
        Level in ``(0, 1)``.

    Returns
    -------
    ndarray of float, shape (..., m)
        ``w``; the utility of candidate ``e_j`` is ``-w_j``.
    """
    c = np.asarray(counts)
    cum = np.cumsum(c, axis=-1)
    return quantile_penalties(cum - c, cum, cum[..., -1:], q)


def rank_penalties(less: Any, upto: Any, k: int, slope: float) -> np.ndarray:
    """``p = max(less - k + 1, slope (k - upto), 0)``: the rank penalty of each edge.

    ``less = #{[s] < e_j}``, ``upto = #{[s] <= e_j}``; zero exactly at the edge of the bin that
    holds the ``k``-th smallest score, ``+1`` per order statistic passed above it and ``+slope``
    per order statistic missing below it (:class:`~privcal.conformal.PrivateConformal`,
    ``method="rank"``). Vectorised; any shapes that broadcast.
    """
    lo = np.asarray(less, dtype=np.float64)
    hi = np.asarray(upto, dtype=np.float64)
    return np.maximum(np.maximum(lo - (k - 1), slope * (k - hi)), 0.0)


def rank_utilities(counts: Any, k: int, slope: float) -> np.ndarray:
    """:func:`rank_penalties` from per-bin counts ``(..., m)``; the utility of ``e_j`` is ``-p_j``.

    Examples
    --------
    >>> rank_utilities([1, 2, 0, 1], k=3, slope=2.0)
    array([4., 0., 1., 1.])
    """
    c = np.asarray(counts)
    cum = np.cumsum(c, axis=-1)
    return rank_penalties(cum - c, cum, k, slope)


def _private_quantile(
    scores: Any,
    q: float,
    epsilon: float,
    n_bins: Any,
    noise: NoiseSource,
    relation: str,
    owner: str = "private_quantile",
    weights: str = "bounded-range",
    grid: str = "uniform",
) -> tuple[float, Guarantee, float]:
    """The release, its guarantee and the scale ``r(q)``; ``noise`` is already resolved.

    Both weightings are epsilon-DP under both relations (module docstring); ``r(q)`` is what the
    report records as the sensitivity of the release (the range width ``R`` for bounded range).
    """
    q = check_probability(q, "q", owner)
    eps = check_real(epsilon, "epsilon", owner, low=0.0, low_open=True)
    check_option(weights, "weights", owner, WEIGHTS)
    edges = bin_edges(n_bins, owner, grid)
    s = _check_unit_scores(scores, owner)
    w = quantile_utilities(quantile_counts(s, edges), q)
    scale = quantile_scale(q, weights)
    # exp(eps u / scale): the "monotonic" form of exponential() with sensitivity = scale
    j, guarantee = exponential(-w, scale, eps, noise, monotonic=True)
    # the guarantee holds for both relations (module docstring); label the one the caller claims
    claimed = Guarantee(guarantee.epsilon, guarantee.delta, "example", relation)
    return float(edges[j + 1]), claimed, scale


def _draw_by_runs(utilities: np.ndarray, scale: float, epsilon: float, noise: NoiseSource) -> int:
    """Index ``j`` with ``P(j) propto exp(epsilon u_j / scale)``, drawn run by run (same law).

    Consecutive equal utilities (runs of empty bins) form one group of weight
    ``count exp(epsilon u / scale)``; the group is drawn by ``noise.exponential_index`` and then
    a member uniformly (a second ``exponential_index`` on equal weights). ``P(j) = P(group)
    / count`` is exactly the direct law, so the privacy of the release is that of the
    exponential mechanism; only the cost changes (``O(#groups + run)`` entries handed to the
    sampler instead of ``m``, which matters for :class:`~privcal.privacy.SecureNoise`).
    """
    lw = exponential_log_weights(utilities, scale, epsilon, monotonic=True)
    u = np.asarray(utilities, dtype=np.float64)
    start = np.flatnonzero(np.concatenate(([True], u[1:] != u[:-1])))
    count = np.diff(np.append(start, u.size))
    g = int(noise.exponential_index(lw[start] + np.log(count)))
    return int(start[g]) + _uniform_index(int(count[g]), noise)


def _uniform_index(count: int, noise: NoiseSource, block: int = 64) -> int:
    """A uniform index in ``0..count-1``: a block (weight = its size), then a member of it."""
    if count == 1:
        return 0
    if count <= block:
        return int(noise.exponential_index(np.zeros(count)))
    sizes = np.full(-(-count // block), block)
    sizes[-1] = count - block * (sizes.size - 1)
    b = int(noise.exponential_index(np.log(sizes)))
    return b * block + _uniform_index(int(sizes[b]), noise, block)


def _private_rank_quantile(
    scores: np.ndarray, k: int, slope: float, epsilon: float, edges: np.ndarray, noise: NoiseSource
) -> float:
    """The edge drawn with weights ``exp(-epsilon p_j / (1 + slope))`` (:func:`rank_penalties`).

    Validated arguments; ``noise`` already resolved. Epsilon-DP under substitute with ``n``
    public (Theorem R, :mod:`privcal.conformal.private.rank`).
    """
    p = rank_utilities(quantile_counts(scores, edges), k, slope)
    return float(edges[_draw_by_runs(-p, 1.0 + slope, epsilon, noise) + 1])


#: The exponential mechanism of :func:`private_quantile` with ``weights="sensitivity"``: every
#: utility moves by at most ``max(1/q, 1/(1-q))`` (the report records it; the weights' scale is
#: twice that, seed 002 as corrected in issue 12).
QUANTILE = register_measurement(
    Measurement(
        name="conformal.private_quantile",
        statistic="the bin edge of the q-quantile of the scores (exponential mechanism on the "
        "penalties max(C_{j-1}/q, (n - C_j)/(1-q)); the same bound under substitute)",
        mechanism="exponential",
        norm="utility",
        sensitivity=quantile_sensitivity,
        formula="max(1/q, 1/(1-q))",
        proof="privcal.conformal.quantile.quantile_sensitivity",
    )
)
#: :func:`private_quantile` with ``weights="bounded-range"`` (the default): the penalties'
#: changes lie in one interval of width ``R = 1/q + 1/(1-q)`` under either relation.
QUANTILE_BOUNDED_RANGE = register_measurement(
    Measurement(
        name="conformal.private_quantile.bounded_range",
        statistic="the bin edge of the q-quantile of the scores (bounded-range exponential "
        "mechanism on the same penalties; the same bound under substitute)",
        mechanism="exponential (bounded range)",
        norm="range",
        sensitivity=lambda q: 1.0 / q + 1.0 / (1.0 - q),
        formula="1/q + 1/(1-q)",
        proof="privcal.conformal.quantile.quantile_scale",
    )
)
#: :func:`_private_rank_quantile` (Theorem R, :mod:`privcal.conformal.private.rank`): every rank
#: penalty moves within ``[-1, r]`` under substitute with ``n`` public.
RANK_QUANTILE = register_measurement(
    Measurement(
        name="conformal.private_rank_quantile",
        statistic="the bin edge at target rank k of the scores (bounded-range exponential "
        "mechanism on the rank penalties, slope r)",
        mechanism="exponential (bounded range)",
        norm="range",
        sensitivity=lambda slope: 1.0 + slope,
        formula="1 + r",
        proof="privcal.conformal.private.rank",
        relation="substitute",
    )
)


def rank_quantile_release(
    k: int, m: int, slope: float, epsilon: float, source: str, note: str = ""
) -> Release:
    """The :class:`~privcal.privacy.Release` record of one :func:`_private_rank_quantile` draw
    (:data:`RANK_QUANTILE`: range ``1 + slope``, Theorem R). ``note`` is appended to the query
    (e.g. which end of a window it is)."""
    return RANK_QUANTILE.record(
        f"private_rank_quantile(k={k}, m={m}, slope={slope:g}){note}",
        epsilon,
        source=source,
        slope=slope,
    )


def quantile_release(
    q: float,
    m: int,
    sensitivity: float,
    epsilon: float,
    source: str,
    weights: str = "sensitivity",
) -> Release:
    """The :class:`~privcal.privacy.Release` record of one :func:`private_quantile` draw.

    ``sensitivity`` is the scale ``r(q)`` of the weights ``exp(-epsilon w / r(q))`` the draw
    used; it must be :func:`quantile_scale` ``(q, weights)``, which the measurement
    (:data:`QUANTILE`, :data:`QUANTILE_BOUNDED_RANGE`) states: for ``weights="sensitivity"``
    the record keeps seed 002's convention (``r(q) / 2``).
    """
    measurement = QUANTILE_BOUNDED_RANGE if weights == "bounded-range" else QUANTILE
    if not math.isclose(sensitivity, quantile_scale(q, weights), rel_tol=1e-12):
        raise ValueError(
            f"The 'sensitivity' parameter of quantile_release must be the scale "
            f"quantile_scale(q, {weights!r}) = {quantile_scale(q, weights)!r} the draw used. "
            f"Got {sensitivity!r} instead."
        )
    return measurement.record(f"private_quantile(q={q:.6g}, m={m})", epsilon, source=source, q=q)


@overload
def private_quantile(
    scores: Any,
    q: float,
    epsilon: float,
    n_bins: Any,
    noise: NoiseSource | None = ...,
    *,
    relation: str = ...,
    weights: str = ...,
    grid: str = ...,
    return_report: Literal[False] = ...,
) -> float: ...


@overload
def private_quantile(
    scores: Any,
    q: float,
    epsilon: float,
    n_bins: Any,
    noise: NoiseSource | None = ...,
    *,
    relation: str = ...,
    weights: str = ...,
    grid: str = ...,
    return_report: Literal[True],
) -> tuple[float, PrivacyReport]: ...


@renamed(old="bins", new="n_bins", owner="private_quantile")
def private_quantile(
    scores: Any,
    q: float,
    epsilon: float,
    n_bins: Any,
    noise: NoiseSource | None = None,
    *,
    relation: str = "add/remove",
    weights: str = "bounded-range",
    grid: str = "uniform",
    return_report: bool = False,
) -> float | tuple[float, PrivacyReport]:
    """Epsilon-DP ``q``-quantile of scores in ``[0, 1]`` (seed 002, Algorithm 2, valid weights).

    Parameters
    ----------
    scores : array_like of float, shape (n,)
        Private scores in ``[0, 1]``, ``n >= 1``.
    q : float
        Level in ``(0, 1)``.
    epsilon : float
        Privacy loss in ``(0, inf)``.
    n_bins : int or array_like of float
        ``m >= 2`` bins of the shape ``grid``, or edges ``0 = e_0 < ... < e_m = 1`` (public).
        ``bins`` is its deprecated name (one release, ``DeprecationWarning``).
    noise : NoiseSource or None, default=None
        ``None`` means :class:`~privcal.privacy.SecureNoise`. ``SeededNoise(seed)`` (simulation
        only) warns :class:`~privcal.privacy.InsecureNoiseWarning` and the report says
        ``"not private: seeded noise"``.
    relation : {"add/remove", "substitute"}, default="add/remove"
        The neighbouring relation the report states. The guarantee holds for both with the same
        ``epsilon`` (see Privacy); choose ``"substitute"`` when ``q`` or ``n_bins`` were computed
        from ``n`` (then ``n`` is public and the report lists it).
    weights : {"bounded-range", "sensitivity"}, default="bounded-range"
        ``exp(-epsilon q (1-q) w_j)`` (bounded range) or seed 002's
        ``exp(-epsilon w_j / (2 max(1/q, 1/(1-q))))``; both epsilon-DP, the first never noisier.
    grid : {"uniform", "logit"}, default="uniform"
        Shape of the edges for an int ``n_bins`` (:func:`bin_edges`).
    return_report : bool, default=False
        Deprecated (one release, ``DeprecationWarning``): ``True`` returns
        :func:`private_quantile_report`'s ``(value, report)``; call that function instead.

    Returns
    -------
    value : float
        One of the edges ``e_1, ..., e_m``. :func:`private_quantile_report` returns it with its
        :class:`~privcal.privacy.PrivacyReport`.

    Raises
    ------
    ValueError
        ``q`` outside (0, 1), ``epsilon <= 0``, ``n_bins < 2`` or bad edges, scores outside
        ``[0, 1]``, an empty score array, an unknown ``relation``.

    Privacy
    -------
    Unit: one score. Neighbouring relation: add/remove one score, or substitute one score with
    ``n`` public; under both the differences ``w_j(D') - w_j(D)`` lie in one interval of width
    at most ``R = 1/q + 1/(1-q)`` and each is at most ``max(1/q, 1/(1-q))`` (derived in the
    module docstring). Release by :func:`privcal.privacy.exponential` with weights
    ``exp(-epsilon w_j / R)`` (bounded range) or ``exp(-epsilon w_j / (2 max(1/q, 1/(1-q))))``.
    Output measure: pure ``epsilon``-DP. Public:
    ``q``, ``epsilon`` and the edges (and ``n`` under ``"substitute"``). Audited as deployed by
    ``privcal audit private-quantile`` and ``private-quantile-substitute``.

    Notes
    -----
    ``O(n log m + m)`` time and ``O(m)`` memory; no Python loop over bins. Utility: with
    probability ``>= 1 - delta``, ``w_J < min w + r(q) log(m / delta) / epsilon`` (Lemma 1 of
    seed 002 for ``"sensitivity"``; module docstring for bounded range).

    Examples
    --------
    >>> import numpy as np
    >>> s = np.linspace(0, 1, 1001)
    >>> 0.8 < private_quantile(s, 0.9, 5.0, 100) <= 1.0
    True
    """
    owner = "private_quantile"
    if not isinstance(return_report, bool | np.bool_):
        raise ValueError(
            f"The 'return_report' parameter of {owner} must be a bool. Got {return_report!r} "
            "instead."
        )
    if return_report:
        warnings.warn(
            f"The 'return_report' parameter of {owner} is deprecated and will be removed in the "
            "next release; use private_quantile_report(...) for (value, report).",
            DeprecationWarning,
            stacklevel=2,
        )
        return _quantile_with_report(
            scores, q, epsilon, n_bins, noise, relation, weights, grid, owner
        )
    check_option(relation, "relation", owner, RELATIONS)
    src = resolve_noise(noise, owner)
    return _private_quantile(scores, q, epsilon, n_bins, src, relation, owner, weights, grid)[0]


@renamed(old="bins", new="n_bins", owner="private_quantile_report")
def private_quantile_report(
    scores: Any,
    q: float,
    epsilon: float,
    n_bins: Any,
    noise: NoiseSource | None = None,
    *,
    relation: str = "add/remove",
    weights: str = "bounded-range",
    grid: str = "uniform",
) -> tuple[float, PrivacyReport]:
    """:func:`private_quantile` and the :class:`~privcal.privacy.PrivacyReport` of its release.

    Same parameters, same draw and the same guarantee as :func:`private_quantile` (its
    docstring states the math and the privacy derivation).

    Returns
    -------
    value : float
        One of the edges ``e_1, ..., e_m``.
    report : PrivacyReport
        One release (exponential mechanism with its scale: the range ``1/(q(1-q))`` for bounded
        range, the sensitivity ``max(1/q, 1/(1-q))`` otherwise; ``epsilon``), the relation, the
        public quantities and the noise.

    Examples
    --------
    >>> import numpy as np
    >>> s = np.linspace(0, 1, 1001)
    >>> value, report = private_quantile_report(s, 0.9, 5.0, 100)
    >>> 0.8 < value <= 1.0, report.epsilon, report.relation, report.status
    (True, 5.0, 'add/remove', 'private')
    """
    return _quantile_with_report(
        scores, q, epsilon, n_bins, noise, relation, weights, grid, "private_quantile_report"
    )


def _quantile_with_report(
    scores: Any,
    q: float,
    epsilon: float,
    n_bins: Any,
    noise: NoiseSource | None,
    relation: str,
    weights: str,
    grid: str,
    owner: str,
) -> tuple[float, PrivacyReport]:
    """The value of :func:`private_quantile` and the report of its one release."""
    check_option(relation, "relation", owner, RELATIONS)
    src = resolve_noise(noise, owner)
    value, guarantee, scale = _private_quantile(
        scores, q, epsilon, n_bins, src, relation, owner, weights, grid
    )
    m = int(bin_edges(n_bins, owner, grid).size - 1)
    public = [f"q = {float(q):.6g}", f"epsilon = {guarantee.epsilon:g}", f"bin edges (m = {m})"]
    if relation == "substitute":
        n = int(np.size(scores))
        public.insert(0, f"n = {n} (number of scores)")
    report = PrivacyReport(
        [quantile_release(float(q), m, scale, guarantee.epsilon, "scores", weights)],
        unit="example",
        relation=relation,
        public=public,
        noise=noise_kind(src),
    )
    return value, report

"""The differentially private quantile of seed 002 (Algorithm 2), with two valid weightings.

*Setting.* Scores :math:`s_i \\in [0, 1]`; public bin edges :math:`0 = e_0 < e_1 < \\dots < e_m
= 1`, bins :math:`I_1 = [e_0, e_1]`, :math:`I_j = (e_{j-1}, e_j]`; :math:`[s]` is the right edge
of the bin of ``s``. For level :math:`q \\in (0, 1)` candidate :math:`e_j` has utility
:math:`-w_j` with

.. math::  w_j = \\max\\big(\\#\\{i : [s_i] < e_j\\}/q,\\; \\#\\{i : [s_i] > e_j\\}/(1 - q)\\big),

and the release is :math:`e_J` with :math:`P(J = j) \\propto \\exp(-\\epsilon w_j / r(q))`, the
scale ``r(q)`` (:func:`quantile_scale`) being

* ``weights="bounded-range"`` (the default): :math:`r = R = 1/q + 1/(1-q) = 1/(q(1-q))`;
* ``weights="sensitivity"`` (seed 002, scaling corrected in issue 12): :math:`r = 2\\Delta`,
  :math:`\\Delta = \\max(1/q, 1/(1-q))` (:func:`quantile_sensitivity`).

:math:`R \\le 2\\Delta`: equal at ``q = 1/2``, 1.8x less noise at ``q = 0.9``. Edges
(:func:`bin_edges`) are public and fixed before the data are seen: ``grid="uniform"`` (``m``
equal bins, seed 002) or ``grid="logit"`` (:func:`logit_edges`: inner edges evenly spaced in
``logit(s)`` on ``[-T, T]``, :math:`T =` :data:`LOGIT_SPAN`, fine near 0 and 1 where confident
networks' scores crowd). They depend on ``m`` alone.

*Privacy (add/remove one score, or substitute one score with n public; q, epsilon and the
edges public).* Under either relation each of the two counts in ``w_j`` moves by at most one,
so every ``w_j`` moves by at most ``max(1/q, 1/(1-q))``; and every difference
``w_j(D') - w_j(D)`` lies in one interval of width at most ``R`` for all ``j``. The exponential
mechanism (:func:`privcal.privacy.exponential`) is therefore pure epsilon-DP with either scale
(sensitivity argument, McSherry & Talwar 2007; bounded range, Durfee & Rogers 2019). The
paper's printed ``exp(-epsilon w_j / 2)`` is not epsilon-DP; the authors' ``min(alpha,
1-alpha)`` scale is at seed 002's settings (a loss of at most 0.59 epsilon at ``alpha = 0.1``,
``n = 5000``, ``epsilon = 1``; docs/conformal.md#the-dp-quantile-private_quantile).

*Utility* (bounded range): with probability ``>= 1 - delta``, ``#{i : s_i <= e_J} > qn -
log(m/delta)/(epsilon q)`` (seed 002's Lemma 1: ``2 log(m/delta)/epsilon``).

*Computation.* One ``bincount`` and a cumulative sum, :math:`O(n \\log m + m)`; a Gumbel-max draw
in log space (:meth:`~privcal.privacy.NoiseSource.exponential_index`), safe for ``m = 10^6``.

Proofs (sensitivity, loss actually spent, bounded range, utility; the paper's constant):
docs/conformal.md#proof-of-the-dp-quantiles-sensitivity and
docs/conformal.md#proof-of-the-bounded-range-weights.
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any, Literal, overload

import numpy as np

from privcal._params import EPSILON, check_int, check_option, check_probability, renamed
from privcal.metrics.statistics import bin_indices
from privcal.privacy.guarantee import RELATIONS, Guarantee, PrivacyReport, Release
from privcal.privacy.measurement import Measurement, register_measurement
from privcal.privacy.mechanisms import exponential, exponential_log_weights
from privcal.privacy.noise import NoiseSource, noise_kind, resolve_noise
from privcal.private.queries import _increasing

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
        e, ok = _increasing(n_bins, 3)
    except (TypeError, ValueError):
        ok = False
    if not ok or e[0] != 0.0 or e[-1] != 1.0:
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
    (docs/conformal.md#proof-of-the-dp-quantiles-sensitivity): sensitivity ``max(1/q, 1/(1-q))``."""
    return max(1.0 / q, 1.0 / (1.0 - q))


def quantile_scale(q: float, weights: str = "bounded-range") -> float:
    """``r(q)`` of the weights ``exp(-epsilon w_j / r(q))`` (module docstring).

    ``"bounded-range"``: ``1/q + 1/(1-q)``, since the penalties' changes lie in one interval
    of width ``1/q + 1/(1-q)`` under either relation
    (docs/conformal.md#proof-of-the-bounded-range-weights);
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
    owner: str = "private_quantile",
    weights: str = "bounded-range",
    grid: str = "uniform",
) -> tuple[float, Guarantee, float]:
    """The release, its guarantee (epsilon-DP under both relations: module docstring) and the
    scale ``r(q)`` the report records as its sensitivity; ``noise`` is already resolved."""
    q = check_probability(q, "q", owner)
    eps = EPSILON.check(epsilon, "epsilon", owner)
    check_option(weights, "weights", owner, WEIGHTS)
    edges = bin_edges(n_bins, owner, grid)
    s = _check_unit_scores(scores, owner)
    w = quantile_utilities(quantile_counts(s, edges), q)
    scale = quantile_scale(q, weights)
    j, guarantee = exponential(-w, scale, eps, noise, monotonic=True)  # exp(eps u / scale)
    return float(edges[j + 1]), guarantee, scale


def _bin_runs(b: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """The occupied bins of sorted bin indices ``b`` (of ``m`` bins) and the runs of empty bins
    between them: the first position of each occupied bin in ``b``, the bin, the occupied bin
    before it (-1 for none), the empty bins strictly between the two, and the empty bins after
    the last one. A count below or up to a bin is constant over each run."""
    start = np.flatnonzero(np.concatenate(([True], b[1:] != b[:-1])))
    occ = b[start]
    prev = np.concatenate(([-1], occ[:-1]))
    return start, occ, prev, occ - prev - 1, int(m - 1 - occ[-1])


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
    ``n`` public: under both, the differences ``w_j(D') - w_j(D)`` lie in one interval of width
    at most ``R = 1/q + 1/(1-q)`` and each is at most ``max(1/q, 1/(1-q))`` (module docstring;
    proofs in docs/conformal.md#proofs), so the exponential mechanism is pure ``epsilon``-DP with
    either weighting (``weights``). Public: ``q``, ``epsilon`` and the edges (and ``n`` under
    ``"substitute"``). Audited as deployed by ``privcal audit private-quantile`` and
    ``private-quantile-substitute``.

    Notes
    -----
    ``O(n log m + m)`` time and ``O(m)`` memory; no Python loop over bins. Utility: with
    probability ``>= 1 - delta``, ``w_J < min w + r(q) log(m / delta) / epsilon`` (Lemma 1 of
    seed 002 for ``"sensitivity"``; for bounded range
    docs/conformal.md#proof-of-the-bounded-range-weights).

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
    result = _quantile_with_report(
        scores, q, epsilon, n_bins, noise, relation, weights, grid, owner
    )
    return result if return_report else result[0]


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
        scores, q, epsilon, n_bins, src, owner, weights, grid
    )
    m = int(bin_edges(n_bins, owner, grid).size - 1)
    public = [f"q = {float(q):.6g}", f"epsilon = {guarantee.epsilon:g}", f"bin edges (m = {m})"]
    if relation == "substitute":
        public.insert(0, f"n = {int(np.size(scores))} (number of scores)")
    report = PrivacyReport(
        [quantile_release(float(q), m, scale, guarantee.epsilon, "scores", weights)],
        unit="example",
        relation=relation,
        public=public,
        noise=noise_kind(src),
    )
    return value, report

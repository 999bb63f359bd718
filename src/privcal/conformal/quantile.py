"""The differentially private quantile of seed 002 (Algorithm 2), with the correct scaling.

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
and the release is :math:`e_J` with :math:`P(J = j) \\propto \\exp(-\\epsilon w_j / (2\\Delta))`.

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

*How much of epsilon is really lost* (this explains the audits' lower bounds). Under add/remove
all :math:`w_j` move in the same direction, so the loss is at most :math:`\\epsilon/2`. Under
substitute with :math:`[s] \\le [s']`, every :math:`w_j(D') - w_j(D)` lies in :math:`[-1/q,
1/(1-q)]` (the first term can only drop, the second only rise), an interval of width
:math:`R = 1/q + 1/(1-q)`. If every utility difference lies in :math:`[c, c + R]`, the weight
ratio of ``j`` is :math:`e^{\\epsilon d_j/(2\\Delta)}` (:math:`d_j = w_j(D') - w_j(D)`) and the
ratio :math:`Z(D)/Z(D')` of the normalisers lies between :math:`e^{\\epsilon c/(2\\Delta)}` and
:math:`e^{\\epsilon (c+R)/(2\\Delta)}`, so the loss is at most
:math:`\\epsilon R/(2\\Delta) = \\epsilon / (2\\max(q, 1-q))`: ``epsilon`` at ``q = 1/2``, about
:math:`0.52\\epsilon` at the adjusted levels of :class:`~privcal.conformal.PrivateConformal`. (The
same bounded-range argument, Durfee & Rogers 2019, would allow weights
:math:`\\exp(-\\epsilon w_j / R)`, less noise for ``q != 1/2``; privcal keeps the scaled weights
because Lemma 1, Eq. 3, Eq. 9-10, Algorithm 5 and Theorem 3 are all stated for them.)

*The paper's Algorithm 2 prints* :math:`\\exp(-\\epsilon w_j / 2)`, i.e. :math:`\\Delta = 1`. That
is :math:`\\epsilon \\max(1/q, 1/(1-q))`-DP only: at ``q = 0.9`` the privacy loss is up to
:math:`10 \\epsilon`. Lemma 1 (the utility bound with :math:`2 \\max(1/q, 1/(1-q)) \\log(m/\\delta)
/ \\epsilon`) and hence Theorem 2 assume the scaled weights used here. The authors' code scales by
:math:`\\min(\\alpha, 1-\\alpha)` (i.e. :math:`\\Delta = 1/\\alpha`), which is too small once the
adjusted level :math:`\\tilde q > 1 - \\alpha` (then :math:`1/(1-\\tilde q) > 1/\\alpha`) -- always
the case for the level of :class:`~privcal.conformal.PrivateConformal`.
``tests/statistical/test_conformal_audit.py`` audits both: the scaled version passes, the
unscaled one fails. The deployed path (:func:`private_quantile` and ``PrivateConformal`` with
their defaults and ``SecureNoise``) is audited by :mod:`privcal.audits.conformal`.

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

from typing import Any, Literal, overload

import numpy as np

from privcal._params import check_int, check_option, check_probability, check_real
from privcal.metrics.statistics import bin_indices
from privcal.privacy.guarantee import RELATIONS, Guarantee, PrivacyReport, Release
from privcal.privacy.mechanisms import exponential
from privcal.privacy.noise import NoiseSource, noise_kind, resolve_noise

__all__ = [
    "bin_edges",
    "private_quantile",
    "quantile_counts",
    "quantile_release",
    "quantile_sensitivity",
    "quantile_utilities",
]


def bin_edges(bins: Any, owner: str = "private_quantile") -> np.ndarray:
    """Edges ``0 = e_0 < ... < e_m = 1``: ``m + 1`` equal-width edges for an int, or validated.

    Parameters
    ----------
    bins : int or array_like of float
        ``m >= 2`` (equal-width bins on [0, 1]) or the edges themselves (strictly increasing,
        first 0, last 1, at least 3 of them).
    owner : str
        Named in error messages.
    """
    if isinstance(bins, int | np.integer) and not isinstance(bins, bool):
        m = check_int(bins, "bins", owner, low=2)
        return np.linspace(0.0, 1.0, m + 1)
    allowed = "an int >= 2 or increasing bin edges from 0 to 1 (at least 3)"
    try:
        e = np.asarray(bins, dtype=np.float64)
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
        shown = bins if np.size(bins) <= 10 else f"array of shape {np.shape(bins)}"
        raise ValueError(
            f"The 'bins' parameter of {owner} must be {allowed}. Got {shown!r} instead."
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
    """``max(1/q, 1/(1-q))``: the sensitivity of every ``w_j`` (see the module docstring)."""
    return max(1.0 / q, 1.0 / (1.0 - q))


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
    n = cum[..., -1:]
    less = cum - c
    greater = n - cum
    return np.maximum(less / q, greater / (1.0 - q))


def _private_quantile(
    scores: Any,
    q: float,
    epsilon: float,
    bins: Any,
    noise: NoiseSource,
    relation: str,
    owner: str = "private_quantile",
) -> tuple[float, Guarantee, float]:
    """The release and its guarantee; ``noise`` is already resolved (:func:`resolve_noise`)."""
    q = check_probability(q, "q", owner)
    eps = check_real(epsilon, "epsilon", owner, low=0.0, low_open=True)
    edges = bin_edges(bins, owner)
    s = _check_unit_scores(scores, owner)
    w = quantile_utilities(quantile_counts(s, edges), q)
    sens = quantile_sensitivity(q)
    j, guarantee = exponential(-w, sens, eps, noise)
    # the sensitivity holds for both relations (module docstring); label the one the caller claims
    claimed = Guarantee(guarantee.epsilon, guarantee.delta, "example", relation)
    return float(edges[j + 1]), claimed, sens


def quantile_release(q: float, m: int, sensitivity: float, epsilon: float, source: str) -> Release:
    """The :class:`~privcal.privacy.Release` record of one :func:`private_quantile` draw."""
    return Release(
        query=f"private_quantile(q={q:.6g}, m={m})",
        mechanism="exponential",
        sensitivity=sensitivity,
        epsilon=epsilon,
        source=source,
    )


@overload
def private_quantile(
    scores: Any,
    q: float,
    epsilon: float,
    bins: Any,
    noise: NoiseSource | None = ...,
    *,
    relation: str = ...,
    return_report: Literal[False] = ...,
) -> float: ...


@overload
def private_quantile(
    scores: Any,
    q: float,
    epsilon: float,
    bins: Any,
    noise: NoiseSource | None = ...,
    *,
    relation: str = ...,
    return_report: Literal[True],
) -> tuple[float, PrivacyReport]: ...


def private_quantile(
    scores: Any,
    q: float,
    epsilon: float,
    bins: Any,
    noise: NoiseSource | None = None,
    *,
    relation: str = "add/remove",
    return_report: bool = False,
) -> float | tuple[float, PrivacyReport]:
    """Epsilon-DP ``q``-quantile of scores in ``[0, 1]`` (seed 002, Algorithm 2, scaled).

    Parameters
    ----------
    scores : array_like of float, shape (n,)
        Private scores in ``[0, 1]``, ``n >= 1``.
    q : float
        Level in ``(0, 1)``.
    epsilon : float
        Privacy loss in ``(0, inf)``.
    bins : int or array_like of float
        ``m >= 2`` equal-width bins on [0, 1], or edges ``0 = e_0 < ... < e_m = 1`` (public).
    noise : NoiseSource or None, default=None
        ``None`` means :class:`~privcal.privacy.SecureNoise`. ``SeededNoise(seed)`` (simulation
        only) warns :class:`~privcal.privacy.InsecureNoiseWarning` and the report says
        ``"not private: seeded noise"``.
    relation : {"add/remove", "substitute"}, default="add/remove"
        The neighbouring relation the report states. The guarantee holds for both with the same
        ``epsilon`` (see Privacy); choose ``"substitute"`` when ``q`` or ``bins`` were computed
        from ``n`` (then ``n`` is public and the report lists it).
    return_report : bool, default=False
        Also return the :class:`~privcal.privacy.PrivacyReport` of the release.

    Returns
    -------
    value : float
        One of the edges ``e_1, ..., e_m``.
    report : PrivacyReport
        Only with ``return_report=True``: one release (exponential mechanism, sensitivity
        ``max(1/q, 1/(1-q))``, ``epsilon``), the relation, the public quantities and the noise.

    Raises
    ------
    ValueError
        ``q`` outside (0, 1), ``epsilon <= 0``, ``bins < 2`` or bad edges, scores outside
        ``[0, 1]``, an empty score array, an unknown ``relation``.

    Privacy
    -------
    Unit: one score. Neighbouring relation: add/remove one score, or substitute one score with
    ``n`` public; the utility ``-w_j`` has sensitivity ``max(1/q, 1/(1-q))`` under both (derived
    in the module docstring). Release by :func:`privcal.privacy.exponential` with weights
    ``exp(-epsilon w_j / (2 max(1/q, 1/(1-q))))``. Output measure: pure ``epsilon``-DP. Public:
    ``q``, ``epsilon`` and the edges (and ``n`` under ``"substitute"``). Audited as deployed by
    ``privcal audit private-quantile`` and ``private-quantile-substitute``.

    Notes
    -----
    ``O(n log m + m)`` time and ``O(m)`` memory; no Python loop over bins. Utility (Lemma 1 of
    seed 002): with probability ``>= 1 - delta`` the empirical rank of the release is within
    ``2 max(1/q, 1/(1-q)) log(m / delta) / epsilon`` of the target in ``w`` units.

    Examples
    --------
    >>> import numpy as np
    >>> s = np.linspace(0, 1, 1001)
    >>> value, report = private_quantile(s, 0.9, 5.0, 100, return_report=True)
    >>> 0.8 < value <= 1.0, report.epsilon, report.relation, report.status
    (True, 5.0, 'add/remove', 'private')
    """
    owner = "private_quantile"
    check_option(relation, "relation", owner, RELATIONS)
    if not isinstance(return_report, bool | np.bool_):
        raise ValueError(
            f"The 'return_report' parameter of {owner} must be a bool. Got {return_report!r} "
            "instead."
        )
    src = resolve_noise(noise, owner)
    value, guarantee, sens = _private_quantile(scores, q, epsilon, bins, src, relation, owner)
    if not return_report:
        return value
    m = int(bin_edges(bins, owner).size - 1)
    public = [f"q = {float(q):.6g}", f"epsilon = {guarantee.epsilon:g}", f"bin edges (m = {m})"]
    if relation == "substitute":
        n = int(np.size(scores))
        public.insert(0, f"n = {n} (number of scores)")
    report = PrivacyReport(
        [quantile_release(float(q), m, sens, guarantee.epsilon, "scores")],
        unit="example",
        relation=relation,
        public=public,
        noise=noise_kind(src),
    )
    return value, report

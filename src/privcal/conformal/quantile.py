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
Add or remove one score :math:`s`. For every ``j`` exactly one of three things happens:
:math:`[s] < e_j` (the first count changes by 1), :math:`[s] > e_j` (the second count changes by
1) or :math:`[s] = e_j` (neither changes). So the first argument of the max moves by at most
``1/q``, the second by at most ``1/(1-q)``, and since :math:`|\\max(a, b) - \\max(a', b')| \\le
\\max(|a - a'|, |b - b'|)`,

.. math::  \\Delta = \\max_j |w_j(D) - w_j(D')| \\le \\max(1/q,\\; 1/(1-q)),

attained by a score far below (or above) every candidate. The same bound holds when one score is
*replaced* (one count down by ``1/q``-units and the other up, and the max moves by at most the
larger). The exponential mechanism (McSherry & Talwar 2007; Dwork & Roth 2014, Thm. 3.10) with
utility :math:`-w_j` and weights :math:`\\exp(-\\epsilon w_j / (2\\Delta))` is therefore
:math:`\\epsilon`-DP: the weight ratio is at most :math:`e^{\\epsilon/2}` and so is the ratio of
the normalisers.

*The paper's Algorithm 2 prints* :math:`\\exp(-\\epsilon w_j / 2)`, i.e. :math:`\\Delta = 1`. That
is :math:`\\epsilon \\max(1/q, 1/(1-q))`-DP only: at ``q = 0.9`` the privacy loss is up to
:math:`10 \\epsilon`. Lemma 1 (the utility bound with :math:`2 \\max(1/q, 1/(1-q)) \\log(m/\\delta)
/ \\epsilon`) and hence Theorem 2 assume the scaled weights used here. The authors' code scales by
:math:`\\min(\\alpha, 1-\\alpha)` (i.e. :math:`\\Delta = 1/\\alpha`), which is too small once the
adjusted level :math:`\\tilde q > 1 - \\alpha` (then :math:`1/(1-\\tilde q) > 1/\\alpha`) -- always
the case for the level of :class:`~privcal.conformal.PrivateConformal`.
``tests/statistical/test_conformal_audit.py`` audits both: the scaled version passes, the
unscaled one fails.

(Under add/remove all :math:`w_j` move in the same direction, so the monotone form
:math:`\\exp(-\\epsilon w_j / \\Delta)` would also be :math:`\\epsilon`-DP for that
relation; privcal keeps the factor 2 so that the guarantee also holds for replacement and
matches Lemma 1.)

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

from typing import Any

import numpy as np

from privcal._params import check_int, check_probability, check_real
from privcal.metrics.statistics import bin_indices
from privcal.privacy.guarantee import Guarantee
from privcal.privacy.mechanisms import _noise, exponential
from privcal.privacy.noise import NoiseSource

__all__ = [
    "bin_edges",
    "private_quantile",
    "quantile_counts",
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
    noise: NoiseSource | None,
    owner: str = "private_quantile",
) -> tuple[float, Guarantee, float]:
    q = check_probability(q, "q", owner)
    eps = check_real(epsilon, "epsilon", owner, low=0.0, low_open=True)
    edges = bin_edges(bins, owner)
    s = _check_unit_scores(scores, owner)
    src = _noise(noise, owner)
    w = quantile_utilities(quantile_counts(s, edges), q)
    sens = quantile_sensitivity(q)
    j, guarantee = exponential(-w, sens, eps, src)
    return float(edges[j + 1]), guarantee, sens


def private_quantile(
    scores: Any,
    q: float,
    epsilon: float,
    bins: Any,
    noise: NoiseSource | None = None,
) -> float:
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
        ``None`` means :class:`~privcal.privacy.SecureNoise`; experiments pass
        ``SeededNoise(seed)``.

    Returns
    -------
    float
        One of the edges ``e_1, ..., e_m``.

    Raises
    ------
    ValueError
        ``q`` outside (0, 1), ``epsilon <= 0``, ``bins < 2`` or bad edges, scores outside
        ``[0, 1]`` or an empty score array.

    Privacy
    -------
    Neighbouring relation: add/remove one score (also replace one). Utility ``-w_j`` with
    sensitivity ``max(1/q, 1/(1-q))`` (derived in the module docstring); release by
    :func:`privcal.privacy.exponential` with weights ``exp(-epsilon w_j / (2 max(1/q,
    1/(1-q))))``. Output measure: pure ``epsilon``-DP. Public: ``q``, ``epsilon`` and the edges.

    Notes
    -----
    ``O(n log m + m)`` time and ``O(m)`` memory; no Python loop over bins. Utility (Lemma 1 of
    seed 002): with probability ``>= 1 - delta`` the empirical rank of the release is within
    ``2 max(1/q, 1/(1-q)) log(m / delta) / epsilon`` of the target in ``w`` units.

    Examples
    --------
    >>> import numpy as np
    >>> from privcal.privacy import SeededNoise
    >>> s = np.linspace(0, 1, 1001)
    >>> round(private_quantile(s, 0.9, 5.0, 100, noise=SeededNoise(0)), 2)
    0.9
    """
    value, _, _ = _private_quantile(scores, q, epsilon, bins, noise)
    return value

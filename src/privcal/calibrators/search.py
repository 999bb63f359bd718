"""One-dimensional searches shared by the non-private and the private temperature fits.

Both work on a bracket ``[lo, hi]`` and make exactly ``evaluations`` calls of the objective, so a
private caller that adds noise to every call knows the exact number of releases it must pay for.
The searches run in ``log T`` (``geometric=True``): a temperature range such as [0.05, 20] spans
two and a half decades and a ratio, not a difference, is the natural resolution.

:func:`monotone_root` is the search of the private Acc-T default: it reads the root of an
increasing function from its noisy values on a whole public grid at once (isotonic fit, then
linear interpolation in ``log T``), so a private caller pays for one vector release instead of a
sequence of scalar ones. :func:`convex_argmin` is its counterpart for the private NLL-T default:
it reads the minimiser of a function convex in ``1 / T`` from its noisy increments on a public
grid (isotonic fit of the secant slopes, then a cubic spline around the smallest fitted value).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = [
    "GOLDEN",
    "SPLINE_POINTS",
    "bisect_sign",
    "convex_argmin",
    "geometric_grid",
    "golden_section",
    "isotonic_increasing",
    "monotone_root",
]

#: 1 / golden ratio: each golden-section step keeps this fraction of the bracket.
GOLDEN = (np.sqrt(5.0) - 1.0) / 2.0
#: :func:`convex_argmin` reads its spline on this many points per grid step.
SPLINE_POINTS = 256


def golden_section(
    f: Callable[[float], float],
    lo: float,
    hi: float,
    evaluations: int,
    *,
    geometric: bool = True,
) -> tuple[float, tuple[float, float]]:
    """Golden-section minimisation of a unimodal ``f`` with exactly ``evaluations`` calls.

    The first two calls place the interior points; each further call shrinks the bracket by the
    factor :data:`GOLDEN`. After ``E >= 2`` calls the bracket has width
    ``GOLDEN ** (E - 1)`` of the original (in log space when ``geometric``). Returns the midpoint
    of the final bracket (no extra evaluation) and the bracket.
    """
    if evaluations < 2:
        raise ValueError(f"golden_section needs at least 2 evaluations; got {evaluations}.")
    mid, a, b = _golden(lambda t: f(float(t)), lo, hi, evaluations, geometric)
    return float(mid), (float(a), float(b))


def _golden(f: Callable[[Any], Any], lo: Any, hi: Any, evaluations: int, geometric: bool) -> Any:
    """:func:`golden_section` on one bracket or an array of them (``f`` then maps one point per
    bracket to one value per bracket): the final midpoints and brackets ``(mid, lo, hi)``."""
    a, b, back = _start(lo, hi, geometric)
    x1 = b - GOLDEN * (b - a)
    x2 = a + GOLDEN * (b - a)
    f1 = np.asarray(f(back(x1)), dtype=np.float64)
    f2 = np.asarray(f(back(x2)), dtype=np.float64)
    for _ in range(evaluations - 2):
        left = f1 <= f2  # the minimum is in [a, x2]; else in [x1, b]
        b = np.where(left, x2, b)
        a = np.where(left, a, x1)
        nx1 = np.where(left, b - GOLDEN * (b - a), x2)
        nx2 = np.where(left, x1, a + GOLDEN * (b - a))
        fnew = np.asarray(f(back(np.where(left, nx1, nx2))), dtype=np.float64)
        f1, f2 = np.where(left, fnew, f2), np.where(left, f1, fnew)
        x1, x2 = nx1, nx2
    left = f1 <= f2
    a, b = np.where(left, a, x1), np.where(left, x2, b)
    return back(0.5 * (a + b)), back(a), back(b)


def bisect_sign(
    g: Callable[[float], float],
    lo: float,
    hi: float,
    evaluations: int,
    *,
    geometric: bool = True,
) -> tuple[float, tuple[float, float]]:
    """Bisection for the root of an increasing ``g`` with exactly ``evaluations`` calls.

    Each call evaluates ``g`` at the bracket midpoint and keeps the half whose ends differ in
    sign, halving the bracket. Only the sign of ``g`` is used, so a noisy ``g`` still narrows the
    bracket correctly whenever the noise does not flip the sign. Returns the midpoint of the final
    bracket and the bracket.
    """
    if evaluations < 1:
        raise ValueError(f"bisect_sign needs at least 1 evaluation; got {evaluations}.")
    mid, a, b = _bisect(lambda t: g(float(t)), lo, hi, evaluations, geometric)
    return float(mid), (float(a), float(b))


def _bisect(g: Callable[[Any], Any], lo: Any, hi: Any, evaluations: int, geometric: bool) -> Any:
    """:func:`bisect_sign` on one bracket or an array of them, as :func:`_golden`."""
    a, b, back = _start(lo, hi, geometric)
    for _ in range(evaluations):
        m = 0.5 * (a + b)
        neg = np.asarray(g(back(m)), dtype=np.float64) < 0.0
        a, b = np.where(neg, m, a), np.where(neg, b, m)
    return back(0.5 * (a + b)), back(a), back(b)


def _start(lo: Any, hi: Any, geometric: bool) -> tuple[Any, Any, Callable[[Any], Any]]:
    """The bracket ends in the search coordinate (``log T`` if ``geometric``) and the map back."""
    a, b = (np.array(x, dtype=np.float64) for x in np.broadcast_arrays(lo, hi))
    if geometric:
        return np.log(a), np.log(b), np.exp
    return a, b, np.asarray


def geometric_grid(lo: float, hi: float, ratio: float) -> np.ndarray:
    """Points from ``lo`` to ``hi`` (both included), evenly spaced in ``log T``.

    The number of steps is ``round(log(hi / lo) / log(ratio))`` (at least 1), so consecutive
    points differ by a factor as close to ``ratio`` as the range allows.
    """
    steps = max(1, round(float(np.log(hi / lo) / np.log(ratio))))
    grid = np.exp(np.linspace(np.log(lo), np.log(hi), steps + 1))
    grid[0], grid[-1] = lo, hi  # the ends exactly, not exp(log(.)) rounded
    return grid


def isotonic_increasing(values: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Least-squares non-decreasing fit of each row of ``values`` (shape ``(R, k)``), vectorised.

    Minimises :math:`\\sum_j w_j (f_j - v_j)^2` over non-decreasing ``f`` (``w = 1`` when
    ``weights`` is None; otherwise ``weights`` is a positive ``(k,)`` array shared by the rows).
    Uses the min-max characterisation of (weighted) isotonic regression (Robertson, Wright &
    Dykstra 1988, Thm. 1.4.4): the fit at ``j`` is ``max_{i <= j} min_{l >= j} M(i, l)`` with
    ``M(i, l)`` the weighted mean of ``values[i..l]``. It costs ``O(R k^3)`` without a Python
    loop, which suits the short public grids it serves; it equals pool-adjacent-violators to
    rounding.
    """
    v = np.atleast_2d(np.asarray(values, dtype=np.float64))
    k = v.shape[1]
    w = np.ones(k) if weights is None else np.asarray(weights, dtype=np.float64)
    csum = np.concatenate([np.zeros((v.shape[0], 1)), np.cumsum(v * w, axis=1)], axis=1)
    wsum = np.concatenate([[0.0], np.cumsum(w)])
    i = np.arange(k)[:, None]
    j = np.arange(k)[None, :]
    upper = j >= i
    mass = np.where(upper, wsum[None, 1:] - wsum[:-1, None], 1.0)
    means = (csum[:, None, 1:] - csum[:, :-1, None]) / mass
    means = np.where(upper, means, np.inf)  # means[r, i, l] = M(i, l) for l >= i
    suffix_min = np.minimum.accumulate(means[:, :, ::-1], axis=2)[:, :, ::-1]
    return np.where(upper, suffix_min, -np.inf).max(axis=1)


def _check_grid(
    values: object, temperatures: object, fewer: int, owner: str, name: str, minimum: int
) -> np.ndarray:
    """The grid as floats, after checking it (increasing, positive, finite, at least ``minimum``
    points) and that ``values`` is finite with ``len(grid) - fewer`` entries per row."""
    t = np.asarray(temperatures, dtype=np.float64)
    if t.ndim != 1 or t.size < minimum or not np.all(np.isfinite(t)) or np.any(t <= 0):
        raise ValueError(
            f"The 'temperatures' parameter of {owner} must be a 1-D array of at least {minimum} "
            f"positive finite numbers. Got {temperatures!r} instead."
        )
    if np.any(np.diff(t) <= 0):
        raise ValueError(
            f"The 'temperatures' parameter of {owner} must be strictly increasing. Got "
            f"{temperatures!r} instead."
        )
    v = np.asarray(values, dtype=np.float64)
    if v.ndim not in (1, 2) or v.shape[-1] != t.size - fewer or not np.all(np.isfinite(v)):
        raise ValueError(
            f"The '{name}' parameter of {owner} must be a finite array of shape "
            f"({t.size - fewer},) or (R, {t.size - fewer}) for {t.size} temperatures. Got shape "
            f"{v.shape} instead."
        )
    return t


def monotone_root(values: np.ndarray, temperatures: np.ndarray) -> float | np.ndarray:
    """Root of an increasing function of ``T`` from its noisy values on a public grid.

    Parameters
    ----------
    values : ndarray of shape (k,) or (R, k)
        Noisy values of the function at ``temperatures`` (one row per problem).
    temperatures : ndarray of shape (k,)
        Increasing, positive grid.

    Returns
    -------
    float or ndarray of shape (R,)
        Per row: the isotonic fit :func:`isotonic_increasing` is computed, then the zero
        crossing is interpolated linearly in ``log T`` between the last negative and the first
        positive fitted value. A run of exact zeros gives the midpoint (in ``log T``) of the
        run, so ties never pick a side; a fit that never changes sign gives the grid edge
        toward the root (``temperatures[0]`` when all values are >= 0, the last one when all
        are <= 0). Every grid value enters the isotonic fit, so one noisy or degenerate value
        (e.g. an exact zero at an edge) moves the root only as much as its weight in a
        pooled mean.
    """
    t = _check_grid(values, temperatures, 0, "monotone_root", "values", minimum=2)
    x = np.log(t)
    scalar = np.ndim(values) == 1
    f = isotonic_increasing(values)
    k = x.size
    rows = np.arange(f.shape[0])
    n_neg, n_pos = (f < 0).sum(axis=1), (f > 0).sum(axis=1)
    last_neg = np.clip(n_neg - 1, 0, k - 1)
    first_pos = np.clip(k - n_pos, 0, k - 1)
    f_lo, f_hi = f[rows, last_neg], f[rows, first_pos]
    step = np.where(first_pos - last_neg == 1, f_hi - f_lo, 1.0)
    interp = x[last_neg] + (x[first_pos] - x[last_neg]) * (-f_lo / step)
    zeros_mid = 0.5 * (x[np.clip(n_neg, 0, k - 1)] + x[np.clip(k - n_pos - 1, 0, k - 1)])
    root = np.where((n_neg > 0) & (n_pos > 0) & (first_pos - last_neg == 1), interp, zeros_mid)
    root = np.where((n_neg == 0) & (n_pos == k), x[0], root)
    root = np.where((n_pos == 0) & (n_neg == k), x[-1], root)
    out = np.exp(root)
    return float(out[0]) if scalar else out


def convex_argmin(increments: np.ndarray, temperatures: np.ndarray) -> float | np.ndarray:
    """Minimiser of a function of ``T``, convex in ``beta = 1 / T``, from its noisy increments.

    Parameters
    ----------
    increments : ndarray of shape (k - 1,) or (R, k - 1)
        Noisy :math:`d_j = F(T_{j+1}) - F(T_j)` on the grid (one row per problem), with
        independent noise of equal scale on every coordinate (the release of
        :meth:`privcal.private.DataSource.clipped_nll_increments`, summed over sources).
    temperatures : ndarray of shape (k,)
        Increasing, positive grid, ``k >= 3``.

    Notes
    -----
    With :math:`\\beta_j = 1 / T_j` and :math:`w_j = \\beta_j - \\beta_{j+1} > 0`, the ratio
    :math:`s_j = d_j / w_j` is minus the secant slope of :math:`F` in :math:`\\beta` over
    :math:`[\\beta_{j+1}, \\beta_j]`; for :math:`F` convex in :math:`\\beta` (the NLL sum is:
    each term is a log-sum-exp of functions linear in :math:`\\beta`, minus a linear one) the
    secant slopes grow with :math:`\\beta`, so :math:`s_j` is non-decreasing in ``j``. Noise of
    scale :math:`b` on :math:`d_j` is noise of scale :math:`b / w_j` on :math:`s_j`, so the fit is
    :func:`isotonic_increasing` of :math:`s` with weights :math:`w_j^2` (inverse variances): the
    least-squares projection of the noisy curve onto the functions convex in :math:`\\beta`.
    The fitted curve :math:`\\hat F_j = \\sum_{i < j} \\hat s_i w_i` is interpolated by a cubic
    spline in :math:`\\log T` (not-a-knot), and the spline's minimum is read on
    :data:`SPLINE_POINTS` points per grid step within one step of the smallest fitted grid value
    (a resolution of ``log(T_{j+1} / T_j) / SPLINE_POINTS`` in ``log T``). Without noise and for
    exactly convex ``F`` the isotonic step changes nothing and the spline's error is
    :math:`O(h^4)` in the step :math:`h`: on the shared networks' clipped NLL with factor-sqrt(2)
    steps it finds the exact minimiser within 1.5% (a parabola through three points is off by
    2-5%, enough to move ECE by 0.2-0.4 points).
    """
    from scipy.interpolate import CubicSpline

    t = _check_grid(increments, temperatures, 1, "convex_argmin", "increments", minimum=3)
    scalar = np.ndim(increments) == 1
    d = np.atleast_2d(np.asarray(increments, dtype=np.float64))
    width = 1.0 / t[:-1] - 1.0 / t[1:]
    slopes = isotonic_increasing(d / width, weights=width**2)
    curve = np.concatenate([np.zeros((d.shape[0], 1)), np.cumsum(slopes * width, axis=1)], axis=1)
    x = np.log(t)
    steps = np.arange(x.size - 1)[:, None] + np.arange(SPLINE_POINTS)[None, :] / SPLINE_POINTS
    pos = np.append(steps.ravel(), x.size - 1.0)  # fine points, in units of grid steps
    fine = np.interp(pos, np.arange(x.size), x)
    values = CubicSpline(x, curve, axis=1)(fine)
    best = np.argmin(curve, axis=1)[:, None]
    values = np.where(np.abs(pos[None, :] - best) <= 1.0, values, np.inf)
    out = np.exp(fine[np.argmin(values, axis=1)])
    return float(out[0]) if scalar else out

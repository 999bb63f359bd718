"""Temperature scaling with three objectives: NLL (Guo et al., 2017), ECE and accuracy (Acc-T).

All three learn one scalar :math:`T > 0` and predict :math:`\\mathrm{softmax}(z / T)`; temperature
never changes the top-1 prediction. Each objective is a statistic from
:mod:`privcal.metrics.statistics`, which the private calibrators call too.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, ClassVar, Literal

import numpy as np
from scipy.optimize import brentq

from privcal._params import POSITIVE, Constraints, Int, Options, Range, check_range
from privcal.calibrators.base import Calibrator, FitWarning, register, store_params
from privcal.calibrators.search import golden_section
from privcal.metrics import statistics
from privcal.metrics.statistics import (
    TemperatureTerms,
    accuracy_gap_sum,
    calibration_bins,
    nll_terms,
    softmax,
    temperature_terms,
    top_confidence,
    top_correct,
)

__all__ = [
    "NLL_BOUND",
    "BoundaryWarning",
    "BoundedNLLWarning",
    "TemperatureScaling",
    "fit_temperature_acc",
    "fit_temperature_ece",
    "fit_temperature_nll",
    "warn_bounded_nll",
]

Objective = Literal["nll", "ece", "acc"]

#: Default bound ``B`` on each example's NLL in the NLL objective (see :func:`fit_temperature_nll`).
NLL_BOUND = 20.0
#: Temperatures :class:`TemperatureScaling` searches by default.
DEFAULT_T_RANGE = (0.05, 20.0)
_MAX_NEWTON = 100
#: Newton stops when a step (or the bracket) is this small relative to beta.
_NEWTON_RTOL = 1e-12
#: float32 logits: Newton steps use float32 row sums while a step is larger than this relative
#: to beta (see :func:`fit_temperature_nll`).
_LOW_PRECISION_STEP = 1e-3
#: From 8 times this many matrix entries on, the full-data Newton starts from a fit on every
#: k-th row, about this many entries (2^21: ~4% of a 50 000 x 1000 matrix).
_SUBSAMPLE_ENTRIES = 1 << 21
#: The start's fit only needs to beat its own sampling error (~1e-2 relative).
_SUBSAMPLE_RTOL = 1e-6
_MAX_MM = 20


class BoundaryWarning(FitWarning):
    """The best temperature lies at (or beyond) an end of ``t_range``: widen the range."""


class BoundedNLLWarning(FitWarning):
    """Some examples' NLL exceeded the bound of the NLL objective and counted as the bound."""


def _boundary(t: float, t_range: tuple[float, float], what: str) -> float:
    warnings.warn(
        f"The {what} temperature lies at the end of t_range={t_range} (T={t:g}); the optimum may "
        f"lie beyond it. Widen the 't_range' parameter (privcal fit: --t-range LOW HIGH) to "
        f"search further.",
        BoundaryWarning,
        stacklevel=4,
    )
    return t


#: ``evaluate(beta, active, low_precision)``: :func:`temperature_terms` of the fitting data.
Evaluate = Callable[[float, "np.ndarray | None", bool], TemperatureTerms]


def _same_rows(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    if a is None:
        return b is None or bool(b.all())
    if b is None:
        return bool(a.all())
    return bool(np.array_equal(a, b))


def _newton(
    evaluate: Evaluate,
    active: np.ndarray | None,
    lo: float,
    hi: float,
    beta: float,
    current: TemperatureTerms,
    *,
    low: bool = False,
    precise: bool = True,
    rtol: float = _NEWTON_RTOL,
) -> tuple[float, TemperatureTerms, bool]:
    """Minimise the mean NLL of the ``active`` rows (all for ``None``) over
    :math:`\\beta \\in [lo, hi]`.

    That NLL is convex in :math:`\\beta` (its second derivative is a mean of variances), so
    safeguarded Newton converges from any start: a step that leaves the bracket known to hold the
    minimum is replaced by bisection, or by the end of the range while that end is unexplored.
    ``current`` holds the terms at ``beta`` (re-evaluated if they were summed over other rows).
    With ``low=True`` the steps use low-precision terms while they are larger than
    :data:`_LOW_PRECISION_STEP` (relative), then, if ``precise``, float64 terms to the end: the
    bracket is reset to the range at the switch, since low-precision signs of a near-zero
    derivative are not to be trusted. Returns the minimiser, the terms at the last point
    evaluated (within ``rtol`` of the minimiser) and whether the minimum lies on an end of the
    range with the derivative pointing outwards.
    """
    if active is not None and not active.any():  # every row is at the bound: the NLL is flat
        return beta, current, False
    t = current if _same_rows(current.active, active) else evaluate(beta, active, low)
    a, b = lo, hi
    a_known = b_known = False

    def to_float64(at: float) -> TemperatureTerms:
        nonlocal low, a, b, a_known, b_known
        low, a, b, a_known, b_known = False, lo, hi, False, False
        return evaluate(at, active, False)

    for _ in range(_MAX_NEWTON):
        g = t.grad / t.n_active
        h = t.curv / t.n_active
        edge = (g > 0.0 and beta <= lo) or (g < 0.0 and beta >= hi)
        if g == 0.0 or edge:
            if low and precise:
                t = to_float64(beta)
                continue
            return beta, t, edge
        if g > 0.0:
            b, b_known = beta, True
        else:
            a, a_known = beta, True
        new = beta - g / h if h > 0.0 else np.nan
        if abs(new - beta) <= rtol * beta:  # converged, inside the bracket or not:
            if low and precise:  # a step this small is rounding in the summed derivative
                t = to_float64(beta)
                continue
            return beta, t, False
        if not a < new < b:
            if new <= a and not a_known:
                new = a
            elif new >= b and not b_known:
                new = b
            else:
                new = 0.5 * (a + b)
        if a_known and b_known and b - a <= rtol * beta:
            if low and precise:
                t = to_float64(new)
                beta = new
                continue
            return new, t, False
        if low and precise and abs(new - beta) <= _LOW_PRECISION_STEP * beta:
            beta = new
            t = to_float64(beta)
            continue
        beta = new
        t = evaluate(beta, active, low)
    return beta, t, False


def warn_bounded_nll(clipped: int, n: int, bound: float, fitted: str) -> None:
    """The :class:`BoundedNLLWarning` of a fit whose ``clipped`` of ``n`` examples counted as
    ``bound`` at the fitted ``fitted`` (temperature, vector and matrix scaling); none if 0."""
    if clipped:
        warnings.warn(
            f"{clipped} of {n} examples have a negative log-likelihood above "
            f"nll_bound={bound:g} at the fitted {fitted} (their true class gets probability "
            f"below {np.exp(-bound):.2g}) and counted as {bound:g}; with the plain NLL "
            f"(nll_bound=None) they would dominate the fit. Check them for label errors or "
            f"probabilities that were exactly 0.",
            BoundedNLLWarning,
            stacklevel=4,
        )


def _majorise_minimise(
    evaluate: Evaluate,
    lo: float,
    hi: float,
    beta: float,
    current: TemperatureTerms,
    bound: float,
) -> tuple[float, TemperatureTerms, bool]:
    """Minimise :math:`\\sum_i \\min(\\ell_i(\\beta), B)` from ``beta`` by majorise-minimise.

    With :math:`A` the rows below the bound at the current point,
    :math:`\\sum_{i \\in A} \\ell_i(\\beta) + |A^c| B` lies above the bounded objective and
    touches it there; minimising it (a convex problem, :func:`_newton`) cannot increase the
    objective. Repeat until the set of rows below the bound stops changing: a local minimum.
    """
    t = current
    edge = False
    for _ in range(_MAX_MM):
        active = t.nll <= bound
        beta, t, edge = _newton(evaluate, active, lo, hi, beta, t)
        if np.array_equal(t.nll <= bound, active):
            break
    return beta, t, edge


def _reaches_bound(
    z: np.ndarray, y: np.ndarray, beta: float, bound: float, true_gap: np.ndarray
) -> bool:
    """Whether some example's NLL at ``beta`` exceeds ``bound``, from the true-class gaps
    :math:`g_i = \\max_c z_{ic} - z_{iy_i}` (:func:`temperature_terms`) without a pass over the
    logits: :math:`\\beta g_i \\le \\ell_i(\\beta) \\le \\log C + \\beta g_i`, so only rows
    whose interval holds ``bound`` need their NLL (:func:`nll_terms`, those rows only)."""
    lower = beta * true_gap
    if (lower > bound * (1.0 + 1e-12)).any():
        return True
    unsure = np.flatnonzero(lower + np.log(z.shape[1]) >= bound * (1.0 - 1e-12))
    if unsure.size == 0:
        return False
    return bool((nll_terms(z[unsure], y[unsure], 1.0 / beta) > bound).any())


def _subsample_start(
    z: np.ndarray, y: np.ndarray, lo: float, hi: float, start: float, low: bool
) -> float:
    """The NLL minimiser over every k-th row (about :data:`_SUBSAMPLE_ENTRIES` entries), in low
    precision for float32 logits: a start within sampling error (~1e-2) of the full minimum,
    which Newton's quadratic convergence then reaches in three or four full passes."""
    stride = (z.shape[0] * z.shape[1]) // _SUBSAMPLE_ENTRIES
    zs, ys = np.ascontiguousarray(z[::stride]), np.ascontiguousarray(y[::stride])

    def sub(beta: float, active: np.ndarray | None, low_: bool) -> TemperatureTerms:
        return temperature_terms(zs, ys, beta, active=active, low_precision=low_)

    first = sub(start, None, low)
    beta, _, _ = _newton(
        sub, None, lo, hi, start, first, low=low, precise=False, rtol=_SUBSAMPLE_RTOL
    )
    return beta


def fit_temperature_nll(
    z: np.ndarray,
    y: np.ndarray,
    t_range: tuple[float, float],
    *,
    bound: float | None = None,
) -> float:
    """The temperature minimising the mean NLL, optionally with each example's NLL bounded.

    With :math:`d = z - \\max_c z` and :math:`p = \\mathrm{softmax}(\\beta d)`, :math:`\\beta =
    1/T`, the mean NLL is convex in :math:`\\beta` with derivative
    :math:`\\frac1N\\sum_i (E_{p_i}[d_i] - d_{iy_i})` and second derivative
    :math:`\\frac1N\\sum_i \\mathrm{Var}_{p_i}[d_i] \\ge 0`, all from one pass over the logits
    (:func:`~privcal.metrics.statistics.temperature_terms`: a compiled kernel, parallel over
    rows, on large inputs). Safeguarded Newton finds the minimum; on large inputs (from
    :math:`2^{24}` entries) it starts from the minimum over every k-th row (about
    :math:`2^{21}` entries), which leaves three or four full passes.

    Precision. float32 logits are never copied to float64. The full passes of the first Newton
    steps compute each row's exponentials and sums in float32 (twice as many SIMD lanes): their
    relative error is about :math:`10^{-6}` (exponential 1 ulp; the rounding of :math:`\\beta d`,
    :math:`|\\beta d|\\,2^{-24}` relative, on terms :math:`e^{\\beta d} \\le e^{-|\\beta d|}`,
    at most :math:`2^{-24}/e` absolute per term; sums of up to ~30 terms per SIMD lane), so
    the derivative they give is off by about :math:`10^{-6}\\max|d|` and the step by that over
    the curvature: on the shared networks and the synthetic benchmark the float32 minimum is
    1e-8 to 1e-7 (relative) from the float64 one. That is far below a step of
    :data:`_LOW_PRECISION_STEP` = 1e-3, so such steps are the float64 steps to three digits and
    converge as fast; from the first step below it on, every pass is float64 (row sums of the
    float32 values in float64) and Newton converges to the same :math:`10^{-12}` as for float64
    input. The float32 phase cannot move the answer: it only chooses where the float64 Newton
    starts, and the float64 phase starts from a fresh bracket (the whole range).

    ``bound=B`` minimises :math:`\\sum_i \\min(\\ell_i, B)` instead, the objective of the private
    NLL-T (:func:`~privcal.metrics.statistics.clipped_nll_sum`). An example whose true class gets
    probability below :math:`e^{-B}` then counts as :math:`B` whatever the temperature: a few
    such examples (label errors, probabilities that underflowed to 0 and became logits of
    -708) otherwise dominate the mean NLL, whose minimum then sits at the largest temperature
    allowed (20 newsgroups: 61 of 7532 examples, T = 20, held-out ECE 0.20 -> 0.65). The bounded
    objective is not convex; it is minimised by majorise-minimise (:func:`_majorise_minimise`)
    from the plain NLL minimum and from :math:`T = 1`, keeping the lower value. When no example
    reaches the bound at the plain minimum and at :math:`T = 1` (decided from the true-class
    gaps, :func:`_reaches_bound`, when no pass was made at :math:`T = 1`), the result is the
    plain NLL fit. A :class:`BoundedNLLWarning` says how many examples counted as ``B``; a
    :class:`BoundaryWarning` says when the minimum lies on an end of ``t_range``.
    """
    lo, hi = 1.0 / t_range[1], 1.0 / t_range[0]
    z = np.ascontiguousarray(z)
    y = np.ascontiguousarray(y, dtype=np.int64)
    n, c = z.shape
    low = z.dtype == np.float32 and n * c >= statistics.COMPILED_MIN_ENTRIES

    def evaluate(
        beta: float, active: np.ndarray | None, low_: bool, gap: bool = False
    ) -> TemperatureTerms:
        return temperature_terms(
            z, y, beta, active=active, bound=bound, low_precision=low_, true_gap=gap
        )

    start = float(np.clip(1.0, lo, hi))
    first = start
    if n * c >= 8 * _SUBSAMPLE_ENTRIES:
        first = _subsample_start(z, y, lo, hi, start, low)
    at_first = evaluate(first, None, low, bound is not None and first != start)
    beta, t, edge = _newton(evaluate, None, lo, hi, first, at_first, low=low)
    if bound is not None:
        found = [_majorise_minimise(evaluate, lo, hi, beta, t, bound)]
        if first == start and not low:
            reaches = bool((at_first.nll > bound).any())
        else:
            gap = at_first.true_gap if at_first.true_gap is not None else t.nll * 0.0
            reaches = _reaches_bound(z, y, start, bound, gap)
        if reaches:
            at_start = evaluate(start, None, False)
            found.append(_majorise_minimise(evaluate, lo, hi, start, at_start, bound))
        beta, t, edge = min(found, key=lambda f: f[1].bounded_sum)
        warn_bounded_nll(t.n_above, n, bound, "temperature")
    temperature = 1.0 / beta
    if edge:
        return _boundary(temperature, t_range, "NLL-optimal")
    return temperature


def fit_temperature_acc(z: np.ndarray, y: np.ndarray, t_range: tuple[float, float]) -> float:
    """Accuracy temperature scaling (Acc-T, seed 000): the T at which mean confidence = accuracy.

    The gap :math:`\\frac1N\\sum_i(1[\\text{correct}_i] - \\mathrm{conf}_T(i))` is increasing in
    T (top-label confidence decreases with T), so the root is unique when it exists; it is found
    with Brent's method in log T. When the gap has one sign over the whole range the nearest end
    is returned with a :class:`BoundaryWarning`.
    """
    lo, hi = np.log(t_range[0]), np.log(t_range[1])

    def gap(u: float) -> float:
        return float(accuracy_gap_sum(z, y, float(np.exp(u))))

    g_lo, g_hi = gap(lo), gap(hi)
    if g_lo >= 0.0:
        return _boundary(t_range[0], t_range, "accuracy-matching")
    if g_hi <= 0.0:
        return _boundary(t_range[1], t_range, "accuracy-matching")
    return float(np.exp(brentq(gap, lo, hi, xtol=1e-10)))


def fit_temperature_ece(
    z: np.ndarray, y: np.ndarray, t_range: tuple[float, float], n_bins: int = 15
) -> float:
    """The temperature minimising the binned top-label ECE.

    ECE is piecewise smooth and not unimodal in T, so a grid of 64 log-spaced temperatures
    locates the best cell, and a 30-evaluation golden-section search refines it within the two
    neighbouring cells.
    """
    correct = top_correct(z, y)

    def ece_at(t: float | np.ndarray) -> np.ndarray:
        conf = np.atleast_2d(top_confidence(z, t))
        return np.array([calibration_bins(c, correct, n_bins).ece() for c in conf])

    grid = np.geomspace(t_range[0], t_range[1], 64)
    values = ece_at(grid)
    k = int(np.argmin(values))
    lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, grid.size - 1)]
    t, _ = golden_section(lambda t: float(ece_at(t)[0]), lo, hi, evaluations=30)
    best = t if ece_at(t)[0] <= values[k] else float(grid[k])
    if k in (0, grid.size - 1):
        return _boundary(best, t_range, "ECE-optimal")
    return best


@register
class TemperatureScaling(Calibrator):
    """Temperature scaling :math:`\\hat p = \\mathrm{softmax}(z / T)`, T fitted by an objective.

    Parameters
    ----------
    objective : {"nll", "ece", "acc"}, default="nll"
        ``"nll"``: minimise the negative log-likelihood (Guo et al., 2017), each example's term
        bounded by ``nll_bound``.
        ``"ece"``: minimise the ``n_bins``-bin top-label ECE (ECE-T, seed 000).
        ``"acc"``: match the mean confidence to the accuracy (Acc-T, seed 000).
    t_range : (float, float), default=(0.05, 20.0)
        Search range for T. Wide by default: under strong domain shift the best T reaches 7,
        outside seed 000's [0.5, 3]. A :class:`BoundaryWarning` is raised when the fit lands at
        an end.
    n_bins : int, default=15
        Bins of the ECE objective.
    nll_bound : float or None, default=20.0
        Bound ``B`` on each example's NLL in the ``"nll"`` objective (see
        :func:`fit_temperature_nll`): an example whose true class gets probability below
        :math:`e^{-B}` (2e-9 for the default) counts as ``B``. Such examples are outliers to any
        calibration evidence, and a few of them (the 61 exact-zero true-class probabilities of
        the 20 newsgroups set) otherwise drive T to the end of ``t_range``. On data without them
        the fit is the plain NLL fit. ``None`` gives the plain NLL.

    Attributes
    ----------
    temperature_ : float
        The fitted temperature.
    n_classes_ : int
    fit_warnings_ : list of str
        The fit's diagnostics (end of ``t_range`` reached, examples at the NLL bound, and for the
        ``"ece"`` and ``"acc"`` objectives a cross-fit check against the uncalibrated model);
        empty when there were none. Each is also raised as a
        :class:`~privcal.calibrators.FitWarning`.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> z = 3.0 * rng.normal(size=(500, 4)); y = np.argmax(z + 2 * rng.normal(size=z.shape), 1)
    >>> TemperatureScaling().fit(z, y).temperature_ > 1  # over-confident logits are softened
    True
    """

    _fitted_attributes: ClassVar[tuple[str, ...]] = ("temperature_",)
    _accepts_float32: ClassVar[bool] = True
    _parameter_constraints = Constraints(
        objective=Options("nll", "ece", "acc"),
        t_range=Range(),
        n_bins=Int(1),
        nll_bound=[POSITIVE, None],
    )

    def __init__(
        self,
        objective: Objective = "nll",
        t_range: tuple[float, float] = DEFAULT_T_RANGE,
        n_bins: int = 15,
        nll_bound: float | None = NLL_BOUND,
    ) -> None:
        store_params(self, locals())

    def _fit(self, z: np.ndarray, y: np.ndarray) -> None:
        t_range = check_range(self.t_range, "t_range", type(self).__name__)
        if self.objective == "nll":
            bound = None if self.nll_bound is None else float(self.nll_bound)
            self.temperature_ = fit_temperature_nll(z, y, t_range, bound=bound)
        elif self.objective == "acc":  # float32 logits: one float64 copy, not one per step
            self.temperature_ = fit_temperature_acc(z.astype(np.float64, copy=False), y, t_range)
        else:
            z64 = z.astype(np.float64, copy=False)
            self.temperature_ = fit_temperature_ece(z64, y, t_range, self.n_bins)

    def _checks_by_cross_fit(self) -> bool:
        """ECE-T and Acc-T fit T to a binned or averaged statistic of the fitting rows, which
        they can over-fit where the model is already calibrated (MNIST: ECE 0.33% uncalibrated,
        0.39% after ECE-T on held-out halves), so their fits are cross-fit checked; the NLL
        objective is a proper scoring rule and is not."""
        return self.objective != "nll"

    def _predict_proba(self, z: np.ndarray) -> np.ndarray:
        return softmax(z, self.temperature_)

    def _jsonable_params(self) -> dict[str, Any]:
        return {
            "objective": self.objective,
            "t_range": list(self.t_range),
            "n_bins": self.n_bins,
            "nll_bound": self.nll_bound,
        }

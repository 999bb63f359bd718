"""Temperature scaling with three objectives: NLL (Guo et al., 2017), ECE and accuracy (Acc-T).

All three learn one scalar :math:`T > 0` and predict :math:`\\mathrm{softmax}(z / T)`; temperature
never changes the top-1 prediction. Each objective is a statistic from
:mod:`privcal.metrics.statistics`, which the private calibrators call too.
"""

from __future__ import annotations

import warnings
from typing import Any, ClassVar, Literal

import numpy as np
from scipy.optimize import brentq

from privcal._params import check_int, check_option, check_range
from privcal.calibrators.base import Calibrator, register
from privcal.calibrators.search import golden_section
from privcal.metrics.statistics import (
    accuracy_gap_sum,
    calibration_bins,
    softmax,
    top_confidence,
    top_correct,
)

__all__ = [
    "BoundaryWarning",
    "TemperatureScaling",
    "fit_temperature_acc",
    "fit_temperature_ece",
    "fit_temperature_nll",
]

Objective = Literal["nll", "ece", "acc"]


class BoundaryWarning(UserWarning):
    """The best temperature lies at (or beyond) an end of ``t_range``: widen the range."""


def _boundary(t: float, t_range: tuple[float, float], what: str) -> float:
    warnings.warn(
        f"The {what} temperature lies at the end of t_range={t_range} (T={t:g}); the optimum may "
        f"lie beyond it. Widen t_range to search further.",
        BoundaryWarning,
        stacklevel=4,
    )
    return t


def fit_temperature_nll(z: np.ndarray, y: np.ndarray, t_range: tuple[float, float]) -> float:
    """The temperature minimising the mean NLL, by safeguarded Newton in :math:`\\beta = 1/T`.

    With :math:`d = z - \\max_c z` and :math:`p = \\mathrm{softmax}(\\beta d)`, the mean NLL is
    convex in :math:`\\beta` with derivative :math:`\\frac1N\\sum_i (E_{p_i}[d_i] - d_{iy_i})` and
    second derivative :math:`\\frac1N\\sum_i \\mathrm{Var}_{p_i}[d_i] \\ge 0`, both available in the
    same pass over the logits. Newton steps that leave the current bracket fall back to
    bisection, so the method converges from any start; typically 5-8 passes.
    """
    d = z - z.max(axis=1, keepdims=True)
    d_y = d[np.arange(d.shape[0]), y]
    mean_dy = d_y.mean()

    e = np.empty_like(d)  # one buffer reused by every pass

    def grad_hess(beta: float) -> tuple[float, float]:
        np.multiply(d, beta, out=e)
        np.exp(e, out=e)
        s = np.einsum("ij->i", e)
        ed = np.einsum("ij,ij->i", e, d) / s
        ed2 = np.einsum("ij,ij,ij->i", e, d, d) / s
        return float(ed.mean() - mean_dy), float((ed2 - ed * ed).mean())

    lo, hi = 1.0 / t_range[1], 1.0 / t_range[0]
    if grad_hess(lo)[0] >= 0.0:
        return _boundary(t_range[1], t_range, "NLL-optimal")
    if grad_hess(hi)[0] <= 0.0:
        return _boundary(t_range[0], t_range, "NLL-optimal")
    beta = float(np.clip(1.0, lo, hi))
    for _ in range(100):
        g, h = grad_hess(beta)
        if g == 0.0:  # exact stationary point: a bisection step would only move away
            break
        if g > 0.0:
            hi = beta
        else:
            lo = beta
        new = beta - g / h if h > 0.0 else np.nan
        if not lo < new < hi:
            new = 0.5 * (lo + hi)
        if abs(new - beta) <= 1e-12 * beta or hi - lo <= 1e-12 * beta:
            beta = new
            break
        beta = new
    return 1.0 / beta


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
        ``"nll"``: minimise the negative log-likelihood (Guo et al., 2017).
        ``"ece"``: minimise the ``n_bins``-bin top-label ECE (ECE-T, seed 000).
        ``"acc"``: match the mean confidence to the accuracy (Acc-T, seed 000).
    t_range : (float, float), default=(0.05, 20.0)
        Search range for T. Wide by default: under strong domain shift the best T reaches 7,
        outside seed 000's [0.5, 3]. A :class:`BoundaryWarning` is raised when the fit lands at
        an end.
    n_bins : int, default=15
        Bins of the ECE objective.

    Attributes
    ----------
    temperature_ : float
        The fitted temperature.
    n_classes_ : int

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> z = 3.0 * rng.normal(size=(500, 4)); y = np.argmax(z + 2 * rng.normal(size=z.shape), 1)
    >>> TemperatureScaling().fit(z, y).temperature_ > 1  # over-confident logits are softened
    True
    """

    _fitted_attributes: ClassVar[tuple[str, ...]] = ("temperature_",)

    def __init__(
        self,
        objective: Objective = "nll",
        t_range: tuple[float, float] = (0.05, 20.0),
        n_bins: int = 15,
    ) -> None:
        self.objective = objective
        self.t_range = t_range
        self.n_bins = n_bins

    def _validate_params(self) -> None:
        owner = type(self).__name__
        check_option(self.objective, "objective", owner, ("nll", "ece", "acc"))
        check_range(self.t_range, "t_range", owner)
        check_int(self.n_bins, "n_bins", owner, low=1)

    def _fit(self, z: np.ndarray, y: np.ndarray) -> None:
        t_range = check_range(self.t_range, "t_range", type(self).__name__)
        if self.objective == "nll":
            self.temperature_ = fit_temperature_nll(z, y, t_range)
        elif self.objective == "acc":
            self.temperature_ = fit_temperature_acc(z, y, t_range)
        else:
            self.temperature_ = fit_temperature_ece(z, y, t_range, self.n_bins)

    def _predict_proba(self, z: np.ndarray) -> np.ndarray:
        return softmax(z, self.temperature_)

    def _jsonable_params(self) -> dict[str, Any]:
        return {"objective": self.objective, "t_range": list(self.t_range), "n_bins": self.n_bins}

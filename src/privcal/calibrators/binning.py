"""Binning calibrators on probabilities: histogram binning, BBQ and isotonic regression.

They act on :math:`\\hat p = \\mathrm{softmax}(z)` (``input="probs"`` gives probabilities
directly) and use the shared statistics :func:`~privcal.metrics.statistics.calibration_bins` and
:func:`~privcal.metrics.statistics.class_histograms`, which the private and federated versions
call too.

Multiclass outputs of one-vs-all maps :math:`g_j` are normalised,
:math:`g(\\hat p)_j = g_j(\\hat p_j) / \\sum_k g_k(\\hat p_k)` (seed 003 App. B.3). A row whose
maps are all zero cannot be normalised; it keeps its uncalibrated probabilities and an
:class:`UnnormalisableRowsWarning` says how many rows did.
"""

from __future__ import annotations

import warnings
from typing import Any, ClassVar, Literal

import numpy as np
from scipy.special import gammaln
from scipy.special import softmax as sp_softmax
from sklearn.isotonic import IsotonicRegression

from privcal._params import check_int, check_option
from privcal.calibrators.base import (
    Calibrator,
    check_fitted_array,
    fitted_field_error,
    register,
)
from privcal.metrics.statistics import bin_indices, calibration_bins, class_histograms, softmax

__all__ = [
    "BBQ",
    "HistogramBinning",
    "IsotonicCalibration",
    "UnnormalisableRowsWarning",
    "bbq_table",
    "bin_frequencies",
    "normalise_one_vs_all",
    "rescale_top_label",
]


def bin_frequencies(positives: np.ndarray, totals: np.ndarray) -> np.ndarray:
    """Per-bin frequency ``positives / totals``, NaN where a bin is empty (``totals <= 0``)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(totals > 0, positives / np.where(totals > 0, totals, 1.0), np.nan)


class UnnormalisableRowsWarning(UserWarning):
    """Some rows had zero calibrated mass in every class and kept their input probabilities."""


def normalise_one_vs_all(g: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Normalise one-vs-all outputs ``g`` (N x C); rows summing to 0 keep ``p``, with a warning."""
    s = g.sum(axis=1, keepdims=True)
    bad = s[:, 0] <= 0
    if bad.any():
        warnings.warn(
            f"{int(bad.sum())} rows have zero calibrated mass in every class; they keep their "
            f"uncalibrated probabilities.",
            UnnormalisableRowsWarning,
            stacklevel=4,
        )
    return np.where(bad[:, None], p, g / np.where(s > 0, s, 1.0))


def rescale_top_label(p: np.ndarray, new_top: np.ndarray) -> np.ndarray:
    """Set the top-label probability to ``v = new_top``; share ``1 - v`` among the other classes.

    The other classes keep their relative sizes, :math:`p_j (1 - v) / \\sum_{k \\ne top} p_k`,
    unless that would lift one of them above ``v`` and so change the prediction (under strong
    shift a confidence of 0.9 can be recalibrated to 0.3). Then their shares are mixed with the
    uniform share just enough that the largest equals ``v``: with ``m`` the largest relative share,
    ``u = 1 / (C - 1)`` and ``s = v / (1 - v)``, the mixing weight is
    :math:`\\lambda = (m - s) / (m - u)`. When even the uniform share exceeds ``v``
    (``v < 1 / C``) no distribution keeps the prediction and the uniform one is used. When the
    other classes have no mass at all, the remaining mass is shared equally.
    """
    n, c = p.shape
    rows = np.arange(n)
    top = np.argmax(p, axis=1)
    others = p.copy()
    others[rows, top] = 0.0
    rest = others.sum(axis=1)  # not 1 - conf: that loses all precision when conf ~ 1
    uniform = 1.0 / max(c - 1, 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(
            rest[:, None] > 0, others / np.where(rest > 0, rest, 1.0)[:, None], uniform
        )
        share[rows, top] = 0.0
        largest = share.max(axis=1)
        allowed = np.where(new_top < 1.0, new_top / (1.0 - new_top), np.inf)
        lam = np.where(
            largest > allowed, (largest - allowed) / np.maximum(largest - uniform, 1e-300), 0.0
        )
    lam = np.clip(lam, 0.0, 1.0)[:, None]
    mixed = (1.0 - lam) * share + lam * uniform
    mixed[rows, top] = 0.0
    out = mixed * (1.0 - new_top)[:, None]
    out[rows, top] = new_top
    return out


@register
class HistogramBinning(Calibrator):
    """Histogram binning (Zadrozny & Elkan, 2001) with equal-width, right-closed bins.

    Parameters
    ----------
    mode : {"top", "classwise"}, default="top"
        ``"top"``: bin the top-label confidence and replace it by the bin's accuracy (seed 000).
        ``"classwise"``: one-vs-all binning of every class probability, replaced by the bin's
        frequency of that class :math:`P_j(m) / (P_j(m) + N_j(m))` (seed 003 App. B.3), then
        normalised.
    n_bins : int, default=15

    Attributes
    ----------
    bin_values_ : ndarray of shape (n_bins,) or (C, n_bins)
        Calibrated value per bin; NaN for a bin that held no validation example, where the input
        probability is kept unchanged.
    """

    _fitted_attributes: ClassVar[tuple[str, ...]] = ("bin_values_",)
    _cross_fit_diagnostic: ClassVar[bool] = True

    def __init__(self, mode: Literal["top", "classwise"] = "top", n_bins: int = 15) -> None:
        self.mode = mode
        self.n_bins = n_bins

    def _validate_params(self) -> None:
        owner = type(self).__name__
        check_option(self.mode, "mode", owner, ("top", "classwise"))
        check_int(self.n_bins, "n_bins", owner, low=1)

    def _fit(self, z: np.ndarray, y: np.ndarray) -> None:
        p = softmax(z)
        if self.mode == "top":
            pred = np.argmax(p, axis=1)
            stats = calibration_bins(p[np.arange(p.shape[0]), pred], pred == y, self.n_bins)
            self.bin_values_ = bin_frequencies(stats.sum_correct, stats.counts)
        else:
            pos, neg = class_histograms(p, y, self.n_bins)
            self.bin_values_ = bin_frequencies(pos, pos + neg)

    def _predict_proba(self, z: np.ndarray) -> np.ndarray:
        p = softmax(z)
        values = np.asarray(self.bin_values_, dtype=np.float64)
        n_bins = values.shape[-1]
        if values.ndim == 1:
            conf = p.max(axis=1)
            v = values[bin_indices(conf, n_bins)]
            return rescale_top_label(p, np.where(np.isnan(v), conf, v))
        g = values[np.arange(p.shape[1])[None, :], bin_indices(p, n_bins)]
        out = normalise_one_vs_all(np.where(np.isnan(g), p, g), p)
        return out

    def _validate_fitted(self) -> None:
        super()._validate_fitted()
        shape = (self.n_bins,) if self.mode == "top" else (self.n_classes_, self.n_bins)
        check_fitted_array(self, "bin_values_", shape, low=0.0, high=1.0, nan_ok=True)


def bbq_table(positives: np.ndarray, negatives: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Combine dyadic binnings of classwise histograms into one BBQ table (seed 003 App. B.4).

    ``positives`` and ``negatives`` are ``C x 2^M`` equal-width histograms. Merging neighbouring
    bins in powers of two gives binnings with :math:`B \\in \\{2, 4, \\dots, 2^M\\}` bins. Each gets
    the Bayesian score of Naeini et al. (2015),

    .. math:: \\log S = \\sum_b \\log\\Gamma(\\tfrac{N'}{B}) - \\log\\Gamma(N_b + \\tfrac{N'}{B})
              + \\log\\frac{\\Gamma(m_b + \\alpha_b)}{\\Gamma(\\alpha_b)}
              + \\log\\frac{\\Gamma(n_b + \\beta_b)}{\\Gamma(\\beta_b)},

    with :math:`\\alpha_b = \\tfrac{2}{B} p_b`, :math:`\\beta_b = \\tfrac{2}{B}(1 - p_b)`,
    :math:`N' = 2` and :math:`p_b` the bin midpoint, and predicts the posterior mean
    :math:`(m_b + \\alpha_b)/(N_b + \\alpha_b + \\beta_b)` in each bin. The binnings are
    averaged with weights :math:`S_i / \\sum_i S_i` (a softmax of the log scores). Because every
    coarse bin is a union of fine bins, the average is itself a table over the ``2^M`` fine bins.

    Counts may be non-integer or (after noise) negative; they are clipped at 0 here, which is
    post-processing. Returns the ``C x 2^M`` table and the ``C x M`` weights.
    """
    pos = np.maximum(positives, 0.0)
    neg = np.maximum(negatives, 0.0)
    c, fine = pos.shape
    levels = round(float(np.log2(fine)))
    if 2**levels != fine:
        raise ValueError(f"BBQ histograms need 2^M bins; got {fine}.")
    tables, scores = [], []
    for level in range(1, levels + 1):
        b = 2**level
        m = pos.reshape(c, b, -1).sum(axis=2)
        n = neg.reshape(c, b, -1).sum(axis=2)
        mid = (np.arange(b) + 0.5) / b
        alpha, beta = 2.0 / b * mid, 2.0 / b * (1.0 - mid)
        score = (
            gammaln(2.0 / b)
            - gammaln(m + n + 2.0 / b)
            + gammaln(m + alpha)
            - gammaln(alpha)
            + gammaln(n + beta)
            - gammaln(beta)
        ).sum(axis=1)
        scores.append(score)
        tables.append(np.repeat((m + alpha) / (m + n + alpha + beta), fine // b, axis=1))
    weights = sp_softmax(np.stack(scores, axis=1), axis=1)  # C x M
    table = np.einsum("cl,lcb->cb", weights, np.stack(tables))
    return table, weights


@register
class BBQ(Calibrator):
    """Bayesian binning into quantiles, in seed 003's dyadic equal-width form (App. B.4).

    One-vs-all per class on ``2^n_levels`` fine bins merged into ``n_levels`` binnings and
    averaged by their Bayesian scores (see :func:`bbq_table`), then normalised across classes.
    The same :func:`bbq_table` turns federated (summed, possibly noisy) histograms into FedBBQ.

    Parameters
    ----------
    n_levels : int, default=7
        ``M``: the finest binning has ``2^M`` bins (seed 003 uses M = 7).

    Attributes
    ----------
    table_ : ndarray of shape (C, 2^M)
    weights_ : ndarray of shape (C, M) — posterior weights of the binnings with 2, 4, ... bins.
    """

    _fitted_attributes: ClassVar[tuple[str, ...]] = ("table_", "weights_")
    _cross_fit_diagnostic: ClassVar[bool] = True

    def __init__(self, n_levels: int = 7) -> None:
        self.n_levels = n_levels

    def _validate_params(self) -> None:
        check_int(self.n_levels, "n_levels", type(self).__name__, low=1)

    def _fit(self, z: np.ndarray, y: np.ndarray) -> None:
        pos, neg = class_histograms(softmax(z), y, 2**self.n_levels)
        self.table_, self.weights_ = bbq_table(pos, neg)

    def _predict_proba(self, z: np.ndarray) -> np.ndarray:
        p = softmax(z)
        table = np.asarray(self.table_)
        g = table[np.arange(p.shape[1])[None, :], bin_indices(p, table.shape[1])]
        out = normalise_one_vs_all(g, p)
        return out

    def _validate_fitted(self) -> None:
        super()._validate_fitted()
        c, m = self.n_classes_, self.n_levels
        check_fitted_array(self, "table_", (c, 2**m), low=0.0, high=1.0)
        check_fitted_array(self, "weights_", (c, m), low=0.0, high=1.0)


@register
class IsotonicCalibration(Calibrator):
    """One-vs-all isotonic regression (Zadrozny & Elkan, 2002) on class probabilities.

    For each class a non-decreasing step function of :math:`\\hat p_j` is fitted to
    :math:`1[y = j]` by pool-adjacent-violators (scikit-learn's ``IsotonicRegression``); outside
    the fitted range it is constant. Outputs are normalised across classes.

    Attributes
    ----------
    x_thresholds_, y_thresholds_ : list of C arrays — the fitted step functions.
    """

    _fitted_attributes: ClassVar[tuple[str, ...]] = ("x_thresholds_", "y_thresholds_")
    _cross_fit_diagnostic: ClassVar[bool] = True

    def _fit(self, z: np.ndarray, y: np.ndarray) -> None:
        p = softmax(z)
        xs, ys = [], []
        for j in range(p.shape[1]):  # one small PAV fit per class
            iso = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip")
            iso.fit(p[:, j], (y == j).astype(np.float64))
            xs.append(np.asarray(iso.X_thresholds_, dtype=np.float64))
            ys.append(np.asarray(iso.y_thresholds_, dtype=np.float64))
        self.x_thresholds_, self.y_thresholds_ = xs, ys

    def _predict_proba(self, z: np.ndarray) -> np.ndarray:
        p = softmax(z)
        g = np.column_stack(
            [
                np.interp(p[:, j], x, yv)
                for j, (x, yv) in enumerate(
                    zip(self.x_thresholds_, self.y_thresholds_, strict=True)
                )
            ]
        )
        out = normalise_one_vs_all(g, p)
        return out

    def _validate_fitted(self) -> None:
        """One non-decreasing step function per class: x in [0, 1] sorted, y in [0, 1]."""
        super()._validate_fitted()
        xs, ys = self.x_thresholds_, self.y_thresholds_
        c = self.n_classes_
        for field, steps in (("x_thresholds_", xs), ("y_thresholds_", ys)):
            if not isinstance(steps, list) or len(steps) != c:
                raise fitted_field_error(
                    self, field, f"a list of {c} arrays (one per class)", steps
                )
        for j, (x, yv) in enumerate(zip(xs, ys, strict=True)):
            x = np.asarray(x, dtype=np.float64)
            yv = np.asarray(yv, dtype=np.float64)
            if x.ndim != 1 or x.shape != yv.shape or x.size == 0:
                raise fitted_field_error(
                    self,
                    f"x_thresholds_[{j}]",
                    "a non-empty 1-D array as long as y_thresholds_",
                    x.shape,
                )
            for field, v in ((f"x_thresholds_[{j}]", x), (f"y_thresholds_[{j}]", yv)):
                if (v < 0.0).any() or (v > 1.0).any() or (np.diff(v) < 0.0).any():
                    raise fitted_field_error(self, field, "non-decreasing values in [0, 1]", v)
            xs[j], ys[j] = x, yv

    def _jsonable_params(self) -> dict[str, Any]:
        return {}

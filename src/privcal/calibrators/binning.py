"""Binning calibrators on probabilities: histogram binning, BBQ and isotonic regression.

They act on :math:`\\hat p = \\mathrm{softmax}(z)` (``input="probs"`` gives probabilities
directly) and use the shared statistics :func:`~privcal.metrics.statistics.calibration_bins` and
:func:`~privcal.metrics.statistics.class_histograms`, which the private and federated versions
call too.

With ``prior="model"`` (:class:`HistogramBinning`, :class:`BBQ`) a bin's frequency is shrunk
toward the model's own probability by :func:`shrink_to_model`, by an amount that accounts for the
bin's count and for the noise of the counts when they are a private release; the fitted state
then keeps the counts (``counts_``) and their noise std (``count_noise_``).

Multiclass outputs of one-vs-all maps :math:`g_j` are normalised,
:math:`g(\\hat p)_j = g_j(\\hat p_j) / \\sum_k g_k(\\hat p_k)` (seed 003 App. B.3). A row whose
maps are all zero cannot be normalised; it keeps its uncalibrated probabilities and an
:class:`UnnormalisableRowsWarning` says how many rows did.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, ClassVar, Literal

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import gammaln
from scipy.special import softmax as sp_softmax
from sklearn.isotonic import IsotonicRegression

from privcal._params import NON_NEGATIVE, Constraints, Int, Options, check_int
from privcal.calibrators.base import (
    Calibrator,
    check_fitted_array,
    fitted_field_error,
    register,
    store_params,
)
from privcal.data.validation import check_labels, check_probs
from privcal.exceptions import PrivcalWarning
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
    "shrink_to_model",
]

#: ``z`` of :func:`shrink_to_model`: the conservative count of a bin is the released count minus
#: ``z`` noise stds, so a bin whose count is within about two noise stds of 0 counts as empty.
#: Chosen, with :data:`NOISE_WEIGHT` and :data:`PRIOR_STRENGTH`, on FedBin / FedBBQ releases of
#: the WRN-16-4 CIFAR-10 / CIFAR-100 networks in ../shared/data (Dirichlet(0.1) label skew,
#: 100 clients, 12 rounds, epsilon in {0.5, 1, 4, inf}); with these values no setting was worse
#: than the uncalibrated model (docs/federated.md).
NOISE_MARGIN = 2.0

#: ``a`` of :func:`shrink_to_model`: weight of the noise term (the delta-method variance the
#: noise adds to a bin's frequency) against the sampling term; chosen as :data:`NOISE_MARGIN`.
NOISE_WEIGHT = 4.0

#: Default ``prior_strength`` ``k``: pseudo-counts of the model's own probability in a bin; without
#: noise the calibrated value is :math:`(P + k \hat p)/(n + k)`. Chosen as :data:`NOISE_MARGIN`.
PRIOR_STRENGTH = 10.0

_TINY = 1e-12


def bin_frequencies(positives: np.ndarray, totals: np.ndarray) -> np.ndarray:
    """Per-bin frequency ``positives / totals``, NaN where a bin is empty (``totals <= 0``)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(totals > 0, positives / np.where(totals > 0, totals, 1.0), np.nan)


class UnnormalisableRowsWarning(PrivcalWarning):
    """Some rows had zero calibrated mass in every class and kept their input probabilities."""


def shrink_to_model(
    pos: ArrayLike,
    neg: ArrayLike,
    p: ArrayLike,
    noise_std: tuple[Any, Any] = (0.0, 0.0),
    strength: float = PRIOR_STRENGTH,
) -> np.ndarray:
    """A bin's frequency shrunk toward the model's probability ``p`` of each row.

    For a row with probability :math:`p` in a bin with (possibly noisy) counts ``pos`` =
    :math:`P` and ``neg`` = :math:`N`, whose noise stds are ``noise_std`` =
    :math:`(s_+, s_-)` (0 for exact counts), with :math:`P_+ = \\max(P, 0)`,
    :math:`N_+ = \\max(N, 0)`:

    .. math::
        n = P_+ + N_+ - z\\sqrt{s_+^2 + s_-^2}, \\quad f = \\frac{P_+}{P_+ + N_+}, \\quad
        r = k\\Big[\\frac1n + a\\,\\frac{s_+^2 (1-p)/p + s_-^2\\, p/(1-p)}{n^2}\\Big],

    and the output is :math:`g = p + w (f - p)` with :math:`w = 1/(1 + r)` if :math:`n > 0`,
    else :math:`w = 0` (the bin keeps the model's probability). ``k`` is ``strength``,
    ``z`` = :data:`NOISE_MARGIN`, ``a`` = :data:`NOISE_WEIGHT`. The :math:`1/n` term is the
    sampling variance of :math:`f` relative to that of the prior (``k`` pseudo-counts at
    :math:`p`); the second is the variance the noise adds to the ratio :math:`f` (delta method,
    :math:`\\mathrm{Var} f \\approx (s_+^2 (1-f)^2 + s_-^2 f^2)/n^2`, evaluated at
    :math:`f = p` and divided by :math:`p(1-p)`). Without noise :math:`w = n/(n + k)` and
    :math:`g = (P + k p)/(n + k)`; with ``strength=0`` it is the bin's frequency (``p`` in an
    empty bin). Arguments broadcast together. Only the released counts, their public noise
    scale and the input ``p`` are used, so on private counts this is post-processing and the
    guarantee is unchanged.
    """
    owner = "shrink_to_model"
    sp, sn = (np.asarray(s, dtype=np.float64) for s in noise_std)
    if not all(np.all(np.isfinite(x) & (x >= 0.0)) for x in (sp, sn)):
        raise ValueError(
            f"The 'noise_std' parameter of {owner} must be two finite stds >= 0. Got "
            f"{noise_std!r} instead."
        )
    NON_NEGATIVE.check(strength, "strength", owner)
    p = np.asarray(p, dtype=np.float64)
    if not np.all((p >= 0.0) & (p <= 1.0)):
        raise ValueError(
            f"The 'p' parameter of {owner} must hold probabilities in [0, 1] (no NaN). Got "
            f"values in [{np.nanmin(p)}, {np.nanmax(p)}] with {int(np.isnan(p).sum())} NaN."
        )
    pos_c, neg_c = np.maximum(pos, 0.0), np.maximum(neg, 0.0)
    total = pos_c + neg_c
    n = total - NOISE_MARGIN * np.sqrt(sp**2 + sn**2)
    n_safe = np.maximum(n, _TINY)
    f = pos_c / np.maximum(total, _TINY)
    pc = np.clip(p, _TINY, 1.0 - _TINY)
    noise = NOISE_WEIGHT * (sp**2 * (1.0 - pc) / pc + sn**2 * pc / (1.0 - pc)) / n_safe**2
    w = np.where(n > 0, 1.0 / (1.0 + strength * (1.0 / n_safe + noise)), 0.0)
    return p + w * (f - p)


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


#: Relative margin by which :func:`rescale_top_label` keeps the other classes below the top.
TIE_MARGIN = 1e-9


def rescale_top_label(p: np.ndarray, new_top: np.ndarray) -> np.ndarray:
    """Set the top-label probability to ``v = new_top``; share ``1 - v`` among the other classes.

    The other classes keep their relative sizes, :math:`p_j (1 - v) / \\sum_{k \\ne top} p_k`,
    unless that would lift one of them to ``v`` or above and so change the prediction (under
    strong shift a confidence of 0.9 can be recalibrated to 0.3). Then their shares are mixed with
    the uniform share just enough that the largest is ``v (1 - 1e-9)``: with ``m`` the largest
    relative share, ``u = 1 / (C - 1)`` and ``s = (1 - 10^{-9}) v / (1 - v)``, the mixing weight
    is :math:`\\lambda = (m - s) / (m - u)`. (Mixing to exactly ``v`` would leave a tie that
    ``argmax`` breaks by class index: on lenet-5 CIFAR-10 24% of test rows, and 1.4 points of
    accuracy lost.) When even the uniform share exceeds ``v``
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
        allowed = np.where(new_top < 1.0, (1.0 - TIE_MARGIN) * new_top / (1.0 - new_top), np.inf)
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
    prior : {None, "model"}, default=None
        ``None``: the bin's frequency (an empty bin keeps the input probability). ``"model"``:
        the frequency shrunk toward each row's own probability by :func:`shrink_to_model`
        (``prior_strength`` pseudo-counts, more where the counts are noisy).
    prior_strength : float, default=10.0
        ``k`` of :func:`shrink_to_model`, ``>= 0``; used with ``prior="model"``.

    Attributes
    ----------
    bin_values_ : ndarray of shape (n_bins,) or (C, n_bins)
        Bin frequency; NaN for a bin that held no validation example, where the input
        probability is kept unchanged.
    counts_ : ndarray of shape (2, n_bins) or (2, C, n_bins)
        Positive and negative counts per bin (correct / incorrect for ``"top"``).
    count_noise_ : ndarray of shape (2,)
        Noise std of each entry of ``counts_[0]`` and ``counts_[1]``; 0 for a central fit, the
        public noise scale when the counts are a private release (FedBin). ``counts_`` and
        ``count_noise_`` are saved by :meth:`to_dict` with ``prior="model"`` only (the files of
        ``prior=None`` keep their earlier format).
    """

    _fitted_attributes: ClassVar[tuple[str, ...]] = ("bin_values_",)
    _cross_fit_diagnostic: ClassVar[bool] = True
    _parameter_constraints = Constraints(
        mode=Options("top", "classwise"),
        n_bins=Int(1),
        prior=Options(None, "model"),
        prior_strength=NON_NEGATIVE,
    )

    def __init__(
        self,
        mode: Literal["top", "classwise"] = "top",
        n_bins: int = 15,
        prior: Literal["model"] | None = None,
        prior_strength: float = PRIOR_STRENGTH,
    ) -> None:
        store_params(self, locals())

    def _fit(self, z: np.ndarray, y: np.ndarray) -> None:
        p = softmax(z)
        if self.mode == "top":
            pred = np.argmax(p, axis=1)
            stats = calibration_bins(p[np.arange(p.shape[0]), pred], pred == y, self.n_bins)
            self.set_counts(stats.sum_correct, stats.counts - stats.sum_correct)
        else:
            self.set_counts(*class_histograms(p, y, self.n_bins))

    def fit_top_label(
        self, confidence: ArrayLike, correct: ArrayLike, n_classes: int
    ) -> HistogramBinning:
        """Fit ``mode="top"`` binning from top-label data alone.

        Parameters
        ----------
        confidence : array-like of shape (N,)
            Top-label confidence of each validation example, in [0, 1].
        correct : array-like of shape (N,)
            Whether the predicted class was right (bool or 0/1).
        n_classes : int
            Number of classes ``C >= 2`` of the model, kept as ``n_classes_`` (the width of the
            full vectors :meth:`predict_proba` accepts); a top-label file gives a lower bound.

        The counts are those :meth:`fit` computes from logits (``calibration_bins`` of the
        confidence and the correctness), so both fits agree on the same rows. The map takes a
        confidence to its bin's accuracy; :meth:`predict_confidence` applies it to confidences.
        """
        self._validate_params()
        if self.mode != "top":
            raise ValueError(
                f"HistogramBinning.fit_top_label needs mode='top'; got mode={self.mode!r} (the "
                "classwise mode bins every class probability, which top-label data lacks)."
            )
        conf = _confidences(confidence)
        hits = check_labels(correct, conf.shape[0], 2, name="correct")
        c = check_int(n_classes, "n_classes", "HistogramBinning.fit_top_label", low=2)
        stats = calibration_bins(conf, hits.astype(bool), self.n_bins)
        self.set_counts(stats.sum_correct, stats.counts - stats.sum_correct)
        self.n_classes_ = c
        return self

    def predict_confidence(self, confidence: ArrayLike) -> np.ndarray:
        """Calibrated top-label confidence of each confidence in ``confidence`` (``mode="top"``).

        What :meth:`predict_proba` puts in the predicted class's place, without the rest of the
        probability vector: for top-label data (confidence and predicted class only).
        """
        self._check_fitted()
        if self.mode != "top":
            raise ValueError(
                "HistogramBinning.predict_confidence needs mode='top'; a classwise calibrator "
                "maps every class probability, which top-label data lacks."
            )
        return np.asarray(self._calibrated(_confidences(confidence)))

    def set_counts(
        self, pos: np.ndarray, neg: np.ndarray, noise_std: tuple[float, float] = (0.0, 0.0)
    ) -> None:
        """Set the fitted state from per-bin counts (possibly noisy, with noise std ``noise_std``).

        ``bin_values_`` are the frequencies of the counts clamped at 0 (post-processing).
        """
        self.counts_ = np.stack([pos, neg]).astype(np.float64)
        self.count_noise_ = np.asarray(noise_std, dtype=np.float64)
        pos_c, neg_c = np.maximum(self.counts_, 0.0)
        self.bin_values_ = bin_frequencies(pos_c, pos_c + neg_c)

    def _calibrated(self, q: np.ndarray) -> np.ndarray:
        """Calibrated value of each probability in ``q`` (top: (N,), classwise: (N, C))."""
        n_bins = np.shape(self.bin_values_)[-1]
        idx = bin_indices(q, n_bins)
        cell = (np.arange(q.shape[1])[None, :], idx) if q.ndim == 2 else (idx,)
        if self.prior is None:
            v = np.asarray(self.bin_values_, dtype=np.float64)[cell]
            return np.where(np.isnan(v), q, v)
        counts = np.asarray(self.counts_, dtype=np.float64)
        noise = np.asarray(self.count_noise_, dtype=np.float64)
        return shrink_to_model(
            counts[0][cell], counts[1][cell], q, (noise[0], noise[1]), float(self.prior_strength)
        )

    def _predict_proba(self, z: np.ndarray) -> np.ndarray:
        p = softmax(z)
        if self.mode == "top":
            return rescale_top_label(p, self._calibrated(p.max(axis=1)))
        return normalise_one_vs_all(self._calibrated(p), p)

    def _validate_fitted(self) -> None:
        super()._validate_fitted()
        shape = (self.n_bins,) if self.mode == "top" else (self.n_classes_, self.n_bins)
        check_fitted_array(self, "bin_values_", shape, low=0.0, high=1.0, nan_ok=True)
        if self.prior is not None:
            check_fitted_array(self, "counts_", (2, *shape))
            check_fitted_array(self, "count_noise_", (2,), low=0.0)

    def _fitted_names(self) -> tuple[str, ...]:
        return _with_counts(self._fitted_attributes, self.prior)


def _confidences(confidence: ArrayLike) -> np.ndarray:
    """Top-label confidences as a checked 1-D float array (:func:`check_probs`)."""
    conf = np.asarray(confidence, dtype=np.float64)
    if conf.ndim != 1:
        raise ValueError(f"'confidence' must be 1-D; got shape {conf.shape}.")
    return check_probs(conf, "confidence")[:, 1]


def _with_counts(names: tuple[str, ...], prior: str | None) -> tuple[str, ...]:
    """``names``, plus the counts and their noise std that ``prior="model"`` predicts from.

    Without a prior the files keep the format of earlier versions (the bin values only).
    """
    return names if prior is None else (*names, "counts_", "count_noise_")


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
    prior : {None, "model"}, default=None
        ``None``: each binning predicts its posterior mean (:func:`bbq_table`). ``"model"``: each
        binning with ``B`` bins predicts the merged bin's frequency shrunk toward the row's own
        probability (:func:`shrink_to_model`, the merged counts' noise std being
        ``sqrt(2^M / B)`` times a fine bin's), averaged with the same weights ``weights_``.
    prior_strength : float, default=10.0
        ``k`` of :func:`shrink_to_model`, ``>= 0``; used with ``prior="model"``.

    Attributes
    ----------
    table_ : ndarray of shape (C, 2^M)
    weights_ : ndarray of shape (C, M) — posterior weights of the binnings with 2, 4, ... bins.
    counts_ : ndarray of shape (2, C, 2^M) — positive and negative counts per fine bin.
    count_noise_ : ndarray of shape (2,) — their noise std (0 for a central fit); this and
        ``counts_`` are saved with ``prior="model"`` only.
    """

    _fitted_attributes: ClassVar[tuple[str, ...]] = ("table_", "weights_")
    _cross_fit_diagnostic: ClassVar[bool] = True
    _parameter_constraints = Constraints(
        n_levels=Int(1), prior=Options(None, "model"), prior_strength=NON_NEGATIVE
    )

    def __init__(
        self,
        n_levels: int = 7,
        prior: Literal["model"] | None = None,
        prior_strength: float = PRIOR_STRENGTH,
    ) -> None:
        store_params(self, locals())

    def _fit(self, z: np.ndarray, y: np.ndarray) -> None:
        self.set_counts(*class_histograms(softmax(z), y, 2**self.n_levels))

    def set_counts(
        self, pos: np.ndarray, neg: np.ndarray, noise_std: tuple[float, float] = (0.0, 0.0)
    ) -> None:
        """Set the fitted state from ``C x 2^M`` counts (possibly noisy, std ``noise_std``)."""
        self.counts_ = np.stack([pos, neg]).astype(np.float64)
        self.count_noise_ = np.asarray(noise_std, dtype=np.float64)
        self.table_, self.weights_ = bbq_table(*self.counts_)

    def _calibrated(self, p: np.ndarray) -> np.ndarray:
        """One-vs-all outputs ``g`` (N x C) before normalisation."""
        cols = np.arange(p.shape[1])[None, :]
        if self.prior is None:
            table = np.asarray(self.table_)
            return table[cols, bin_indices(p, table.shape[1])]
        counts = np.asarray(self.counts_, dtype=np.float64)
        noise = np.asarray(self.count_noise_, dtype=np.float64)
        weights = np.asarray(self.weights_, dtype=np.float64)
        _, c, fine = counts.shape
        out = np.zeros_like(p)
        for level in range(1, weights.shape[1] + 1):
            b = 2**level
            merged = counts.reshape(2, c, b, fine // b).sum(axis=3)
            idx = bin_indices(p, b)
            scale = math.sqrt(fine // b)
            g = shrink_to_model(
                merged[0][cols, idx],
                merged[1][cols, idx],
                p,
                (noise[0] * scale, noise[1] * scale),
                float(self.prior_strength),
            )
            out += weights[:, level - 1][None, :] * g
        return out

    def _predict_proba(self, z: np.ndarray) -> np.ndarray:
        p = softmax(z)
        return normalise_one_vs_all(self._calibrated(p), p)

    def _validate_fitted(self) -> None:
        super()._validate_fitted()
        c, m = self.n_classes_, self.n_levels
        check_fitted_array(self, "table_", (c, 2**m), low=0.0, high=1.0)
        check_fitted_array(self, "weights_", (c, m), low=0.0, high=1.0)
        if self.prior is not None:
            check_fitted_array(self, "counts_", (2, c, 2**m))
            check_fitted_array(self, "count_noise_", (2,), low=0.0)

    def _fitted_names(self) -> tuple[str, ...]:
        return _with_counts(self._fitted_attributes, self.prior)


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
        return normalise_one_vs_all(g, p)

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

"""Calibration metrics on probabilities.

All metrics take ``probs`` (an ``N x C`` probability matrix; ``N`` or ``N x 1`` for the positive
class of a binary model) and integer ``labels``; pass ``input="logits"`` to give logits instead.
Binning follows :mod:`privcal.metrics.statistics`: equal-width bins are right-closed, the first
bin is ``[0, 1/M]``, and ``p = 0`` and ``p = 1`` fall in real bins.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from privcal._params import check_int, check_option
from privcal.data.validation import (
    check_labels,
    check_probs,
    check_scores,
    probs_need_no_repair,
    probs_to_logits,
)
from privcal.metrics import statistics
from privcal.metrics.statistics import (
    Binning,
    BinStats,
    bin_indices,
    calibration_bins,
    nll_terms,
    softmax,
    top_label,
    top_label_bins,
)

__all__ = [
    "Reliability",
    "accuracy",
    "adaptive_ece",
    "brier",
    "classwise_ece",
    "coverage",
    "ece",
    "mce",
    "nll",
    "reliability",
    "set_size",
]

Input = Literal["probs", "logits"]


def _probs_labels(
    probs: object, labels: object, input: Input, owner: str
) -> tuple[np.ndarray, np.ndarray]:
    check_option(input, "input", owner, ("probs", "logits"))
    p = (
        check_probs(probs, "probs")
        if input == "probs"
        else softmax(check_scores(probs, name="logits"))
    )
    y = check_labels(labels, p.shape[0], p.shape[1])
    return p, y


def _top(p: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    conf, pred = top_label(p)
    return conf, (pred == y).astype(np.float64)


def _top_bins(p: np.ndarray, y: np.ndarray, n_bins: int, binning: Binning) -> BinStats:
    if binning == "width":
        return top_label_bins(p, y, n_bins)
    return calibration_bins(*_top(p, y), n_bins=n_bins, binning=binning)


def _one_pass_top_bins(probs: object, labels: object, n_bins: int) -> BinStats | None:
    """Equal-width top-label bins of a large float32/float64 probability array and integer
    labels, validated from the same compiled read
    (:func:`~privcal.metrics.statistics.top_label_bins_checked`: range, row sums, finiteness,
    label range), so that the metric costs one read of the array; ``None`` when the input is
    of another kind or needs what :func:`~privcal.data.validation.check_probs` or
    ``check_labels`` do beyond accepting it (then the general path runs and raises, warns or
    repairs exactly as for small inputs)."""
    if not isinstance(probs, np.ndarray) or probs.ndim != 2 or probs.shape[1] < 2:
        return None
    if probs.dtype not in (np.float32, np.float64):
        return None
    if probs.shape[0] < statistics.COMPILED_MIN_ROWS:
        return None
    y = np.asarray(labels)
    if y.ndim != 1 or y.shape[0] != probs.shape[0] or not np.issubdtype(y.dtype, np.integer):
        return None
    stats, (lo, hi, worst, bad, y_lo, y_hi) = statistics.top_label_bins_checked(probs, y, n_bins)
    # float32 row sums are float32: within C 2^-23 of check_probs' float64 sums, so a row sum
    # that close to the tolerance is left to check_probs to judge
    slack = probs.shape[1] * 2.0**-23 if probs.dtype == np.float32 else 0.0
    if bad or not probs_need_no_repair(lo, hi, worst + slack):
        return None
    if y_lo < 0 or y_hi >= probs.shape[1]:
        return None
    return stats


def _checked_top_bins(
    probs: object, labels: object, n_bins: int, binning: Binning, input: Input, owner: str
) -> BinStats:
    """Validate (``input``: probabilities or logits) and bin the top label."""
    if binning == "width" and input == "probs":
        stats = _one_pass_top_bins(probs, labels, n_bins)
        if stats is not None:
            return stats
    p, y = _probs_labels(probs, labels, input, owner)
    return _top_bins(p, y, n_bins, binning)


def _binned(
    probs: object, labels: object, n_bins: int, binning: Binning, input: Input, owner: str
) -> BinStats:
    """:func:`_checked_top_bins` after checking ``n_bins`` (``>= 1``) and ``binning``."""
    bins = check_int(n_bins, "n_bins", owner, low=1)
    check_option(binning, "binning", owner, ("width", "mass"))
    return _checked_top_bins(probs, labels, bins, binning, input, owner)


@dataclass(frozen=True)
class Reliability:
    """Per-bin data of a reliability diagram (compute only; :mod:`privcal.plots` draws it).

    ``accuracy`` and ``confidence`` are NaN in empty bins; ``counts`` are the bin sizes.
    """

    edges: np.ndarray
    counts: np.ndarray
    accuracy: np.ndarray
    confidence: np.ndarray
    ece: float

    @property
    def centers(self) -> np.ndarray:
        return 0.5 * (self.edges[:-1] + self.edges[1:])

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready lists (``None`` for the NaN of empty bins); :meth:`from_dict` inverts it."""

        def listed(a: np.ndarray) -> list[float | None]:
            return [None if np.isnan(v) else float(v) for v in np.asarray(a, dtype=np.float64)]

        return {
            "edges": listed(self.edges),
            "counts": [int(c) for c in self.counts],
            "accuracy": listed(self.accuracy),
            "confidence": listed(self.confidence),
            "ece": float(self.ece),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Reliability:
        """The :class:`Reliability` of :meth:`to_dict`'s output."""

        def arr(key: str) -> np.ndarray:
            return np.array([np.nan if v is None else v for v in d[key]], dtype=np.float64)

        return cls(arr("edges"), arr("counts"), arr("accuracy"), arr("confidence"), float(d["ece"]))


def reliability(
    probs: object,
    labels: object,
    n_bins: int = 15,
    binning: Binning = "width",
    *,
    input: Input = "probs",
) -> Reliability:
    """Top-label reliability data: per-bin accuracy, mean confidence and counts."""
    n_bins = check_int(n_bins, "n_bins", "reliability", low=1)
    stats = _checked_top_bins(probs, labels, n_bins, binning, input, "reliability")
    return Reliability(stats.edges, stats.counts, stats.accuracy(), stats.confidence(), stats.ece())


def ece(
    probs: object,
    labels: object,
    n_bins: int = 15,
    binning: Binning = "width",
    *,
    input: Input = "probs",
) -> float:
    """Top-label expected calibration error.

    .. math:: \\mathrm{ECE} = \\sum_{m=1}^{M} \\frac{|B_m|}{N}\\,
              |\\mathrm{acc}(B_m) - \\mathrm{conf}(B_m)|

    over ``n_bins`` equal-width (``binning="width"``, right-closed) or equal-mass
    (``binning="mass"``) bins of the top-label confidence.

    Examples
    --------
    >>> import numpy as np
    >>> ece(np.array([[0.9, 0.1], [0.2, 0.8]]), np.array([0, 0]), n_bins=10)
    0.45
    """
    return _binned(probs, labels, n_bins, binning, input, "ece").ece()


def adaptive_ece(
    probs: object, labels: object, n_bins: int = 15, *, input: Input = "probs"
) -> float:
    """Top-label ECE over equal-mass bins (Nixon et al., 2019): ``ece(..., binning="mass")``."""
    return _binned(probs, labels, n_bins, "mass", input, "adaptive_ece").ece()


def mce(
    probs: object,
    labels: object,
    n_bins: int = 15,
    binning: Binning = "width",
    *,
    input: Input = "probs",
) -> float:
    """Maximum calibration error: :math:`\\max_m |\\mathrm{acc}(B_m) - \\mathrm{conf}(B_m)|` over
    non-empty bins."""
    return _binned(probs, labels, n_bins, binning, input, "mce").mce()


def classwise_ece(
    probs: object, labels: object, n_bins: int = 15, *, input: Input = "probs"
) -> float:
    """Classwise ECE (Kull et al., 2019; seed 003 Def. 3.3).

    .. math:: \\mathrm{cwECE} = \\frac{1}{C}\\sum_{j=1}^{C}\\sum_{m=1}^{M}
              \\frac{|B_{m,j}|}{N}\\,|\\bar p_j(B_{m,j}) - \\bar y_j(B_{m,j})|

    where :math:`B_{m,j}` holds the examples whose class-``j`` probability falls in bin ``m``.
    One ``bincount`` over the ``N x C`` bin indices; no loop over classes or bins.
    """
    n_bins = check_int(n_bins, "n_bins", "classwise_ece", low=1)
    p, y = _probs_labels(probs, labels, input, "classwise_ece")
    n, c = p.shape
    flat = (bin_indices(p, n_bins) + n_bins * np.arange(c)[None, :]).ravel()
    onehot = np.zeros_like(p)
    onehot[np.arange(n), y] = 1.0
    size = c * n_bins
    gap = np.bincount(flat, weights=onehot.ravel(), minlength=size) - np.bincount(
        flat, weights=p.ravel(), minlength=size
    )
    return float(np.abs(gap).sum() / (n * c))


def brier(probs: object, labels: object, *, input: Input = "probs") -> float:
    """Multiclass Brier score :math:`\\frac1N\\sum_i\\sum_c (p_{ic} - 1[y_i=c])^2` (in [0, 2])."""
    p, y = _probs_labels(probs, labels, input, "brier")
    sq = (p**2).sum(axis=1) - 2.0 * p[np.arange(p.shape[0]), y] + 1.0
    return float(sq.mean())


def nll(probs: object, labels: object, *, input: Input = "probs") -> float:
    """Mean negative log-likelihood :math:`-\\frac1N\\sum_i \\log p_{i y_i}`.

    With ``input="logits"`` it is computed from the logits without forming probabilities. With
    probabilities, :math:`\\log p` is taken exactly as privcal converts probabilities to logits
    (:func:`~privcal.data.validation.probs_to_logits`): an exact 0 becomes the smallest positive
    float, so its term is :math:`-\\log(2.2 \\times 10^{-308}) = 708.4`, and a
    :class:`~privcal.data.validation.ZeroProbabilityWarning` says how many there were. The same
    probabilities therefore give the same NLL whether they are passed here or saved and read
    back as logits (``privcal apply`` then ``privcal evaluate``), instead of ``inf`` on one path
    and a finite value on the other.
    """
    check_option(input, "input", "nll", ("probs", "logits"))
    if input == "logits":
        z = check_scores(probs, name="logits")
        return float(nll_terms(z, check_labels(labels, z.shape[0], z.shape[1])).mean())
    p, y = _probs_labels(probs, labels, input, "nll")
    return float(-probs_to_logits(p[np.arange(p.shape[0]), y], "true-class probabilities").mean())


def accuracy(probs: object, labels: object, *, input: Input = "probs") -> float:
    """Top-1 accuracy (ties resolved to the lowest class index, as ``np.argmax``)."""
    p, y = _probs_labels(probs, labels, input, "accuracy")
    return float((np.argmax(p, axis=1) == y).mean())


def _check_sets(sets: object) -> np.ndarray:
    s = np.asarray(sets)
    if s.ndim != 2 or s.dtype != bool:
        raise ValueError(
            f"'sets' must be a boolean array of shape (n_samples, n_classes); got dtype {s.dtype} "
            f"and shape {s.shape}."
        )
    return s


def coverage(sets: object, labels: object) -> float:
    """Fraction of examples whose true label is in their prediction set."""
    s = _check_sets(sets)
    y = check_labels(labels, s.shape[0], s.shape[1])
    return float(s[np.arange(s.shape[0]), y].mean())


def set_size(sets: object) -> float:
    """Mean prediction-set size."""
    return float(_check_sets(sets).sum(axis=1).mean())

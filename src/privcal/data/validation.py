"""The one validator of classifier outputs and labels.

Every public function and estimator that takes a model's outputs goes through
:func:`check_scores` (and :func:`check_labels`), so that shape, dtype, finiteness, label range and
the logits/probabilities distinction are checked in one place.

Conventions
-----------
* ``input="logits"`` (the default): an ``N x C`` float array of unnormalised log-probabilities.
  A binary model may pass ``N`` or ``N x 1`` logits :math:`z`; they become ``N x 2`` logits
  ``[0, z]`` so that :math:`\\sigma(z)` is the probability of class 1.
* ``input="probs"``: an ``N x C`` array of probabilities, rows summing to 1 (within
  ``PROBS_ATOL``). They are converted to logits with :math:`\\log p`. Exact zeros cannot be
  logged; they are replaced by the smallest positive float (``np.finfo(float).tiny``) and a
  :class:`ZeroProbabilityWarning` says how many were replaced. Nothing is converted silently.
  A binary model may pass ``N`` or ``N x 1`` probabilities of class 1.
"""

from __future__ import annotations

import warnings
from typing import Literal

import numpy as np

from privcal._blocks import map_blocks
from privcal._params import check_option
from privcal.exceptions import PrivcalWarning

__all__ = [
    "PROBS_ATOL",
    "ProbabilitiesAsLogitsWarning",
    "RoundedProbabilityWarning",
    "ZeroProbabilityWarning",
    "check_labels",
    "check_probs",
    "check_scores",
    "looks_like_probs",
    "probs_need_no_repair",
    "probs_to_logits",
]

Input = Literal["logits", "probs"]

#: Rows of a probability matrix must sum to 1 within this absolute tolerance.  float32 softmax
#: outputs of real networks sum to 1 within ~1e-6; 1e-3 also admits rounded CSV exports.
PROBS_ATOL = 1e-3
_TINY = np.finfo(np.float64).tiny


class ZeroProbabilityWarning(PrivcalWarning):
    """Exact zero probabilities were replaced by the smallest positive float before ``log``."""


class ProbabilitiesAsLogitsWarning(PrivcalWarning):
    """Scores read as logits look like probabilities (every entry in [0, 1], every row summing
    to 1): the softmax of probabilities flattens them, so pass ``input="probs"``."""


class RoundedProbabilityWarning(PrivcalWarning):
    """Probabilities outside [0, 1] by at most ``PROBS_ATOL`` (rounding) were clipped to [0, 1]."""


def _raise_non_finite(arr: np.ndarray, name: str) -> None:
    bad = ~np.isfinite(arr)
    if bad.any():
        row = int(np.argwhere(bad)[0, 0])
        raise ValueError(
            f"{name!r} contains {int(bad.sum())} non-finite values (NaN or inf), first in row "
            f"{row}. Remove or repair those rows before calibrating; privcal never drops them."
        )


def _as_2d_float(
    scores: object, name: str, *, check_finite: bool = True, keep_float32: bool = False
) -> np.ndarray:
    arr = np.asarray(scores)
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)
    ):
        raise ValueError(
            f"{name!r} must be a numeric array of shape (n_samples, n_classes); got dtype "
            f"{arr.dtype}."
        )
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise ValueError(
            f"{name!r} must have shape (n_samples, n_classes), (n_samples, 1) or (n_samples,) "
            f"for a binary model; got an array of shape {arr.shape}."
        )
    if arr.shape[0] == 0:
        raise ValueError(f"{name!r} is empty: at least one sample is needed.")
    if arr.shape[1] == 0:
        raise ValueError(f"{name!r} has no columns: it needs one column per class.")
    if not (keep_float32 and arr.dtype == np.float32):
        arr = arr.astype(np.float64, copy=False)
    # One pass: a sum is finite when every term is (it can also overflow, so confirm exactly).
    if check_finite and not np.isfinite(arr.sum()):
        _raise_non_finite(arr, name)
    return arr


def probs_to_logits(probs: np.ndarray, what: str = "probabilities") -> np.ndarray:
    """``log(probs)``, replacing exact zeros by the smallest positive float, with a warning
    that counts them as ``what``."""
    zeros = probs == 0.0
    if zeros.any():
        warnings.warn(
            f"{int(zeros.sum())} {what} are exactly 0; they were replaced by the smallest "
            f"positive float ({_TINY:.3g}) before taking the log.",
            ZeroProbabilityWarning,
            stacklevel=3,
        )
        probs = np.where(zeros, _TINY, probs)
    return np.log(probs)


def _range_and_row_sums(arr: np.ndarray) -> tuple[float, float, float]:
    """Min, max and the largest ``|row sum - 1|`` in one blocked pass (NaN propagates to all)."""

    def block(lo: int, hi: int) -> tuple[float, float, float]:
        b = arr[lo:hi]
        dev = np.abs(np.einsum("ij->i", b) - 1.0).max()
        return float(b.min()), float(b.max()), float(dev)

    parts = np.array(map_blocks(arr.shape[0], block))
    return float(parts[:, 0].min()), float(parts[:, 1].max()), float(parts[:, 2].max())


def probs_need_no_repair(lo: float, hi: float, worst_sum: float) -> bool:
    """Whether :func:`check_probs` accepts an ``N x C`` (``C >= 2``) array as it is, from its
    smallest and largest entries and largest ``|row sum - 1|``: all finite, entries in [0, 1],
    rows summing to 1 within :data:`PROBS_ATOL`. The one rule, also applied by the metrics'
    one-pass kernel (:func:`privcal.metrics.statistics.top_label_bins_checked`)."""
    finite = bool(np.isfinite(lo) and np.isfinite(hi) and np.isfinite(worst_sum))
    return finite and lo >= 0.0 and hi <= 1.0 and worst_sum <= PROBS_ATOL


def looks_like_probs(scores: object) -> bool:
    """Whether an ``N x C`` (``C >= 2``) array could only be probabilities: every entry finite
    and in [0, 1], every row summing to 1 within :data:`PROBS_ATOL` (the rule of
    :func:`probs_need_no_repair`). Readers use it to refuse probabilities stored as logits."""
    arr = np.asarray(scores)
    if arr.ndim != 2 or arr.shape[1] < 2 or arr.shape[0] == 0:
        return False
    if np.issubdtype(arr.dtype, np.integer):
        arr = arr.astype(np.float64)
    elif not np.issubdtype(arr.dtype, np.floating):
        return False
    return probs_need_no_repair(*_range_and_row_sums(arr))


def check_probs(probs: object, name: str = "probs") -> np.ndarray:
    """Validate an ``N x C`` probability matrix (or ``N`` / ``N x 1`` binary probabilities).

    Returns a float64 ``N x C`` array (``C >= 2``). Values outside [0, 1] by at most
    :data:`PROBS_ATOL` (rounding) are clipped with a :class:`RoundedProbabilityWarning`; larger
    excursions, and rows that do not sum to 1 within :data:`PROBS_ATOL`, raise ``ValueError``
    naming ``name``.
    """
    arr = _as_2d_float(probs, name, check_finite=False)
    lo, hi, worst_sum = _range_and_row_sums(arr)
    if arr.shape[1] > 1 and probs_need_no_repair(lo, hi, worst_sum):
        return arr
    if not (np.isfinite(lo) and np.isfinite(hi)):
        _raise_non_finite(arr, name)
    if lo < -PROBS_ATOL or hi > 1.0 + PROBS_ATOL:
        raise ValueError(
            f"{name!r} must hold probabilities in [0, 1]; found values in "
            f"[{lo:.6g}, {hi:.6g}]. If these are logits, pass input='logits'."
        )
    off = (arr < 0.0) | (arr > 1.0) if (lo < 0.0 or hi > 1.0) else None
    if off is not None and off.any():
        warnings.warn(
            f"{int(off.sum())} values of {name!r} lie outside [0, 1] by at most {PROBS_ATOL} "
            f"(float rounding in exported softmax outputs); they were clipped to [0, 1].",
            RoundedProbabilityWarning,
            stacklevel=3,
        )
        arr = np.clip(arr, 0.0, 1.0)
    if arr.shape[1] == 1:
        arr = np.hstack([1.0 - arr, arr])
    elif off is not None or worst_sum > PROBS_ATOL:  # clipped values: check the sums again
        sums = np.einsum("ij->i", arr)
        off = np.abs(sums - 1.0) > PROBS_ATOL
        if off.any():
            row = int(np.argmax(off))
            raise ValueError(
                f"{name!r} rows must sum to 1 (tolerance {PROBS_ATOL}); {int(off.sum())} rows do "
                f"not, e.g. row {row} sums to {sums[row]:.6g}. If these are logits, pass "
                f"input='logits'."
            )
    return arr


def check_scores(
    scores: object,
    *,
    input: Input = "logits",
    name: str | None = None,
    keep_float32: bool = False,
) -> np.ndarray:
    """Validate classifier outputs and return float64 ``N x C`` logits (``C >= 2``).

    Parameters
    ----------
    scores : array-like of shape (n_samples, n_classes), (n_samples, 1) or (n_samples,)
        Logits (``input="logits"``) or probabilities (``input="probs"``).
    input : {"logits", "probs"}
        What ``scores`` holds. Probabilities are converted with ``log`` (see module docstring).
    name : str, optional
        The argument name used in error messages (defaults to ``input``).
    keep_float32 : bool, default=False
        Return float32 logits as they are instead of a float64 copy (validated the same way),
        for consumers that compute in float64 block by block (the temperature NLL fit): a whole
        float64 copy of PyTorch's float32 output costs more than the fit's own passes.
    """
    check_option(input, "input", "check_scores", ("logits", "probs"))
    name = name or input
    if input == "probs":
        return probs_to_logits(check_probs(scores, name))
    arr = _as_2d_float(scores, name, keep_float32=keep_float32)
    if arr.shape[1] == 1:
        arr = np.hstack([np.zeros_like(arr), arr])
    elif looks_like_probs(arr[:1]) and looks_like_probs(arr):  # one row rules out most logits
        warnings.warn(
            f"{name!r} is read as logits but looks like probabilities (every entry in [0, 1], "
            "every row summing to 1): the softmax of probabilities flattens them, so what is "
            "fitted or measured is not the model's confidence. Pass input='probs' if they are "
            "probabilities.",
            ProbabilitiesAsLogitsWarning,
            stacklevel=3,
        )
    return arr


def check_labels(
    labels: object, n_samples: int, n_classes: int, name: str = "labels"
) -> np.ndarray:
    """Validate integer class labels in ``[0, n_classes)`` of length ``n_samples``; return int64."""
    arr = np.asarray(labels)
    if arr.ndim == 2 and 1 in arr.shape:
        arr = arr.reshape(-1)
    if arr.ndim != 1:
        raise ValueError(f"{name!r} must be a 1-D array of class indices; got shape {arr.shape}.")
    if arr.shape[0] != n_samples:
        raise ValueError(
            f"{name!r} has {arr.shape[0]} entries but the scores have {n_samples} rows; they must "
            f"match."
        )
    if np.issubdtype(arr.dtype, np.floating):
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
            raise ValueError(f"{name!r} must hold integer class indices; got non-integer values.")
    elif not (np.issubdtype(arr.dtype, np.integer) or arr.dtype == bool):
        raise ValueError(f"{name!r} must hold integer class indices; got dtype {arr.dtype}.")
    out = arr.astype(np.int64)
    if out.size and (out.min() < 0 or out.max() >= n_classes):
        bad = np.flatnonzero((out < 0) | (out >= n_classes))
        raise ValueError(
            f"{name!r} must lie in [0, {n_classes - 1}] for {n_classes} classes; found values in "
            f"[{out.min()}, {out.max()}], {bad.size} out of range, first in row {bad[0]} "
            f"(label {out[bad[0]]}). Fix those labels, or give scores with a column per class."
        )
    return out

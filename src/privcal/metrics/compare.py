"""Comparing a calibrator with doing nothing, with an interval (never a winner within the noise).

:func:`paired_bootstrap` gives the change of a metric from the uncalibrated scores to the
calibrated ones on the same rows and a percentile interval from resampling those rows (paired:
each resample draws rows, and both metrics are computed on them). :func:`verdict` turns an
interval of a change in an error (lower is better) into the words every report uses: "better
than uncalibrated" only when the whole interval is below 0, "worse than uncalibrated" only when
it is above 0, and otherwise "no better than uncalibrated". :func:`replicate_interval` gives
the interval from paired differences over replicates (splits, draws, data sets) instead.
:func:`compare_uncalibrated` and :func:`check_sets` are the end-of-run checks of a federated
release on a party's own rows (a calibrator against doing nothing; prediction sets' coverage).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = [
    "BETTER",
    "NO_BETTER",
    "WORSE",
    "check_sets",
    "compare_uncalibrated",
    "paired_bootstrap",
    "replicate_interval",
    "verdict",
]

BETTER, NO_BETTER, WORSE = (
    "better than uncalibrated",
    "no better than uncalibrated",
    "worse than uncalibrated",
)


def verdict(low: float, high: float) -> str:
    """The words for an interval ``[low, high]`` of a change in an error (after - before).

    Examples
    --------
    >>> verdict(-0.05, -0.01), verdict(-0.01, 0.02), verdict(0.001, 0.02)
    ('better than uncalibrated', 'no better than uncalibrated', 'worse than uncalibrated')
    """
    if high < 0.0:
        return BETTER
    if low > 0.0:
        return WORSE
    return NO_BETTER


def paired_bootstrap(
    metric: Callable[[np.ndarray, np.ndarray], float],
    before: np.ndarray,
    after: np.ndarray,
    labels: np.ndarray,
    *,
    resamples: int = 400,
    level: float = 0.95,
    seed: int = 0,
) -> dict[str, Any]:
    """The change ``metric(after) - metric(before)`` on the same rows, with a paired bootstrap
    percentile interval at ``level`` over ``resamples`` row resamples (seeded).

    ``before`` and ``after`` are ``N x C`` probabilities of the same ``N`` rows. Returns
    ``diff``, ``low``, ``high``, ``level``, ``resamples`` and ``verdict`` (:func:`verdict`).
    The interval describes the sampling error of these rows, not of the calibrator's fit.
    """
    before = np.asarray(before)
    after = np.asarray(after)
    labels = np.asarray(labels)
    n = labels.shape[0]
    if before.shape[0] != n or after.shape[0] != n:
        raise ValueError(
            "The 'before', 'after' and 'labels' parameters of paired_bootstrap must have the "
            f"same number of rows. Got {before.shape[0]}, {after.shape[0]} and {n} instead."
        )
    rng = np.random.default_rng(seed)
    diff = float(metric(after, labels) - metric(before, labels))
    draws = np.empty(resamples)
    for b in range(resamples):
        idx = rng.integers(0, n, n)
        draws[b] = metric(after[idx], labels[idx]) - metric(before[idx], labels[idx])
    tail = 100.0 * (1.0 - level) / 2.0
    low, high = (float(v) for v in np.percentile(draws, [tail, 100.0 - tail]))
    interval = dict(diff=diff, low=low, high=high, level=level, resamples=resamples)
    return interval | {"verdict": verdict(low, high)}


def replicate_interval(diffs: Any, z: float = 2.0) -> dict[str, Any]:
    """Mean of paired per-replicate differences (method - uncalibrated) +- ``z`` standard errors.

    ``SE = sd(d, ddof=1) / sqrt(R)`` over the ``R`` replicates; with one replicate there is no
    spread, the interval is unbounded and the verdict is "no better than uncalibrated". Every
    difference 0 (a method that released the uncalibrated model each time) gives ``[0, 0]``:
    no better. Returns ``diff``, ``se``, ``low``, ``high``, ``replicates`` and ``verdict``.

    Examples
    --------
    >>> replicate_interval([-0.02, -0.03, -0.025])["verdict"]
    'better than uncalibrated'
    >>> replicate_interval([0.0, 0.0, 0.0])["verdict"]
    'no better than uncalibrated'
    """
    d = np.asarray(diffs, dtype=np.float64).ravel()
    mean = float(d.mean())
    se = float(d.std(ddof=1) / np.sqrt(d.size)) if d.size > 1 else float("inf")
    low, high = mean - z * se, mean + z * se
    interval = dict(diff=mean, se=se, low=low, high=high, replicates=int(d.size))
    return interval | {"verdict": verdict(low, high) if np.isfinite(se) else NO_BETTER}


def compare_uncalibrated(
    cal: Any, z: np.ndarray, y: np.ndarray, n_bins: int = 15
) -> dict[str, Any]:
    """ECE, classwise ECE and accuracy of ``cal`` beside those of the uncalibrated ``softmax(z)``,
    and both reliability diagrams' per-bin data (``reliability``, for ``privcal report``).

    ``ece_change`` is the change of ECE (equal-width, ``n_bins`` bins) with a paired bootstrap
    95 % interval over these rows and its verdict (:func:`privcal.metrics.compare.
    paired_bootstrap`); ``worse`` is true when the whole interval is above 0 (worse beyond the
    rows' sampling error); ``summary`` is a one-line account (with ``WARNING`` first when
    worse). Exact statistics of ``(z, y)``: run it only where those rows may be seen (the
    server's own split, or a client's own console).
    """
    from privcal.metrics import accuracy, classwise_ece, ece, reliability
    from privcal.metrics.statistics import softmax

    before, after = softmax(z), cal.predict_proba(z)
    out: dict[str, Any] = {"rows": len(y)}
    for name, fn in (("ece", ece), ("cwece", classwise_ece)):
        out[name] = [float(fn(before, y, n_bins)), float(fn(after, y, n_bins))]
    out["accuracy"] = [float(accuracy(before, y)), float(accuracy(after, y))]
    change = paired_bootstrap(lambda p, t: ece(p, t, n_bins), before, after, y)
    out["ece_change"] = change
    out["worse"] = change["verdict"] == WORSE
    out["reliability"] = {
        "before": reliability(before, y, n_bins).to_dict(),
        "after": reliability(after, y, n_bins).to_dict(),
    }
    line = (
        f"ECE {out['ece'][0]:.4f} -> {out['ece'][1]:.4f}, classwise ECE {out['cwece'][0]:.4f} -> "
        f"{out['cwece'][1]:.4f}, accuracy {out['accuracy'][0]:.4f} -> {out['accuracy'][1]:.4f} "
        f"(uncalibrated -> calibrated, {out['rows']} rows); ECE change "
        f"{change['diff']:+.4f}, 95% interval [{change['low']:+.4f}, {change['high']:+.4f}]: "
        f"{change['verdict']}"
    )
    out["summary"] = (
        f"WARNING: the calibrator is worse than the uncalibrated model: {line}"
        if out["worse"]
        else line
    )
    return out


def check_sets(sets: Any, z: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    """Empirical coverage and mean set size of prediction ``sets`` on ``(z, y)`` against the
    target ``1 - alpha``, and ``summary``, a one-line account. Exact statistics of ``(z, y)``:
    run it only where those rows may be seen (the server's own split, or a client's own
    console)."""
    from privcal.metrics.calibration import coverage, set_size

    pred = sets.predict_set(z)
    out: dict[str, Any] = {
        "rows": len(y),
        "coverage": float(coverage(pred, y)),
        "set_size": float(set_size(pred)),
        "target": 1.0 - float(sets.alpha),
        "threshold": float(sets.threshold_),
    }
    out["summary"] = (
        f"coverage {out['coverage']:.4f} (target {out['target']:g}), mean set size "
        f"{out['set_size']:.3g} of {sets.n_classes_} classes, threshold {out['threshold']:.4g} "
        f"({out['rows']} rows)"
    )
    return out

"""The machine-readable summaries that ``privcal fit``, ``evaluate`` and ``conformal`` write.

``privcal report`` builds its HTML from these files (and from the outputs of ``privcal demo``,
``privcal federate server`` and ``privcal bench scoreboard``), never from the console output.
Every summary is a JSON object with ``"privcal": <verb>``, the privcal version and the command
line, then the verb's numbers as raw values (metrics as fractions;
:func:`~privcal.report.formatting.jsonable` turns ``inf`` into ``"inf"`` and ``nan`` into
``null``).

What each verb writes
---------------------
* ``privcal fit --out cal.json``: the calibrator and ``cal.summary.json``: method, class,
  parameters, warnings, ``released`` (the released parameters and, for a private temperature
  fit, whether it fell back to ``T = 1`` and why: :func:`~privcal.calibrators.summary.
  release_summary`, also under ``privacy_report``); for a non-private fit the metrics and
  reliability data of the input scores before and after the calibrator (on the data it was
  fitted on); for a private fit its privacy report and, with ``--sources``, each ledger's
  state after the fit, and **no** statistic of the private data (those would be releases
  nobody paid for).
* ``privcal evaluate --out eval.json``: the metrics table and the reliability data before (and
  after, with ``--calibrator``, then also ``ece_change``: the change of ECE with its paired
  bootstrap interval over the rows and its verdict, :mod:`privcal.metrics.compare`).
* ``privcal conformal --out sets.csv``: the sets and ``sets.summary.json``: the summary the
  command prints, the set-size counts, coverage by set size (with test labels) and the privacy
  report of a private threshold.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from privcal import __version__
from privcal.report.blocks import reliability_data
from privcal.report.formatting import write_json

if TYPE_CHECKING:
    from privcal.metrics import Reliability

__all__ = [
    "KINDS",
    "conformal_summary_data",
    "evaluate_summary",
    "fit_summary",
    "risk_summary_data",
    "summary_path",
    "write_summary",
]

#: Values of the ``"privcal"`` key of the files ``privcal report`` reads.
KINDS = ("demo", "fit", "evaluate", "conformal", "risk", "scoreboard")


def summary_path(out: str | Path) -> Path:
    """The summary written beside an output file: ``cal.json`` -> ``cal.summary.json``."""
    out = Path(out)
    return out.with_name(f"{out.stem}.summary.json")


def _command() -> str:
    argv = list(sys.argv)
    if argv and Path(argv[0]).name == "privcal":
        argv[0] = "privcal"
    return " ".join(argv)


def write_summary(path: str | Path, kind: str, data: Mapping[str, Any]) -> Path:
    """Write ``{"privcal": kind, "version", "command", **data}`` as JSON to ``path``."""
    if kind not in KINDS:
        raise ValueError(
            f"The 'kind' parameter of write_summary must be one of {', '.join(KINDS)}. Got "
            f"{kind!r} instead."
        )
    body = {"privcal": kind, "version": __version__, "command": _command(), **data}
    return write_json(path, body)


def _reliability_pair(
    logits: np.ndarray, probs: np.ndarray | None, labels: np.ndarray, n_bins: int
) -> dict[str, Any]:
    from privcal.metrics import reliability

    out = {"before": reliability_data(reliability(logits, labels, n_bins, input="logits"))}
    if probs is not None:
        out["after"] = reliability_data(reliability(probs, labels, n_bins))
    return out


def fit_summary(
    est: Any,
    *,
    method: str,
    calibrator_file: str,
    n_bins: int,
    logits: np.ndarray | None,
    labels: np.ndarray | None,
    metrics: Mapping[str, Mapping[str, float]] | None,
    private: bool,
    sources: Sequence[str] = (),
    input_file: str | None = None,
    warnings: Sequence[str] = (),
) -> dict[str, Any]:
    """The ``fit`` summary (see the module docstring).

    ``metrics`` are the ``evaluate`` metrics of the input scores and of the calibrated ones (the
    CLI computes them; ``None`` for a private fit, whose data must not be summarised).
    """
    from privcal.calibrators.summary import release_summary

    d = est.to_dict()
    released = release_summary(est)
    out: dict[str, Any] = {"method": method, "class": d.get("class"), "params": d.get("params", {})}
    out |= dict(calibrator=calibrator_file, input=input_file, n_bins=n_bins, private=private)
    out |= dict(warnings=list(warnings), released=released)
    if logits is not None and labels is not None:
        out["n_samples"], out["n_classes"] = int(logits.shape[0]), int(logits.shape[1])
    if not private and logits is not None and labels is not None and metrics is not None:
        out["metrics"] = {k: dict(v) for k, v in metrics.items()}
        out["reliability"] = _reliability_pair(logits, est.predict_proba(logits), labels, n_bins)
    rep = getattr(est, "privacy_report_", None)
    if private and rep is not None:
        fallback = released.get("fallback")
        out["privacy_report"] = rep.to_dict() | {"released": released, "fallback": fallback}
        if sources:
            from privcal.privacy.odometer import read_ledger

            out["ledgers"] = []
            for p in sources:
                r = read_ledger(p)
                state = {k: getattr(r, k) for k in ("budget", "spent", "remaining")}
                out["ledgers"].append({"source": r.name, "path": str(p), **state})
        distributed = any("aggregation=distributed" in t for t in getattr(rep, "threat", ()))
        out["trust"] = (
            "each source keeps its rows and its ledger and uploads its exact answer in fixed "
            "point plus a noise share to a secure sum; 'privcal fit' sees only the sum, whose "
            "shares make up the noise of one release (see the threat model below)."
            if sources and distributed
            else "each source keeps its rows and its ledger and adds the noise to its own "
            "answers; 'privcal fit' sees only the noisy answers."
            if sources
            else "the machine that ran 'privcal fit' read the raw validation scores (a trusted "
            "curator); what is private is the calibrator it released."
        )
    return out


def evaluate_summary(
    columns: Mapping[str, Mapping[str, float]],
    *,
    input_file: str,
    calibrator_file: str | None,
    n_bins: int,
    n_samples: int,
    n_classes: int | None,
    logits: np.ndarray | None,
    probs: np.ndarray | None,
    labels: np.ndarray,
    top_label_reliability: Sequence[Reliability] = (),
) -> dict[str, Any]:
    """The ``evaluate`` summary: its metrics table and the reliability data: binned here from
    full score vectors (``logits``, and ``probs`` after a calibrator), or for a top-label file
    the diagrams ``evaluate`` bins from its confidences (``top_label_reliability``: before, and
    after a calibrator)."""
    out: dict[str, Any] = dict(input=input_file, calibrator=calibrator_file, n_bins=n_bins)
    out |= dict(n_samples=n_samples, n_classes=n_classes)
    out["metrics"] = {k: dict(v) for k, v in columns.items()}
    if logits is not None:
        out["reliability"] = _reliability_pair(logits, probs, labels, n_bins)
        if probs is not None:  # the held-out effect, with its interval over these rows
            from privcal.metrics import ece
            from privcal.metrics.compare import paired_bootstrap
            from privcal.metrics.statistics import softmax

            out["ece_change"] = paired_bootstrap(
                lambda p, t: ece(p, t, n_bins), softmax(logits), probs, labels
            )
    elif top_label_reliability:
        stages = ("before", "after")[: len(top_label_reliability)]
        pairs = zip(stages, top_label_reliability, strict=True)
        out["reliability"] = {k: reliability_data(r) for k, r in pairs}
    return out


def conformal_summary_data(
    summary: Mapping[str, Any],
    est: Any,
    sets: np.ndarray,
    labels: np.ndarray | None,
    *,
    alpha: float,
    score: str,
    sets_file: str,
    cal_file: str,
    test_file: str,
) -> dict[str, Any]:
    """The ``conformal`` summary: what the command prints, the set-size counts (sizes 0..C) and,
    with test labels, the coverage of the test points of each set size."""
    sizes = sets.sum(axis=1).astype(np.int64)
    C = int(sets.shape[1])
    counts = np.bincount(sizes, minlength=C + 1)
    out: dict[str, Any] = {**summary, **dict(alpha=alpha, score=score, n_classes=C)}
    out |= dict(sets=sets_file, cal=cal_file, test=test_file, size_counts=counts)
    if labels is not None:
        covered = sets[np.arange(sets.shape[0]), labels]
        hits = np.bincount(sizes, weights=covered.astype(np.float64), minlength=C + 1)
        out["coverage_by_size"] = [
            {"size": k, "count": int(counts[k]), "coverage": float(hits[k] / counts[k])}
            for k in range(C + 1)
            if counts[k] > 0
        ]
    trust = (
        "each source computed its own score histograms; the machine that ran 'privcal "
        "conformal' (the aggregator) saw only their noisy answers, or with aggregation "
        "'distributed' their secure sums."
        if getattr(est, "n_sources_", 0)
        else "the machine that ran 'privcal conformal' read the raw calibration scores (a "
        "trusted curator); what is private is the released threshold."
    )
    return _with_privacy(out, est, trust)


def risk_summary_data(
    est: Any,
    sets: np.ndarray,
    test_curve: np.ndarray | None,
    *,
    alpha: float,
    loss: str,
    sets_file: str,
    cal_file: str,
    test_file: str,
) -> dict[str, Any]:
    """The ``risk`` summary (``privcal risk --out``): lambda, set sizes, the test risk curve over
    the public grid (from the test labels, when given: evaluation data, not the calibration
    rows) and, for a private fit, its privacy report."""
    out: dict[str, Any] = {
        "alpha": alpha,
        "loss": loss,
        "lambda": float(est.lambda_),
        "lambdas": np.asarray(est.lambdas_, dtype=np.float64),
        "n_test": int(sets.shape[0]),
        "mean_size": float(sets.sum(1).mean()),
        "risk_bound": float(est.risk_bound_),
        "sets": sets_file,
        "cal": cal_file,
        "test": test_file,
    }
    if hasattr(est, "n_"):  # a private fit (add/remove) does not release n
        out["n_cal"] = int(est.n_)
    if test_curve is not None:
        out["test_curve"] = np.asarray(test_curve, dtype=np.float64)
        out["test_risk"] = float(test_curve[est.lambda_index_])
    trust = (
        "the machine that ran 'privcal risk' read the raw calibration rows (a trusted "
        "curator); what is private is the released lambda."
    )
    return _with_privacy(out, est, trust)


def _with_privacy(out: dict[str, Any], est: Any, trust: str) -> dict[str, Any]:
    """``out`` with a private fit's privacy report and who saw the raw rows (``trust``)."""
    rep = getattr(est, "privacy_report_", None)
    if rep is not None:
        out["privacy_report"] = rep.to_dict()
        out["trust"] = trust
    return out

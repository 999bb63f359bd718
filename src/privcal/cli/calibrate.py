"""``privcal fit``, ``privcal apply`` and ``privcal evaluate``.

``fit`` learns a calibrator on labelled validation scores and saves it as JSON
(:meth:`~privcal.calibrators.Calibrator.to_dict`); ``apply`` maps new scores to calibrated
probabilities; ``evaluate`` prints calibration metrics, before and after a calibrator, or the
top-label metrics of a top-label file (``true_label,pred_label,confidence``).

Private fitting
---------------
``fit --epsilon E`` (with ``--input`` or ``--sources``) calls
:func:`privcal.cli.private_fit.fit_private` directly; there is one path, visible in
:func:`fit`.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.table import Table

from privcal.cli._common import (
    InputKind,
    check_output_path,
    collect_warnings,
    console,
    err_console,
    fail,
    input_kind_option,
    load_calibrator,
    load_scores,
    load_unlabelled,
    user_errors,
    write_probs,
)
from privcal.data import Scores

__all__ = ["evaluate_metrics", "register", "toplabel_metrics"]


# -- metrics ---------------------------------------------------------------------------------

#: Rows of the ``evaluate`` table: (label, metric function name, takes n_bins).
_METRICS: tuple[tuple[str, str, bool], ...] = (
    ("Accuracy", "accuracy", False),
    ("ECE", "ece", True),
    ("Classwise ECE", "classwise_ece", True),
    ("MCE", "mce", True),
    ("Adaptive ECE", "adaptive_ece", True),
    ("Brier", "brier", False),
    ("NLL", "nll", False),
)


def evaluate_metrics(
    scores: np.ndarray, labels: np.ndarray, n_bins: int = 15, *, input: str = "probs"
) -> dict[str, float]:
    """The ``evaluate`` metrics of one score matrix, by table label (:mod:`privcal.metrics`)."""
    from privcal import metrics

    out: dict[str, float] = {}
    for label, name, binned in _METRICS:
        fn = getattr(metrics, name)
        kwargs: dict[str, Any] = {"input": input}
        if binned:
            kwargs["n_bins"] = n_bins
        out[label] = float(fn(scores, labels, **kwargs))
    return out


def toplabel_metrics(scores: Scores, n_bins: int = 15) -> dict[str, float]:
    """Accuracy, ECE, MCE and adaptive ECE of top-label scores (confidence, predicted class).

    The bins are those of :func:`privcal.metrics.ece`
    (:func:`~privcal.metrics.statistics.calibration_bins` of the confidence and the correctness
    ``1[predicted = label]``); classwise ECE, Brier and NLL need the full vector.
    """
    from privcal.metrics.statistics import calibration_bins

    assert scores.confidence is not None and scores.predicted is not None
    correct = (scores.predicted == scores.labels).astype(np.float64)
    width = calibration_bins(scores.confidence, correct, n_bins, "width")
    full = width.counts > 0
    mass = calibration_bins(scores.confidence, correct, n_bins, "mass")
    return {
        "Accuracy": float(correct.mean()),
        "ECE": width.ece(),
        "MCE": float(np.max(np.abs(width.gaps()[full]) / width.counts[full])),
        "Adaptive ECE": mass.ece(),
    }


def _fmt(value: float) -> str:
    return f"{value:.4f}" if np.isfinite(value) else str(value)


def _metrics_table(columns: dict[str, dict[str, float]]) -> Table:
    table = Table()
    table.add_column("Metric")
    for name in columns:
        table.add_column(name, justify="right")
    if len(columns) == 2:
        table.add_column("Change", justify="right")
    for label in next(iter(columns.values())):
        values = [col[label] for col in columns.values()]
        row = [label, *(_fmt(v) for v in values)]
        if len(values) == 2:
            diff = values[1] - values[0]
            row.append(f"{diff:+.4f}" if np.isfinite(diff) else "")
        table.add_row(*row)
    return table


def _t_range_hint(text: str) -> str:
    """Point a fit's bound warnings at ``--t-range`` (a ``hint`` of :func:`collect_warnings`)."""
    if "t_range" in text and "--t-range" not in text:
        text += " (privcal fit --t-range LO HI)"
    return text


# -- commands --------------------------------------------------------------------------------


def _check_t_range(t_range: tuple[float, float] | None) -> tuple[float, float] | None:
    if t_range is not None and not 0 < t_range[0] < t_range[1] < np.inf:
        fail(
            f"The '--t-range' parameter of privcal fit must be two temperatures 0 < LO < HI. "
            f"Got {t_range[0]:g} {t_range[1]:g} instead."
        )
    return t_range


def _fit_public(
    method: str, scores: Scores | None, seed: int | None, t_range: tuple[float, float] | None
) -> Any:
    """A non-private calibrator from :data:`privcal.calibrators.METHODS`, fitted on ``scores``."""
    from privcal.calibrators import METHODS

    if seed is not None:
        fail(
            f"--seed sets the noise of a private fit; '{method}' without --epsilon draws no "
            "noise. Drop --seed, or add --epsilon to fit a private calibrator."
        )
    if scores is None:
        fail("privcal fit needs --input (labelled validation scores).")
    est = METHODS[method]()
    if t_range is not None:
        if "t_range" not in est.get_params():
            fail(f"--t-range applies to the temperature methods, not to --method {method}.")
        est.set_params(t_range=t_range)
    assert scores.logits is not None
    return est.fit(scores.logits, scores.labels)


#: ``privcal fit`` shows the iterations of a fit once it has run this many seconds.
STATUS_AFTER_S = 2.0


@contextmanager
def _fit_status() -> Iterator[None]:
    """A Rich status line on stderr (iteration, objective, seconds) for iterative fits that
    run longer than :data:`STATUS_AFTER_S`; nothing for quick ones
    (:func:`privcal.calibrators.progress.fit_progress`)."""
    from rich.status import Status

    from privcal.calibrators.progress import FitProgress, fit_progress

    status: Status | None = None

    def show(step: FitProgress) -> None:
        nonlocal status
        if step.elapsed < STATUS_AFTER_S:
            return
        text = (
            f"{step.fit}: iteration {step.iteration}, objective {step.objective:.6g}, "
            f"{step.elapsed:.0f} s"
        )
        if status is None:
            status = Status(text, console=err_console)
            status.start()
        else:
            status.update(text)

    try:
        with fit_progress(show):
            yield
    finally:
        if status is not None:
            status.stop()


def fit(
    method: Annotated[str, typer.Option("--method", "-m", help="Calibrator name (listed above).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Where to write the calibrator .json.")],
    input: Annotated[
        Path | None,
        typer.Option("--input", "-i", help="Labelled validation scores (.npz/.csv/.parquet)."),
    ] = None,
    input_kind: Annotated[str, input_kind_option()] = "auto",
    epsilon: Annotated[
        float | None,
        typer.Option(help="Privacy budget: fit a private calibrator."),
    ] = None,
    delta: Annotated[
        float | None,
        typer.Option(
            help="delta of the (epsilon, delta)-DP methods dp-ts and dp-ps (default 1e-5); "
            "the others are pure epsilon-DP and refuse it."
        ),
    ] = None,
    sources: Annotated[
        list[str] | None,
        typer.Option(
            "--sources",
            help="Private data sources (ledgers from 'privcal source init') to query instead "
            "of --input (repeat the option).",
        ),
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option(
            help="Noise seed of a private fit (simulation only; default secure noise). "
            "Refused without --epsilon: a non-private fit draws no noise."
        ),
    ] = None,
    n_bins: Annotated[int, typer.Option(help="Bins for binned objectives.")] = 15,
    t_range: Annotated[
        tuple[float, float] | None,
        typer.Option(
            "--t-range",
            help="Temperatures LO HI searched by the temperature methods (default: the "
            "method's own range).",
        ),
    ] = None,
) -> None:
    """Fit a calibrator on validation scores and save it as JSON."""
    from privcal._params import check_option
    from privcal.calibrators import METHODS

    with user_errors():
        check_output_path(out, "--out", "privcal fit", (".json",))
        _check_t_range(t_range)
        private = epsilon is not None or bool(sources) or delta is not None
        if not private:
            check_option(method, "--method", "privcal fit", tuple(METHODS))
        scores = load_scores(input, input_kind) if input is not None else None  # type: ignore[arg-type]
        with collect_warnings(_t_range_hint) as caught:
            if private:
                from privcal.cli.private_fit import check_private_request, fit_private

                srcs = list(sources or [])
                check_private_request(
                    method, scores=scores, epsilon=epsilon, delta=delta, sources=srcs,
                    t_range=t_range,
                )  # fmt: skip
                assert epsilon is not None
                estimator = fit_private(
                    method, scores=scores, epsilon=epsilon, delta=delta, sources=srcs,
                    seed=seed, n_bins=n_bins, t_range=t_range,
                )  # fmt: skip
            else:
                with _fit_status():
                    estimator = _fit_public(method, scores, seed, t_range)
        data = estimator.to_dict()
        out.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        summary = _write_fit_summary(
            out, estimator, method, scores, private, list(sources or []), n_bins, caught, input
        )
    n = f" on {scores.n_samples} examples" if scores is not None else ""
    console.print(f"Fitted [bold]{method}[/bold] ({data['class']}){n} -> {out} ({summary.name})")


def _write_fit_summary(
    out: Path,
    est: Any,
    method: str,
    scores: Scores | None,
    private: bool,
    sources: list[str],
    n_bins: int,
    caught: list[warnings.WarningMessage],
    input: Path | None,
) -> Path:
    """``NAME.summary.json`` beside the calibrator, for ``privcal report``
    (:func:`privcal.experiments.outputs.fit_summary`: no statistic of private data)."""
    from privcal.experiments.outputs import fit_summary, summary_path, write_summary

    logits = None if scores is None else scores.logits
    labels = None if scores is None else scores.labels
    metrics = None
    if not private and logits is not None and labels is not None:
        metrics = {
            "Input scores": evaluate_metrics(logits, labels, n_bins, input="logits"),
            "Calibrated": evaluate_metrics(est.predict_proba(logits), labels, n_bins),
        }
    data = fit_summary(
        est,
        method=method,
        calibrator_file=out.name,
        n_bins=n_bins,
        logits=logits,
        labels=labels,
        metrics=metrics,
        private=private,
        sources=sources,
        input_file=None if input is None else str(input),
        warnings=[" ".join(str(w.message).split()) for w in caught],
    )
    return write_summary(summary_path(out), "fit", data)


def apply(
    calibrator: Annotated[
        Path, typer.Option("--calibrator", "-c", help="Calibrator JSON from 'privcal fit'.")
    ],
    input: Annotated[
        Path, typer.Option("--input", "-i", help="Scores to calibrate (labels optional).")
    ],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            help="Output file; its suffix picks the format: .npz, .csv, .parquet "
            "or .json (probs [+ labels]).",
        ),
    ],
    input_kind: Annotated[str, input_kind_option()] = "auto",
) -> None:
    """Apply a saved calibrator; write calibrated probabilities (and labels if present)."""
    from privcal.data.io import OUTPUT_SUFFIXES

    with user_errors():
        check_output_path(out, "--out", "privcal apply", OUTPUT_SUFFIXES)
        cal = load_calibrator(calibrator)
        logits, labels = load_unlabelled(input, input_kind)  # type: ignore[arg-type]
        probs = cal.predict_proba(logits)
        write_probs(out, probs, labels)
    extra = " and labels" if labels is not None else ""
    console.print(f"Calibrated {probs.shape[0]} x {probs.shape[1]} probabilities{extra} -> {out}")


def _evaluate_columns(
    scores: Scores, cal: Any, n_bins: int
) -> tuple[dict[str, dict[str, float]], np.ndarray | None]:
    """The table's columns (input, and calibrated with a calibrator) and the calibrated probs."""
    if scores.is_top_label:
        if cal is not None:
            raise ValueError(
                f"{scores.source!r} holds top-label scores only; --calibrator needs the full "
                "N x C logits or probabilities."
            )
        return {"Input scores": toplabel_metrics(scores, n_bins)}, None
    assert scores.logits is not None
    columns = {
        "Input scores": evaluate_metrics(scores.logits, scores.labels, n_bins, input="logits")
    }
    if cal is None:
        return columns, None
    probs = cal.predict_proba(scores.logits)
    columns["Calibrated"] = evaluate_metrics(probs, scores.labels, n_bins, input="probs")
    return columns, probs


def evaluate(
    input: Annotated[
        Path,
        typer.Option(
            "--input", "-i", help="Labelled scores to evaluate (full vectors or top-label CSV)."
        ),
    ],
    calibrator: Annotated[
        Path | None,
        typer.Option("--calibrator", "-c", help="Also evaluate after this calibrator."),
    ] = None,
    n_bins: Annotated[int, typer.Option(help="Bins of the binned metrics.")] = 15,
    plot: Annotated[
        Path | None,
        typer.Option(help="Write a reliability diagram (before/after with --calibrator)."),
    ] = None,
    input_kind: Annotated[str, input_kind_option()] = "auto",
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            help="Also write the metrics and reliability data as JSON (for 'privcal report').",
        ),
    ] = None,
) -> None:
    """Print accuracy, ECE, classwise ECE, MCE, adaptive ECE, Brier and NLL.

    A top-label file (columns true_label, pred_label, confidence) gets accuracy, ECE, MCE and
    adaptive ECE, the metrics its confidences define.
    """
    with user_errors():
        if plot is not None:
            check_output_path(plot, "--plot", "privcal evaluate", (".png", ".pdf", ".svg"))
        if out is not None:
            check_output_path(out, "--out", "privcal evaluate", (".json",))
        kind: InputKind = input_kind  # type: ignore[assignment]
        scores = load_scores(input, kind, full=False)
        cal = load_calibrator(calibrator) if calibrator is not None else None
        columns, probs = _evaluate_columns(scores, cal, n_bins)
        if plot is not None:
            _plot(scores, probs, cal, n_bins, plot, input.name)
        if out is not None:
            from privcal.experiments.outputs import evaluate_summary, write_summary

            write_summary(
                out,
                "evaluate",
                evaluate_summary(
                    columns,
                    input_file=input.name,
                    calibrator_file=None if calibrator is None else calibrator.name,
                    n_bins=n_bins,
                    n_samples=scores.n_samples,
                    n_classes=None if scores.is_top_label else scores.n_classes,
                    logits=scores.logits,
                    probs=probs,
                    labels=scores.labels,
                ),
            )
    classes = "top label" if scores.is_top_label else f"{scores.n_classes} classes"
    console.print(f"{input.name}: {scores.n_samples} examples, {classes}")
    console.print(_metrics_table(columns))
    if plot is not None:
        console.print(f"Reliability diagram -> {plot}")
    if out is not None:
        console.print(f"Metrics -> {out} (privcal report {out})")


def _plot(
    scores: Scores, probs: np.ndarray | None, cal: Any, n_bins: int, path: Path, title: str
) -> None:
    """Write the reliability diagram of ``evaluate --plot``."""
    from privcal.plots import before_after, reliability_diagram, save_figure

    if scores.logits is None:
        raise ValueError("--plot needs full score vectors; this file is top-label only.")
    if probs is None:
        fig = reliability_diagram(scores.logits, scores.labels, n_bins, input="logits", title=title)
    else:
        fig = before_after(
            scores.logits,
            probs,
            scores.labels,
            ("Input scores", f"Calibrated ({type(cal).__name__})"),
            n_bins,
            input_before="logits",
        )
    save_figure(fig, path)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Add ``fit``, ``apply`` and ``evaluate`` to the ``privcal`` app."""
    del bench_app  # no benchmark verbs here
    from privcal.calibrators import METHODS

    app.command(
        "fit",
        help=f"{fit.__doc__}\n\nMethods: {', '.join(METHODS)} (platt: binary only). With "
        "--epsilon or --sources a private method is fitted: acc-t, nll-t, temperature, ece-t, "
        "histogram (Luo et al. 2020; epsilon-DP) or dp-ts, dp-ps (Bu et al. 2023; DP-SGD, "
        "(epsilon, delta)-DP, torch extra).",
    )(fit)
    app.command("apply")(apply)
    app.command("evaluate")(evaluate)

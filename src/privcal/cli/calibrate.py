"""``privcal fit``, ``privcal apply`` and ``privcal evaluate``.

``fit`` learns a calibrator on labelled validation scores and saves it as JSON
(:meth:`~privcal.calibrators.Calibrator.to_dict`); ``apply`` maps new scores to calibrated
probabilities; ``evaluate`` prints calibration metrics, before and after a calibrator, or the
top-label metrics of a top-label file (``true_label,pred_label,confidence``). ``fit --epsilon``
(or ``--sources``) fits with :func:`privcal.cli.private_fit.fit_private`.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import typer
from rich.table import Table

from privcal.cli._common import (
    InputKindOption,
    check_output_path,
    collect_warnings,
    console,
    err_console,
    fail,
    load_calibrator,
    load_scores,
    load_unlabelled,
    refuse_overwrite,
    user_errors,
    write_part,
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
        kwargs = {"n_bins": n_bins} if binned else {}
        out[label] = float(getattr(metrics, name)(scores, labels, input=input, **kwargs))
    return out


def toplabel_metrics(scores: Scores, n_bins: int = 15) -> dict[str, float]:
    """Accuracy, ECE, MCE and adaptive ECE of top-label scores (confidence, predicted class).

    The bins are those of :func:`privcal.metrics.ece`
    (:func:`~privcal.metrics.statistics.calibration_bins` of the confidence and the correctness
    ``1[predicted = label]``); classwise ECE, Brier and NLL need the full vector.
    """
    width, mass = _toplabel_bins(scores, n_bins, "width"), _toplabel_bins(scores, n_bins, "mass")
    return {
        "Accuracy": float(np.mean(scores.predicted == scores.labels)),
        "ECE": width.ece(),
        "MCE": width.mce(),
        "Adaptive ECE": mass.ece(),
    }


def _toplabel_bins(scores: Scores, n_bins: int, binning: Literal["width", "mass"]) -> Any:
    """The bins of :func:`toplabel_metrics`, of equal width or equal mass (``binning``)."""
    from privcal.metrics.statistics import calibration_bins

    assert scores.confidence is not None and scores.predicted is not None
    correct = (scores.predicted == scores.labels).astype(np.float64)
    return calibration_bins(scores.confidence, correct, n_bins, binning)


def _metrics_table(columns: dict[str, dict[str, float]]) -> Table:
    from privcal.report import format_value

    table = Table()
    table.add_column("Metric")
    for name in columns:
        table.add_column(name, justify="right")
    if len(columns) == 2:
        table.add_column("Change", justify="right")
    for label in next(iter(columns.values())):
        values = [col[label] for col in columns.values()]
        row = [label, *(format_value(v, "fraction") for v in values)]
        if len(values) == 2:
            diff = values[1] - values[0]
            row.append(f"{diff:+.4f}" if np.isfinite(diff) else "")
        table.add_row(*row)
    return table


def _fit_option_hint(text: str) -> str:
    """Point a fit's warnings at the option that acts on them, ``--t-range`` or
    ``--max-iter`` (a ``hint`` of :func:`collect_warnings`)."""
    if "t_range" in text and "--t-range" not in text:
        text += " (privcal fit --t-range LO HI)"
    if "max_iter" in text and "--max-iter" not in text:
        text += " (privcal fit --max-iter N)"
    return text


# -- commands --------------------------------------------------------------------------------


def _check_t_range(t_range: tuple[float, float] | None) -> None:
    if t_range is not None and not 0 < t_range[0] < t_range[1] < np.inf:
        fail(
            f"The '--t-range' parameter of privcal fit must be two temperatures 0 < LO < HI. "
            f"Got {t_range[0]:g} {t_range[1]:g} instead."
        )


#: Methods whose fit bins (``--n-bins`` sets their bins), without and with ``--epsilon``.
BINNED_METHODS: tuple[str, ...] = ("histogram", "histogram-classwise", "ece-t")
PRIVATE_BINNED_METHODS: tuple[str, ...] = ("histogram", "ece-t")
#: Bins of ``fit`` and of its summary's metrics when ``--n-bins`` is not given.
DEFAULT_N_BINS = 15


def _check_n_bins(n_bins: int | None, method: str, private: bool) -> int:
    """``--n-bins``: refused below 1 and for a method that does not bin (it would be ignored)."""
    if n_bins is None:
        return DEFAULT_N_BINS
    if n_bins < 1:
        fail(f"The '--n-bins' parameter of privcal fit must be an integer >= 1. Got {n_bins}.")
    binned = PRIVATE_BINNED_METHODS if private else BINNED_METHODS
    if private:
        from privcal.cli.private_fit import PRIVATE_METHODS

        if method not in PRIVATE_METHODS:
            return n_bins  # fit_private names the allowed methods
    if method not in binned:
        kind = "private " if private else ""
        fail(
            f"--n-bins applies to the {kind}methods that bin ({', '.join(binned)}); "
            f"--method {method} has no bins. Drop --n-bins (privcal evaluate --n-bins sets the "
            "bins of the metrics)."
        )
    return n_bins


def _check_top_label_fit(method: str, scores: Scores | None, private: bool) -> None:
    """A top-label file (confidence and predicted class) can train top-label binning only."""
    if scores is None or not scores.is_top_label:
        return
    what = f"{scores.source!r} holds top-label scores only (true_label, pred_label, confidence)"
    if private:
        fail(
            f"{what}; the private fits need the full N x C logits or probabilities (a data "
            "source answers queries about whole score vectors)."
        )
    if method != "histogram":
        fail(
            f"{what}: only --method histogram (top-label histogram binning, confidence -> "
            f"calibrated confidence) can be fitted on them; {method} needs the full N x C "
            "logits or probabilities."
        )


def _fit_public(
    method: str,
    scores: Scores | None,
    seed: int | None,
    t_range: tuple[float, float] | None,
    n_bins: int = DEFAULT_N_BINS,
    max_iter: int | None = None,
) -> Any:
    """A non-private calibrator from :data:`privcal.calibrators.METHODS`, fitted on ``scores``.

    ``n_bins`` sets the bins of the :data:`BINNED_METHODS` and ``max_iter`` the Newton iterations
    of the methods that have them (Platt, vector, matrix scaling); a top-label file fits top-label
    histogram binning from its confidences
    (:meth:`~privcal.calibrators.HistogramBinning.fit_top_label`).
    """
    from privcal.calibrators import METHODS

    if seed is not None:
        fail(
            f"--seed sets the noise of a private fit; '{method}' without --epsilon draws no "
            "noise. Drop --seed, or add --epsilon to fit a private calibrator."
        )
    if scores is None:
        fail("privcal fit needs --input (labelled validation scores).")
    est = METHODS[method]()
    for param, value, fits in (
        ("t_range", t_range, "the temperature methods"),
        ("max_iter", max_iter, "the Newton fits (platt, vector, op-vector, matrix)"),
    ):
        if value is not None:
            if param not in est.get_params():
                fail(f"--{param.replace('_', '-')} applies to {fits}, not to --method {method}.")
            est.set_params(**{param: value})
    if method in BINNED_METHODS:
        est.set_params(n_bins=n_bins)
    if scores.is_top_label:
        assert scores.confidence is not None and scores.predicted is not None
        n_classes = max(2, 1 + int(max(scores.labels.max(), scores.predicted.max())))
        return est.fit_top_label(scores.confidence, scores.predicted == scores.labels, n_classes)
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
    input_kind: InputKindOption = "auto",
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
    n_bins: Annotated[
        int | None,
        typer.Option(
            help="Bins of the methods that bin: histogram, histogram-classwise, ece-t (and the "
            "summary's metrics); default 15. Refused for the other methods.",
            show_default=False,
        ),
    ] = None,
    t_range: Annotated[
        tuple[float, float] | None,
        typer.Option(
            "--t-range",
            help="Temperatures LO HI searched by the temperature methods (default: the "
            "method's own range).",
        ),
    ] = None,
    max_iter: Annotated[
        int | None,
        typer.Option(
            "--max-iter",
            min=1,
            help="Newton iterations (per majorise-minimise round) of platt, vector, op-vector "
            "and matrix scaling (default: the method's own, 200 or 500). Refused for the other "
            "methods and for private fits.",
            show_default=False,
        ),
    ] = None,
    aggregation: Annotated[
        str,
        typer.Option(
            "--aggregation",
            help="How --sources add their noise: 'local' (each its own full noise; no one is "
            "trusted) or 'distributed' (each a discrete Laplace share through a secure sum: "
            "the noise of one release, trusting the sum and --threshold honest sources).",
        ),
    ] = "local",
    threshold: Annotated[
        int | None,
        typer.Option(
            "--threshold",
            help="t of --aggregation distributed: the shares of any t sources make the noise "
            "(default: all --sources).",
        ),
    ] = None,
    ledger: Annotated[
        Path | None,
        typer.Option(
            "--ledger",
            help="A pipeline ledger ('privcal ledger init') charged with this private fit on "
            "--input before it releases; refused when it would pass the ledger's budget.",
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Overwrite an output that holds a private release (it cost privacy budget), "
            "and keep a flagged private temperature fit (acc-t, nll-t, temperature, ece-t with "
            "--epsilon) whose own release cannot tell its temperature from T = 1: it may "
            "calibrate worse than no calibration. Without it the command refuses such an "
            "output before any work, and such a fit exits 2 and saves nothing.",
        ),
    ] = False,
) -> None:
    """Fit a calibrator on validation scores and save it as JSON.

    --out (and its summary, NAME.summary.json) is not written over when it holds a private
    calibrator, unless --force.
    """
    from privcal.calibrators.summary import release_summary
    from privcal.report import summary_path

    with user_errors():
        check_output_path(out, "--out", "privcal fit", (".json",))
        refuse_overwrite((out, summary_path(out)), "--out", "privcal fit", force)
        estimator, scores, summary = _fit_and_save(
            out, method, input, input_kind, epsilon, delta, list(sources or []), seed, n_bins,
            t_range, max_iter, aggregation, threshold, ledger, force,
        )  # fmt: skip
    n = f" on {scores.n_samples} examples" if scores is not None else ""
    what = f"[bold]{method}[/bold] ({type(estimator).__name__}){n}"
    console.print(f"Fitted {what} -> {out} ({summary.name})")
    console.print(f"Released: {release_summary(estimator)['text']}", highlight=False)


def _fit_and_save(
    out: Path,
    method: str,
    input: Path | None,
    input_kind: str,
    epsilon: float | None,
    delta: float | None,
    sources: list[str],
    seed: int | None,
    n_bins: int | None,
    t_range: tuple[float, float] | None,
    max_iter: int | None,
    aggregation: str,
    threshold: int | None,
    ledger: Path | None,
    force: bool,
) -> tuple[Any, Scores | None, Path]:
    """Check ``privcal fit``'s options, read ``--input``, fit, and write the calibrator ``out``
    and ``NAME.summary.json`` beside it for ``privcal report`` (:func:`privcal.report.fit_summary`:
    no statistic of private data); returns ``(estimator, scores, summary path)``. Any private
    option (``--epsilon``, ``--sources``, ``--delta``, ``--aggregation``, ``--threshold``,
    ``--ledger``) makes the fit private."""
    from privcal._params import EPSILON, check_option, check_probability
    from privcal.calibrators import METHODS
    from privcal.report import fit_summary, summary_path, write_summary

    _check_t_range(t_range)
    if epsilon is not None:  # named as the option, before any file is read
        EPSILON.check(epsilon, "--epsilon", "privcal fit")
    if delta is not None:
        check_probability(delta, "--delta", "privcal fit")
    private = (
        any(v is not None for v in (epsilon, delta, threshold, ledger))
        or bool(sources)
        or aggregation != "local"
    )
    if not private:
        from privcal.cli.private_fit import PRIVATE_METHODS

        if method in PRIVATE_METHODS and method not in METHODS:
            fail(f"--method {method} is a private fit: give its budget with --epsilon.")
        check_option(method, "--method", "privcal fit", tuple(METHODS))
    elif max_iter is not None:
        fail("--max-iter applies to the non-private Newton fits; drop it with --epsilon.")
    bins = _check_n_bins(n_bins, method, private)
    scores = load_scores(input, input_kind, full=False) if input is not None else None
    _check_top_label_fit(method, scores, private)
    with collect_warnings(_fit_option_hint) as caught:
        if private:
            from privcal.cli.private_fit import fit_private

            estimator = fit_private(
                method, scores=scores, epsilon=epsilon, delta=delta, sources=sources,
                seed=seed, n_bins=bins, t_range=t_range, aggregation=aggregation,
                threshold=threshold, ledger=ledger, force=force,
            )  # fmt: skip
        else:
            with _fit_status():
                estimator = _fit_public(method, scores, seed, t_range, bins, max_iter)
    out.write_text(json.dumps(estimator.to_dict(), indent=2) + "\n", encoding="utf-8")
    logits = None if scores is None else scores.logits
    labels = None if scores is None else scores.labels
    metrics = None
    if not private and logits is not None and labels is not None:
        metrics = {
            "Input scores": evaluate_metrics(logits, labels, bins, input="logits"),
            "Calibrated": evaluate_metrics(estimator.predict_proba(logits), labels, bins),
        }
    data = fit_summary(
        estimator,
        method=method,
        calibrator_file=out.name,
        n_bins=bins,
        logits=logits,
        labels=labels,
        metrics=metrics,
        private=private,
        sources=sources,
        input_file=None if input is None else str(input),
        warnings=[" ".join(str(w.message).split()) for w in caught],
    )
    return estimator, scores, write_summary(summary_path(out), "fit", data)


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
    input_kind: InputKindOption = "auto",
) -> None:
    """Apply a saved calibrator; write calibrated probabilities (and labels if present).

    A top-label file (true_label, pred_label, confidence) takes a top-label histogram binning
    calibrator ('fit -m histogram') and gets the same columns back, with calibrated confidences.
    """
    from privcal.data.io import OUTPUT_SUFFIXES

    with user_errors():
        check_output_path(out, "--out", "privcal apply", OUTPUT_SUFFIXES)
        cal = load_calibrator(calibrator)
        labels: np.ndarray | None
        if input.suffix.lower() in (".csv", ".parquet"):  # may be a top-label file
            scores = load_scores(input, input_kind, full=False)
            if scores.is_top_label:
                top = _calibrated_top_label(scores, cal)
                write_part(out, top)
                console.print(
                    f"Calibrated {top.n_samples} top-label confidences -> {out} "
                    "(true_label, pred_label, confidence)"
                )
                return
            assert scores.logits is not None
            logits, labels = scores.logits, scores.labels
        else:
            logits, labels = load_unlabelled(input, input_kind)
        probs = _calibrated_probs(cal, logits, str(input))
        write_probs(out, probs, labels)
    extra = " and labels" if labels is not None else ""
    console.print(f"Calibrated {probs.shape[0]} x {probs.shape[1]} probabilities{extra} -> {out}")


def _other_model(cal: Any, source: str, found: str) -> ValueError:
    """The error for scores whose classes do not fit the calibrator's (``found``: what shows
    it, e.g. ``"100 classes"``)."""
    return ValueError(
        f"The --calibrator calibrator was fitted on {cal.n_classes_} classes, but "
        f"{source!r} has {found}: the scores come from another model. Fit a calibrator on this "
        "model's validation scores ('privcal fit')."
    )


def _calibrated_probs(cal: Any, logits: np.ndarray, source: str) -> np.ndarray:
    """``cal.predict_proba(logits)``, refused when the classes differ (naming the file)."""
    if logits.shape[1] != cal.n_classes_:
        raise _other_model(cal, source, f"{logits.shape[1]} classes")
    return np.asarray(cal.predict_proba(logits))


def _calibrated_top_label(scores: Scores, cal: Any) -> Scores:
    """Top-label scores with their confidences mapped by a top-label binning calibrator; any
    other calibrator is refused (it maps whole score vectors, which the file lacks)."""
    from privcal.calibrators import HistogramBinning

    if not (isinstance(cal, HistogramBinning) and cal.mode == "top"):
        raise ValueError(
            f"{scores.source!r} holds top-label scores only (confidence and predicted class); "
            f"--calibrator {type(cal).__name__} maps whole N x C score vectors, so it cannot be "
            "applied to them. Only top-label histogram binning ('privcal fit -m histogram') "
            "maps confidences; otherwise give the full logits or probabilities."
        )
    assert scores.confidence is not None and scores.predicted is not None
    # a top-label file does not say how many classes its model has; its largest class index
    # must at least fit the calibrator's
    largest = int(max(scores.labels.max(initial=0), scores.predicted.max(initial=0)))
    if largest >= cal.n_classes_:
        raise _other_model(cal, scores.source, f"class index {largest}")
    return Scores(
        labels=scores.labels,
        confidence=cal.predict_confidence(scores.confidence),
        predicted=scores.predicted,
        source=scores.source,
    )


def _evaluate_columns(
    scores: Scores, cal: Any, n_bins: int
) -> tuple[dict[str, dict[str, float]], np.ndarray | Scores | None]:
    """The table's columns (input, and calibrated with a calibrator) and the calibrated scores:
    probabilities, or top-label scores for a top-label file."""
    if scores.is_top_label:
        columns = {"Input scores": toplabel_metrics(scores, n_bins)}
        if cal is None:
            return columns, None
        calibrated = _calibrated_top_label(scores, cal)
        columns["Calibrated"] = toplabel_metrics(calibrated, n_bins)
        return columns, calibrated
    assert scores.logits is not None
    columns = {
        "Input scores": evaluate_metrics(scores.logits, scores.labels, n_bins, input="logits")
    }
    if cal is None:
        return columns, None
    probs = _calibrated_probs(cal, scores.logits, scores.source)
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
    input_kind: InputKindOption = "auto",
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
        if n_bins < 1:
            fail(f"The '--n-bins' parameter of privcal evaluate must be >= 1. Got {n_bins}.")
        if plot is not None:
            check_output_path(plot, "--plot", "privcal evaluate", (".png", ".pdf", ".svg"))
        if out is not None:
            check_output_path(out, "--out", "privcal evaluate", (".json",))
        scores = load_scores(input, input_kind, full=False)
        cal = load_calibrator(calibrator) if calibrator is not None else None
        columns, after = _evaluate_columns(scores, cal, n_bins)
        top_label = _toplabel_reliabilities(scores, after, n_bins)
        probs = after if isinstance(after, np.ndarray) else None
        if plot is not None:
            _plot(scores, probs, cal, top_label, n_bins, plot, input.name)
        if out is not None:
            from privcal.report import evaluate_summary, write_summary

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
                    top_label_reliability=top_label,
                ),
            )
    classes = "top label" if scores.is_top_label else f"{scores.n_classes} classes"
    console.print(f"{input.name}: {scores.n_samples} examples, {classes}")
    console.print(_metrics_table(columns))
    if plot is not None:
        console.print(f"Reliability diagram -> {plot}")
    if out is not None:
        console.print(f"Metrics -> {out} (privcal report {out})")


def _toplabel_reliabilities(
    scores: Scores, after: np.ndarray | Scores | None, n_bins: int
) -> list[Any]:
    """The :class:`privcal.metrics.Reliability` (the bins of :func:`toplabel_metrics`) of a
    top-label file, and of its calibrated scores when there are any; empty for full vectors."""
    from privcal.metrics import Reliability

    if not scores.is_top_label:
        return []
    stages = [scores, after] if isinstance(after, Scores) else [scores]
    bins = [_toplabel_bins(s, n_bins, "width") for s in stages]
    return [Reliability(b.edges, b.counts, b.accuracy(), b.confidence(), b.ece()) for b in bins]


def _plot(
    scores: Scores,
    probs: np.ndarray | None,
    cal: Any,
    top_label: list[Any],
    n_bins: int,
    path: Path,
    title: str,
) -> None:
    """Write the reliability diagram of ``evaluate --plot``: before (and after) ``cal``, of the
    confidences (``top_label``) for a top-label file."""
    from privcal.plots import before_after, reliability_diagram, reliability_panels, save_figure

    stages = ("Input scores", f"Calibrated ({type(cal).__name__})")
    if top_label:
        fig = reliability_panels(top_label, list(stages) if len(top_label) == 2 else [title])
    elif probs is None:
        assert scores.logits is not None
        fig = reliability_diagram(scores.logits, scores.labels, n_bins, input="logits", title=title)
    else:
        assert scores.logits is not None
        fig = before_after(
            scores.logits, probs, scores.labels, stages, n_bins, input_before="logits"
        )
    save_figure(fig, path)


def _one_line_paragraphs(doc: str | None) -> str:
    """A docstring as help text: dedented, each paragraph on one line (the help wraps it)."""
    return re.sub(r"(?<!\n)\n(?!\n)", " ", inspect.cleandoc(doc or ""))


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Add ``fit``, ``apply`` and ``evaluate`` to the ``privcal`` app."""
    del bench_app  # no benchmark verbs here
    from privcal.calibrators import METHODS

    app.command(
        "fit",
        help=f"{_one_line_paragraphs(fit.__doc__)}\n\nMethods: {', '.join(METHODS)} (platt: "
        "binary only). With "
        "--epsilon or --sources a private method is fitted: acc-t, nll-t, temperature, ece-t, "
        "histogram (Luo et al. 2020; epsilon-DP) or dp-ts, dp-ps (Bu et al. 2023; DP-SGD, "
        "(epsilon, delta)-DP, torch extra).",
    )(fit)
    app.command("apply")(apply)
    app.command("evaluate")(evaluate)

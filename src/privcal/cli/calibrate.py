"""``privcal fit``, ``privcal apply`` and ``privcal evaluate``.

``fit`` learns a calibrator on labelled validation scores and saves it as JSON
(:meth:`~privcal.calibrators.Calibrator.to_dict`); ``apply`` maps new scores to calibrated
probabilities; ``evaluate`` prints calibration metrics, before and after a calibrator.

Private fitting
---------------
``fit --epsilon E`` and ``fit --sources ...`` are served by :data:`PRIVATE_FIT_HOOK`, which the
private module installs with :func:`set_private_fit_hook` from its own ``register`` function.
The hook receives a :class:`PrivateFitRequest` and returns a fitted estimator with
``to_dict()``.  Until a hook is installed those options exit with a clear error.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from privcal.cli._common import (
    InputKind,
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

__all__ = [
    "PRIVATE_FIT_HOOK",
    "PrivateFitRequest",
    "evaluate_metrics",
    "register",
    "set_private_fit_hook",
]


@dataclass(frozen=True)
class PrivateFitRequest:
    """What ``privcal fit`` passes to the private fitting hook.

    Attributes
    ----------
    method : str
        The ``--method`` name, unvalidated (the hook owns the private method names).
    scores : Scores or None
        The labelled validation scores from ``--input``, or ``None`` when only ``--sources``
        were given.
    epsilon : float or None
        The ``--epsilon`` budget.
    delta : float or None
        ``--delta``, for the ``(epsilon, delta)`` methods; ``None`` when not given.
    sources : list of str
        The ``--sources`` values, verbatim (paths or addresses; the hook interprets them).
    seed : int or None
        ``--seed``: a noise seed for reproducible simulation, ``None`` for secure noise.
    n_bins : int
        ``--n-bins`` for binned objectives.
    console : rich.console.Console
        Where to report progress and the privacy spent (stderr).
    """

    method: str
    scores: Scores | None
    epsilon: float | None
    delta: float | None = None
    sources: list[str] = field(default_factory=list)
    seed: int | None = None
    n_bins: int = 15
    console: Console = err_console


#: The private fitting hook, ``hook(request) -> fitted estimator`` (``None`` until installed).
PRIVATE_FIT_HOOK: Callable[[PrivateFitRequest], Any] | None = None


def set_private_fit_hook(hook: Callable[[PrivateFitRequest], Any] | None) -> None:
    """Install (or with ``None`` remove) the function that serves ``fit --epsilon/--sources``."""
    global PRIVATE_FIT_HOOK
    PRIVATE_FIT_HOOK = hook


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


def _fmt(value: float) -> str:
    return f"{value:.4f}" if np.isfinite(value) else str(value)


def _metrics_table(columns: dict[str, dict[str, float]]) -> Table:
    table = Table()
    table.add_column("Metric")
    for name in columns:
        table.add_column(name, justify="right")
    if len(columns) == 2:
        table.add_column("Change", justify="right")
    for label, _, _ in _METRICS:
        values = [col[label] for col in columns.values()]
        row = [label, *(_fmt(v) for v in values)]
        if len(values) == 2:
            diff = values[1] - values[0]
            row.append(f"{diff:+.4f}" if np.isfinite(diff) else "")
        table.add_row(*row)
    return table


# -- commands --------------------------------------------------------------------------------


def fit(
    method: Annotated[str, typer.Option("--method", "-m", help="Calibrator name (listed above).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Where to write the calibrator JSON.")],
    input: Annotated[
        Path | None,
        typer.Option("--input", "-i", help="Labelled validation scores (.npz/.csv/.parquet)."),
    ] = None,
    input_kind: Annotated[str, input_kind_option()] = "auto",
    epsilon: Annotated[
        float | None,
        typer.Option(help="Privacy budget: fit a private calibrator (needs privcal.private)."),
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
            help="Private data sources to query instead of --input (repeat the option).",
        ),
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option(help="Noise seed for private methods (simulation only; default secure)."),
    ] = None,
    n_bins: Annotated[int, typer.Option(help="Bins for binned private objectives.")] = 15,
) -> None:
    """Fit a calibrator on validation scores and save it as JSON."""
    from privcal._params import check_option
    from privcal.calibrators import METHODS

    with user_errors():
        private = epsilon is not None or bool(sources) or delta is not None
        if not private:
            check_option(method, "--method", "privcal fit", tuple(METHODS))
        scores = load_scores(input, input_kind) if input is not None else None  # type: ignore[arg-type]
        if private:
            hook = PRIVATE_FIT_HOOK
            if hook is None:
                fail(
                    "--epsilon/--sources need private calibration, which is not available in "
                    "this installation (no private fitting hook is registered). Drop "
                    "--epsilon/--sources to fit a non-private calibrator."
                )
            request = PrivateFitRequest(
                method=method,
                scores=scores,
                epsilon=epsilon,
                delta=delta,
                sources=list(sources or []),
                seed=seed,
                n_bins=n_bins,
                console=err_console,
            )
            estimator = hook(request)
        else:
            if scores is None:
                fail("privcal fit needs --input (labelled validation scores).")
            assert scores.logits is not None
            estimator = METHODS[method]().fit(scores.logits, scores.labels)
        data = estimator.to_dict()
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    n = f" on {scores.n_samples} examples" if scores is not None else ""
    console.print(f"Fitted [bold]{method}[/bold] ({data['class']}){n} -> {out}")


def apply(
    calibrator: Annotated[
        Path, typer.Option("--calibrator", "-c", help="Calibrator JSON from 'privcal fit'.")
    ],
    input: Annotated[
        Path, typer.Option("--input", "-i", help="Scores to calibrate (labels optional).")
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output .npz (probs [+ labels]).")],
    input_kind: Annotated[str, input_kind_option()] = "auto",
) -> None:
    """Apply a saved calibrator; write calibrated probabilities (and labels if present)."""
    with user_errors():
        cal = load_calibrator(calibrator)
        logits, labels = load_unlabelled(input, input_kind)  # type: ignore[arg-type]
        probs = cal.predict_proba(logits)
        write_probs(out, probs, labels)
    extra = " and labels" if labels is not None else ""
    console.print(f"Calibrated {probs.shape[0]} x {probs.shape[1]} probabilities{extra} -> {out}")


def evaluate(
    input: Annotated[Path, typer.Option("--input", "-i", help="Labelled scores to evaluate.")],
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
) -> None:
    """Print accuracy, ECE, classwise ECE, MCE, adaptive ECE, Brier and NLL."""
    with user_errors():
        kind: InputKind = input_kind  # type: ignore[assignment]
        scores = load_scores(input, kind)
        assert scores.logits is not None
        logits, labels = scores.logits, scores.labels
        cal = load_calibrator(calibrator) if calibrator is not None else None
        columns = {"Input scores": evaluate_metrics(logits, labels, n_bins, input="logits")}
        probs = None
        if cal is not None:
            probs = cal.predict_proba(logits)
            columns["Calibrated"] = evaluate_metrics(probs, labels, n_bins, input="probs")
        if plot is not None:
            from privcal.plots import before_after, reliability_diagram, save_figure

            if probs is None:
                fig = reliability_diagram(logits, labels, n_bins, input="logits", title=input.name)
            else:
                fig = before_after(
                    logits,
                    probs,
                    labels,
                    ("Input scores", f"Calibrated ({type(cal).__name__})"),
                    n_bins,
                    input_before="logits",
                )
            save_figure(fig, plot)
    title = f"{input.name}: {scores.n_samples} examples, {logits.shape[1]} classes"
    console.print(title)
    console.print(_metrics_table(columns))
    if plot is not None:
        console.print(f"Reliability diagram -> {plot}")


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Add ``fit``, ``apply`` and ``evaluate`` to the ``privcal`` app."""
    del bench_app  # no benchmark verbs here
    from privcal.calibrators import METHODS

    app.command(
        "fit",
        help=f"{fit.__doc__}\n\nMethods: {', '.join(METHODS)} (platt: binary only). With "
        "--epsilon or --sources a private method is fitted: acc-t, nll-t, temperature, ece-t, "
        "histogram (epsilon-DP, privcal.private) or dp-ts, dp-ps (DP-SGD, (epsilon, delta)-DP, "
        "torch extra).",
    )(fit)
    app.command("apply")(apply)
    app.command("evaluate")(evaluate)

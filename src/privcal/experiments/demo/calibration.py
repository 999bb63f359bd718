"""Demo section: every non-private calibrator on the digits distribution-shift benchmark.

For each corruption at severity 5 the shifted test set is split (seeded) into a validation half,
on which each calibrator of :data:`privcal.calibrators.METHODS` is fitted, and a test half, on
which accuracy, ECE and classwise ECE are measured before and after calibration.  Methods that do
not apply (``platt`` is binary-only) and aliases (``temperature`` is ``nll-t``) are skipped.
Outputs: a console table of means over corruptions, a per-corruption table in the report, the
tidy results ``calibration.csv``, and before/after reliability diagrams for the clean set and
the most miscalibrated corruption (from their per-bin data).
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from rich.table import Table

from privcal.experiments.demo import rich_bar

if TYPE_CHECKING:
    from privcal.experiments.demo import DemoContext

__all__ = ["SEVERITY", "TITLE", "applicable_methods", "run"]

TITLE = "Calibration under distribution shift"
#: Corruption severity of the shifted sets.
SEVERITY = 5
#: Column label of the uncalibrated scores.
UNCALIBRATED = "uncalibrated"
_METRICS = ("accuracy", "ece", "classwise_ece")
#: The columns of the means over corruptions after the method's.
_COLUMNS = [
    ("accuracy", "Accuracy", "percent"),
    ("ece", "ECE", "percent"),
    ("delta", "ΔECE", "pp"),
    ("classwise_ece", "Classwise ECE", "percent"),
]


def applicable_methods(n_classes: int) -> tuple[dict[str, Any], dict[str, str]]:
    """Calibrator factories from ``METHODS`` that apply to ``n_classes``, without aliases.

    Returns
    -------
    methods : dict
        CLI name -> factory, in ``METHODS`` order.
    skipped : dict
        CLI name -> reason (binary-only, or the name of the identical method kept).
    """
    from privcal.calibrators import METHODS, PlattScaling

    methods: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    seen: dict[tuple[str, str], str] = {}
    for name, factory in METHODS.items():
        est = factory()
        if isinstance(est, PlattScaling) and n_classes > 2:
            skipped[name] = "binary classifiers only"
            continue
        key = (type(est).__name__, repr(sorted(est.get_params(deep=False).items())))
        if key in seen:
            skipped[name] = f"same estimator as {seen[key]}"
            continue
        seen[key] = name
        methods[name] = factory
    return methods, skipped


def _scores(p: np.ndarray, y: np.ndarray, input: Literal["probs", "logits"]) -> dict[str, float]:
    from privcal.metrics import accuracy, classwise_ece, ece

    metrics = dict(zip(_METRICS, (accuracy, ece, classwise_ece), strict=True))
    return {k: f(p, y, input=input) for k, f in metrics.items()}


def _halves(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    perm = rng.permutation(n)
    return perm[: n // 2], perm[n // 2 :]


def _fit_all(
    ctx: DemoContext,
    rng: np.random.Generator,
    corruptions: Sequence[str],
    methods: dict[str, Any],
) -> tuple[list[dict[str, Any]], Counter[str], dict[str, tuple[np.ndarray, np.ndarray]]]:
    """Fit every method on each corruption's validation half and score its test half.

    Returns the tidy rows (one per corruption and method, the uncalibrated model first), the
    warnings counted per method and each corruption's ``(validation, test)`` halves."""
    data = ctx.data
    rows: list[dict[str, Any]] = []
    warned: Counter[str] = Counter()
    splits: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    with rich_bar(ctx.console, transient=True) as progress:
        task = progress.add_task("Calibrating", total=len(corruptions))
        for corruption in corruptions:
            progress.update(task, description=f"Calibrating [cyan]{corruption}[/cyan]")
            z, y = data.shifted[(corruption, SEVERITY)]
            val, test = _halves(rng, y.shape[0])
            splits[corruption] = (val, test)
            uncalibrated = _scores(z[test], y[test], "logits")
            rows.append({"corruption": corruption, "method": UNCALIBRATED, **uncalibrated})
            for name, factory in methods.items():
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    probs = factory().fit(z[val], y[val]).predict_proba(z[test])
                warned[name] += len(caught)
                rows.append(
                    {"corruption": corruption, "method": name, **_scores(probs, y[test], "probs")}
                )
            progress.advance(task)
    return rows, warned, splits


def _print_means(ctx: DemoContext, means: dict[str, dict[str, float]], n_corruptions: int) -> None:
    """The console table of the means over corruptions, in percent."""
    from privcal.report import format_value

    console_table = Table(
        title=f"Mean over {n_corruptions} corruptions (severity {SEVERITY}), test halves, %",
        title_justify="left",
    )
    console_table.add_column("Method")
    for _, label, _ in _COLUMNS:
        console_table.add_column(label, justify="right")
    base = means[UNCALIBRATED]
    for m, v in means.items():
        delta = "" if m == UNCALIBRATED else format_value(v["ece"] - base["ece"], "pp")
        console_table.add_row(
            m,
            format_value(v["accuracy"], "percent"),
            format_value(v["ece"], "percent"),
            delta,
            format_value(v["classwise_ece"], "percent"),
            style="dim" if m == UNCALIBRATED else None,
        )
    ctx.console.print(console_table)


def _figures(
    ctx: DemoContext,
    rng: np.random.Generator,
    rows: list[dict[str, Any]],
    splits: dict[str, tuple[np.ndarray, np.ndarray]],
) -> list[dict[str, Any]]:
    """Reliability diagrams before and after temperature scaling: the clean set (split here,
    by ``rng``) and the most miscalibrated corruption (on its split of :func:`_fit_all`)."""
    from privcal.calibrators import TemperatureScaling
    from privcal.metrics import reliability
    from privcal.report import reliability_figure

    data = ctx.data
    by_ece = {r["corruption"]: r["ece"] for r in rows if r["method"] == UNCALIBRATED}
    worst = max(by_ece, key=by_ece.__getitem__)
    cases = [("Clean test set", "clean", data.clean, _halves(rng, data.clean[1].shape[0]))]
    worst_set = data.shifted[(worst, SEVERITY)]
    cases.append((f"{worst} (severity {SEVERITY})", worst, worst_set, splits[worst]))
    figures = []
    for label, stem, (z, y), (val, test) in cases:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            after = TemperatureScaling("nll").fit(z[val], y[val]).predict_proba(z[test])
        block = reliability_figure(
            f"{label}: before and after temperature scaling (test half)",
            [
                ("uncalibrated", reliability(z[test], y[test], input="logits")),
                ("temperature scaling", reliability(after, y[test])),
            ],
        )
        figures.append(ctx.figure(block, f"calibration_{stem}"))
    return figures


def _findings(
    rows: list[dict[str, Any]], corruptions: Sequence[str], methods: dict[str, Any]
) -> tuple[dict[str, dict[str, float]], dict[str, Any]]:
    """Means over corruptions per method (the uncalibrated model first) and the takeaway, which
    sets each method against doing nothing (paired ECE differences over the corruptions, +- 2
    SE)."""
    from privcal.metrics.compare import BETTER, replicate_interval
    from privcal.report import takeaway

    means = {
        m: {k: float(np.mean([r[k] for r in rows if r["method"] == m])) for k in _METRICS}
        for m in [UNCALIBRATED, *methods]
    }
    base = means[UNCALIBRATED]
    cell = {(r["corruption"], r["method"]): r for r in rows}
    versus = {
        m: replicate_interval(
            [cell[c, m]["ece"] - cell[c, UNCALIBRATED]["ece"] for c in corruptions]
        )
        for m in methods
    }
    ts, ts_v = means["temperature"], versus["temperature"]
    better = [m for m in methods if versus[m]["verdict"] == BETTER]
    others = [m for m in methods if versus[m]["verdict"] != BETTER]
    found = takeaway(
        f"Under distribution shift the network is over-confident: its mean ECE over "
        f"{len(corruptions)} corruptions is {100 * base['ece']:.2f}% at "
        f"{100 * base['accuracy']:.2f}% accuracy. Temperature scaling on a validation half "
        f"brings it to {100 * ts['ece']:.2f}% ({100 * ts_v['diff']:+.2f} ± "
        f"{200 * ts_v['se']:.2f} pp, paired over corruptions: {ts_v['verdict']}). Better "
        f"than uncalibrated beyond 2 SE: {', '.join(better) or 'none'}"
        + (
            "; " + ", ".join(f"{m} ({versus[m]['verdict']})" for m in others) + "."
            if others
            else "."
        )
    )
    return means, found


def run(ctx: DemoContext) -> list[dict[str, Any]]:
    """Run the section; return its report blocks."""
    from privcal.report import table, text
    from privcal.report.formatting import write_csv

    data = ctx.data
    corruptions = data.corruptions[::3] if ctx.quick else data.corruptions
    methods, skipped = applicable_methods(data.clean[0].shape[1])
    rng = ctx.rng("calibration")
    rows, warned, splits = _fit_all(ctx, rng, corruptions, methods)

    csv_path = write_csv(ctx.out_dir / "calibration.csv", rows)

    means, found = _findings(rows, corruptions, methods)
    _print_means(ctx, means, len(corruptions))
    figures = _figures(ctx, rng, rows, splits)

    base = means[UNCALIBRATED]
    cell = {(r["corruption"], r["method"]): r for r in rows}
    mean_rows = [
        {"method": m, **v, "delta": None if m == UNCALIBRATED else v["ece"] - base["ece"]}
        for m, v in means.items()
    ]
    per_rows = [
        {
            "corruption": c,
            "accuracy": cell[c, UNCALIBRATED]["accuracy"],
            **{m: cell[c, m]["ece"] for m in means},
        }
        for c in corruptions
    ]
    blocks = [
        found,
        text(
            f"A small MLP trained on clean scikit-learn digits (train accuracy "
            f"{100 * data.train_accuracy:.1f}%), evaluated on {len(corruptions)} corruptions at "
            f"severity {SEVERITY}. Each shifted set is split into a validation half (fit) and a "
            f"test half (measure); every number is measured on the test halves."
        ),
        table(
            "Mean over corruptions",
            [("method", "Method"), *_COLUMNS],
            mean_rows,
        ),
        table(
            "ECE per corruption",
            [("corruption", "Corruption"), _COLUMNS[0], *((m, m, "percent") for m in means)],
            per_rows,
            note="Accuracy is the uncalibrated model's; the other columns are ECE (%).",
        ),
    ]
    if skipped:
        blocks.append(
            text("Skipped: " + "; ".join(f"`{k}` ({v})" for k, v in skipped.items()) + ".")
        )
    if any(warned.values()):
        counts = ", ".join(f"`{k}` {n}" for k, n in warned.items() if n)
        blocks.append(text(f"Warnings while fitting: {counts}."))
    blocks.append(text(f"Tidy results: `{csv_path.name}` (one row per corruption and method)."))
    blocks += figures
    return blocks

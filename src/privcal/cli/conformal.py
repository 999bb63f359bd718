"""``privcal conformal``: prediction sets (private or not) from calibration and test scores,
summarised (:func:`conformal_summary`) and, with ``--out``, written; and ``privcal bench
angelopoulos2022`` (:func:`privcal.experiments.angelopoulos2022.run`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import click
import numpy as np
import typer
from rich.table import Table

from privcal.cli._common import (
    ForceOption,
    OutDirO,
    check_output_path,
    collect_warnings,
    console,
    fail,
    load_unlabelled,
    open_sources,
    refuse_overwrite,
    run_protocol,
    user_errors,
    warn,
)

__all__ = ["bench_angelopoulos2022", "conformal", "conformal_summary", "register"]

#: ``--score`` values.
SCORES = ("lac", "aps", "aps-randomized")


def _estimator(
    score: str,
    alpha: float,
    epsilon: float | None,
    n_bins: str,
    seed: int | None,
    method: str | None,
    localize: str = "auto",
    ledger: Path | None = None,
) -> Any:
    """Split conformal, or private conformal (Angelopoulos et al. 2022) with ``--epsilon``."""
    from privcal.conformal import PrivateConformal, SplitConformal
    from privcal.privacy import SeededNoise

    if not 0.0 < alpha < 1.0:
        fail(f"The '--alpha' parameter of privcal conformal must be in (0, 1). Got {alpha:g}.")
    if epsilon is None:
        if (n_bins, localize) != ("auto", "auto") or (method, ledger) != (None, None):
            fail(
                "--n-bins, --method, --localize and --ledger apply to private conformal: "
                "add --epsilon, or drop them."
            )
        if seed is not None and score != "aps-randomized":
            fail(
                "--seed seeds private conformal's noise (add --epsilon) or randomised APS's "
                "draws (--score aps-randomized); drop it."
            )
        return SplitConformal(score=score, alpha=alpha, seed=0 if seed is None else seed)
    if not (epsilon > 0 and np.isfinite(epsilon)):
        fail(f"The '--epsilon' parameter of privcal conformal must be > 0. Got {epsilon:g}.")
    b: Any = "auto"
    if n_bins != "auto":
        if not n_bins.isdigit() or int(n_bins) < 1:
            fail(
                f"The '--n-bins' parameter of privcal conformal must be 'auto' or m >= 1. "
                f"Got {n_bins!r}."
            )
        b = int(n_bins)
    noise = None if seed is None else SeededNoise(seed)
    extra: dict[str, Any] = {}
    if method is not None:
        from privcal.conformal.private import METHODS as methods

        if method not in methods:
            fail(
                f"The '--method' parameter of privcal conformal must be one of "
                f"{', '.join(methods)}. Got {method!r} instead."
            )
        extra["method"] = method
    if localize != "auto":
        if localize.lower() == "none":
            extra["localize"] = None
        else:
            try:
                f = float(localize)
            except ValueError:
                f = math.nan
            if not 0.0 < f <= 0.5:
                fail(
                    "The '--localize' parameter of privcal conformal must be 'auto', 'none' or a "
                    f"fraction in (0, 0.5]. Got {localize!r} instead."
                )
            if extra.get("method", "rank") != "rank":
                fail(
                    "--localize applies to --method rank only (the default); drop it or use "
                    "--localize none."
                )
            extra["localize"] = f
    return PrivateConformal(
        score=score, alpha=alpha, epsilon=epsilon, n_bins=b, noise=noise, ledger=ledger, **extra
    )


def conformal_summary(
    est: Any, sets: np.ndarray, labels: np.ndarray | None, groups: np.ndarray | None = None
) -> dict[str, Any]:
    """What ``privcal conformal`` reports: threshold, set sizes, coverage, privacy report, and
    with ``groups`` each group's threshold, rows, coverage and set size."""
    sizes = sets.sum(1)
    covered = None if labels is None else sets[np.arange(sets.shape[0]), labels]
    summary: dict[str, Any] = {
        "n_cal": int(getattr(est, "n_", 0) or 0),
        "n_test": int(sets.shape[0]),
        "threshold": float(est.threshold_),
        "mean_size": float(sizes.mean()),
        "full_sets": float(sets.all(1).mean()),
    }
    if covered is not None:
        summary["coverage"] = float(covered.mean())
    rep = getattr(est, "privacy_report_", None)
    if rep is not None:
        summary.update(
            epsilon=rep.epsilon,
            relation=f"{rep.relation} one calibration {rep.unit}; n public",
            public=list(rep.public),
            status=rep.status,
            mechanism=", ".join(sorted({r.mechanism for r in rep.releases})),
            level=est.level_,
            bins=est.n_bins_,
            gamma=est.gamma_,
        )
        if getattr(est, "localize_n_", 0):
            summary.update(localize_n=est.localize_n_, window=list(est.window_))
        if getattr(est, "n_sources_", 0):
            summary["relation"] = f"{rep.relation} one example of one source; n private"
            summary["margin"] = float(est.margin_)
    if getattr(est, "thresholds_", None) and rep is not None:
        summary["relation"] = (
            f"{rep.relation} one calibration example within its group; group sizes public"
        )
    if groups is not None and getattr(est, "thresholds_", None):
        summary["groups"] = []
        for g, t in est.thresholds_.items():
            rows = groups == g
            any_rows = bool(rows.any())
            summary["groups"].append(
                {
                    "group": g,
                    "n_cal": getattr(est, "group_sizes_", {}).get(g),  # private over sources
                    "threshold": float(t),
                    "n_test": int(rows.sum()),
                    "coverage": float(covered[rows].mean())
                    if covered is not None and any_rows
                    else None,
                    "mean_size": float(sizes[rows].mean()) if any_rows else 0.0,
                }
            )
    return summary


_SEED_HELP = (
    "Seeded noise (simulation only; default secure noise); without --epsilon, the seed of "
    "--score aps-randomized's draws (default 0)."
)


def _score(t: float) -> str:
    """A score threshold to 6 digits, never rounded up to 1: APS thresholds of an over-confident
    network sit within 1e-9 of 1 and mean very different sets than 1 itself (the full set)."""
    return f"1 - {1.0 - t:.3g}" if f"{t:.6g}" == "1" and t < 1.0 else f"{t:.6g}"


def _summary_table(summary: dict[str, Any], alpha: float) -> Table:
    table = Table(show_header=False)
    table.add_column(style="bold")
    table.add_column()
    if "groups" in summary:
        table.add_row("threshold", "one per group (below)")
    else:
        table.add_row("threshold", _score(summary["threshold"]))
    table.add_row("mean set size", f"{summary['mean_size']:.3f}")
    table.add_row("full sets", f"{100 * summary['full_sets']:.1f}%")
    if "coverage" in summary:
        table.add_row("coverage", f"{summary['coverage']:.4f} (target >= {1 - alpha:g})")
    else:
        table.add_row("coverage", "- (the test file has no labels)")
    if "epsilon" in summary:
        table.add_row("privacy", f"epsilon={summary['epsilon']:g}, {summary['mechanism']}")
        table.add_row("relation", summary["relation"])
        table.add_row("status", summary["status"])
        if "window" in summary:
            lo, hi = summary["window"]
            table.add_row(
                "localised",
                f"{summary['localize_n']} points found the window [{_score(lo)}, {_score(hi)}] "
                f"({summary['bins']} bins); the rest released the threshold",
            )
        tuning = f"bins={summary['bins']}"
        if np.isfinite(summary["level"]):
            tuning = f"level={summary['level']:.6g}, " + tuning
        if "margin" in summary:
            tuning += f", margin t={summary['margin']:.4g} (Theorem S)"
        if summary["gamma"] is not None and np.isfinite(summary["gamma"]):
            tuning += f", gamma={summary['gamma']:.4g}"
        if "window" in summary:  # part 2's grid and level come from the window (released)
            table.add_row("threshold part", tuning + " (from the released window)")
        else:
            table.add_row("public", tuning)
    return table


def conformal(
    test: Annotated[
        Path, typer.Option(help="Test scores; labels optional (with labels: coverage).")
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            help="Write the sets here; the suffix picks the format: .csv, .parquet, .json, .npz."
        ),
    ] = None,
    alpha: Annotated[float, typer.Option(help="Miscoverage level in (0, 1).")] = 0.1,
    epsilon: Annotated[
        float | None,
        typer.Option(
            help="Privacy budget: private conformal (seed 002, Angelopoulos et al. 2022; default "
            "mechanism: rank, see --method); omit for split conformal."
        ),
    ] = None,
    score: Annotated[
        str, typer.Option(click_type=click.Choice(SCORES), help="Conformity score.")
    ] = "lac",
    n_bins: Annotated[
        str, typer.Option(help="Number of bins m, or 'auto' (private only).")
    ] = "auto",
    bins: Annotated[
        str | None, typer.Option(hidden=True, help="Deprecated name of --n-bins.")
    ] = None,
    seed: Annotated[int | None, typer.Option(help=_SEED_HELP)] = None,
    method: Annotated[
        str | None,
        typer.Option(
            help="Private mechanism (default: the library's): rank, bounded-range, or "
            "angelopoulos2022 (the paper's Algorithms 3-5 exactly)."
        ),
    ] = None,
    localize: Annotated[
        str,
        typer.Option(
            help="rank only: fraction of the calibration set that localises the threshold "
            "(Theorem L), 'none' for one stage, or 'auto' (0.25 where it pays: n >= 4000, "
            "moderate epsilon)."
        ),
    ] = "auto",
    ledger: Annotated[
        Path | None,
        typer.Option(
            "--ledger",
            help="A pipeline ledger ('privcal ledger init') charged with the private threshold "
            "before it is released; refused when it would pass the ledger's budget.",
        ),
    ] = None,
    force: ForceOption = False,
    cal: Annotated[
        Path | None,
        typer.Option(help="Labelled calibration scores (any privcal score file)."),
    ] = None,
    sources: Annotated[
        list[Path] | None,
        typer.Option(
            "--sources",
            help="Calibrate across private data sources instead of --cal: source ledgers "
            "('privcal source init'; repeat), each charged --epsilon (Theorem S).",
        ),
    ] = None,
    aggregation: Annotated[
        str,
        typer.Option(
            click_type=click.Choice(("local", "distributed")),
            help="With --sources: each source's own noise (local), or one release's noise "
            "through a secure sum (distributed).",
        ),
    ] = "local",
    threshold: Annotated[
        int | None,
        typer.Option(help="With --aggregation distributed: sources whose shares must survive."),
    ] = None,
    groups: Annotated[
        str | None,
        typer.Option(
            help="One threshold per group (Mondrian sets): 'predicted' (the predicted class) or "
            "the name of an array (.npz) or column (.csv, .parquet) in --cal and --test.",
        ),
    ] = None,
) -> None:
    """Fit conformal prediction sets on CAL (or --sources); report (--out: write) TEST's sets.

    --epsilon: epsilon-DP for substituting one calibration example, n public (with --sources:
    add/remove one example of a source, n private, Theorem S; with --groups: one threshold per
    group, parallel composition). --out is not written over when it holds private sets (--force).
    """
    from privcal.data.io import OUTPUT_SUFFIXES
    from privcal.report import summary_path

    with user_errors():
        n_bins = _renamed_bins(bins, n_bins)
        if out is not None:
            check_output_path(out, "--out", "privcal conformal", OUTPUT_SUFFIXES)
            refuse_overwrite((out, summary_path(out)), "--out", "privcal conformal", force)
        _check_parties(cal, sources, epsilon, aggregation, threshold, groups)
        est = _estimator(score, alpha, epsilon, n_bins, seed, method, localize, ledger)
        if sources:
            est.set_params(aggregation=aggregation, threshold=threshold)
        test_logits, test_labels = _load(test, "--test")
        n_cal, test_groups = _fit(est, cal, sources, groups, test, test_logits, seed)
        sets = est.predict_set(test_logits, groups=test_groups)
        summary = conformal_summary(est, sets, test_labels, test_groups)
        if out is not None:
            calibration = cal.name if cal is not None else ", ".join(p.name for p in sources or [])
            _write_sets(out, summary, est, sets, test_labels, alpha, score, calibration, test)
    kind = "Private conformal" if epsilon is not None else "Split conformal"
    title = f"{kind} ({score}, alpha={alpha:g}): {n_cal} calibration, {sets.shape[0]} test examples"
    console.print(title, highlight=False)
    console.print(_summary_table(summary, alpha))
    if "groups" in summary:
        console.print(_groups_table(summary["groups"], alpha))
    if out is not None:
        console.print(f"Sets -> {out} (summary for 'privcal report': {out.stem}.summary.json)")


def _renamed_bins(bins: str | None, n_bins: str) -> str:
    """``--n-bins``, or its deprecated name ``--bins`` (with a warning)."""
    if bins is None:
        return n_bins
    warn("--bins is deprecated and will be removed in the next release; use --n-bins.")
    if n_bins != "auto":
        fail("--bins is the deprecated name of --n-bins: pass only --n-bins.")
    return bins


def _write_sets(
    out: Path,
    summary: dict[str, Any],
    est: Any,
    sets: np.ndarray,
    labels: np.ndarray | None,
    alpha: float,
    score: str,
    calibration: str,
    test: Path,
) -> None:
    """``--out``: the sets in the format its suffix names (columns index, size, [label,
    covered,] set: N x C booleans), and their summary beside them."""
    from privcal.data.io import write_columns
    from privcal.report import conformal_summary_data, summary_path, write_summary

    rows = np.arange(sets.shape[0])
    columns: dict[str, np.ndarray] = {"index": rows, "size": sets.sum(1)}
    if labels is not None:
        columns.update(label=labels, covered=sets[rows, labels])
    write_columns(out, {**columns, "set": sets})
    data = conformal_summary_data(
        summary, est, sets, labels, alpha=alpha, score=score, sets_file=out.name,
        cal_file=calibration, test_file=test.name,
    )  # fmt: skip
    write_summary(summary_path(out), "conformal", data)


def _fit(
    est: Any,
    cal: Path | None,
    sources: list[Path] | None,
    groups: str | None,
    test: Path,
    test_logits: np.ndarray,
    seed: int | None,
) -> tuple[str, np.ndarray | None]:
    """Fit ``est`` on ``--cal`` (per group with ``--groups``) or on ``--sources``; returns the
    calibration size as the title shows it and the test rows' groups."""
    if sources:
        srcs = open_sources(sources, seed)
        if test_logits.shape[1] != srcs[0].n_classes:
            fail(
                f"--test has {test_logits.shape[1]} classes but the --sources have "
                f"{srcs[0].n_classes}; both must come from the same model."
            )
        with collect_warnings():
            est.fit(sources=srcs, groups=groups)
        return "the sources'", None if groups is None else test_logits.argmax(1)
    assert cal is not None
    cal_logits, cal_labels = _load(cal, "--cal")
    if cal_labels is None:
        fail(
            f"--cal {str(cal)!r} has no labels; calibration needs labelled scores (e.g. an .npz "
            "with arrays 'logits' and 'labels')."
        )
    if test_logits.shape[1] != cal_logits.shape[1]:
        fail(
            f"--test has {test_logits.shape[1]} classes but --cal has {cal_logits.shape[1]}; "
            "both must come from the same model."
        )
    fit_groups = test_groups = None
    if groups is not None:
        fit_groups = _load_groups(cal, groups, cal_logits, "--cal")
        test_groups = _load_groups(test, groups, test_logits, "--test")
    with collect_warnings():
        est.fit(cal_logits, cal_labels, groups=fit_groups)
    return str(cal_logits.shape[0]), test_groups


def _check_parties(
    cal: Path | None,
    sources: list[Path] | None,
    epsilon: float | None,
    aggregation: str,
    threshold: int | None,
    groups: str | None,
) -> None:
    """Refuse option combinations that say nothing or two things (before any file is read)."""
    if (cal is None) == (not sources):
        fail("privcal conformal needs either --cal (one calibration file) or --sources.")
    if sources and epsilon is None:
        fail("--sources answer only private queries: add --epsilon (each source's budget).")
    if sources and groups not in (None, "predicted"):
        fail("--groups with --sources takes 'predicted' only (a source holds no group column).")
    if not sources and (aggregation != "local" or threshold is not None):
        fail("--aggregation and --threshold say how --sources add their noise; drop them.")


def _load_groups(path: Path, column: str, logits: np.ndarray, option: str) -> np.ndarray:
    """``--groups``: the predicted class, or the array / column ``column`` of ``path``."""
    if column == "predicted":
        return np.asarray(logits.argmax(1))
    suffix = path.suffix.lower()
    try:
        if suffix == ".npz":
            with np.load(path, allow_pickle=False) as npz:
                if column not in npz.files:
                    raise KeyError(", ".join(npz.files))
                values = np.asarray(npz[column])
        elif suffix in (".csv", ".parquet"):
            import pyarrow.csv
            import pyarrow.parquet

            table = (
                pyarrow.csv.read_csv(path) if suffix == ".csv" else pyarrow.parquet.read_table(path)
            )
            if column not in table.column_names:
                raise KeyError(", ".join(table.column_names))
            values = np.asarray(table.column(column).to_numpy())
        else:
            fail(f"--groups {column!r}: {option} {str(path)!r} is not an .npz, .csv or .parquet "
                 "file; use --groups predicted, or store the groups with the scores.")  # fmt: skip
    except KeyError as err:
        fail(f"--groups {column!r}: {option} {str(path)!r} has no such array or column (it has: "
             f"{err.args[0]}).")  # fmt: skip
    if values.shape != (logits.shape[0],):
        fail(f"--groups {column!r}: {option} holds {values.shape} group labels for "
             f"{logits.shape[0]} rows; give one label per row.")  # fmt: skip
    return values


def _groups_table(rows: list[dict[str, Any]], alpha: float) -> Table:
    """Coverage per group (``privcal conformal --groups``)."""
    table = Table(title=f"per group (target coverage >= {1 - alpha:g})")
    for name in ("group", "calibration rows", "threshold", "test rows", "coverage", "size"):
        table.add_column(name, justify="left" if name == "group" else "right")
    for r in rows:
        cover = "-" if r["coverage"] is None else f"{r['coverage']:.4f}"
        n_cal = "-" if r["n_cal"] is None else str(r["n_cal"])
        table.add_row(str(r["group"]), n_cal, f"{r['threshold']:.6g}",
                      str(r["n_test"]), cover, f"{r['mean_size']:.3f}")  # fmt: skip
    return table


def _load(path: Path, option: str) -> tuple[np.ndarray, np.ndarray | None]:
    """:func:`load_unlabelled`, with the option (``--cal`` / ``--test``) in front of an error,
    so that a problem is placed in the right one of the two files."""
    try:
        return load_unlabelled(path)
    except (ValueError, FileNotFoundError) as err:
        text = str(err)
        where = repr(str(path))
        if text.startswith(where):
            text = f"{option} {text}"
        elif str(path) in text:
            text = f"{option}: {text}"
        else:
            text = f"{option} {where}: {text}"
        raise ValueError(text) from None


def bench_angelopoulos2022(
    data: Annotated[
        list[Path] | None,
        typer.Option(
            "--data",
            help="Scores file (read_scores; repeat for several). Default: the shared CIFAR "
            "files and digits_shift pooled at severity 5.",
        ),
    ] = None,
    splits: Annotated[int, typer.Option("--splits", help="Random calibration/test splits.")] = 1000,
    out: OutDirO = Path("angelopoulos2022-out"),
    alpha: Annotated[
        list[float] | None, typer.Option("--alpha", help="Miscoverage level (repeatable).")
    ] = None,
    n_cal: Annotated[int, typer.Option("--n-cal", help="Calibration points per split.")] = 5000,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    quick: Annotated[
        bool, typer.Option("--quick", help="Smoke run: <= 50 splits, 3 bin counts.")
    ] = False,
    m_grid: Annotated[
        str,
        typer.Option(
            "--m-grid",
            help="How m* is chosen: paper-text (App. C: 1e2-1e6, expected threshold) or "
            "authors-code (1e4-1e6, one noisy draw; what made the paper's figures).",
        ),
    ] = "paper-text",
) -> None:
    """Angelopoulos et al. (2022)'s protocol: coverage and set sizes, private vs split conformal."""
    from privcal.experiments import angelopoulos2022

    config = angelopoulos2022.Angelopoulos2022Config(
        data or None,
        trials=splits,
        alphas=tuple(alpha) if alpha else (0.1,),
        n_cal=n_cal,
        m_grid=m_grid,
    )
    run, cfg = angelopoulos2022.run, config.quick() if quick else config
    res = run_protocol(run, cfg, out, seed=seed, transient=True)[0]
    console.print(res.table_markdown(), markup=False, highlight=False)
    console.print(f"{res.n_rows} rows in {res.seconds:.1f} s -> {out}", markup=False)


def register(app: typer.Typer, bench_app: typer.Typer | None = None) -> None:
    """Add ``conformal`` to ``app`` and ``angelopoulos2022`` to ``bench_app`` (if given)."""
    app.command("conformal")(conformal)
    if bench_app is not None:
        bench_app.command(
            "angelopoulos2022",
            short_help="Private conformal prediction (Angelopoulos et al. 2022): coverage, sizes.",
        )(bench_angelopoulos2022)

"""``privcal conformal``: prediction sets (private or not) from calibration and test scores.

* ``privcal conformal --alpha 0.1 [--epsilon 1] --cal cal.npz --test test.npz [--out sets.csv]``
  prints a summary (threshold, mean set size, coverage when the test file has labels, and the
  privacy report with ``--epsilon``) and, with ``--out``, writes the sets in the format its suffix
  names (.csv, .parquet, .json, .npz).
* ``privcal bench angelopoulos2022 [--data FILE ...] [--splits 1000] [--out DIR] [--quick]``
  (:func:`privcal.experiments.angelopoulos2022.run`).
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
    check_output_path,
    collect_warnings,
    console,
    fail,
    force_option,
    load_unlabelled,
    progress_callback,
    refuse_overwrite,
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
        if (
            n_bins != "auto"
            or seed is not None
            or method is not None
            or localize != "auto"
            or ledger is not None
        ):
            fail(
                "--n-bins, --method, --localize, --seed and --ledger apply to private conformal: "
                "add --epsilon, or drop them."
            )
        return SplitConformal(score=score, alpha=alpha)
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
        methods = _private_methods()
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


def _private_methods() -> tuple[str, ...]:
    """The mechanisms :class:`~privcal.conformal.PrivateConformal` offers (``--method``)."""
    from privcal.conformal import private

    return tuple(getattr(private, "METHODS", ()))


def conformal_summary(est: Any, sets: np.ndarray, labels: np.ndarray | None) -> dict[str, Any]:
    """What ``privcal conformal`` reports: threshold, set sizes, coverage, privacy report."""
    summary: dict[str, Any] = {
        "n_cal": int(getattr(est, "n_", 0) or 0),
        "n_test": int(sets.shape[0]),
        "threshold": float(est.threshold_),
        "mean_size": float(sets.sum(1).mean()),
        "full_sets": float(sets.all(1).mean()),
    }
    if labels is not None:
        summary["coverage"] = float(sets[np.arange(sets.shape[0]), labels].mean())
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
    return summary


def _summary_table(summary: dict[str, Any], alpha: float) -> Table:
    table = Table(show_header=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("threshold", f"{summary['threshold']:.6g}")
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
                f"{summary['localize_n']} points found the window [{lo:.6g}, {hi:.6g}] "
                f"({summary['bins']} bins); the rest released the threshold",
            )
        tuning = f"level={summary['level']:.6g}, bins={summary['bins']}"
        if summary["gamma"] is not None and np.isfinite(summary["gamma"]):
            tuning += f", gamma={summary['gamma']:.4g}"
        if "window" in summary:  # part 2's grid and level come from the window (released)
            table.add_row("threshold part", tuning + " (from the released window)")
        else:
            table.add_row("public", tuning)
    return table


def _set_columns(sets: np.ndarray, labels: np.ndarray | None) -> dict[str, np.ndarray]:
    """Columns of ``--out``: index, size, [label, covered,] set (N x C booleans)."""
    cols: dict[str, np.ndarray] = {"index": np.arange(sets.shape[0]), "size": sets.sum(1)}
    if labels is not None:
        cols["label"] = labels
        cols["covered"] = sets[np.arange(sets.shape[0]), labels]
    cols["set"] = sets
    return cols


def conformal(
    cal: Annotated[
        Path, typer.Option(help="Labelled calibration scores (any privcal score file).")
    ],
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
    seed: Annotated[
        int | None, typer.Option(help="Seeded noise (simulation only; default secure noise).")
    ] = None,
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
    force: Annotated[bool, force_option()] = False,
) -> None:
    """Fit conformal prediction sets on CAL; report (and with --out write) the sets of TEST.

    With --epsilon the threshold is epsilon-DP for substituting one calibration example, with the
    number of calibration examples n public (level, bins and gamma are computed from n); the
    summary states the relation, the public quantities and the status ("not private: seeded
    noise" with --seed). --out and its summary are not written over when they hold a private
    threshold's sets, unless --force.
    """
    from privcal.data.io import OUTPUT_SUFFIXES, write_columns
    from privcal.report import conformal_summary_data, summary_path, write_summary

    with user_errors():
        if bins is not None:
            warn("--bins is deprecated and will be removed in the next release; use --n-bins.")
            if n_bins != "auto":
                fail("--bins is the deprecated name of --n-bins: pass only --n-bins.")
            n_bins = bins
        if out is not None:
            check_output_path(out, "--out", "privcal conformal", OUTPUT_SUFFIXES)
            refuse_overwrite((out, summary_path(out)), "--out", "privcal conformal", force)
        est = _estimator(score, alpha, epsilon, n_bins, seed, method, localize, ledger)
        cal_logits, cal_labels = _load(cal, "--cal")
        if cal_labels is None:
            fail(
                f"--cal {str(cal)!r} has no labels; calibration needs labelled scores (e.g. an "
                ".npz with arrays 'logits' and 'labels')."
            )
        test_logits, test_labels = _load(test, "--test")
        if test_logits.shape[1] != cal_logits.shape[1]:
            fail(
                f"--test has {test_logits.shape[1]} classes but --cal has "
                f"{cal_logits.shape[1]}; both must come from the same model."
            )
        with collect_warnings():
            est.fit(cal_logits, cal_labels)
        sets = est.predict_set(test_logits)
        summary = conformal_summary(est, sets, test_labels)
        if out is not None:
            write_columns(out, _set_columns(sets, test_labels))
            data = conformal_summary_data(
                summary,
                est,
                sets,
                test_labels,
                alpha=alpha,
                score=score,
                sets_file=out.name,
                cal_file=cal.name,
                test_file=test.name,
            )
            write_summary(summary_path(out), "conformal", data)
    kind = "Private conformal" if epsilon is not None else "Split conformal"
    title = (
        f"{kind} ({score}, alpha={alpha:g}): {cal_logits.shape[0]} calibration, "
        f"{sets.shape[0]} test examples"
    )
    console.print(title, highlight=False)
    console.print(_summary_table(summary, alpha))
    if out is not None:
        console.print(f"Sets -> {out} (summary for 'privcal report': {out.stem}.summary.json)")


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
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder.")] = Path(
        "angelopoulos2022-out"
    ),
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
    with user_errors():
        with progress_callback(transient=True) as progress:
            res = angelopoulos2022.run(
                config.quick() if quick else config, seed=seed, progress=progress
            )
        res.write(out)
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

"""``privcal bench scoreboard``: every method with its defaults against doing nothing.

The numbers come from :func:`privcal.experiments.scoreboard.run` (the functions the tests call);
the command renders them with :func:`~privcal.experiments.scoreboard.render` into a Markdown
file (``bench/SCOREBOARD.md`` by default).
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from privcal.cli._common import (
    check_output_path,
    console,
    fail,
    progress_callback,
    user_errors,
)

__all__ = ["register", "scoreboard"]


def scoreboard(
    out: Annotated[Path, typer.Option("--out", "-o", help="Markdown file to write (.md).")] = Path(
        "bench/SCOREBOARD.md"
    ),
    quick: Annotated[
        bool,
        typer.Option(
            "--quick", help="CI run (< 2 min): 4 data sets, epsilon in {1, inf}, fewer splits."
        ),
    ] = False,
    no_torch: Annotated[
        bool,
        typer.Option("--no-torch", help="Skip the DP training claims (seeds 001 and 004)."),
    ] = False,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the splits and the noise.")] = 0,
    jobs: Annotated[int, typer.Option("--jobs", help="Worker processes (one data set each).")] = 2,
) -> None:
    """Score every method (defaults only) beside the uncalibrated model and its non-private twin.

    Writes the Markdown table and, beside it, the same rows as JSON (for 'privcal report').

    Calibration (ECE, classwise ECE, accuracy), federated calibration and conformal prediction
    (coverage, set size) on every shared data set and digits_shift, at epsilon 0.5, 1, 4 and inf,
    with a mark wherever a method is worse than doing nothing, and a row per seed paper's
    headline claim. The private numbers use seeded noise: a simulation, not a private release.
    """
    from privcal.experiments import scoreboard as sb

    with user_errors():
        if out.suffix.lower() != ".md":
            fail(
                f"The '--out' parameter of privcal bench scoreboard must be a .md path. Got "
                f"{str(out)!r} instead."
            )
        for name, value, low in (("--seed", seed, 0), ("--jobs", jobs, 1)):
            if value < low:
                fail(f"The '{name}' parameter must be >= {low}. Got {value} instead.")
        # before the run (minutes): the Markdown file and the JSON beside it must be writable
        check_output_path(out, "--out", "privcal bench scoreboard", (".md",))
        check_output_path(out.with_suffix(".json"), "--out", "privcal bench scoreboard", (".json",))
        config = sb.QUICK if quick else sb.FULL
        config = replace(config, seed=seed, torch=config.torch and not no_torch)
        command = "privcal bench scoreboard" + (" --quick" if quick else "")
        start = time.perf_counter()
        with progress_callback(transient=True) as progress:
            progress("scoreboard", 0, sb.steps(config))
            board = sb.run(config, jobs=jobs, progress=progress)
        board.write(out, command)
    worse = board.worse()
    console.print(
        f"Scoreboard ({config.name}) in {time.perf_counter() - start:.0f} s -> {out}; "
        f"{len(worse)} row(s) worse than doing nothing.",
        highlight=False,
    )
    for claim in board.claims:
        console.print(f"  seed {claim.seed}: {claim.verdict}", highlight=False)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Add ``scoreboard`` to ``bench_app``."""
    bench_app.command(
        "scoreboard", short_help="Every method's defaults vs doing nothing (bench/SCOREBOARD.md)."
    )(scoreboard)

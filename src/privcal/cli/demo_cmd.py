"""``privcal demo``: run every demo section and write its reports (Markdown and HTML)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from privcal.cli._common import OutDirO, console, fail, user_errors

__all__ = ["demo", "register"]


def demo(
    out: OutDirO = Path("privcal-demo"),
    seed: Annotated[int, typer.Option(help="Seed of data, splits and noise.")] = 0,
    quick: Annotated[bool, typer.Option(help="Smaller settings for a fast smoke run.")] = False,
    section: Annotated[
        list[str] | None,
        typer.Option(
            "--section",
            help="Run only this section (repeat the option): calibration, private, conformal, "
            "training, federated. Default: all.",
        ),
    ] = None,
) -> None:
    """Run the end-to-end demo (calibration, privacy, conformal, ...); write report.md and
    report.html (one self-contained page, the same as 'privcal report OUT')."""
    from privcal.experiments.demo import SECTIONS, DemoError, run_demo

    with user_errors():
        for name in section or ():
            if name not in SECTIONS:
                fail(
                    f"The '--section' parameter of privcal demo must be one of "
                    f"{', '.join(SECTIONS)}. Got {name!r} instead."
                )
        try:
            sections = tuple(section) if section else None
            report = run_demo(out, seed=seed, console=console, quick=quick, sections=sections)
        except DemoError as err:
            fail(str(err), code=1)
    html = report.with_name("report.html")
    console.print(f"\n[bold green]Report:[/bold green] {report} and {html}")


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Add ``demo`` to the ``privcal`` app."""
    del bench_app
    app.command("demo")(demo)

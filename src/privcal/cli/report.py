"""``privcal report PATH [--out FILE]``: one self-contained HTML page from privcal's outputs.

The page is built by :mod:`privcal.report` from the machine-readable files the
other verbs write (``privcal demo``'s ``results.json``, a ``privcal federate server`` folder, the
``*.summary.json`` of ``fit`` / ``conformal``, ``evaluate --out``, ``bench scoreboard``'s JSON).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from privcal.cli._common import check_output_path, console, fail, user_errors

__all__ = ["register", "report"]


def report(
    path: Annotated[
        Path,
        typer.Argument(
            help="An output folder (or file) of privcal demo, federate server, fit, evaluate "
            "--out, conformal --out or bench scoreboard.",
            show_default=False,
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            help="The .html file to write (default: PATH/report.html for a folder, "
            "PATH's name with .html for a file).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Write one self-contained HTML report (figures inline, no network) from PATH.

    It shows what the run found first, then reliability diagrams and confidence histograms
    before and after calibration, metric tables with their spread over splits, conformal
    coverage and set sizes, and the privacy report in words (unit, relation, what is public,
    who is trusted, budget spent per source and the ledgers' state). ECE is in percent
    throughout.
    """
    from privcal.report import build, find_outputs, render_html

    with user_errors():
        if not path.exists():
            fail(
                f"No file or folder at {str(path)!r}; pass the output folder (or file) of a "
                "privcal command, e.g. 'privcal report privcal-demo'."
            )
        if out is None:
            out = path / "report.html" if path.is_dir() else path.with_name(f"{path.stem}.html")
        check_output_path(out, "--out", "privcal report", (".html",))
        outputs = find_outputs(path)
        out.write_text(render_html(build(outputs)), encoding="utf-8")
    kinds = ", ".join(sorted({o.kind for o in outputs}))
    console.print(f"Report ({kinds}) -> {out}", highlight=False)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Add ``report`` to the ``privcal`` app."""
    del bench_app
    app.command("report")(report)

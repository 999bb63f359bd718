"""``privcal audit``: run a deployed-path privacy audit from the command line.

Each audit (:mod:`privcal.audits`) calls one public entry point as a user does, with its default
arguments and secure noise, many times on two worst-case neighbouring inputs of the relation its
privacy report declares, and prints the claimed epsilon, the lower confidence bound on the
epsilon the runs show, and that bound's confidence. The exit status is 0 when the claim stands,
1 when the audit found a violation.
"""

from __future__ import annotations

import time
from typing import Annotated

import typer
from rich.table import Table

from privcal.cli._common import console, err_console, fail, user_errors

__all__ = ["register"]

#: Exit status of an audit that found a violation of the claim.
EXIT_VIOLATION = 1


def _list() -> None:
    from privcal.audits import available_audits

    table = Table(title="privcal audits (privcal audit NAME)", expand=False)
    for col in ("name", "entry point audited", "default runs", "extra"):
        table.add_column(col, overflow="fold")
    for name, audit in available_audits().items():
        table.add_row(name, audit.summary, str(audit.runs), audit.extra or "-")
    console.print(table)


def audit(
    name: Annotated[
        str | None, typer.Argument(help="The audit to run ('privcal audit --list' names them).")
    ] = None,
    runs: Annotated[
        int | None,
        typer.Option("--runs", help="Runs per neighbouring input (default: the audit's own)."),
    ] = None,
    alpha: Annotated[
        float,
        typer.Option("--alpha", help="Error probability: a correct mechanism fails w.p. <= alpha."),
    ] = 1e-6,
    list_: Annotated[bool, typer.Option("--list", help="List the audits and exit.")] = False,
) -> None:
    """Audit a private entry point as a user calls it: claimed epsilon vs a lower bound."""
    if list_:
        _list()
        return
    if name is None:
        fail("Missing the audit NAME: run 'privcal audit --list' to see them.")
    with user_errors():
        from privcal.audits import get_audit

        spec = get_audit(name)
        start = time.perf_counter()
        with err_console.status(f"auditing {name} ..."):
            report = spec.run(runs=runs, alpha=alpha)
        seconds = time.perf_counter() - start
    verdict = "[green]PASSED[/green]" if report.passed else "[bold red]FAILED[/bold red]"
    table = Table(title=f"privacy audit {name}: {verdict}", show_header=False, expand=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    table.add_row("entry point", report.entry_point)
    table.add_row("relation", report.relation)
    table.add_row("neighbours", report.neighbours)
    table.add_row("claimed", f"epsilon = {report.epsilon:g}, delta = {report.delta:g}")
    table.add_row(
        "lower bound",
        f"epsilon >= {report.epsilon_lower:.4g} at confidence {report.confidence:g}",
    )
    table.add_row("runs", f"{report.runs} per neighbour, {seconds:.1f} s")
    console.print(table)
    if not report.passed:
        raise typer.Exit(EXIT_VIOLATION)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command("audit")(audit)

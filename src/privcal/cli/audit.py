"""``privcal audit``: run a deployed-path privacy audit from the command line.

Each audit (:mod:`privcal.audits`) calls one public entry point as a user does, with its default
arguments and secure noise, many times on two worst-case neighbouring inputs of the relation its
privacy report declares, and prints the claimed epsilon, the lower confidence bound on the
epsilon the runs show, and that bound's confidence. The exit status is 0 when the claim stands,
1 when the audit found a violation.

``--plant DEFECT`` runs the audit with one of its registered defects planted into the entry point
(:class:`privcal.audits.Plant`); it exits 1 when the audit catches the defect (as it must) and 0
when it does not. ``--list`` prints the audits, the measurements each tests (mechanism and
sensitivity read from the :class:`~privcal.privacy.measurement.Measurement` objects) and their
plants, ``--list --json`` the same as a JSON list.
"""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer
from rich.table import Table

from privcal.cli._common import console, err_console, fail, user_errors

__all__ = ["register"]

#: Exit status of an audit that found a violation of the claim.
EXIT_VIOLATION = 1


def _list(as_json: bool) -> None:
    from privcal.audits import available_audits

    audits = available_audits()
    if as_json:
        rows = [
            {
                "name": name,
                "summary": audit.summary,
                "runs": audit.runs,
                "slow": audit.slow,
                "extra": audit.extra,
                "events": audit.events,
                "epsilon": audit.epsilon,
                "max_epsilon": audit.max_epsilon(),
                "plants": [{"name": k, "summary": p.summary} for k, p in audit.plants.items()],
                "measurements": [m.row() for m in audit.measured()],
            }
            for name, audit in audits.items()
        ]
        print(json.dumps(rows, indent=2))
        return
    table = Table(title="privcal audits (privcal audit NAME)", expand=False)
    cols = ("name", "entry point audited", "releases (mechanism, sensitivity)", "default runs")
    for col in (*cols, "extra", "plants (--plant)"):
        table.add_column(col, overflow="fold")
    for name, audit in audits.items():
        plants = ", ".join(audit.plants) or "-"
        measured = "; ".join(
            f"{m.name}: {m.mechanism}, {m.norm} {m.formula}" for m in audit.measured()
        )
        table.add_row(name, audit.summary, measured, str(audit.runs), audit.extra or "-", plants)
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
    plant: Annotated[
        str | None,
        typer.Option(
            "--plant",
            help="Run with this registered defect planted into the entry point (the audit must "
            "catch it: exit 1); 'privcal audit --list' names them.",
        ),
    ] = None,
    list_: Annotated[bool, typer.Option("--list", help="List the audits and exit.")] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="With --list: print the audits as a JSON list.")
    ] = False,
) -> None:
    """Audit a private entry point as a user calls it: claimed epsilon vs a lower bound."""
    if as_json and not list_:
        fail("--json applies to --list only: run 'privcal audit --list --json'.")
    if list_:
        _list(as_json)
        return
    if name is None:
        fail("Missing the audit NAME: run 'privcal audit --list' to see them.")
    with user_errors():
        from privcal.audits import get_audit

        spec = get_audit(name)
        if plant is not None:
            spec.plant(plant)  # an unknown defect is refused before anything runs
        start = time.perf_counter()
        with err_console.status(f"auditing {name} ..."):
            report = spec.run(runs=runs, alpha=alpha, plant=plant)
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
    if plant is not None:
        table.add_row("planted", f"{plant}: {spec.plants[plant].summary}")
    console.print(table)
    if plant is not None:
        if report.passed:
            console.print(
                f"plant {plant!r} NOT caught at {report.runs} runs: the audit lacks the power "
                "to see it (try more --runs)"
            )
        else:
            console.print(f"plant {plant!r} caught: the audit found the planted violation")
    if not report.passed:
        raise typer.Exit(EXIT_VIOLATION)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command("audit")(audit)

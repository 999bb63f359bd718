"""``privcal federate plan``: will a federation's release beat doing nothing? Asked before any
site spends (:mod:`privcal.federated.plan`); and the same check at the start of a server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from privcal.cli._common import console, err_console, fail, user_errors

__all__ = ["plan", "server_plan", "show_plan"]


def plan(
    method: str = typer.Option("fedtemp", "--method", help="Federated method."),
    num_nodes: int = typer.Option(..., "--num-nodes", help="K, the declared number of sites."),
    rows: int = typer.Option(
        None, "--rows", help="Rows a typical site holds (as the sites declare it)."
    ),
    rounds: int = typer.Option(3, "--rounds", help="Rounds T (>= 1)."),
    epsilon: float = typer.Option(..., "--epsilon", help="User-level epsilon of the run."),
    delta: float = typer.Option(1e-5, "--delta"),
    n_classes: int = typer.Option(10, "--n-classes", help="Number of classes C."),
    secagg: bool = typer.Option(
        False, "--secagg", help="Plan a SecAgg+ run (distributed noise shares by default)."
    ),
    threshold: int = typer.Option(None, "--threshold", help="t of the distributed shares."),
    data: Annotated[
        Path | None,
        typer.Option(
            "--data",
            exists=True,
            help="Labelled score file the operator holds (e.g. the server's --val): the plan "
            "also simulates the run on sites drawn from it (needs --rows).",
        ),
    ] = None,
    repeats: int = typer.Option(20, "--repeats", help="Simulated runs with --data."),
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON."),
) -> None:
    """Say, before any site spends, the noise per round, the signal a site can contribute and
    whether the release is expected to beat doing nothing (exit 0), or not (exit 2), with the
    smallest K and epsilon that would.
    """
    with user_errors():
        from privcal.federated.plan import plan_run

        if _releases_sets(method):
            raise ValueError(
                f"privcal federate plan predicts whether a calibrator will beat the uncalibrated "
                f"model; --method {method} releases prediction sets, which cover 1 - alpha "
                "whatever the noise (the noise only makes them larger: docs/conformal.md, "
                "federated), so there is no fallback to predict. Run it, or try the settings "
                "first with privcal.federated.simulate."
            )
        reference = None
        if data is not None:
            if rows is None:
                raise ValueError("--data simulates sites of --rows rows each: pass --rows.")
            from privcal.federated.flower.task import load_client_data

            reference = load_client_data(data)
        result = plan_run(
            method,
            n_clients=num_nodes,
            rows=rows,
            rounds=rounds,
            epsilon=epsilon,
            delta=delta,
            n_classes=n_classes,
            aggregation="distributed" if secagg and epsilon > 0 else "trusted",
            threshold=threshold,
            reference=reference,
            repeats=repeats,
        )
    if as_json:
        from privcal.report import jsonable

        console.print_json(json.dumps(jsonable(result.to_dict())))
    else:
        for line in result.lines():
            console.print(line, markup=False, highlight=False)
    if result.falls_back:
        raise typer.Exit(2)


def server_plan(cfg: dict[str, Any], force: bool) -> tuple[str, str]:
    """The server's check at start: refuse a run expected to fall back (unless ``force``;
    no plan for acc-t and the conformal methods, whose release has no fallback).

    Returns the plan's summary (every client is shown it) and the line the server prints once
    its output folder is made (a warning for a run that may fall back).
    """
    from privcal.federated.plan import plan_run

    if cfg["method"] == "acc-t" or _releases_sets(str(cfg["method"])):
        return "", ""
    result = plan_run(
        str(cfg["method"]),
        n_clients=int(cfg["num-nodes"]),
        rounds=int(cfg["rounds"]),
        epsilon=float(cfg["epsilon"]),
        delta=float(cfg["delta"]),
        n_classes=int(cfg["n-classes"]),
        aggregation=str(cfg["aggregation"]) if float(cfg["epsilon"]) > 0 else "trusted",
        threshold=int(cfg["threshold"]) or None,
    )
    summary = result.summary()
    if result.falls_back and not force:
        fail(
            f"Refused before any site spends: this run is {summary}. Run `privcal federate "
            "plan` for the settings that would help, or pass --force to run it anyway."
        )
    if result.expected in ("falls back", "may fall back"):
        return summary, f"WARNING: plan: {summary}"
    return summary, f"plan: {summary}"


def _releases_sets(method: str) -> bool:
    """Whether ``method`` is a federated method whose release is prediction sets (the plan
    predicts a calibrator's fallback only)."""
    from privcal.federated.methods import METHODS, get_method

    return method in METHODS and get_method(method).releases == "sets"


def show_plan(line: str) -> None:
    """Print the line :func:`server_plan` returned (yellow when it warns)."""
    if line:
        style = "yellow" if line.startswith("WARNING") else None
        err_console.print(line, style=style, markup=False, highlight=False)

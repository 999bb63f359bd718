"""``privcal ledger init|show``: one ledger for a pipeline of private steps.

* ``privcal ledger init PATH --epsilon 3 --delta 1e-5 [--renyi-delta D] [--relation R]`` creates
  a pipeline ledger (a :class:`~privcal.privacy.PrivacyOdometer` SQLite file) that stores its
  budget, the delta backing its Rényi filter (default half of ``--delta``; ``0``: basic
  composition only) and its neighbouring relation (``substitute`` to hold private conformal).
  ``privcal fit --ledger PATH`` and ``privcal conformal --ledger PATH`` charge it, and so do the
  estimators' ``ledger=`` from Python.
* ``privcal ledger show PATH`` prints every release (step, mechanism, relation, epsilon, delta)
  and the composed guarantee: the basic sums, the Rényi filter's figure, which one is stated and
  why, and the budget the filter guarantees (:mod:`privcal.privacy.filter`). It only reads the
  file, so it works on any privcal ledger.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer

from privcal._text import format_table, wrap
from privcal.cli._common import console, fail, table_width, user_errors

__all__ = ["ledger_init", "ledger_show", "register"]


def ledger_init(
    path: Annotated[Path, typer.Argument(help="The ledger file to create (SQLite).")],
    epsilon: Annotated[float, typer.Option("--epsilon", help="Epsilon budget of the pipeline.")],
    delta: Annotated[float, typer.Option("--delta", help="Delta budget of the pipeline.")] = 0.0,
    renyi_delta: Annotated[
        float | None,
        typer.Option(
            "--renyi-delta",
            help="Part of --delta backing the Rényi filter (default: half of --delta; 0: basic "
            "composition only).",
            show_default=False,
        ),
    ] = None,
    relation: Annotated[
        str,
        typer.Option(
            "--relation",
            help="Neighbouring relation of the guarantee: 'add/remove', or 'substitute' to "
            "hold private conformal too (add/remove steps then count twice).",
        ),
    ] = "add/remove",
) -> None:
    """Create a pipeline ledger with its budget; refused if PATH already exists."""
    from privcal.privacy import PrivacyOdometer

    with user_errors():
        if path.exists():
            fail(
                f"{str(path)!r} already exists; a ledger keeps one budget for good. Inspect it "
                "with 'privcal ledger show', or create the ledger at a new path."
            )
        renyi = delta / 2.0 if renyi_delta is None else renyi_delta
        odo = PrivacyOdometer(
            epsilon,
            ledger=path,
            delta_budget=delta,
            name=path.stem,
            renyi_delta=renyi,
            relation=relation,
        )
    console.print(
        f"Ledger {str(path)!r}: budget epsilon={odo.budget:g}, delta={odo.delta_budget:g}, "
        f"{odo.relation} (Rényi filter delta {odo.renyi_delta:g})",
        highlight=False,
    )


def ledger_show(
    path: Annotated[Path, typer.Argument(help="A privcal ledger file.")],
) -> None:
    """Print a ledger's releases and its composed guarantee (reads it only)."""
    from privcal.privacy.odometer import read_ledger, seeded_warning

    with user_errors():
        record = read_ledger(path)
        comp = record.composition()
    width = table_width()
    named = f" (source {record.name!r})" if record.name else ""
    header = ("step", "query", "mechanism", "relation", "epsilon", "delta")
    relations = record.relations or ["add/remove"] * len(record.releases)
    rows = [
        (str(i), r.query, r.mechanism, rel, f"{r.epsilon:.6g}", f"{r.delta:.3g}")
        for i, (r, rel) in enumerate(zip(record.releases, relations, strict=True), 1)
    ]
    table = format_table(header, rows, width) if rows else "no release"
    console.print(
        "\n".join([*wrap(f"Ledger {path}{named}", width), table]), markup=False, highlight=False
    )
    out = [
        f"budget: epsilon={record.budget:g}, delta={record.delta_budget:g}, {record.relation} "
        "(the filter's guarantee for the whole pipeline, steps chosen after seeing earlier ones "
        "included)",
        f"basic composition: epsilon={comp.basic_epsilon:.6g}, delta={comp.basic_delta:.3g} "
        f"(sums; basic branch delta budget {record.rule.basic_delta:g})",
    ]
    if record.renyi_delta > 0:
        at = "" if comp.order is None else f", order {comp.order:g}"
        out.append(
            f"Rényi filter: epsilon={comp.renyi_epsilon:.6g}, delta={comp.renyi_delta:.3g} "
            f"({len(record.rule.orders)} orders, delta/{len(record.rule.orders)} each{at})"
        )
    else:
        out.append("Rényi filter: off (renyi_delta = 0: basic composition only)")
    why = (
        "the Rényi figure has the smaller epsilon"
        if comp.stated == "renyi"
        else "basic composition has the smaller (or equal) epsilon"
        if record.renyi_delta > 0 and not math.isinf(comp.renyi_epsilon)
        else "no Rényi figure"
    )
    group = ", add/remove steps counted twice by group privacy" * (comp.relation == "substitute")
    out.append(
        f"stated: epsilon={comp.epsilon:.6g}, delta={comp.delta:.3g} ({comp.stated}: {why}; "
        f"{comp.relation}{group})"
    )
    warning = seeded_warning(record.releases)
    if warning is not None:
        out.append(warning)
    console.print(
        "\n".join(x for line in out for x in wrap(line, width)), markup=False, highlight=False
    )


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Add ``ledger init|show``."""
    del bench_app
    ledger_app = typer.Typer(
        help="One ledger for a pipeline of private steps: create it, show what it holds.",
        no_args_is_help=True,
    )
    ledger_app.command("init")(ledger_init)
    ledger_app.command("show")(ledger_show)
    app.add_typer(ledger_app, name="ledger")

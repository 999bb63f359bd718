"""``privcal source init|status`` and ``privcal bench luo2020``.

* ``privcal source init --data val.npz --budget 1.0 --ledger src.sqlite [--name NAME]
  [--allow-seeded-noise]`` creates a data source's SQLite ledger (budget, data path and its
  SHA-256, and whether fits may take ``--seed``: the owner's choice). The data stay where they are.
* ``privcal source status --ledger src.sqlite`` prints the ledger's path and name, the budget,
  what was spent and every release (its sensitivity, or ``—`` with the reason when none was
  recorded), as a table that fits 100 columns (:func:`privcal._text.format_table`), for any
  ledger privcal writes (``source init``, ``DataSource(..., ledger=PATH)`` from
  Python, a Flower client's ``--ledger``); it only reads the file.
* ``privcal bench luo2020`` runs :func:`privcal.experiments.luo2020.run`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer

from privcal.cli._common import OutDirO, console, run_protocol, table_width, user_errors

__all__ = ["register"]


def source_init(
    data: Annotated[Path, typer.Option("--data", help="Validation scores of this source.")],
    ledger: Annotated[Path, typer.Option("--ledger", help="SQLite ledger to create.")],
    budget: Annotated[float, typer.Option("--budget", help="Epsilon budget of the source.")] = 1.0,
    name: Annotated[str, typer.Option("--name", help="Public name of the source.")] = "",
    allow_seeded_noise: Annotated[
        bool,
        typer.Option(
            "--allow-seeded-noise",
            help="Let fits on this source take --seed: seeded noise, reproducible by whoever "
            "holds the seed (not private; for tests and simulations). Fixed at creation.",
        ),
    ] = False,
) -> None:
    """Create a private data source: a ledger holding its budget and where its data live."""
    from privcal.private import DataSource

    with user_errors():
        src = DataSource.init_ledger(
            data,
            ledger,
            budget=budget,
            name=name or ledger.stem,
            allow_seeded_noise=allow_seeded_noise,
        )
    console.print(
        f"Source [bold]{src.name}[/bold]: {src.n_classes} classes, budget epsilon={src.budget:g}, "
        f"spent {src.spent:g} -> {ledger}"
    )


def source_status(
    ledger: Annotated[
        Path,
        typer.Option(
            "--ledger",
            help="A ledger: from 'privcal source init', DataSource(..., ledger=PATH) or "
            "'privcal federate client --ledger'.",
        ),
    ],
) -> None:
    """Print a ledger's budget, what it has spent and every release (reads it only)."""
    from privcal._text import NO_SENSITIVITY, format_table, number, wrap
    from privcal.privacy.odometer import read_ledger, seeded_warning

    with user_errors():
        record = read_ledger(ledger)
    width = table_width()
    named = f" (source {record.name!r})" if record.name else ""
    lines = wrap(f"Ledger {ledger}{named}", width)
    header = ("release", "query", "mechanism", "sensitivity", "epsilon", "delta")
    rows = [
        (str(i), r.query, r.mechanism, number(r.sensitivity), f"{r.epsilon:.6g}", f"{r.delta:g}")
        for i, r in enumerate(record.releases, 1)
    ]
    lines.append(format_table(header, rows, width) if rows else "no release")
    if any(math.isnan(r.sensitivity) for r in record.releases):
        lines.extend(wrap(NO_SENSITIVITY, width))
    warning = seeded_warning(record.releases)
    if warning is not None:
        lines.extend(wrap(warning, width))
    delta = (
        f"  delta budget={record.delta_budget:g}  delta spent={record.delta_spent:.6g}"
        if record.delta_budget > 0
        else ""
    )
    lines.extend(
        wrap(
            f"budget epsilon={record.budget:g}  spent={record.spent:.6g}  "
            f"remaining={record.remaining:.6g}{delta}",
            width,
        )
    )
    console.print("\n".join(lines), markup=False, highlight=False)


def bench_luo2020(
    data: Annotated[
        Path | None,
        typer.Option("--data", help="Scores file (read_scores); default digits_shift."),
    ] = None,
    trials: Annotated[int, typer.Option("--trials", help="Random splits per setting.")] = 500,
    out: OutDirO = Path("luo2020-out"),
    seed: Annotated[int, typer.Option("--seed")] = 0,
    iterations: Annotated[int, typer.Option("--iterations", help="K of the searches.")] = 5,
    severity: Annotated[int, typer.Option("--severity", help="digits_shift severity.")] = 5,
    jobs: Annotated[int, typer.Option("--jobs", help="Worker processes.")] = 2,
) -> None:
    """Luo et al. (2020)'s protocol: CSV, Table 1 analogue (Markdown), Fig. 1-3 panels (PNG)."""
    from privcal.experiments import luo2020

    config = luo2020.Luo2020Config(
        data=data, trials=trials, iterations=iterations, severity=severity, jobs=jobs
    )
    res = run_protocol(luo2020.run, config, out, seed=seed)[0]
    console.print(res.table_markdown())
    console.print(f"{len(res.rows)} rows in {res.seconds:.1f} s -> {out}")


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Add ``source init|status`` and ``bench luo2020``."""
    source_app = typer.Typer(
        help="Private data sources: budgets and ledgers.", no_args_is_help=True
    )
    source_app.command("init")(source_init)
    source_app.command("status")(source_status)
    app.add_typer(source_app, name="source")
    bench_app.command(
        "luo2020", short_help="Private recalibration over sources (Luo et al. 2020): ECE table."
    )(bench_luo2020)

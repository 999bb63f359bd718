"""The ``privcal`` Typer application.

Each verb group lives in its own module exposing ``register(app, bench_app)``; the modules named
in :data:`VERB_MODULES` are imported and registered in order.  The root group
(:class:`~privcal.cli._common.PrivcalGroup`) applies the CLI's error rule to every verb: one
``Error:`` line, exit 2 (3 for a privacy budget), no traceback unless ``--debug``.
``bench_app`` is mounted as ``privcal bench`` for the paper protocols.
"""

from __future__ import annotations

import importlib
from typing import Annotated

import typer

from privcal import __version__
from privcal.cli._common import PrivcalGroup, set_debug

__all__ = ["VERB_MODULES", "app", "bench_app"]

#: Modules that add commands, each with ``register(app: Typer, bench_app: Typer) -> None``.
VERB_MODULES: tuple[str, ...] = (
    "privcal.cli.calibrate",
    "privcal.cli.split",
    "privcal.cli.demo_cmd",
    "privcal.cli.conformal",
    "privcal.cli.risk",
    "privcal.cli.training",
    "privcal.cli.source",
    "privcal.cli.ledger",
    "privcal.cli.federate",
    "privcal.cli.audit",
    "privcal.cli.scoreboard",
    "privcal.cli.report",
)

app = typer.Typer(
    name="privcal",
    cls=PrivcalGroup,
    help="Privacy-preserving calibration of classifiers: fit, apply and evaluate calibrators, "
    "run private data sources and federated calibration, rerun paper protocols.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)
bench_app = typer.Typer(
    help="Rerun the papers' experimental protocols (tables and figures).",
    no_args_is_help=True,
)
app.add_typer(bench_app, name="bench")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"privcal {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
    debug: Annotated[
        bool,
        typer.Option(
            "--debug", help="Show the full traceback of an error instead of one 'Error:' line."
        ),
    ] = False,
) -> None:
    """Privacy-preserving calibration of classifiers."""
    set_debug(debug)


def _register_all() -> None:
    from privcal.cli.examples import add_examples

    for name in VERB_MODULES:
        importlib.import_module(name).register(app, bench_app)
    add_examples(app)  # a short example at the end of every command's --help


_register_all()

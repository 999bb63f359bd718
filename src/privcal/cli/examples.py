"""A short example for the ``--help`` of every ``privcal`` command.

:data:`EXAMPLES` maps each command's path (``"fit"``, ``"source status"``) to one or two
command lines; :func:`add_examples` puts them at the end of the command's ``--help`` (Typer's
``epilog``). ``tests/cli/test_cli_examples.py`` checks that every command has one, that each
parses with the command's own options (an example cannot name an option that is gone) and that
each fits one line of an 100-column ``--help``.
"""

from __future__ import annotations

import typer
from rich.markup import escape

__all__ = ["EXAMPLES", "add_examples", "command_paths"]

EXAMPLES: dict[str, tuple[str, ...]] = {
    "fit": (
        "privcal fit -m temperature -i val.npz -o cal.json",
        "privcal fit -m acc-t --epsilon 1 -i val.npz --ledger pipeline.sqlite -o private.json",
    ),
    "apply": ("privcal apply -c cal.json -i test.npz -o calibrated.npz",),
    "evaluate": ("privcal evaluate -i test.npz -c cal.json --plot reliability.png",),
    "split": (
        "privcal split all.npz --out-cal val.npz --out-test test.npz --test-size 0.5",
        "privcal split all.npz --parts 5 --out 'site{k}.npz'",
    ),
    "demo": ("privcal demo --quick -o privcal-demo",),
    "conformal": ("privcal conformal --cal val.npz --test test.npz --epsilon 1 --out sets.csv",),
    "risk": ("privcal risk --loss fnr --alpha 0.1 --epsilon 1 --cal cal.npz --test test.npz",),
    "audit": ("privcal audit --list", "privcal audit datasource-accuracy-gap-sum"),
    "report": ("privcal report privcal-demo -o report.html",),
    "bench angelopoulos2022": ("privcal bench angelopoulos2022 --quick",),
    "bench bu2023": ("privcal bench bu2023 --quick",),
    "bench knolle2021": ("privcal bench knolle2021 --quick",),
    "bench luo2020": ("privcal bench luo2020 --trials 50 -o luo2020-out",),
    "bench maddock2025": ("privcal bench maddock2025 --quick",),
    "bench scoreboard": ("privcal bench scoreboard --quick -o scoreboard.md",),
    "source init": ("privcal source init --data val.npz --budget 1 --ledger hospital_a.sqlite",),
    "source status": ("privcal source status --ledger hospital_a.sqlite",),
    "ledger init": ("privcal ledger init pipeline.sqlite --epsilon 3 --delta 1e-5",),
    "ledger show": ("privcal ledger show pipeline.sqlite",),
    "federate server": (
        "privcal federate server --num-nodes 5 --n-classes 10 --epsilon 4 --secagg --insecure",
    ),
    "federate client": (
        "privcal federate client --data site0.npz --ledger site0.sqlite --budget 4 --insecure",
    ),
    "federate plan": ("privcal federate plan --num-nodes 5 --epsilon 5 --secagg",),
    "federate simulate": (
        "privcal federate simulate all.npz --num-nodes 10 --epsilon 1 --noise seeded",
    ),
}


def command_paths(app: typer.Typer) -> dict[str, typer.models.CommandInfo]:
    """Every command of ``app`` by its path (``"fit"``, ``"federate server"``)."""
    paths = {str(info.name): info for info in app.registered_commands}
    for group in app.registered_groups:
        assert group.typer_instance is not None
        for path, info in command_paths(group.typer_instance).items():
            paths[f"{group.name} {path}"] = info
    return paths


def add_examples(app: typer.Typer) -> None:
    """Put each command's :data:`EXAMPLES` at the end of its ``--help`` (before the click
    command is built from the Typer app)."""
    for path, info in command_paths(app).items():
        lines = EXAMPLES.get(path)
        if lines:
            body = "\n\n".join(f"  {escape(line)}" for line in lines)
            info.epilog = f"Example{'s' if len(lines) > 1 else ''}:\n\n{body}"

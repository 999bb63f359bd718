"""``privcal bench bu2023`` and ``privcal bench knolle2021`` (need the ``torch`` extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from privcal.cli._common import OutDir, fail, print_protocol, user_errors

__all__ = ["bu2023", "knolle2021", "register"]

_Seed = Annotated[int, typer.Option("--seed", help="Seed of splits, models and noise.")]


def _run(experiment: str, out: Path, seed: int, quick: bool) -> None:
    """Run ``privcal.experiments.<experiment>`` (needs torch) and print its Markdown report."""
    import importlib

    from privcal.training import require_torch

    with user_errors():
        try:
            require_torch("privcal bench")
        except ImportError as exc:
            fail(str(exc))
        exp = importlib.import_module(f"privcal.experiments.{experiment}")
    print_protocol(exp, exp.QUICK if quick else exp.FULL, out, seed)


def bu2023(
    out: OutDir = Path("results/bu2023"),
    seed: _Seed = 0,
    quick: Annotated[bool, typer.Option("--quick", help="One seed, fewer settings.")] = False,
) -> None:
    """Bu et al. (2023): DP-SGD miscalibration, clipping ablation, DP-TS / DP-PS."""
    _run("bu2023", out, seed, quick)


def knolle2021(
    out: OutDir = Path("results/knolle2021"),
    seed: _Seed = 0,
    quick: Annotated[bool, typer.Option("--quick", help="One seed, fewer epochs.")] = False,
) -> None:
    """Knolle et al. (2021): SGD vs DP-SGD vs DP-SGLD at equal epsilon."""
    _run("knolle2021", out, seed, quick)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Add ``bench bu2023`` and ``bench knolle2021`` to ``bench_app``."""
    del app
    bench_app.command(
        "bu2023", short_help="DP-SGD miscalibration and DP-TS / DP-PS (Bu et al. 2023)."
    )(bu2023)
    bench_app.command(
        "knolle2021", short_help="SGD vs DP-SGD vs DP-SGLD calibration (Knolle et al. 2021)."
    )(knolle2021)

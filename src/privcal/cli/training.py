"""``privcal bench bu2023`` and ``privcal bench knolle2021`` (need the ``torch`` extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from privcal.cli._common import console, err_console, fail, user_errors

__all__ = ["bu2023", "knolle2021", "register"]


def _need_torch() -> None:
    from privcal.training import require_torch

    try:
        require_torch("privcal bench")
    except ImportError as exc:
        fail(str(exc))


def bu2023(
    out: Annotated[Path, typer.Option("--out", help="Output folder.")] = Path("results/bu2023"),
    seed: Annotated[int, typer.Option("--seed", help="Seed of splits, models and noise.")] = 0,
    quick: Annotated[bool, typer.Option("--quick", help="One seed, fewer settings.")] = False,
) -> None:
    """Seed 001 (Bu et al.): DP-SGD miscalibration, clipping ablation, DP-TS / DP-PS."""
    with user_errors():
        _need_torch()
        from privcal.experiments import bu2023 as exp

        path = exp.run(out, seed=seed, quick=quick, progress=err_console.print)
        console.print(path.read_text(), markup=False, highlight=False)
        console.print(f"Wrote {path}")


def knolle2021(
    out: Annotated[Path, typer.Option("--out", help="Output folder.")] = Path("results/knolle2021"),
    seed: Annotated[int, typer.Option("--seed", help="Seed of splits, models and noise.")] = 0,
    quick: Annotated[bool, typer.Option("--quick", help="One seed, fewer epochs.")] = False,
) -> None:
    """Seed 004 (Knolle et al.): SGD vs DP-SGD vs DP-SGLD at equal epsilon."""
    with user_errors():
        _need_torch()
        from privcal.experiments import knolle2021 as exp

        path = exp.run(out, seed=seed, quick=quick, progress=err_console.print)
        console.print(path.read_text(), markup=False, highlight=False)
        console.print(f"Wrote {path}")


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Add ``bench bu2023`` and ``bench knolle2021`` to ``bench_app``."""
    del app
    bench_app.command("bu2023")(bu2023)
    bench_app.command("knolle2021")(knolle2021)

"""The end-to-end demo behind ``privcal demo`` / ``make demo``.

:func:`run_demo` runs every module named in :data:`SECTIONS` (modules of this package).  Each
section module exposes ``run(ctx: DemoContext) -> list[dict]`` returning
:mod:`~privcal.report.blocks` blocks (raw numbers, never pre-formatted), and may set
``TITLE``. The run writes the blocks to ``results.json`` and renders them twice, as
``report.md`` and as the self-contained ``report.html`` (:mod:`privcal.report`,
what ``privcal report`` writes).  Sections share one :class:`DemoContext`: the output folder, the
seed, a Rich console and the digits distribution-shift data, built once on first use.  A section
that raises is reported (console and report) and the others still run; :func:`run_demo` then
raises :class:`DemoError` after writing the report.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import time
import traceback
import warnings
import zlib
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from rich.console import Console

from privcal._params import check_int
from privcal.privacy import InsecureNoiseWarning
from privcal.report import Section, draw, run_metadata, write_html, write_report, write_results

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from privcal.data import DigitsShift

__all__ = ["SECTIONS", "DemoContext", "DemoError", "rich_bar", "run_demo"]

#: Section modules under ``privcal.experiments.demo``, in report order.
SECTIONS: tuple[str, ...] = ("calibration", "private", "conformal", "training", "federated")
SECTIONS += ("scoreboard",)

#: Printed once before the sections: the demo's private methods draw seeded noise so that its
#: numbers reproduce, and every privacy report it shows says so.
SEEDED_NOTICE = (
    "[yellow]The demo draws seeded noise so its numbers reproduce: a simulation, not a private "
    "release (its reports say 'not private: seeded noise'). Library defaults are secure.[/yellow]"
)


def rich_bar(console: Console, *, transient: bool) -> Any:
    """The Rich bar (description, bar, done of total, time elapsed) on ``console``: the demo's
    sections and the CLI's experiment runs draw this one."""
    from rich import progress as rp

    description = rp.TextColumn("[progress.description]{task.description}")
    columns = (description, rp.BarColumn(), rp.MofNCompleteColumn(), rp.TimeElapsedColumn())
    return rp.Progress(*columns, console=console, transient=transient)


class DemoError(RuntimeError):
    """One or more demo sections failed (the report was still written)."""


@dataclass
class DemoContext:
    """Shared state of one demo run.

    Attributes
    ----------
    out_dir : pathlib.Path
        The output folder (exists).
    seed : int
        The run's seed; sections derive their own generators with :meth:`rng`.
    console : rich.console.Console
        Where sections print tables and progress.
    quick : bool
        Smaller settings for a smoke run (tests, ``privcal demo --quick``).
    """

    out_dir: Path
    seed: int = 0
    console: Console = field(default_factory=Console)
    quick: bool = False

    @cached_property
    def data(self) -> DigitsShift:
        """:func:`privcal.data.digits_shift` for this seed, built (or loaded) on first use."""
        from privcal.data import digits_shift

        return digits_shift(self.seed)

    @property
    def figures_dir(self) -> Path:
        """``out_dir/figures`` (created)."""
        path = self.out_dir / "figures"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def rng(self, name: str) -> np.random.Generator:
        """A generator seeded by ``(seed, crc32(name))``: independent streams per section."""
        return np.random.default_rng([self.seed, zlib.crc32(name.encode())])

    def save_figure(self, fig: Figure, name: str) -> str:
        """Save ``fig`` as ``figures/<name>.png`` and return its path relative to ``out_dir``."""
        from privcal.plots import save_figure

        path = save_figure(fig, self.figures_dir / f"{name}.png")
        return path.relative_to(self.out_dir).as_posix()

    def figure(self, block: dict[str, Any], name: str) -> dict[str, Any]:
        """Draw a figure block (:func:`~privcal.report.draw`), save it as
        ``figures/<name>.png`` for ``report.md`` and record that path in the block."""
        block["file"] = self.save_figure(draw(block), name)
        return block


def _run_section(name: str, ctx: DemoContext) -> Section:
    start = time.perf_counter()
    title = name.replace("_", " ").capitalize()
    try:
        module: Any = importlib.import_module(f"{__name__}.{name}")
        title = getattr(module, "TITLE", title)
        ctx.console.rule(f"[bold]{title}")
        blocks = list(module.run(ctx))
        return Section(name, title, blocks, time.perf_counter() - start)
    except Exception:  # a failing section must not hide the others
        tb = traceback.format_exc()
        ctx.console.print(f"[bold red]Section {name!r} failed:[/bold red]")
        ctx.console.print(tb, markup=False, highlight=False)
        return Section(name, title, [], time.perf_counter() - start, error=tb)


def run_demo(
    out_dir: str | Path = "privcal-demo",
    seed: int = 0,
    console: Console | None = None,
    *,
    quick: bool = False,
    sections: tuple[str, ...] | None = None,
) -> Path:
    """Run the demo sections; write ``results.json``, ``report.md`` and ``report.html``.

    Parameters
    ----------
    out_dir : str or pathlib.Path
        Output folder (created); figures go to ``out_dir/figures``.
    seed : int
        Seed of the data, the splits and the simulated noise (``>= 0``).
    console : rich.console.Console, optional
        Where to print; a new stdout console by default.
    quick : bool
        Smaller settings for a smoke run.
    sections : tuple of str, optional
        Section modules to run (default :data:`SECTIONS`).

    Returns
    -------
    pathlib.Path
        The Markdown report's path (``report.html`` is beside it).

    Raises
    ------
    DemoError
        After writing the report, if any section raised.
    """
    seed = check_int(seed, "seed", "run_demo", low=0)
    names = SECTIONS if sections is None else tuple(sections)
    unknown = [n for n in names if importlib.util.find_spec(f"{__name__}.{n}") is None]
    if unknown:
        raise ValueError(
            f"The 'sections' parameter of run_demo must name modules of {__name__}. Got "
            f"unknown {unknown!r} instead."
        )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ctx = DemoContext(out, seed, console if console is not None else Console(), quick)
    ctx.console.print(SEEDED_NOTICE)
    start = time.perf_counter()
    with warnings.catch_warnings():
        # said once above; every report in the demo also says "not private: seeded noise"
        warnings.simplefilter("ignore", InsecureNoiseWarning)
        results = [_run_section(name, ctx) for name in names]
    elapsed = time.perf_counter() - start
    command = f"run_demo({str(out)!r}, seed={seed}, quick={quick})"
    if Path(sys.argv[0]).name == "privcal":
        command = " ".join(["privcal", *sys.argv[1:]])
    meta = run_metadata(command=command, seed=seed, seconds=elapsed)
    write_results(out, results, meta)
    report = write_report(out, results, command=command, seed=seed, seconds=elapsed, meta=meta)
    write_html(out, out / "report.html")
    failed = [s.name for s in results if s.error]
    if failed:
        raise DemoError(f"demo sections failed: {', '.join(failed)}; see {report}")
    ctx.console.print(f"Demo finished in {elapsed:.1f} s.")
    return report

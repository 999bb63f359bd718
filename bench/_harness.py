"""Tiny helpers shared by the benchmarks: best-of-k timing and a Markdown table writer."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["best_of", "machine", "markdown_table"]


def best_of(fn: Callable[[], Any], repeats: int = 5) -> tuple[float, Any]:
    """Run ``fn`` ``repeats`` times; return the fastest wall time (``perf_counter``, s) and the
    result of the last run. The minimum is the estimate least affected by other load."""
    best = float("inf")
    result: Any = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def machine() -> str:
    """One line naming the machine, the visible cores and the date."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return (
        f"{cpu}, {cores} cores visible, "
        f"Python {platform.python_version()}, {_dt.date.today().isoformat()}"
    )


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub Markdown table; floats are printed with 4 significant digits."""

    def cell(v: object) -> str:
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)

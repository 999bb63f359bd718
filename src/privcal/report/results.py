"""A run's results: its sections of report blocks and its metadata, saved as ``results.json``
(the machine-readable output of ``privcal demo`` that ``privcal report`` reads; ``report.md``
renders the same sections, :func:`privcal.report.markdown.write_report`).
"""

from __future__ import annotations

import datetime as _dt
import platform
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from privcal import __version__
from privcal.report.formatting import write_json

__all__ = ["RESULTS_FILE", "Section", "run_metadata", "write_results"]

#: The machine-readable output of a demo run, next to ``report.md``.
RESULTS_FILE = "results.json"


@dataclass
class Section:
    """One report section: a title, its blocks, its runtime and, if it failed, the error."""

    name: str
    title: str
    blocks: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None


def run_metadata(*, command: str, seed: int, seconds: float) -> dict[str, Any]:
    """Date, command, seed, versions and runtime of a run (the header of its reports)."""
    return {
        "date": _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "command": command,
        "seed": seed,
        "version": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "seconds": seconds,
    }


def write_results(
    out_dir: Path,
    sections: Sequence[Section],
    meta: Mapping[str, Any],
    *,
    title: str = "privcal demo",
    kind: str = "demo",
) -> Path:
    """Write ``out_dir/results.json``: the run's metadata and every section's blocks."""
    data = {
        "privcal": kind,
        "title": title,
        **meta,
        "sections": [
            dict(name=s.name, title=s.title, seconds=s.seconds, error=s.error, blocks=s.blocks)
            for s in sections
        ],
    }
    return write_json(Path(out_dir) / RESULTS_FILE, data)

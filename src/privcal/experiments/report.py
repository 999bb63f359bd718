"""The reports that ``privcal demo`` (and other experiment runners) write.

A run's sections hold :mod:`~privcal.experiments.document` blocks; :func:`write_results` saves
them as ``results.json`` (the machine-readable output ``privcal report`` reads) and
:func:`write_report` renders the same blocks as ``report.md``.
"""

from __future__ import annotations

import datetime as _dt
import json
import platform
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from privcal import __version__

__all__ = [
    "RESULTS_FILE",
    "Section",
    "heading_anchor",
    "markdown_table",
    "run_metadata",
    "write_report",
    "write_results",
]

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


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """A GitHub-flavoured Markdown table; the first column left-aligned, the others right.

    Examples
    --------
    >>> markdown_table(["a", "b"], [["x", 1]])
    ['| a | b |', '|:--|--:|', '| x | 1 |']
    """
    align = ":--|" + "--:|" * (len(header) - 1)
    out = ["| " + " | ".join(str(h) for h in header) + " |", "|" + align]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out


def heading_anchor(title: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to ``-``.

    Examples
    --------
    >>> heading_anchor("Scoreboard: every method (epsilon = 1)")
    'scoreboard-every-method-epsilon--1'
    """
    kept = "".join(c for c in title.lower() if c.isalnum() or c in " -_")
    return kept.replace(" ", "-")


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
    from privcal.experiments.document import jsonable

    data = {
        "privcal": kind,
        "title": title,
        **meta,
        "sections": [
            {
                "name": s.name,
                "title": s.title,
                "seconds": s.seconds,
                "error": s.error,
                "blocks": s.blocks,
            }
            for s in sections
        ],
    }
    path = Path(out_dir) / RESULTS_FILE
    path.write_text(json.dumps(jsonable(data), indent=1) + "\n", encoding="utf-8")
    return path


def write_report(
    out_dir: Path,
    sections: Sequence[Section],
    *,
    command: str,
    seed: int,
    seconds: float,
    title: str = "privcal demo",
    meta: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``out_dir/report.md``: title, run details, what the run shows (the sections'
    takeaways), contents, every section, then a figure index.

    The index lists every ``.png`` under ``out_dir/figures`` that no section links itself.
    Links are relative to the report, so the folder can be moved or zipped as a whole.
    """
    from privcal.experiments.document import ECE_UNIT_NOTE, to_markdown

    out_dir = Path(out_dir)
    m = (
        dict(meta)
        if meta is not None
        else run_metadata(command=command, seed=seed, seconds=seconds)
    )
    lines = [
        f"# {title}",
        "",
        f"- Date: {m['date']}",
        f"- Command: `{m['command']}`",
        f"- Seed: {m['seed']}",
        f"- privcal {m['version']}, Python {m['python']}, {m['platform']}",
        f"- Total runtime: {m['seconds']:.1f} s",
        f"- Units: {ECE_UNIT_NOTE}",
        "",
    ]
    found = [b["text"] for s in sections for b in s.blocks if b["type"] == "takeaway"]
    if found:
        lines += ["## What this shows", "", *(f"- {t}" for t in found), ""]
    lines += ["## Contents", ""]
    for s in sections:
        status = " (failed)" if s.error else ""
        anchor = heading_anchor(s.title)
        lines.append(f"- [{s.title}](#{anchor}){status}: {s.seconds:.1f} s")
    lines.append("")
    for s in sections:
        lines += [f"## {s.title}", ""]
        body = [b for b in s.blocks if b["type"] != "takeaway"]
        lines += to_markdown(body, lambda b: b.get("file"))
        if s.error:
            lines += ["", "**This section failed:**", "", "```", s.error.rstrip(), "```"]
        lines.append("")
    figures = sorted((out_dir / "figures").glob("*.png")) if (out_dir / "figures").is_dir() else []
    text = "\n".join(lines)
    figures = [f for f in figures if f"({f.relative_to(out_dir).as_posix()})" not in text]
    if figures:
        lines += ["## Other figures", ""]
        lines += [f"- [{f.name}]({f.relative_to(out_dir).as_posix()})" for f in figures]
        lines.append("")
    path = out_dir / "report.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path

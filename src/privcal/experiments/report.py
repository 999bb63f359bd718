"""The Markdown report that ``privcal demo`` (and other experiment runners) write."""

from __future__ import annotations

import datetime as _dt
import platform
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from privcal import __version__

__all__ = ["Section", "heading_anchor", "markdown_table", "write_report"]


@dataclass
class Section:
    """One report section: a title, Markdown lines, its runtime and, if it failed, the error."""

    name: str
    title: str
    lines: list[str] = field(default_factory=list)
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


def write_report(
    out_dir: Path,
    sections: Sequence[Section],
    *,
    command: str,
    seed: int,
    seconds: float,
    title: str = "privcal demo",
) -> Path:
    """Write ``out_dir/report.md``: title, date, command, every section, then a figure index.

    The index lists every ``.png`` under ``out_dir/figures`` that no section links itself.
    Links are relative to the report, so the folder can be moved or zipped as a whole.
    """
    out_dir = Path(out_dir)
    now = _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    lines = [
        f"# {title}",
        "",
        f"- Date: {now}",
        f"- Command: `{command}`",
        f"- Seed: {seed}",
        f"- privcal {__version__}, Python {platform.python_version()}, {platform.platform()}",
        f"- Total runtime: {seconds:.1f} s",
        "",
        "## Contents",
        "",
    ]
    for s in sections:
        status = " (failed)" if s.error else ""
        anchor = heading_anchor(s.title)
        lines.append(f"- [{s.title}](#{anchor}){status}: {s.seconds:.1f} s")
    lines.append("")
    for s in sections:
        lines += [f"## {s.title}", ""]
        lines += s.lines
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

"""Markdown: tables, the blocks of :mod:`privcal.report.blocks` as Markdown lines, and the
``report.md`` of a run (:func:`write_report`) from the same sections as its ``results.json``
(:mod:`privcal.report.results`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from privcal.report.blocks import ECE_UNIT_NOTE, privacy_sentences
from privcal.report.formatting import cell_text, format_value, header_text
from privcal.report.results import Section, run_metadata

__all__ = ["heading_anchor", "markdown_table", "to_markdown", "write_report"]


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


def to_markdown(
    blocks: Sequence[Mapping[str, Any]],
    figure_path: Callable[[Mapping[str, Any]], str | None] | None = None,
) -> list[str]:
    """Markdown lines of ``blocks``; ``figure_path(block)`` gives the image link of a figure
    block (``None``, or no ``figure_path``: the figure is left out). Takeaways are rendered as a
    bullet list."""
    lines: list[str] = []
    bullets: list[str] = []
    for b in blocks:
        kind = b["type"]
        if kind == "takeaway":
            bullets.append(f"- {b['text']}")
            continue
        if bullets:
            lines += [*bullets, ""]
            bullets = []
        if kind == "text":
            lines += [b["text"], ""]
        elif kind == "table":
            cols = b["columns"]
            if b.get("title"):
                lines += [f"### {b['title']}", ""]
            body = []
            for r in b["rows"]:
                cells = [cell_text(r, c).replace("|", "\\|") for c in cols]  # a | ends a cell
                if r.get("_mark"):
                    cells[0] += f" **{r['_mark']}**"
                body.append(cells)
            lines += [*markdown_table([header_text(c) for c in cols], body), ""]
            if b.get("note"):
                lines += [b["note"], ""]
        elif kind in ("reliability", "bars"):
            path = figure_path(b) if figure_path is not None else None
            if path:
                lines += [f"![{b.get('title') or 'figure'}]({path})", ""]
        elif kind == "privacy":
            lines += [f"**{b['title']}.** " + " ".join(privacy_sentences(b)), ""]
            per = b["report"].get("per_source") or {}
            if b.get("ledgers"):
                lines += _ledger_lines(b["ledgers"])
            elif len(per) > 1:
                spent = sorted({format_value(v["epsilon"], "number") for v in per.values()})
                lines += [f"Budget spent per source: ε = {', '.join(spent)}.", ""]
    if bullets:
        lines += [*bullets, ""]
    return lines


def _ledger_lines(ledgers: Sequence[Mapping[str, Any]]) -> list[str]:
    numbers = ("budget", "spent", "remaining")
    rows = [
        [str(x.get("source", "")), *(format_value(x.get(k), "number") for k in numbers)]
        for x in ledgers
    ]
    return [*markdown_table(["source", "budget ε", "spent ε", "remaining ε"], rows), ""]


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

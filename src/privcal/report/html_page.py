"""``privcal report``'s page: one self-contained HTML file from a report.

:func:`render_html` writes a :class:`~privcal.report.blocks.Report` as the page: inline CSS,
figures as inline SVG data URIs drawn by matplotlib without pyplot (text as paths, so no font
is fetched), a Content-Security-Policy that forbids every network request, and "What this
shows" first: findings computed from the numbers. :func:`write_html` reads the outputs in a
folder (:mod:`privcal.report.readers`) and writes their page.
"""

from __future__ import annotations

import base64
import html
import io
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from privcal import __version__
from privcal.report.blocks import ECE_UNIT_NOTE, Report, privacy_sentences, table
from privcal.report.figures import draw
from privcal.report.formatting import cell_text, format_value, header_text, plain
from privcal.report.readers import build, find_outputs

__all__ = ["render_html", "write_html"]


_CSS = """
:root { --fg:#1d2330; --muted:#5b6474; --line:#d9dde5; --bg:#fff; --soft:#f5f7fa;
  --accent:#1f5fa8; --bad:#b3261e; --badbg:#fdecea; --good:#1e7a3c; }
* { box-sizing: border-box; }
body { margin:0; background:var(--soft); color:var(--fg);
  font: 15px/1.55 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial,
  sans-serif; }
main { max-width: 1120px; margin: 0 auto; padding: 24px 28px 64px; background: var(--bg); }
h1 { font-size: 1.8rem; margin: 0.2em 0 0.3em; }
h2 { font-size: 1.35rem; margin: 2.2em 0 0.6em; padding-top: 0.6em;
  border-top: 2px solid var(--line); }
h3 { font-size: 1.05rem; margin: 1.4em 0 0.5em; }
p { margin: 0.6em 0; max-width: 78ch; }
code { background: var(--soft); padding: 0 0.25em; border-radius: 3px; font-size: 0.92em; }
dl.meta { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px;
  color: var(--muted); margin: 0 0 1em; }
dl.meta dt { font-weight: 600; } dl.meta dd { margin: 0; overflow-wrap: anywhere; }
.findings { background: #eef4fb; border-left: 5px solid var(--accent); padding: 10px 18px;
  margin: 1em 0 1.2em; border-radius: 4px; }
.findings h2 { border: 0; margin: 0.3em 0; padding: 0; }
.findings li { margin: 0.35em 0; }
.units { color: var(--muted); font-size: 0.92em; }
nav ol { columns: 2; margin: 0.4em 0; }
.tablewrap { overflow-x: auto; margin: 0.8em 0 1.2em; }
table { border-collapse: collapse; font-size: 0.9rem; min-width: 40%; }
caption { text-align: left; font-weight: 600; padding: 4px 0 6px; }
th, td { padding: 4px 10px; border-bottom: 1px solid var(--line); }
th { background: var(--soft); text-align: right; white-space: nowrap; }
th:first-child, td:first-child { text-align: left; }
tbody th { background: transparent; font-weight: 600; white-space: normal; }
details { margin: 0.6em 0; } summary { cursor: pointer; color: var(--accent); }
td { text-align: right; font-variant-numeric: tabular-nums; }
td.text, th.text { text-align: left; }
tbody tr:nth-child(even) { background: #fafbfc; }
tr.marked { background: var(--badbg) !important; }
tr.marked td:first-child { border-left: 4px solid var(--bad); }
.badge { display: inline-block; white-space: nowrap; margin-left: 6px; padding: 0 6px;
  border-radius: 8px; background: var(--bad); color: #fff; font-size: 0.78em; font-weight: 600; }
.note { color: var(--muted); font-size: 0.88em; margin-top: 4px; }
figure { margin: 1em 0 1.4em; }
figure img { max-width: 100%; height: auto; border: 1px solid var(--line); border-radius: 4px;
  background: #fff; }
figcaption { color: var(--muted); font-size: 0.9em; }
.privacy { background: #f7f5fc; border-left: 5px solid #6a4fb3; padding: 8px 18px;
  margin: 1em 0; border-radius: 4px; }
.privacy ul { margin: 0.4em 0 0.6em; padding-left: 1.2em; }
.error { background: var(--badbg); border-left: 5px solid var(--bad); padding: 8px 14px;
  white-space: pre-wrap; font-family: ui-monospace, monospace; font-size: 0.85em; }
footer { color: var(--muted); font-size: 0.85em; margin-top: 3em; }
"""

_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


def _inline(s: str) -> str:
    """Escape ``s`` and turn ``**bold**`` / ```code``` into tags."""
    out = html.escape(s)
    out = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", out)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", out)


def _svg_uri(block: Mapping[str, Any]) -> str:
    """The block's figure as an SVG data URI (text as paths: no font is needed)."""
    from matplotlib import rc_context

    fig = draw(block, suptitle=False)
    buf = io.BytesIO()
    with rc_context({"svg.fonttype": "path", "svg.hashsalt": "privcal"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    return "data:image/svg+xml;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _alt(block: Mapping[str, Any]) -> str:
    panels = block["panels"]
    if block["type"] == "reliability":
        parts = [f"{p['name']}: ECE {100 * p['ece']:.2f}%" for p in panels]
        return f"{block.get('title', 'Reliability diagram')}. " + "; ".join(parts) + "."
    return f"{block.get('title', 'Figure')}: " + "; ".join(p.get("title", "") for p in panels)


_TEXT = ' class="text"'


def _table_html(b: Mapping[str, Any]) -> str:
    cols = b["columns"]
    src = html.escape(str(b.get("source", "")), quote=True)
    head = "".join(
        f'<th scope="col"{_TEXT if c["unit"] == "text" else ""}>{html.escape(header_text(c))}</th>'
        for c in cols
    )
    body = []
    for r in b["rows"]:
        cells = []
        for i, c in enumerate(cols):
            value = r.get(c["key"])
            attrs = f' data-key="{html.escape(c["key"], quote=True)}"'
            numeric = (
                c["unit"] != "text"
                and isinstance(value, (int, float))
                and not isinstance(value, bool)
                and math.isfinite(float(value))
            )
            if numeric:
                attrs += f' data-value="{float(value)!r}" data-unit="{c["unit"]}"'
                se = r.get(c["se"]) if "se" in c else None
                if isinstance(se, (int, float)) and math.isfinite(float(se)):
                    attrs += f' data-se="{float(se)!r}"'
            elif i > 0:  # the row's header cell is left-aligned already
                attrs += _TEXT
            content = html.escape(cell_text(r, c))
            if i == 0 and r.get("_mark"):
                content += f'<span class="badge">{html.escape(str(r["_mark"]))}</span>'
            tag = "th" if i == 0 else "td"
            scope = ' scope="row"' if i == 0 else ""
            cells.append(f"<{tag}{scope}{attrs}>{content}</{tag}>")
        cls = ' class="marked"' if r.get("_mark") else ""
        body.append(f"<tr{cls}>{''.join(cells)}</tr>")
    caption = f"<caption>{_inline(b['title'])}</caption>" if b.get("title") else ""
    note = f'<p class="note">{_inline(b["note"])}</p>' if b.get("note") else ""
    return (
        f'<div class="tablewrap"><table data-source="{src}">{caption}<thead><tr>{head}</tr>'
        f"</thead><tbody>{''.join(body)}</tbody></table>{note}</div>"
    )


def _privacy_html(b: Mapping[str, Any]) -> str:
    items = "".join(f"<li>{_inline(s)}</li>" for s in privacy_sentences(b))
    parts = [f'<section class="privacy"><h3>{_inline(b["title"])}</h3><ul>{items}</ul>']
    src = str(b.get("source", ""))
    per = b["report"].get("per_source") or {}
    if b.get("ledgers"):
        ledgers = b["ledgers"]
        summary = (
            f"{len(ledgers)} ledgers: budget ε {_span(x.get('budget') for x in ledgers)}, spent "
            f"{_span(x.get('spent') for x in ledgers)}, remaining "
            f"{_span(x.get('remaining') for x in ledgers)}"
        )
        cols: list[tuple[str, ...]] = [("source", "Source")]
        cols += [(k, f"{k.capitalize()} ε", "number") for k in ("budget", "spent", "remaining")]
        title = "Ledgers after the run (budget per source)"
        parts.append(_collapse(summary, table(title, cols, ledgers, source=src)))
    elif per:
        rows = [{"source": s or "(one source)", **v} for s, v in per.items()]
        summary = f"{len(rows)} sources: ε spent " + _span(r.get("epsilon") for r in rows)
        cols = [
            ("source", "Source"),
            ("epsilon", "ε spent", "number"),
            ("delta", "δ spent", "number"),
        ]
        parts.append(_collapse(summary, table("Budget spent per source", cols, rows, source=src)))
    parts.append("</section>")
    return "".join(parts)


def _span(values: Any) -> str:
    """``"1"`` when every value is 1, else ``"0.5 to 1"``."""
    xs = [float(v) for v in values if isinstance(v, (int, float))]
    if not xs:
        return "-"
    lo, hi = min(xs), max(xs)
    low, high = format_value(lo, "number"), format_value(hi, "number")
    return low if lo == hi else f"{low} to {high}"


def _collapse(summary: str, block: Mapping[str, Any], limit: int = 8) -> str:
    """The table ``block``, folded under ``summary`` when it has more than ``limit`` rows."""
    inner = _table_html(block)
    if len(block["rows"]) <= limit:
        return inner
    return f"<details><summary>{html.escape(summary)}</summary>{inner}</details>"


def _block_html(b: Mapping[str, Any]) -> str:
    kind = b["type"]
    if kind == "text":
        return f"<p>{_inline(b['text'])}</p>"
    if kind == "table":
        return _table_html(b)
    if kind in ("reliability", "bars"):
        cap = f"<figcaption>{_inline(b['title'])}</figcaption>" if b.get("title") else ""
        alt = html.escape(plain(_alt(b)), quote=True)
        return f'<figure><img alt="{alt}" src="{_svg_uri(b)}">{cap}</figure>'
    if kind == "privacy":
        return _privacy_html(b)
    return ""


def _anchor(i: int) -> str:
    return f"s{i + 1}"


def render_html(report: Report) -> str:
    """The page as one HTML string (no external resource of any kind)."""
    title = html.escape(report.title)
    meta = "".join(f"<dt>{html.escape(k)}</dt><dd>{_inline(v)}</dd>" for k, v in report.meta if v)
    findings = "".join(f"<li>{_inline(t)}</li>" for t in report.takeaways)
    toc = "".join(
        f'<li><a href="#{_anchor(i)}">{html.escape(s["title"])}</a>'
        + (" (failed)" if s.get("error") else "")
        + "</li>"
        for i, s in enumerate(report.sections)
    )
    body = []
    for i, s in enumerate(report.sections):
        body.append(f'<section id="{_anchor(i)}"><h2>{html.escape(s["title"])}</h2>')
        body += [_block_html(b) for b in s["blocks"] if b["type"] != "takeaway"]
        if s.get("error"):
            body.append(
                f'<p><strong>This section failed:</strong></p><div class="error">'
                f"{html.escape(s['error'])}</div>"
            )
        body.append("</section>")
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{_CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="privcal {__version__}">
<title>{title}</title>
<style>{_CSS}</style>
</head>
<body>
<main>
<h1>{title}</h1>
<dl class="meta">{meta}</dl>
<section class="findings" aria-labelledby="findings"><h2 id="findings">What this shows</h2>
<ul>{findings or "<li>No findings recorded.</li>"}</ul></section>
<p class="units">Units: {html.escape(ECE_UNIT_NOTE)}</p>
<nav aria-label="Contents"><h2>Contents</h2><ol>{toc}</ol></nav>
{"".join(body)}
<footer>Written by privcal {__version__} from the machine-readable outputs named in each
table's source; self-contained (no network, no external files).</footer>
</main>
</body>
</html>
"""


def write_html(path: str | Path, out: str | Path) -> Path:
    """Find the outputs in ``path``, build the page and write it to ``out``."""
    report = build(find_outputs(path))
    out = Path(out)
    out.write_text(render_html(report), encoding="utf-8")
    return out

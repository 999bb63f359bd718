"""The report document: JSON-able blocks that both ``report.md`` and ``report.html`` render.

Every number a report shows lives in a block as its raw value (metrics as fractions, never
pre-formatted), so the Markdown page, the HTML page and the ``results.json`` they come from
cannot disagree, and one unit rule holds everywhere (:data:`UNITS`): calibration errors and
accuracies are shown **in percent** (ECE 0.031 is "3.10"), their differences in percentage
points.

Blocks are plain dicts with a ``"type"``:

* ``text``: a paragraph (``**bold**`` and ```code``` are the only markup);
* ``takeaway``: one finding computed from the numbers (collected under "What this shows");
* ``table``: ``columns`` (:func:`column`) and ``rows`` (dicts of raw values); a row's
  ``"_mark"`` flags it (a marked row);
* ``reliability``: before/after reliability diagrams from per-bin data
  (:func:`reliability_figure`);
* ``bars``: bar charts and histograms from counts (:func:`bar_figure`);
* ``privacy``: a :class:`~privcal.privacy.PrivacyReport` in words (:func:`privacy_block`).

:func:`draw` turns a figure block into a :class:`matplotlib.figure.Figure` (no pyplot),
:func:`to_markdown` renders a list of blocks as Markdown lines.
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from privcal.metrics import Reliability
    from privcal.privacy import PrivacyReport

__all__ = [
    "ECE_UNIT_NOTE",
    "UNITS",
    "bar_figure",
    "column",
    "draw",
    "format_value",
    "jsonable",
    "privacy_block",
    "privacy_sentences",
    "reliability_data",
    "reliability_figure",
    "table",
    "takeaway",
    "text",
    "to_markdown",
]

#: Column units: how a raw value is shown, and the suffix its header gets.
UNITS: dict[str, str] = {
    "text": "",
    "percent": " (%)",  # a fraction shown x 100 with 2 decimals
    "pp": " (pp)",  # a difference of fractions, shown x 100, signed
    "fraction": "",  # 4 decimals
    "count": "",  # an integer
    "number": "",  # 4 significant digits
    "ratio": "",  # 2 decimals
    "epsilon": "",  # a privacy budget ("inf" for none)
}
#: Said once on every report that shows ECE.
ECE_UNIT_NOTE = (
    "Calibration errors (ECE, classwise ECE) and accuracies are in percent (ECE 0.031 is "
    "3.10%), differences in percentage points (pp); ECE uses 15 equal-width bins of the top-label "
    "confidence unless a table says otherwise."
)


def jsonable(obj: Any) -> Any:
    """``obj`` with NumPy values as Python ones and non-finite floats as JSON can hold them.

    ``inf`` / ``-inf`` become the strings ``"inf"`` / ``"-inf"`` (an epsilon of ``inf`` is the
    non-private twin), ``nan`` becomes ``None``.
    """
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [jsonable(v) for v in obj.tolist()]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        x = float(obj)
        if math.isnan(x):
            return None
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        return x
    return obj


# -- blocks ---------------------------------------------------------------------------------------


def text(s: str) -> dict[str, Any]:
    """A paragraph."""
    return {"type": "text", "text": str(s)}


def takeaway(s: str) -> dict[str, Any]:
    """One finding, computed from the numbers by the caller; listed under "What this shows"."""
    return {"type": "takeaway", "text": str(s)}


def column(
    key: str, label: str, unit: str = "text", *, se: str | None = None, digits: int | None = None
) -> dict[str, Any]:
    """A table column: the row key it shows, its header, its unit (:data:`UNITS`) and,
    optionally, the row key of its standard error (shown as ``value ± se``)."""
    if unit not in UNITS:
        raise ValueError(
            f"The 'unit' parameter of column must be one of {', '.join(UNITS)}. Got {unit!r} "
            "instead."
        )
    out: dict[str, Any] = {"key": key, "label": label, "unit": unit}
    if se is not None:
        out["se"] = se
    if digits is not None:
        out["digits"] = int(digits)
    return out


def table(
    title: str,
    columns: Sequence[dict[str, Any]],
    rows: Sequence[Mapping[str, Any]],
    *,
    note: str | None = None,
    source: str | None = None,
) -> dict[str, Any]:
    """A table block. ``rows`` hold raw values (fractions for metrics); ``source`` names the
    file the rows were read from when they were not made by the writer of the block."""
    out: dict[str, Any] = {
        "type": "table",
        "title": title,
        "columns": list(columns),
        "rows": [jsonable(dict(r)) for r in rows],
    }
    if note:
        out["note"] = note
    if source:
        out["source"] = source
    return out


def reliability_data(rel: Reliability) -> dict[str, Any]:
    """The per-bin data of :class:`privcal.metrics.Reliability` as JSON (NaN -> ``None``)."""
    return rel.to_dict()


def _reliability(d: Mapping[str, Any]) -> Reliability:
    from privcal.metrics import Reliability

    return Reliability.from_dict(d)


def reliability_figure(
    title: str, panels: Sequence[tuple[str, Reliability | Mapping[str, Any]]]
) -> dict[str, Any]:
    """Reliability diagrams with confidence histograms, one panel per ``(name, reliability)``
    (e.g. before and after calibration, on the same labels)."""
    out = []
    for name, rel in panels:
        data = dict(rel) if isinstance(rel, Mapping) else reliability_data(rel)
        out.append({"name": name, **data})
    return {"type": "reliability", "title": title, "panels": out}


def bar_figure(title: str, panels: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Bar charts from counts. Each panel: ``title``, ``xlabel``, ``ylabel``, ``series`` (a list
    of ``{"name", "x", "y"}`` drawn as grouped bars, or ``{"name", "edges", "counts"}`` drawn as
    a step histogram) and optionally ``vline`` (a reference value, e.g. the target coverage)."""
    return {"type": "bars", "title": title, "panels": jsonable(list(panels))}


def privacy_block(
    report: PrivacyReport | Mapping[str, Any],
    *,
    trust: str,
    ledgers: Sequence[Mapping[str, Any]] | None = None,
    title: str = "Privacy",
    source: str | None = None,
) -> dict[str, Any]:
    """A privacy report in words: the guarantee (unit, relation), what is public, who is
    trusted (``trust``, said by the caller, who knows the deployment), the budget spent per
    source and, when known, each ledger's state (``source``, ``budget``, ``spent``,
    ``remaining``)."""
    rep = dict(report) if isinstance(report, Mapping) else report.to_dict()
    out: dict[str, Any] = {
        "type": "privacy",
        "title": title,
        "report": jsonable(rep),
        "trust": trust,
    }
    if ledgers is not None:
        out["ledgers"] = jsonable([dict(x) for x in ledgers])
    if source:
        out["source"] = source
    return out


def privacy_sentences(block: Mapping[str, Any]) -> list[str]:
    """The privacy block in words (one sentence each)."""
    rep = block["report"]
    per = rep.get("per_source") or {}
    eps, delta = rep.get("epsilon"), rep.get("delta") or 0.0
    unit, relation = rep.get("unit", "example"), rep.get("relation", "add/remove")
    neighbour = (
        f"adding or removing one {unit}"
        if relation == "add/remove"
        else f"substituting one {unit} (the number of {unit}s is public)"
    )
    dp = f"(ε = {_g(eps)}, δ = {_g(delta)})-DP" if delta else f"ε = {_g(eps)}-DP (pure)"
    n_src = len(per)
    where = (
        f"each of the {n_src} sources spent at most ε = {_g(eps)} (basic composition within a "
        "source, parallel composition across sources, which hold disjoint data)"
        if n_src > 1
        else "all releases compose by basic composition"
    )
    mechanisms = sorted({r.get("mechanism", "") for r in rep.get("releases", [])} - {""})
    out = [
        f"Guarantee: {dp} for {neighbour} ({unit}-level, {relation}); {where}.",
        f"Releases: {len(rep.get('releases', []))}"
        + (f" ({', '.join(mechanisms)} mechanism)" if mechanisms else "")
        + ".",
        "Public (used without noise): "
        + ("; ".join(rep.get("public") or []) or "nothing declared")
        + ".",
        f"Trusted: {block['trust']}",
    ]
    if rep.get("threat"):
        out.append("Threat model (from the report): " + "; ".join(rep["threat"]) + ".")
    status = rep.get("status", "private")
    if status != "private":
        out.append(
            f"Status: **{status}**: the noise came from a seeded generator, so these numbers "
            "are a reproducible simulation of the mechanism, not a private release."
        )
    else:
        out.append("Status: private (secure noise).")
    return out


def _g(x: Any) -> str:
    if isinstance(x, str):
        return x
    return "-" if x is None else f"{float(x):.4g}"


# -- formatting -----------------------------------------------------------------------------------


def format_value(value: Any, unit: str, digits: int | None = None) -> str:
    """``value`` as a table shows it (see :data:`UNITS`); missing values are ``-``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if unit == "text" or isinstance(value, str):
        return str(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    x = float(value)
    if unit == "percent":
        return f"{100.0 * x:.{2 if digits is None else digits}f}"
    if unit == "pp":
        return f"{100.0 * x:+.{2 if digits is None else digits}f}"
    if unit == "fraction":
        return f"{x:.{4 if digits is None else digits}f}"
    if unit == "count":
        return f"{round(x):d}"
    if unit == "ratio":
        return f"{x:.{2 if digits is None else digits}f}"
    if unit == "epsilon":
        return "inf" if math.isinf(x) else f"{x:g}"
    return f"{x:.{4 if digits is None else digits}g}"


def _se_text(value: Any, unit: str, digits: int | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    shown = format_value(value, "percent" if unit == "pp" else unit, digits).lstrip("+")
    return f" ± {shown}"


def cell_text(row: Mapping[str, Any], col: Mapping[str, Any]) -> str:
    """The text of one cell: the value and, for columns with ``se``, ``± se``."""
    value = row.get(col["key"])
    out = format_value(value, col["unit"], col.get("digits"))
    if "se" in col and out != "-":
        out += _se_text(row.get(col["se"]), col["unit"], col.get("digits"))
    return out


def header_text(col: Mapping[str, Any]) -> str:
    """A column header with its unit suffix (``ECE (%)``)."""
    suffix = UNITS[col["unit"]]
    label = str(col["label"])
    return label if suffix.strip() in label else label + suffix


# -- figures --------------------------------------------------------------------------------------


def _wrap(title: str, width: int) -> str:
    return "\n".join(textwrap.wrap(title, width)) if title else title


def draw(block: Mapping[str, Any], *, suptitle: bool = True) -> Figure:
    """The figure of a ``reliability`` or ``bars`` block (a standalone Figure, no pyplot).

    Panel titles are wrapped to the panel's width, so none is clipped; ``suptitle=False``
    leaves the block's title out (a page that captions the figure itself).
    """
    from matplotlib.figure import Figure

    from privcal.plots import ReliabilityDisplay

    kind = block["type"]
    panels = block["panels"]
    n = len(panels)
    if kind == "reliability":
        fig = Figure(figsize=(4.2 * n, 5.6), layout="constrained")
        grid = fig.add_gridspec(2, n, height_ratios=(3, 1))
        for i, p in enumerate(panels):
            top = fig.add_subplot(grid[0, i])
            bottom = fig.add_subplot(grid[1, i], sharex=top)
            ReliabilityDisplay(_reliability(p), name=_wrap(p["name"], 34)).plot(ax=(top, bottom))
    elif kind == "bars":
        fig = Figure(figsize=(5.0 * n, 3.8), layout="constrained")
        axes = fig.subplots(1, n, squeeze=False)[0]
        for ax, p in zip(axes, panels, strict=True):
            _draw_bars(ax, p)
    else:
        raise ValueError(
            f"The 'block' parameter of draw must be a 'reliability' or 'bars' block. Got type "
            f"{kind!r} instead."
        )
    if suptitle and block.get("title"):
        fig.suptitle(_wrap(block["title"], int(60 * n)))
    return fig


def _draw_bars(ax: Any, panel: Mapping[str, Any]) -> None:
    series = panel["series"]
    grouped = [s for s in series if "x" in s]
    width = 0.8 / max(len(grouped), 1)
    for i, s in enumerate(grouped):
        x = np.asarray(s["x"], dtype=float) + (i - (len(grouped) - 1) / 2) * width
        ax.bar(x, s["y"], width, label=s["name"])
    if grouped:
        ax.set_xticks(np.asarray(grouped[0]["x"], dtype=float))
    for s in series:
        if "edges" in s:
            ax.stairs(s["counts"], s["edges"], linewidth=1.5, label=s["name"])
    if panel.get("vline") is not None:
        ax.axvline(float(panel["vline"]), color="k", linestyle="--", linewidth=1)
    ax.set_xlabel(panel.get("xlabel", ""))
    ax.set_ylabel(panel.get("ylabel", ""))
    if panel.get("title"):
        ax.set_title(_wrap(panel["title"], 44), fontsize="medium")
    if len(series) > 1:
        ax.legend(fontsize="small")


# -- Markdown -------------------------------------------------------------------------------------


def _md_escape(s: str) -> str:
    return s.replace("|", "\\|")


def to_markdown(
    blocks: Sequence[Mapping[str, Any]],
    figure_path: Callable[[Mapping[str, Any]], str | None] = lambda b: None,
) -> list[str]:
    """Markdown lines of ``blocks``; ``figure_path(block)`` gives the image link of a figure
    block (``None``: the figure is left out). Takeaways are rendered as a bullet list."""
    from privcal.experiments.report import markdown_table

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
                cells = [_md_escape(cell_text(r, c)) for c in cols]
                if r.get("_mark"):
                    cells[0] += f" **{r['_mark']}**"
                body.append(cells)
            lines += [*markdown_table([header_text(c) for c in cols], body), ""]
            if b.get("note"):
                lines += [b["note"], ""]
        elif kind in ("reliability", "bars"):
            path = figure_path(b)
            if path:
                lines += [f"![{b.get('title') or 'figure'}]({path})", ""]
        elif kind == "privacy":
            lines += [f"**{b['title']}.** " + " ".join(privacy_sentences(b)), ""]
            per = b["report"].get("per_source") or {}
            if b.get("ledgers"):
                lines += _ledger_lines(b["ledgers"])
            elif len(per) > 1:
                spent = sorted({_g(v["epsilon"]) for v in per.values()})
                lines += [f"Budget spent per source: ε = {', '.join(spent)}.", ""]
    if bullets:
        lines += [*bullets, ""]
    return lines


def _ledger_lines(ledgers: Sequence[Mapping[str, Any]]) -> list[str]:
    from privcal.experiments.report import markdown_table

    rows = [
        [str(x.get("source", "")), _g(x.get("budget")), _g(x.get("spent")), _g(x.get("remaining"))]
        for x in ledgers
    ]
    return [*markdown_table(["source", "budget ε", "spent ε", "remaining ε"], rows), ""]


def plain(s: str) -> str:
    """``s`` without the ``**`` / backtick markup."""
    return re.sub(r"\*\*|`", "", s)

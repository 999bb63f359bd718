"""The report document: JSON-able blocks that ``report.md`` and ``report.html`` both render.

Every number a report shows lives in a block as its raw value (metrics as fractions, never
pre-formatted), so the Markdown page, the HTML page and the ``results.json`` they come from
cannot disagree; they are written by one unit rule (:data:`~privcal.report.formatting.UNITS`).

Blocks are plain dicts with a ``"type"``:

* ``text``: a paragraph (``**bold**`` and ```code``` are the only markup);
* ``takeaway``: one finding computed from the numbers (collected under "What this shows");
* ``table``: ``columns`` (:func:`column`) and ``rows`` (dicts of raw values); a row's
  ``"_mark"`` flags it (a marked row);
* ``reliability``: before/after reliability diagrams from per-bin data
  (:func:`reliability_figure`);
* ``bars``: bar charts and histograms from counts (:func:`bar_figure`);
* ``privacy``: a :class:`~privcal.privacy.PrivacyReport` in words (:func:`privacy_block`).

A :class:`Report` is a page of titled sections of blocks (what ``privcal report`` renders).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from privcal.report.formatting import UNITS, format_value, jsonable

if TYPE_CHECKING:
    from privcal.metrics import Reliability
    from privcal.privacy import PrivacyReport

__all__ = [
    "ECE_UNIT_NOTE",
    "Report",
    "bar_figure",
    "column",
    "privacy_block",
    "privacy_sentences",
    "reliability_data",
    "reliability_figure",
    "table",
    "takeaway",
    "text",
]

#: Said once on every report that shows ECE.
ECE_UNIT_NOTE = (
    "Calibration errors (ECE, classwise ECE) and accuracies are in percent (ECE 0.031 is "
    "3.10%), differences in percentage points (pp); ECE uses 15 equal-width bins of the top-label "
    "confidence unless a table says otherwise."
)


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
    columns: Sequence[dict[str, Any] | tuple[str, ...]],
    rows: Sequence[Mapping[str, Any]],
    *,
    note: str | None = None,
    source: str | None = None,
) -> dict[str, Any]:
    """A table block. ``columns`` are :func:`column` dicts or the ``(key, label[, unit])`` of
    one; ``rows`` hold raw values (fractions for metrics); ``source`` names the file the rows
    were read from when they were not made by the writer of the block."""
    out: dict[str, Any] = {
        "type": "table",
        "title": title,
        "columns": [c if isinstance(c, dict) else column(*c) for c in columns],
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
    eps_text, delta_text = format_value(eps, "number"), format_value(delta, "number")
    dp = f"(ε = {eps_text}, δ = {delta_text})-DP" if delta else f"ε = {eps_text}-DP (pure)"
    n_src = len(per)
    where = (
        f"each of the {n_src} sources spent at most ε = {eps_text} (basic composition within a "
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


@dataclass
class Report:
    """The page: a title, run details, findings and sections of blocks."""

    title: str
    meta: list[tuple[str, str]] = field(default_factory=list)
    sections: list[dict[str, Any]] = field(default_factory=list)

    @property
    def takeaways(self) -> list[str]:
        return [b["text"] for s in self.sections for b in s["blocks"] if b["type"] == "takeaway"]

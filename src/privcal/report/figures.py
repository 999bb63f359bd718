"""Figures of report blocks: :func:`draw` turns a ``reliability`` or ``bars`` block
(:mod:`privcal.report.blocks`) into a standalone :class:`matplotlib.figure.Figure` (no pyplot),
for ``report.md``'s PNG files and ``report.html``'s inline SVG.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["draw"]


def _wrap(title: str, width: int) -> str:
    return "\n".join(textwrap.wrap(title, width)) if title else title


def draw(block: Mapping[str, Any], *, suptitle: bool = True) -> Figure:
    """The figure of a ``reliability`` or ``bars`` block (a standalone Figure, no pyplot).

    Panel titles are wrapped to the panel's width, so none is clipped; ``suptitle=False``
    leaves the block's title out (a page that captions the figure itself).
    """
    from matplotlib.figure import Figure

    from privcal.metrics import Reliability
    from privcal.plots import reliability_panels

    kind = block["type"]
    panels = block["panels"]
    n = len(panels)
    if kind == "reliability":
        rels = [Reliability.from_dict(p) for p in panels]
        fig = reliability_panels(rels, [_wrap(p["name"], 34) for p in panels])
        fig.set_size_inches(4.2 * n, 5.6)
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

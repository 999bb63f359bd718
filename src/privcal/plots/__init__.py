"""Figures for calibration: reliability diagrams (drawing only; compute is in
:mod:`privcal.metrics`)."""

from privcal.plots.reliability import (
    ReliabilityDisplay,
    before_after,
    reliability_diagram,
    reliability_panels,
    save_figure,
    subplots,
)

__all__ = [
    "ReliabilityDisplay",
    "before_after",
    "reliability_diagram",
    "reliability_panels",
    "save_figure",
    "subplots",
]

"""Reliability diagrams (drawing only; the numbers come from :func:`privcal.metrics.reliability`).

The layout follows seed 001, Fig. 3 (after Guo et al., 2017): the top panel shows the accuracy of
each confidence bin as a bar next to the diagonal :math:`\\mathrm{acc} = \\mathrm{conf}`, with the
gap :math:`\\mathrm{conf}(B_m) - \\mathrm{acc}(B_m)` shaded and the ECE in the legend; the bottom
panel is the confidence histogram (examples per bin) with vertical lines at the mean accuracy
and the mean confidence.

No pyplot state is touched: figures are :class:`matplotlib.figure.Figure` objects, which render
with the Agg canvas whatever backend the user has selected.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from matplotlib.axes import Axes
from matplotlib.container import BarContainer
from matplotlib.figure import Figure

from privcal.metrics import Reliability, reliability

__all__ = ["ReliabilityDisplay", "before_after", "reliability_diagram", "save_figure", "subplots"]

Input = Literal["probs", "logits"]
Binning = Literal["width", "mass"]

_BAR = "#1f5fa8"
_GAP = "#d62728"
_HIST = "#7f7f7f"


def _new_figure(n_columns: int = 1) -> tuple[Figure, list[tuple[Axes, Axes]]]:
    """A figure with ``n_columns`` (reliability, histogram) panel pairs, histograms below."""
    fig = Figure(figsize=(4.2 * n_columns, 5.4), layout="constrained")
    grid = fig.add_gridspec(2, n_columns, height_ratios=(3, 1))
    pairs = []
    for col in range(n_columns):
        top = fig.add_subplot(grid[0, col])
        bottom = fig.add_subplot(grid[1, col], sharex=top)
        pairs.append((top, bottom))
    return fig, pairs


def _bar_style(edges: np.ndarray) -> dict[str, Any]:
    """One bar per bin: from its left edge, as wide as the bin, outlined."""
    return {"width": np.diff(edges), "align": "edge", "linewidth": 0.6}


class ReliabilityDisplay:
    """Reliability diagram visualisation (scikit-learn's Display pattern).

    Build it with :meth:`from_predictions` or :meth:`from_reliability`; both draw immediately and
    return the display.  Call :meth:`plot` again to draw the same data on other axes.

    Parameters
    ----------
    reliability : privcal.metrics.Reliability
        Per-bin edges, counts, accuracy, mean confidence and the ECE.
    name : str, optional
        Title of the reliability panel (for example the model or calibrator).

    Attributes
    ----------
    figure_ : matplotlib.figure.Figure
        The figure drawn on.
    ax_ : matplotlib.axes.Axes
        The reliability panel.
    hist_ax_ : matplotlib.axes.Axes or None
        The confidence-histogram panel (``None`` when :meth:`plot` got a single Axes).
    bars_ : matplotlib.container.BarContainer
        One accuracy bar per bin (height 0 for empty bins).
    gap_bars_ : matplotlib.container.BarContainer
        One shaded gap bar per bin, from the accuracy to the mean confidence.
    hist_bars_ : matplotlib.container.BarContainer or None
        One histogram bar per bin.

    Examples
    --------
    >>> import numpy as np
    >>> probs = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]])
    >>> disp = ReliabilityDisplay.from_predictions(probs, [0, 0, 1], n_bins=5)
    >>> len(disp.bars_)
    5
    """

    def __init__(self, reliability: Reliability, *, name: str | None = None) -> None:
        self.reliability = reliability
        self.name = name

    @classmethod
    def from_reliability(
        cls,
        reliability: Reliability,
        *,
        name: str | None = None,
        ax: Axes | Sequence[Axes] | None = None,
    ) -> ReliabilityDisplay:
        """Draw precomputed :class:`~privcal.metrics.Reliability` data; see :meth:`plot`."""
        if not isinstance(reliability, Reliability):
            raise ValueError(
                "The 'reliability' parameter of ReliabilityDisplay.from_reliability must be a "
                f"privcal.metrics.Reliability. Got {type(reliability).__name__} instead."
            )
        return cls(reliability, name=name).plot(ax=ax)

    @classmethod
    def from_predictions(
        cls,
        probs: object,
        labels: object,
        n_bins: int = 15,
        binning: Binning = "width",
        *,
        input: Input = "probs",
        name: str | None = None,
        ax: Axes | Sequence[Axes] | None = None,
    ) -> ReliabilityDisplay:
        """Compute :func:`privcal.metrics.reliability` on ``probs``/``labels`` and draw it.

        Input validation (shape, finiteness, rows summing to 1, label range, ``n_bins``) is
        :func:`~privcal.metrics.reliability`'s; its ``ValueError`` propagates unchanged.
        """
        rel = reliability(probs, labels, n_bins=n_bins, binning=binning, input=input)
        return cls(rel, name=name).plot(ax=ax)

    def plot(self, ax: Axes | Sequence[Axes] | None = None) -> ReliabilityDisplay:
        """Draw the diagram.

        Parameters
        ----------
        ax : None, Axes or pair of Axes
            ``None`` (default) creates a new figure with the reliability panel above the
            confidence histogram; a pair ``(top, bottom)`` draws both panels there; a single
            Axes draws only the reliability panel.

        Returns
        -------
        ReliabilityDisplay
            ``self``, with the ``*_`` attributes set.
        """
        if ax is None:
            _, pairs = _new_figure(1)
            top, bottom = pairs[0]
        elif isinstance(ax, Axes):
            top, bottom = ax, None
        else:
            axes = tuple(ax)
            if len(axes) != 2 or not all(isinstance(a, Axes) for a in axes):
                raise ValueError(
                    "The 'ax' parameter of ReliabilityDisplay.plot must be None, an Axes or a "
                    f"pair (top, bottom) of Axes. Got {ax!r} instead."
                )
            top, bottom = axes
        self.ax_ = top
        self.hist_ax_ = bottom
        figure = top.get_figure()
        assert isinstance(figure, Figure)
        self.figure_ = figure
        self._draw_reliability(top)
        self.hist_bars_ = self._draw_histogram(bottom) if bottom is not None else None
        return self

    # -- drawing -------------------------------------------------------------------------------
    def _draw_reliability(self, ax: Axes) -> None:
        rel = self.reliability
        left, full = rel.edges[:-1], rel.counts > 0
        acc = np.where(full, rel.accuracy, 0.0)
        conf = np.where(full, rel.confidence, 0.0)
        bar = _bar_style(rel.edges)
        self.bars_ = ax.bar(left, acc, color=_BAR, edgecolor="black", label="Accuracy", **bar)
        gap: dict[str, Any] = {"color": _GAP, "alpha": 0.3, "edgecolor": _GAP, "hatch": "//"}
        self.gap_bars_ = ax.bar(left, conf - acc, bottom=acc, label="Gap", **gap, **bar)
        ax.plot([0, 1], [0, 1], ls="--", color="black", lw=1.0, label="Perfect calibration")
        # An invisible handle carries the ECE into the legend.
        ax.plot([], [], " ", label=f"ECE = {100.0 * rel.ece:.2f}%")
        ax.set_xlim(0.0, 1.0)
        ax.set_ylim(0.0, 1.0)
        ax.set_ylabel("Accuracy")
        ax.set_aspect("auto")
        ax.legend(loc="upper left", fontsize="small", frameon=True)
        if self.name:
            ax.set_title(self.name)
        if self.hist_ax_ is None:
            ax.set_xlabel("Confidence")

    def _draw_histogram(self, ax: Axes) -> BarContainer:
        rel = self.reliability
        bars = ax.bar(
            rel.edges[:-1], rel.counts, color=_HIST, edgecolor="black", **_bar_style(rel.edges)
        )
        total = float(rel.counts.sum())
        full = rel.counts > 0
        # Count-weighted means of the per-bin averages = overall accuracy and mean confidence.
        mean_acc = float(np.sum(rel.counts[full] * rel.accuracy[full]) / total)
        mean_conf = float(np.sum(rel.counts[full] * rel.confidence[full]) / total)
        lines = ((mean_acc, _BAR, "-", "Accuracy"), (mean_conf, _GAP, "--", "Avg. confidence"))
        for value, color, style, what in lines:
            ax.axvline(value, color=color, ls=style, lw=1.5, label=f"{what} {value:.2f}")
        ax.set_xlim(0.0, 1.0)
        ax.set_xlabel("Confidence")
        ax.set_ylabel("Count")
        ax.legend(loc="best", fontsize="x-small", frameon=True)
        self.mean_accuracy_ = mean_acc
        self.mean_confidence_ = mean_conf
        return bars


def reliability_diagram(
    probs: object,
    labels: object,
    n_bins: int = 15,
    binning: Binning = "width",
    *,
    input: Input = "probs",
    title: str | None = None,
) -> Figure:
    """A one-panel-pair reliability diagram of ``probs`` (see :class:`ReliabilityDisplay`).

    Returns
    -------
    matplotlib.figure.Figure
        Two Axes: the reliability panel and the confidence histogram below it.
    """
    return ReliabilityDisplay.from_predictions(
        probs, labels, n_bins=n_bins, binning=binning, input=input, name=title
    ).figure_


def before_after(
    probs_before: object,
    probs_after: object,
    labels: object,
    titles: Sequence[str] = ("Before calibration", "After calibration"),
    n_bins: int = 15,
    binning: Binning = "width",
    *,
    input_before: Input = "probs",
    input_after: Input = "probs",
) -> Figure:
    """Side-by-side reliability diagrams of the same labels before and after calibration.

    Parameters
    ----------
    probs_before, probs_after : array-like of shape (N, C)
        Scores before and after calibration (probabilities unless ``input_*="logits"``).
    labels : array-like of shape (N,)
    titles : pair of str
        Panel titles.

    Returns
    -------
    matplotlib.figure.Figure
        Four Axes: two reliability panels on top, their histograms below.
    """
    names = tuple(titles)
    if len(names) != 2 or not all(isinstance(t, str) for t in names):
        raise ValueError(
            f"The 'titles' parameter of before_after must be a pair of str. Got {titles!r} instead."
        )
    scores = ((probs_before, input_before), (probs_after, input_after))
    rels = [reliability(p, labels, n_bins=n_bins, binning=binning, input=i) for p, i in scores]
    return reliability_panels(rels, names)


def reliability_panels(reliabilities: Sequence[Reliability], titles: Sequence[str]) -> Figure:
    """Side-by-side reliability diagrams of precomputed :class:`~privcal.metrics.Reliability`
    data (one panel pair per entry), e.g. of top-label confidences before and after a
    top-label calibrator.

    Returns
    -------
    matplotlib.figure.Figure
        Two Axes per entry: the reliability panels on top, their histograms below.
    """
    rels, names = tuple(reliabilities), tuple(titles)
    if not rels or len(names) != len(rels):
        raise ValueError(
            "The 'titles' parameter of reliability_panels must name each reliability "
            f"({len(rels)}). Got {len(names)} titles instead."
        )
    fig, pairs = _new_figure(len(rels))
    for rel, name, pair in zip(rels, names, pairs, strict=True):
        ReliabilityDisplay.from_reliability(rel, name=name, ax=pair)
    return fig


def subplots(
    nrows: int = 1, ncols: int = 1, *, figsize: tuple[float, float] | None = None, **kwargs: Any
) -> tuple[Figure, Any]:
    """``matplotlib.pyplot.subplots`` without pyplot: a standalone :class:`Figure` and its axes.

    Library code never touches pyplot's global figure registry or backend, so it is safe in
    threads and servers and never changes the caller's backend; :func:`save_figure` writes it.
    """
    fig = Figure(figsize=figsize)
    return fig, fig.subplots(nrows, ncols, **kwargs)


def save_figure(fig: Figure, path: str | Path, *, dpi: int = 120, **kwargs: Any) -> Path:
    """Save ``fig`` (PNG unless the suffix says ``.pdf``/``.svg``), creating parent folders.

    Returns
    -------
    pathlib.Path
        The path written.
    """
    if not isinstance(fig, Figure):
        raise ValueError(
            f"The 'fig' parameter of save_figure must be a matplotlib Figure. Got "
            f"{type(fig).__name__} instead."
        )
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".") or "png"
    if fmt not in ("png", "pdf", "svg"):
        raise ValueError(
            f"The 'path' parameter of save_figure must end in .png, .pdf or .svg. Got "
            f"{str(path)!r} instead."
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, format=fmt, **kwargs)
    return path

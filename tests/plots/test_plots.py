"""Reliability diagrams (privcal.plots): what is drawn matches privcal.metrics.reliability."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure

from privcal.metrics import Reliability, accuracy, reliability
from privcal.plots import ReliabilityDisplay, before_after, reliability_diagram, save_figure

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def probs_labels() -> tuple[np.ndarray, np.ndarray]:
    gen = np.random.default_rng(7)
    z = 2.5 * gen.normal(size=(300, 4))
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    y = gen.integers(0, 4, size=300)
    return p, y


def _hand_made() -> Reliability:
    # Two bins; the first empty; the second holds two examples with confidences 0.7 and 0.8,
    # one of them correct: accuracy 0.5, confidence 0.75, ECE = |0.5 - 0.75| = 0.25.
    return Reliability(
        edges=np.array([0.0, 0.5, 1.0]),
        counts=np.array([0.0, 2.0]),
        accuracy=np.array([np.nan, 0.5]),
        confidence=np.array([np.nan, 0.75]),
        ece=0.25,
    )


def test_from_reliability_draws_hand_computed_bars() -> None:
    disp = ReliabilityDisplay.from_reliability(_hand_made(), name="toy")
    assert [b.get_height() for b in disp.bars_] == [0.0, 0.5]
    assert [b.get_x() for b in disp.bars_] == [0.0, 0.5]
    assert [b.get_width() for b in disp.bars_] == [0.5, 0.5]
    gap = disp.gap_bars_[1]
    assert gap.get_y() == 0.5 and gap.get_height() == pytest.approx(0.25)
    assert disp.gap_bars_[0].get_height() == 0.0
    assert [b.get_height() for b in disp.hist_bars_] == [0.0, 2.0]
    legend = [t.get_text() for t in disp.ax_.get_legend().get_texts()]
    assert "ECE = 25.00%" in legend
    assert disp.ax_.get_title() == "toy"
    # Vertical lines of the histogram panel: overall accuracy 0.5, mean confidence 0.75.
    xs = sorted(line.get_xdata()[0] for line in disp.hist_ax_.get_lines())
    assert xs == pytest.approx([0.5, 0.75])


@pytest.mark.parametrize("n_bins", [5, 15])
@pytest.mark.parametrize("binning", ["width", "mass"])
def test_from_predictions_matches_metrics(
    probs_labels: tuple[np.ndarray, np.ndarray], n_bins: int, binning: str
) -> None:
    p, y = probs_labels
    disp = ReliabilityDisplay.from_predictions(p, y, n_bins=n_bins, binning=binning)
    rel = reliability(p, y, n_bins=n_bins, binning=binning)
    assert len(disp.figure_.axes) == 2
    assert len(disp.bars_) == len(disp.gap_bars_) == len(disp.hist_bars_) == n_bins
    heights = np.array([b.get_height() for b in disp.bars_])
    np.testing.assert_allclose(heights, np.nan_to_num(rel.accuracy, nan=0.0))
    np.testing.assert_allclose([b.get_width() for b in disp.bars_], np.diff(rel.edges))
    np.testing.assert_allclose([b.get_height() for b in disp.hist_bars_], rel.counts)
    assert disp.mean_accuracy_ == pytest.approx(accuracy(p, y))
    assert disp.mean_confidence_ == pytest.approx(p.max(axis=1).mean())


def test_from_predictions_accepts_logits(probs_labels: tuple[np.ndarray, np.ndarray]) -> None:
    p, y = probs_labels
    a = ReliabilityDisplay.from_predictions(p, y)
    b = ReliabilityDisplay.from_predictions(np.log(p), y, input="logits")
    np.testing.assert_allclose(
        [r.get_height() for r in a.bars_], [r.get_height() for r in b.bars_], atol=1e-12
    )


def test_plot_on_given_axes(probs_labels: tuple[np.ndarray, np.ndarray]) -> None:
    p, y = probs_labels
    fig = Figure()
    top, bottom = fig.subplots(2, 1)
    disp = ReliabilityDisplay.from_predictions(p, y, ax=(top, bottom))
    assert disp.figure_ is fig and disp.ax_ is top and disp.hist_ax_ is bottom
    single = ReliabilityDisplay(disp.reliability).plot(ax=Figure().add_subplot())
    assert single.hist_ax_ is None and single.hist_bars_ is None
    assert len(single.figure_.axes) == 1
    with pytest.raises(ValueError, match=r"'ax' parameter of ReliabilityDisplay\.plot"):
        disp.plot(ax=(top,))


def test_reliability_diagram_and_before_after(probs_labels: tuple[np.ndarray, np.ndarray]) -> None:
    p, y = probs_labels
    fig = reliability_diagram(p, y, n_bins=10, title="model")
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    assert fig.axes[0].get_title() == "model"
    flat = np.full_like(p, 0.25)
    fig2 = before_after(p, flat, y, titles=("raw", "flat"), n_bins=10)
    assert len(fig2.axes) == 4
    titles = [ax.get_title() for ax in fig2.axes if ax.get_title()]
    assert titles == ["raw", "flat"]
    # The flat model puts everything in one bin: nine of ten histogram bars are empty.
    hist_heights = [r.get_height() for r in fig2.axes[3].patches]
    assert sorted(hist_heights)[-1] == len(y) and hist_heights.count(0.0) == 9
    with pytest.raises(ValueError, match="'titles' parameter of before_after"):
        before_after(p, flat, y, titles=("only one",))


def test_save_figure_writes_png(
    tmp_path: Path, probs_labels: tuple[np.ndarray, np.ndarray]
) -> None:
    p, y = probs_labels
    path = save_figure(reliability_diagram(p, y), tmp_path / "a" / "b" / "rel.png")
    assert path == tmp_path / "a" / "b" / "rel.png"
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 5_000
    with pytest.raises(ValueError, match="'path' parameter of save_figure"):
        save_figure(reliability_diagram(p, y), tmp_path / "rel.jpg")
    with pytest.raises(ValueError, match="'fig' parameter of save_figure"):
        save_figure("not a figure", tmp_path / "x.png")  # type: ignore[arg-type]


def test_bad_inputs_fail_in_metrics_validation(
    probs_labels: tuple[np.ndarray, np.ndarray],
) -> None:
    p, y = probs_labels
    bad = p.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        reliability_diagram(bad, y)
    with pytest.raises(ValueError, match="'n_bins' parameter of reliability"):
        ReliabilityDisplay.from_predictions(p, y, n_bins=0)
    with pytest.raises(ValueError, match="labels"):
        before_after(p, p, np.full(len(y), 9))
    with pytest.raises(ValueError, match="'reliability' parameter"):
        ReliabilityDisplay.from_reliability((p, y))  # type: ignore[arg-type]


def test_library_never_imports_pyplot() -> None:
    code = (
        "import sys, numpy as np\n"
        "from privcal.plots import before_after, save_figure\n"
        "import tempfile, pathlib\n"
        "p = np.full((4, 2), 0.5); y = np.array([0, 1, 0, 1])\n"
        "save_figure(before_after(p, p, y), pathlib.Path(tempfile.mkdtemp()) / 'x.png')\n"
        "assert 'matplotlib.pyplot' not in sys.modules, 'pyplot was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_no_module_of_the_package_uses_pyplot_or_sets_a_backend() -> None:
    """pyplot keeps global state and ``matplotlib.use`` changes the caller's backend: library
    code builds ``Figure`` objects (``privcal.plots.subplots``) instead."""
    import ast

    import privcal

    offenders = []
    for path in Path(privcal.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            if any(n == "matplotlib.pyplot" for n in names):
                offenders.append(f"{path.name}:{node.lineno} imports pyplot")
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "use"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "matplotlib"
            ):
                offenders.append(f"{path.name}:{node.lineno} calls matplotlib.use")
    assert not offenders, offenders


def test_subplots_builds_a_standalone_figure(tmp_path: Path) -> None:
    from privcal.plots import subplots

    fig, axes = subplots(2, 3, figsize=(6, 4), sharex=True)
    assert axes.shape == (2, 3) and tuple(fig.get_size_inches()) == (6, 4)
    assert save_figure(fig, tmp_path / "f.png").stat().st_size > 0

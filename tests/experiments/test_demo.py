"""The demo framework and its calibration section (``privcal demo``)."""

from __future__ import annotations

import csv
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console
from typer.testing import CliRunner

from privcal.cli import app
from privcal.experiments.demo import DemoContext, DemoError, run_demo
from privcal.experiments.demo.calibration import applicable_methods
from privcal.report import markdown_table

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # the demo runs once, about 40 s


def test_applicable_methods_skips_platt_and_aliases() -> None:
    methods, skipped = applicable_methods(10)
    assert "platt" in skipped and "platt" not in methods
    assert skipped["nll-t"] == "same estimator as temperature"
    assert {"temperature", "ece-t", "acc-t", "vector", "matrix", "isotonic"} <= set(methods)
    binary, _ = applicable_methods(2)
    assert "platt" in binary


def test_markdown_table() -> None:
    assert markdown_table(["a", "b", "c"], [["x", 1, 2.5]]) == [
        "| a | b | c |",
        "|:--|--:|--:|",
        "| x | 1 | 2.5 |",
    ]


# the demo_run tests share one xdist worker, so the session fixture runs the demo once
@pytest.mark.xdist_group("demo")
def test_demo_writes_report_figures_and_results(demo_run: tuple[Path, str]) -> None:
    report, printed = demo_run
    out = report.parent
    text = report.read_text()
    assert report.name == "report.md"
    assert text.startswith("# privcal demo")
    assert "## Calibration under distribution shift" in text
    assert "### ECE per corruption" in text
    figures = sorted((out / "figures").glob("*.png"))
    calibration_figures = [f for f in figures if f.name.startswith("calibration_")]
    assert len(calibration_figures) == 2
    assert "calibration_clean.png" in {f.name for f in figures}
    for fig in figures:
        assert fig.read_bytes().startswith(b"\x89PNG")
        assert f"(figures/{fig.name})" in text
    assert "Mean over 5 corruptions" in printed and "temperature" in printed


@pytest.mark.xdist_group("demo")
def test_demo_temperature_scaling_lowers_ece(demo_run: tuple[Path, str]) -> None:
    report, _ = demo_run
    with (report.parent / "calibration.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    corruptions = {r["corruption"] for r in rows}
    assert len(corruptions) == 5

    def mean(method: str, key: str) -> float:
        return float(np.mean([float(r[key]) for r in rows if r["method"] == method]))

    # Severity-5 shift makes the network over-confident; temperature scaling fitted on the
    # validation half lowers the test ECE on average (by far more than split noise).
    assert mean("temperature", "ece") < mean("uncalibrated", "ece") - 0.1
    # Temperature scaling never changes the argmax.
    assert mean("temperature", "accuracy") == pytest.approx(mean("uncalibrated", "accuracy"))
    # The report's mean table shows the same numbers.
    line = next(ln for ln in report.read_text().splitlines() if ln.startswith("| temperature |"))
    assert f"{100 * mean('temperature', 'ece'):.2f}" in line


@pytest.mark.xdist_group("demo")
def test_demo_scoreboard_section(demo_run: tuple[Path, str]) -> None:
    report, _ = demo_run
    text = report.read_text()
    assert "## Scoreboard: every method against doing nothing" in text
    assert "(#scoreboard-every-method-against-doing-nothing)" in text
    section = text.split("## Scoreboard: every method against doing nothing")[1]
    rows = {ln.split(" | ")[0].strip("| "): ln for ln in section.splitlines() if ln[:2] == "| "}
    uncal = float(rows["uncalibrated"].split(" | ")[2])
    # severity-5 digits are far over-confident: temperature scaling and its private twin at
    # epsilon = 1 both cut the ECE (a drop of tens of points, far beyond split noise)
    for method in ("nll-t", "private acc-t"):
        assert float(rows[method].split(" | ")[2]) < uncal / 2, rows[method]
    assert "| split lac | inf |" in text and "| private lac | 1 |" in text


def test_failing_section_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name = "privcal.experiments.demo._broken_for_test"
    module = types.ModuleType(name)
    module.TITLE = "Broken"  # type: ignore[attr-defined]

    def run(ctx: DemoContext) -> list[str]:
        raise RuntimeError("boom")

    module.run = run  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr("importlib.util.find_spec", lambda n, *a: object())
    with pytest.raises(DemoError, match="_broken_for_test"):
        run_demo(tmp_path, console=Console(quiet=True), sections=("_broken_for_test",))
    text = (tmp_path / "report.md").read_text()
    assert "## Broken" in text and "RuntimeError: boom" in text


def test_run_demo_rejects_unknown_section(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'sections' parameter of run_demo"):
        run_demo(tmp_path, sections=("no_such_section",))
    with pytest.raises(ValueError, match="'seed' parameter of run_demo"):
        run_demo(tmp_path, seed=-1)


def test_demo_command(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["demo", "--out", str(tmp_path / "d"), "--quick", "--seed", "0"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "d" / "report.md").is_file()
    assert "Report:" in res.output

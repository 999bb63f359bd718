"""``privcal risk`` through a fresh Typer app (register + CliRunner)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import typer
from click.testing import Result
from typer.testing import CliRunner

from privcal.cli.risk import register
from privcal.conformal import RiskControl
from privcal.data.synthetic import multilabel

pytestmark = pytest.mark.integration


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """privcal"""

    register(app)
    return app


def _invoke(*args: object) -> Result:
    return CliRunner().invoke(_app(), [str(a) for a in args])


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("risk")
    p, y = multilabel(3000, seed=0)
    np.savez(tmp / "cal.npz", probs=p[:2000], labels=y[:2000])
    np.savez(tmp / "test.npz", probs=p[2000:], labels=y[2000:])
    return tmp / "cal.npz", tmp / "test.npz"


def test_non_private_matches_the_estimator(files: tuple[Path, Path], tmp_path: Path) -> None:
    cal, test = files
    res = _invoke("risk", "--cal", cal, "--test", test, "--out", tmp_path / "sets.npz")
    assert res.exit_code == 0, res.output
    with np.load(cal) as c, np.load(tmp_path / "sets.npz") as out:
        rc = RiskControl("fnr", 0.1).fit(c["probs"], c["labels"])
        assert float(out["lambda"]) == rc.lambda_ and out["sets"].shape == (1000, 10)
    assert "Risk control (fnr, alpha=0.1)" in res.output and "test fnr" in res.output


def test_private_reports_its_release(files: tuple[Path, Path]) -> None:
    cal, test = files
    res = _invoke("risk", "--cal", cal, "--test", test, "--epsilon", 1, "--seed", 0)
    assert res.exit_code == 0, res.output
    assert "epsilon=1, sparse-vector" in res.output and "not private" in res.output


def test_bad_input_is_one_error(files: tuple[Path, Path], tmp_path: Path) -> None:
    cal, test = files
    np.savez(tmp_path / "bad.npz", probs=np.load(cal)["probs"], labels=np.zeros(2000))
    res = _invoke("risk", "--cal", tmp_path / "bad.npz", "--test", test, "--epsilon", 1)
    assert res.exit_code == 2 and "boolean (n, K) matrix" in res.output
    res = _invoke("risk", "--cal", cal, "--test", test, "--seed", 1)
    assert res.exit_code == 2 and "--seed applies to private" in res.output


def test_out_writes_a_summary_the_report_draws(files: tuple[Path, Path], tmp_path: Path) -> None:
    import json

    from privcal.report.readers import build, find_outputs

    cal, test = files
    out = tmp_path / "sets.npz"
    r = _invoke("risk", "--epsilon", "1", "--cal", cal, "--test", test, "--out", out)
    assert r.exit_code == 0, r.output
    summary = json.loads((tmp_path / "sets.summary.json").read_text())
    assert summary["privcal"] == "risk" and len(summary["test_curve"]) == len(summary["lambdas"])
    again = _invoke("risk", "--epsilon", "1", "--cal", cal, "--test", test, "--out", out)
    assert again.exit_code == 2 and "--force" in again.output  # a private release is kept
    report = build(find_outputs(tmp_path / "sets.summary.json"))
    text = json.dumps(report.sections, default=str)
    assert "Risk curve" in text and "Private risk control" in text

"""An output holding a private release is not overwritten without ``--force`` (issue 32).

``privcal fit ... --out a1.json`` replaced a private calibrator that had cost 0.7 of a ledger's
budget, with no warning. Every verb that writes a private release (``fit``, ``conformal``,
``federate server``, ``federate simulate``) now refuses, before any work or spend, with one
``Error:`` line naming ``--force``; ``--force`` writes over it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from privcal.cli import app
from privcal.data import write_scores
from privcal.privacy.odometer import read_ledger

pytestmark = pytest.mark.integration

runner = CliRunner()


def _invoke(*args: Any) -> Any:
    return runner.invoke(app, [str(a) for a in args])


def _refused(res: Any, path: Path, why: str = "which cost privacy budget") -> None:
    assert res.exit_code == 2, res.output
    assert res.stderr.count("Error:") == 1 and "Traceback" not in res.output
    line = " ".join(res.stderr.split())
    assert "--force" in line and str(path) in line and why in line


@pytest.fixture
def scores(tmp_path: Path, overconfident: Any) -> tuple[Path, Path]:
    z, y = overconfident
    return (
        write_scores(tmp_path / "val.npz", z[:300], y[:300]),
        write_scores(tmp_path / "test.npz", z[300:], y[300:]),
    )


def test_fit_keeps_a_private_calibrator_and_spends_nothing(
    tmp_path: Path, scores: tuple[Path, Path]
) -> None:
    val, _ = scores
    ledger, a1 = tmp_path / "pipe.sqlite", tmp_path / "a1.json"
    assert _invoke("ledger", "init", ledger, "--epsilon", "3").exit_code == 0
    fit = ["fit", "-m", "acc-t", "--epsilon", "0.7", "-i", val, "--ledger", ledger, "-o", a1]
    res = _invoke(*fit)
    assert res.exit_code == 0, res.output
    first = a1.read_bytes()
    assert read_ledger(ledger).spent == pytest.approx(0.7)
    for again in (fit, ["fit", "-m", "temperature", "-i", val, "-o", a1]):  # private or not
        res = _invoke(*again)
        _refused(res, a1)
        assert a1.read_bytes() == first
        assert read_ledger(ledger).spent == pytest.approx(0.7)  # refused before any spend
    res = _invoke("fit", "-m", "temperature", "-i", val, "-o", a1, "--force")
    assert res.exit_code == 0, res.output
    assert json.loads(a1.read_text())["class"] == "TemperatureScaling"
    # a non-private calibrator holds no release: written over without --force
    res = _invoke("fit", "-m", "histogram", "-i", val, "-o", a1)
    assert res.exit_code == 0, res.output


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_fit_to_a_place_the_file_system_refuses_spends_nothing(
    tmp_path: Path, scores: tuple[Path, Path]
) -> None:
    """``/proc`` passes a permission test (root may write anywhere) but no file can be created
    there: the output check writes, so the fit is refused before its release is charged."""
    val, _ = scores
    ledger = tmp_path / "pipe.sqlite"
    assert _invoke("ledger", "init", ledger, "--epsilon", "3").exit_code == 0
    out = Path("/proc") / "privcal-not-writable.json"
    res = _invoke("fit", "-m", "acc-t", "--epsilon", "1", "-i", val, "--ledger", ledger, "-o", out)
    assert res.exit_code == 2, res.output
    assert "'--out'" in res.output and "cannot be written" in res.output
    assert read_ledger(ledger).spent == 0.0


def test_fit_refuses_when_only_the_summary_holds_the_release(
    tmp_path: Path, scores: tuple[Path, Path]
) -> None:
    val, _ = scores
    a1 = tmp_path / "a1.json"
    res = _invoke("fit", "-m", "acc-t", "--epsilon", "1", "--seed", "0", "-i", val, "-o", a1)
    assert res.exit_code == 0, res.output
    a1.unlink()  # the calibrator is gone; its summary (with the privacy report) is not
    res = _invoke("fit", "-m", "temperature", "-i", val, "-o", a1)
    _refused(res, tmp_path / "a1.summary.json", "seeded noise (epsilon=1), not private")


def test_conformal_keeps_private_sets(tmp_path: Path, scores: tuple[Path, Path]) -> None:
    val, test = scores
    sets = tmp_path / "sets.csv"
    args = ["conformal", "--cal", val, "--test", test, "--out", sets]
    private = [*args, "--epsilon", "1", "--seed", "0"]
    res = _invoke(*private)
    assert res.exit_code == 0, res.output
    first = sets.read_bytes()
    seeded = "seeded noise (epsilon=1), not private"
    _refused(_invoke(*private), tmp_path / "sets.summary.json", seeded)
    _refused(_invoke(*args), tmp_path / "sets.summary.json", seeded)
    assert sets.read_bytes() == first
    res = _invoke(*args, "--force")
    assert res.exit_code == 0, res.output
    res = _invoke(*args)  # split conformal's sets hold no release
    assert res.exit_code == 0, res.output


def _private_run_folder(out: Path) -> None:
    from privcal.privacy import PrivacyReport, Release

    out.mkdir()
    report = PrivacyReport([Release("fedtemp: 3 rounds", "gaussian", 1.0, 4.0, 1e-5)], "user")
    (out / "privacy_report.json").write_text(json.dumps(report.to_dict()))
    (out / "calibrator.json").write_text("{}")
    (out / "run.log").write_text("an earlier run\n")


@pytest.mark.parametrize("verb", ["server", "simulate"])
def test_federate_keeps_an_earlier_private_run(
    tmp_path: Path, scores: tuple[Path, Path], verb: str
) -> None:
    pytest.importorskip("flwr")
    out = tmp_path / "run"
    _private_run_folder(out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    args = (
        ["federate", "server", "--n-classes", "4", "--insecure", "--out", out]
        if verb == "server"
        else ["federate", "simulate", scores[0], "--num-nodes", "3", "--out", out]
    )
    _refused(_invoke(*args), out / "privacy_report.json")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_an_earlier_runs_files_are_removed_before_a_new_run(tmp_path: Path) -> None:
    """With --force (or when the earlier run was not private) the earlier run's files go first,
    so that a failed run cannot leave a calibrator.json that passes for its own."""
    from privcal.cli.federate import _fresh_out

    out = tmp_path / "run"
    _private_run_folder(out)
    (out / "notes.txt").write_text("kept")
    _fresh_out(out, "privcal federate server", force=True)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    (out / "calibrator.json").write_text(json.dumps({"class": "TemperatureScaling"}))
    _fresh_out(out, "privcal federate server", force=False)  # not private: no refusal
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_private_release_reads_each_kind_of_file(tmp_path: Path) -> None:
    from privcal.cli._common import private_release
    from privcal.privacy import PrivacyReport, Release

    rep = PrivacyReport([Release("q", "laplace", 1.0, 0.7)]).to_dict()
    files = {
        "cal.json": {"class": "X", "fitted": {"privacy_report_": rep}},
        "cal.summary.json": {"privcal": "fit", "privacy_report": rep},
        "privacy_report.json": rep,
        "plain.json": {"class": "X", "fitted": {"n_classes_": 3}},
        "empty_report.json": PrivacyReport().to_dict(),
        "list.json": [1, 2],
    }
    for name, data in files.items():
        (tmp_path / name).write_text(json.dumps(data))
    (tmp_path / "broken.json").write_text("{")
    (tmp_path / "sets.csv").write_text("index,size\n")
    np.save(tmp_path / "z.npy", np.zeros(3))
    found = {p.name: private_release(p) for p in tmp_path.iterdir()}
    private = {n for n, what in found.items() if what is not None}
    assert private == {"cal.json", "cal.summary.json", "privacy_report.json"}
    assert "private computation (epsilon=0.7), which cost" in str(found["cal.json"])
    assert private_release(tmp_path / "missing.json") is None

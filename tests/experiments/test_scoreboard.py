"""The scoreboard (``privcal bench scoreboard``): table structure and real properties.

Reduced configurations of the same functions that write ``bench/SCOREBOARD.md``.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from privcal.data import shared_data_dir
from privcal.experiments import scoreboard as sb
from privcal.report.scoreboard_page import _mark

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shared_data_dir() is None, reason="needs ../shared/data"),
]

CIFAR10 = "wideresnet-16-4-cifar-10"


@pytest.fixture(scope="module")
def cifar10_rows() -> list[dict[str, Any]]:
    data = sb.load_dataset(CIFAR10)
    return sb.calibration_rows(data, epsilons=(1.0, math.inf), splits=3, seed=0)


def _one(rows: list[dict[str, Any]], method: str, epsilon: float) -> dict[str, Any]:
    (row,) = [r for r in rows if r["method"] == method and r["epsilon"] == epsilon]
    return row


def test_calibration_rows_structure(cifar10_rows: list[dict[str, Any]]) -> None:
    methods = {(r["method"], r["epsilon"]) for r in cifar10_rows}
    assert ("uncalibrated", math.inf) in methods
    for twin in ("nll-t", "acc-t", "ece-t", "histogram", "vector", "matrix", "bbq", "isotonic"):
        assert (twin, math.inf) in methods
    for private, twin in (("private acc-t", "acc-t"), ("private histogram", "histogram")):
        row = _one(cifar10_rows, private, 1.0)
        assert row["twin"] == twin
        assert row["ratio"] == pytest.approx(row["ece"] / _one(cifar10_rows, twin, math.inf)["ece"])
    assert ("platt", math.inf) not in methods  # binary only
    for r in cifar10_rows:
        assert r["splits"] == 3 and 0.0 <= r["ece"] <= 1.0 and 0.0 <= r["accuracy"] <= 1.0


def test_temperature_scaling_improves_wideresnet_cifar10(
    cifar10_rows: list[dict[str, Any]],
) -> None:
    none = _one(cifar10_rows, "uncalibrated", math.inf)
    ts = _one(cifar10_rows, "nll-t", math.inf)
    # The network is over-confident (accuracy 0.911, mean confidence 0.965): TS lowers the
    # held-out ECE on every split, by more than 2 SE of the paired difference.
    assert ts["diff"] < -2 * ts["diff_se"] and not ts["worse"]
    assert ts["ece"] < none["ece"]
    assert ts["accuracy"] == pytest.approx(none["accuracy"])  # TS keeps the argmax


def test_worse_than_nothing_rule() -> None:
    base = np.array([0.05, 0.06, 0.05, 0.07])
    assert sb.worse_than_nothing(base + 0.02, base)[2]
    assert not sb.worse_than_nothing(base - 0.02, base)[2]
    noisy = base + np.array([0.03, -0.03, 0.02, -0.01])  # mean 0.0025 < 2 SE
    assert not sb.worse_than_nothing(noisy, base)[2]
    assert not sb.worse_than_nothing(base[:1] + 1.0, base[:1])[2]  # one split: no spread


def test_accuracy_loss_is_marked_whatever_the_ece() -> None:
    # per-split (ece, cwece, accuracy): ECE halves but accuracy falls 92% -> 66%, as central
    # vector scaling once did on 20 newsgroups; a 0.1-point wobble with spread is not marked
    base = np.array([[0.20, 0.02, 0.92], [0.21, 0.02, 0.93], [0.19, 0.02, 0.92]])
    lossy = base * np.array([0.5, 1.0, 1.0]) - np.array([0.0, 0.0, 0.26])
    lossy[:2, 2] += [0.01, -0.01]
    row = sb.calibration_row("calibration", "d", "vector", math.inf, "vector", lossy, base)
    assert row["worse"] and row["why"] == "accuracy -26.00 pp"
    assert row["diff"] < 0  # the ECE part alone would not mark it
    assert _mark({**row, "warnings": 2}) == "**WORSE** (accuracy -26.00 pp; 2 warnings)"
    wobble = base + np.array([[0, 0, -0.002], [0, 0, 0.001], [0, 0, 0.0]])
    assert not sb.calibration_row("calibration", "d", "bbq", math.inf, "bbq", wobble, base)["worse"]
    worse_ece = sb.calibration_row(
        "calibration", "d", "x", math.inf, "x", base + np.array([0.02, 0, 0]), base
    )
    assert worse_ece["worse"] and worse_ece["why"] == "ECE"


def test_split_conformal_coverage_within_3_se() -> None:
    data = sb.load_dataset(CIFAR10)
    rows = sb.conformal_rows(data, epsilons=(1.0, math.inf), splits=10, seed=0)
    assert {r["method"] for r in rows} == {"split lac", "private lac", "split aps", "private aps"}
    for r in rows:
        assert r["n_cal"] == 5000 and r["splits"] == 10
        if r["method"].startswith("split"):
            assert abs(r["coverage"] - 0.9) <= 3 * r["coverage_se"], r
            assert math.isnan(r["ratio"])
        else:
            # private conformal is conservative: coverage >= 1 - alpha within 3 SE
            assert r["coverage"] >= 0.9 - 3 * r["coverage_se"], r
            assert r["ratio"] >= 1.0 - 3 * r["coverage_se"]


def test_toplabel_binning_beats_overconfident_network() -> None:
    data = sb.load_dataset("resnet110_c10")
    assert data.logits is None and data.confidence is not None
    rows = sb.toplabel_rows(data, splits=3)
    none, hist = (_one(rows, m, math.inf) for m in ("uncalibrated", "histogram"))
    assert none["ece"] > 0.03  # strongly over-confident (README)
    assert hist["ece"] < none["ece"] and not hist["worse"]


def test_render_has_every_section_and_marks() -> None:
    rows = [
        {**r, "task": "calibration", "dataset": "d", "epsilon": e, "ratio": math.nan}
        for r, e in (
            ({"method": "uncalibrated", "twin": "uncalibrated", "worse": False}, math.inf),
            ({"method": "private acc-t", "twin": "acc-t", "worse": True}, 1.0),
        )
    ]
    for r in rows:
        r.update(ece=0.1, cwece=0.01, accuracy=0.9, diff=0.01, diff_se=0.001, warnings=0)
    board = sb.Scoreboard(replace(sb.QUICK), rows=rows, claims=[sb.Claim("000 x", "c", "m", "ok")])
    text = sb.render(board)
    assert sb.SIMULATION_NOTE in text
    assert "## Seed papers' headline claims" in text and "| 000 x | c | m | ok |" in text
    assert "- calibration: d / private acc-t / eps 1" in text
    assert text.count("**WORSE**") == 2  # the rule's legend and the one marked row


def test_cli_writes_scoreboard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from privcal.cli.scoreboard import register

    tiny = replace(sb.QUICK, datasets=("resnet110_c10",), federated=(), claim_trials=2, splits=2)
    monkeypatch.setattr(sb, "QUICK", tiny)
    app, bench = typer.Typer(), typer.Typer()
    app.add_typer(bench, name="bench")
    register(app, bench)
    out = tmp_path / "SB.md"
    res = CliRunner().invoke(app, ["bench", "scoreboard", "--quick", "--out", str(out)])
    assert res.exit_code == 0, res.output
    text = out.read_text()
    assert text.startswith("# privcal scoreboard") and "## Top-label files" in text
    assert "resnet110_c10" in text and "000 Luo et al. 2020" in text
    assert "worse than doing nothing" in res.output
    bad = CliRunner().invoke(app, ["bench", "scoreboard", "--out", str(tmp_path / "x.csv")])
    assert bad.exit_code == 2 and "must be a .md path" in bad.output


def test_cli_refuses_an_unwritable_out_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run takes minutes: an --out that cannot be written is refused before it starts."""
    from privcal.cli.scoreboard import register

    def run(*args: object, **kwargs: object) -> None:
        raise AssertionError("the scoreboard ran before its output path was checked")

    monkeypatch.setattr(sb, "run", run)
    app, bench = typer.Typer(), typer.Typer()
    app.add_typer(bench, name="bench")
    register(app, bench)
    (tmp_path / "ro").write_text("a file, not a folder")  # unwritable as a folder, even by root
    res = CliRunner().invoke(app, ["bench", "scoreboard", "--out", str(tmp_path / "ro" / "s.md")])
    assert res.exit_code == 2, res.output
    assert "Error:" in res.output and "'--out'" in res.output and "AssertionError" not in res.output


def test_render_labels_each_table_and_its_vs_none_metric() -> None:
    """The federated table has its own title, and its 'vs none' column says it is classwise."""
    base = {"dataset": "d", "twin": "uncalibrated", "worse": False, "ratio": math.nan}
    base.update(ece=0.1, cwece=0.01, accuracy=0.9, diff=0.01, diff_se=0.001, warnings=0)
    rows = [
        {**base, "task": task, "method": "uncalibrated", "epsilon": math.inf}
        for task in ("calibration", "federated")
    ]
    text = sb.render(sb.Scoreboard(replace(sb.QUICK), rows=rows, claims=[]))
    titles = [line for line in text.splitlines() if line.startswith("## ")]
    assert len(titles) == len(set(titles))
    fed = next(t for t in titles if t.startswith("## Federated calibration"))
    assert "classwise ECE" in fed
    assert text.count("| vs none, ECE (pp) ± SE |") == 1
    assert text.count("| vs none, cwECE (pp) ± SE |") == 1

"""``privcal conformal --sources`` (across private data sources) and ``--groups`` (Mondrian)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import Result
from typer.testing import CliRunner

from privcal.cli.main import app
from privcal.private import DataSource

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def _invoke(*args: object) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def _data(tmp_path: Path, sites: int = 3) -> tuple[Path, Path]:
    rng = np.random.default_rng(0)
    z = 2 * rng.normal(size=(9000, 5))
    y = (z + rng.gumbel(size=z.shape)).argmax(1)
    site = np.arange(9000) % sites
    np.savez(tmp_path / "cal.npz", logits=z[:6000], labels=y[:6000], site=site[:6000])
    np.savez(tmp_path / "test.npz", logits=z[6000:], labels=y[6000:], site=site[6000:])
    for i in range(4):
        np.savez(tmp_path / f"h{i}.npz", logits=z[i * 1500 : (i + 1) * 1500],
                 labels=y[i * 1500 : (i + 1) * 1500])  # fmt: skip
        assert _invoke("source", "init", "--data", tmp_path / f"h{i}.npz", "--budget", "1",
                       "--ledger", tmp_path / f"h{i}.sqlite").exit_code == 0  # fmt: skip
    return tmp_path / "cal.npz", tmp_path / "test.npz"


def test_sources_distributed_spend_each_source_once(tmp_path: Path) -> None:
    _, test = _data(tmp_path)
    ledgers = [a for i in range(4) for a in ("--sources", tmp_path / f"h{i}.sqlite")]
    r = _invoke("conformal", "--epsilon", "1", *ledgers, "--aggregation", "distributed",
                "--test", test, "--out", tmp_path / "sets.csv")  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "add/remove one example of one source; n private" in r.output
    assert "Theorem S" in r.output and "distributed discrete laplace" in r.output
    for i in range(4):
        assert DataSource.open(tmp_path / f"h{i}.sqlite").spent == pytest.approx(1.0)
    summary = json.loads((tmp_path / "sets.summary.json").read_text())
    assert "secure sums" in summary["trust"]
    fresh = [a for i in range(4) for a in ("--sources", tmp_path / f"g{i}.sqlite")]
    for i in range(4):
        _invoke("source", "init", "--data", tmp_path / f"h{i}.npz", "--budget", "1", "--ledger",
                tmp_path / f"g{i}.sqlite")  # fmt: skip
    grouped = _invoke(
        "conformal", "--epsilon", "1", *fresh, "--groups", "predicted", "--test", test
    )
    assert grouped.exit_code == 0 and "per group" in grouped.output, grouped.output
    again = _invoke("conformal", "--epsilon", "1", *ledgers, "--test", test)
    assert again.exit_code == 3 and "budget" in again.output  # EXIT_BUDGET: every ledger spent


def test_groups_give_one_threshold_per_group_with_coverage(tmp_path: Path) -> None:
    cal, test = _data(tmp_path)
    r = _invoke("conformal", "--epsilon", "1", "--cal", cal, "--test", test, "--groups", "site",
                "--out", tmp_path / "sets.json")  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "per group" in r.output and "within its group; group sizes public" in r.output
    groups = json.loads((tmp_path / "sets.summary.json").read_text())["groups"]
    assert [g["n_cal"] for g in groups] == [2000, 2000, 2000]
    # 1000 test rows a group: coverage within 4 SE (0.038) of 0.9 or above
    assert all(g["coverage"] >= 0.9 - 0.038 for g in groups)
    r = _invoke("conformal", "--epsilon", "1", "--cal", cal, "--test", test, "--groups",
                "predicted")  # fmt: skip
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--epsilon", "1", "--test", "T"], "needs either --cal"),
        (["--sources", "L", "--test", "T"], "add --epsilon"),
        (["--epsilon", "1", "--cal", "C", "--test", "T", "--groups", "nope"], "no such array"),
        (
            ["--epsilon", "1", "--cal", "C", "--test", "T", "--aggregation", "distributed"],
            "drop them",
        ),
        (
            ["--epsilon", "1", "--sources", "L", "--test", "T", "--groups", "site"],
            "'predicted' only",
        ),
    ],
)
def test_bad_combinations_exit_2_with_one_line(tmp_path: Path, args: list, message: str) -> None:
    cal, test = _data(tmp_path)
    names = {"T": test, "C": cal, "L": tmp_path / "h0.sqlite"}
    r = _invoke("conformal", *[names.get(a, a) for a in args])
    assert r.exit_code == 2 and message in r.output, r.output
    assert DataSource.open(tmp_path / "h0.sqlite").spent == 0.0

"""``privcal conformal`` through a fresh Typer app (register + CliRunner)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import typer
from typer.testing import CliRunner

from privcal.cli.conformal import register


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """privcal"""

    register(app)
    return app


def _files(tmp_path: Path) -> tuple[Path, Path]:
    rng = np.random.default_rng(0)
    z = 2 * rng.normal(size=(3000, 5))
    y = z.argmax(1)
    np.savez(tmp_path / "cal.npz", logits=z[:2000], labels=y[:2000])
    np.savez(tmp_path / "test.npz", logits=z[2000:], labels=y[2000:])
    return tmp_path / "cal.npz", tmp_path / "test.npz"


def test_private_sets(tmp_path: Path) -> None:
    cal, test = _files(tmp_path)
    out = tmp_path / "sets.parquet"
    args = ["conformal", "--alpha", "0.1", "--epsilon", "1", "--cal", str(cal), "--test"]
    r = CliRunner().invoke(_app(), [*args, str(test), "--out", str(out), "--seed", "0"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.output.strip().splitlines()[-1])
    assert summary["epsilon"] == 1.0 and 0.85 < summary["coverage"] <= 1.0
    assert summary["relation"] == "substitute one calibration example; n public"
    assert summary["n"] == 2000 and "n = 2000 (number of calibration examples)" in summary["public"]
    assert summary["status"] == "not private: seeded noise"
    assert "warning: PrivateConformal draws noise from SeededNoise" in r.output
    table = pq.read_table(out)
    assert table.num_rows == 1000
    assert set(table.column_names) >= {"set", "size", "covered", "label"}


def test_private_sets_secure_noise_by_default(tmp_path: Path) -> None:
    cal, test = _files(tmp_path)
    out = tmp_path / "sets.parquet"
    args = ["conformal", "--epsilon", "1", "--cal", str(cal), "--test", str(test)]
    r = CliRunner().invoke(_app(), [*args, "--out", str(out)])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.output.strip().splitlines()[-1])
    assert summary["status"] == "private" and "warning" not in r.output
    assert summary["relation"] == "substitute one calibration example; n public"


def test_non_private_aps(tmp_path: Path) -> None:
    cal, test = _files(tmp_path)
    out = tmp_path / "sets.parquet"
    args = ["conformal", "--alpha", "0.2", "--cal", str(cal), "--test", str(test)]
    r = CliRunner().invoke(_app(), [*args, "--out", str(out), "--score", "aps"])
    assert r.exit_code == 0, r.output
    assert "epsilon" not in json.loads(r.output.strip().splitlines()[-1])

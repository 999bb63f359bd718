"""``privcal bench angelopoulos2022 --quick`` end to end (synthetic scores file, small R)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from privcal.cli.conformal import register
from privcal.experiments import angelopoulos2022

pytestmark = pytest.mark.integration

SPLITS = 12


def _app() -> typer.Typer:
    app = typer.Typer()
    bench = typer.Typer()

    @app.callback()
    def main() -> None:
        """privcal"""

    app.add_typer(bench, name="bench")
    register(app, bench)
    return app


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    tmp = tmp_path_factory.mktemp("a22")
    rng = np.random.default_rng(0)
    z = 3.0 * rng.normal(size=(1600, 6))
    y = np.array([rng.choice(6, p=np.exp(r) / np.exp(r).sum()) for r in z / 2.0])
    np.savez(tmp / "synth.npz", logits=z, labels=y)
    out = tmp / "out"
    args = ["bench", "angelopoulos2022", "--data", str(tmp / "synth.npz"), "--quick"]
    r = CliRunner().invoke(_app(), [*args, "--splits", str(SPLITS), "--out", str(out)])
    assert r.exit_code == 0, r.output
    return out, r.output


def test_tidy_csv_one_row_per_setting_and_split(bench_run: tuple[Path, str]) -> None:
    out, _ = bench_run
    with (out / "angelopoulos2022.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    # 2 scores x (split + 4 epsilons + 3 quick bin counts) x SPLITS
    assert len(rows) == 2 * (1 + 4 + 3) * SPLITS
    keys = {(r["score"], r["sweep"], r["epsilon"], r["bins"], r["split"]) for r in rows}
    assert len(keys) == len(rows)
    assert {r["dataset"] for r in rows} == {"synth"}
    for r in rows:
        cov, size, full = float(r["coverage"]), float(r["size"]), float(r["full"])
        assert 0.0 <= cov <= 1.0 and 0.0 <= full <= 1.0 and 0.0 <= size <= 6.0
        if r["method"] == "split":
            assert r["epsilon"] == "" and r["bins"] == ""
        else:
            assert float(r["epsilon"]) > 0 and int(r["bins"]) >= 2
        if math.isinf(float(r["threshold"])) or float(r["threshold"]) >= 1.0:
            assert cov == 1.0 and size == 6.0 and full == 1.0


def test_summary_matches_rows_and_files_exist(bench_run: tuple[Path, str]) -> None:
    out, printed = bench_run
    with (out / "angelopoulos2022.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    with (out / "summary.csv").open() as fh:
        summary = list(csv.DictReader(fh))
    assert len(summary) == 2 * (1 + 4 + 3)
    for s in summary:
        mine = [
            r
            for r in rows
            if (r["score"], r["sweep"], r["bins"] or "0") == (s["score"], s["sweep"], s["bins"])
            and (r["epsilon"] or "nan") == s["epsilon"]
        ]
        assert len(mine) == SPLITS
        assert float(s["coverage"]) == pytest.approx(np.mean([float(r["coverage"]) for r in mine]))
        assert float(s["size"]) == pytest.approx(np.mean([float(r["size"]) for r in mine]))
    split = next(s for s in summary if s["sweep"] == "split" and s["score"] == "lac")
    assert float(split["coverage"]) > 0.85
    md = (out / "summary.md").read_text()
    assert "Cost of privacy" in md and "| synth | lac | 0.1 | split |" in md
    figures = sorted((out / "figures").glob("*.png"))
    assert [f.name for f in figures] == ["synth_aps_a0.1.png", "synth_lac_a0.1.png"]
    assert all(f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for f in figures)
    assert "Coverage and set size" in printed and f"{len(rows)} rows" in printed


def test_python_api_matches_simulator_and_rejects_bad_input() -> None:
    from privcal.conformal import lac_scores
    from privcal.conformal.simulate import SplitSimulator
    from privcal.metrics.statistics import softmax

    rng = np.random.default_rng(1)
    z = 2.0 * rng.normal(size=(800, 4))
    y = z.argmax(1)
    res = angelopoulos2022.run(
        {"toy": (z, y)}, trials=5, epsilons=(5.0,), bins=(1000,), scores=("lac",)
    )
    assert res.n_rows == 3 * 5
    sim = SplitSimulator(lac_scores(softmax(z)), y, n=400, splits=5, seed=0)
    base = sim.split(0.1)
    got = res.find("toy", "lac", 0.1, "split")
    assert got.coverage == pytest.approx(base.mean_coverage)
    assert got.size == pytest.approx(base.mean_size)
    with pytest.raises(ValueError, match="alphas"):
        angelopoulos2022.run({"toy": (z, y)}, trials=5, alphas=(1.5,))
    with pytest.raises(ValueError, match="scores"):
        angelopoulos2022.run({"toy": (z, y)}, trials=5, scores=("raps",))

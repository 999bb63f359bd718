"""Every experiment has one shape: ``run(config, *, seed=0, progress=None) -> Result`` with
``Result.write(out_dir)``; old call forms still work for one release, with a DeprecationWarning;
no experiment prints (the CLI draws progress)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import privcal.experiments
from privcal.experiments import angelopoulos2022, luo2020


def _data(n: int = 1200, seed: int = 0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    z = 2.0 * rng.normal(size=(n, 4))
    return {"toy": (z, z.argmax(1))}


def test_no_console_code_in_experiments() -> None:
    root = Path(privcal.experiments.__file__).parent
    for path in root.rglob("*.py"):
        if "demo" in path.parts:
            continue  # the demo is a console program
        text = path.read_text()
        assert not re.search(r"\bimport rich|from rich\b|\bprint\(", text), path


def test_luo2020_old_form_warns_and_matches(tmp_path: Path) -> None:
    grid = [luo2020.GridPoint("sources", 20, 10, 1.0)]
    calls: list[tuple] = []
    new = luo2020.run(
        luo2020.Luo2020Config(_data(), trials=3, grid=grid),
        seed=1,
        progress=lambda *a: calls.append(a),
    )
    assert calls[-1] == ("luo2020", 1, 1)
    with pytest.warns(DeprecationWarning) as record:
        old = luo2020.run(_data(), trials=3, grid=grid, seed=1, out=tmp_path, progress=False)
    messages = " ".join(str(w.message) for w in record)
    assert "write(out_dir)" in messages and "progress=bool" in messages
    assert repr(old.rows) == repr(new.rows)  # nan != nan
    assert (tmp_path / "table1.md").read_text() == new.table_markdown() + "\n"
    assert new.write(tmp_path / "b") == tmp_path / "b" / "table1.md"
    with pytest.raises(TypeError, match="bogus"):
        luo2020.run(_data(), bogus=1)


def test_angelopoulos2022_renamed_r_and_write(tmp_path: Path) -> None:
    kw = {"epsilons": (5.0,), "bins": (1000,), "scores": ("lac",)}
    new = angelopoulos2022.run(angelopoulos2022.Angelopoulos2022Config(_data(), trials=5, **kw))
    with pytest.warns(DeprecationWarning, match="trials"):
        old = angelopoulos2022.run(_data(), R=5, **kw)
    assert old.settings == new.settings and old.n_rows == new.n_rows == 3 * 5
    path = new.write(tmp_path)
    assert path == tmp_path / "summary.md"
    lines = (tmp_path / "angelopoulos2022.csv").read_text().splitlines()
    assert len(lines) == 1 + new.n_rows
    assert angelopoulos2022.QUICK.trials == 50
    assert angelopoulos2022.Angelopoulos2022Config(trials=20).quick().trials == 20


def test_old_path_form_runs_the_preset_and_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``knolle2021.run(out_dir, quick=True)`` (deprecated) runs QUICK and returns the .md."""
    from privcal.experiments import knolle2021

    seen: list[tuple] = []

    def fake_rows(seeds, epsilon, epochs, progress=None):  # type: ignore[no-untyped-def]
        seen.append((seeds, epsilon, epochs))
        rows = [
            {"task": t, "method": m, "seed": s, "epsilon": 3.0, "accuracy": 0.9, "auc": 0.9}
            | {"ece": 0.05}
            for t in ("digits", "breast_cancer")
            for m in ("SGD", "DP-SGD", "DP-SGLD")
            for s in seeds
        ]
        p = np.full((10, 2), 0.5)
        return rows, {("digits", "SGD"): (p, np.arange(10) % 2)}

    monkeypatch.setattr(knolle2021, "run_rows", fake_rows)
    with pytest.warns(DeprecationWarning, match="QUICK"):
        path = knolle2021.run(tmp_path, seed=4, quick=True)
    assert seen == [((4,), 3.0, 10)]
    assert path == tmp_path / "knolle2021.md" and "--seed 4 --quick" in path.read_text()
    res = knolle2021.run(knolle2021.QUICK, seed=4)
    assert res.write(tmp_path / "new").read_text() == path.read_text().replace(
        str(tmp_path), str(tmp_path / "new")
    )

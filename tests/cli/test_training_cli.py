"""privcal.cli.training registers bench bu2023 / knolle2021 (checked on a fresh Typer app)."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from privcal.cli import training as cli_training


def test_register_adds_bench_verbs(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    app, bench = typer.Typer(), typer.Typer()
    cli_training.register(app, bench)
    app.add_typer(bench, name="bench")
    calls = []

    class FakeResult:
        def write(self, out):  # type: ignore[no-untyped-def]
            path = out / "x.md"
            out.mkdir(parents=True, exist_ok=True)
            path.write_text("# done\n")
            return path

    def fake_run(config, seed=0, progress=None):  # type: ignore[no-untyped-def]
        calls.append((config, seed, config.name == "quick"))
        return FakeResult()

    import privcal.experiments.bu2023 as b
    import privcal.experiments.knolle2021 as k

    monkeypatch.setattr(b, "run", fake_run)
    monkeypatch.setattr(k, "run", fake_run)
    runner = CliRunner()
    for verb in ("bu2023", "knolle2021"):
        res = runner.invoke(app, ["bench", verb, "--out", str(tmp_path / verb), "--quick"])
        assert res.exit_code == 0, res.output
        assert "# done" in res.output
    assert [c[2] for c in calls] == [True, True]

"""``privcal source init|status``, private ``fit`` on sources and ``privcal bench luo2020``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from privcal._text import NO_SENSITIVITY, TEXT_WIDTH
from privcal.cli import calibrate
from privcal.cli import source as source_cli
from privcal.data import write_scores
from privcal.private import DataSource

pytestmark = pytest.mark.integration

runner = CliRunner()


@pytest.fixture
def cli() -> typer.Typer:
    app = typer.Typer()
    bench = typer.Typer()
    app.add_typer(bench, name="bench")
    calibrate.register(app, bench)
    source_cli.register(app, bench)
    return app


@pytest.fixture
def files(tmp_path: Path, overconfident: Any) -> dict[str, Path]:
    z, y = overconfident
    out = {}
    for i in range(3):
        out[f"val{i}"] = write_scores(tmp_path / f"val{i}.npz", z[i::3], y[i::3])
    return out


def invoke(app: typer.Typer, *args: Any) -> Any:
    return runner.invoke(app, [str(a) for a in args])


def test_init_status_fit_spend_and_refuse(cli: typer.Typer, files: Any, tmp_path: Path) -> None:
    ledgers = []
    for i in range(3):
        led = tmp_path / f"s{i}.sqlite"
        r = invoke(
            cli, "source", "init", "--data", files[f"val{i}"], "--budget", 1.0, "--ledger", led,
            "--allow-seeded-noise",  # the owners opt in to the --seed below (a test)
        )  # fmt: skip
        assert r.exit_code == 0, r.output
        assert "budget epsilon=1" in r.output
        ledgers.append(led)
    args = [
        "fit",
        "--method",
        "acc-t",
        "--epsilon",
        0.6,
        "--out",
        tmp_path / "cal.json",
        "--seed",
        0,
    ]
    for led in ledgers:
        args += ["--sources", led]
    r = invoke(cli, *args)
    assert r.exit_code == 0, r.output
    cal = json.loads((tmp_path / "cal.json").read_text())
    assert cal["class"] == "PrivateTemperatureScaling"
    assert cal["fitted"]["privacy_report_"]["epsilon"] == 0.6
    for led in ledgers:
        assert DataSource.open(led).spent == pytest.approx(0.6)
    r = invoke(cli, "source", "status", "--ledger", ledgers[0])
    assert r.exit_code == 0 and "accuracy_gap" in r.output and "remaining=0.4" in r.output
    # a second fit over the remaining budget is refused and spends nothing
    again = tmp_path / "again.json"
    r = invoke(cli, *[{0.6: 0.5, tmp_path / "cal.json": again}.get(a, a) for a in args])
    assert r.exit_code == 3, r.output
    assert all(DataSource.open(led).spent == pytest.approx(0.6) for led in ledgers)
    # histogram binning fits with what is left (--force: cal.json holds the first release)
    r = invoke(cli, *[{0.6: 0.4, "acc-t": "histogram"}.get(a, a) for a in args], "--force")
    assert r.exit_code == 0, r.output
    assert all(DataSource.open(led).remaining == pytest.approx(0.0) for led in ledgers)


def test_seed_on_a_source_needs_the_owners_opt_in(
    cli: typer.Typer, files: Any, tmp_path: Path
) -> None:
    """An analyst's --seed on a source whose owner did not opt in is refused before anything is
    read or spent: seeded noise is reproducible by the analyst, who would subtract it (the exact
    statistics out, the owner's ledger showing an epsilon-0.6 release)."""
    led = tmp_path / "owner.sqlite"
    assert invoke(cli, "source", "init", "--data", files["val0"], "--ledger", led).exit_code == 0
    out = tmp_path / "c.json"
    args = ["fit", "--method", "histogram", "--epsilon", 0.6, "--sources", led, "--out", out]
    r = invoke(cli, *args, "--seed", 0)
    assert r.exit_code == 2 and not out.exists()
    assert "accepts secure noise only" in str(r.exception) + r.output
    assert DataSource.open(led).spent == 0.0


def test_fit_on_input_with_epsilon(cli: typer.Typer, files: Any, tmp_path: Path) -> None:
    r = invoke(
        cli,
        "fit",
        "--method",
        "ece-t",
        "--epsilon",
        2.0,
        "--input",
        files["val0"],
        "--out",
        tmp_path / "c.json",
        "--seed",
        1,
        "--force",  # the report is the subject: keep the fit whatever the fallback rule says
    )
    assert r.exit_code == 0, r.output
    saved = json.loads((tmp_path / "c.json").read_text())["fitted"]["privacy_report_"]
    assert saved["epsilon"] == 2.0
    # --seed is simulation noise: the printed report and the saved one both say so
    assert "example-level add/remove, n private; not private: seeded noise" in r.output
    assert saved["status"] == "not private: seeded noise"
    secure = invoke(
        cli, "fit", "--method", "ece-t", "--epsilon", 2.0, "--input", files["val0"],
        "--out", tmp_path / "s.json", "--force",
    )  # fmt: skip
    assert secure.exit_code == 0, secure.output
    assert "n private; private" in secure.output


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["--method", "platt", "--epsilon", "1"], "must be one of"),
        (["--method", "acc-t", "--epsilon", "0"], "epsilon"),
        (["--method", "acc-t", "--epsilon", "-1"], "epsilon"),
    ],
)
def test_bad_private_fit(
    cli: typer.Typer, files: Any, tmp_path: Path, extra: list[str], match: str
) -> None:
    r = invoke(cli, "fit", *extra, "--input", files["val0"], "--out", tmp_path / "c.json")
    assert r.exit_code == 2
    assert match in r.output


def test_bad_source_commands(cli: typer.Typer, files: Any, tmp_path: Path) -> None:
    r = invoke(cli, "source", "status", "--ledger", tmp_path / "none.sqlite")
    assert r.exit_code == 2 and "No ledger at" in r.output
    r = invoke(
        cli,
        "source",
        "init",
        "--data",
        files["val0"],
        "--budget",
        0,
        "--ledger",
        tmp_path / "x.sqlite",
    )
    assert r.exit_code == 2 and "budget" in r.output
    r = invoke(
        cli,
        "fit",
        "--method",
        "acc-t",
        "--sources",
        tmp_path / "none.sqlite",
        "--out",
        tmp_path / "c.json",
    )
    assert r.exit_code == 2 and "--epsilon" in r.output


def test_bench_luo2020(cli: typer.Typer, tmp_path: Path, overconfident: Any) -> None:
    z, y = overconfident
    data = write_scores(tmp_path / "scores.npz", z, y)
    r = invoke(
        cli, "bench", "luo2020", "--data", data, "--trials", 3, "--out", tmp_path / "o", "--jobs", 1
    )
    assert r.exit_code == 0, r.output
    assert "Acc-T" in r.output
    assert (tmp_path / "o" / "results.csv").is_file()
    assert (tmp_path / "o" / "fig_scores.png").is_file()
    assert np.isfinite(len((tmp_path / "o" / "table1.md").read_text()))


@pytest.mark.parametrize(
    ("method", "cls"), [("dp-ts", "DPTemperatureScaling"), ("dp-ps", "DPPlattScaling")]
)
def test_fit_dp_sgd_calibrator(
    cli: typer.Typer, overconfident: Any, tmp_path: Path, method: str, cls: str
) -> None:
    """Seed 001's DP-SGD calibrators from the CLI: (epsilon, delta) spent as asked, and the
    saved calibrator applies in ``privcal apply``; DP-TS finds the true temperature 2."""
    pytest.importorskip("opacus")
    z, y = overconfident
    val = write_scores(tmp_path / "val.npz", z, y)
    out = tmp_path / f"{method}.json"
    args = ["fit", "-m", method, "--epsilon", 8, "--delta", 1e-6, "-i", val, "-o", out]
    r = invoke(cli, *args, "--seed", 3)
    assert r.exit_code == 0, r.output
    assert "delta=1e-06" in r.output and "DP-SGD" in r.output
    cal = json.loads(out.read_text())
    assert cal["class"] == cls
    rep = cal["fitted"]["privacy_report_"]
    assert rep["delta"] == 1e-6 and 7.0 < rep["epsilon"] <= 8.0
    if method == "dp-ts":
        assert 1.6 < cal["fitted"]["temperature_"] < 2.5
    from privcal.calibrators import calibrator_from_dict
    from privcal.privacy import PrivacyReport

    restored = calibrator_from_dict(cal).privacy_report_
    assert isinstance(restored, PrivacyReport) and restored.epsilon == rep["epsilon"]
    r = invoke(cli, "apply", "--calibrator", out, "--input", val, "--out", tmp_path / "p.npz")
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["--method", "acc-t", "--epsilon", "1", "--delta", "1e-5"], "pure epsilon-DP"),
        (["--method", "dp-ts", "--epsilon", "1", "--delta", "1.5"], "'--delta' parameter"),
        (["--method", "dp-ps", "--epsilon", "0"], "'--epsilon' parameter of privcal fit"),
    ],
)
def test_bad_dp_sgd_fit(
    cli: typer.Typer, files: Any, tmp_path: Path, extra: list[str], match: str
) -> None:
    pytest.importorskip("opacus")
    r = invoke(cli, "fit", *extra, "--input", files["val0"], "--out", tmp_path / "c.json")
    assert r.exit_code == 2, r.output
    assert match in r.output
    assert not (tmp_path / "c.json").exists()


def test_dp_ts_refuses_sources(cli: typer.Typer, files: Any, tmp_path: Path) -> None:
    led = tmp_path / "s.sqlite"
    assert invoke(cli, "source", "init", "--data", files["val0"], "--budget", 1, "--ledger", led)
    r = invoke(
        cli, "fit", "-m", "dp-ts", "--epsilon", 1, "--sources", led, "-o", tmp_path / "c.json"
    )
    assert r.exit_code == 2 and "one held-out split (--input)" in r.output
    assert DataSource.open(led).spent == 0.0


def test_dp_ts_without_torch_names_the_extra(
    cli: typer.Typer, files: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from privcal.training import _torch

    def missing(name: str) -> Any:
        raise ImportError(f"No module named {name!r}")

    monkeypatch.setattr(_torch, "_import", missing)
    args = ["fit", "-m", "dp-ts", "--epsilon", 1, "-i", files["val0"], "-o", tmp_path / "c.json"]
    r = invoke(cli, *args)
    assert r.exit_code == 2 and "pip install privcal[torch]" in r.output


def _status(cli: typer.Typer, ledger: Path) -> Any:
    before = ledger.read_bytes()
    r = invoke(cli, "source", "status", "--ledger", ledger)
    assert ledger.read_bytes() == before  # status only reads
    return r


def test_status_reads_a_ledger_made_from_python(
    cli: typer.Typer, overconfident: Any, tmp_path: Path
) -> None:
    from privcal.privacy import SeededNoise
    from privcal.privacy.odometer import read_ledger

    z, y = overconfident
    led = tmp_path / "py.sqlite"
    with pytest.warns(UserWarning):  # seeded noise
        src = DataSource(z, y, budget=2.0, ledger=led, name="py", noise=SeededNoise(0))
    src.accuracy_gap_sum(1.5, 0.25)
    r = _status(cli, led)
    assert r.exit_code == 0, r.output
    # (the heading wraps at the table width, after a long tmp_path: words, not line breaks)
    assert f"Ledger {led} (source 'py')" in " ".join(r.output.split())
    assert "accuracy_gap_sum" in r.output
    assert "budget epsilon=2  spent=0.25  remaining=1.75" in r.output
    # the release's real sensitivity, as the source recorded it
    (release,) = read_ledger(led).releases
    assert release.sensitivity > 0
    row = next(line for line in r.output.splitlines() if "accuracy_gap_sum" in line)
    assert f" {release.sensitivity:g} " in row and "nan" not in r.output


def test_status_reads_a_flower_client_ledger(cli: typer.Typer, tmp_path: Path) -> None:
    """A ``privcal federate client --ledger`` ledger, charged as the ClientApp charges it."""
    pytest.importorskip("flwr")
    from privcal.federated.flower.task import charge_round

    led = tmp_path / "client0.sqlite"
    node = {"ledger": str(led), "budget": 1.0, "delta-budget": 1e-5, "name": "client0"}
    from privcal.federated.flower.task import composed_epsilon

    for rnd in (1, 2):
        cfg = {"epsilon": 1.0, "delta": 1e-5, "rounds": 4, "round": rnd, "method": "fedtemp"}
        assert charge_round(node, cfg, run_id=7) is None
    led.chmod(0o444)  # a read-only ledger can still be inspected
    r = _status(cli, led)
    assert r.exit_code == 0, r.output
    assert "federated run 7, round 2 of 4 (fedtemp)" in r.output
    assert f"Ledger {led} (source 'client0')" in " ".join(r.output.split())
    # a round's charge covers two statistics (no one sensitivity): a dash and why, never nan
    assert "nan" not in r.output and "sensitivity  —" in r.output
    assert NO_SENSITIVITY in " ".join(r.output.split())
    assert max(len(line) for line in r.output.splitlines()) <= TEXT_WIDTH
    spent = composed_epsilon(cfg, 2)  # the ledger holds the composed epsilon after round 2
    assert f"spent={spent:g}  remaining={1 - spent:g}  delta budget=1e-05  delta spent=1e-05" in (
        r.output
    )


def test_status_wraps_by_row_within_100_columns(cli: typer.Typer, tmp_path: Path) -> None:
    """Releases too long for columns are shown one block per release, no line over 100."""
    from privcal.privacy import PrivacyOdometer

    led = tmp_path / "long.sqlite"
    odo = PrivacyOdometer(1.0, ledger=led, name="long")
    odo.spend("q " * 60, 0.1, mechanism="gaussian on the summed gradient " * 8, sensitivity=2.5)
    odo.spend("count", 0.2, mechanism="laplace", sensitivity=1.0)
    r = _status(cli, led)
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert max(len(line) for line in lines) <= TEXT_WIDTH
    assert "release 1" in lines and "release 2" in lines
    assert "  sensitivity  2.5" in lines and "  sensitivity  1" in lines
    assert "remaining=0.7" in r.output


def test_status_of_a_file_that_is_no_ledger(cli: typer.Typer, tmp_path: Path) -> None:
    bad = tmp_path / "notes.sqlite"
    bad.write_text("not a database")
    r = invoke(cli, "source", "status", "--ledger", bad)
    assert r.exit_code == 2 and "is not a privcal ledger" in r.output


def test_fit_on_a_read_only_ledger_is_one_error_line(
    cli: typer.Typer, files: Any, tmp_path: Path
) -> None:
    """An immutable ledger (``chattr +i``; root cannot write it either) gives one Error line."""
    import shutil
    import subprocess

    led = tmp_path / "ro.sqlite"
    DataSource.init_ledger(files["val0"], led, budget=1.0)
    chattr = shutil.which("chattr")
    if chattr is None or subprocess.run([chattr, "+i", str(led)], capture_output=True).returncode:
        pytest.skip("cannot make the ledger immutable here")
    try:
        r = invoke(cli, "fit", "-m", "acc-t", "--epsilon", 0.5, "--sources", led, "-o",
                   tmp_path / "c.json")  # fmt: skip
        assert r.exit_code == 2, r.output
        assert "Traceback" not in r.output
        assert "A ledger of --sources" in r.output and "ro.sqlite" in r.output
        r = invoke(cli, "source", "status", "--ledger", led)  # reading needs no write access
        assert r.exit_code == 0 and "spent=0" in r.output
    finally:
        subprocess.run([chattr, "-i", str(led)], check=True)


def test_fit_on_sources_with_distributed_noise(
    cli: typer.Typer, files: Any, tmp_path: Path
) -> None:
    """``privcal fit --sources ... --aggregation distributed``: each source pays its epsilon,
    the report says who is trusted with what, and bad combinations are refused before any
    ledger is touched."""
    ledgers = []
    for i in range(3):
        led = tmp_path / f"d{i}.sqlite"
        r = invoke(
            cli, "source", "init", "--data", files[f"val{i}"], "--budget", 1, "--ledger", led
        )
        assert r.exit_code == 0, r.output
        ledgers.append(led)
    srcs = [a for led in ledgers for a in ("--sources", led)]
    base = ["fit", "--method", "acc-t", "--epsilon", 0.5, "--out", tmp_path / "d.json", *srcs]
    for extra, fragment in (
        (["--aggregation", "trusted"], "'--aggregation' parameter of privcal fit"),
        (["--threshold", 2], "--threshold sizes distributed noise shares"),
        (["--aggregation", "distributed", "--threshold", 4], "--threshold must be in [1, 3]"),
    ):
        r = invoke(cli, *base, *extra)
        assert r.exit_code == 2 and fragment in r.output, r.output
    assert all(DataSource.open(led).spent == 0 for led in ledgers)
    r = invoke(cli, *base, "--aggregation", "distributed", "--threshold", 2)
    assert r.exit_code == 0, r.output
    assert "Trust: aggregation=distributed" in r.output and "threshold t=2 of K=3" in r.output
    cal = json.loads((tmp_path / "d.json").read_text())
    assert cal["fitted"]["privacy_report_"]["epsilon"] == pytest.approx(0.5)
    assert all(DataSource.open(led).spent == pytest.approx(0.5) for led in ledgers)

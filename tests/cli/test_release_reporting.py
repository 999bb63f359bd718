"""Issue 32 item 2: every run says what it released, whether it fell back and why, and its
held-out effect with an interval.

* ``privcal fit`` at epsilon 0.1 on 20 rows (100 classes) refuses the private fit, which cannot
  tell its temperature from ``T = 1``, in one line (exit 2, nothing saved) and keeps it with
  ``--force`` (saved, warned); a fit with a clear signal saves its temperature and says why.
* ``privcal report`` on a federated run that fell back says so in its first line and shows
  ``T = 1``; on one that calibrated it shows the temperature and the held-out effect with its
  interval and verdict.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from privcal.cli import app

pytestmark = pytest.mark.integration

runner = CliRunner()


def _scores(n: int, c: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Over-confident logits: labels drawn with three times the logits' noise scale."""
    rng = np.random.default_rng(seed)
    z = 3.0 * rng.normal(size=(n, c))
    return z, np.argmax(z / 3.0 + rng.normal(size=z.shape), axis=1)


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    z, y = _scores(20, 100, 1)
    np.savez(tmp_path / "tiny.npz", logits=z, labels=y)
    return tmp_path / "tiny.npz"


def _fit(*args: str | Path) -> Any:
    return runner.invoke(app, ["fit", *map(str, args)])


def test_fit_refuses_a_too_small_private_fit_before_spending(tmp_path: Path, tiny: Path) -> None:
    """20 rows at epsilon 0.1: the curve's noise SD at T = 1 is 49 and 20 rows move the gap by
    at most 20, so the fit is refused before any release (98 rows needed, epsilon 0.49)."""
    out, ledger = tmp_path / "cal.json", tmp_path / "ledger.sqlite"
    assert runner.invoke(app, ["ledger", "init", str(ledger), "--epsilon", "1"]).exit_code == 0
    for seed in ("0", "1"):  # T = 0.25 and T = 64 before the rule
        res = _fit(
            "-m", "acc-t", "-i", tiny, "--epsilon", "0.1", "--seed", seed, "-o", out,
            "--ledger", ledger,
        )  # fmt: skip
        assert res.exit_code == 2, res.output
        errors = [line for line in res.output.splitlines() if line.startswith("Error:")]
        assert len(errors) == 1, res.output
        for words in ("cannot tell its temperature", "20 rows", "at least 98 rows",
                      "--epsilon >= 0.49", "Nothing was spent", "--force"):  # fmt: skip
            assert words in errors[0], errors[0]
        assert not out.exists() and not (tmp_path / "cal.summary.json").exists()
    assert "no release" in runner.invoke(app, ["ledger", "show", str(ledger)]).output


def test_fit_refuses_a_noise_dominated_private_fit_in_one_line(tmp_path: Path) -> None:
    """Enough rows to inform the fit, but this release's evidence is below 2 noise SDs: the
    fallback is refused in one line and nothing is saved."""
    z, y = _scores(150, 100, 1)
    np.savez(tmp_path / "small.npz", logits=z, labels=y)
    out = tmp_path / "cal.json"
    res = _fit("-m", "acc-t", "-i", tmp_path / "small.npz", "--epsilon", "0.1", "--seed", "0",
               "-o", out)  # fmt: skip
    assert res.exit_code == 2, res.output
    errors = [line for line in res.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, res.output
    for words in ("cannot tell its temperature", "more rows", "--epsilon", "--force"):
        assert words in errors[0], errors[0]
    assert "falls back" not in res.output  # the Error line says it, once
    assert not out.exists() and not (tmp_path / "cal.summary.json").exists()


def test_fit_keeps_a_flagged_fit_with_force_and_warns(tmp_path: Path, tiny: Path) -> None:
    out = tmp_path / "cal.json"
    res = _fit("-m", "acc-t", "-i", tiny, "--epsilon", "0.1", "--seed", "0", "--force", "-o", out)
    assert res.exit_code == 0, res.output
    assert "may calibrate worse than no calibration" in res.output
    saved = json.loads(out.read_text())
    assert saved["fitted"]["temperature_"] == pytest.approx(0.25)
    summary = json.loads((tmp_path / "cal.summary.json").read_text())
    fb = summary["released"]["fallback"]
    assert fb["noise_dominated"] and not fb["fell_back"] and fb["rule"] == "none"
    assert summary["privacy_report"]["fallback"] == fb  # privacy_report gains the keys
    assert "releases" in summary["privacy_report"]  # and keeps its own
    assert "Released: T = 0.25 (kept with fallback='none'" in res.output


def test_fit_with_a_clear_signal_releases_its_temperature(tmp_path: Path) -> None:
    z, y = _scores(2000, 10, 2)
    np.savez(tmp_path / "val.npz", logits=z, labels=y)
    out = tmp_path / "cal.json"
    res = _fit(
        "-m", "acc-t", "-i", tmp_path / "val.npz", "--epsilon", "1", "--seed", "0", "-o", out
    )
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "cal.summary.json").read_text())
    released = summary["released"]
    t = released["parameters"]["temperature"]
    assert t == json.loads(out.read_text())["fitted"]["temperature_"] > 1.5
    assert not released["fallback"]["fell_back"] and released["fallback"]["z"] >= 2.0
    assert f"Released: T = {t:.4g} (its release favours it over T = 1 by" in res.output
    page = runner.invoke(app, ["report", str(tmp_path / "cal.summary.json")])
    assert page.exit_code == 0, page.output
    html = (tmp_path / "cal.summary.html").read_text()
    assert f"released T = {t:.4g}" in html


# -- federated reports --------------------------------------------------------------------------


def _federate_folder(folder: Path, n: int, epsilon: float, seed: int) -> dict[str, Any]:
    """A DP FedTemp run written as the Flower ServerApp writes it (``finish_run`` and
    ``check_on_server``'s files), from the in-process simulator."""
    pytest.importorskip("flwr")
    from privcal.calibrators.summary import release_summary
    from privcal.federated import simulate
    from privcal.federated.flower.server_app import report_with_release
    from privcal.federated.flower.task import dump_json
    from privcal.metrics.compare import compare_uncalibrated
    from privcal.privacy import InsecureNoiseWarning, SeededNoise
    from privcal.private import NoiseDominatedWarning

    z, y = _scores(n + 3000, 4, seed)
    parts = np.array_split(np.arange(n), 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InsecureNoiseWarning)
        warnings.simplefilter("ignore", NoiseDominatedWarning)
        cal, history = simulate(
            "fedtemp", z, y, parts, rounds=3, epsilon=epsilon, delta=1e-5, seed=seed,
            noise=SeededNoise(seed), aggregation="trusted",
        )  # fmt: skip
    folder.mkdir()
    dump_json(folder / "calibrator.json", cal.to_dict())
    dump_json(folder / "history.json", history)
    dump_json(folder / "config.json", {"method": "fedtemp", "epsilon": epsilon, "rounds": 3})
    dump_json(
        folder / "privacy_report.json",
        report_with_release(cal.privacy_report_, release_summary(cal)),
    )
    dump_json(folder / "check.json", compare_uncalibrated(cal, z[n:], y[n:]))
    return {"cal": cal, "report": json.loads((folder / "privacy_report.json").read_text())}


def _findings(folder: Path) -> list[str]:
    from privcal.report import build, find_outputs

    return build(find_outputs(folder)).takeaways


def test_federated_report_of_a_fallback_says_so_first_and_shows_t_1(tmp_path: Path) -> None:
    run = _federate_folder(tmp_path / "fallback", n=40, epsilon=0.5, seed=0)
    assert run["cal"].temperature_ == 1.0 and run["cal"].release_temperature_ != 1.0
    assert run["report"]["fallback"]["fell_back"]
    assert run["report"]["released"]["parameters"]["temperature"] == 1.0
    first = _findings(tmp_path / "fallback")[0]
    assert first.startswith("FELL BACK to the uncalibrated model: fedtemp released T = 1")
    assert "noise SDs" in first
    check = json.loads((tmp_path / "fallback" / "check.json").read_text())
    assert check["ece"][0] == check["ece"][1]  # T = 1 is the uncalibrated model
    assert check["ece_change"]["verdict"] == "no better than uncalibrated"
    held_out = _findings(tmp_path / "fallback")[1]
    assert "NO BETTER THAN UNCALIBRATED" in held_out


def test_federated_report_of_a_calibrated_run_shows_t_and_held_out_effect(tmp_path: Path) -> None:
    run = _federate_folder(tmp_path / "calibrated", n=4000, epsilon=8.0, seed=1)
    t = run["cal"].temperature_
    assert t > 1.2 and not run["report"]["fallback"]["fell_back"]
    first, held_out = _findings(tmp_path / "calibrated")[:2]
    assert first.startswith(f"fedtemp released T = {t:.4g} (its release favours it over T = 1")
    check = json.loads((tmp_path / "calibrated" / "check.json").read_text())
    change = check["ece_change"]
    assert change["low"] <= change["diff"] <= change["high"] < 0.0
    assert check["worse"] is False and change["verdict"] == "better than uncalibrated"
    assert "ECE" in held_out and "bootstrap interval" in held_out
    assert held_out.endswith("better than uncalibrated.")


def test_evaluate_states_the_held_out_effect_with_its_interval(tmp_path: Path) -> None:
    z, y = _scores(3000, 10, 3)
    np.savez(tmp_path / "val.npz", logits=z[:1000], labels=y[:1000])
    np.savez(tmp_path / "test.npz", logits=z[1000:], labels=y[1000:])
    assert (
        _fit("-m", "temperature", "-i", tmp_path / "val.npz", "-o", tmp_path / "ts.json").exit_code
        == 0
    )
    res = runner.invoke(
        app, ["evaluate", "-i", str(tmp_path / "test.npz"), "-c", str(tmp_path / "ts.json"),
              "--out", str(tmp_path / "eval.json")],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    change = json.loads((tmp_path / "eval.json").read_text())["ece_change"]
    assert change["low"] <= change["diff"] <= change["high"] < 0.0  # 3x over-confident
    assert change["verdict"] == "better than uncalibrated"
    found = _findings(tmp_path / "eval.json")[0]
    assert "bootstrap interval of the change" in found and "better than uncalibrated" in found

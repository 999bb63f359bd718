"""``privcal fit / apply / evaluate`` through Typer's CliRunner on temporary .npz files."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from privcal.calibrators import TemperatureScaling
from privcal.cli import app
from privcal.cli import calibrate as calibrate_cli
from privcal.metrics import ece

runner = CliRunner()


def _invoke(*args: str | Path):  # type: ignore[no-untyped-def]
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture
def files(tmp_path: Path, overconfident: tuple[np.ndarray, np.ndarray]) -> dict[str, Path]:
    z, y = overconfident
    paths = {"val": tmp_path / "val.npz", "test": tmp_path / "test.npz"}
    np.savez(paths["val"], logits=z[:300], labels=y[:300])
    np.savez(paths["test"], logits=z[300:], labels=y[300:])
    return paths


def _table_value(output: str, metric: str) -> list[float]:
    line = next(ln for ln in output.splitlines() if ln.strip("│┃ ").startswith(metric))
    return [float(v) for v in re.findall(r"[-+]?\d+\.\d+", line)]


def test_fit_apply_evaluate_round_trip(
    tmp_path: Path, files: dict[str, Path], overconfident: tuple[np.ndarray, np.ndarray]
) -> None:
    z, y = overconfident
    cal, probs = tmp_path / "out" / "cal.json", tmp_path / "probs.npz"
    res = _invoke("fit", "--method", "temperature", "--input", files["val"], "--out", cal)
    assert res.exit_code == 0, res.output
    data = json.loads(cal.read_text())
    expected_t = TemperatureScaling("nll").fit(z[:300], y[:300]).temperature_
    assert data["class"] == "TemperatureScaling"
    assert data["fitted"]["temperature_"] == pytest.approx(expected_t)
    assert 1.4 < expected_t < 2.8  # the fixture's labels follow softmax(z / 2)

    res = _invoke("apply", "--calibrator", cal, "--input", files["test"], "--out", probs)
    assert res.exit_code == 0, res.output
    with np.load(probs) as npz:
        assert sorted(npz.files) == ["labels", "probs"]
        p = npz["probs"]
        np.testing.assert_array_equal(npz["labels"], y[300:])
    np.testing.assert_allclose(p.sum(axis=1), 1.0)
    np.testing.assert_allclose(
        p, TemperatureScaling("nll").fit(z[:300], y[:300]).predict_proba(z[300:]), atol=1e-12
    )

    plot = tmp_path / "figs" / "rel.png"
    res = _invoke("evaluate", "--input", files["test"], "--calibrator", cal, "--plot", plot)
    assert res.exit_code == 0, res.output
    for metric in ("Accuracy", "ECE", "Classwise ECE", "MCE", "Adaptive ECE", "Brier", "NLL"):
        assert metric in res.output
    before, after, change = _table_value(res.output, "ECE")
    assert before == pytest.approx(ece(z[300:], y[300:], input="logits"), abs=1e-4)
    assert after == pytest.approx(ece(p, y[300:]), abs=1e-4)
    assert after < before and change == pytest.approx(after - before, abs=2e-4)
    assert plot.read_bytes().startswith(b"\x89PNG")

    # The written probabilities are themselves evaluable (privcal's probs + labels layout).
    res = _invoke("evaluate", "--input", probs, "--n-bins", "10")
    assert res.exit_code == 0, res.output
    assert _table_value(res.output, "ECE")[0] == pytest.approx(ece(p, y[300:], 10), abs=1e-4)


@pytest.mark.parametrize("method", ["vector", "histogram", "isotonic", "ece-t"])
def test_fit_other_methods(tmp_path: Path, files: dict[str, Path], method: str) -> None:
    cal = tmp_path / "cal.json"
    assert _invoke("fit", "-m", method, "-i", files["val"], "-o", cal).exit_code == 0
    res = _invoke("apply", "-c", cal, "-i", files["test"], "-o", tmp_path / "p.npz")
    assert res.exit_code == 0, res.output


def test_apply_unlabelled_and_probs_input(
    tmp_path: Path, files: dict[str, Path], overconfident: tuple[np.ndarray, np.ndarray]
) -> None:
    z, _ = overconfident
    cal = tmp_path / "cal.json"
    assert _invoke("fit", "-m", "temperature", "-i", files["val"], "-o", cal).exit_code == 0
    unlabelled = tmp_path / "u.npz"
    np.savez(unlabelled, logits=z[300:])
    out = tmp_path / "p.npz"
    res = _invoke("apply", "-c", cal, "-i", unlabelled, "-o", out)
    assert res.exit_code == 0, res.output
    with np.load(out) as npz:
        assert npz.files == ["probs"]
    # Probabilities given as input: --input-kind probs converts them with log, same result.
    soft = np.exp(z[300:] - z[300:].max(axis=1, keepdims=True))
    soft /= soft.sum(axis=1, keepdims=True)
    probs_in = tmp_path / "soft.npy"
    np.save(probs_in, soft)
    out2 = tmp_path / "p2.npz"
    res = _invoke("apply", "-c", cal, "-i", probs_in, "-o", out2, "--input-kind", "probs")
    assert res.exit_code == 0, res.output
    with np.load(out) as a, np.load(out2) as b:
        np.testing.assert_allclose(a["probs"], b["probs"], atol=1e-10)


def _assert_usage_error(res, *fragments: str) -> None:  # type: ignore[no-untyped-def]
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    assert "Error" in res.output
    flat = " ".join(res.output.split())
    for fragment in fragments:
        assert fragment in flat, flat


def test_unknown_method(tmp_path: Path, files: dict[str, Path]) -> None:
    res = _invoke("fit", "-m", "nonsense", "-i", files["val"], "-o", tmp_path / "c.json")
    _assert_usage_error(res, "'--method' parameter of privcal fit", "'nonsense'", "'temperature'")
    assert not (tmp_path / "c.json").exists()


def test_missing_files(tmp_path: Path, files: dict[str, Path]) -> None:
    res = _invoke("fit", "-m", "temperature", "-i", tmp_path / "nope.npz", "-o", tmp_path / "c")
    _assert_usage_error(res, "nope.npz")
    res = _invoke(
        "apply", "-c", tmp_path / "none.json", "-i", files["test"], "-o", tmp_path / "p.npz"
    )
    _assert_usage_error(res, "No calibrator file", "none.json")


def test_nan_logits(tmp_path: Path, overconfident: tuple[np.ndarray, np.ndarray]) -> None:
    z, y = overconfident
    bad = np.array(z, copy=True)
    bad[5, 2] = np.nan
    path = tmp_path / "bad.npz"
    np.savez(path, logits=bad, labels=y)
    res = _invoke("fit", "-m", "temperature", "-i", path, "-o", tmp_path / "c.json")
    _assert_usage_error(res, "non-finite", "row 5")
    res = _invoke("evaluate", "-i", path)
    _assert_usage_error(res, "non-finite")


def test_bad_calibrator_file_and_class_mismatch(tmp_path: Path, files: dict[str, Path]) -> None:
    junk = tmp_path / "junk.json"
    junk.write_text("{not json")
    _assert_usage_error(
        _invoke("apply", "-c", junk, "-i", files["test"], "-o", tmp_path / "p.npz"),
        "not a calibrator JSON file",
    )
    cal = tmp_path / "cal.json"
    assert _invoke("fit", "-m", "vector", "-i", files["val"], "-o", cal).exit_code == 0
    three = tmp_path / "three.npz"
    np.savez(three, logits=np.zeros((4, 3)), labels=np.array([0, 1, 2, 0]))
    _assert_usage_error(_invoke("evaluate", "-i", three, "-c", cal), "fitted on 4 classes")
    _assert_usage_error(
        _invoke("apply", "-c", cal, "-i", files["test"], "-o", tmp_path / "p.txt"),
        "must be an .npz path",
    )


def test_unknown_layout(tmp_path: Path) -> None:
    path = tmp_path / "weird.npz"
    np.savez(path, x=np.zeros(3))
    _assert_usage_error(_invoke("evaluate", "-i", path), "match no layout")


def test_private_options_without_hook(
    tmp_path: Path, files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # privcal.cli.source installs the hook when the app is built; without it, a clear error
    monkeypatch.setattr(calibrate_cli, "PRIVATE_FIT_HOOK", None)
    res = _invoke(
        "fit",
        "-m",
        "temperature",
        "-i",
        files["val"],
        "-o",
        tmp_path / "c.json",
        "--epsilon",
        "1.0",
    )
    _assert_usage_error(res, "--epsilon/--sources", "no private fitting hook")


def test_private_hook_dispatch(
    tmp_path: Path, files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[calibrate_cli.PrivateFitRequest] = []

    def hook(request: calibrate_cli.PrivateFitRequest) -> TemperatureScaling:
        seen.append(request)
        assert request.scores is not None
        return TemperatureScaling().fit(request.scores.logits, request.scores.labels)

    monkeypatch.setattr(calibrate_cli, "PRIVATE_FIT_HOOK", hook)
    out = tmp_path / "c.json"
    res = _invoke(
        "fit",
        "-m",
        "private-acc-t",
        "-i",
        files["val"],
        "-o",
        out,
        "--epsilon",
        "0.5",
        "--sources",
        "a.db",
        "--sources",
        "b.db",
        "--seed",
        "3",
    )
    assert res.exit_code == 0, res.output
    (req,) = seen
    assert (req.method, req.epsilon, req.sources, req.seed) == (
        "private-acc-t",
        0.5,
        ["a.db", "b.db"],
        3,
    )
    assert json.loads(out.read_text())["class"] == "TemperatureScaling"


def test_help_lists_commands() -> None:
    res = _invoke("--help")
    assert res.exit_code == 0
    for verb in ("fit", "apply", "evaluate", "demo", "bench"):
        assert verb in res.output
    assert _invoke("--version").output.strip().startswith("privcal ")


def test_budget_exceeded_exits_3(
    tmp_path: Path, files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from privcal.privacy import BudgetExceededError

    def hook(request: calibrate_cli.PrivateFitRequest) -> TemperatureScaling:
        raise BudgetExceededError("hospital", "accuracy_gap_sum", 1.0, 0.8, 0.5)

    monkeypatch.setattr(calibrate_cli, "PRIVATE_FIT_HOOK", hook)
    out = tmp_path / "c.json"
    res = _invoke("fit", "-m", "acc-t", "-i", files["val"], "-o", out, "--epsilon", "0.5")
    assert res.exit_code == 3, res.output
    assert "Traceback" not in res.output
    assert "Privacy budget of odometer 'hospital' exceeded" in " ".join(res.output.split())
    assert not out.exists()

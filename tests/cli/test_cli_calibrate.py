"""``privcal fit / apply / evaluate`` through Typer's CliRunner on temporary .npz files."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from privcal.calibrators import TemperatureScaling
from privcal.cli import app
from privcal.cli._common import load_calibrator
from privcal.metrics import ece

pytestmark = pytest.mark.integration

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
    res = _invoke(
        "fit", "-m", "temperature", "-i", tmp_path / "nope.npz", "-o", tmp_path / "c.json"
    )
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
        "the .json file that 'privcal fit' wrote",
    )
    _assert_usage_error(  # a binary file (here a scores file) given as the calibrator
        _invoke("apply", "-c", files["test"], "-i", files["test"], "-o", tmp_path / "p.npz"),
        "it is not text: a scores file?",
    )
    cal = tmp_path / "cal.json"
    assert _invoke("fit", "-m", "vector", "-i", files["val"], "-o", cal).exit_code == 0
    three = tmp_path / "three.npz"
    np.savez(three, logits=np.zeros((4, 3)), labels=np.array([0, 1, 2, 0]))
    _assert_usage_error(
        _invoke("evaluate", "-i", three, "-c", cal),
        "--calibrator calibrator was fitted on 4 classes",
        "three.npz' has 3 classes",
        "another model",
    )
    _assert_usage_error(
        _invoke("apply", "-c", cal, "-i", three, "-o", tmp_path / "p3.npz"), "has 3 classes"
    )
    _assert_usage_error(
        _invoke("apply", "-c", cal, "-i", files["test"], "-o", tmp_path / "p.txt"),
        "must end in one of .json, .csv, .parquet, .npz",
    )


def test_unknown_layout(tmp_path: Path) -> None:
    path = tmp_path / "weird.npz"
    np.savez(path, x=np.zeros(3))
    _assert_usage_error(_invoke("evaluate", "-i", path), "match no layout")


def test_private_fit_calls_the_private_module(tmp_path: Path, files: dict[str, Path]) -> None:
    """``fit --epsilon`` fits the private calibrator directly (no hook to install first)."""
    out = tmp_path / "c.json"
    res = _invoke(
        "fit", "-m", "acc-t", "-i", files["val"], "-o", out, "--epsilon", "0.5", "--seed", "3"
    )
    assert res.exit_code == 0, res.output
    saved = json.loads(out.read_text())
    assert saved["class"] == "PrivateTemperatureScaling"
    assert saved["fitted"]["privacy_report_"]["epsilon"] == 0.5


def test_seed_without_epsilon_is_refused(tmp_path: Path, files: dict[str, Path]) -> None:
    out = tmp_path / "c.json"
    res = _invoke("fit", "-m", "temperature", "-i", files["val"], "-o", out, "--seed", "1")
    _assert_usage_error(res, "--seed sets the noise of a private fit", "add --epsilon")
    assert not out.exists()


def test_t_range(tmp_path: Path, files: dict[str, Path]) -> None:
    out = tmp_path / "c.json"
    res = _invoke(
        "fit", "-m", "temperature", "-i", files["val"], "-o", out, "--t-range", "0.5", "1"
    )
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["fitted"]["temperature_"] == pytest.approx(1.0)
    assert "--t-range" in " ".join(res.output.split())  # the bound warning names the option
    res = _invoke("fit", "-m", "vector", "-i", files["val"], "-o", out, "--t-range", "0.5", "2")
    _assert_usage_error(res, "--t-range applies to the temperature methods")
    res = _invoke("fit", "-m", "temperature", "-i", files["val"], "-o", out, "--t-range", "2", "1")
    _assert_usage_error(res, "'--t-range' parameter of privcal fit", "0 < LO < HI")


def test_max_iter(tmp_path: Path, files: dict[str, Path]) -> None:
    """--max-iter reaches the Newton fits, whose warning then names the option; other methods
    and private fits refuse it."""
    out = tmp_path / "c.json"
    res = _invoke("fit", "-m", "matrix", "-i", files["val"], "-o", out, "--max-iter", "1")
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["params"]["max_iter"] == 1
    text = " ".join(res.output.split())
    assert "used the max_iter=1 Newton iterations" in text and "--max-iter N" in text
    res = _invoke("fit", "-m", "temperature", "-i", files["val"], "-o", out, "--max-iter", "5")
    _assert_usage_error(res, "--max-iter applies to the Newton fits")
    res = _invoke(
        "fit", "-m", "temperature", "-i", files["val"], "-o", out, "--max-iter", "5",
        "--epsilon", "1",
    )  # fmt: skip
    _assert_usage_error(res, "--max-iter applies to the non-private Newton fits")
    res = _invoke("fit", "-m", "matrix", "-i", files["val"], "-o", out, "--max-iter", "0")
    _assert_usage_error(res, "--max-iter", "x>=1")


def test_evaluate_top_label_csv(tmp_path: Path) -> None:
    """A top-label file (true_label,pred_label,confidence) gets its top-label metrics."""
    from privcal.metrics.statistics import calibration_bins

    rng = np.random.default_rng(0)
    conf = rng.uniform(0.3, 1.0, 400)
    pred = rng.integers(0, 10, 400)
    true = np.where(rng.uniform(size=400) < conf - 0.1, pred, (pred + 1) % 10)
    path = tmp_path / "toplabel.csv"
    rows = "\n".join(f"{t},{p},{c:.17g}" for t, p, c in zip(true, pred, conf, strict=True))
    path.write_text("true_label,pred_label,confidence\n" + rows + "\n")
    res = _invoke("evaluate", "-i", path)
    assert res.exit_code == 0, res.output
    assert "400 examples, top label" in res.output
    expected = calibration_bins(conf, (true == pred).astype(float), 15).ece()
    assert _table_value(res.output, "ECE")[0] == pytest.approx(expected, abs=1e-4)
    assert "Brier" not in res.output
    _assert_usage_error(_invoke("fit", "-m", "temperature", "-i", path, "-o", tmp_path / "c.json"),
                        "top-label scores only")  # fmt: skip


def test_apply_writes_the_format_of_the_suffix(tmp_path: Path, files: dict[str, Path]) -> None:
    cal = tmp_path / "cal.json"
    assert _invoke("fit", "-m", "temperature", "-i", files["val"], "-o", cal).exit_code == 0
    probs = {}
    for suffix in (".npz", ".csv", ".parquet"):
        out = tmp_path / f"p{suffix}"
        assert _invoke("apply", "-c", cal, "-i", files["test"], "-o", out).exit_code == 0
        res = _invoke("evaluate", "-i", out)  # each is a privcal score file again
        assert res.exit_code == 0, res.output
        probs[suffix] = _table_value(res.output, "ECE")[0]
    assert len(set(probs.values())) == 1
    out = tmp_path / "p.json"
    assert _invoke("apply", "-c", cal, "-i", files["test"], "-o", out).exit_code == 0
    data = json.loads(out.read_text())
    assert sorted(data) == ["labels", "probs"] and len(data["probs"]) == len(data["labels"])


def test_help_lists_commands() -> None:
    res = _invoke("--help")
    assert res.exit_code == 0
    verbs = ("fit", "apply", "evaluate", "split", "conformal", "source", "audit", "federate")
    for verb in (*verbs, "demo"):
        assert verb in res.output
    assert _invoke("--version").output.strip().startswith("privcal ")


def test_budget_exceeded_exits_3(
    tmp_path: Path, files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from privcal.cli import private_fit
    from privcal.privacy import BudgetExceededError

    def refuse(*args: object, **kwargs: object) -> TemperatureScaling:
        raise BudgetExceededError("hospital", "accuracy_gap_sum", 1.0, 0.8, 0.5)

    monkeypatch.setattr(private_fit, "fit_private", refuse)
    out = tmp_path / "c.json"
    res = _invoke("fit", "-m", "acc-t", "-i", files["val"], "-o", out, "--epsilon", "0.5")
    assert res.exit_code == 3, res.output
    assert "Traceback" not in res.output
    assert "Privacy budget of odometer 'hospital' exceeded" in " ".join(res.output.split())
    assert not out.exists()


def test_fit_shows_the_iterations_of_a_long_fit(
    tmp_path: Path, files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``privcal fit`` draws the fit's iterations on stderr once the fit has run
    ``STATUS_AFTER_S`` seconds (0 here, so that a quick fit counts as long); the status line is
    gone when the fit ends and stdout holds only the result line."""
    from privcal.cli import calibrate

    shown: list[str] = []

    class Recorder:
        def __init__(self, text: str, console: object) -> None:
            shown.append(text)

        def start(self) -> None:
            pass

        def update(self, text: str) -> None:
            shown.append(text)

        def stop(self) -> None:
            shown.append("stopped")

    monkeypatch.setattr(calibrate, "STATUS_AFTER_S", 0.0)
    monkeypatch.setattr("rich.status.Status", Recorder)
    cal = tmp_path / "m.json"
    res = _invoke("fit", "--method", "matrix", "--input", files["val"], "--out", cal)
    assert res.exit_code == 0, res.output
    assert shown[0].startswith("matrix scaling: iteration 1, objective ")
    assert shown[-1] == "stopped"
    assert "objective" not in res.stdout
    monkeypatch.setattr(calibrate, "STATUS_AFTER_S", 1e9)  # a quick fit shows nothing
    shown.clear()
    res = _invoke("fit", "--method", "matrix", "--input", files["val"], "--out", cal)
    assert res.exit_code == 0, res.output
    assert shown == []


# -- --n-bins ---------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["histogram", "histogram-classwise", "ece-t"])
def test_n_bins_sets_the_bins_of_every_method_that_bins(
    tmp_path: Path, files: dict[str, Path], method: str
) -> None:
    out = tmp_path / "c.json"
    res = _invoke("fit", "-m", method, "-i", files["val"], "-o", out, "--n-bins", "7")
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["params"]["n_bins"] == 7
    summary = json.loads((tmp_path / "c.summary.json").read_text())
    assert summary["n_bins"] == 7  # the summary's metrics use the same bins
    if method != "ece-t":
        assert load_calibrator(out).bin_values_.shape[-1] == 7


def test_n_bins_sets_the_bins_of_a_private_histogram(
    tmp_path: Path, files: dict[str, Path]
) -> None:
    out = tmp_path / "c.json"
    res = _invoke(
        "fit", "-m", "histogram", "-i", files["val"], "-o", out, "--epsilon", "1", "--seed", "0",
        "--n-bins", "6",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["params"]["n_bins"] == 6


@pytest.mark.parametrize(
    ("method", "value", "fragment"),
    [
        ("histogram", "0", "'--n-bins' parameter of privcal fit must be an integer >= 1"),
        ("ece-t", "-3", "must be an integer >= 1"),
        ("temperature", "7", "--method temperature has no bins"),
        ("vector", "15", "histogram, histogram-classwise, ece-t"),
    ],
)
def test_n_bins_is_refused_below_1_and_where_nothing_bins(
    tmp_path: Path, files: dict[str, Path], method: str, value: str, fragment: str
) -> None:
    out = tmp_path / "c.json"
    res = _invoke("fit", "-m", method, "-i", files["val"], "-o", out, "--n-bins", value)
    _assert_usage_error(res, fragment)
    assert not out.exists()


# -- probabilities stored as logits, unlabelled files -----------------------------------------


def test_probabilities_under_logits_are_refused(
    tmp_path: Path, overconfident: tuple[np.ndarray, np.ndarray]
) -> None:
    z, y = overconfident
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    path = tmp_path / "p.npz"
    np.savez(path, logits=p, labels=y)
    out = tmp_path / "c.json"
    res = _invoke("fit", "-m", "temperature", "-i", path, "-o", out)
    _assert_usage_error(res, "p.npz", "looks like probabilities", "--input-kind probs")
    assert not out.exists()
    # Stated explicitly: the probabilities are converted with log, as if stored under 'probs'.
    res = _invoke("fit", "-m", "temperature", "-i", path, "-o", out, "--input-kind", "probs")
    assert res.exit_code == 0, res.output
    expected = TemperatureScaling("nll").fit(np.log(p), y).temperature_
    assert json.loads(out.read_text())["fitted"]["temperature_"] == pytest.approx(expected)
    # ... and apply's unlabelled .npz and lone .npy are checked the same way.
    np.savez(tmp_path / "u.npz", logits=p)
    np.save(tmp_path / "u.npy", p)
    for src in ("u.npz", "u.npy"):
        res = _invoke("apply", "-c", out, "-i", tmp_path / src, "-o", tmp_path / "q.npz")
        _assert_usage_error(res, src, "looks like probabilities")


def test_an_unlabelled_file_says_it_has_no_labels(tmp_path: Path, files: dict[str, Path]) -> None:
    with np.load(files["val"]) as npz:
        np.savez(tmp_path / "u.npz", logits=npz["logits"])
    res = _invoke("fit", "-m", "temperature", "-i", tmp_path / "u.npz", "-o", tmp_path / "c.json")
    _assert_usage_error(res, "u.npz' has no labels", "add an array 'labels'")
    line = " ".join(res.stderr.split())
    assert "Recognised layouts" not in line and len(line.replace(str(tmp_path), "")) < 160, line


# -- top-label files --------------------------------------------------------------------------


def _top_label_csv(path: Path, z: np.ndarray, y: np.ndarray) -> Path:
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    rows = "".join(f"{t},{k},{c:.17g}\n" for t, k, c in zip(y, p.argmax(1), p.max(1), strict=True))
    path.write_text("true_label,pred_label,confidence\n" + rows)
    return path


def test_top_label_histogram_binning_fit_apply_evaluate_plot(
    tmp_path: Path, overconfident: tuple[np.ndarray, np.ndarray]
) -> None:
    """A top-label CSV trains top-label histogram binning (the map ``fit`` learns from the full
    vectors of the same rows), is calibrated by ``apply`` into a top-label CSV again, and gets
    a top-label reliability diagram from ``evaluate --plot``."""
    from privcal.calibrators import HistogramBinning
    from privcal.metrics.statistics import calibration_bins

    z, y = overconfident
    val = _top_label_csv(tmp_path / "val.csv", z[:300], y[:300])
    test = _top_label_csv(tmp_path / "test.csv", z[300:], y[300:])
    cal = tmp_path / "h.json"
    res = _invoke("fit", "-m", "histogram", "-i", val, "-o", cal, "--n-bins", "10")
    assert res.exit_code == 0, res.output
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fit's cross-fit diagnostic; not what is tested here
        ref = HistogramBinning(n_bins=10).fit(z[:300], y[:300])
    np.testing.assert_allclose(load_calibrator(cal).bin_values_, ref.bin_values_, equal_nan=True)

    out = tmp_path / "calibrated.csv"
    res = _invoke("apply", "-c", cal, "-i", test, "-o", out)
    assert res.exit_code == 0, res.output
    from privcal.data import read_scores

    got = read_scores(out)
    assert got.is_top_label
    rows = np.arange(300)  # the predicted class's calibrated probability, as predict_proba has it
    expected = ref.predict_proba(z[300:])[rows, z[300:].argmax(axis=1)]
    np.testing.assert_allclose(got.confidence, expected, atol=1e-12)

    plot = tmp_path / "rel.png"
    res = _invoke("evaluate", "-i", test, "-c", cal, "--plot", plot)
    assert res.exit_code == 0, res.output
    assert plot.read_bytes().startswith(b"\x89PNG")
    before, after, _ = _table_value(res.output, "ECE")
    correct = (got.predicted == got.labels).astype(float)
    assert after == pytest.approx(calibration_bins(got.confidence, correct, 15).ece(), abs=1e-4)
    assert before != after
    plot1 = tmp_path / "one.svg"
    res = _invoke("evaluate", "-i", test, "--plot", plot1)
    assert res.exit_code == 0, res.output
    assert plot1.read_text().lstrip().startswith("<?xml")

    # --out keeps the diagrams' data (the bins of the confidences), so the report has a figure
    summary = tmp_path / "ev.json"
    res = _invoke("evaluate", "-i", test, "-c", cal, "--out", summary)
    assert res.exit_code == 0, res.output
    rel = json.loads(summary.read_text())["reliability"]
    assert set(rel) == {"before", "after"}
    after_bins = calibration_bins(got.confidence, correct, 15)
    np.testing.assert_array_equal(rel["after"]["counts"], after_bins.counts)
    assert sum(rel["before"]["counts"]) == 300
    res = _invoke("report", summary)
    assert res.exit_code == 0, res.output
    page = next(tmp_path.glob("ev*.html")).read_text()
    assert page.count("<svg") + page.count("<img") >= 1


def test_top_label_files_round_trip_and_refuse_other_models(
    tmp_path: Path, overconfident: tuple[np.ndarray, np.ndarray]
) -> None:
    """``apply`` on a top-label file writes a top-label ``.npz`` that ``evaluate`` reads back;
    a top-label file whose class indices do not fit the calibrator's classes, or whose labels
    are not numbers, is refused with the column or the fix named."""
    z, y = overconfident
    val = _top_label_csv(tmp_path / "val.csv", z[:300], y[:300])
    test = _top_label_csv(tmp_path / "test.csv", z[300:], y[300:])
    cal = tmp_path / "h.json"
    assert _invoke("fit", "-m", "histogram", "-i", val, "-o", cal).exit_code == 0
    out = tmp_path / "calibrated.npz"
    res = _invoke("apply", "-c", cal, "-i", test, "-o", out)
    assert res.exit_code == 0, res.output
    res = _invoke("evaluate", "-i", out)
    assert res.exit_code == 0, res.output
    assert "300 examples, top label" in res.output

    wide = tmp_path / "wide.csv"  # class index 9 >= the calibrator's 4 classes
    wide.write_text("true_label,pred_label,confidence\n9,9,0.9\n0,1,0.6\n")
    _assert_usage_error(
        _invoke("evaluate", "-i", wide, "-c", cal), "fitted on 4 classes", "class index 9"
    )
    text = tmp_path / "text.csv"
    text.write_text("true_label,pred_label,confidence\n1,2,0.5\n3,cat,0.5\n")
    _assert_usage_error(_invoke("evaluate", "-i", text), "'pred_label'", "non-numeric", "'cat'")
    above = tmp_path / "above.csv"  # no advice to pass logits: a top-label file refuses them
    above.write_text("true_label,pred_label,confidence\n1,2,0.5\n3,1,1.5\n")
    res = _invoke("evaluate", "-i", above)
    _assert_usage_error(res, "'confidence' must hold", "[0.5, 1.5]", "apply the softmax")
    assert "input='logits'" not in res.output


def test_top_label_files_refuse_what_needs_whole_vectors(
    tmp_path: Path, files: dict[str, Path], overconfident: tuple[np.ndarray, np.ndarray]
) -> None:
    z, y = overconfident
    top = _top_label_csv(tmp_path / "top.csv", z, y)
    temp = tmp_path / "t.json"
    assert _invoke("fit", "-m", "temperature", "-i", files["val"], "-o", temp).exit_code == 0
    res = _invoke("apply", "-c", temp, "-i", top, "-o", tmp_path / "p.csv")
    _assert_usage_error(res, "top-label scores only", "cannot be applied", "fit -m histogram")
    res = _invoke("fit", "-m", "histogram-classwise", "-i", top, "-o", tmp_path / "c.json")
    _assert_usage_error(res, "only --method histogram")
    res = _invoke("fit", "-m", "histogram", "-i", top, "-o", tmp_path / "c.json", "--epsilon", "1")
    _assert_usage_error(res, "private fits need the full")

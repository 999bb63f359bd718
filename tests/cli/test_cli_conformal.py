"""``privcal conformal`` through a fresh Typer app (register + CliRunner)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import typer
from click.testing import Result
from typer.testing import CliRunner

from privcal.cli.conformal import register
from privcal.conformal import SplitConformal

pytestmark = pytest.mark.integration


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """privcal"""

    register(app)
    return app


def _invoke(*args: object) -> Result:
    return CliRunner().invoke(_app(), [str(a) for a in args])


def _files(tmp_path: Path) -> tuple[Path, Path]:
    rng = np.random.default_rng(0)
    z = 2 * rng.normal(size=(3000, 5))
    y = z.argmax(1)
    np.savez(tmp_path / "cal.npz", logits=z[:2000], labels=y[:2000])
    np.savez(tmp_path / "test.npz", logits=z[2000:], labels=y[2000:])
    return tmp_path / "cal.npz", tmp_path / "test.npz"


def _row(output: str, name: str) -> str:
    line = next(ln for ln in output.splitlines() if ln.strip("│ ").startswith(name))
    return line.split("│")[2].strip()


def test_private_sets(tmp_path: Path) -> None:
    cal, test = _files(tmp_path)
    out = tmp_path / "sets.parquet"
    args = ["conformal", "--alpha", "0.1", "--epsilon", "1", "--cal", cal, "--test", test]
    r = _invoke(*args, "--out", out, "--seed", "0")
    assert r.exit_code == 0, r.output
    assert "Private conformal (lac, alpha=0.1): 2000 calibration, 1000 test" in r.output
    assert 0.85 < float(_row(r.output, "coverage").split()[0]) <= 1.0
    assert _row(r.output, "relation") == "substitute one calibration example; n public"
    assert _row(r.output, "status") == "not private: seeded noise"
    assert _row(r.output, "privacy").startswith("epsilon=1, exponential")
    assert "Warning: PrivateConformal draws noise from SeededNoise" in r.output
    table = pq.read_table(out)
    assert table.num_rows == 1000
    assert {"index", "size", "covered", "label", "set_0", "set_4"} <= set(table.column_names)


def test_private_sets_secure_noise_by_default(tmp_path: Path) -> None:
    cal, test = _files(tmp_path)
    r = _invoke("conformal", "--epsilon", "1", "--cal", cal, "--test", test)
    assert r.exit_code == 0, r.output
    assert _row(r.output, "status") == "private" and "Warning" not in r.output


def test_localised_sets_from_n_4000_and_the_localize_option(tmp_path: Path) -> None:
    """The default localises from n = 4000 (and says so); --localize none keeps one stage."""
    rng = np.random.default_rng(1)
    z = 2 * rng.normal(size=(5000, 5))
    np.savez(tmp_path / "cal.npz", logits=z[:4000], labels=z[:4000].argmax(1))
    np.savez(tmp_path / "test.npz", logits=z[4000:], labels=z[4000:].argmax(1))
    args = ["conformal", "--epsilon", "1", "--cal", tmp_path / "cal.npz", "--test"]
    r = _invoke(*args, tmp_path / "test.npz")
    assert r.exit_code == 0, r.output
    assert _row(r.output, "localised").startswith("1000 points found the window")
    # part 2's level and bins come from the released window: not listed as public
    assert _row(r.output, "threshold part").endswith("(from the released window)")
    assert "public" not in [ln.strip("│ ").split(" ")[0] for ln in r.output.splitlines()]
    r = _invoke(*args, tmp_path / "test.npz", "--localize", "none")
    assert r.exit_code == 0 and "localised" not in r.output, r.output
    assert _row(r.output, "public").startswith("level=")
    for bad in ("half", "0.9", "0"):
        r = _invoke(*args, tmp_path / "test.npz", "--localize", bad)
        assert r.exit_code != 0 and "'--localize' parameter of privcal conformal" in r.output
    r = _invoke(*args, tmp_path / "test.npz", "--method", "bounded-range", "--localize", "0.2")
    assert r.exit_code != 0 and "--localize applies to --method rank only" in r.output


@pytest.mark.parametrize("suffix", [".csv", ".json", ".npz"])
def test_split_sets_match_the_estimator(tmp_path: Path, suffix: str) -> None:
    """Non-private sets, in every output format, are exactly SplitConformal's."""
    cal, test = _files(tmp_path)
    out = tmp_path / f"sets{suffix}"
    args = ["conformal", "--alpha", "0.2", "--cal", cal, "--test", test, "--score", "aps"]
    r = _invoke(*args, "--out", out)
    assert r.exit_code == 0, r.output
    assert "epsilon" not in r.output
    with np.load(cal) as c, np.load(test) as t:
        est = SplitConformal(score="aps", alpha=0.2).fit(c["logits"], c["labels"])
        sets, labels = est.predict_set(t["logits"]), t["labels"]
    assert float(_row(r.output, "threshold")) == pytest.approx(est.threshold_, rel=1e-5)
    expected_cov = sets[np.arange(len(labels)), labels].mean()
    assert float(_row(r.output, "coverage").split()[0]) == pytest.approx(expected_cov, abs=1e-4)
    if suffix == ".npz":
        with np.load(out) as npz:
            written = npz["set"]
    elif suffix == ".json":
        written = np.array(json.loads(out.read_text())["set"])
    else:
        import pyarrow.csv

        tab = pyarrow.csv.read_csv(out)
        written = np.column_stack([tab.column(f"set_{c}").to_numpy() for c in range(5)])
    np.testing.assert_array_equal(written, sets)


def test_unlabelled_test_file(tmp_path: Path) -> None:
    cal, test = _files(tmp_path)
    with np.load(test) as t:
        np.savez(tmp_path / "u.npz", logits=t["logits"])
    r = _invoke("conformal", "--cal", cal, "--test", tmp_path / "u.npz")
    assert r.exit_code == 0, r.output
    assert _row(r.output, "coverage") == "- (the test file has no labels)"
    assert re.search(r"mean set size\s+│\s+\d\.\d{3}", r.output)


def test_deprecated_bins_option_warns_and_matches_n_bins(tmp_path: Path) -> None:
    """``--bins`` still works for one release: a warning naming ``--n-bins``, the same sets."""
    cal, test = _files(tmp_path)
    args = ["conformal", "--epsilon", "1", "--cal", cal, "--test", test, "--seed", "0"]
    new = _invoke(*args, "--n-bins", "200")
    old = _invoke(*args, "--bins", "200")
    assert new.exit_code == 0 and old.exit_code == 0, old.output
    assert "--bins is deprecated" in old.output and "use --n-bins" in old.output
    assert _row(old.output, "threshold") == _row(new.output, "threshold")
    both = _invoke(*args, "--bins", "200", "--n-bins", "100")
    assert both.exit_code != 0 and "pass only --n-bins" in both.output


def test_a_threshold_below_one_never_prints_as_one() -> None:
    """APS thresholds of an over-confident network sit within 1e-9 of 1: '1' would read as the
    full set, which they are not."""
    from privcal.cli.conformal import _score

    assert _score(0.999999998941985) == "1 - 1.06e-09"
    assert _score(1.0) == "1" and _score(0.401936123) == "0.401936" and _score(0.9999) == "0.9999"


def test_seed_chooses_randomised_aps_draws_without_epsilon(tmp_path: Path) -> None:
    """Without --epsilon, --seed seeds randomised APS's u draws (default 0, as the estimator);
    with a score that draws nothing it is refused, naming both of its uses."""
    cal, test = _files(tmp_path)
    args = ["conformal", "--cal", cal, "--test", test, "--score", "aps-randomized"]
    runs = [_invoke(*args, *extra) for extra in ((), ("--seed", "0"), ("--seed", "1"))]
    assert all(r.exit_code == 0 for r in runs), [r.output for r in runs]
    default, zero, one = (_row(r.output, "threshold") for r in runs)
    assert default == zero and one != zero
    r = _invoke("conformal", "--cal", cal, "--test", test, "--seed", "1")
    assert r.exit_code == 2 and "--score aps-randomized" in r.output

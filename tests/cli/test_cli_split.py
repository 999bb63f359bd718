"""``privcal split``: seeded, stratified calibration / test splits, through Typer's CliRunner
(and once as a real process)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from privcal.cli import app
from privcal.data import read_scores, shared_data_dir

pytestmark = pytest.mark.integration

runner = CliRunner()


def _invoke(*args: str | Path):  # type: ignore[no-untyped-def]
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture
def data(tmp_path: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    """300 rows, 3 classes of 150 / 100 / 50 rows, in privcal's logits layout."""
    rng = np.random.default_rng(3)
    y = rng.permutation(np.repeat([0, 1, 2], [150, 100, 50]))
    z = rng.normal(size=(300, 3)) + 2.0 * np.eye(3)[y]
    path = tmp_path / "all.npz"
    np.savez(path, logits=z, labels=y)
    return path, z, y


@pytest.mark.parametrize("suffixes", [(".npz", ".npz"), (".csv", ".parquet")])
def test_split_is_stratified_disjoint_and_exact(
    tmp_path: Path, data: tuple[Path, np.ndarray, np.ndarray], suffixes: tuple[str, str]
) -> None:
    path, z, y = data
    cal, test = tmp_path / f"cal{suffixes[0]}", tmp_path / f"test{suffixes[1]}"
    res = _invoke("split", path, "--out-cal", cal, "--out-test", test, "--test-size", "0.4")
    assert res.exit_code == 0, res.output
    assert "180 ->" in res.output and "120 ->" in res.output
    a, b = read_scores(cal), read_scores(test)
    assert (a.n_samples, b.n_samples) == (180, 120)
    np.testing.assert_array_equal(np.bincount(a.labels), [90, 60, 30])  # the proportions of y
    np.testing.assert_array_equal(np.bincount(b.labels), [60, 40, 20])
    # Every row lands in exactly one part, with its logits unchanged (float64 round trip).
    rows = {tuple(r) for r in np.column_stack([y, z])}
    got = [tuple(r) for s in (a, b) for r in np.column_stack([s.labels, s.logits])]
    assert len(got) == len(set(got)) == 300 and set(got) == rows


def test_split_is_seeded(tmp_path: Path, data: tuple[Path, np.ndarray, np.ndarray]) -> None:
    path, _, _ = data
    logits = {}
    for name, seed in (("a", "5"), ("b", "5"), ("c", "6")):
        cal, test = tmp_path / f"{name}_cal.npz", tmp_path / f"{name}_test.npz"
        res = _invoke("split", path, "--out-cal", cal, "--out-test", test, "--seed", seed)
        assert res.exit_code == 0, res.output
        logits[name] = read_scores(cal).logits
    np.testing.assert_array_equal(logits["a"], logits["b"])
    assert not np.array_equal(logits["a"], logits["c"])


def test_cal_size_and_probabilities(tmp_path: Path) -> None:
    """--cal-size counts rows; probabilities (netcal layout) are written as the logits log p
    that privcal reads them as, so each part reads back as its rows of the file."""
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(4), size=200).astype(np.float32)
    y = rng.integers(0, 4, 200)
    path = tmp_path / "net.npz"
    np.savez(path, predictions=p, ground_truth=y)
    cal, test = tmp_path / "cal.npz", tmp_path / "test.npz"
    res = _invoke("split", path, "--out-cal", cal, "--out-test", test, "--cal-size", "50")
    assert res.exit_code == 0, res.output
    whole, a = read_scores(path), read_scores(cal)
    assert a.n_samples == 50 and read_scores(test).n_samples == 150
    idx = [int(np.flatnonzero((whole.logits == row).all(axis=1))[0]) for row in a.logits]
    np.testing.assert_array_equal(a.labels, whole.labels[idx])


def test_top_label_file(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    true = rng.integers(0, 5, 100)
    pred = np.where(rng.uniform(size=100) < 0.7, true, (true + 1) % 5)
    conf = rng.uniform(0.3, 1.0, 100)
    path = tmp_path / "top.csv"
    rows = "".join(f"{t},{k},{c:.17g}\n" for t, k, c in zip(true, pred, conf, strict=True))
    path.write_text("true_label,pred_label,confidence\n" + rows)
    cal, test = tmp_path / "cal.csv", tmp_path / "test.parquet"
    res = _invoke("split", path, "--out-cal", cal, "--out-test", test)
    assert res.exit_code == 0, res.output
    a, b = read_scores(cal), read_scores(test)
    assert a.is_top_label and b.is_top_label and a.n_samples + b.n_samples == 100
    assert sorted(np.concatenate([a.confidence, b.confidence])) == sorted(conf)  # type: ignore[list-item]
    res = _invoke("split", path, "--out-cal", tmp_path / "c.npz", "--out-test", test)
    assert res.exit_code == 2 and "top-label" in res.stderr


def test_parts_stratified_make_k_site_files(
    tmp_path: Path, data: tuple[Path, np.ndarray, np.ndarray]
) -> None:
    """--parts 5: five files of 60 rows, each with the class counts 30 / 20 / 10 (the file's
    150 / 100 / 50 divided by 5), every row in exactly one, logits unchanged."""
    path, z, y = data
    res = _invoke("split", path, "--parts", "5", "--out", tmp_path / "site{k}.npz")
    assert res.exit_code == 0, res.output
    assert "into 5 parts, stratified by label, seed 0" in res.output
    sites = [read_scores(tmp_path / f"site{k}.npz") for k in range(5)]
    assert not (tmp_path / "site5.npz").exists()
    for s in sites:
        assert s.n_samples == 60
        np.testing.assert_array_equal(np.bincount(s.labels), [30, 20, 10])
    rows = {tuple(r) for r in np.column_stack([y, z])}
    got = [tuple(r) for s in sites for r in np.column_stack([s.labels, s.logits])]
    assert len(got) == len(set(got)) == 300 and set(got) == rows


def test_parts_dirichlet_is_the_simulate_split_and_seeded(
    tmp_path: Path, data: tuple[Path, np.ndarray, np.ndarray]
) -> None:
    """--partition dirichlet writes dirichlet_partition(labels, K, beta, seed) (the split
    'privcal federate simulate' draws); the same seed gives the same files, another seed not."""
    from privcal.federated import dirichlet_partition

    path, _, y = data
    labels = {}
    for name, seed in (("a", "3"), ("b", "3"), ("c", "4")):
        args = ["--parts", "4", "--partition", "dirichlet", "--beta", "0.5", "--seed", seed]
        res = _invoke("split", path, *args, "--out", tmp_path / f"{name}{{k}}.csv")
        assert res.exit_code == 0, res.output
        assert "Dirichlet beta=0.5" in res.output
        labels[name] = [read_scores(tmp_path / f"{name}{k}.csv").labels for k in range(4)]
    want = dirichlet_partition(y, n_clients=4, beta=0.5, seed=3)
    for got, idx in zip(labels["a"], want, strict=True):
        np.testing.assert_array_equal(got, y[idx])
    assert all(np.array_equal(u, v) for u, v in zip(labels["a"], labels["b"], strict=True))
    assert not all(
        u.shape == v.shape and np.array_equal(u, v)
        for u, v in zip(labels["a"], labels["c"], strict=True)
    )


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--parts", "1", "--out", "s{k}.npz"], "'--parts' parameter of privcal split must be"),
        (["--parts", "301", "--out", "s{k}.npz"], "choose --parts <= 300"),
        (["--parts", "3", "--out", "s.npz"], "with {k} for the part's number"),
        (["--parts", "3"], "with {k} for the part's number"),
        (["--out", "s{k}.npz"], "pass --parts"),
        (["--parts", "3", "--out", "s{k}.txt"], "must end in one of"),
        (["--parts", "3", "--out", "s{k}.npz", "--out-cal", "c.npz"], "drop --out-cal"),
        (["--parts", "3", "--out", "s{k}.npz", "--beta", "0.5"], "--partition dirichlet"),
        (["--parts", "3", "--out", "s{k}.npz", "--partition", "dirichlet", "--beta", "0"],
         "'--beta' parameter of privcal split must be > 0"),
        (["--parts", "200", "--out", "s{k}.npz", "--partition", "dirichlet", "--beta", "0.01"],
         "raise --beta (less skew) or lower --parts"),
        (["--out-cal", "c.npz", "--beta", "0.5"], "pass --parts and --out"),
        ([], "Missing option '--out-cal'"),
    ],
)  # fmt: skip
def test_parts_bad_input_is_one_error_line(
    tmp_path: Path,
    data: tuple[Path, np.ndarray, np.ndarray],
    args: list[str],
    needle: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    res = _invoke("split", data[0], *args)
    assert res.exit_code == 2, res.output
    assert res.stderr.count("Error:") == 1 and needle in " ".join(res.stderr.split())
    assert not list(tmp_path.glob("s*.npz")) and not list(tmp_path.glob("c*.npz"))


@pytest.mark.skipif(shared_data_dir() is None, reason="shared/data is absent")
def test_split_a_shared_file_in_a_real_process(tmp_path: Path) -> None:
    shared = shared_data_dir()
    assert shared is not None
    src = shared / "cleanlab-heldout" / "cifar10"
    cal, test = tmp_path / "cal.npz", tmp_path / "test.npz"
    exe = Path(sys.executable).parent / "privcal"
    proc = subprocess.run(
        [str(exe), "split", str(src), "--out-cal", str(cal), "--out-test", str(test),
         "--cal-size", "2000", "--seed", "0"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    whole, a, b = read_scores(src), read_scores(cal), read_scores(test)
    assert (a.n_samples, b.n_samples) == (2000, whole.n_samples - 2000)
    share = np.bincount(whole.labels) / whole.n_samples
    np.testing.assert_allclose(np.bincount(a.labels) / 2000, share, atol=1e-3)

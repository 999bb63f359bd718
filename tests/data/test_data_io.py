"""Readers and writers of scores (privcal.data.io) and the data paths (privcal.data.paths)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from privcal.data import (
    Scores,
    ZeroProbabilityWarning,
    cache_dir,
    read_scores,
    shared_data_dir,
    write_scores,
)

SHARED = shared_data_dir()
needs_data = pytest.mark.skipif(SHARED is None, reason="shared/data is absent")


def _accuracy(scores: Scores) -> float:
    if scores.logits is not None:
        return float(np.mean(scores.logits.argmax(axis=1) == scores.labels))
    assert scores.predicted is not None
    return float(np.mean(scores.predicted == scores.labels))


# ---------------------------------------------------------------- real files (README table)


@needs_data
@pytest.mark.parametrize(
    ("name", "n", "c", "acc", "conf"),
    [
        ("wideresnet-16-4-cifar-10.npz", 10000, 10, 0.911, 0.965),
        ("lenet-5-cifar-10.npz", 10000, 10, 0.531, 0.639),
        ("wideresnet-16-4-cifar-100.npz", 10000, 100, 0.754, 0.802),
        ("densenet-bc-100-cifar-100.npz", 10000, 100, 0.754, 0.896),
        ("lenet-5-cifar-100.npz", 10000, 100, 0.125, 0.137),
    ],
)
def test_netcal_npz(name: str, n: int, c: int, acc: float, conf: float) -> None:
    assert SHARED is not None
    s = read_scores(SHARED / "netcal-cifar" / name)
    assert (s.n_samples, s.n_classes) == (n, c)
    assert s.logits is not None and s.logits.dtype == np.float64
    assert s.labels.dtype == np.int64
    assert _accuracy(s) == pytest.approx(acc, abs=5e-4)
    assert s.probs().max(axis=1).mean() == pytest.approx(conf, abs=1e-3)
    np.testing.assert_allclose(s.probs().sum(axis=1), 1.0, atol=1e-12)


@needs_data
@pytest.mark.parametrize(
    ("stem", "n", "c", "acc", "conf"),
    [
        ("cifar10", 10000, 10, 0.929, 0.962),
        ("mnist", 10000, 10, 0.991, 0.993),
        ("imdb", 25000, 2, 0.896, 0.936),
    ],
)
@pytest.mark.parametrize("form", ["stem", "_probs.npy", "_labels.npy"])
def test_cleanlab_pair(stem: str, n: int, c: int, acc: float, conf: float, form: str) -> None:
    assert SHARED is not None
    folder = SHARED / "cleanlab-heldout"
    path = folder / stem if form == "stem" else folder / f"{stem}{form}"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        s = read_scores(path)
    messages = [str(w.message) for w in caught]
    assert not any(issubclass(w.category, ZeroProbabilityWarning) for w in caught)  # no zeros
    # imdb has 2744 float32 rounding excursions above 1 (up to 1 + 1e-5): clipped, with a warning
    assert any("2744 values" in m for m in messages) == (stem == "imdb")
    assert (s.n_samples, s.n_classes) == (n, c)
    assert _accuracy(s) == pytest.approx(acc, abs=5e-4)
    assert s.probs().max(axis=1).mean() == pytest.approx(conf, abs=1e-3)


@needs_data
def test_cleanlab_20news_zeros_warn() -> None:
    assert SHARED is not None
    with pytest.warns(ZeroProbabilityWarning, match="exactly 0"):
        s = read_scores(SHARED / "cleanlab-heldout" / "20news")
    assert (s.n_samples, s.n_classes) == (7532, 20)
    assert s.logits is not None and np.isfinite(s.logits).all()
    assert _accuracy(s) == pytest.approx(0.923, abs=5e-4)
    assert s.probs().max(axis=1).mean() == pytest.approx(0.722, abs=5e-4)


@needs_data
@pytest.mark.parametrize(
    ("name", "n"),
    [
        ("probs_densenet40_c10_logits.csv", 10000),
        ("probs_resnet110_c10_logits.csv", 10000),
        ("probs_densenet40_c100_logits.csv", 10000),
        ("probs_resnet110_c100_logits.csv", 10000),
        ("probs_resnet50_birds_logits.csv", 2897),
    ],
)
def test_toplabel_csv(name: str, n: int) -> None:
    assert SHARED is not None
    s = read_scores(SHARED / "cifar-toplabel" / name)
    assert s.is_top_label and s.n_classes is None and s.n_samples == n
    assert s.confidence is not None and s.predicted is not None
    assert s.confidence.shape == (n,) and s.predicted.dtype == np.int64
    acc, conf = _accuracy(s), float(s.confidence.mean())
    if "birds" not in name:  # README: CIFAR rows are 0.70-0.94 accurate, 0.90-0.98 confident
        assert 0.70 <= acc <= 0.94 + 5e-3
        assert 0.90 - 5e-3 <= conf <= 0.98 + 5e-3
    assert conf > acc  # strongly over-confident
    with pytest.raises(ValueError, match="top-label only"):
        s.probs()
    with pytest.raises(ValueError, match="input='logits'"):
        read_scores(SHARED / "cifar-toplabel" / name, input="logits")


@needs_data
def test_input_override_reads_probabilities_as_logits() -> None:
    assert SHARED is not None
    path = SHARED / "netcal-cifar" / "lenet-5-cifar-10.npz"
    auto = read_scores(path)
    raw = read_scores(path, input="logits")
    assert raw.logits is not None and auto.logits is not None
    np.testing.assert_allclose(np.exp(auto.logits), raw.logits, rtol=1e-12)


def test_rounding_excursions_clipped_larger_rejected(tmp_path: Path) -> None:
    np.savez(tmp_path / "r.npz", probs=np.array([[1.00001, 1e-9]]), labels=np.array([0]))
    with pytest.warns(UserWarning, match="clipped"):
        s = read_scores(tmp_path / "r.npz")
    assert s.logits is not None and s.logits[0, 0] == 0.0  # log(1): clipped, not renormalised
    np.savez(tmp_path / "far.npz", probs=np.array([[1.01, -0.01]]), labels=np.array([0]))
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        read_scores(tmp_path / "far.npz")


# ---------------------------------------------------------------- round trips


@pytest.fixture
def scores() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(37, 4)) * 3.0
    logits[0, 0] = 1e-300  # values that a short float format would lose
    logits[1, 1] = -123456.789012345678
    labels = rng.integers(0, 4, size=37)
    return logits, labels


@pytest.mark.parametrize("suffix", [".npz", ".csv", ".parquet"])
def test_round_trip(tmp_path: Path, suffix: str, scores: tuple[np.ndarray, np.ndarray]) -> None:
    logits, labels = scores
    path = write_scores(tmp_path / f"s{suffix}", logits, labels)
    assert path == tmp_path / f"s{suffix}" and path.is_file()
    back = read_scores(path)
    assert back.logits is not None
    np.testing.assert_array_equal(back.logits, logits)  # bit-exact
    np.testing.assert_array_equal(back.labels, labels)
    assert back.source == str(path)


def test_binary_logits_written_as_two_columns(tmp_path: Path) -> None:
    z = np.array([-1.0, 0.5, 2.0])
    back = read_scores(write_scores(tmp_path / "b.csv", z, [0, 1, 1]))
    assert back.logits is not None
    np.testing.assert_array_equal(back.logits, np.column_stack([np.zeros(3), z]))


def test_csv_header(tmp_path: Path) -> None:
    path = write_scores(tmp_path / "h.csv", np.zeros((2, 3)), [0, 2])
    assert path.read_text().splitlines()[0] == "label,logit_0,logit_1,logit_2"


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_prob_columns_read_as_probabilities(tmp_path: Path, suffix: str) -> None:
    import pyarrow as pa
    import pyarrow.csv
    import pyarrow.parquet

    p = np.array([[0.25, 0.75], [0.5, 0.5], [1.0, 0.0]])
    table = pa.table({"label": [1, 0, 0], "prob_1": p[:, 1], "prob_0": p[:, 0]})  # any order
    path = tmp_path / f"p{suffix}"
    if suffix == ".csv":
        pyarrow.csv.write_csv(table, path)
    else:
        pyarrow.parquet.write_table(table, path)
    with pytest.warns(ZeroProbabilityWarning):
        s = read_scores(path)
    assert s.logits is not None
    np.testing.assert_allclose(s.logits[:2], np.log(p[:2]))
    np.testing.assert_allclose(s.probs(), p, atol=1e-300)


def test_npz_probs_layout(tmp_path: Path) -> None:
    p = np.array([[0.1, 0.9], [0.6, 0.4]])
    np.savez(tmp_path / "p.npz", probs=p, labels=np.array([1, 0]))
    s = read_scores(tmp_path / "p.npz")
    assert s.logits is not None
    np.testing.assert_allclose(s.logits, np.log(p))


def test_toplabel_parquet(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet

    table = pa.table({"true_label": [0, 3], "pred_label": [0, 1], "confidence": [0.9, 0.6]})
    pyarrow.parquet.write_table(table, tmp_path / "t.parquet")
    s = read_scores(tmp_path / "t.parquet")
    assert s.is_top_label and s.n_samples == 2
    assert s.predicted is not None and s.confidence is not None
    np.testing.assert_array_equal(s.predicted, [0, 1])
    np.testing.assert_array_equal(s.confidence, [0.9, 0.6])


# ---------------------------------------------------------------- errors


def test_unknown_npz_lists_layouts(tmp_path: Path) -> None:
    np.savez(tmp_path / "x.npz", foo=np.zeros((2, 2)))
    with pytest.raises(ValueError, match="Recognised layouts") as err:
        read_scores(tmp_path / "x.npz")
    assert "ground_truth" in str(err.value) and "logit_0" in str(err.value)


def test_unknown_csv_columns(tmp_path: Path) -> None:
    (tmp_path / "x.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="match no layout"):
        read_scores(tmp_path / "x.csv")


def test_gap_in_columns(tmp_path: Path) -> None:
    (tmp_path / "x.csv").write_text("label,logit_0,logit_2\n0,1.0,2.0\n")
    with pytest.raises(ValueError, match="without gaps"):
        read_scores(tmp_path / "x.csv")


def test_unknown_suffix_and_lone_npy(tmp_path: Path) -> None:
    (tmp_path / "x.txt").write_text("1")
    with pytest.raises(ValueError, match="Recognised layouts"):
        read_scores(tmp_path / "x.txt")
    np.save(tmp_path / "alone.npy", np.zeros((2, 2)))
    with pytest.raises(ValueError, match=r"has no labels .*'alone_labels\.npy'"):
        read_scores(tmp_path / "alone.npy")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_scores(tmp_path / "nothing.npz")


def test_validation_applies(tmp_path: Path) -> None:
    np.savez(tmp_path / "bad.npz", logits=np.zeros((3, 2)), labels=np.array([0, 1, 2]))
    with pytest.raises(ValueError, match="'labels' must lie in"):
        read_scores(tmp_path / "bad.npz")
    np.savez(tmp_path / "nan.npz", logits=np.array([[0.0, np.nan]]), labels=np.array([0]))
    with pytest.raises(ValueError, match="non-finite"):
        read_scores(tmp_path / "nan.npz")
    np.savez(tmp_path / "rows.npz", probs=np.array([[0.2, 0.2]]), labels=np.array([0]))
    with pytest.raises(ValueError, match="sum to 1"):
        read_scores(tmp_path / "rows.npz")


def test_bad_input_option_and_suffix(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'input' parameter of read_scores"):
        read_scores(tmp_path / "x.npz", input="prob")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'path suffix' parameter of write_scores"):
        write_scores(tmp_path / "x.txt", np.zeros((1, 2)), [0])


def test_scores_needs_one_form() -> None:
    with pytest.raises(ValueError, match="either 'logits'"):
        Scores(labels=np.zeros(2, dtype=np.int64))
    with pytest.raises(ValueError, match="either 'logits'"):
        Scores(
            labels=np.zeros(1),
            logits=np.zeros((1, 2)),
            confidence=np.ones(1),
            predicted=np.zeros(1),
        )


# ---------------------------------------------------------------- paths


def test_shared_data_dir_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PRIVCAL_SHARED_DATA", str(tmp_path))
    assert shared_data_dir() == tmp_path.resolve()
    monkeypatch.setenv("PRIVCAL_SHARED_DATA", str(tmp_path / "missing"))
    assert shared_data_dir() is None


def test_shared_data_dir_walks_up_from_cwd(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import privcal.data.paths as paths

    (tmp_path / "shared" / "data").mkdir(parents=True)
    deep = tmp_path / "repo" / "sub"
    deep.mkdir(parents=True)
    monkeypatch.delenv("PRIVCAL_SHARED_DATA", raising=False)
    monkeypatch.setattr(paths, "__file__", str(tmp_path / "elsewhere" / "paths.py"))
    monkeypatch.chdir(deep)
    assert shared_data_dir() == (tmp_path / "shared" / "data").resolve()


def test_cache_dir_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PRIVCAL_CACHE_DIR", str(tmp_path / "c"))
    assert cache_dir() == (tmp_path / "c").resolve()
    monkeypatch.delenv("PRIVCAL_CACHE_DIR")
    assert cache_dir().name == "privcal"


# -- damaged NumPy files ---------------------------------------------------------------------


def _damaged_files(tmp_path: Path) -> dict[str, Path]:
    good = tmp_path / "good.npz"
    np.savez(good, logits=np.zeros((4, 3)), labels=np.array([0, 1, 2, 0]))
    npy = tmp_path / "good_probs.npy"
    np.save(npy, np.full((4, 3), 1 / 3))
    out = {"empty": tmp_path / "empty.npz", "text": tmp_path / "text.npz"}
    out["empty"].write_bytes(b"")
    out["text"].write_text("logits,labels\n")
    out["truncated"] = tmp_path / "truncated.npz"
    out["truncated"].write_bytes(good.read_bytes()[:300])
    out["truncated_npy"] = tmp_path / "truncated.npy"
    out["truncated_npy"].write_bytes(npy.read_bytes()[:140])
    out["text_npy"] = tmp_path / "text.npy"
    out["text_npy"].write_text("0.1 0.9\n")
    return out


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("empty", "is empty \\(0 bytes\\)"),
        ("text", "is not a NumPy .npz archive"),
        ("truncated", "is a damaged .npz archive"),
    ],
)
def test_damaged_npz_names_the_file(tmp_path: Path, name: str, match: str) -> None:
    from privcal.data.io import load_npz

    path = _damaged_files(tmp_path)[name]
    for read in (load_npz, read_scores):
        with pytest.raises(ValueError, match=match) as err:
            read(path)
        assert path.name in str(err.value) and "allow_pickle" not in str(err.value)


@pytest.mark.parametrize(
    ("name", "match"),
    [("truncated_npy", "is a damaged .npy file"), ("text_npy", "is not a NumPy .npy file")],
)
def test_damaged_npy_names_the_file(tmp_path: Path, name: str, match: str) -> None:
    from privcal.data.io import load_npy

    path = _damaged_files(tmp_path)[name]
    with pytest.raises(ValueError, match=match):
        load_npy(path)


def test_folder_is_not_a_scores_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="is a folder"):
        read_scores(tmp_path)


# -- output files ----------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".npz", ".csv", ".parquet", ".json"])
def test_write_columns_by_suffix(tmp_path: Path, suffix: str) -> None:
    import json

    from privcal.data.io import write_columns

    y = np.array([0, 2, 1])
    p = np.array([[0.5, 0.25, 0.25], [0.1, 0.1, 0.8], [0.2, 0.7, 0.1]])
    path = write_columns(tmp_path / f"out{suffix}", {"label": y, "prob": p})
    if suffix == ".json":
        data = json.loads(path.read_text())
        np.testing.assert_array_equal(data["prob"], p)
        assert data["label"] == [0, 2, 1]
    elif suffix == ".npz":
        with np.load(path) as npz:
            np.testing.assert_array_equal(npz["prob"], p)
    else:  # label, prob_0.. prob_2: privcal's score layout, read back exactly
        scores = read_scores(path)
        np.testing.assert_array_equal(scores.labels, y)
        np.testing.assert_allclose(scores.probs(), p, rtol=1e-15)


def test_output_path_checks(tmp_path: Path) -> None:
    from privcal.data.io import check_output_path, write_columns

    with pytest.raises(ValueError, match=r"'--out' parameter of cmd must end in one of \.json"):
        check_output_path(tmp_path / "x.xlsx", "--out", "cmd")
    (tmp_path / "folder.json").mkdir()
    with pytest.raises(ValueError, match="names a folder"):
        check_output_path(tmp_path / "folder.json", "--out", "cmd", (".json",))
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    with pytest.raises(ValueError, match="cannot create the folder"):
        check_output_path(a_file / "sub" / "x.json", "--out", "cmd")
    nested = check_output_path(tmp_path / "new" / "x.csv", "--out", "cmd")
    assert nested.parent.is_dir() and not nested.exists()  # the probe file is removed
    kept = tmp_path / "kept.json"
    kept.write_text("{}")
    assert check_output_path(kept, "--out", "cmd").read_text() == "{}"  # opened, not changed
    with pytest.raises(ValueError, match=r"'x' parameter of cmd: .* cannot be written"):
        check_output_path(tmp_path / ("n" * 300 + ".json"), "x", "cmd")  # name too long
    with pytest.raises(ValueError, match="path suffix"):
        write_columns(tmp_path / "x.txt", {"a": np.arange(2)})


# -- probabilities stored as logits; files without labels -------------------------------------


def _softmax_rows(n: int = 20, c: int = 4) -> tuple[np.ndarray, np.ndarray]:
    z = np.random.default_rng(1).normal(size=(n, c))
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    return p, z.argmax(axis=1)


def test_probabilities_under_logits_are_refused_unless_the_kind_is_stated(tmp_path: Path) -> None:
    p, y = _softmax_rows()
    npz = tmp_path / "p.npz"
    np.savez(npz, logits=p, labels=y)
    csv = tmp_path / "p.csv"
    header = "label," + ",".join(f"logit_{c}" for c in range(p.shape[1]))
    np.savetxt(csv, np.column_stack([y, p]), delimiter=",", header=header, comments="")
    for path, where in ((npz, "the array 'logits'"), (csv, "the logit_\\* columns")):
        with pytest.raises(ValueError, match=f"{where} looks like probabilities") as err:
            read_scores(path)
        assert str(path) in str(err.value) and "input='probs'" in str(err.value)
        # Stated explicitly, either kind is taken as said.
        np.testing.assert_allclose(read_scores(path, input="probs").logits, np.log(p), atol=1e-12)
        np.testing.assert_allclose(read_scores(path, input="logits").logits, p, atol=1e-12)
    # Real logits that happen to be non-negative but do not sum to 1 are fine.
    np.savez(npz, logits=p * 2, labels=y)
    assert read_scores(npz).logits is not None


@pytest.mark.parametrize(
    ("make", "holds", "fix"),
    [
        (lambda d, p: np.savez(d / "u.npz", logits=p), "array 'logits' only", "'labels'"),
        (lambda d, p: np.savez(d / "u.npz", probs=p), "array 'probs' only", "'labels'"),
        (lambda d, p: np.savez(d / "u.npz", predictions=p), "'predictions' only", "ground_truth"),
    ],
)
def test_unlabelled_npz_says_it_has_no_labels(tmp_path: Path, make, holds, fix) -> None:  # type: ignore[no-untyped-def]
    p, _ = _softmax_rows()
    make(tmp_path, p)
    with pytest.raises(ValueError, match="has no labels") as err:
        read_scores(tmp_path / "u.npz")
    text = str(err.value)
    assert holds in text and fix in text and "Recognised layouts" not in text
    assert len(text.replace(str(tmp_path / "u.npz"), "")) < 150, text  # not the layout list


def test_unlabelled_csv_and_npy_say_they_have_no_labels(tmp_path: Path) -> None:
    p, _ = _softmax_rows()
    csv = tmp_path / "u.csv"
    np.savetxt(csv, p, delimiter=",", header="prob_0,prob_1,prob_2,prob_3", comments="")
    with pytest.raises(ValueError, match=r"has no labels .*'label' column"):
        read_scores(csv)
    np.save(tmp_path / "m_probs.npy", p)
    with pytest.raises(ValueError, match=r"has no labels .*'m_labels\.npy'"):
        read_scores(tmp_path / "m_probs.npy")
    np.save(tmp_path / "k_labels.npy", np.zeros(3, dtype=np.int64))
    with pytest.raises(ValueError, match=r"labels only.*'k_probs\.npy'"):
        read_scores(tmp_path / "k_labels.npy")


def test_validation_errors_name_the_file(tmp_path: Path) -> None:
    p, y = _softmax_rows()
    bad = np.log(p)
    bad[2, 1] = np.nan
    np.savez(tmp_path / "nan.npz", logits=bad, labels=y)
    with pytest.raises(ValueError, match=r"nan\.npz.*non-finite"):
        read_scores(tmp_path / "nan.npz")

"""digits_shift: the digits MLP on clean and corrupted test images (privcal.data.digits)."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import numpy as np
import pytest

import privcal.data.digits as digits_module
from privcal.data import CORRUPTIONS, DigitsShift, digits_shift
from privcal.data.digits import SEVERITIES, corrupt

try:
    from privcal.metrics import ece as _privcal_ece
except ImportError:  # pragma: no cover - metrics not built yet
    _privcal_ece = None


def top_label_ece(logits: np.ndarray, labels: np.ndarray, n_bins: int = 15) -> float:
    """15-bin equal-width top-label ECE (privcal.metrics.ece when it exists)."""
    if _privcal_ece is not None:
        return float(_privcal_ece(logits, labels, n_bins=n_bins, input="logits"))
    z = logits - logits.max(axis=1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    conf, correct = p.max(axis=1), (p.argmax(axis=1) == labels).astype(float)
    bins = np.clip(np.ceil(conf * n_bins).astype(int) - 1, 0, n_bins - 1)
    gap = np.bincount(bins, correct - conf, n_bins)
    return float(np.abs(gap).sum() / len(labels))


def accuracy(logits: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean(logits.argmax(axis=1) == labels))


@pytest.fixture(scope="module")
def full() -> tuple[DigitsShift, float]:
    start = time.perf_counter()
    ds = digits_shift(seed=0, cache=False)
    return ds, time.perf_counter() - start


SMALL = {"corruptions": ("gaussian_noise", "glass_blur", "fog"), "severities": (1, 5)}


def test_top_label_ece_reference() -> None:
    # two examples, confidences 0.9 (wrong) and 0.8 (right): |0 - .9| / 2 + |1 - .8| / 2
    z = np.log(np.array([[0.9, 0.1], [0.2, 0.8]]))
    assert top_label_ece(z, np.array([1, 1])) == pytest.approx(0.55)


@pytest.mark.slow  # the whole digits_shift build (~10 s per worker)
def test_shapes_and_metadata(full: tuple[DigitsShift, float]) -> None:
    ds, seconds = full
    assert seconds < 30.0, f"full build took {seconds:.1f} s"
    logits, labels = ds.clean
    assert logits.shape == (899, 10) and logits.dtype == np.float64  # 1797 - 898 train
    assert labels.shape == (899,) and labels.dtype == np.int64
    from sklearn.datasets import load_digits

    half = np.bincount(load_digits().target) / 2
    assert np.all(np.abs(np.bincount(labels) - half) <= 1)  # stratified split
    assert ds.corruptions == CORRUPTIONS and len(CORRUPTIONS) == 15
    assert ds.severities == SEVERITIES
    assert set(ds.shifted) == {(c, s) for c in CORRUPTIONS for s in SEVERITIES}
    for z, y in ds.shifted.values():
        assert z.shape == (899, 10) and np.isfinite(z).all()
        assert y is labels
    assert ds.train_accuracy == pytest.approx(1.0, abs=0.01)
    assert accuracy(*ds.clean) > 0.95
    assert not logits.flags.writeable


@pytest.mark.slow  # the whole digits_shift build (~10 s per worker)
def test_pool(full: tuple[DigitsShift, float]) -> None:
    ds, _ = full
    z, y, g = ds.pool(severity=3)
    assert z.shape == (15 * 899, 10) and y.shape == g.shape == (15 * 899,)
    np.testing.assert_array_equal(np.bincount(g), np.full(15, 899))
    k = CORRUPTIONS.index("fog")
    np.testing.assert_array_equal(z[g == k], ds.shifted[("fog", 3)][0])
    with pytest.raises(ValueError, match=r"'severity' parameter of DigitsShift\.pool"):
        ds.pool(severity=6)


@pytest.mark.slow  # the whole digits_shift build (~10 s per worker)
def test_severity_monotone_on_average(full: tuple[DigitsShift, float]) -> None:
    ds, _ = full
    mean_acc = [np.mean([accuracy(*ds.shifted[(c, s)]) for c in CORRUPTIONS]) for s in SEVERITIES]
    assert accuracy(*ds.clean) > mean_acc[0]
    assert all(a > b for a, b in itertools.pairwise(mean_acc)), mean_acc


@pytest.mark.slow  # the whole digits_shift build (~10 s per worker)
@pytest.mark.parametrize("corruption", CORRUPTIONS)
def test_severity5_really_shifts(full: tuple[DigitsShift, float], corruption: str) -> None:
    ds, _ = full
    z, y = ds.shifted[(corruption, 5)]
    acc, err = accuracy(z, y), top_label_ece(z, y)
    assert acc < 0.75, f"{corruption}: accuracy {acc:.3f}"
    assert err > 0.15, f"{corruption}: ECE {err:.3f}"
    assert accuracy(*ds.shifted[(corruption, 1)]) > acc  # severity 1 is milder


@pytest.mark.slow  # the whole digits_shift build (~10 s per worker)
def test_deterministic_and_subset_independent(full: tuple[DigitsShift, float]) -> None:
    ds, _ = full
    a = digits_shift(seed=0, cache=False, **SMALL)  # type: ignore[arg-type]
    np.testing.assert_array_equal(a.clean[0], ds.clean[0])
    for key, (z, y) in a.shifted.items():
        np.testing.assert_array_equal(z, ds.shifted[key][0])
        np.testing.assert_array_equal(y, ds.shifted[key][1])


@pytest.mark.slow  # the whole digits_shift build (~10 s per worker)
def test_different_seeds_differ(full: tuple[DigitsShift, float]) -> None:
    ds, _ = full
    b = digits_shift(seed=1, cache=False, **SMALL)  # type: ignore[arg-type]
    assert not np.array_equal(b.clean[1], ds.clean[1])  # another split
    for key, (z, _) in b.shifted.items():
        assert not np.allclose(z, ds.shifted[key][0])


def test_cache_hit_identical(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PRIVCAL_CACHE_DIR", str(tmp_path))
    first = digits_shift(seed=2, corruptions="jpeg", severities=(2, 4))
    files = list(tmp_path.glob("digits_shift-*.npz"))
    assert len(files) == 1

    def no_build(*args: object) -> None:
        raise AssertionError("cache miss: rebuilt")

    monkeypatch.setattr(digits_module, "_build", no_build)
    second = digits_shift(seed=2, corruptions=["jpeg"], severities=[2, 4])
    np.testing.assert_array_equal(second.clean[0], first.clean[0])
    np.testing.assert_array_equal(second.clean[1], first.clean[1])
    for key in first.shifted:
        np.testing.assert_array_equal(second.shifted[key][0], first.shifted[key][0])
    assert second.train_accuracy == first.train_accuracy
    with pytest.raises(AssertionError, match="cache miss"):  # other key -> another file
        digits_shift(seed=2, corruptions="jpeg", severities=(2,))
    with pytest.raises(AssertionError, match="cache miss"):  # cache=False never reads
        digits_shift(seed=2, corruptions="jpeg", severities=(2, 4), cache=False)


def test_corrupt_file_is_rebuilt(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PRIVCAL_CACHE_DIR", str(tmp_path))
    kwargs = {"seed": 0, "corruptions": "contrast", "severities": 1}
    digits_shift(**kwargs)  # type: ignore[arg-type]
    (path,) = tmp_path.glob("digits_shift-*.npz")
    path.write_bytes(b"garbage")
    again = digits_shift(**kwargs)  # type: ignore[arg-type]
    assert again.shifted[("contrast", 1)][0].shape == (899, 10)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"corruptions": ["fog", "snow"]}, "corruptions"),
        ({"corruptions": []}, "corruptions"),
        ({"severities": (0,)}, "severities"),
        ({"severities": (1, 6)}, "severities"),
        ({"severities": (2.5,)}, "severities"),
        ({"severities": ()}, "severities"),
        ({"seed": -1}, "seed"),
        ({"cache": "yes"}, "cache"),
    ],
)
def test_bad_input(kwargs: dict[str, object], name: str) -> None:
    with pytest.raises(ValueError, match=f"'{name}' parameter of digits_shift"):
        digits_shift(**kwargs)  # type: ignore[arg-type]


def test_logits_reproduce_predict_proba() -> None:
    from scipy.special import softmax
    from sklearn.datasets import load_digits
    from sklearn.neural_network import MLPClassifier

    x, y = load_digits(return_X_y=True)
    for activation in ("relu", "tanh"):
        mlp = MLPClassifier((16, 8), activation=activation, max_iter=30, random_state=0)
        with pytest.warns(UserWarning):  # ConvergenceWarning: 30 iterations on purpose
            mlp.fit(x[:300] / 16, y[:300])
        z = digits_module._mlp_logits(mlp, x[300:400] / 16)
        np.testing.assert_allclose(
            softmax(z, axis=1), mlp.predict_proba(x[300:400] / 16), atol=1e-12
        )
        assert not np.allclose(z, np.log(mlp.predict_proba(x[300:400] / 16)))  # not log p


@pytest.fixture(scope="module")
def images() -> np.ndarray:
    from sklearn.datasets import load_digits

    return load_digits().images[:200]


@pytest.mark.parametrize("corruption", CORRUPTIONS)
def test_corrupt_range_determinism_and_strength(images: np.ndarray, corruption: str) -> None:
    outs = [corrupt(images, corruption, s, seed=0) for s in SEVERITIES]
    for out in outs:
        assert out.shape == images.shape and out.min() >= 0.0 and out.max() <= 16.0
    np.testing.assert_array_equal(corrupt(images, corruption, 3, seed=0), outs[2])
    flat = corrupt(images.reshape(200, 64), corruption, 3, seed=0)
    np.testing.assert_array_equal(flat, outs[2].reshape(200, 64))
    distance = [np.abs(o - images).mean() for o in outs]
    assert distance[0] > 0.0
    assert distance[-1] > distance[0], distance


def test_corrupt_bad_input(images: np.ndarray) -> None:
    with pytest.raises(ValueError, match="'corruption' parameter of corrupt"):
        corrupt(images, "snow", 1)
    with pytest.raises(ValueError, match="'severity' parameter of corrupt"):
        corrupt(images, "fog", 0)
    with pytest.raises(ValueError, match="'images' parameter of corrupt"):
        corrupt(images[:, :4, :4], "fog", 1)

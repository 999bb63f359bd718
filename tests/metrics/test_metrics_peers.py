"""Agreement of privcal's calibration metrics with netcal and torchmetrics, and the bin edge cases.

Peer comparisons (marked ``bench_peers``) run on every full-vector file of the shared real data:
``netcal-cifar/*.npz`` and ``cleanlab-heldout/*_probs.npy``. They skip when netcal/torchmetrics
(the ``bench`` extra) or the data are absent. The hand-computed edge-case tests (p = 0 and p = 1
land in the first and last real bins) check privcal alone and always run.

Why the peers differ (measured; see docs/metrics.md, "Agreement with netcal and torchmetrics"):

* netcal agrees to ~1e-16 on float64 input. It clips probabilities to ``[eps, 1 - eps]`` of the
  input dtype, so on float32 input a confidence of exactly 1.0 becomes ``1 - 1.19e-7``; we pass
  float64. With two distinct labels netcal switches to a positive-class ECE, so for binary files
  it gets the top-label reduction ``(confidence, correct)``.
* torchmetrics casts confidences to float32 and accumulates each bin with float32
  ``scatter_add_``; that rounding, not the bin rule, is the whole difference (up to 1.7e-5 on
  these files). A float32 emulation of the same sums reproduces torchmetrics to < 1e-8.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from privcal.data import shared_data_dir
from privcal.metrics import classwise_ece, ece, reliability
from privcal.metrics.statistics import bin_indices, calibration_bins

N_BINS = 15
NETCAL_ATOL = 1e-9
#: torchmetrics accumulates each bin in float32. On the netcal files the difference is at most
#: 4.9e-6 (the issue's "up to 4.5e-6"), within the issue's 1e-5; on two cleanlab files with many
#: confidences near 1 it reaches 1.34e-5 (cifar10) and 1.65e-5 (imdb, N = 25000). Those two get
#: 3e-5, and test_torchmetrics_difference_is_float32_accumulation shows the whole gap is float32.
TORCHMETRICS_ATOL = 1e-5
TORCHMETRICS_ATOL_FLOAT32_HEAVY = {
    "cleanlab-heldout/cifar10_probs.npy": 3e-5,
    "cleanlab-heldout/imdb_probs.npy": 3e-5,
}
#: the float32 emulation below reproduces torchmetrics to 7.5e-9 at worst (summation order).
EMULATION_ATOL = 2e-8

FILES = [
    "netcal-cifar/densenet-bc-100-cifar-100.npz",
    "netcal-cifar/lenet-5-cifar-10.npz",
    "netcal-cifar/lenet-5-cifar-100.npz",
    "netcal-cifar/wideresnet-16-4-cifar-10.npz",
    "netcal-cifar/wideresnet-16-4-cifar-100.npz",
    "cleanlab-heldout/20news_probs.npy",
    "cleanlab-heldout/cifar10_probs.npy",
    "cleanlab-heldout/imdb_probs.npy",
    "cleanlab-heldout/mnist_probs.npy",
]


def _load(rel: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(probs as stored, float64 probs, int64 labels); skips when the data are absent.

    ``imdb_probs.npy`` holds 2744 entries in (1, 1.00001] (rows sum to 1 within 2e-5), which
    ``check_probs`` rightly rejects; its rows are renormalised (``p / p.sum(1)``) and every
    implementation gets the same renormalised array.
    """
    root = shared_data_dir()
    path = None if root is None else Path(root) / rel
    if path is None or not path.is_file():
        pytest.skip(f"shared data file {rel} is absent")
    if path.suffix == ".npz":
        with np.load(path) as z:
            raw, labels = z["predictions"], z["ground_truth"]
    else:
        raw = np.load(path)
        labels = np.load(str(path).replace("_probs.npy", "_labels.npy"))
    p64 = raw.astype(np.float64)
    if p64.max() > 1.0:
        p64 = p64 / p64.sum(axis=1, keepdims=True)
        raw = p64
    return raw, p64, labels.astype(np.int64)


def _top(p: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    pred = np.argmax(p, axis=1)
    return p[np.arange(p.shape[0]), pred], (pred == y)


@pytest.fixture(scope="module")
def netcal_ece():
    metrics = pytest.importorskip("netcal.metrics")
    return lambda x, y: float(metrics.ECE(N_BINS).measure(x, y))


@pytest.fixture(scope="module")
def tm_ece():
    torch = pytest.importorskip("torch")
    cls = pytest.importorskip("torchmetrics.functional.classification")
    torch.set_num_threads(2)

    def f(p: np.ndarray, y: np.ndarray) -> float:
        return float(
            cls.multiclass_calibration_error(
                torch.tensor(p), torch.tensor(y), num_classes=p.shape[1], n_bins=N_BINS, norm="l1"
            )
        )

    return f


# --------------------------------------------------------------------------------------------
# netcal
# --------------------------------------------------------------------------------------------
@pytest.mark.bench_peers
@pytest.mark.parametrize("rel", FILES)
def test_ece_matches_netcal(rel, netcal_ece):
    _, p, y = _load(rel)
    ours = ece(p, y, n_bins=N_BINS)
    if p.shape[1] == 2:  # netcal's binary mode is positive-class: give it the top-label pairs
        conf, correct = _top(p, y)
        theirs = netcal_ece(conf, correct.astype(np.int64))
    else:
        theirs = netcal_ece(p, y)
    assert abs(ours - theirs) <= NETCAL_ATOL


@pytest.mark.bench_peers
def test_netcal_binary_mode_is_positive_class_ece(netcal_ece):
    """netcal on N x 2 probabilities measures the class-1 ECE, not the top-label ECE."""
    _, p, y = _load("cleanlab-heldout/imdb_probs.npy")
    positive = calibration_bins(p[:, 1], y, N_BINS).ece()
    assert abs(netcal_ece(p, y) - positive) <= NETCAL_ATOL
    assert abs(positive - ece(p, y, n_bins=N_BINS)) > 1e-4  # a different quantity (3.2e-4)


@pytest.mark.bench_peers
def test_netcal_float32_clip_moves_confidence_one(netcal_ece):
    """On float32 input netcal clips 1.0 to 1 - eps32: ECE moves by ~(#ones / N) * 1.2e-7."""
    raw, p, y = _load("netcal-cifar/wideresnet-16-4-cifar-10.npz")
    assert raw.dtype == np.float32
    conf, _ = _top(p, y)
    ones = float(np.mean(conf == 1.0))
    diff = netcal_ece(raw, y) - ece(p, y, n_bins=N_BINS)
    expected = -ones * float(np.finfo(np.float32).eps)  # over-confident top bin: gap shrinks
    assert ones > 0.2
    assert diff == pytest.approx(expected, rel=0.05)


# --------------------------------------------------------------------------------------------
# torchmetrics
# --------------------------------------------------------------------------------------------
def _torchmetrics_emulation(conf: np.ndarray, correct: np.ndarray) -> float:
    """torchmetrics' ECE rebuilt in NumPy: float32 confidences, ``bucketize(right=True) - 1``
    over float32 edges (N_BINS + 1 slots, so 1.0 gets a bin of its own), sequential float32 sums."""
    f32 = np.float32
    c32 = conf.astype(f32)
    edges = np.linspace(0, 1, N_BINS + 1).astype(f32)
    idx = np.searchsorted(edges, c32, side="right") - 1
    count, s_conf, s_acc = (np.zeros(N_BINS + 1, f32) for _ in range(3))
    np.add.at(count, idx, f32(1))
    np.add.at(s_conf, idx, c32)
    np.add.at(s_acc, idx, correct.astype(f32))
    with np.errstate(invalid="ignore"):
        gap = np.nan_to_num(s_acc / count) - np.nan_to_num(s_conf / count)
    return float(np.sum(np.abs(gap) * (count / count.sum()), dtype=f32))


@pytest.mark.bench_peers
@pytest.mark.parametrize("rel", FILES)
def test_ece_matches_torchmetrics(rel, tm_ece):
    _, p, y = _load(rel)
    atol = TORCHMETRICS_ATOL_FLOAT32_HEAVY.get(rel, TORCHMETRICS_ATOL)
    assert abs(ece(p, y, n_bins=N_BINS) - tm_ece(p, y)) <= atol


@pytest.mark.bench_peers
@pytest.mark.parametrize("rel", FILES)
def test_torchmetrics_difference_is_float32_accumulation(rel, tm_ece):
    """The bin rule and float32 rounding of the confidences move the ECE by < 1e-9; float32
    accumulation reproduces torchmetrics to 2e-8."""
    _, p, y = _load(rel)
    conf, correct = _top(p, y)
    ours = ece(p, y, n_bins=N_BINS)
    # torchmetrics' bin rule and float32 confidences, float64 sums: same as privcal
    edges = np.linspace(0, 1, N_BINS + 1).astype(np.float32)
    c32 = conf.astype(np.float32)
    idx = np.searchsorted(edges, c32, side="right") - 1
    gap = np.bincount(idx, correct - c32.astype(np.float64), minlength=N_BINS + 1)
    assert abs(np.abs(gap).sum() / len(y) - ours) <= 1e-9
    # float32 accumulation: reproduces torchmetrics
    assert abs(_torchmetrics_emulation(conf, correct) - tm_ece(p, y)) <= EMULATION_ATOL


@pytest.mark.bench_peers
def test_torchmetrics_puts_confidence_one_in_a_phantom_bin(tm_ece, netcal_ece):
    """torchmetrics #3510: 1.0 gets an (n_bins + 1)-th bin. Changes the ECE only when that bin's
    gap and the last real bin's gap have opposite signs, as here. netcal and privcal agree."""
    p = np.array([[1.0, 0.0, 0.0], [0.95, 0.05, 0.0], [0.0, 0.05, 0.95]])
    y = np.array([1, 0, 2])
    assert ece(p, y, n_bins=N_BINS) == pytest.approx(0.3, abs=1e-15)
    assert netcal_ece(p, y) == pytest.approx(0.3, abs=1e-15)
    assert tm_ece(p, y) == pytest.approx((0.1 + 1.0) / 3, abs=1e-6)


# --------------------------------------------------------------------------------------------
# classwise ECE (neither netcal 1.4 nor torchmetrics 1.9 has one): against a plain loop
# --------------------------------------------------------------------------------------------
def _classwise_loop(p: np.ndarray, y: np.ndarray, n_bins: int) -> float:
    inner = np.linspace(0.0, 1.0, n_bins + 1)[1:-1]
    n, c = p.shape
    total = 0.0
    for j in range(c):
        pj, yj = p[:, j], (y == j).astype(np.float64)
        idx = np.searchsorted(inner, pj, side="left")  # first edge >= p: right-closed bins
        for m in range(n_bins):
            in_bin = idx == m
            if in_bin.any():
                total += abs(yj[in_bin].sum() - pj[in_bin].sum()) / n
    return total / c


@pytest.mark.parametrize("rel", FILES)
def test_classwise_ece_matches_loop(rel):
    _, p, y = _load(rel)
    assert abs(classwise_ece(p, y, n_bins=N_BINS) - _classwise_loop(p, y, N_BINS)) <= 1e-12


# --------------------------------------------------------------------------------------------
# Edge cases: p = 0 and p = 1 land in real bins (privcal only, hand-computed)
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([0.0, 1.0], [0, 14]),
        ([1 / 15, 1.0 - 1e-12], [0, 14]),
        ([5e-324, 0.5, np.nextafter(1.0, 0.0)], [0, 7, 14]),
    ],
)
def test_bin_indices_zero_and_one_in_real_bins(values, expected):
    assert bin_indices(np.array(values), 15).tolist() == expected


def test_bin_indices_right_closed_at_exact_edges():
    # n_bins = 4: the edges 0.25, 0.5, 0.75 are exact in binary; a value on an edge belongs to
    # the bin on its left, the next float up to the bin on its right.
    edges = np.array([0.0, 0.25, 0.5, 0.75, 1.0])
    assert bin_indices(edges, 4).tolist() == [0, 0, 1, 2, 3]
    assert bin_indices(np.nextafter(edges[1:4], 1.0), 4).tolist() == [1, 2, 3]


def test_calibration_bins_keep_zero_and_one():
    stats = calibration_bins(np.array([0.0, 1.0, 1.0]), np.array([0.0, 1.0, 0.0]), n_bins=15)
    assert stats.counts[0] == 1 and stats.counts[14] == 2 and stats.counts.sum() == 3
    assert stats.sum_confidence[14] == 2.0 and stats.sum_correct[14] == 1.0
    assert stats.ece() == pytest.approx(1.0 / 3.0, abs=1e-15)  # |1 - 2| / 3 in the last bin


def test_ece_confidence_one_shares_the_last_bin():
    # Rows 1-3 all fall in (14/15, 1]: |(0 + 1 + 1) - (1.0 + 0.95 + 0.95)| / 3 = 0.3.
    p = np.array([[1.0, 0.0, 0.0], [0.95, 0.05, 0.0], [0.0, 0.05, 0.95]])
    assert ece(p, np.array([1, 0, 2]), n_bins=15) == pytest.approx(0.3, abs=1e-15)
    rel = reliability(p, np.array([1, 0, 2]), n_bins=15)
    assert rel.counts.sum() == 3 and rel.counts[14] == 3


def test_classwise_ece_exact_zero_and_one():
    # Class 0: p = 1 (y = 0) in bin 14, p = 0 (y = 1) in bin 0: gaps 1 and 1; same for class 1.
    # cwECE = (1/C) sum_j sum_m |gap| / N = (1/2) * (2/2 + 2/2) = 1.
    p = np.array([[1.0, 0.0], [0.0, 1.0]])
    assert classwise_ece(p, np.array([1, 0]), n_bins=15) == pytest.approx(1.0, abs=1e-15)
    # Correct labels: every bin has gap 0 (p = 0 with y = 0 counted in bin 0, not dropped).
    assert classwise_ece(p, np.array([0, 1]), n_bins=15) == 0.0


def test_binary_vector_with_zero_and_one():
    # N-vector of class-1 probabilities: p1 = 0 is a top-label confidence of 1 for class 0.
    p1 = np.array([0.0, 1.0, 0.0, 1.0])
    y = np.array([0, 1, 1, 1])  # row 2 wrong with confidence 1
    assert ece(p1, y, n_bins=15) == pytest.approx(0.25, abs=1e-15)  # |3 - 4| / 4, last bin

"""Shared statistics (privcal.metrics.statistics) against scalar and naive computations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privcal.metrics.statistics import (
    BinStats,
    accuracy_gap_sum,
    accuracy_gap_terms,
    bin_indices,
    calibration_bins,
    class_histograms,
    clipped_nll_sum,
    log_softmax,
    mass_bin_edges,
    nll_terms,
    softmax,
    top_confidence,
    top_correct,
    width_bin_edges,
)

TEMPS = np.array([0.1, 0.5, 1.0, 1.7, 4.0, 20.0])


@pytest.fixture
def zy(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    z = 4.0 * rng.normal(size=(150, 5))
    y = rng.integers(0, 5, size=150)
    return z, y


def test_softmax_rows_and_shift_invariance(zy: tuple[np.ndarray, np.ndarray]) -> None:
    z, _ = zy
    p = softmax(z, 1.5)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=0, atol=1e-15)
    np.testing.assert_allclose(p, softmax(z + 1000.0, 1.5), rtol=1e-12)
    np.testing.assert_allclose(np.exp(log_softmax(z, 1.5)), p, rtol=1e-12)
    assert np.all(np.isfinite(softmax(np.array([[1e4, -1e4]]))))


def test_top_correct_ties_go_to_lowest_index() -> None:
    z = np.array([[1.0, 1.0, 0.0], [0.0, 2.0, 2.0]])
    np.testing.assert_array_equal(top_correct(z, np.array([0, 2])), [1.0, 0.0])


def test_top_confidence_vectorised_equals_scalar(zy: tuple[np.ndarray, np.ndarray]) -> None:
    z, _ = zy
    many = top_confidence(z, TEMPS)
    assert many.shape == (TEMPS.size, z.shape[0])
    for k, t in enumerate(TEMPS):
        np.testing.assert_allclose(many[k], softmax(z, t).max(axis=1), rtol=1e-13)
        np.testing.assert_array_equal(many[k], top_confidence(z, float(t)))


def test_top_confidence_decreasing_in_temperature(zy: tuple[np.ndarray, np.ndarray]) -> None:
    z, _ = zy
    conf = top_confidence(z, np.geomspace(0.05, 50.0, 40))
    assert np.all(np.diff(conf, axis=0) <= 0.0)
    assert np.all(conf[-1] >= 1.0 / z.shape[1]) and np.all(conf <= 1.0)
    # strictly for rows with more than one distinct logit, at moderate temperatures
    assert np.all(np.diff(conf[10:30], axis=0) < 0.0)


def test_accuracy_gap_sum_vectorised_equals_scalar(zy: tuple[np.ndarray, np.ndarray]) -> None:
    z, y = zy
    many = accuracy_gap_sum(z, y, TEMPS)
    assert isinstance(many, np.ndarray) and many.shape == TEMPS.shape
    scalars = np.array([accuracy_gap_sum(z, y, float(t)) for t in TEMPS])
    assert all(isinstance(accuracy_gap_sum(z, y, float(t)), float) for t in TEMPS[:1])
    np.testing.assert_allclose(many, scalars, rtol=1e-13)
    # and its definition: #correct - sum of top confidences
    correct = (np.argmax(z, axis=1) == y).sum()
    naive = [correct - softmax(z, t).max(axis=1).sum() for t in TEMPS]
    np.testing.assert_allclose(many, naive, rtol=1e-12)


def test_accuracy_gap_terms_bounded(zy: tuple[np.ndarray, np.ndarray]) -> None:
    z, y = zy
    terms = accuracy_gap_terms(z, y, TEMPS)
    assert terms.shape == (TEMPS.size, z.shape[0])
    assert terms.min() >= -1.0 and terms.max() <= 1.0


def test_nll_terms_equal_naive(zy: tuple[np.ndarray, np.ndarray]) -> None:
    z, y = zy
    many = nll_terms(z, y, TEMPS)
    for k, t in enumerate(TEMPS):
        naive = []
        for row, label in zip(z, y, strict=True):
            m = max(row / t)
            lse = m + math.log(sum(math.exp(v / t - m) for v in row))
            naive.append(lse - row[label] / t)
        np.testing.assert_allclose(many[k], naive, rtol=1e-12, atol=1e-13)
        np.testing.assert_array_equal(nll_terms(z, y, float(t)), many[k])
    assert many.min() >= 0.0


def test_nll_terms_extreme_logits_finite() -> None:
    z = np.array([[0.0, -2000.0], [500.0, -500.0]])
    out = nll_terms(z, np.array([1, 1]), 1.0)
    np.testing.assert_allclose(out, [2000.0, 1000.0])


def test_clipped_nll_sum(zy: tuple[np.ndarray, np.ndarray]) -> None:
    z, y = zy
    n = z.shape[0]
    plain = clipped_nll_sum(z, y, TEMPS, None)
    np.testing.assert_allclose(plain, nll_terms(z, y, TEMPS).sum(axis=1), rtol=1e-14)
    for bound in (0.1, 1.0, 3.0):
        clipped = clipped_nll_sum(z, y, TEMPS, bound)
        assert np.all(clipped <= bound * n + 1e-9)
        assert np.all(clipped <= np.asarray(plain) + 1e-9)
    # at T = 0.1 the over-sharpened logits make many terms larger than 1: the clip binds
    assert clipped_nll_sum(z, y, 0.1, 1.0) < clipped_nll_sum(z, y, 0.1, None)
    big = 1e6
    np.testing.assert_allclose(clipped_nll_sum(z, y, TEMPS, big), plain, rtol=1e-14)
    assert isinstance(clipped_nll_sum(z, y, 1.0, 2.0), float)


@pytest.mark.parametrize(
    "bad", [0.0, -1.0, np.nan, np.inf, np.array([[1.0, 2.0]]), np.array([1.0, 0.0])]
)
def test_temperature_checked(zy: tuple[np.ndarray, np.ndarray], bad: object) -> None:
    z, y = zy
    with pytest.raises(ValueError, match="'temperature' parameter must be a positive finite"):
        top_confidence(z, bad)
    with pytest.raises(ValueError, match="'temperature' parameter"):
        nll_terms(z, y, bad)


def test_class_histograms_totals(rng: np.random.Generator) -> None:
    n, c, m = 400, 6, 12
    p = softmax(3.0 * rng.normal(size=(n, c)))
    y = rng.integers(0, c, size=n)
    pos, neg = class_histograms(p, y, m)
    assert pos.shape == neg.shape == (c, m)
    assert pos.sum() == n
    np.testing.assert_array_equal((pos + neg).sum(axis=1), np.full(c, n))
    np.testing.assert_array_equal(pos.sum(axis=1), np.bincount(y, minlength=c))
    # cell by cell against a direct count
    idx = bin_indices(p, m)
    for j in range(c):
        np.testing.assert_array_equal(pos[j], np.bincount(idx[y == j, j], minlength=m))
        np.testing.assert_array_equal(neg[j], np.bincount(idx[y != j, j], minlength=m))


def test_class_histograms_hand() -> None:
    p = np.array([[0.9, 0.1], [0.2, 0.8], [0.5, 0.5]])
    pos, neg = class_histograms(p, np.array([0, 0, 1]), 2)
    # class 0 probs 0.9 (y=0), 0.2 (y=0), 0.5 (y=1) -> bins 1, 0, 0
    np.testing.assert_array_equal(pos, [[1, 1], [1, 0]])
    np.testing.assert_array_equal(neg, [[1, 0], [1, 1]])


def test_calibration_bins_sums_and_binstats() -> None:
    conf = np.array([0.05, 0.3, 0.35, 0.9, 1.0])
    corr = np.array([0.0, 1.0, 0.0, 1.0, 1.0])
    s = calibration_bins(conf, corr, 4)
    np.testing.assert_array_equal(s.edges, [0, 0.25, 0.5, 0.75, 1.0])
    np.testing.assert_array_equal(s.counts, [1, 2, 0, 2])
    np.testing.assert_allclose(s.sum_confidence, [0.05, 0.65, 0, 1.9])
    np.testing.assert_array_equal(s.sum_correct, [0, 1, 0, 2])
    np.testing.assert_allclose(s.gaps(), [-0.05, 0.35, 0, 0.1])
    assert s.n == 5
    assert s.ece() == pytest.approx(0.5 / 5)
    acc = s.accuracy()
    assert np.isnan(acc[2]) and np.isnan(s.confidence()[2])
    np.testing.assert_allclose(acc[[0, 1, 3]], [0, 0.5, 1])


def test_binstats_empty_ece_is_zero() -> None:
    s = BinStats(np.linspace(0, 1, 3), np.zeros(2), np.zeros(2), np.zeros(2))
    assert s.ece() == 0.0


def test_bin_edges() -> None:
    np.testing.assert_allclose(width_bin_edges(4), [0, 0.25, 0.5, 0.75, 1])
    e = mass_bin_edges(np.array([0.9, 0.1, 0.5, 0.7]), 2)
    np.testing.assert_array_equal(e, [0.0, 0.5, 1.0])
    assert mass_bin_edges(np.array([0.3]), 3).shape == (4,)


@pytest.mark.compiled
@pytest.mark.parametrize("n", [50_000, 50_001, 1001])
def test_compiled_top_label_bins_equal_numpy_path(monkeypatch, n: int) -> None:
    """The compiled kernel and the NumPy blocks compute the same statistic: same counts, sums
    equal up to addition order, including ties (lowest index wins), values on bin edges, and
    chunks whose length is not a multiple of the kernel's row block."""
    from privcal.metrics import statistics

    rng = np.random.default_rng(3)
    c, m = 7, 15
    p = rng.dirichlet(np.full(c, 0.4), size=n)
    p[:500] = 1.0 / c  # ties in every column: argmax picks column 0
    k = rng.integers(0, m + 1, size=500)
    p[500:1000] = 0.0
    p[500:1000, 0] = k / m  # exact edges k/M (rows need not sum to 1 for the statistic)
    p[500:1000, 1] = 1.0 - k / m
    y = rng.integers(0, c, size=n)
    monkeypatch.setattr(statistics, "COMPILED_MIN_ROWS", 1 << 62)
    ref = statistics.top_label_bins(p, y, m)
    monkeypatch.setattr(statistics, "COMPILED_MIN_ROWS", 1)
    got = statistics.top_label_bins(p, y, m)
    np.testing.assert_array_equal(got.counts, ref.counts)
    np.testing.assert_array_equal(got.sum_correct, ref.sum_correct)
    np.testing.assert_allclose(got.sum_confidence, ref.sum_confidence, rtol=1e-12)


@pytest.mark.compiled
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(
    ("n", "n_chunks"), [(256 * 9 + 37, 1), (256 * 9 + 37, 8), (255, 8), (5, 8)]
)
def test_top_label_kernel_ties_remainder_and_checks(dtype: type, n: int, n_chunks: int) -> None:
    """The compiled kernel reads 256-row blocks, one SIMD lane per row: with a last block of 37
    rows, chunks shorter than a block and empty chunks, ties between later columns (the first
    maximum wins, as ``np.argmax``, with labels on either tied column) and ties with the last
    column, its bins and its validation summary (smallest and largest entry, largest
    ``|row sum - 1|``, non-finite rows, label range) agree with NumPy."""
    from privcal.metrics._kernels import top_label_sums

    rng = np.random.default_rng(5)
    c, m = 9, 10
    p = rng.dirichlet(np.full(c, 0.4), size=n)
    p[::3] = 0.05
    p[::3, 2] = p[::3, 6] = 0.3  # tie between columns 2 and 6: column 2 wins
    p[1::7, -1] = p[1::7].max(axis=1)  # tie with the last column: the earlier one wins
    p = p.astype(dtype)
    y = rng.integers(0, c, size=n)
    y[::3] = np.where(rng.random(y[::3].size) < 0.5, 2, 6)
    sums, summary = top_label_sums(p, y, m, n_chunks)
    conf = p.max(axis=1).astype(np.float64)
    idx = bin_indices(conf, m)
    np.testing.assert_array_equal(sums[0], np.bincount(idx, minlength=m))
    np.testing.assert_allclose(sums[1], np.bincount(idx, conf, minlength=m), rtol=1e-12)
    correct = (p.argmax(axis=1) == y).astype(np.float64)
    np.testing.assert_array_equal(sums[2], np.bincount(idx, correct, minlength=m))
    worst = np.abs(p.astype(np.float64).sum(axis=1) - 1.0).max()
    assert summary[[0, 1, 3, 4, 5]].tolist() == [p.min(), p.max(), 0.0, y.min(), y.max()]
    assert summary[2] == pytest.approx(worst, abs=c * float(np.finfo(dtype).eps))
    p[n // 2, 4] = np.nan
    p[n - 1, 0] = np.inf
    assert top_label_sums(p, y, m, n_chunks)[1][3] == 2.0


def _temperature_case(seed: int, dtype: type) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Logits with ties, exact-zero probabilities (log(tiny) = -708) on some true classes and
    rows far from the bound; a boolean mask of about two thirds of the rows."""
    rng = np.random.default_rng(seed)
    n, c = 3000, 37
    y = rng.integers(0, c, size=n)
    z = 3.0 * rng.normal(size=(n, c))
    z[np.arange(n), y] += 2.0
    z[:40] = 1.5  # ties everywhere
    zero = rng.random((n, c)) < 0.05
    zero[np.arange(n), z.argmax(axis=1)] = False
    z[zero] = np.log(np.finfo(np.float64).tiny)
    return z.astype(dtype), y, rng.random(n) < 0.66


@pytest.mark.compiled
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_compiled_temperature_terms_equal_numpy_path(monkeypatch, dtype: type) -> None:  # type: ignore[no-untyped-def]
    """The compiled kernel and the NumPy blocks compute the same statistic: per-row NLL (equal
    to nll_terms), bounded sum (clipped_nll_sum), count above the bound, sums of the derivatives
    over a row mask and the true-class gaps; float32 rows in float32 within 1e-5."""
    from privcal.metrics import statistics

    z, y, mask = _temperature_case(5, dtype)
    z64 = z.astype(np.float64)
    for beta, bound in ((0.3, 5.0), (1.0, 20.0), (2.7, None)):
        monkeypatch.setattr(statistics, "COMPILED_MIN_ENTRIES", 1 << 62)
        ref = statistics.temperature_terms(z, y, beta, active=mask, bound=bound, true_gap=True)
        monkeypatch.setattr(statistics, "COMPILED_MIN_ENTRIES", 1)
        got = statistics.temperature_terms(z, y, beta, active=mask, bound=bound, true_gap=True)
        shared = nll_terms(z64, y, 1.0 / beta)
        np.testing.assert_allclose(ref.nll, shared, rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(got.nll, shared, rtol=1e-13, atol=1e-13)
        assert got.bounded_sum == pytest.approx(clipped_nll_sum(z64, y, 1.0 / beta, bound), 1e-13)
        assert got.n_above == ref.n_above == (0 if bound is None else int((shared > bound).sum()))
        assert got.n_active == ref.n_active == int(mask.sum())
        assert got.grad == pytest.approx(ref.grad, rel=1e-12, abs=1e-9)
        assert got.curv == pytest.approx(ref.curv, rel=1e-12)
        np.testing.assert_array_equal(got.true_gap, ref.true_gap)
        np.testing.assert_array_equal(got.true_gap, z64.max(1) - z64[np.arange(y.size), y])
        low = statistics.temperature_terms(z, y, beta, active=mask, low_precision=True)
        scale = ref.curv + abs(ref.grad)
        assert abs(low.grad - ref.grad) <= 1e-5 * scale
        assert low.curv == pytest.approx(ref.curv, rel=1e-5)
        np.testing.assert_allclose(
            low.nll, shared, rtol=1e-13, atol=1e-13 if dtype == np.float64 else 1e-5
        )

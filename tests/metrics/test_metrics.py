"""Calibration metrics against hand-computed values (privcal.metrics)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from privcal.data.validation import ZeroProbabilityWarning, check_scores
from privcal.metrics import (
    accuracy,
    adaptive_ece,
    brier,
    calibration_bins,
    classwise_ece,
    coverage,
    ece,
    mce,
    nll,
    reliability,
    set_size,
)
from privcal.metrics.statistics import bin_indices, softmax


def binary(conf: list[float]) -> np.ndarray:
    """Rows ``[c, 1 - c]`` (top label 0 whenever ``c > 0.5``)."""
    c = np.asarray(conf, dtype=np.float64)
    return np.column_stack([c, 1.0 - c])


# -- ECE ----------------------------------------------------------------------------------------
def test_ece_docstring_example() -> None:
    # conf 0.9 correct -> bin (0.8, 0.9]; conf 0.8 wrong -> bin (0.7, 0.8]
    # ECE = (|1 - 0.9| + |0 - 0.8|) / 2 = 0.45 (0.35 if 0.8 were put with 0.9)
    p = np.array([[0.9, 0.1], [0.2, 0.8]])
    assert ece(p, np.array([0, 0]), n_bins=10) == pytest.approx(0.45, abs=1e-15)


def test_ece_zero_for_perfectly_calibrated_construction() -> None:
    # 10 predictions at 0.7 of which 7 are right, 4 at 0.75 of which 3 are right, 2 at 1.0 right
    conf = [0.7] * 10 + [0.75] * 4 + [1.0] * 2
    labels = [0] * 7 + [1] * 3 + [0] * 3 + [1] + [0, 0]
    assert ece(binary(conf), labels, n_bins=10) == pytest.approx(0.0, abs=1e-15)
    assert ece(binary(conf), labels, n_bins=1) == pytest.approx(0.0, abs=1e-15)


def test_ece_single_bin_is_accuracy_minus_confidence() -> None:
    p = binary([0.9, 0.8, 0.6, 0.55])
    y = np.array([0, 1, 0, 0])
    assert ece(p, y, n_bins=1) == pytest.approx(abs(0.75 - np.mean([0.9, 0.8, 0.6, 0.55])))


def test_ece_half_goes_to_lower_bin() -> None:
    # M = 2: conf 0.5 (correct, tie -> class 0) is in [0, 0.5]; 0.75 (wrong) in (0.5, 1]
    # right-closed: (|1 - 0.5| + |0 - 0.75|) / 2 = 0.625; half-open [a, b) would give 0.125
    p = binary([0.5, 0.75])
    assert ece(p, [0, 1], n_bins=2) == pytest.approx(0.625, abs=1e-15)


def test_ece_one_goes_to_last_bin() -> None:
    # conf 1.0 wrong and conf 0.95 right share the last bin (0.9, 1]:
    # |1 - 1.95| / 2 = 0.475; an extra bin for p = 1 would give (0.05 + 1) / 2 = 0.525
    p = binary([1.0, 0.95])
    assert ece(p, [1, 0], n_bins=10) == pytest.approx(0.475, abs=1e-15)


def test_ece_logits_equal_softmax_then_probs(rng: np.random.Generator) -> None:
    z = 2.0 * rng.normal(size=(300, 5))
    y = rng.integers(0, 5, size=300)
    for binning in ("width", "mass"):
        assert ece(z, y, binning=binning, input="logits") == ece(softmax(z), y, binning=binning)


def test_ece_binary_one_column_equals_two_columns(rng: np.random.Generator) -> None:
    p1 = rng.random(200)
    y = rng.integers(0, 2, size=200)
    two = np.column_stack([1 - p1, p1])
    assert ece(p1, y) == ece(two, y)
    assert ece(p1[:, None], y) == ece(two, y)
    assert classwise_ece(p1, y) == classwise_ece(two, y)


# -- the bin rule -------------------------------------------------------------------------------
def test_bin_indices_ends() -> None:
    np.testing.assert_array_equal(bin_indices(np.array([0.0, 1.0]), 10), [0, 9])
    np.testing.assert_array_equal(bin_indices(np.array([0.0, 1.0]), 1), [0, 0])


@pytest.mark.parametrize("n_bins", [1, 2, 4, 8, 16])
def test_bin_indices_right_closed_dyadic(n_bins: int) -> None:
    # k / M exact in binary floating point: no rounding question
    k = np.arange(1, n_bins + 1)
    np.testing.assert_array_equal(bin_indices(k / n_bins, n_bins), k - 1)
    inner = k[:-1] / n_bins
    np.testing.assert_array_equal(bin_indices(np.nextafter(inner, 2.0), n_bins), k[:-1])
    np.testing.assert_array_equal(bin_indices(np.nextafter(inner, -1.0), n_bins), k[:-1] - 1)


def test_bin_indices_right_closed_common_values() -> None:
    # values met in practice with the default 15 and with 10 bins
    np.testing.assert_array_equal(
        bin_indices(np.array([0.1, 0.2, 0.5, 0.7, 0.8, 0.9]), 10), [0, 1, 4, 6, 7, 8]
    )
    k = np.arange(1, 16)
    np.testing.assert_array_equal(bin_indices(k / 15, 15), k - 1)


def test_bin_indices_right_closed_every_k_over_m() -> None:
    wrong = []
    for m in range(1, 101):
        k = np.arange(1, m + 1)
        exact = k / m
        if np.any(bin_indices(exact, m) != k - 1):
            wrong.append((m, "k/M"))
        above = np.nextafter(exact[:-1], 2.0)
        if np.any(bin_indices(above, m) != k[:-1]):
            wrong.append((m, "above k/M"))
    assert not wrong, f"misbinned values for (M, which): {wrong[:8]} ... ({len(wrong)} in all)"


@pytest.mark.parametrize("n_bins", [10, 20])
def test_value_on_reported_edge_is_in_bin_left_of_it(n_bins: int) -> None:
    edges = calibration_bins(np.array([0.5]), np.array([1.0]), n_bins).edges
    k = np.arange(1, n_bins + 1)
    np.testing.assert_array_equal(bin_indices(edges[1:], n_bins), k - 1)


# -- equal-mass binning -------------------------------------------------------------------------
@pytest.mark.parametrize(("n", "n_bins"), [(103, 10), (100, 7), (15, 15), (5, 3)])
def test_mass_bins_sizes_and_contiguity(rng: np.random.Generator, n: int, n_bins: int) -> None:
    conf = rng.random(n)
    stats = calibration_bins(conf, np.ones(n), n_bins, binning="mass")
    assert stats.counts.sum() == n
    assert stats.counts.max() - stats.counts.min() <= 1
    idx = bin_indices(conf, n_bins, stats.edges)
    order = np.argsort(conf)
    assert np.all(np.diff(idx[order]) >= 0)  # each bin is a contiguous run of sorted values


def test_mass_bins_keep_duplicates_together() -> None:
    conf = np.array([0.2, 0.4, 0.4, 0.4, 0.4, 0.9])
    stats = calibration_bins(conf, np.zeros(6), 2, binning="mass")
    idx = bin_indices(conf, 2, stats.edges)
    assert len(set(idx[1:5])) == 1
    assert stats.counts.sum() == 6


def test_adaptive_ece_hand_value() -> None:
    # sorted conf [0.6, 0.7 | 0.8, 0.9], correct [1, 0 | 1, 1]:
    # (|1 - 1.3| + |2 - 1.7|) / 4 = 0.15 (equal-width M=2 would give |3 - 3| / 4 = 0)
    p = binary([0.8, 0.6, 0.9, 0.7])
    y = np.array([0, 0, 0, 1])
    assert adaptive_ece(p, y, n_bins=2) == pytest.approx(0.15, abs=1e-15)
    assert ece(p, y, n_bins=2, binning="mass") == adaptive_ece(p, y, n_bins=2)
    assert ece(p, y, n_bins=2) == pytest.approx(0.0, abs=1e-15)


def test_adaptive_ece_matches_naive_groups(rng: np.random.Generator) -> None:
    n, m = 257, 9
    conf = 0.5 + 0.5 * rng.random(n)
    correct = (rng.random(n) < conf).astype(float)
    stats = calibration_bins(conf, correct, m, binning="mass")
    idx = bin_indices(conf, m, stats.edges)
    naive = sum(abs((correct[idx == b] - conf[idx == b]).sum()) for b in range(m)) / n
    assert stats.ece() == pytest.approx(naive, abs=1e-12)
    sizes = np.bincount(idx, minlength=m)
    assert sizes.max() - sizes.min() <= 1


# -- MCE, Brier, NLL, accuracy ------------------------------------------------------------------
def test_mce_hand_value() -> None:
    p = np.array([[0.9, 0.1], [0.2, 0.8]])
    assert mce(p, [0, 0], n_bins=10) == pytest.approx(0.8, abs=1e-15)
    # one bin: |0.5 - 0.85|
    assert mce(p, [0, 0], n_bins=1) == pytest.approx(0.35, abs=1e-15)


def test_mce_ignores_empty_bins() -> None:
    p = binary([0.95, 0.95])
    assert mce(p, [0, 0], n_bins=20) == pytest.approx(0.05, abs=1e-15)


def test_mce_at_least_ece(rng: np.random.Generator) -> None:
    z = 3.0 * rng.normal(size=(200, 4))
    y = rng.integers(0, 4, size=200)
    assert mce(z, y, input="logits") >= ece(z, y, input="logits")


def test_brier_hand_value() -> None:
    p = np.array([[0.9, 0.1], [0.2, 0.8]])
    # ((0.1^2 + 0.1^2) + (0.8^2 + 0.8^2)) / 2 = 0.65
    assert brier(p, [0, 0]) == pytest.approx(0.65, abs=1e-15)
    assert brier(np.array([[0.5, 0.3, 0.2]]), [2]) == pytest.approx(0.25 + 0.09 + 0.64, abs=1e-15)
    assert brier(np.array([[0.0, 1.0]]), [0]) == pytest.approx(2.0)
    assert brier(np.array([[0.0, 1.0]]), [1]) == pytest.approx(0.0)


def test_nll_hand_value() -> None:
    p = np.array([[0.9, 0.1], [0.2, 0.8]])
    assert nll(p, [0, 0]) == pytest.approx(-(np.log(0.9) + np.log(0.2)) / 2, rel=1e-15)


def test_nll_zero_probability_of_true_label_is_the_logits_value() -> None:
    """An exact 0 is logged as the smallest positive float, with a warning, as when the same
    probabilities are saved and read back as logits: both paths give the same finite NLL."""
    p = np.array([[1.0, 0.0], [0.5, 0.5]])
    with pytest.warns(ZeroProbabilityWarning, match="1 true-class probabilities are exactly 0"):
        value = nll(p, [1, 0])
    assert value == pytest.approx((-np.log(np.finfo(float).tiny) + np.log(2.0)) / 2, rel=1e-15)
    with pytest.warns(ZeroProbabilityWarning):
        as_logits = nll(check_scores(p, input="probs"), [1, 0], input="logits")
    assert value == pytest.approx(as_logits, rel=1e-12)


def test_accuracy_hand_value() -> None:
    p = np.array([[0.9, 0.1], [0.2, 0.8], [0.5, 0.5], [0.3, 0.7]])
    assert accuracy(p, [0, 0, 0, 1]) == 0.75  # the tie [0.5, 0.5] goes to class 0


@pytest.mark.parametrize("metric", [ece, mce, adaptive_ece, classwise_ece, brier, nll, accuracy])
def test_logits_input_equals_softmax_then_probs(
    rng: np.random.Generator, metric: Callable[..., float]
) -> None:
    z = 3.0 * rng.normal(size=(250, 6))
    y = rng.integers(0, 6, size=250)
    assert metric(z, y, input="logits") == pytest.approx(
        metric(softmax(z), y), rel=1e-12, abs=1e-15
    )


def test_nll_logits_finite_where_probs_underflow() -> None:
    z = np.array([[0.0, -800.0]])  # softmax underflows to exactly 0 for class 1
    assert nll(z, [1], input="logits") == pytest.approx(800.0)


# -- classwise ECE ------------------------------------------------------------------------------
def naive_classwise_ece(p: np.ndarray, y: np.ndarray, n_bins: int) -> float:
    """Per-class, per-bin Python loop with explicit right-closed intervals."""
    n, c = p.shape
    total = 0.0
    for j in range(c):
        for b in range(n_bins):
            lo, hi = b / n_bins, (b + 1) / n_bins
            members = [i for i in range(n) if (lo < p[i, j] <= hi) or (b == 0 and p[i, j] == 0.0)]
            if not members:
                continue
            mean_p = sum(p[i, j] for i in members) / len(members)
            mean_y = sum(1.0 for i in members if y[i] == j) / len(members)
            total += len(members) / n * abs(mean_p - mean_y)
    return total / c


@pytest.mark.parametrize(("n", "c", "n_bins"), [(120, 3, 15), (200, 5, 10), (60, 2, 4)])
def test_classwise_ece_matches_naive_loop(
    rng: np.random.Generator, n: int, c: int, n_bins: int
) -> None:
    p = softmax(2.0 * rng.normal(size=(n, c)))
    y = rng.integers(0, c, size=n)
    assert classwise_ece(p, y, n_bins) == pytest.approx(
        naive_classwise_ece(p, y, n_bins), abs=1e-12
    )


def test_classwise_ece_hand_value() -> None:
    p = np.array([[0.9, 0.1], [0.2, 0.8]])
    # class 0: bins (0.8,0.9] {0.9, y=1} gap 0.1; (0.1,0.2] {0.2, y=1} gap 0.8 -> 0.45
    # class 1: bins (0,0.1] {0.1, y=0} gap 0.1; (0.7,0.8] {0.8, y=0} gap 0.8 -> 0.45
    assert classwise_ece(p, [0, 0], n_bins=10) == pytest.approx(0.45, abs=1e-15)


# -- reliability --------------------------------------------------------------------------------
def test_reliability_counts_and_empty_bins() -> None:
    p = binary([0.9, 0.95, 0.55, 0.6, 0.62])
    y = [0, 1, 0, 0, 1]
    rel = reliability(p, y, n_bins=5)
    np.testing.assert_array_equal(rel.edges, np.arange(6) / 5)
    # bins of width 0.2, right-closed: 0.6 is in (0.4, 0.6], 0.62 in (0.6, 0.8]
    np.testing.assert_array_equal(rel.counts, [0, 0, 2, 1, 2])
    assert rel.counts.sum() == 5
    assert np.isnan(rel.accuracy[[0, 1]]).all() and np.isnan(rel.confidence[[0, 1]]).all()
    np.testing.assert_allclose(rel.accuracy[2:], [1.0, 0.0, 0.5])
    np.testing.assert_allclose(rel.confidence[2:], [0.575, 0.62, 0.925])
    np.testing.assert_allclose(rel.centers, [0.1, 0.3, 0.5, 0.7, 0.9])
    assert rel.ece == pytest.approx(ece(p, y, n_bins=5), abs=1e-15)


def test_reliability_counts_sum_to_n(rng: np.random.Generator) -> None:
    z = 4.0 * rng.normal(size=(517, 7))
    y = rng.integers(0, 7, size=517)
    for binning in ("width", "mass"):
        rel = reliability(z, y, n_bins=15, binning=binning, input="logits")
        assert rel.counts.sum() == 517
        assert np.array_equal(np.isnan(rel.accuracy), rel.counts == 0)


# -- conformal sets -----------------------------------------------------------------------------
def test_coverage_and_set_size() -> None:
    sets = np.array(
        [[True, False, True], [False, False, True], [True, True, True], [False, False, False]]
    )
    assert coverage(sets, [0, 1, 1, 2]) == 0.5
    assert set_size(sets) == (2 + 1 + 3 + 0) / 4


@pytest.mark.parametrize("sets", [np.ones((2, 3), dtype=int), np.ones(3, dtype=bool)])
def test_sets_must_be_boolean_matrix(sets: np.ndarray) -> None:
    with pytest.raises(ValueError, match="'sets' must be a boolean array"):
        set_size(sets)
    with pytest.raises(ValueError, match="'sets' must be a boolean array"):
        coverage(sets, [0, 1])


def test_coverage_labels_checked() -> None:
    with pytest.raises(ValueError, match="'labels' has 3 entries"):
        coverage(np.ones((2, 2), dtype=bool), [0, 1, 1])
    with pytest.raises(ValueError, match="'labels' must lie in"):
        coverage(np.ones((2, 2), dtype=bool), [0, 2])


# -- validation reaches the metrics -------------------------------------------------------------
def test_metrics_validate_probs() -> None:
    with pytest.raises(ValueError, match="'probs' rows must sum to 1"):
        ece(np.array([[0.5, 0.6]]), [0])
    with pytest.raises(ValueError, match="'labels' must lie in"):
        brier(np.array([[0.5, 0.5]]), [2])
    with pytest.raises(ValueError, match="'logits' contains"):
        nll(np.array([[0.5, np.nan]]), [0], input="logits")


@pytest.mark.compiled
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_one_pass_ece_equals_the_general_path_and_rejects_what_it_rejects(
    monkeypatch: pytest.MonkeyPatch, dtype: type
) -> None:
    """Large arrays are validated and binned in one compiled read: the same ECE, MCE and
    reliability as the validated NumPy path, and every input the validator refuses or repairs
    (out of range, non-finite, rows not summing to 1, labels out of range, float32 values just
    above 1) is refused or repaired with the same error or warning."""
    from privcal.data.validation import RoundedProbabilityWarning
    from privcal.metrics import statistics

    rng = np.random.default_rng(8)
    p = rng.dirichlet(np.full(6, 0.5), size=4000).astype(dtype)
    y = rng.integers(0, 6, size=4000)
    monkeypatch.setattr(statistics, "COMPILED_MIN_ROWS", 1 << 62)
    ref = (ece(p, y), mce(p, y, 10), reliability(p, y).counts)
    monkeypatch.setattr(statistics, "COMPILED_MIN_ROWS", 1)
    got = (ece(p, y), mce(p, y, 10), reliability(p, y).counts)
    assert got[0] == pytest.approx(ref[0], rel=1e-12, abs=1e-15)
    assert got[1] == pytest.approx(ref[1], rel=1e-12, abs=1e-15)
    np.testing.assert_array_equal(got[2], ref[2])

    def broken(row: int, values: list[float]) -> np.ndarray:
        q = p.copy()
        q[row, : len(values)] = values
        return q

    for bad, match in [
        (broken(7, [np.nan]), "non-finite"),
        (broken(3999, [np.inf]), "non-finite"),
        (broken(5, [-0.5, 1.5]), r"\[0, 1\]"),
        (broken(9, [0.9, 0.9]), "sum to 1"),
    ]:
        with pytest.raises(ValueError, match=match):
            ece(bad, y)
    with pytest.raises(ValueError, match="labels"):
        ece(p, np.where(np.arange(4000) == 17, 6, y))
    with pytest.raises(ValueError, match="labels"):
        ece(p, np.where(np.arange(4000) == 17, -1, y))
    rounded = broken(11, [1.0 + 1e-6, 0.0, 0.0, 0.0, 0.0, 0.0])
    with pytest.warns(RoundedProbabilityWarning):
        ece(rounded, y)

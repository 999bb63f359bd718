"""Invariances and ranges of the calibration metrics (hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from privcal.metrics import adaptive_ece, brier, classwise_ece, ece, mce
from privcal.metrics.statistics import softmax

pytestmark = pytest.mark.property

SETTINGS = settings(max_examples=80, deadline=None)


@st.composite
def probs_labels(
    draw: st.DrawFn, distinct: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Probabilities (from bounded logits), labels, a row permutation and a class permutation.

    ``distinct=True`` draws pairwise distinct logits (so that the top class is unique).
    """
    n = draw(st.integers(1, 40))
    c = draw(st.integers(2, 6))
    z = draw(arrays(np.float64, (n, c), elements=st.floats(-8.0, 8.0), unique=distinct))
    y = draw(arrays(np.int64, n, elements=st.integers(0, c - 1)))
    rows = np.array(draw(st.permutations(range(n))), dtype=np.int64)
    cols = np.array(draw(st.permutations(range(c))), dtype=np.int64)
    return softmax(z), y, rows, cols


def relabel(p: np.ndarray, y: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """New class k is old class cols[k]: columns permuted, labels mapped consistently."""
    inverse = np.argsort(cols)
    return p[:, cols], inverse[y]


def unique_top(p: np.ndarray) -> bool:
    s = np.sort(p, axis=1)
    return bool(np.all(s[:, -1] > s[:, -2]))


@SETTINGS
@given(d=probs_labels(), n_bins=st.integers(1, 20))
def test_ece_in_unit_interval(d: tuple[np.ndarray, ...], n_bins: int) -> None:
    p, y, _, _ = d
    for value in (ece(p, y, n_bins), adaptive_ece(p, y, n_bins), classwise_ece(p, y, n_bins)):
        assert 0.0 <= value <= 1.0
    assert ece(p, y, n_bins) <= mce(p, y, n_bins) + 1e-12 <= 1.0 + 1e-12
    assert 0.0 <= brier(p, y) <= 2.0 + 1e-12


@SETTINGS
@given(d=probs_labels(), n_bins=st.integers(1, 20))
def test_ece_invariant_to_row_permutation(d: tuple[np.ndarray, ...], n_bins: int) -> None:
    p, y, rows, _ = d
    for binning in ("width", "mass"):
        assert np.isclose(
            ece(p[rows], y[rows], n_bins, binning), ece(p, y, n_bins, binning), rtol=0, atol=1e-12
        )
    assert np.isclose(
        classwise_ece(p[rows], y[rows], n_bins), classwise_ece(p, y, n_bins), rtol=0, atol=1e-12
    )


@SETTINGS
@given(d=probs_labels(distinct=True).filter(lambda d: unique_top(d[0])), n_bins=st.integers(1, 20))
def test_ece_invariant_to_relabelling(d: tuple[np.ndarray, ...], n_bins: int) -> None:
    # ties in the top probability are excluded: argmax breaks them by index, so a relabelling
    # can legitimately change which tied class is "predicted"
    p, y, _, cols = d
    q, yq = relabel(p, y, cols)
    np.testing.assert_array_equal(q[np.arange(len(yq)), yq], p[np.arange(len(y)), y])
    assert np.isclose(ece(q, yq, n_bins), ece(p, y, n_bins), rtol=0, atol=1e-12)
    assert np.isclose(mce(q, yq, n_bins), mce(p, y, n_bins), rtol=0, atol=1e-12)


@SETTINGS
@given(d=probs_labels(), n_bins=st.integers(1, 20))
def test_classwise_ece_invariant_to_class_permutation(
    d: tuple[np.ndarray, ...], n_bins: int
) -> None:
    p, y, _, cols = d  # no tie condition: classwise ECE never takes an argmax
    q, yq = relabel(p, y, cols)
    assert np.isclose(classwise_ece(q, yq, n_bins), classwise_ece(p, y, n_bins), rtol=0, atol=1e-12)
    assert np.isclose(brier(q, yq), brier(p, y), rtol=0, atol=1e-12)


@SETTINGS
@given(d=probs_labels())
def test_perfectly_confident_and_right_has_zero_ece(d: tuple[np.ndarray, ...]) -> None:
    p, _, _, _ = d
    pred = np.argmax(p, axis=1)
    onehot = np.eye(p.shape[1])[pred]
    assert ece(onehot, pred) == 0.0 and classwise_ece(onehot, pred) == 0.0

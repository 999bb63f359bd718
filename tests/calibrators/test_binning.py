"""Binning calibrators: histogram (top-label and classwise), BBQ and isotonic."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

from privcal.calibrators import (
    BBQ,
    METHODS,
    HistogramBinning,
    IsotonicCalibration,
)
from privcal.metrics import ece
from privcal.metrics.statistics import softmax


# -- binning calibrators ------------------------------------------------------------------------
def test_histogram_top_hand() -> None:
    # top confidences 0.9 (right), 0.9 (wrong), 0.6 (right); 4 bins of width 0.25:
    # (0.5, 0.75] -> 1/1, (0.75, 1] -> 1/2, the two lower bins are empty (NaN)
    p = np.array([[0.9, 0.1], [0.9, 0.1], [0.6, 0.4]])
    cal = HistogramBinning(n_bins=4).fit(p, [0, 1, 0], input="probs")
    np.testing.assert_allclose(cal.bin_values_, [np.nan, np.nan, 1.0, 0.5])
    out = cal.predict_proba(np.array([[0.8, 0.2], [0.3, 0.7]]), input="probs")
    np.testing.assert_allclose(out, [[0.5, 0.5], [0.0, 1.0]], atol=1e-15)


def test_histogram_top_keeps_other_classes_proportional() -> None:
    p = np.array([[0.6, 0.3, 0.1], [0.6, 0.1, 0.3], [0.9, 0.05, 0.05]])
    cal = HistogramBinning(n_bins=2).fit(p, [0, 1, 0], input="probs")
    np.testing.assert_allclose(cal.bin_values_, [np.nan, 2 / 3])
    out = cal.predict_proba(np.array([[0.7, 0.2, 0.1]]), input="probs")
    np.testing.assert_allclose(out, [[2 / 3, 2 / 9, 1 / 9]], rtol=1e-12)
    # a top confidence of 0.45 falls in the empty bin [0, 0.5]: the row is kept unchanged
    low = np.array([[0.45, 0.35, 0.2]])
    np.testing.assert_allclose(cal.predict_proba(low, input="probs"), low, rtol=1e-12)


def test_histogram_top_keeps_the_prediction_when_it_lowers_the_top() -> None:
    # confidence 0.6 recalibrated to 0.4 (2 of 5 right): class 1's share would reach 0.4 and tie
    # with the top; it is held just below it, so argmax stays on class 2 (it was class 1 by index)
    p = np.tile([0.05, 0.35, 0.6], (5, 1))
    cal = HistogramBinning(n_bins=2).fit(p, [2, 2, 0, 1, 1], input="probs")
    out = cal.predict_proba(p[:1], input="probs")
    assert out[0, 2] == pytest.approx(0.4) and out.sum() == pytest.approx(1.0)
    assert out[0, 1] < out[0, 2] and out[0, 1] == pytest.approx(0.4, rel=1e-8)
    assert cal.predict(p[:1], input="probs")[0] == 2


def test_cross_fit_warns_when_held_out_accuracy_falls() -> None:
    # 20 classes, 30 rows each: one-vs-all bins reorder classes and lose accuracy held out
    # (McNemar beyond 2 SD); top-label binning keeps every prediction and stays quiet
    g = np.random.default_rng(0)
    n, c = 600, 20
    y = g.integers(c, size=n)
    z = g.normal(size=(n, c))
    z[np.arange(n), y] += 2.5
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        classwise = HistogramBinning(mode="classwise").fit(z, y)
        top = HistogramBinning().fit(z, y)
    assert any("McNemar" in w and "correctly classified" in w for w in classwise.fit_warnings_)
    assert not any("McNemar" in w for w in top.fit_warnings_)


def test_histogram_classwise_values(overconfident: Any) -> None:
    z, y = overconfident
    cal = HistogramBinning(mode="classwise", n_bins=5).fit(z, y)
    p = softmax(z)
    idx = np.minimum(np.ceil(p * 5).astype(int) - 1, 4).clip(0)
    for j in range(z.shape[1]):
        for b in range(5):
            members = idx[:, j] == b
            expected = (y[members] == j).mean() if members.any() else np.nan
            np.testing.assert_allclose(cal.bin_values_[j, b], expected, rtol=1e-12)


def test_bbq_table_shape_and_weights(overconfident: Any) -> None:
    z, y = overconfident
    cal = BBQ(n_levels=4).fit(z, y)
    assert cal.table_.shape == (4, 16) and cal.weights_.shape == (4, 4)
    np.testing.assert_allclose(cal.weights_.sum(axis=1), 1.0, rtol=1e-12)
    assert np.all((cal.table_ > 0) & (cal.table_ < 1))


def test_isotonic_step_functions_monotone(overconfident: Any) -> None:
    cal = IsotonicCalibration().fit(*overconfident)
    for x, v in zip(cal.x_thresholds_, cal.y_thresholds_, strict=True):
        assert np.all(np.diff(x) >= 0) and np.all(np.diff(v) >= 0)
        assert v.min() >= 0 and v.max() <= 1


@pytest.mark.parametrize("name", ["histogram", "histogram-classwise", "bbq", "isotonic"])
def test_binning_reduces_training_ece(overconfident: Any, name: str) -> None:
    z, y = overconfident
    cal = METHODS[name]().fit(z, y)
    assert ece(cal.predict_proba(z), y) < ece(z, y, input="logits")

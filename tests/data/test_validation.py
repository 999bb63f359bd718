"""The one validator of classifier outputs and labels (privcal.data.validation)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from privcal.data.validation import (
    PROBS_ATOL,
    RoundedProbabilityWarning,
    ZeroProbabilityWarning,
    check_labels,
    check_probs,
    check_scores,
)

TINY = np.finfo(np.float64).tiny


# -- scores: finiteness and shape ---------------------------------------------------------------
@pytest.mark.parametrize("input", ["logits", "probs"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_scores_rejected(input: str, bad: float) -> None:
    s = np.array([[0.5, 0.5], [0.2, 0.8], [0.3, 0.7]])
    s[1, 0] = bad
    with pytest.raises(ValueError, match=rf"'{input}' contains 1 non-finite values.*row 1"):
        check_scores(s, input=input)


def test_non_finite_message_uses_given_name() -> None:
    with pytest.raises(ValueError, match="'val_logits' contains"):
        check_scores([[0.0, np.nan]], name="val_logits")


@pytest.mark.parametrize("input", ["logits", "probs"])
def test_three_dimensional_rejected(input: str) -> None:
    with pytest.raises(ValueError, match=rf"'{input}' must have shape .*\(2, 2, 2\)"):
        check_scores(np.full((2, 2, 2), 0.5), input=input)


def test_scalar_rejected() -> None:
    with pytest.raises(ValueError, match="'logits' must have shape"):
        check_scores(np.float64(1.0))


@pytest.mark.parametrize("input", ["logits", "probs"])
@pytest.mark.parametrize("shape", [(0,), (0, 3)])
def test_empty_rejected(input: str, shape: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match=rf"'{input}' is empty"):
        check_scores(np.zeros(shape), input=input)


@pytest.mark.parametrize("input", ["logits", "probs"])
def test_zero_columns_rejected(input: str) -> None:
    with pytest.raises(ValueError, match=rf"'{input}'"):
        check_scores(np.zeros((4, 0)), input=input)


@pytest.mark.parametrize("value", [[["a", "b"]], np.array([[None, 1.0]], dtype=object)])
def test_non_numeric_rejected(value: object) -> None:
    with pytest.raises(ValueError, match="'logits' must be a numeric array"):
        check_scores(value)


def test_input_option_rejected() -> None:
    with pytest.raises(ValueError, match=r"'input' parameter .*'logits', 'probs'.*'proba'"):
        check_scores([[0.0, 1.0]], input="proba")


def test_input_option_message_follows_template() -> None:
    with pytest.raises(ValueError, match=r"^The 'input' parameter of check_scores must be"):
        check_scores([[0.0, 1.0]], input="proba")


# -- logits -------------------------------------------------------------------------------------
def test_logits_pass_through_as_float64() -> None:
    z = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int32)
    out = check_scores(z)
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, z)


def test_float32_logits_kept_only_when_asked() -> None:
    z = np.array([[1.0, 2.0], [3.0, -700.0]], dtype=np.float32)
    assert check_scores(z).dtype == np.float64
    kept = check_scores(z, keep_float32=True)
    assert kept.dtype == np.float32 and np.shares_memory(kept, z)
    with pytest.raises(ValueError, match="non-finite"):
        check_scores(np.array([[1.0, np.nan]], dtype=np.float32), keep_float32=True)
    assert check_scores(np.zeros((2, 2), dtype=np.float16), keep_float32=True).dtype == np.float64


@pytest.mark.parametrize("shape", [(3,), (3, 1)])
def test_binary_logits_become_two_columns(shape: tuple[int, ...]) -> None:
    z = np.array([-1.5, 0.0, 2.0]).reshape(shape)
    out = check_scores(z)
    # documented convention: [0, z] so that sigma(z) is P(class 1)
    np.testing.assert_array_equal(out, [[0.0, -1.5], [0.0, 0.0], [0.0, 2.0]])
    p1 = np.exp(out[:, 1]) / np.exp(out).sum(axis=1)
    np.testing.assert_allclose(p1, 1.0 / (1.0 + np.exp(-z.ravel())), rtol=1e-15)


# -- probabilities ------------------------------------------------------------------------------
def test_probs_become_log_probs() -> None:
    p = np.array([[0.25, 0.75], [0.5, 0.5]])
    np.testing.assert_array_equal(check_scores(p, input="probs"), np.log(p))


@pytest.mark.parametrize("shape", [(3,), (3, 1)])
def test_binary_probs_become_two_columns(shape: tuple[int, ...]) -> None:
    p1 = np.array([0.1, 0.5, 0.75]).reshape(shape)
    out = check_probs(p1)
    np.testing.assert_array_equal(out, [[0.9, 0.1], [0.5, 0.5], [0.25, 0.75]])
    z = check_scores(p1, input="probs")
    np.testing.assert_allclose(np.exp(z), out, rtol=1e-15)


@pytest.mark.parametrize("offset", [2 * PROBS_ATOL, -2 * PROBS_ATOL, 0.3, -0.5])
def test_rows_not_summing_to_one_rejected(offset: float) -> None:
    p = np.array([[0.3, 0.7], [0.4, 0.6 + offset], [0.5, 0.5]])
    with pytest.raises(ValueError, match=r"'probs' rows must sum to 1.*row 1.*input='logits'"):
        check_scores(p, input="probs")


def test_rows_within_tolerance_accepted() -> None:
    p = np.array([[0.3, 0.7 + 0.5 * PROBS_ATOL]])
    np.testing.assert_array_equal(check_scores(p, input="probs"), np.log(p))


@pytest.mark.parametrize(
    "p",
    [[[-0.1, 1.1]], [[1.5, -0.5]], [0.2, 1.3], [[-2 * PROBS_ATOL, 1.0]], [1.0 + 2 * PROBS_ATOL]],
    ids=["neg", "big", "bin", "just-neg", "just-big"],
)
def test_probs_outside_unit_interval_rejected(p: list[float]) -> None:
    with pytest.raises(ValueError, match=r"'probs' must hold probabilities in \[0, 1\]"):
        check_scores(p, input="probs")


@pytest.mark.parametrize(
    ("p", "clipped"),
    [([[-1e-9, 1.0]], [[0.0, 1.0]]), ([[1.0 + 1e-7, -1e-7]], [[1.0, 0.0]]), ([1.0 + 1e-6], [1.0])],
)
def test_rounding_excursions_clipped_with_warning(p: list[float], clipped: list[float]) -> None:
    with pytest.warns(RoundedProbabilityWarning, match="clipped to \\[0, 1\\]"):
        out = check_probs(p)
    np.testing.assert_array_equal(out[:, -1], np.asarray(clipped).reshape(len(clipped), -1)[:, -1])
    assert out.min() >= 0.0 and out.max() <= 1.0


def test_probs_error_uses_given_name() -> None:
    with pytest.raises(ValueError, match="'val_probs' must hold probabilities"):
        check_probs([[2.0, -1.0]], name="val_probs")


def test_exact_zeros_warn_and_become_log_tiny() -> None:
    p = np.array([[0.0, 1.0], [0.5, 0.5], [1.0, 0.0]])
    with pytest.warns(ZeroProbabilityWarning, match="2 probabilities are exactly 0"):
        z = check_scores(p, input="probs")
    assert z[0, 0] == np.log(TINY) and z[2, 1] == np.log(TINY)
    assert np.all(np.isfinite(z))
    np.testing.assert_array_equal(z[1], np.log([0.5, 0.5]))


def test_no_warning_without_zeros() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_scores([[1e-300, 1.0]], input="probs")


def test_logits_are_not_range_checked() -> None:
    # logits may be any finite real; only probabilities are range-checked
    z = check_scores([[-50.0, 300.0]])
    np.testing.assert_array_equal(z, [[-50.0, 300.0]])


# -- labels -------------------------------------------------------------------------------------
def test_labels_valid_forms() -> None:
    np.testing.assert_array_equal(check_labels([0, 2, 1], 3, 3), [0, 2, 1])
    np.testing.assert_array_equal(check_labels(np.array([[0], [1]]), 2, 2), [0, 1])
    np.testing.assert_array_equal(check_labels(np.array([0.0, 1.0]), 2, 2), [0, 1])
    np.testing.assert_array_equal(check_labels(np.array([True, False]), 2, 2), [1, 0])
    np.testing.assert_array_equal(check_labels(np.array([1, 0], dtype=np.uint16), 2, 2), [1, 0])
    assert check_labels([0, 1], 2, 2).dtype == np.int64


@pytest.mark.parametrize(
    ("labels", "where"),
    [([0, 1, 3], "1 out of range, first in row 2 (label 3)"),
     ([0, -1, 1], "1 out of range, first in row 1 (label -1)"),
     ([5, 5, 5], "3 out of range, first in row 0 (label 5)")],
)  # fmt: skip
def test_labels_out_of_range(labels: list[int], where: str) -> None:
    with pytest.raises(ValueError, match=r"'labels' must lie in \[0, 2\] for 3 classes") as e:
        check_labels(labels, 3, 3)
    assert where in str(e.value)


@pytest.mark.parametrize("labels", [[0.0, 1.5], [0.0, np.nan], [np.inf, 0.0]])
def test_labels_float_non_integer(labels: list[float]) -> None:
    with pytest.raises(ValueError, match="'labels' must hold integer class indices"):
        check_labels(np.array(labels), 2, 2)


def test_labels_string_rejected() -> None:
    with pytest.raises(ValueError, match="'labels' must hold integer class indices; got dtype"):
        check_labels(np.array(["a", "b"]), 2, 2)


@pytest.mark.parametrize("n", [2, 4])
def test_labels_wrong_length(n: int) -> None:
    with pytest.raises(ValueError, match=r"'labels' has 3 entries but the scores have \d rows"):
        check_labels([0, 1, 0], n, 2)


def test_labels_two_dimensional_rejected() -> None:
    with pytest.raises(ValueError, match=r"'labels' must be a 1-D array.*\(2, 2\)"):
        check_labels(np.zeros((2, 2), dtype=int), 4, 2)


def test_labels_custom_name() -> None:
    with pytest.raises(ValueError, match="'y_val' must lie in"):
        check_labels([0, 7], 2, 2, name="y_val")


def test_probabilities_read_as_logits_warn() -> None:
    """Rows in [0, 1] that sum to 1, passed as logits (the default input), warn and name the
    fix; real logits, and probabilities passed as such, do not."""
    from privcal.data import ProbabilitiesAsLogitsWarning
    from privcal.private import PrivateTemperatureScaling

    rng = np.random.default_rng(0)
    z = 3.0 * rng.normal(size=(400, 5))
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    y = (z + rng.normal(size=z.shape)).argmax(1)
    with pytest.warns(ProbabilitiesAsLogitsWarning, match="input='probs'"):
        check_scores(p)
    with pytest.warns(ProbabilitiesAsLogitsWarning, match="'logits' is read as logits"):
        PrivateTemperatureScaling(epsilon=1.0).fit(p, y)  # the path a user calls
    with warnings.catch_warnings():
        warnings.simplefilter("error", ProbabilitiesAsLogitsWarning)
        check_scores(z)
        check_scores(np.abs(z) / 10.0)  # in [0, 1] but rows do not sum to 1
        check_scores(p, input="probs")

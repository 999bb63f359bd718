"""gaussian_2d: the two-class Gaussian mixture of seed 001, App. B.1."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from privcal.data import gaussian_2d


def test_shapes_balance_and_dtypes() -> None:
    X, y = gaussian_2d(11, seed=3)
    assert X.shape == (11, 2) and X.dtype == np.float64
    assert y.shape == (11,) and y.dtype == np.int64
    assert np.bincount(y).tolist() == [6, 5]  # n0 = n - n // 2, n1 = n // 2


def test_deterministic_and_seed_dependent() -> None:
    a, b = gaussian_2d(100, seed=1), gaussian_2d(100, seed=1)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert not np.array_equal(a[0], gaussian_2d(100, seed=2)[0])


def test_rows_are_shuffled() -> None:
    _, y = gaussian_2d(1000, seed=0)
    assert 0 < y[:500].sum() < 500  # not sorted by class


@pytest.mark.parametrize("shift", [0.5, 1.5])
def test_moments_and_bayes_accuracy(shift: float) -> None:
    n = 20_000
    X, y = gaussian_2d(n, shift=shift, seed=0)
    se = 4.0 / np.sqrt(n / 2)  # 4 standard errors of a class mean with unit variance
    for c, sign in ((0, -1.0), (1, 1.0)):
        mean = X[y == c].mean(axis=0)
        assert mean[0] == pytest.approx(sign * shift, abs=se)
        assert mean[1] == pytest.approx(0.0, abs=se)
        cov = np.cov(X[y == c].T)
        np.testing.assert_allclose(cov, np.eye(2), atol=0.06)  # ~6 s.e. of a variance at n=1e4
    # centres 2 * shift apart along x1: Bayes rule 1[x1 > 0] has accuracy Phi(shift)
    acc = np.mean((X[:, 0] > 0) == y)
    p = norm.cdf(shift)
    assert acc == pytest.approx(p, abs=4 * np.sqrt(p * (1 - p) / n))


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"n": 1}, "n"),
        ({"n": 2.5}, "n"),
        ({"n": 10, "shift": 0.0}, "shift"),
        ({"n": 10, "shift": -1.0}, "shift"),
        ({"n": 10, "shift": float("nan")}, "shift"),
        ({"n": 10, "seed": -1}, "seed"),
    ],
)
def test_bad_parameters(kwargs: dict[str, float], name: str) -> None:
    with pytest.raises(ValueError, match=f"'{name}' parameter of gaussian_2d"):
        gaussian_2d(**kwargs)  # type: ignore[arg-type]

"""SplitConformal: the exact rank (enumerated on tiny n), full sets, validation."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from privcal.conformal import FullSetWarning, SplitConformal, conformal_rank, conformal_threshold
from privcal.conformal._base import NotFittedError
from privcal.conformal.split import smallest_n

ALPHAS = (0.01, 0.05, 0.1, 0.2, 0.25, 0.3, 1 / 3, 0.5, 0.7, 0.9)


@pytest.mark.parametrize("alpha", ALPHAS)
def test_rank_is_smallest_valid_integer(alpha: float) -> None:
    """k is the smallest integer with k / (n + 1) >= 1 - alpha (alpha read as its decimal)."""
    a = Fraction(repr(alpha))
    for n in range(1, 300):
        k = conformal_rank(n, alpha)
        assert Fraction(k, n + 1) >= 1 - a
        assert Fraction(k - 1, n + 1) < 1 - a
        assert k == math.ceil((n + 1) * (1 - a))


def test_rank_float_traps() -> None:
    # 10 * (1 - 0.1) == 9.000000000000002 in floats: a naive ceil gives 10
    assert conformal_rank(9, 0.1) == 9
    assert conformal_rank(19, 0.05) == 19
    assert conformal_rank(99, 0.1) == 90
    assert conformal_rank(9, 0.3) == 7  # Fraction(0.3) < 0.3 would give 8


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6])
@pytest.mark.parametrize("alpha", [0.1, 0.2, 0.25, 0.4, 0.5])
def test_coverage_by_enumeration(n: int, alpha: float) -> None:
    """Enumerate every ordering of n + 1 distinct scores (the test one last): the coverage of
    the fitted threshold is exactly k / (n + 1) >= 1 - alpha, and k - 1 would be too few."""
    hits = 0
    total = 0
    with_full = conformal_rank(n, alpha) > n
    for perm in itertools.permutations(range(n + 1)):
        s = np.array(perm, dtype=float) / (n + 1)
        with pytest.warns(FullSetWarning) if with_full else _nullcontext():
            t = conformal_threshold(s[:n], alpha)
        hits += s[n] <= t
        total += 1
    k = conformal_rank(n, alpha)
    if with_full:
        assert hits == total
    else:
        assert Fraction(hits, total) == Fraction(k, n + 1)
        assert Fraction(hits, total) >= 1 - Fraction(repr(alpha))
        assert Fraction(k - 1, n + 1) < 1 - Fraction(repr(alpha))


class _nullcontext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *args: object) -> None:
        return None


def test_threshold_is_kth_smallest_and_ties() -> None:
    assert conformal_threshold([0.5, 0.1, 0.9, 0.3], alpha=0.4) == 0.5  # k = ceil(5 * .6) = 3
    assert conformal_threshold([0.5, 0.1, 0.9, 0.3], alpha=0.2) == 0.9  # k = ceil(5 * .8) = 4
    assert conformal_threshold([0.5, 0.1, 0.9, 0.3], alpha=0.5) == 0.5  # k = ceil(2.5) = 3
    assert conformal_threshold([0.2] * 10, alpha=0.1) == 0.2


def test_full_set_when_k_exceeds_n() -> None:
    z = np.array([[2.0, 0.0, 0.0]] * 5)
    y = np.zeros(5, dtype=int)
    with pytest.warns(FullSetWarning, match="at least n = 9"):
        cp = SplitConformal(alpha=0.1).fit(z, y)
    assert cp.threshold_ == np.inf and cp.rank_ == 6
    assert cp.predict_set(z).all()
    assert smallest_n(0.1) == 9 and conformal_rank(9, 0.1) <= 9 and conformal_rank(8, 0.1) > 8


def test_fit_predict_lac_hand_computed() -> None:
    probs = np.array([[0.9, 0.1], [0.6, 0.4], [0.3, 0.7], [0.8, 0.2]])
    y = np.array([0, 1, 1, 0])  # LAC scores 0.1, 0.6, 0.3, 0.2
    cp = SplitConformal(alpha=0.4).fit(probs, y, input="probs")  # k = 3 -> 0.3
    assert cp.threshold_ == pytest.approx(0.3)
    sets = cp.predict_set(np.array([[0.75, 0.25], [0.5, 0.5]]), input="probs")
    np.testing.assert_array_equal(sets, [[True, False], [False, False]])


def test_calibrator_is_used() -> None:
    class Half:
        def predict_proba(self, z: np.ndarray) -> np.ndarray:
            return np.full(z.shape, 1.0 / z.shape[1])

    z = np.random.default_rng(0).normal(size=(30, 4))
    cp = SplitConformal(calibrator=Half()).fit(z, np.zeros(30, dtype=int))
    assert cp.threshold_ == pytest.approx(0.75)
    assert cp.predict_set(z).all()


def test_randomised_aps_is_reproducible(rng: np.random.Generator) -> None:
    z = rng.normal(size=(100, 5))
    y = rng.integers(0, 5, 100)
    a = SplitConformal("aps-randomized", seed=3).fit(z, y)
    b = SplitConformal("aps-randomized", seed=3).fit(z, y)
    assert a.threshold_ == b.threshold_
    np.testing.assert_array_equal(a.predict_set(z), b.predict_set(z))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"alpha": 0.0}, "'alpha' parameter of SplitConformal"),
        ({"alpha": 1.0}, "'alpha' parameter of SplitConformal"),
        ({"score": "raps"}, "'score' parameter of SplitConformal"),
    ],
)
def test_bad_parameters(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        SplitConformal(**kwargs).fit(np.zeros((3, 2)), [0, 1, 0])


def test_bad_inputs_and_not_fitted() -> None:
    with pytest.raises(ValueError, match="empty"):
        SplitConformal().fit(np.zeros((0, 3)), [])
    with pytest.raises(ValueError, match="empty"):
        conformal_threshold([], 0.1)
    with pytest.raises(ValueError, match="labels"):
        SplitConformal().fit(np.zeros((3, 2)), [0, 2, 0])
    with pytest.raises(NotFittedError):
        SplitConformal().predict_set(np.zeros((3, 2)))
    cp = SplitConformal(alpha=0.5).fit(np.zeros((3, 2)), [0, 1, 0])
    with pytest.raises(ValueError, match="classes"):
        cp.predict_set(np.zeros((3, 4)))

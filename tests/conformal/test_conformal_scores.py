"""LAC and APS scores: hand-computed values and invariances."""

from __future__ import annotations

import numpy as np
import pytest

from privcal.conformal import aps_scores, lac_scores


def test_lac_hand_computed() -> None:
    p = np.array([[0.7, 0.2, 0.1], [0.25, 0.25, 0.5]])
    np.testing.assert_allclose(lac_scores(p), [[0.3, 0.8, 0.9], [0.75, 0.75, 0.5]])


def test_aps_non_randomised_hand_computed() -> None:
    p = np.array([[0.2, 0.7, 0.1], [0.25, 0.25, 0.5]])
    # row 0: ranks 0.7 (1), 0.2 (2), 0.1 (3) -> cumulative 0.7, 0.9, 1.0
    # row 1: 0.5 first, then the tie 0.25/0.25 broken by label index
    np.testing.assert_allclose(aps_scores(p), [[0.9, 0.7, 1.0], [0.75, 1.0, 0.5]])


def test_aps_randomised_hand_computed() -> None:
    p = np.array([[0.2, 0.7, 0.1]])
    np.testing.assert_allclose(aps_scores(p, u=[0.5]), [[0.8, 0.35, 0.95]])
    np.testing.assert_allclose(aps_scores(p, u=[0.0]), [[0.7, 0.0, 0.9]])
    np.testing.assert_allclose(aps_scores(p, u=[1.0]), aps_scores(p))


def test_scores_in_unit_interval_and_permutation_equivariant(rng: np.random.Generator) -> None:
    z = rng.normal(size=(50, 6)) * 5
    p = np.exp(z) / np.exp(z).sum(1, keepdims=True)
    perm = rng.permutation(6)
    for f in (lac_scores, aps_scores):
        s = f(p)
        assert s.min() >= 0.0 and s.max() <= 1.0
        np.testing.assert_allclose(f(p[:, perm]), s[:, perm], atol=1e-12)
    # the top label has the smallest APS score; the last one has score 1
    s = aps_scores(p)
    assert np.all(s.argmin(1) == p.argmax(1))
    np.testing.assert_allclose(s.max(1), 1.0)


def test_aps_u_validated() -> None:
    with pytest.raises(ValueError, match="'u'"):
        aps_scores([[0.5, 0.5]], u=[1.5])
    with pytest.raises(ValueError, match="'u'"):
        aps_scores([[0.5, 0.5]], u=[0.1, 0.2])

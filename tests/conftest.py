"""Fixtures shared by the whole test suite.

* ``rng``: a freshly seeded :class:`numpy.random.Generator` per test (never shared state).
* ``shared_data``: the folder of real classifier outputs (``<repo>/../shared/data``), or a clean
  skip when it is absent.
* ``sample_labels``: ``f(logits, T, rng)`` draws one label per row from ``softmax(logits / T)``.
* ``overconfident``: small synthetic over-confident logits and labels (labels drawn from
  ``softmax(z / 2)``, so the logits are over-confident by a factor of about two).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

SHARED_DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"


def _sample_labels(logits: np.ndarray, temperature: float, rng: np.random.Generator) -> np.ndarray:
    """Draw one label per row from ``softmax(logits / temperature)`` (inverse-CDF, vectorised)."""
    s = logits / temperature
    p = np.exp(s - s.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    u = rng.random((p.shape[0], 1))
    return np.minimum((np.cumsum(p, axis=1) < u).sum(axis=1), p.shape[1] - 1)


@pytest.fixture(scope="session")
def sample_labels() -> Callable[[np.ndarray, float, np.random.Generator], np.ndarray]:
    """``f(logits, temperature, rng)``: one label per row drawn from a tempered softmax."""
    return _sample_labels


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(12345)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``privcal.data.shared_data_dir()`` (honours ``$PRIVCAL_SHARED_DATA``), else
    ``<repo>/../shared/data``; skips the test when neither exists."""
    try:
        from privcal.data import shared_data_dir
    except ImportError:  # pragma: no cover - the data package is optional for these fixtures
        found = None
    else:
        found = shared_data_dir()
        if found is None and os.environ.get("PRIVCAL_SHARED_DATA"):
            pytest.skip(f"$PRIVCAL_SHARED_DATA={os.environ['PRIVCAL_SHARED_DATA']} does not exist")
    path = found if found is not None else SHARED_DATA.resolve()
    if not path.is_dir():
        pytest.skip(f"shared real data not found at {path}")
    return path


@pytest.fixture(scope="session")
def overconfident() -> tuple[np.ndarray, np.ndarray]:
    """600 x 4 logits whose labels follow ``softmax(z / 2)``: the calibrated temperature is 2."""
    gen = np.random.default_rng(2024)
    z = 3.0 * gen.normal(size=(600, 4))
    y = _sample_labels(z, 2.0, gen)
    z.setflags(write=False)
    y.setflags(write=False)
    return z, y

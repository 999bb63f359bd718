"""Fixtures of the calibrator tests: binary data for Platt scaling and logits with saturated
rows (true-class probability 0)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest


@pytest.fixture(scope="module")
def binary_data() -> tuple[np.ndarray, np.ndarray]:
    g = np.random.default_rng(7)
    s = 2.0 * g.normal(size=400)
    y = (g.random(400) < 1.0 / (1.0 + np.exp(-0.5 * s))).astype(np.int64)
    z = np.column_stack([np.zeros_like(s), s])
    z.setflags(write=False)
    y.setflags(write=False)
    return z, y


@pytest.fixture(scope="module")
def saturated(overconfident: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``overconfident`` with 1% of rows whose true class has log-probability -708 (p = 0)."""
    z, y = overconfident
    z = z - z.max(axis=1, keepdims=True)
    bad = np.random.default_rng(3).choice(y.size, size=max(1, y.size // 100), replace=False)
    z_sat = z.copy()
    z_sat[bad, y[bad]] = np.log(np.finfo(float).tiny)
    return z, z_sat, y

"""Fixtures of the CLI tests: ``client_files``, the clients' data files of a federation run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest


def _write_clients(wd: Path, names: list[str]) -> None:
    """``wd/<name>.npz`` per name: 400 rows of over-confident 10-class logits (temperature
    scaling should soften them), the same rows for the same names in every test."""
    rng = np.random.default_rng(0)
    for name in names:
        y = rng.integers(0, 10, 400)
        z = rng.normal(size=(400, 10))
        z[np.arange(400), y] += 1.5
        np.savez(wd / f"{name}.npz", logits=10.0 * z, labels=y)


@pytest.fixture(scope="session")
def client_files() -> Callable[[Path, list[str]], None]:
    """``f(folder, names)``: write each client's data file (:func:`_write_clients`)."""
    return _write_clients

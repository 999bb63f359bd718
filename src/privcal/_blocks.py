"""Run a function over row blocks of a large array, on a small thread pool.

NumPy releases the GIL inside its loops, so cache-sized row blocks processed by two to four
threads make one pass over memory instead of several, and use the cores the machine has. Each
block writes only its own rows or returns its own partial result, so results do not depend on
scheduling. Used by the validators and the top-label kernels of :mod:`privcal.metrics.statistics`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

__all__ = ["BLOCK_ROWS", "map_blocks", "n_threads"]

T = TypeVar("T")

#: Rows per block: 16384 rows of 10 float64 columns (1.3 MB) stay in cache while scanned;
#: measured best among 2^11 ... 2^15 for the top-label ECE on 2 cores.
BLOCK_ROWS = 1 << 14
#: Below this many rows the blocks run in the calling thread.
PARALLEL_MIN_ROWS = 1 << 17


def n_threads() -> int:
    return max(1, min(os.cpu_count() or 1, 4))


def map_blocks(n: int, fn: Callable[[int, int], T]) -> list[T]:
    """``[fn(lo, hi) for each block]`` over ``range(n)``, in parallel when ``n`` is large."""
    starts = range(0, n, BLOCK_ROWS)
    if n < PARALLEL_MIN_ROWS or n_threads() == 1:
        return [fn(lo, min(lo + BLOCK_ROWS, n)) for lo in starts]
    with ThreadPoolExecutor(n_threads()) as pool:
        return list(pool.map(lambda lo: fn(lo, min(lo + BLOCK_ROWS, n)), starts))

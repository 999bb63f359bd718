"""Compiled kernel for the top-label bin sums of :func:`~privcal.metrics.statistics.top_label_bins`.

NumPy spends ~100 ns per row on the top-label scan of a short row (a call per row for
``argmax(axis=1)``, or several passes for a column scan); this numba kernel makes one pass, in
parallel over row chunks. It computes exactly the same statistic: the first maximum of each row
(ties go to the lowest index, as ``np.argmax``), the right-closed equal-width bin of
:func:`~privcal.metrics.statistics.bin_indices` (``ceil(p * M) - 1`` corrected by one step
against the edges ``k / M``), and per-bin counts, confidence sums and correct counts. Only the
order of the floating-point additions differs. ``tests/unit/test_statistics.py`` checks both
paths agree.

Imported lazily (numba's import costs a few tenths of a second and the first compilation
seconds; the compiled function is cached on disk), and used only for inputs large enough to
repay that: from :data:`~privcal.metrics.statistics.COMPILED_MIN_ROWS` rows on.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

__all__ = ["top_label_sums"]


@njit(parallel=True, cache=True)
def top_label_sums(
    probs: np.ndarray, labels: np.ndarray, n_bins: int, n_chunks: int
) -> np.ndarray:  # pragma: no cover - compiled
    """``3 x n_bins`` array: counts, confidence sums and correct counts per top-label bin."""
    n, c = probs.shape
    out = np.zeros((n_chunks, 3, n_bins))
    step = (n + n_chunks - 1) // n_chunks
    for t in prange(n_chunks):
        lo = t * step
        hi = min(n, lo + step)
        acc = out[t]
        for i in range(lo, hi):
            row = probs[i]
            best = row[0]
            arg = 0
            for j in range(1, c):  # branch-free select: the argmax is unpredictable
                better = row[j] > best  # strict: ties keep the lowest index
                arg = j if better else arg
                best = row[j] if better else best
            k = int(np.ceil(best * n_bins)) - 1
            k = min(max(k, 0), n_bins - 1)
            if k > 0 and best <= k / n_bins:
                k -= 1
            elif k < n_bins - 1 and best > (k + 1) / n_bins:
                k += 1
            acc[0, k] += 1.0
            acc[1, k] += best
            acc[2, k] += 1.0 if arg == labels[i] else 0.0
    return out.sum(axis=0)

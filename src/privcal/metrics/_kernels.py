"""Compiled one-pass kernels of two statistics of :mod:`privcal.metrics.statistics`.

* :func:`top_label_sums`: the top-label bin sums of
  :func:`~privcal.metrics.statistics.top_label_bins`.
* :func:`temperature_sums`: the NLL at an inverse temperature and its first two derivatives, of
  :func:`~privcal.metrics.statistics.temperature_terms`.

NumPy spends ~100 ns per row on the top-label scan of a short row (a call per row for
``argmax(axis=1)``, or several passes for a column scan), and a temperature-scaling Newton step
needs the exponentials of the whole matrix and three row sums (five passes over memory in NumPy);
these kernels make one pass, in parallel over row chunks, and compute exactly the same statistic.
Only the order of the floating-point additions differs (and, for :func:`temperature_sums`, the
exponential: see :func:`_exp`). ``tests/metrics/test_statistics.py`` checks both paths agree.

Imported lazily (numba's import costs a few tenths of a second and the first compilation
seconds; the compiled functions are cached on disk), and used only for inputs large enough to
repay that (:data:`~privcal.metrics.statistics.COMPILED_MIN_ROWS`,
:data:`~privcal.metrics.statistics.COMPILED_MIN_ENTRIES`).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange, types
from numba.extending import overload

__all__ = ["temperature_sums", "top_label_sums"]

#: Floating-point freedoms of the kernels: re-association (so that LLVM vectorises the row sums
#: and maxima, 4 float64 or 8 float32 lanes with AVX2) and fused multiply-add. No assumption
#: that values are finite (callers validate that) and no approximate division or functions.
_FAST = {"reassoc", "contract"}


def _exp(x):  # pragma: no cover - replaced by the overload
    """:math:`e^x` for :math:`x \\le 0` in the precision of ``x`` (compiled only)."""
    raise NotImplementedError


@overload(_exp, inline="always", jit_options={"fastmath": _FAST})
def _exp_overload(x):  # pragma: no cover - compiled
    """A vectorisable :math:`e^x` for :math:`x \\le 0` (numba calls libm's ``exp`` one value at
    a time; without SVML that caps a pass far below memory speed).

    :math:`x = k \\ln 2 + r` with :math:`k = \\lfloor x / \\ln 2 + 1/2 \\rfloor` and
    :math:`|r| \\le \\ln 2 / 2` (Cody-Waite: :math:`\\ln 2` split in a high part exact in ``k``'s
    range and a low part), :math:`e^r` by its Taylor polynomial, :math:`2^k` built in the
    exponent bits. float64: degree 12, truncation :math:`(\\ln 2/2)^{13}/13! < 2 \\cdot 10^{-16}`;
    max relative error measured 3.3e-16 (1.5 ulp) on [-708, 0]. float32: degree 7, truncation
    :math:`< 6 \\cdot 10^{-10}`, max relative error measured 1e-7 (1 ulp) on [-87, 0].
    Below -708 (float64) or -87 (float32) the result is 0, where the true value is below the
    smallest normal number (it is added to a row sum of at least 1).
    """
    if x == types.float64:

        def exp64(x):
            k = np.floor(x * 1.4426950408889634 + 0.5)
            r = (x - k * 0.6931471803691238) - k * 1.9082149292705877e-10
            p = 1.0 / 479001600.0
            p = p * r + 1.0 / 39916800.0
            p = p * r + 1.0 / 3628800.0
            p = p * r + 1.0 / 362880.0
            p = p * r + 1.0 / 40320.0
            p = p * r + 1.0 / 5040.0
            p = p * r + 1.0 / 720.0
            p = p * r + 1.0 / 120.0
            p = p * r + 1.0 / 24.0
            p = p * r + 1.0 / 6.0
            p = p * r + 0.5
            p = p * r + 1.0
            p = p * r + 1.0
            scale = np.int64((np.int64(np.int32(k)) + 1023) << 52).view(np.float64)
            return p * scale if x >= -708.0 else 0.0

        return exp64
    if x == types.float32:

        def exp32(x):
            k = np.floor(x * np.float32(1.4426950408889634) + np.float32(0.5))
            r = (x - k * np.float32(0.693145751953125)) - k * np.float32(1.4286068203094173e-06)
            p = np.float32(1.0 / 5040.0)
            p = p * r + np.float32(1.0 / 720.0)
            p = p * r + np.float32(1.0 / 120.0)
            p = p * r + np.float32(1.0 / 24.0)
            p = p * r + np.float32(1.0 / 6.0)
            p = p * r + np.float32(0.5)
            p = p * r + np.float32(1.0)
            p = p * r + np.float32(1.0)
            scale = np.int32((np.int32(k) + np.int32(127)) << np.int32(23)).view(np.float32)
            return p * scale if x >= np.float32(-87.0) else np.float32(0.0)

        return exp32
    return None


@njit(parallel=True, cache=True, fastmath=_FAST)
def temperature_sums(
    z: np.ndarray,
    labels: np.ndarray,
    beta: float,
    beta_w: float | np.float32,
    active: np.ndarray,
    bound: float,
    nll: np.ndarray,
    gap: np.ndarray,
    n_chunks: int,
) -> np.ndarray:  # pragma: no cover - compiled
    """``[sum_A grad, sum_A curv, sum_i min(nll_i, bound), #{nll_i > bound}, |A|]`` at ``beta``.

    Row ``i``: :math:`d = z_i - \\max_c z_{ic}`, :math:`e = e^{\\beta d}`, :math:`s = \\sum e`;
    ``grad`` :math:`= \\sum e d / s - d_y`, ``curv`` :math:`= \\sum e d^2 / s - (\\sum e d/s)^2`
    (clipped at 0, its exact value being a variance), ``nll`` :math:`= \\log s - \\beta d_y`
    (clipped at 0), written to ``nll[i]``; ``-d_y`` to ``gap[i]`` when ``gap`` has ``n``
    entries. ``A``: the rows with ``active[i]`` (all rows when ``active`` is empty). ``beta_w``
    is ``beta`` in the working type of the row sums: float64, or float32 for float32 ``z``
    (then ``d``, the exponentials and the row sums are float32); the per-row results and the
    sums over rows are float64.
    """
    n, c = z.shape
    out = np.zeros((n_chunks, 5))
    step = (n + n_chunks - 1) // n_chunks
    all_active = active.size == 0
    with_gap = gap.size == n
    zero = beta_w - beta_w  # 0 in the working type
    b = beta_w
    for t in prange(n_chunks):
        acc = out[t]
        for i in range(t * step, min(n, (t + 1) * step)):
            row = z[i]
            m = zero + row[0]
            for j in range(1, c):
                m = max(m, zero + row[j])
            s = zero
            s1 = zero
            s2 = zero
            for j in range(c):
                d = (zero + row[j]) - m
                e = _exp(b * d)
                s += e
                ed = e * d
                s1 += ed
                s2 += ed * d
            d_y = np.float64(row[labels[i]]) - np.float64(m)  # exact for float32 logits
            s64 = np.float64(s)
            mean = np.float64(s1) / s64
            ell = max(math.log(s64) - beta * d_y, 0.0)
            nll[i] = ell
            if with_gap:
                gap[i] = -d_y
            if ell > bound:
                acc[2] += bound
                acc[3] += 1.0
            else:
                acc[2] += ell
            if all_active or active[i]:
                acc[0] += mean - d_y
                acc[1] += max(np.float64(s2) / s64 - mean * mean, 0.0)
                acc[4] += 1.0
    return out.sum(axis=0)


@njit(parallel=True, cache=True)
def top_label_sums(
    probs: np.ndarray, labels: np.ndarray, n_bins: int, n_chunks: int
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Counts, confidence sums and correct counts per top-label bin (``3 x n_bins``), and what
    :func:`~privcal.data.validation.check_probs` and ``check_labels`` check, from the same read.

    The first maximum of each row (ties go to the lowest index, as ``np.argmax``), the
    right-closed equal-width bin of :func:`~privcal.metrics.statistics.bin_indices`
    (``ceil(p * M) - 1`` in float64, corrected by one step against the edges ``k / M``). The
    second array: the smallest and largest entry, the largest ``|row sum - 1|``, the number of
    rows whose sum is not finite (every row holding a NaN or an infinity), and the smallest and
    largest label. float32 rows are read as they are and summed in float32 (rounding below
    ``C * 2^-24``, which the caller allows for).
    """
    n = probs.shape[0]
    out = np.zeros((n_chunks, 3, n_bins))
    check = np.zeros((n_chunks, 6))
    edges = np.arange(n_bins + 1) / n_bins  # k / n_bins, as bin_indices computes them
    step = (n + n_chunks - 1) // n_chunks
    for t in prange(n_chunks):
        _top_label_chunk(
            probs, labels, n_bins, t * step, min(n, (t + 1) * step), out[t], check[t], edges
        )
    summary = np.empty(6)
    summary[0] = check[:, 0].min()
    summary[1] = check[:, 1].max()
    summary[2] = check[:, 2].max()
    summary[3] = check[:, 3].sum()
    summary[4] = check[:, 4].min()
    summary[5] = check[:, 5].max()
    return out.sum(axis=0), summary


@njit(inline="always")
def _edge_bin(conf: float, n_bins: int, edges: np.ndarray) -> int:  # pragma: no cover
    """The right-closed equal-width bin of ``conf``: ``ceil(conf M) - 1``, corrected by one
    step against the edges ``k / M`` (as :func:`~privcal.metrics.statistics.bin_indices`)."""
    k = int(np.ceil(conf * n_bins)) - 1
    k = min(max(k, 0), n_bins - 1)
    if k > 0 and conf <= edges[k]:
        k -= 1
    elif k < n_bins - 1 and conf > edges[k + 1]:
        k += 1
    return k


@njit(cache=True)
def _top_label_chunk(
    probs: np.ndarray,
    labels: np.ndarray,
    n_bins: int,
    lo: int,
    hi: int,
    acc: np.ndarray,
    check: np.ndarray,
    edges: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """Rows ``lo:hi`` of :func:`top_label_sums` (a plain loop: numba optimises it better than
    the same loop inside ``prange``).

    Two rows are read in lockstep, ``i`` from the first half of the range and ``i + half`` from
    the second: the first-maximum search is a chain of compare-and-select steps along a row,
    and two independent chains keep the core busy while each waits on its last step (1.2-1.5x
    faster than one row at a time, float32 and float64, on a quiet 2-core slice). Each row of a
    pair adds to its own copy of the histogram (summed at the end), so a pair never waits on
    its own store; the bin edges are read from ``edges`` (no division per row).
    """
    c = probs.shape[1]
    lanes = np.zeros((2, 3, n_bins))
    low = np.inf
    high = -np.inf
    worst = 0.0
    bad = 0.0
    y_low = labels[lo] if lo < hi else 0
    y_high = y_low
    half = (hi - lo + 1) // 2
    for r in range(half):
        i0 = lo + r
        two = i0 + half < hi  # an odd range leaves its middle row alone
        i1 = i0 + half if two else i0
        b0 = probs[i0, 0]
        b1 = probs[i1, 0]
        m0, m1, t0, t1 = b0, b1, b0, b1
        a0 = 0
        a1 = 0
        for j in range(1, c):  # branch-free select: the argmax is unpredictable
            v0 = probs[i0, j]
            v1 = probs[i1, j]
            g0 = v0 > b0  # strict: ties keep the lowest index
            g1 = v1 > b1
            a0 = j if g0 else a0
            a1 = j if g1 else a1
            b0 = v0 if g0 else b0
            b1 = v1 if g1 else b1
            m0 = v0 if v0 < m0 else m0
            m1 = v1 if v1 < m1 else m1
            t0 += v0
            t1 += v1
        for q in range(2 if two else 1):
            i = i1 if q else i0
            conf = np.float64(b1 if q else b0)
            k = _edge_bin(conf, n_bins, edges)
            label = labels[i]
            lanes[q, 0, k] += 1.0
            lanes[q, 1, k] += conf
            lanes[q, 2, k] += 1.0 if (a1 if q else a0) == label else 0.0
            s64 = np.float64(m1 if q else m0)
            low = s64 if s64 < low else low
            high = conf if conf > high else high
            dev = abs(np.float64(t1 if q else t0) - 1.0)
            if dev == dev and dev < np.inf:
                worst = dev if dev > worst else worst
            else:
                bad += 1.0
            y_low = label if label < y_low else y_low
            y_high = label if label > y_high else y_high
    for q in range(2):
        for r in range(3):
            for b in range(n_bins):
                acc[r, b] += lanes[q, r, b]
    check[0] = low
    check[1] = high
    check[2] = worst
    check[3] = bad
    check[4] = y_low
    check[5] = y_high

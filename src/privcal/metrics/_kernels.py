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


#: Rows per block of :func:`_top_label_chunk`: the block's columns (``C x 256`` entries) and
#: its per-row state stay in L1; 128 to 512 measured alike.
_BLOCK = 256


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
    ``C * 2^-24``, which the caller allows for). ``probs`` is C-contiguous.
    """
    n = probs.shape[0]
    out = np.zeros((n_chunks, 3, n_bins))
    check = np.zeros((n_chunks, 6))
    step = (n + n_chunks - 1) // n_chunks
    for t in prange(n_chunks):
        _top_label_chunk(probs, labels, n_bins, t * step, min(n, (t + 1) * step), out[t], check[t])
    summary = np.empty(6)
    summary[0] = check[:, 0].min()
    summary[1] = check[:, 1].max()
    summary[2] = check[:, 2].max()
    summary[3] = check[:, 3].sum()
    summary[4] = check[:, 4].min()
    summary[5] = check[:, 5].max()
    return out.sum(axis=0), summary


@njit(cache=True)
def _top_label_chunk(
    probs: np.ndarray,
    labels: np.ndarray,
    n_bins: int,
    lo: int,
    hi: int,
    acc: np.ndarray,
    check: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """Rows ``lo:hi`` of :func:`top_label_sums` (a plain loop: numba optimises it better than
    the same loop inside ``prange``), :data:`_BLOCK` rows at a time, one SIMD lane per row.

    A block is first copied column by column into ``cols`` (``cols[j, r] = p[lo + r, j]``);
    then every step is a loop over the rows of the block that LLVM vectorises (8 float32 or 4
    float64 rows per instruction): the first-maximum search runs along the columns as
    compare-and-select on per-row ``best``/``arg`` arrays (a strict ``>``: ties keep the lowest
    index), with the row minimum and row sum beside it; then each row's bin, and the checks
    kept per lane (``small``, ``top``, ``worst``, ``bad``, ``y_lo``, ``y_hi``: reduced once at
    the end). Only the histogram is scalar: each row adds to one of four copies (summed at the
    end), so that rows in the same bin do not wait on each other's stores. On one thread 1.6-1.8x
    (float64) and 1.6-2.4x (float32) less time than two rows in lockstep through a scalar
    compare-and-select chain (``bench/RESULTS.md``, "Row-block kernel").
    """
    c = probs.shape[1]
    flat = probs.reshape(-1)
    cols = np.empty((c, _BLOCK), probs.dtype)
    best = np.empty(_BLOCK, probs.dtype)
    total = np.empty(_BLOCK, probs.dtype)
    arg = np.empty(_BLOCK, np.int32)  # int32: float32 lanes vectorise with int32, not int64
    bins = np.empty(_BLOCK, np.int64)
    small = np.full(_BLOCK, np.inf, probs.dtype)
    top = np.full(_BLOCK, -np.inf)
    worst = np.zeros(_BLOCK)
    bad = np.zeros(_BLOCK)
    n = labels.shape[0]  # an empty chunk starts from a label of the array all the same
    y_lo = np.full(_BLOCK, labels[min(lo, n - 1)] if n else 0)
    y_hi = y_lo.copy()
    lanes = np.zeros((4, 3, n_bins))
    for start in range(lo, hi, _BLOCK):
        m = min(_BLOCK, hi - start)
        y = labels[start : start + m]
        _transpose(flat, start, m, cols)
        _first_max(cols, m, best, arg, small, total)
        _bins_and_checks(best, total, y, n_bins, bins, top, worst, bad, y_lo, y_hi)
        for r in range(m):
            q = r & 3
            k = bins[r]
            lanes[q, 0, k] += 1.0
            lanes[q, 1, k] += np.float64(best[r])
            lanes[q, 2, k] += 1.0 if arg[r] == y[r] else 0.0
    acc += lanes.sum(axis=0)
    check[0] = small.min()
    check[1] = top.max()
    check[2] = worst.max()
    check[3] = bad.sum()
    check[4] = y_lo.min()
    check[5] = y_hi.max()


@njit(inline="always")
def _transpose(flat: np.ndarray, start: int, m: int, cols: np.ndarray) -> None:  # pragma: no cover
    """``cols[j, r] = flat[(start + r) C + j]`` for the ``m`` rows from ``start`` (unsigned
    offsets: no negative-index wrap for LLVM to keep)."""
    c = cols.shape[0]
    uc = np.uint64(c)
    base = np.uint64(start) * uc
    for j in range(c):
        col = cols[j]
        uj = np.uint64(j)
        for r in range(m):
            col[r] = flat[base + np.uint64(r) * uc + uj]


@njit(inline="always")
def _first_max(
    cols: np.ndarray,
    m: int,
    best: np.ndarray,
    arg: np.ndarray,
    small: np.ndarray,
    total: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """Per row ``r < m`` of the block: the first maximum ``best[r]`` and its column ``arg[r]``,
    the row sum ``total[r]`` (columns in order); ``small[r]`` keeps the smallest entry seen in
    lane ``r``. Every value is loaded before the selects, so that LLVM can vectorise them."""
    col = cols[0]
    for r in range(m):
        v = col[r]
        s = small[r]
        best[r] = v
        total[r] = v
        arg[r] = np.int32(0)
        small[r] = v if v < s else s
    for j in range(1, cols.shape[0]):
        col = cols[j]
        jj = np.int32(j)
        for r in range(m):
            v = col[r]
            b = best[r]
            a = arg[r]
            s = small[r]
            g = v > b
            best[r] = v if g else b
            arg[r] = jj if g else a
            small[r] = v if v < s else s
            total[r] += v


@njit(inline="always")
def _bins_and_checks(
    best: np.ndarray,
    total: np.ndarray,
    labels: np.ndarray,
    n_bins: int,
    bins: np.ndarray,
    top: np.ndarray,
    worst: np.ndarray,
    bad: np.ndarray,
    y_lo: np.ndarray,
    y_hi: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """Per row ``r`` of the block (``labels`` holds its labels): ``bins[r]``, the right-closed
    equal-width bin of ``best[r]`` (as :func:`~privcal.metrics.statistics.bin_indices`: ``ceil(p
    M) - 1`` clamped to ``[0, M - 1]``, then one step down if ``p <= k / M`` or up if ``p > (k +
    1) / M``, the edges divided exactly as ``arange(M + 1) / M``); and, per lane, the largest
    confidence, the largest finite ``|row sum - 1|``, the count of non-finite row sums and the
    label range. ``&`` rather than ``and`` keeps each step a select (no branch)."""
    fm = float(n_bins)
    for r in range(labels.shape[0]):
        conf = float(best[r])
        x = conf * fm
        x = x if x > 0.0 else 0.0  # clamped before the conversion (NaN -> 0: bad row anyway)
        x = x if x < fm else fm
        k = int(np.ceil(x)) - 1
        k = k if k > 0 else 0
        e0 = k / fm
        e1 = (k + 1) / fm
        k = k - 1 if (k > 0) & (conf <= e0) else k
        k = k + 1 if (k < n_bins - 1) & (conf > e1) else k
        bins[r] = k
        t = top[r]
        top[r] = conf if conf > t else t
        dev = abs(np.float64(total[r]) - 1.0)
        finite = dev < np.inf  # False for NaN and infinity
        w = worst[r]
        worst[r] = dev if finite & (dev > w) else w
        bad[r] += 0.0 if finite else 1.0
        y = labels[r]
        a = y_lo[r]
        y_lo[r] = y if y < a else a
        a = y_hi[r]
        y_hi[r] = y if y > a else a

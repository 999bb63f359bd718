"""Statistics of calibration: the one implementation every layer calls.

The non-private calibrators, the metrics, the private data sources and the federated clients all
compute their statistics with these functions; a private method only adds a mechanism to what they
return (*one statistic, one function*).

Binning rule
------------
Equal-width bins over [0, 1] are right-closed: with ``M`` bins, bin ``m`` (0-based) is
``((m)/M, (m+1)/M]`` and the first bin is the closed interval ``[0, 1/M]``. A value ``p`` goes to
bin ``ceil(p * M) - 1`` (and ``p = 0`` to bin 0), so ``p = 0`` and ``p = 1`` both land in real bins
(the first and the last). This avoids the two classic bugs in torchmetrics (#1744: confidences of
exactly 0 dropped; #3510: confidences of exactly 1 put in an extra bin that is never reported).

Temperature statistics
----------------------
For logits :math:`z \\in \\mathbb{R}^{N\\times C}` and temperature :math:`T > 0`, with
:math:`d_{ic} = z_{ic} - \\max_c z_{ic} \\le 0`:

* top-label confidence :math:`\\mathrm{conf}_T(i) = 1 / \\sum_c e^{d_{ic}/T}` (decreasing in T);
* correctness :math:`1[\\arg\\max_c z_{ic} = y_i]` (independent of T);
* NLL :math:`\\ell_T(i) = -d_{iy_i}/T + \\log \\sum_c e^{d_{ic}/T}` (>= 0).

All functions accept a scalar temperature or a 1-D array of K temperatures and then return
``K x ...`` arrays; the loop is over temperatures only, never over rows or bins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.special import logsumexp

from privcal._blocks import map_blocks, n_threads
from privcal._params import check_int, check_option

__all__ = [
    "BinStats",
    "TemperatureTerms",
    "accuracy_gap_sum",
    "accuracy_gap_terms",
    "bin_indices",
    "calibration_bins",
    "class_histograms",
    "clipped_nll_sum",
    "log_softmax",
    "mass_bin_edges",
    "nll_terms",
    "softmax",
    "temperature_rows",
    "temperature_terms",
    "top_confidence",
    "top_correct",
    "top_label",
    "top_label_bins",
    "top_label_bins_checked",
    "width_bin_edges",
]

Binning = Literal["width", "mass"]

#: From this many rows on, :func:`top_label_bins` uses the compiled kernel: 2^16, so that the
#: 10^5-10^6-row inputs users evaluate get it (at 10^6 x 10 it is several times NumPy's column
#: scan, whose per-row reductions cap it near torchmetrics' speed; ``bench/bench_metrics.py``).
COMPILED_MIN_ROWS = 1 << 16
#: From this many matrix entries on, :func:`temperature_terms` uses the compiled kernel: a NumPy
#: pass over 2^20 float64 entries takes ~10 ms, so a fit of 5-8 passes repays numba's import.
COMPILED_MIN_ENTRIES = 1 << 20
#: Matrix entries per block of the NumPy path of :func:`temperature_terms` (512 KiB of float64).
_BLOCK_ENTRIES = 1 << 16


def log_softmax(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """Row-wise :math:`\\log \\mathrm{softmax}(z / T)`, computed stably."""
    scaled = np.asarray(logits, dtype=np.float64) / temperature
    return scaled - logsumexp(scaled, axis=-1, keepdims=True)


def softmax(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """Row-wise :math:`\\mathrm{softmax}(z / T)`; rows sum to 1 to float precision."""
    scaled = np.asarray(logits, dtype=np.float64) / temperature
    scaled = scaled - scaled.max(axis=-1, keepdims=True)
    np.exp(scaled, out=scaled)
    scaled /= scaled.sum(axis=-1, keepdims=True)
    return scaled


def _temperatures(temperature: float | np.ndarray) -> tuple[np.ndarray, bool]:
    t = np.asarray(temperature, dtype=np.float64)
    scalar = t.ndim == 0
    t = np.atleast_1d(t)
    if t.ndim != 1 or not np.all(np.isfinite(t)) or np.any(t <= 0):
        raise ValueError(
            f"The 'temperature' parameter must be a positive finite float or a 1-D array of them. "
            f"Got {temperature!r} instead."
        )
    return t, scalar


def _centred(logits: np.ndarray) -> np.ndarray:
    z = np.asarray(logits, dtype=np.float64)
    return z - z.max(axis=1, keepdims=True)


def top_correct(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """``1[argmax_c z_ic == y_i]`` as float64 (ties go to the lowest index, as ``np.argmax``)."""
    return (np.argmax(logits, axis=1) == labels).astype(np.float64)


def top_confidence(logits: np.ndarray, temperature: float | np.ndarray = 1.0) -> np.ndarray:
    """Top-label confidence :math:`\\max_c \\mathrm{softmax}(z/T)_c` for one or K temperatures.

    Returns shape ``(N,)`` for a scalar temperature, ``(K, N)`` for K temperatures.
    """
    temps, scalar = _temperatures(temperature)
    d = _centred(logits)
    out = np.empty((temps.size, d.shape[0]))
    buf = np.empty_like(d)
    for k, t in enumerate(temps):
        np.divide(d, t, out=buf)
        np.exp(buf, out=buf)
        out[k] = 1.0 / np.einsum("ij->i", buf)
    return out[0] if scalar else out


def accuracy_gap_terms(
    logits: np.ndarray, labels: np.ndarray, temperature: float | np.ndarray = 1.0
) -> np.ndarray:
    """Per-example terms :math:`1[\\text{correct}_i] - \\mathrm{conf}_T(i) \\in [-1, 1]`.

    Their mean is the accuracy minus the mean confidence, which Acc-T (seed 000) drives to zero.
    Shape ``(N,)`` or ``(K, N)``.
    """
    return top_correct(logits, labels) - top_confidence(logits, temperature)


def accuracy_gap_sum(
    logits: np.ndarray, labels: np.ndarray, temperature: float | np.ndarray = 1.0
) -> np.ndarray | float:
    """:math:`\\sum_i (1[\\text{correct}_i] - \\mathrm{conf}_T(i))`, per temperature.

    Each term lies in [-1, 1] and adding or removing one example changes the sum by at most 1:
    the L1 sensitivity under add/remove-one neighbours is 1.
    """
    s = accuracy_gap_terms(logits, labels, temperature).sum(axis=-1)
    return float(s) if np.ndim(s) == 0 else s


def nll_terms(
    logits: np.ndarray, labels: np.ndarray, temperature: float | np.ndarray = 1.0
) -> np.ndarray:
    """Per-example negative log-likelihood :math:`-\\log \\mathrm{softmax}(z_i/T)_{y_i} \\ge 0`."""
    temps, scalar = _temperatures(temperature)
    d = _centred(logits)
    d_y = d[np.arange(d.shape[0]), labels]
    out = np.empty((temps.size, d.shape[0]))
    buf = np.empty_like(d)
    for k, t in enumerate(temps):
        # d <= 0 with a 0 in every row, so the sum is in [1, C]: log(sum(exp)) needs no shift
        np.divide(d, t, out=buf)
        np.exp(buf, out=buf)
        out[k] = np.log(np.einsum("ij->i", buf)) - d_y / t
    np.maximum(out, 0.0, out=out)  # exact value is >= 0; remove -1e-16 rounding
    return out[0] if scalar else out


def clipped_nll_sum(
    logits: np.ndarray,
    labels: np.ndarray,
    temperature: float | np.ndarray,
    bound: float | None,
) -> np.ndarray | float:
    """:math:`\\sum_i \\min(\\ell_T(i), B)`, the NLL summed with each term clipped to [0, B].

    With ``bound=None`` the plain sum (the non-private objective). With a bound, adding or removing
    one example changes the sum by at most ``B``: the sensitivity is ``B``. Without the clip the
    NLL of one example is unbounded and no finite noise makes the sum private.
    """
    terms = nll_terms(logits, labels, temperature)
    if bound is not None:
        terms = np.minimum(terms, bound)
    s = terms.sum(axis=-1)
    return float(s) if np.ndim(s) == 0 else s


@dataclass(frozen=True)
class TemperatureTerms:
    """The NLL of every example at an inverse temperature and its derivatives, from one pass.

    See :func:`temperature_terms`. ``grad`` and ``curv`` are sums over the rows of ``active``
    (all rows when it is ``None``), ``n_active`` of them.
    """

    beta: float
    nll: np.ndarray
    bounded_sum: float
    n_above: int
    grad: float
    curv: float
    n_active: int
    active: np.ndarray | None
    true_gap: np.ndarray | None


def temperature_rows(
    logits: np.ndarray, labels: np.ndarray, beta: float | np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per-row NLL at inverse temperature :math:`\\beta = 1/T` and its first two derivatives.

    With :math:`d_i = z_i - \\max_c z_{ic} \\le 0` and :math:`p_i = \\mathrm{softmax}(\\beta_i
    d_i)`, returns per row the derivative :math:`\\ell_i' = E_{p_i}[d_i] - d_{iy_i}`, the second
    derivative :math:`\\ell_i'' = \\mathrm{Var}_{p_i}[d_i] \\ge 0`, the NLL :math:`\\ell_i =
    \\log\\sum_c e^{\\beta_i d_{ic}} - \\beta_i d_{iy_i} \\ge 0` and the true-class gap
    :math:`-d_{iy_i} \\ge 0` (:func:`temperature_terms` sums them). ``beta`` is a scalar or one
    value per row (the federated clients' per-client fits,
    :func:`privcal.federated.methods.temperature_newton`).

    NumPy, a cache-sized block of rows at a time, converted to float64 inside the cache and
    centred; row sums are products with a vector of ones (BLAS).
    """
    z = np.asarray(logits)
    n, c = z.shape
    b = np.asarray(beta, dtype=np.float64)
    out = np.empty((4, n))
    ones = np.ones(c)
    rows = max(1, _BLOCK_ENTRIES // c)
    for lo in range(0, n, rows):
        hi = min(n, lo + rows)
        b_rows = b[lo:hi] if b.ndim else b
        d = z[lo:hi].astype(np.float64)  # float32: one fast cast of a cached block
        d -= d.max(axis=1, keepdims=True)
        d_y = d[np.arange(hi - lo), labels[lo:hi]]
        e = np.multiply(d, b_rows[:, None] if b.ndim else b_rows)
        np.exp(e, out=e)
        s = e @ ones
        e *= d
        mean = (e @ ones) / s
        e *= d
        out[0, lo:hi] = mean - d_y
        out[1, lo:hi] = (e @ ones) / s - mean * mean
        out[2, lo:hi] = np.log(s) - b_rows * d_y
        out[3, lo:hi] = -d_y
    np.maximum(out[1:3], 0.0, out=out[1:3])  # both are >= 0 exactly; remove -1e-16 rounding
    return out[0], out[1], out[2], out[3]


def temperature_terms(
    logits: np.ndarray,
    labels: np.ndarray,
    beta: float,
    *,
    active: np.ndarray | None = None,
    bound: float | None = None,
    low_precision: bool = False,
    true_gap: bool = False,
) -> TemperatureTerms:
    """The NLL at inverse temperature :math:`\\beta = 1/T` and its first two derivatives in
    :math:`\\beta`, in one pass over the logits (the statistic of the NLL temperature fit).

    With :math:`d_i = z_i - \\max_c z_{ic} \\le 0` and :math:`p_i = \\mathrm{softmax}(\\beta
    d_i)`, example ``i`` has NLL :math:`\\ell_i(\\beta) = \\log\\sum_c e^{\\beta d_{ic}} -
    \\beta d_{iy_i}` (``nll``, equal to :func:`nll_terms` at :math:`T = 1/\\beta`), derivative
    :math:`\\ell_i' = E_{p_i}[d_i] - d_{iy_i}` and second derivative :math:`\\ell_i'' =
    \\mathrm{Var}_{p_i}[d_i] \\ge 0`. Returned: every ``nll``; ``bounded_sum``
    :math:`= \\sum_i \\min(\\ell_i, B)` (:func:`clipped_nll_sum`; the plain sum for
    ``bound=None``) and ``n_above`` :math:`= \\#\\{i: \\ell_i > B\\}`; ``grad``
    :math:`= \\sum_{i \\in A} \\ell_i'` and ``curv`` :math:`= \\sum_{i \\in A} \\ell_i''` over the
    rows ``A`` of the boolean mask ``active`` (all rows for ``None``); with ``true_gap=True``
    also :math:`-d_{iy_i} = \\max_c z_{ic} - z_{iy_i} \\ge 0`, which bounds the NLL at every
    :math:`\\beta`: :math:`\\beta(-d_{iy_i}) \\le \\ell_i(\\beta) \\le \\log C + \\beta(-d_{iy_i})`.

    From :data:`COMPILED_MIN_ENTRIES` matrix entries on, the compiled kernel
    :func:`privcal.metrics._kernels.temperature_sums` computes all of it in one parallel pass
    (float32 logits are read as they are, never copied); below it, NumPy blocks. Rows are
    float64 throughout, unless ``low_precision=True`` and the logits are float32: then each
    row's exponentials and sums are float32 (8 SIMD lanes instead of 4; relative error of
    ``grad`` and ``curv`` about ``1e-6``, see
    :func:`~privcal.calibrators.temperature.fit_temperature_nll` for where that is enough), the
    per-row results and the sums over rows float64. ``true_gap`` and the NLL's :math:`d_{iy}`
    are float64 differences of the logits in either case.
    """
    z = np.ascontiguousarray(logits)
    y = np.array(labels, dtype=np.int64)  # a copy: writable, so the kernel has one signature
    n, c = z.shape
    b = None if bound is None else float(bound)
    if n * c >= COMPILED_MIN_ENTRIES:
        from privcal.metrics._kernels import temperature_sums

        nll = np.empty(n)
        gap = np.empty(n if true_gap else 0)
        low = low_precision and z.dtype == np.float32
        sums = temperature_sums(
            z,
            y,
            float(beta),
            np.float32(beta) if low else float(beta),
            np.zeros(0, dtype=bool) if active is None else np.ascontiguousarray(active, bool),
            np.inf if b is None else b,
            nll,
            gap,
            4 * n_threads(),
        )
        return TemperatureTerms(
            float(beta),
            nll,
            float(sums[2]),
            int(sums[3]),
            float(sums[0]),
            float(sums[1]),
            int(sums[4]),
            active,
            gap if true_gap else None,
        )
    grad, curv, nll, gap_rows = temperature_rows(z, y, float(beta))
    above = np.zeros(n, dtype=bool) if b is None else nll > b
    w = np.ones(n) if active is None else np.asarray(active, dtype=np.float64)
    return TemperatureTerms(
        float(beta),
        nll,
        float(nll.sum() if b is None else np.minimum(nll, b).sum()),
        int(above.sum()),
        float(w @ grad),
        float(w @ curv),
        int(w.sum()),
        active,
        gap_rows if true_gap else None,
    )


def width_bin_edges(n_bins: int) -> np.ndarray:
    """The ``n_bins + 1`` edges ``k / n_bins`` of equal-width bins over [0, 1].

    Computed as ``arange(M + 1) / M`` so that each edge is the float nearest to ``k / M``
    (``linspace`` gives e.g. 0.30000000000000004 for 3/10).
    """
    return np.arange(n_bins + 1) / n_bins


def mass_bin_edges(values: np.ndarray, n_bins: int) -> np.ndarray:
    """Edges of equal-mass bins: ``n_bins`` groups of the sorted values of (nearly) equal size.

    Edge ``m`` is the largest value of group ``m - 1`` so that, with the right-closed rule of
    :func:`bin_indices`, group ``m - 1`` is exactly ``(edge[m-1], edge[m]]``. Duplicate values
    that straddle a group boundary stay together (the bin on the left takes them).
    """
    v = np.sort(np.asarray(values, dtype=np.float64).ravel())
    n = v.size
    cuts = (np.arange(1, n_bins) * n) // n_bins  # group sizes differ by at most 1
    inner = v[np.clip(cuts - 1, 0, n - 1)] if n else np.zeros(n_bins - 1)
    return np.concatenate([[0.0], inner, [1.0]])


def bin_indices(values: np.ndarray, n_bins: int, edges: np.ndarray | None = None) -> np.ndarray:
    """Bin index of each value under the right-closed rule (first bin closed on the left).

    With ``edges=None`` the bins are equal-width on [0, 1] with the edges of
    :func:`width_bin_edges`: the index starts from ``ceil(p * n_bins) - 1`` and is corrected by one
    step against the edges, because ``p * n_bins`` rounds (``7/25 * 25 = 7.000000000000001``); so a
    value equal to an edge always lands in the bin on its left. Otherwise the index of the first
    edge ``>= p`` among the inner edges (``searchsorted(..., side="left")``).
    """
    v = np.asarray(values, dtype=np.float64)
    if edges is None:
        e = width_bin_edges(n_bins)
        idx = np.clip(np.ceil(v * n_bins).astype(np.int64) - 1, 0, n_bins - 1)
        idx -= (idx > 0) & (v <= e[idx])
        idx += (idx < n_bins - 1) & (v > e[idx + 1])
        return idx
    return np.searchsorted(edges[1:-1], v, side="left").astype(np.int64)


@dataclass(frozen=True)
class BinStats:
    """Per-bin sums of a binned calibration statistic.

    Attributes
    ----------
    edges : (M + 1,) bin edges.
    counts : (M,) number of values per bin.
    sum_confidence : (M,) sum of confidences per bin.
    sum_correct : (M,) sum of correctness indicators (or soft labels) per bin.
    """

    edges: np.ndarray
    counts: np.ndarray
    sum_confidence: np.ndarray
    sum_correct: np.ndarray

    @property
    def n(self) -> float:
        return float(self.counts.sum())

    def gaps(self) -> np.ndarray:
        """Per-bin sums of ``correct - confidence`` (the quantity DP ECE-T noises)."""
        return self.sum_correct - self.sum_confidence

    def accuracy(self) -> np.ndarray:
        """Per-bin mean correctness (NaN for empty bins)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.counts > 0, self.sum_correct / self.counts, np.nan)

    def confidence(self) -> np.ndarray:
        """Per-bin mean confidence (NaN for empty bins)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.counts > 0, self.sum_confidence / self.counts, np.nan)

    def ece(self) -> float:
        """:math:`\\sum_m |\\sum_{i\\in B_m}(\\text{correct}_i - \\text{conf}_i)| / N`."""
        return float(np.abs(self.gaps()).sum() / max(self.n, 1.0))

    def mce(self) -> float:
        """:math:`\\max_m |\\mathrm{acc}(B_m) - \\mathrm{conf}(B_m)|` over the non-empty bins."""
        full = self.counts > 0
        return float(np.max(np.abs(self.gaps()[full]) / self.counts[full]))


def calibration_bins(
    confidence: np.ndarray,
    correct: np.ndarray,
    n_bins: int = 15,
    binning: Binning = "width",
) -> BinStats:
    """Bin confidences and sum confidence and correctness per bin (``np.bincount``, no loops).

    Parameters
    ----------
    confidence : (N,) values in [0, 1].
    correct : (N,) correctness indicators (or soft labels) in [0, 1].
    n_bins : number of bins, >= 1.
    binning : "width" (equal-width, right-closed) or "mass" (equal-mass, see
        :func:`mass_bin_edges`).
    """
    n_bins = check_int(n_bins, "n_bins", "calibration_bins", low=1)
    check_option(binning, "binning", "calibration_bins", ("width", "mass"))
    conf = np.asarray(confidence, dtype=np.float64)
    corr = np.asarray(correct, dtype=np.float64)
    if binning == "width":
        edges = width_bin_edges(n_bins)
        idx = bin_indices(conf, n_bins)
    else:
        edges = mass_bin_edges(conf, n_bins)
        idx = bin_indices(conf, n_bins, edges)
    return BinStats(
        edges=edges,
        counts=np.bincount(idx, minlength=n_bins).astype(np.float64),
        sum_confidence=np.bincount(idx, weights=conf, minlength=n_bins),
        sum_correct=np.bincount(idx, weights=corr, minlength=n_bins),
    )


def class_histograms(
    probs: np.ndarray, labels: np.ndarray, n_bins: int
) -> tuple[np.ndarray, np.ndarray]:
    """Classwise positive and negative histograms of seed 003 App. B.3.

    For class ``j`` and equal-width bin ``m``:
    :math:`P_j(m) = \\#\\{i: y_i = j, \\hat p_{ij} \\in B_m\\}` and
    :math:`N_j(m) = \\#\\{i: y_i \\ne j, \\hat p_{ij} \\in B_m\\}`.
    Returns two ``C x M`` float arrays. Adding or removing one example changes exactly one cell of
    each of the C rows: L1 sensitivity ``C`` over both histograms together (each example adds 1 to
    one positive cell and 1 to ``C - 1`` negative cells).
    """
    n, c = probs.shape
    idx = bin_indices(probs, n_bins)  # N x C
    flat = idx + n_bins * np.arange(c)[None, :]
    pos_mask = np.zeros((n, c), dtype=bool)
    pos_mask[np.arange(n), labels] = True
    total = np.bincount(flat.ravel(), minlength=c * n_bins).reshape(c, n_bins)
    pos = np.bincount(flat[pos_mask], minlength=c * n_bins).reshape(c, n_bins)
    return pos.astype(np.float64), (total - pos).astype(np.float64)


def _scan_top(block: np.ndarray, conf: np.ndarray, pred: np.ndarray) -> None:
    """Row max and first argmax of ``block`` by a scan over its columns (in place)."""
    conf[:] = block[:, 0]
    pred[:] = 0
    for j in range(1, block.shape[1]):
        col = block[:, j]
        np.copyto(pred, j, where=col > conf)  # strict: ties keep the lowest index, as argmax
        np.maximum(conf, col, out=conf)


def top_label(probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Top-label confidence ``max_c p_ic`` and prediction ``argmax_c p_ic`` (lowest index on ties).

    Same values as ``probs.max(1)`` and ``probs.argmax(1)``, computed by a blocked scan over
    columns: NumPy's reductions along a short last axis pay a call per row, which dominates for
    ten classes.
    """
    n = probs.shape[0]
    conf = np.empty(n)
    pred = np.empty(n, dtype=np.int64)

    def block(lo: int, hi: int) -> None:
        _scan_top(probs[lo:hi], conf[lo:hi], pred[lo:hi])

    map_blocks(n, block)
    return conf, pred


def top_label_bins_checked(
    probs: np.ndarray, labels: np.ndarray, n_bins: int
) -> tuple[BinStats, np.ndarray]:
    """:func:`top_label_bins` by the compiled kernel, with what validation needs from the same
    read: ``[min, max, max |row sum - 1|, rows with a non-finite sum, min label, max label]``
    (:func:`privcal.metrics._kernels.top_label_sums`). float32 probabilities are read as they
    are; confidences, bins and sums are float64 as on the NumPy path."""
    from privcal.metrics._kernels import top_label_sums

    p = np.ascontiguousarray(probs)
    if p.dtype not in (np.float32, np.float64):
        p = p.astype(np.float64)
    y = np.ascontiguousarray(labels, dtype=np.int64)
    sums, summary = top_label_sums(p, y, n_bins, 4 * n_threads())
    return BinStats(width_bin_edges(n_bins), sums[0], sums[1], sums[2]), summary


def top_label_bins(probs: np.ndarray, labels: np.ndarray, n_bins: int) -> BinStats:
    """:func:`calibration_bins` of the top-label confidence and correctness, equal-width bins.

    Equal to ``calibration_bins(probs.max(1), probs.argmax(1) == labels, n_bins)`` (up to the
    order of floating-point additions), computed block by block so that nothing of size N but
    the input is ever allocated. From :data:`COMPILED_MIN_ROWS` rows on, the same statistic comes
    from the compiled one-pass kernel of :mod:`privcal.metrics._kernels`; below it, NumPy (no
    compilation or numba import to wait for).
    """
    n = probs.shape[0]
    if n >= COMPILED_MIN_ROWS:
        return top_label_bins_checked(probs, labels, n_bins)[0]

    def block(lo: int, hi: int) -> np.ndarray:
        conf = np.empty(hi - lo)
        pred = np.empty(hi - lo, dtype=np.int64)
        _scan_top(probs[lo:hi], conf, pred)
        idx = bin_indices(conf, n_bins)
        correct = (pred == labels[lo:hi]).astype(np.float64)
        return np.stack(
            [
                np.bincount(idx, minlength=n_bins).astype(np.float64),
                np.bincount(idx, weights=conf, minlength=n_bins),
                np.bincount(idx, weights=correct, minlength=n_bins),
            ]
        )

    sums = np.sum(np.stack(map_blocks(n, block)), axis=0)
    return BinStats(width_bin_edges(n_bins), sums[0], sums[1], sums[2])

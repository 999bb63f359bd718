"""Vectorised simulation of split conformal prediction over many random calibration/test splits.

The statistical tests and ``privcal bench angelopoulos2022`` evaluate coverage and set size over
``R`` (default 1000) random splits of a pool of ``N`` labelled examples into ``n`` calibration
and ``N - n`` test points, for many (score, alpha, epsilon, m) settings. Fitting an estimator per
split would cost ``R`` passes over the data per setting; instead :class:`SplitSimulator` works on
the pool **once**:

1. Scores ``s`` of the true labels are sorted once; each split is a boolean row of a ``R x N``
   membership matrix in that order, and ``cum[r, p]`` (a cumulative sum along the row) is the
   number of calibration points among the ``p + 1`` smallest pool scores.
2. Non-private threshold (:meth:`SplitSimulator.split`): the ``k``-th smallest calibration score
   is the pool score at the first position where ``cum >= k`` (``k`` from
   :func:`~privcal.conformal.conformal_rank`).
3. Private threshold (:meth:`SplitSimulator.private`): the exponential mechanism of
   :func:`~privcal.conformal.private_quantile` needs the cumulative calibration counts at the
   ``m`` edges. All bins that are empty in the *pool* are empty in every split, and a run of
   them shares one utility ``w``, so the mechanism is a mixture over at most ``2L + 1`` groups
   (``L <= min(N, m)`` occupied pool bins): each occupied bin, each run of empty bins before it
   (weight multiplied by the run length), and the trailing run. The group is drawn by
   Gumbel-max with the generator of a :class:`~privcal.privacy.SeededNoise` (the same law as
   ``SeededNoise.exponential_index``), then a bin uniformly inside a run. This is the exact law
   of :func:`private_quantile` for every ``m`` (``m = 10^6`` costs ``O(R N)``, not ``O(R m)``).
4. Coverage of the test part at threshold ``t``: ``(#pool <= t - #cal <= t) / (N - n)``, both
   counts already known. Set size: each pool row's label scores are replaced by their ranks
   among all pool label scores (exact integer comparisons), rows are offset and flattened, and
   one ``searchsorted`` per split counts ``#{y : S(x, y) <= t}`` for its test rows.

Everything is exact (no truncation); the tests check it against the estimators on a few splits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from privcal._params import (
    EPSILON,
    check_int,
    check_option,
    check_probability,
    renamed,
    renamed_attribute,
)
from privcal.conformal.localize import Localization
from privcal.conformal.private import (
    METHODS,
    Plan,
    conformal_plan,
    localized_threshold,
    plan_localization,
)
from privcal.conformal.quantile import _bin_runs
from privcal.conformal.split import conformal_rank
from privcal.metrics.statistics import bin_indices
from privcal.privacy.noise import SeededNoise

__all__ = ["SimulationResult", "SplitSimulator", "compare_methods"]


@dataclass(frozen=True)
class SimulationResult:
    """Per-split outcomes of one setting.

    Attributes
    ----------
    coverage : ndarray (R,)
        Fraction of the split's test points whose true label is in its set.
    size : ndarray (R,) or None
        Mean set size on the split's test points (``None`` without label scores).
    threshold : ndarray (R,)
        The fitted threshold per split (``inf`` for full sets).
    level : float
        The quantile level used: ``k / n`` (non-private) or ``q~`` (private).
    n_bins : int
        ``m`` (0 for non-private); ``bins`` is its deprecated name.
    gamma : float
        ``gamma`` (nan for non-private).
    """

    coverage: np.ndarray
    size: np.ndarray | None
    threshold: np.ndarray
    level: float
    n_bins: int = 0
    gamma: float = math.nan
    bins = renamed_attribute("n_bins")  # deprecated name, one release

    @property
    def mean_coverage(self) -> float:
        return float(self.coverage.mean())

    @property
    def se_coverage(self) -> float:
        """Standard error of the mean coverage over splits."""
        return float(self.coverage.std(ddof=1) / math.sqrt(self.coverage.size))

    @property
    def mean_size(self) -> float:
        return math.nan if self.size is None else float(self.size.mean())


class SplitSimulator:
    """Coverage and set size of split and private conformal sets over ``R`` random splits.

    Parameters
    ----------
    label_scores : array_like of shape (N, C)
        Conformity scores of every label of the pool (e.g. ``lac_scores(softmax(z))``), in
        ``[0, 1]``.
    labels : array_like of shape (N,)
        True labels.
    n : int
        Calibration points per split (``1 <= n < N``).
    splits : int, default=1000
        ``R``.
    seed : int, default=0
        Seeds the splits (``numpy.random.default_rng(seed).permuted``).
    sizes : bool, default=True
        Also compute mean set sizes.

    Attributes
    ----------
    permutations : ndarray (R, N)
        Row ``r`` is a permutation of the pool; its first ``n`` entries are the calibration
        points of split ``r`` (share it with a peer, e.g. MAPIE, to compare on the same splits).
    """

    def __init__(
        self,
        label_scores: Any,
        labels: Any,
        n: int,
        splits: int = 1000,
        seed: int = 0,
        sizes: bool = True,
    ) -> None:
        owner = "SplitSimulator"
        S = np.asarray(label_scores, dtype=np.float64)
        y = np.asarray(labels, dtype=np.int64)
        if S.ndim != 2 or y.shape != (S.shape[0],):
            raise ValueError(f"{owner} needs an N x C score matrix and N labels.")
        N, C = S.shape
        self.N, self.C = N, C
        self.n = check_int(n, "n", owner, low=1)
        if self.n >= N:
            raise ValueError(f"The 'n' parameter of {owner} must be < N = {N}. Got {n} instead.")
        self.R = check_int(splits, "splits", owner, low=1)
        rng = np.random.default_rng(check_int(seed, "seed", owner, low=0))
        perm = rng.permuted(np.tile(np.arange(N, dtype=np.int32), (self.R, 1)), axis=1)
        self.permutations = perm
        s = S[np.arange(N), y]
        self._true = s
        order = np.argsort(s, kind="stable")
        self.sorted_scores = s[order]
        inv = np.empty(N, dtype=np.int64)
        inv[order] = np.arange(N)
        member = np.zeros((self.R, N), dtype=bool)
        member[np.arange(self.R)[:, None], inv[perm[:, : self.n]]] = True
        self.cum = np.cumsum(member, axis=1, dtype=np.int32)
        self._rows = np.arange(self.R)
        self._sizes = sizes
        if sizes:
            values = np.unique(S)
            ranks = np.searchsorted(values, S).astype(np.int64)
            ranks.sort(axis=1)
            self._values = values
            self._stride = values.size + 1
            self._flat = (ranks + np.arange(N, dtype=np.int64)[:, None] * self._stride).ravel()
            self._test = np.sort(perm[:, self.n :], axis=1).astype(np.int64)

    # ---------------------------------------------------------------------------------------
    def _cal_at(self, positions: np.ndarray) -> np.ndarray:
        """``#cal`` among the first ``positions`` sorted pool scores (R-vector or R x G)."""
        p = np.asarray(positions)
        if p.ndim == 1:
            got = self.cum[self._rows, np.maximum(p - 1, 0)]
        else:
            got = np.take_along_axis(self.cum, np.maximum(p - 1, 0), axis=1)
        return np.where(p > 0, got, 0)

    def _set_sizes(self, thresholds: np.ndarray) -> np.ndarray | None:
        if not self._sizes:
            return None
        out = np.empty(self.R)
        for r in range(self.R):
            t = thresholds[r]
            if not np.isfinite(t):
                out[r] = self.C
                continue
            rank_t = np.searchsorted(self._values, t, side="right") - 1  # largest value <= t
            idx = self._test[r]
            pos = np.searchsorted(self._flat, rank_t + idx * self._stride, side="right")
            out[r] = (pos - idx * self.C).mean()
        return out

    def _result(
        self,
        thr: np.ndarray,
        pool_le: np.ndarray,
        cal_le: np.ndarray,
        level: float,
        n_bins: int = 0,
        gamma: float = math.nan,
    ) -> SimulationResult:
        cov = (pool_le - cal_le) / (self.N - self.n)
        return SimulationResult(cov, self._set_sizes(thr), thr, level, n_bins, gamma)

    def _full(self, level: float, n_bins: int = 0, gamma: float = math.nan) -> SimulationResult:
        thr = np.full(self.R, np.inf)
        return self._result(
            thr, np.full(self.R, self.N), np.full(self.R, self.n), level, n_bins, gamma
        )

    # ---------------------------------------------------------------------------------------
    def split(self, alpha: float) -> SimulationResult:
        """Non-private split conformal (threshold = ``k``-th smallest calibration score)."""
        k = conformal_rank(self.n, alpha)
        if k > self.n:
            return self._full(k / self.n)
        first = (self.cum < k).sum(axis=1)  # first sorted position with cum >= k
        thr = self.sorted_scores[first]
        pool_le = np.searchsorted(self.sorted_scores, thr, side="right")
        return self._result(thr, pool_le, self._cal_at(pool_le), k / self.n)

    @renamed(old="bins", new="n_bins", owner="SplitSimulator.private")
    def private(
        self,
        alpha: float,
        epsilon: float,
        n_bins: Any = "auto",
        gamma: Any = "auto",
        noise: SeededNoise | None = None,
        method: str = "rank",
        slope: Any = "auto",
        localize: Any = "auto",
    ) -> SimulationResult:
        """Private conformal (:class:`PrivateConformal`'s law with this ``method``) on every split.

        ``noise`` must be a :class:`SeededNoise` (its generator draws the Gumbel variables);
        ``None`` means ``SeededNoise(0)``. The edges, ``gamma`` and level come from
        :func:`~privcal.conformal.private.conformal_plan`, as in the estimator; with
        ``localize`` (Theorem L, the default for ``"rank"`` from ``n = 4000``) each split runs
        :func:`~privcal.conformal.private.localized_threshold`, the estimator's own function, on
        its calibration scores (a loop over splits).
        """
        owner = "SplitSimulator.private"
        a = check_probability(alpha, "alpha", owner)
        eps = EPSILON.check(epsilon, "epsilon", owner)
        check_option(method, "method", owner, METHODS)
        if noise is None:
            noise = SeededNoise(0)
        if not isinstance(noise, SeededNoise):
            raise ValueError(f"The 'noise' parameter of {owner} must be a SeededNoise.")
        n, N = self.n, self.N
        plan = conformal_plan(n, a, eps, method, n_bins, gamma, slope)
        loc = plan_localization(n, a, eps, plan, method, localize, owner)
        if loc is not None:
            return self._localized(a, eps, plan, loc, slope, noise)
        edges, m, g, q = plan.edges, plan.n_bins, plan.gamma, plan.level
        if not plan.valid:
            return self._full(q, m, g)
        b = bin_indices(self.sorted_scores, m, edges)  # nondecreasing
        start, occ, prev, gap, last = _bin_runs(b, m)
        end = np.concatenate((start[1:], [N]))  # pool positions of bin l: start..end-1
        before = self._cal_at(start[None, :].repeat(self.R, 0))  # R x L
        upto = self._cal_at(end[None, :].repeat(self.R, 0))
        # each group's (#cal below its edge(s), #cal at or below): occupied bins, runs, tail
        lo = np.concatenate((before, before, np.full((self.R, 1), n)), axis=1)
        hi = np.concatenate((upto, before, np.full((self.R, 1), n)), axis=1)
        with np.errstate(divide="ignore"):
            log_count = np.log(np.concatenate((np.ones(occ.size), gap, [last])))
        lw = log_count - eps / plan.scale * plan.mechanism.penalties(plan, lo, hi, n)
        pick = np.argmax(lw + noise.rng.gumbel(size=lw.shape), axis=1)
        u = noise.rng.random(self.R)
        L = occ.size
        kind = np.where(pick < L, 0, np.where(pick < 2 * L, 1, 2))
        li = np.where(kind == 0, pick, pick - L)
        li = np.minimum(li, L - 1)
        rows = self._rows
        # the chosen bin (0-based) and the counts <= its right edge
        bin_occ = occ[li]
        bin_gap = prev[li] + 1 + np.floor(u * gap[li]).astype(np.int64)
        bin_last = occ[-1] + 1 + np.floor(u * last).astype(np.int64)
        chosen = np.select([kind == 0, kind == 1], [bin_occ, bin_gap], bin_last)
        thr = edges[chosen + 1]
        pool_le = np.select([kind == 0, kind == 1], [end[li], start[li]], N)
        cal_le = np.select([kind == 0, kind == 1], [upto[rows, li], before[rows, li]], n)
        return self._result(thr, pool_le, cal_le, q, m, g)

    def _localized(
        self, a: float, eps: float, plan: Plan, loc: Localization, slope: Any, noise: SeededNoise
    ) -> SimulationResult:
        """Theorem L on every split: :func:`~privcal.conformal.private.localized_threshold`."""
        thr = np.empty(self.R)
        level, n_bins = np.empty(self.R), np.empty(self.R)
        for r in range(self.R):
            s = self._true[self.permutations[r, : self.n]]
            thr[r], plan2, _, _ = localized_threshold(s, loc, a, eps, plan, slope, noise)
            level[r], n_bins[r] = plan2.level, plan2.n_bins
        pool_le = np.searchsorted(self.sorted_scores, thr, side="right")
        return self._result(
            thr, pool_le, self._cal_at(pool_le), float(level.mean()), int(np.median(n_bins))
        )


def compare_methods(
    label_scores: Any,
    labels: Any,
    n: int = 5000,
    splits: int = 100,
    alpha: float = 0.1,
    epsilon: float = 1.0,
    methods: tuple[str, ...] = METHODS,
    seed: int = 0,
) -> dict[str, SimulationResult]:
    """Split conformal and every private ``method`` on the same ``splits`` random splits.

    The function behind the informative-sets check (``tests/conformal/
    test_conformal_coverage.py``) and its table (``python -m bench.bench_conformal``): one
    :class:`SplitSimulator` (``seed``), ``"split"`` from :meth:`SplitSimulator.split`, each
    method from :meth:`SplitSimulator.private` with its defaults and ``SeededNoise(seed + 1 +
    i)`` for the ``i``-th method.

    Returns
    -------
    dict
        ``"split"`` and each method name mapped to its :class:`SimulationResult`.
    """
    sim = SplitSimulator(label_scores, labels, n=n, splits=splits, seed=seed)
    out = {"split": sim.split(alpha)}
    for i, method in enumerate(methods):
        noise = SeededNoise(seed + 1 + i)
        out[method] = sim.private(alpha, epsilon, noise=noise, method=method)
    return out

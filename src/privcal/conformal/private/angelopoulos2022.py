"""Seed 002 (``method="angelopoulos2022"``): Algorithms 3-5 of Angelopoulos et al. (2022).

*Mechanism.* ``m`` equal-width bins (``m*`` of :func:`optimal_bins`, Algorithm 5, for
``n_bins="auto"``); the DP quantile of the calibration scores
(:func:`~privcal.conformal.private_quantile`, ``weights="sensitivity"``: weights
``exp(-epsilon w_j / (2 max(1/q~, 1/(1-q~))))``) at the *adjusted level*

.. math::

    \\tilde q = \\frac{(n+1)(1-\\alpha)}{n(1-\\gamma\\alpha)}
              + \\frac{2}{\\epsilon n}\\log\\frac{m}{\\gamma\\alpha}          \\qquad (3)

with ``gamma*`` of :func:`optimal_gamma` (Eq. 9-10).

*Privacy (substitute one calibration example, n public).* Every utility ``w_j`` moves by at
most ``max(1/q, 1/(1-q))`` (derived in :mod:`privcal.conformal.quantile`), so the weights are
pure epsilon-DP; ``q~``, ``m*`` and ``gamma*`` are functions of ``n`` (``n = 301`` gives ``m* =
121``, ``n = 302`` gives ``m* = 100``), so only substitute is claimed.

*Coverage.* By Lemma 1 the release has empirical level at least
:math:`\\tilde q - 2\\log(m/(\\gamma\\alpha))/(\\epsilon n)` except with probability
:math:`\\gamma\\alpha`, and coverage is :math:`\\ge 1 - \\alpha` (Theorem 2) and at most Theorem
3's bound (:func:`~privcal.conformal.coverage_upper_bound`). ``q~ >= 1`` means full sets.

Proof and the tuning (Eq. 9-10, Algorithm 5): docs/conformal.md#proof-of-seed-002.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from privcal._params import EPSILON, check_int, check_option, check_probability, renamed
from privcal.conformal.private.level import LevelMechanism
from privcal.conformal.private.mechanism import Plan, Tuning, bin_count, register_mechanism
from privcal.conformal.quantile import _bin_runs, quantile_sensitivity

__all__ = [
    "ANGELOPOULOS2022",
    "AUTHORS_CODE_BINS",
    "CANDIDATE_BINS",
    "M_GRIDS",
    "Angelopoulos2022Mechanism",
    "adjusted_level",
    "optimal_bins",
    "optimal_gamma",
]

#: The candidate numbers of bins of :func:`optimal_bins` (App. C): 50 log-spaced values 1e2..1e6.
CANDIDATE_BINS: tuple[int, ...] = tuple(
    int(v) for v in np.unique(np.round(np.logspace(2, 6, 50)).astype(np.int64))
)
#: The candidates of the authors' code (``get_optimal_gamma_m`` in
#: ``core/private_conformal_utils.py`` of github.com/aangelopoulos/private_prediction_sets, from
#: the 2021-09-22 "code finalized" commit on): ``np.logspace(4, 6, 50).astype(int)``.
AUTHORS_CODE_BINS: tuple[int, ...] = tuple(
    int(v) for v in np.unique(np.logspace(4, 6, 50).astype(np.int64))
)
#: Named rules of :func:`optimal_bins` (``m_grid=``): the paper's text (App. C: 1e2..1e6, smallest
#: expected threshold) or the authors' code (1e4..1e6, smallest threshold of one noisy draw).
M_GRIDS: tuple[str, ...] = ("paper-text", "authors-code")

_GAMMA_FLOOR = 1e-12


@renamed(old="bins", new="n_bins", owner="adjusted_level")
def adjusted_level(n: int, alpha: float, epsilon: float, n_bins: Any, gamma: float) -> float:
    """The adjusted level ``q~`` of Eq. 3 (may be ``>= 1``: then no private threshold exists).

    Parameters
    ----------
    n : int
        Number of calibration points, ``>= 1``.
    alpha : float
        Miscoverage in ``(0, 1)``.
    epsilon : float
        In ``(0, inf)``.
    n_bins : int or array_like
        ``m >= 2`` or the bin edges (only their number ``m`` matters).
    gamma : float
        In ``(0, 1)``: the failure probability ``gamma * alpha`` given to the mechanism.

    Examples
    --------
    >>> round(adjusted_level(5000, 0.1, 1.0, 1000, 0.01), 4)
    0.9066
    """
    owner = "adjusted_level"
    n = check_int(n, "n", owner, low=1)
    a = check_probability(alpha, "alpha", owner)
    eps = EPSILON.check(epsilon, "epsilon", owner)
    g = check_probability(gamma, "gamma", owner)
    return _level(n, a, eps, bin_count(n_bins, owner), g)


def _level(n: int, a: float, eps: float, m: int, g: float) -> float:
    return (n + 1) * (1 - a) / (n * (1 - g * a)) + 2.0 / (eps * n) * math.log(m / (g * a))


def _gamma(n: int, a: float, eps: float, m: int) -> float:
    b = a * (1 - a) * eps * (n + 1) / 2.0 + 2.0 * a
    disc = b * b - 4.0 * a * a
    cands = [_GAMMA_FLOOR]
    if disc >= 0:
        root = math.sqrt(disc)
        # the smaller root, written to avoid cancellation; the larger is > 1 (product 1/a^2)
        small = 2.0 / (b + root)
        cands += [g for g in (small, (b + root) / (2.0 * a * a)) if 0.0 < g < 1.0]
    return min(cands, key=lambda g: (_level(n, a, eps, m, g), g))


@renamed(old="bins", new="n_bins", owner="optimal_gamma")
def optimal_gamma(n: int, alpha: float, epsilon: float, n_bins: Any) -> float:
    """``gamma*`` of Eq. 9-10: the minimiser of ``q~`` among the roots in (0, 1) and 1e-12.

    Examples
    --------
    >>> round(optimal_gamma(5000, 0.1, 1.0, 1000), 5)
    0.00444
    """
    owner = "optimal_gamma"
    n = check_int(n, "n", owner, low=1)
    a = check_probability(alpha, "alpha", owner)
    eps = EPSILON.check(epsilon, "epsilon", owner)
    return _gamma(n, a, eps, bin_count(n_bins, owner))


def _bin_groups(
    u_sorted: np.ndarray, q: float, eps: float, m: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """The mechanism's law for sorted scores and ``m`` equal-width bins, grouped.

    All empty bins between two occupied bins share the same ``w`` (both counts are constant
    there), so the law is a mixture over at most ``2n + 1`` groups: each occupied bin (one
    candidate), each run of empty bins before it, and the trailing run. Returns each group's
    log-weight (shifted so its maximum is 0), its number of bins, and the occupied bins, the
    occupied bin before each, and the length of the trailing run.
    """
    n = u_sorted.size
    b = np.minimum(np.maximum(np.ceil(u_sorted * m).astype(np.int64) - 1, 0), m - 1)
    before, occ, prev, gap, last = _bin_runs(b, m)  # before: scores in bins < occ_l
    upto = np.concatenate((before[1:], [n]))  # scores in bins <= occ_l
    # w per group: occupied bins, runs of empty bins before them, the trailing run
    w = np.concatenate(
        (
            np.maximum(before / q, (n - upto) / (1.0 - q)),
            np.maximum(before / q, (n - before) / (1.0 - q)),
            [n / q],
        )
    )
    count = np.concatenate((np.ones(occ.size), gap, [last])).astype(np.float64)
    lw = w * (-eps / (2.0 * quantile_sensitivity(q)))
    lw -= lw.max()
    return lw, count, occ, prev, last


def _expected_threshold(u_sorted: np.ndarray, q: float, eps: float, m: int) -> float:
    """``E[e_J]`` under the mechanism's law for sorted scores and ``m`` equal-width bins.

    Exact and ``O(n)`` whatever ``m`` (:func:`_bin_groups`): each group contributes its
    weight times the arithmetic-series sum of its edges ``j / m``.
    """
    lw, count, occ, prev, last = _bin_groups(u_sorted, q, eps, m)
    gap = count[occ.size : 2 * occ.size]
    # sum of the edges (b + 1) / m over the bins b of each group
    edge_sum = np.concatenate(
        (
            (occ + 1) / m,
            (prev + 2 + occ) * gap / (2.0 * m),
            [(occ[-1] + 2 + m) * last / (2.0 * m)],
        )
    )
    p = np.exp(lw)
    # not a BLAS dot: ddot is ~1000x slower when exp(lw) underflows to subnormals
    return float(np.sum(p * edge_sum) / np.sum(p * count))


def _sampled_threshold(
    u_sorted: np.ndarray, q: float, eps: float, m: int, rng: np.random.Generator
) -> float:
    """One draw ``e_J`` of the mechanism for sorted scores and ``m`` equal-width bins.

    The groups of :func:`_bin_groups`: a group is drawn with probability ``count * weight``,
    then a bin uniformly within it (the bins of a group share one weight).
    """
    lw, count, occ, prev, _ = _bin_groups(u_sorted, q, eps, m)
    first = np.concatenate((occ, prev + 1, [occ[-1] + 1]))  # first bin of each group
    p = np.exp(lw) * count
    g = int(rng.choice(p.size, p=p / p.sum()))
    j = int(first[g] + rng.integers(int(count[g])))
    return (j + 1) / m


def optimal_bins(
    n: int,
    alpha: float,
    epsilon: float,
    candidates: Any = None,
    seed: int = 0,
    m_grid: str = "paper-text",
) -> int:
    """``m*`` of Algorithm 5: the number of bins with the smallest private threshold on U(0, 1).

    Parameters
    ----------
    n : int
        Number of calibration points, ``>= 1``.
    alpha : float
        In ``(0, 1)``.
    epsilon : float
        In ``(0, inf)``.
    candidates : iterable of int or None, default=None
        ``None`` means the grid of ``m_grid``.
    seed : int, default=0
        Seeds the simulated U(0, 1) scores (``numpy.random.default_rng(seed)``) and, for
        ``"authors-code"``, the draws.
    m_grid : {"paper-text", "authors-code"}, default="paper-text"
        Which reading of Algorithm 5 (both use only public quantities):

        * ``"paper-text"``: App. C's grid, :data:`CANDIDATE_BINS` (50 values log-spaced from
          ``10^2`` to ``10^6``); each candidate scored by its **expected** threshold, computed
          exactly (deterministic given ``seed``).
        * ``"authors-code"``: the grid of the authors' public code, :data:`AUTHORS_CODE_BINS`
          (``np.logspace(4, 6, 50).astype(int)``, ``10^4`` to ``10^6``); each candidate scored
          by **one draw** of the mechanism on the simulated scores, as their
          ``get_optimal_gamma_m`` does. The paper's figures were made by that code
          (``docs/angelopoulos2022.md``). Differences kept from the authors' code: privcal's
          ``gamma*`` (Eq. 10) and mechanism (the one :class:`PrivateConformal` deploys) are
          used, ``m`` counts bins (their ``np.linspace(0, 1, m)`` has ``m - 1``), and the
          draws are seeded.

    Returns
    -------
    int
        The chosen ``m``; when every candidate has ``q~ >= 1`` the one with the smallest ``q~``.

    Notes
    -----
    Algorithm 5 as read here: docs/conformal.md#proof-of-seed-002. Cost
    ``O(len(candidates) n)``, a few ms for the default grid; results are cached by argument.

    Examples
    --------
    >>> optimal_bins(5000, 0.1, 1.0)
    256
    >>> optimal_bins(5000, 0.1, 1.0, m_grid="authors-code") in AUTHORS_CODE_BINS
    True
    """
    owner = "optimal_bins"
    n = check_int(n, "n", owner, low=1)
    a = check_probability(alpha, "alpha", owner)
    eps = EPSILON.check(epsilon, "epsilon", owner)
    seed = check_int(seed, "seed", owner, low=0)
    m_grid = check_option(m_grid, "m_grid", owner, M_GRIDS)
    default = CANDIDATE_BINS if m_grid == "paper-text" else AUTHORS_CODE_BINS
    grid = default if candidates is None else tuple(candidates)
    if not grid:
        raise ValueError(f"The 'candidates' parameter of {owner} must not be empty.")
    grid = tuple(check_int(m, "candidates", owner, low=2) for m in grid)
    return _optimal_bins(n, a, eps, grid, seed, m_grid == "authors-code")


@functools.lru_cache(maxsize=256)
def _optimal_bins(
    n: int, a: float, eps: float, grid: tuple[int, ...], seed: int, one_draw: bool = False
) -> int:
    """Algorithm 5 on validated arguments; cached (a pure function of public quantities)."""
    rng = np.random.default_rng(seed)
    u = np.sort(rng.random(n))
    levels = [(_level(n, a, eps, m, _gamma(n, a, eps, m)), m) for m in grid]
    threshold: Callable[..., float] = (
        functools.partial(_sampled_threshold, rng=rng) if one_draw else _expected_threshold
    )
    valid = [(threshold(u, q, eps, m), m) for q, m in levels if q < 1.0]
    return min(valid or levels)[1]


def _feasible(n: int, a: float, eps: float, grid: tuple[int, ...]) -> bool:
    return any(_level(n, a, eps, m, _gamma(n, a, eps, m)) < 1.0 for m in grid)


class Angelopoulos2022Mechanism(LevelMechanism):
    """Seed 002's Algorithms 3-5: equal-width bins, Eq. 3, Eq. 9-10, Algorithm 5."""

    name = "angelopoulos2022"
    grid = "uniform"
    weights = "sensitivity"
    level_source = "Eq. 3 from n, alpha, epsilon, m, gamma"

    def auto_bins(self, n: int, alpha: float, epsilon: float) -> int:
        """``m*`` of :func:`optimal_bins` (Algorithm 5, public)."""
        return optimal_bins(n, alpha, epsilon)

    def plan(self, n: int, alpha: float, epsilon: float, edges: np.ndarray, tuning: Tuning) -> Plan:
        """``gamma*`` of Eq. 9-10 (for ``None``) and ``q~`` of Eq. 3; valid when ``q~ < 1``."""
        m = edges.size - 1
        g = _gamma(n, alpha, epsilon, m) if tuning.gamma is None else tuning.gamma
        q = _level(n, alpha, epsilon, m, g)
        return Plan(self.name, edges, m, q, q < 1.0, gamma=g, weights=self.weights)

    def validity(
        self, alpha: float, epsilon: float, n_bins: Any, slope: Any
    ) -> Callable[[int], bool]:
        """``n -> q~(m) < 1`` for some ``m`` of :data:`CANDIDATE_BINS` (``"auto"``: then
        Algorithm 5 picks a valid one) or for the ``m`` of ``n_bins``; ``slope`` is ignored."""
        auto = isinstance(n_bins, str) and n_bins == "auto"
        grid = CANDIDATE_BINS if auto else (bin_count(n_bins, "min_calibration_size"),)
        return lambda n: _feasible(n, alpha, epsilon, grid)

    def grid_term(self, plan: Plan, n_bins: Any) -> str:
        auto = " (Algorithm 5 from n, alpha, epsilon)" if isinstance(n_bins, str) else ""
        return f"bins m = {plan.n_bins}{auto}"

    def coverage_bound(
        self, n: int, alpha: float, epsilon: float, m: int, p_max: float, tuning: Tuning
    ) -> float:
        """Theorem 3 of seed 002 (stated in :func:`~privcal.conformal.coverage_upper_bound`)."""
        gamma: Any = tuning.gamma  # coverage_upper_bound's gamma, as given
        q = adjusted_level(n, alpha, epsilon, m, gamma)
        ratio = max(q / (1 - q), 1.0) if q < 1 else math.inf
        return (
            1
            - (1 - gamma) * alpha
            + (1 - gamma * alpha)
            * (2 * p_max + 2 * (1 + ratio) * math.log(m / (gamma * alpha)) / ((n + 1) * epsilon))
        )


#: The registered ``method="angelopoulos2022"``.
ANGELOPOULOS2022 = register_mechanism(Angelopoulos2022Mechanism())

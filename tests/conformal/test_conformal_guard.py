"""The two steps of Theorem R's coverage proof (``conformal/private/rank.py``), checked exactly.

The proof leaves one of the ``n + 1`` exchangeable points out at a time. (1) For a point of rank
``rho <= k`` the chance ``pi_rho`` that the release on the other ``n`` misses it is at most
``h(A_rho)``, ``h(a) = a/(1 + a)``, where ``A_rho`` sums ``exp(-lam (k - C_j))`` over the inner
edges whose count ``C_j`` among all ``n + 1`` points is ``<= rho - 1``. (2) Over i.i.d. bags,
``E sum_{rho <= k} h(A_rho) <= G``, the guard of ``_rank_guard`` (Jensen and the binomial law
of each count).

(1) is checked on every rank of many bags with ties, atoms on the edges and piles of edges with
no mass between them, computing ``pi_rho`` from the mechanism's exact law (the estimator's own
``rank_penalties``). (2) is checked by Monte Carlo on a law that piles the edges at the deficits
the guard prices, within 4 standard errors. Coverage itself is checked on real networks by
``test_conformal_coverage.py``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from privcal.conformal.private.rank import _rank_guard
from privcal.conformal.quantile import rank_penalties

pytestmark = [pytest.mark.statistical, pytest.mark.slow]


def _miss_and_bound(
    bag: np.ndarray, edges: np.ndarray, k: int, eps: float, r: float
) -> tuple[np.ndarray, np.ndarray]:
    """``pi_rho`` (exact, from the mechanism's law) and ``h(A_rho)`` for ``rho = 1..k``.

    ``edges`` are the inner edges ``e_1 < ... < e_{m-1}``; the last edge ``e_m = 1`` holds every
    score. Scores lie in ``[0, 1]`` and may sit on an edge (``s <= e_j`` counts it).
    """
    lam = eps * r / (1 + r)
    s = np.sort(bag)
    full = np.concatenate((edges, [1.0]))
    counts = np.searchsorted(s, edges, side="right")  # C_j over all n + 1 points (inner edges)
    miss, bound = [], []
    for rho in range(1, k + 1):
        rest = np.delete(s, rho - 1)
        upto = np.searchsorted(rest, full, side="right")
        less = np.concatenate(([0], upto[:-1]))
        logw = -eps * rank_penalties(less, upto, k, r) / (1 + r)
        w = np.exp(logw - logw.max())
        below = full < s[rho - 1]  # the release misses the point
        miss.append(w[below].sum() / w.sum())
        a = np.exp(-lam * (k - counts[counts <= rho - 1])).sum()
        bound.append(a / (1 + a))
    return np.array(miss), np.array(bound)


def test_each_left_out_rank_is_missed_at_most_h_of_its_deficit_weight() -> None:
    rng = np.random.default_rng(0)
    n, eps, r = 40, 1.0, 3.0
    worst = -np.inf
    for trial in range(300):
        edges = np.sort(rng.random(rng.integers(3, 30)))
        if trial % 3 == 0:  # piles: many edges in a gap with no mass
            edges = np.sort(np.concatenate((edges, rng.uniform(0.6, 0.62, 40))))
        edges = np.unique(edges[edges < 1.0])
        if trial % 2 == 0:  # atoms on the edges and ties
            bag = rng.choice(np.concatenate((edges, rng.random(5))), n + 1)
        else:
            bag = rng.random(n + 1) ** rng.uniform(0.2, 3.0)
        k = int(rng.integers(n // 2, n + 1))
        miss, bound = _miss_and_bound(bag, edges, k, eps, r)
        worst = max(worst, float(np.max(miss - bound)))
    assert worst <= 1e-12


def test_guard_bounds_the_expected_deficit_term_on_a_piled_law() -> None:
    """The edges sit in piles at CDF values whose ``Bin(n+1, g)`` modes are the deficits
    ``d = 1..8`` below ``k`` (where ``G`` charges most); 4000 bags."""
    rng = np.random.default_rng(1)
    n, eps, r, k = 200, 1.0, 3.0, 185
    lam = eps * r / (1 + r)
    piles = [(k - d) / (n + 1) for d in range(1, 9)]
    m = 8 * 30 + 1
    counts_law = np.repeat(piles, 30)  # g_j of the 240 inner edges
    draws = 4000
    terms = np.empty(draws)
    for i in range(draws):
        u = np.sort(rng.random(n + 1))
        c = np.searchsorted(u, counts_law, side="right")
        total = 0.0
        for rho in range(1, k + 1):
            a = np.exp(-lam * (k - c[c <= rho - 1])).sum()
            total += a / (1 + a)
        terms[i] = total
    se = terms.std(ddof=1) / math.sqrt(draws)
    guard = _rank_guard(n, k, m, lam)
    assert terms.mean() <= guard + 4 * se, (terms.mean(), se, guard)
    assert terms.mean() >= 0.3 * guard  # the law is near the worst case, not a trivial one

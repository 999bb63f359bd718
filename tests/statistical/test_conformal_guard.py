"""The spacing identity behind Theorem R's guard ``G`` (``privcal.conformal.private``).

The identity: for one edge at ``g`` with ``N ~ Bin(n, g)`` uniform points below it and
``sp_t = U_(k-t+1) - U_(k-t)``, ``(n+1) E[sp_t 1{N = l}]`` is ``P(Bin(n+1, g) = l)`` for
``l < k - t`` and ``P(Bin(n+1, g) = l) + P(Bin(n+1, g) = l + 1)`` for ``l = k - t`` (the
straddling spacing). ``beta_t`` is built from it; a Monte Carlo estimate over 200 000 seeded
draws must match within 4 standard errors.

Coverage itself is checked on real networks by ``test_conformal_coverage.py``. No grid we tried
comes close to the bound (the guard ignores the weight of the edges above the target): with all
inner edges at one point the coverage is ``~k/(n+1)``, spread edges overshoot, so a coverage
test on constructed grids would not tell a correct guard from one a few ranks too small.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom

pytestmark = pytest.mark.slow


def test_spacing_identity_behind_beta() -> None:
    n, k, g, draws = 60, 50, 0.78, 200_000
    rng = np.random.default_rng(0)
    u = np.sort(rng.random((draws, n)), axis=1)
    u = np.concatenate((np.zeros((draws, 1)), u), axis=1)  # U_(0) = 0
    count = (u[:, 1:] <= g).sum(axis=1)
    for t in (1, 2, 4):
        sp = (n + 1) * (u[:, k - t + 1] - u[:, k - t])
        for ell in (k - t, k - t - 1, k - t - 3):
            x = sp * (count == ell)
            want = binom.pmf(ell, n + 1, g) + (ell == k - t) * binom.pmf(ell + 1, n + 1, g)
            se = x.std(ddof=1) / math.sqrt(draws)
            assert abs(x.mean() - want) <= 4 * se, (t, ell, x.mean(), want, se)

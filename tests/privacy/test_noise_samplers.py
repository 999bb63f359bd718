"""Distribution tests of the noise sources against scipy's CDFs.

SeededNoise tests are deterministic (fixed seeds). SecureNoise draws from OS randomness and cannot
be seeded, so its tests are random with a false-alarm probability of ``P_MIN = 1e-6`` each; the
power checks show that a 20 % error in the scale would be caught (KS distance about 0.04 against a
critical value of 0.019 at n = 20000).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from privcal.privacy import SecureNoise, SeededNoise

pytestmark = pytest.mark.statistical

P_MIN = 1e-6
N_SECURE = 20_000
N_SEEDED = 200_000


def test_seeded_laplace_and_gaussian_ks() -> None:
    noise = SeededNoise(11)
    lap = noise.laplace(2.0, size=N_SEEDED)
    assert stats.kstest(lap, stats.laplace(scale=2.0).cdf).pvalue > P_MIN
    assert stats.kstest(lap, stats.laplace(scale=2.4).cdf).pvalue < P_MIN  # power
    gau = noise.gaussian(3.0, size=N_SEEDED)
    assert stats.kstest(gau, stats.norm(scale=3.0).cdf).pvalue > P_MIN
    assert stats.kstest(gau, stats.norm(scale=3.6).cdf).pvalue < P_MIN


@pytest.mark.parametrize("scale", [0.5, 7.0])
def test_secure_laplace_ks(scale: float) -> None:
    noise = SecureNoise()
    draws = noise.laplace(scale, size=N_SECURE)
    assert draws.shape == (N_SECURE,)
    assert stats.kstest(draws, stats.laplace(scale=scale).cdf).pvalue > P_MIN
    assert stats.kstest(draws, stats.laplace(scale=1.2 * scale).cdf).pvalue < P_MIN
    # add_laplace feeds the value to OpenDP: centred on the value, same law.
    shifted = noise.add_laplace(np.full(N_SECURE // 4, 3.0), scale)
    assert stats.kstest(shifted, stats.laplace(loc=3.0, scale=scale).cdf).pvalue > P_MIN


def test_secure_gaussian_ks() -> None:
    noise = SecureNoise()
    draws = noise.gaussian(2.5, size=N_SECURE)
    assert stats.kstest(draws, stats.norm(scale=2.5).cdf).pvalue > P_MIN
    assert stats.kstest(draws, stats.norm(scale=3.0).cdf).pvalue < P_MIN
    shifted = noise.add_gaussian(np.full(N_SECURE // 4, -1.0), 2.5)
    assert stats.kstest(shifted, stats.norm(loc=-1.0, scale=2.5).cdf).pvalue > P_MIN


PROBS = np.array([0.1, 0.2, 0.3, 0.4])


def test_seeded_exponential_index_chisquare() -> None:
    # -inf entries have weight 0; a huge common shift must not matter (log-space).
    lw = np.concatenate([np.log(PROBS) + 1e6, [-np.inf]])
    idx = SeededNoise(12).exponential_index(lw, size=N_SEEDED)
    counts = np.bincount(idx, minlength=5)
    assert counts[4] == 0
    assert stats.chisquare(counts[:4], N_SEEDED * PROBS).pvalue > P_MIN
    assert stats.chisquare(counts[:4], N_SEEDED * np.full(4, 0.25)).pvalue < P_MIN


def test_secure_exponential_index_chisquare() -> None:
    # OpenDP's noisy max under zCDP adds Gumbel noise, so the law is softmax(log_weights).
    # (Under max_divergence it would add exponential noise, whose law on these weights is about
    # (0.076, 0.168, 0.301, 0.454): p ~ 1e-19 at n = 5000, so this test tells them apart.)
    n = 5000
    lw = np.concatenate([[-np.inf], np.log(PROBS) - 500.0])
    noise = SecureNoise()
    idx = noise.exponential_index(lw, size=n)
    counts = np.bincount(idx, minlength=5)
    assert counts[0] == 0
    assert stats.chisquare(counts[1:], n * PROBS).pvalue > P_MIN
    assert isinstance(noise.exponential_index(lw), int)


@pytest.mark.parametrize("noise", [SecureNoise(), SeededNoise(13)], ids=["secure", "seeded"])
def test_exponential_index_one_million_candidates(noise) -> None:
    # One candidate with log-weight 30 among 10^6 zeros: P(it) = 1 - 1e6 e^-30 ~ 1 - 1e-7.
    lw = np.zeros(1_000_000)
    lw[123_456] = 30.0
    assert noise.exponential_index(lw) == 123_456

"""Statistical audits of privcal's mechanisms (``privcal.privacy.audit``).

Each audit draws ``RUNS`` samples of the mechanism on two neighbouring datasets with SeededNoise
(vectorised: the mechanism is applied once to a vector of ``RUNS`` copies of the statistic, which
gives ``RUNS`` independent releases) and checks every pre-specified event in both directions with
Clopper-Pearson bounds at familywise error ``ALPHA``. A correct mechanism fails with probability
at most ``ALPHA``; the broken variants must fail, and the correct ones must show a lower bound
close to their claimed epsilon (so the audit has power and the noise is not overstated).
"""

from __future__ import annotations

import numpy as np
import pytest

from privcal.privacy import SeededNoise, gaussian, laplace
from privcal.privacy.audit import audit_dp, audit_pure_dp
from privcal.privacy.mechanisms import analytic_gaussian_sigma, exponential_log_weights

pytestmark = pytest.mark.statistical

RUNS = 200_000
ALPHA = 1e-6

# Neighbouring datasets for a sum query with sensitivity 1: D' = D plus one record of value 1.
RECORDS = np.array([1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0])
SUM_D = float(RECORDS.sum())
SUM_D_PRIME = float(np.append(RECORDS, 1.0).sum())


def _tails(thresholds: np.ndarray) -> list:
    events = [lambda x, t=t: x > t for t in thresholds]
    events += [lambda x, t=t: x < t for t in thresholds]
    return events


@pytest.mark.parametrize("epsilon", [0.5, 1.0])
def test_laplace_sum_query_passes_and_is_tight(epsilon: float) -> None:
    x, g = laplace(np.full(RUNS, SUM_D), 1.0, epsilon, SeededNoise(1))
    y, _ = laplace(np.full(RUNS, SUM_D_PRIME), 1.0, epsilon, SeededNoise(2))
    assert g.epsilon == epsilon and g.delta == 0.0
    edges = SUM_D + np.arange(-3.0, 4.5, 0.5) / epsilon
    res = audit_pure_dp(x, y, edges, epsilon, alpha=ALPHA)
    assert res.passed, str(res)
    # Tails beyond f(D') have likelihood ratio exactly e^eps: the bound must come close.
    tails = audit_pure_dp(x, y, _tails(SUM_D + np.array([-1.0, 0.0, 1.0, 2.0]) / epsilon), epsilon)
    assert tails.passed, str(tails)
    assert tails.epsilon_lower > 0.85 * epsilon, str(tails)


def test_broken_laplace_half_scale_fails() -> None:
    epsilon = 1.0
    noise_d, noise_dp = SeededNoise(3), SeededNoise(4)
    # Deliberately broken: scale sensitivity / (2 epsilon), i.e. really 2 epsilon-DP.
    x = SUM_D + noise_d.laplace(0.5 / epsilon, size=RUNS)
    y = SUM_D_PRIME + noise_dp.laplace(0.5 / epsilon, size=RUNS)
    edges = SUM_D + np.arange(-3.0, 4.5, 0.5)
    res = audit_pure_dp(x, y, edges, epsilon, alpha=ALPHA)
    assert not res.passed, str(res)
    assert res.epsilon_lower > 1.5 * epsilon


def test_gaussian_passes_approximate_dp_and_broken_fails() -> None:
    epsilon, delta = 1.0, 1e-5
    x, g = gaussian(np.full(RUNS, SUM_D), 1.0, epsilon, delta, SeededNoise(5))
    y, _ = gaussian(np.full(RUNS, SUM_D_PRIME), 1.0, epsilon, delta, SeededNoise(6))
    assert (g.epsilon, g.delta) == (epsilon, delta)
    sigma = analytic_gaussian_sigma(epsilon, delta, 1.0)
    assert abs(np.std(x) / sigma - 1) < 0.01  # 10 standard errors of the sd estimate at 2e5
    thresholds = SUM_D + sigma * np.arange(-3.0, 3.5, 0.5)
    res = audit_dp(x, y, _tails(thresholds), epsilon, delta, alpha=ALPHA)
    assert res.passed, str(res)
    assert res.epsilon_lower > 0.3 * epsilon, str(res)  # the audit sees a real privacy loss

    rng = SeededNoise(7)
    xb = SUM_D + rng.gaussian(sigma / 4, size=RUNS)
    yb = SUM_D_PRIME + rng.gaussian(sigma / 4, size=RUNS)
    broken = audit_dp(
        xb, yb, _tails(SUM_D + (sigma / 4) * np.arange(-3.0, 3.5, 0.5)), epsilon, delta, alpha=ALPHA
    )
    assert not broken.passed, str(broken)


def test_exponential_mechanism_general_and_monotonic() -> None:
    epsilon, sens = 1.0, 1.0
    # Worst case for the general mechanism: every utility moves by the sensitivity, in
    # opposite directions for the candidate of interest and the others.
    u_d = np.array([0.0, 1.0, 1.0, 1.0])
    u_dp = np.array([1.0, 0.0, 0.0, 0.0])
    edges = np.array([0.5, 1.5, 2.5])  # buckets {0}, {1}, {2}, {3}
    noise = SeededNoise(8)
    x = noise.exponential_index(exponential_log_weights(u_d, sens, epsilon), size=RUNS)
    y = noise.exponential_index(exponential_log_weights(u_dp, sens, epsilon), size=RUNS)
    res = audit_pure_dp(x, y, edges, epsilon, alpha=ALPHA)
    assert res.passed, str(res)
    e = np.exp(epsilon / 2)
    exact = np.log(e * (1 + 3 * e) / (e + 3))  # true loss of candidate 0 (= 0.746 at eps=1)
    assert exact - 0.1 < res.epsilon_lower <= exact + 1e-9, str(res)

    # Using the monotonic weights on non-monotonic utilities breaks the claim: must fail.
    xb = noise.exponential_index(exponential_log_weights(u_d, sens, epsilon, True), size=RUNS)
    yb = noise.exponential_index(exponential_log_weights(u_dp, sens, epsilon, True), size=RUNS)
    assert not audit_pure_dp(xb, yb, edges, epsilon, alpha=ALPHA).passed

    # Monotonic utilities (counts under add/remove): eps u / sens is epsilon-DP.
    m_d, m_dp = np.array([3.0, 2.0, 2.0]), np.array([4.0, 2.0, 2.0])
    xm = noise.exponential_index(exponential_log_weights(m_d, sens, epsilon, True), size=RUNS)
    ym = noise.exponential_index(exponential_log_weights(m_dp, sens, epsilon, True), size=RUNS)
    mono = audit_pure_dp(xm, ym, np.array([0.5, 1.5]), epsilon, alpha=ALPHA)
    assert mono.passed, str(mono)
    assert mono.epsilon_lower > 0.3, str(mono)

"""The law of the aggregator's view: the sum of the K parties' noise shares, at t = 1, K/2, K.

Derivation (:mod:`privcal.privacy.distributed`). A share is sized so that ``t`` of them make
one release's noise: discrete Laplace ``NB(1/t, 1 - a) - NB(1/t, 1 - a)`` (variance
``(1/t) 2a / (1 - a)^2``), discrete Gaussian ``N_Z(0, sigma^2 / t)``. The aggregator of a run
without collusion sees all ``K`` shares, whose sum has

    Var = (K / t) x one release's variance,   one release: 2a / (1 - a)^2  or  sigma^2

(a discrete Gaussian's variance equals ``sigma^2`` up to ``exp(-2 pi^2 sigma^2)``, nothing at
the thousands of grid steps these plans use), and for the discrete Laplace at ``t = K`` the sum
is exactly ``DLap(a)``, whose CDF is ``a^(-k) / (1 + a)`` for ``k < 0`` and
``1 - a^(k + 1) / (1 + a)`` for ``k >= 0``.

The plans are the entry points' own: the data-source path's (Acc-T's curve query and NLL-T's
increments, ``DataSource.share``, which builds them with ``DistributedPlan.laplace``) and the
federated path's (FedTemp's Newton and averaging groups, ``DPConfig.plan`` over
``DistributedPlan.gaussian``). Shares are drawn by the plans' own ``law.sample`` (seeded,
vectorised: all ``K x N`` at once).

Tolerances, from the sampling error. The sample variance of ``N`` sums has standard error
``sqrt((m4 - s^4) / N)`` (``m4`` the sample's fourth central moment); a check fails beyond
``Z = 5`` standard errors (two-sided normal tail 6e-7 per check, 18 checks). The DLap pmf is
checked by a chi-square test on 20 bins equiprobable under the exact law, failing beyond the
``1 - 1e-6`` quantile of chi-square with 19 degrees of freedom. The planted share law whose std
is ``1/t`` of one release's (instead of ``1/sqrt(t)``, :func:`privcal.audits.plants.
share_std_over_t`) gives ``1/t`` of the variance: it passes at ``t = 1`` and fails at every
``t > 1``, which :func:`test_planted_std_over_t_is_caught` shows.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from scipy import stats

from privcal.audits.plants import share_std_over_t
from privcal.federated import get_method
from privcal.federated.dp import DPConfig
from privcal.privacy import SecureNoise, SeededNoise
from privcal.private import DataSource
from privcal.private.plan import search_plan

pytestmark = [
    pytest.mark.statistical,
    pytest.mark.filterwarnings("ignore::privcal.privacy.InsecureNoiseWarning"),
]

Z = 5.0
CHI2_LEVEL = 1e-6
LAPLACE_K, GAUSSIAN_K = 4, 64
LAPLACE_N, GAUSSIAN_N = 20_000, 10_000


def _thresholds(k: int) -> tuple[int, int, int]:
    return 1, k // 2, k


def laplace_plans(t: int) -> dict[str, Any]:
    """The data-source path's plans at threshold ``t`` of ``LAPLACE_K`` sources."""
    rng = np.random.default_rng(7)
    z = rng.normal(size=(30, 5))
    src = DataSource(z, z.argmax(1), budget=10.0)
    acc, nll = search_plan("acc", 1.0, 5), search_plan("nll", 1.0, 5, search="curve")
    kw = {"n_parties": LAPLACE_K, "threshold": t}
    return {
        "acc-curve": src.share(
            "accuracy_gap_curve", 1.0, temperatures=acc.grid, anchor=acc.anchor, **kw
        ).plan,
        "nll-increments": src.share(
            "clipped_nll_increments", 1.0, temperatures=nll.grid, **kw
        ).plan,
    }


def gaussian_plans(t: int) -> dict[str, Any]:
    """The federated path's plans (FedTemp's Newton and averaging groups) at threshold ``t``."""
    dp = DPConfig(
        1.0, 1e-5, 1, SecureNoise(), aggregation="distributed", n_clients=GAUSSIAN_K, threshold=t
    )
    plans = {}
    for name, fm in (
        ("fedtemp", get_method("fedtemp", grad_clip=1.0, hess_clip=1.0)),
        ("fedtemp-averaging", get_method("fedtemp-averaging")),
    ):
        for j, g in enumerate(fm.noise_groups(dp, fm.payload_shape(2))):
            plans[f"{name}[{j}]"] = dp.plan(g)
    return plans


def view_noise(plan: Any, n: int, seed: int) -> np.ndarray:
    """``n`` draws of the sum of the ``K`` parties' shares (one coordinate), as float."""
    shares = plan.law.sample(SeededNoise(seed), (plan.n_parties, n))
    return shares.sum(axis=0).astype(np.float64)


def release_variance(plan: Any) -> float:
    """One release's noise variance, from the plan's target law (not from ``ShareLaw``)."""
    if plan.mechanism == "discrete_laplace":
        a = plan.law.parameter
        return 2.0 * a / (1.0 - a) ** 2
    return plan.law.parameter**2


def variance_z(x: np.ndarray, expected: float) -> float:
    """``(s^2 - expected) / se(s^2)``, ``se`` from the sample's fourth central moment."""
    c = x - x.mean()
    s2 = float(np.mean(c * c))
    m4 = float(np.mean(c**4))
    return (s2 - expected) / np.sqrt(max(m4 - s2 * s2, 1e-300) / x.size)


def dlap_chi2(x: np.ndarray, a: float, bins: int = 20) -> float:
    """Chi-square of ``x`` against ``DLap(a)`` on ``bins`` bins equiprobable under it."""

    def cdf(k: np.ndarray) -> np.ndarray:
        k = np.asarray(k, dtype=np.float64)
        return np.where(k < 0, a ** (-k) / (1 + a), 1.0 - a ** (k + 1) / (1 + a))

    # integer edges e_i with P(X <= e_i) ~ i / bins, from the exact CDF
    scale = 1.0 / -np.log(a)
    grid = np.arange(-40 * scale, 40 * scale, max(scale / 200.0, 1.0)).round()
    c = cdf(grid)
    edges = np.unique(grid[np.searchsorted(c, np.arange(1, bins) / bins)])
    probs = np.diff(np.concatenate([[0.0], cdf(edges), [1.0]]))
    counts = np.bincount(np.searchsorted(edges, x, side="left"), minlength=edges.size + 1)
    expected = probs * x.size
    return float(((counts - expected) ** 2 / expected).sum())


def law_failures() -> list[str]:
    """Every check of the derivation that the sampled view fails (empty: the law holds)."""
    failures = []
    seed = 0
    for k, plans_at, n in (
        (LAPLACE_K, laplace_plans, LAPLACE_N),
        (GAUSSIAN_K, gaussian_plans, GAUSSIAN_N),
    ):
        for t in _thresholds(k):
            for name, plan in plans_at(t).items():
                seed += 1
                assert plan.threshold == t and plan.n_parties == k
                x = view_noise(plan, n, seed)
                zv = variance_z(x, k / t * release_variance(plan))
                if abs(zv) > Z:
                    failures.append(f"{name} t={t}: variance off by {zv:.1f} standard errors")
                if plan.mechanism == "discrete_laplace" and t == k:
                    chi2 = dlap_chi2(x, plan.law.parameter)
                    if chi2 > stats.chi2.isf(CHI2_LEVEL, 19):
                        failures.append(f"{name} t={t}: not DLap(a), chi-square {chi2:.0f}")
    return failures


def test_the_aggregator_view_has_the_derived_law() -> None:
    assert law_failures() == []


def test_planted_std_over_t_is_caught() -> None:
    with share_std_over_t():
        failures = law_failures()
    # every t > 1 check fails (the variance, and DLap's pmf at t = K); t = 1 is unaffected
    assert failures and all(" t=1:" not in f for f in failures), failures
    n_plans = len(laplace_plans(1)) + len(gaussian_plans(1))
    assert len(failures) == 2 * n_plans + len(laplace_plans(1)), failures

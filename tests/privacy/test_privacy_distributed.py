"""Distributed noise shares, the in-process secure sum, and the ``aggregation`` keyword."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy import stats

from privcal.federated import dirichlet_partition, simulate
from privcal.federated.dp import default_threshold
from privcal.metrics.statistics import (
    accuracy_gap_sum,
    calibration_bins,
    top_confidence,
    top_correct,
)
from privcal.privacy import SecureNoise, SeededNoise
from privcal.privacy.distributed import (
    DistributedPlan,
    SecureSum,
    ShareLaw,
    TooFewSurvivorsError,
    WrappedSumError,
    check_aggregation,
)
from privcal.private import DataSource, PrivateHistogramBinning, PrivateTemperatureScaling
from privcal.private.queries import distributed_laplace

pytestmark = pytest.mark.filterwarnings("ignore::privcal.privacy.InsecureNoiseWarning")


def _dlap_pmf(a: float, ks: np.ndarray) -> np.ndarray:
    return (1 - a) / (1 + a) * a ** np.abs(ks)


@pytest.mark.parametrize("noise", [SeededNoise(3), SecureNoise()], ids=["seeded", "secure"])
def test_t_discrete_laplace_shares_sum_to_the_discrete_laplace(noise) -> None:
    """Chi-square of the sum of t = 5 shares against DLap(a) (cells |k| <= 6, tails pooled)."""
    a, t, n = math.exp(-0.5), 5, 60_000
    law = ShareLaw("discrete_laplace", a, t)
    total = sum(law.sample(noise, (n,)) for _ in range(t))
    ks = np.arange(-6, 7)
    observed = np.array([(total == k).sum() for k in ks] + [(np.abs(total) > 6).sum()])
    p = _dlap_pmf(a, ks)
    expected = n * np.append(p, 1 - p.sum())
    assert stats.chisquare(observed, expected).pvalue > 1e-4


@pytest.mark.parametrize("noise", [SeededNoise(4), SecureNoise()], ids=["seeded", "secure"])
def test_discrete_gaussian_sampler_has_its_law(noise) -> None:
    sigma, n = 1.3, 60_000
    x = np.asarray(noise.discrete_gaussian(sigma, size=(n,)))
    ks = np.arange(-5, 6)
    w = np.exp(-(np.arange(-60, 61) ** 2) / (2 * sigma**2))
    p = np.exp(-(ks**2) / (2 * sigma**2)) / w.sum()
    observed = np.array([(x == k).sum() for k in ks] + [(np.abs(x) > 5).sum()])
    assert stats.chisquare(observed, n * np.append(p, 1 - p.sum())).pvalue > 1e-4


def test_plan_decodes_the_sum_and_its_noise_has_the_claimed_variance() -> None:
    noise = SeededNoise(5)
    plan = DistributedPlan.laplace(
        2.0, 1.0, 3, n_parties=4, threshold=4, value_bound=100.0, shape=(3,)
    )
    ring = SecureSum()
    values = [np.array([1.25, -3.5, 7.0]) * (k + 1) for k in range(4)]
    releases = np.array(
        [
            plan.release(ring.aggregate([plan.share(v, noise, ring) for v in values], 4, (3,)))
            for _ in range(1500)
        ]
    )
    exact = np.sum(values, axis=0)
    se = math.sqrt(plan.variance() / 1500)
    assert np.all(np.abs(releases.mean(0) - exact) < 5 * se)  # unbiased rounding
    # the variance of a sample variance of a Laplace-like law: kurtosis 6 -> sd ~ v sqrt(7/n)
    assert np.all(np.abs(releases.var(0) / plan.variance() - 1) < 5 * math.sqrt(7 / 1500))
    assert plan.integer_sensitivity == math.ceil(plan.encoding.scale * 2.0) + 3


def test_fewer_survivors_than_the_threshold_release_nothing() -> None:
    plan = DistributedPlan.laplace(1.0, 1.0, 1, n_parties=3, threshold=3, value_bound=1, shape=())
    ring = SecureSum()
    ups = [plan.share(0.5, SeededNoise(0), ring), None, plan.share(0.5, SeededNoise(1), ring)]
    with pytest.raises(TooFewSurvivorsError, match="threshold t=3"):
        ring.aggregate(ups, 3, ())
    view = ring.aggregate(ups, 2, ())
    assert view.dropped == (1,)


def test_secure_sum_refuses_malformed_uploads() -> None:
    ring = SecureSum(bits=32)
    good = np.zeros(3, dtype=np.uint64)
    with pytest.raises(ValueError, match=r"party 1 .* shape"):
        ring.aggregate([good, np.zeros(2, dtype=np.uint64)], 2, (3,))
    with pytest.raises(ValueError, match=r"party 0 .* integer"):
        ring.aggregate([np.zeros(3), good], 2, (3,))
    with pytest.raises(ValueError, match=r"party 1 .* outside \[0, 2\^32\)"):
        ring.aggregate([good, np.full(3, 2**33, dtype=np.uint64)], 2, (3,))


def test_a_wrapped_sum_is_detected_not_released() -> None:
    plan = DistributedPlan.laplace(1.0, 1.0, 1, n_parties=2, threshold=2, value_bound=1, shape=())
    ring = SecureSum()
    ok = plan.share(1.0, SeededNoise(0), ring)
    bad = ring.to_ring(np.int64(2**62))  # a party that ignores its bound
    with pytest.raises(WrappedSumError, match="not released"):
        plan.release(ring.aggregate([ok, bad], 2, ()))


def test_a_modulus_too_small_for_the_bound_is_refused() -> None:
    with pytest.raises(ValueError, match="modulus of 2\\^32 is too small"):
        DistributedPlan.laplace(
            1.0, 1.0, 1, n_parties=1000, threshold=800, value_bound=2**20, shape=(4,), bits=32
        )


def test_a_party_value_beyond_its_public_bound_is_refused_before_drawing() -> None:
    plan = DistributedPlan.laplace(1.0, 1.0, 1, n_parties=2, threshold=2, value_bound=1, shape=())
    with pytest.raises(ValueError, match="beyond the public bound"):
        plan.share(1.5, SeededNoise(0), SecureSum())


@pytest.mark.parametrize(
    ("aggregation", "threshold", "match"),
    [
        ("distributed", 4, "at most the number of parties K=3"),
        ("distributed", 0, "'threshold'"),
        ("local", 2, "applies to aggregation='distributed' only"),
        ("secure", None, "'aggregation'"),
    ],
)
def test_check_aggregation_refuses_bad_settings(aggregation, threshold, match) -> None:
    with pytest.raises(ValueError, match=match):
        check_aggregation(aggregation, threshold, 3, "Owner")
    with pytest.raises(ValueError, match="'threshold'"):  # below SecAgg+'s minimum
        check_aggregation("distributed", 1, 3, "Owner", min_threshold=2)


def test_gaussian_plan_spends_exactly_the_continuous_rho() -> None:
    plan = DistributedPlan.gaussian(
        3.0, 40.0, n_parties=100, threshold=80, value_bound=3.0, shape=(10,)
    )
    assert plan.law.rho(plan.integer_sensitivity, 10) == pytest.approx(9 / (2 * 1600), rel=1e-9)
    # one share alone (the secure sum broken) is t times worse
    assert plan.law.fallback(plan.integer_sensitivity, 10) == pytest.approx(
        80 * 9 / (2 * 1600), rel=1e-6
    )


def _sources(z: np.ndarray, y: np.ndarray, k: int, seed: int) -> list[DataSource]:
    return [
        DataSource(z[i::k], y[i::k], name=f"s{i}", noise=SeededNoise(seed + i)) for i in range(k)
    ]


def _data(n: int = 4000) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    z = 3.0 * rng.normal(size=(n, 4))
    return z, np.argmax(z + 3 * rng.normal(size=z.shape), 1)


@pytest.mark.parametrize("objective", ["acc", "nll", "ece"])
def test_distributed_fit_spends_epsilon_per_source_and_shows_only_the_sum(objective) -> None:
    z, y = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = PrivateTemperatureScaling(objective, aggregation="distributed").fit(
            sources=_sources(z, y, 5, 0)
        )
    rep = est.privacy_report_
    assert rep.epsilon == pytest.approx(1.0)
    assert set(rep.per_source()) == {f"s{i}" for i in range(5)}
    assert all(r.mechanism == distributed_laplace(5, 5) for r in rep.releases)
    assert any("threshold t=5 of K=5" in line for line in rep.threat)
    assert est.aggregator_views_ and all(
        v.modular_sum.dtype == np.uint64 for v in est.aggregator_views_
    )
    assert 1.0 < est.temperature_ < 3.0


def test_distributed_noise_is_one_release_local_is_k() -> None:
    """The summed accuracy gap over 10 sources: distributed noise has the variance of one
    Laplace release (2 / eps^2), local that of 10."""
    z, y = _data(1000)
    srcs = [DataSource(z[i::10], y[i::10], budget=1e4, noise=SeededNoise(i)) for i in range(10)]
    exact = float(accuracy_gap_sum(z, y, 1.5))
    ring, n = SecureSum(), 200
    local = [sum(s.accuracy_gap_sum(1.5, 1.0) for s in srcs) for _ in range(n)]
    dist = []
    for _ in range(n):
        shares = [
            s.share("accuracy_gap_sum", 1.0, n_parties=10, threshold=10, temperature=1.5)
            for s in srcs
        ]
        view = ring.aggregate([sh.upload for sh in shares], 10, ())
        dist.append(shares[0].finish(shares[0].plan.release(view)))
    tol = 5 * math.sqrt(7 / n)  # sd of a sample variance of a Laplace-like law
    assert abs(np.var(local) / 20.0 - 1) < tol
    assert abs(np.var(dist) / 2.0 - 1) < tol
    assert abs(np.mean(dist) - exact) < 5 * math.sqrt(2.0 / n)


@pytest.mark.filterwarnings("ignore::privcal.private.NoiseDominatedWarning")  # sparse bins
def test_histogram_binning_distributed_matches_the_exact_counts_in_mean() -> None:
    z, y = _data(3000)
    est = PrivateHistogramBinning(epsilon=1.0, aggregation="distributed")
    est.fit(sources=_sources(z, y, 3, 7))
    exact = PrivateHistogramBinning(epsilon=1.0, aggregation="local").fit(
        sources=[DataSource(z, y, noise=SeededNoise(0), budget=1.0)]
    )
    counts = calibration_bins(top_confidence(z, 1.0), top_correct(z, y), 15).counts
    ok = counts >= 200  # the noise of a count is ~1.4: such bins are within 0.05
    assert ok.sum() >= 3
    assert np.max(np.abs(est.bin_values_ - exact.bin_values_)[ok]) < 0.05


def test_threshold_without_distributed_is_refused_before_any_spend() -> None:
    z, y = _data(500)
    srcs = _sources(z, y, 2, 0)
    with pytest.raises(ValueError, match="applies to aggregation='distributed' only"):
        PrivateTemperatureScaling(threshold=2).fit(sources=srcs)
    with pytest.raises(ValueError, match="at most the number of parties K=2"):
        PrivateTemperatureScaling(aggregation="distributed", threshold=3).fit(sources=srcs)
    assert all(s.spent == 0 for s in srcs)


def test_default_threshold_tolerates_a_dropout() -> None:
    assert [default_threshold(k) for k in (1, 2, 3, 10, 100)] == [1, 1, 2, 8, 80]


def test_simulate_distributed_matches_trusted_noise_and_reports_the_threat() -> None:
    """FedTemp on 30 clients: both modes spend the same epsilon; distributed fits near the
    noiseless temperature, and its report names the threshold and the aggregator's view."""
    z, y = _data(6000)
    z = 2.0 * z
    parts = dirichlet_partition(y, n_clients=30, beta=1.0, seed=0)
    plain, _ = simulate("fedtemp", z, y, parts, rounds=12)
    temps = {}
    for agg in ("trusted", "distributed"):
        cal, _ = simulate(
            "fedtemp",
            z,
            y,
            parts,
            rounds=12,
            epsilon=4.0,
            delta=1e-5,
            aggregation=agg,
            noise=SeededNoise(1),
        )
        temps[agg] = cal.temperature_
        assert cal.privacy_report_.epsilon == pytest.approx(4.0, rel=1e-6)
    assert cal.aggregator_views_ and len(cal.aggregator_views_) == 24  # 12 rounds x (g, h)
    assert any("threshold t=24 of K=30" in line for line in cal.privacy_report_.threat)
    threat = " ".join(cal.privacy_report_.threat)
    assert "simulated in one process" in threat  # simulate is not a deployment
    assert "up to 6 parties" in threat  # S - t = 30 - 24, every client uploaded
    assert "one upload unmasked alone" in threat and "epsilon" in threat
    for t in temps.values():
        assert abs(math.log(t / plain.temperature_)) < 0.1
    with pytest.raises(TooFewSurvivorsError):
        simulate(
            "fedtemp",
            z,
            y,
            parts,
            rounds=2,
            epsilon=4.0,
            delta=1e-5,
            threshold=30,
            sample_rate=0.5,
            noise=SeededNoise(2),
        )
    with pytest.raises(ValueError, match="'threshold'"):
        simulate("fedtemp", z, y, parts, rounds=2, threshold=3)


def test_collusion_is_computed_from_the_survivors_and_secaggs_limit() -> None:
    """S - t honest shares remain after S - t colluders; over SecAgg+ the server with t - 1
    colluders unmasks one upload, so there at most t - 2 may collude."""
    from privcal.privacy.distributed import collusion_tolerated, threat_model

    assert collusion_tolerated(8, 10, "in-process") == 2
    assert collusion_tolerated(8, 9, "in-process") == 1  # a dropout costs one
    assert collusion_tolerated(3, 10, "secagg+") == 1  # t - 2 binds
    assert collusion_tolerated(8, 10, "secagg+") == 2  # S - t binds
    assert collusion_tolerated(8, 7, "secagg+") == 0
    lines = threat_model("distributed", 10, 3, 10, transport="secagg+", fallback="epsilon 9")
    text = " ".join(lines)
    assert "honest-but-curious" in text and "32-bit" in text and "7522" in text
    assert "up to 1 parties" in text and "epsilon 9" in text
    with pytest.raises(ValueError, match="transport"):
        collusion_tolerated(2, 3, "carrier pigeon")


def test_fallback_epsilon_of_one_unmasked_upload() -> None:
    """One share alone is t rho-zCDP: the issue's figures, about 3 at t = 8 and 12 at t = 80
    for a run at (1, 1e-5) (T rounds share rho, so T does not change it), and t = 1 gives the
    run's own epsilon back."""
    from privcal.federated import FedTemp
    from privcal.federated.dp import DPConfig, fallback_epsilon

    def at(k: int, t: int, rounds: int = 12) -> float:
        dp = DPConfig(1.0, 1e-5, rounds, noise=SecureNoise(), aggregation="distributed",
                      n_clients=k, threshold=t)  # fmt: skip
        return fallback_epsilon(FedTemp(), dp, 10)

    assert at(10, 8) == pytest.approx(3.15, abs=0.01)
    assert at(100, 80) == pytest.approx(12.13, abs=0.01)
    assert at(100, 80, rounds=3) == pytest.approx(at(100, 80), rel=1e-6)
    assert at(4, 1) == pytest.approx(1.0, rel=1e-3)

"""Accounting wrappers checked against dp-accounting (and Opacus where installed)."""

from __future__ import annotations

import math

import dp_accounting
import pytest
from dp_accounting import rdp

from privcal.privacy.accounting import (
    ZCDPAccountant,
    gaussian_zcdp_rho,
    gdp_delta,
    gdp_epsilon,
    pld_gaussian_epsilon,
    pld_gaussian_sigma,
    rdp_epsilon,
    rdp_noise_multiplier,
    zcdp_epsilon,
    zcdp_gaussian_sigma,
    zcdp_rho,
)
from privcal.privacy.mechanisms import analytic_gaussian_delta


def _dp_accounting_gaussian(sigma_over_sens: float, rounds: int, delta: float) -> float:
    acc = rdp.RdpAccountant()
    acc.compose(dp_accounting.GaussianDpEvent(sigma_over_sens), rounds)
    return float(acc.get_epsilon(delta))


@pytest.mark.parametrize(
    ("z", "q", "steps"), [(1.1, 0.01, 1000), (0.8, 0.004, 5000), (2.0, 0.1, 100)]
)
def test_rdp_epsilon_matches_dp_accounting(z: float, q: float, steps: int) -> None:
    acc = rdp.RdpAccountant()
    acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)), steps)
    assert rdp_epsilon(z, q, steps, 1e-5) == pytest.approx(acc.get_epsilon(1e-5), rel=1e-12)


def test_rdp_epsilon_known_value() -> None:
    # Abadi et al.-style setting: dp-accounting 0.6 gives 1.71177, and so does Opacus 1.6's
    # RDPAccountant (checked by hand; Opacus is not imported here).
    assert rdp_epsilon(1.1, 0.01, 1000, 1e-5) == pytest.approx(1.71177, rel=1e-4)
    assert rdp_epsilon(1.1, 0.01, 0, 1e-5) == 0.0


def test_rdp_noise_multiplier_errs_noisier() -> None:
    z = rdp_noise_multiplier(2.0, 1e-5, 0.01, 1000)
    assert rdp_epsilon(z, 0.01, 1000, 1e-5) <= 2.0
    assert rdp_epsilon(z * (1 - 1e-3), 0.01, 1000, 1e-5) > 2.0 * 0.99


@pytest.mark.parametrize(
    ("eps", "delta", "sens", "rounds"),
    [(1.0, 1e-5, 1.0, 10), (8.0, 1e-6, 2.0, 100), (0.1, 1e-5, 1.0, 1), (3.0, 1e-3, 0.5, 1000)],
)
def test_zcdp_sigma_within_one_percent_of_dp_accounting(eps, delta, sens, rounds) -> None:
    sigma = zcdp_gaussian_sigma(eps, delta, sens, rounds)
    # our conversion (continuous alpha) is valid: the account at sigma is <= eps
    assert zcdp_epsilon(gaussian_zcdp_rho(sigma, sens, rounds), delta) <= eps
    # dp-accounting's RDP accountant (same conversion, discrete orders) agrees within 1 %
    theirs = _dp_accounting_gaussian(sigma / sens, rounds, delta)
    assert theirs == pytest.approx(eps, rel=1e-2)
    acc = rdp.RdpAccountant()
    acc.compose(dp_accounting.ZCDpEvent(gaussian_zcdp_rho(sigma, sens, rounds)))
    assert acc.get_epsilon(delta) == pytest.approx(eps, rel=1e-2)


def test_zcdp_conversion_properties() -> None:
    assert zcdp_epsilon(0.0, 1e-5) == 0.0
    for rho in [1e-4, 0.01, 0.5, 5.0]:
        classical = rho + 2 * math.sqrt(rho * math.log(1e5))
        assert zcdp_epsilon(rho, 1e-5) <= classical
    assert zcdp_epsilon(0.5, 1e-5) == pytest.approx(4.7284, abs=1e-3)
    rho = zcdp_rho(1.0, 1e-5)
    assert zcdp_epsilon(rho, 1e-5) <= 1.0 < zcdp_epsilon(rho * (1 + 1e-6), 1e-5)
    assert gaussian_zcdp_rho(2.0, 1.0, 4) == 0.5


def test_zcdp_accountant() -> None:
    acc = ZCDPAccountant()
    for _ in range(4):
        acc.step(sigma=2.0, sensitivity=1.0)
    assert acc.rho == 0.5
    assert acc.get_epsilon(1e-5) == zcdp_epsilon(0.5, 1e-5)
    other = ZCDPAccountant()
    other.load_state_dict(acc.state_dict())
    assert other.rho == 0.5
    with pytest.raises(ValueError):
        other.load_state_dict({"kind": "rdp"})


def test_gdp_matches_analytic_gaussian() -> None:
    # a Gaussian release with sigma/sens = u is (1/u)-GDP
    for u in [0.5, 1.0, 3.0]:
        assert gdp_delta(1 / u, 1.0) == pytest.approx(analytic_gaussian_delta(u, 1.0), rel=1e-9)
    eps = gdp_epsilon(1.0, 1e-5)
    assert gdp_delta(1.0, eps) <= 1e-5 < gdp_delta(1.0, eps * (1 - 1e-6))


def test_pld_plan_saves_noise_against_the_zcdp_conversion() -> None:
    """12 Gaussian rounds fixed in advance at (1, 1e-5): PLD needs ~7.8% less noise than CKS."""
    sigma = pld_gaussian_sigma(1.0, 1e-5, sensitivity=2.0, rounds=12)
    cks = zcdp_gaussian_sigma(1.0, 1e-5, sensitivity=2.0, rounds=12)
    assert 0.07 < 1.0 - sigma / cks < 0.09
    assert pld_gaussian_epsilon(sigma / 2.0, 1e-5, rounds=12) <= 1.0
    # T Gaussian rounds are exactly one Gaussian of multiplier z / sqrt(T), i.e. sqrt(T)/z-GDP
    exact = gdp_epsilon(12**0.5 / (sigma / 2.0), 1e-5)
    assert pld_gaussian_epsilon(sigma / 2.0, 1e-5, rounds=12) == pytest.approx(exact, rel=1e-3)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: rdp_epsilon(0.0, 0.01, 10, 1e-5), "noise_multiplier"),
        (lambda: rdp_epsilon(1.0, 1.5, 10, 1e-5), "sample_rate"),
        (lambda: rdp_epsilon(1.0, 0.01, -1, 1e-5), "steps"),
        (lambda: rdp_epsilon(1.0, 0.01, 10, 0.0), "delta"),
        (lambda: zcdp_gaussian_sigma(0.0, 1e-5), "epsilon"),
        (lambda: zcdp_gaussian_sigma(1.0, 1.0), "delta"),
        (lambda: zcdp_gaussian_sigma(1.0, 1e-5, -1.0), "sensitivity"),
        (lambda: zcdp_gaussian_sigma(1.0, 1e-5, 1.0, 0), "rounds"),
        (lambda: zcdp_epsilon(-1.0, 1e-5), "rho"),
        (lambda: pld_gaussian_epsilon(0.0, 1e-5), "noise_multiplier"),
        (lambda: pld_gaussian_sigma(1.0, 1e-5, 1.0, 0), "rounds"),
    ],
)
def test_bad_parameters(call, name: str) -> None:
    with pytest.raises(ValueError, match=f"The '{name}' parameter of"):
        call()


@pytest.mark.parametrize(("epsilon", "delta"), [(0.5, 1e-5), (1.0, 1e-5), (4.0, 1e-6)])
def test_exact_gaussian_conversion_is_the_pld_accountants(epsilon: float, delta: float) -> None:
    """gaussian_rho / gaussian_epsilon (closed form, sqrt(2 rho)-GDP) agree with dp-accounting's
    PLD accountant on one Gaussian of ratio sqrt(2 rho), and leave more rho than zCDP's."""
    from privcal.privacy.accounting import (
        gaussian_epsilon,
        gaussian_rho,
        pld_gaussian_epsilon,
        zcdp_rho,
    )

    rho = gaussian_rho(epsilon, delta)
    assert gaussian_epsilon(rho, delta) == pytest.approx(epsilon, rel=1e-9)
    assert gaussian_epsilon(rho, delta) <= epsilon
    assert pld_gaussian_epsilon(1.0 / math.sqrt(2.0 * rho), delta) == pytest.approx(
        epsilon, rel=1e-3
    )
    assert rho > zcdp_rho(epsilon, delta)
    # 12 rounds of a plan are one Gaussian: the PLD of the 12 rounds says the same
    z = math.sqrt(12 / (2.0 * rho))
    assert pld_gaussian_epsilon(z, delta, rounds=12) == pytest.approx(epsilon, rel=1e-3)


def test_a_gaussian_accountant_refuses_other_releases() -> None:
    from privcal.privacy.accounting import ZCDPAccountant

    acc = ZCDPAccountant(conversion="gaussian")
    acc.step(sigma=3.0)
    with pytest.raises(ValueError, match="continuous Gaussian releases only"):
        acc.step_rho(0.1)
    with pytest.raises(ValueError, match="'conversion' parameter of ZCDPAccountant"):
        ZCDPAccountant(conversion="pld")


def test_a_trusted_federated_run_spends_exactly_its_claim() -> None:
    from privcal.federated.dp import DPConfig, noise_multiplier
    from privcal.privacy import SecureNoise

    for aggregation, conversion in (("trusted", "gaussian"), ("distributed", "zcdp")):
        dp = DPConfig(1.0, 1e-5, 3, noise=SecureNoise(), aggregation=aggregation, n_clients=5)
        assert dp.accountant.conversion == conversion
        s = noise_multiplier(1.0, 1e-5, 3, 1, conversion)
        for _ in range(3):
            dp.accountant.step(sigma=s)
        assert dp.spent_epsilon() == pytest.approx(1.0, rel=1e-6) and dp.spent_epsilon() <= 1.0
    assert noise_multiplier(1.0, 1e-5, 12, 1, "gaussian") == pytest.approx(
        0.922 * noise_multiplier(1.0, 1e-5, 12), rel=1e-3
    )

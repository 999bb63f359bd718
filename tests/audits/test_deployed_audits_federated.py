"""Deployed-path audits of federated calibration, and the defects they must catch.

Every audit of :mod:`privcal.audits.federated` calls ``simulate()`` (or the Flower server's
round) as a user does, with the default SecureNoise, on K vs K+1 clients; it passes unless the
release is not ``(epsilon, delta)``-DP (false failure probability ``alpha = 1e-6``). Planted
defects (registered with each audit, patched into the real code path and run by
``tests/audits/test_audit_plants.py``) make the same audits fail: a client that sends its
federated-Newton payload unclipped (FedTemp's default update, simulated and over Flower), the
observed-K denominator of issue 12 (parameter averaging dividing the noisy sum by the number of
clients that took part), noise shares dropped, and seeded noise reused in every run.
"""

from __future__ import annotations

import pytest

from privcal.audits import available_audits, get_audit, run_audit
from privcal.federated import simulation

# thousands of simulations per audit: slow
pytestmark = [pytest.mark.statistical, pytest.mark.slow]

FAST = [
    "simulate-fedtemp",
    "simulate-fedtemp-averaging",
    "simulate-fedvector",
    "simulate-fedopvector",
    "simulate-fedmatrix",
    "simulate-fedbin",
    "simulate-fedbbq",
    "simulate-fedbbq-all",
    "simulate-fedbbq-changed",
    "simulate-fedtemp-trusted",
    "simulate-fedtemp-averaging-trusted",
    "simulate-conformal-lac",
]


def _check_claim(report) -> None:  # type: ignore[no-untyped-def]
    assert report.epsilon == pytest.approx(1.0, rel=1e-6)  # read from the run's own report
    assert report.delta == pytest.approx(1e-5)
    assert report.relation.startswith("user-level add/remove")
    assert "number of clients in the federation K=2" in report.relation


def test_every_fed_method_and_the_flower_round_is_registered() -> None:
    pytest.importorskip("flwr")
    names = set(available_audits())
    assert {*FAST, "simulate-fedcal", "flower-server-round"} <= names
    assert "flower-server-round-conformal-lac" in names
    assert get_audit("simulate-fedcal").slow


@pytest.mark.parametrize("name", FAST)
def test_simulate_audit_passes_with_default_noise(name: str) -> None:
    report = run_audit(name)
    assert report.passed, str(report)
    _check_claim(report)


def test_flower_server_round_audit_passes() -> None:
    pytest.importorskip("flwr")
    report = run_audit("flower-server-round")
    assert report.passed, str(report)
    _check_claim(report)
    assert "no denominator" in report.relation  # Newton: the two noisy sums only


def test_flower_conformal_round_audit_passes() -> None:
    """privcal federate --method conformal-lac: the ServerApp's round on the ClientApp's capped
    histograms (the no-row-cap plant runs in test_audit_plants.py)."""
    pytest.importorskip("flwr")
    report = run_audit("flower-server-round-conformal-lac")
    assert report.passed, str(report)
    _check_claim(report)
    assert "row cap r=5" in report.relation


def test_fedcal_audit_reads_its_claim_from_the_run() -> None:
    """FedCal's audit (slow tier: minutes with SecureNoise) audits the run that reports this."""
    from privcal.audits.federated import _data, _parts

    z, y = _data()
    cal, _ = simulation.simulate("fedcal", z, y, _parts(1), rounds=1, epsilon=1.0, delta=1e-5)
    assert cal.privacy_report_.unit == "user" and cal.privacy_report_.status == "private"
    assert cal.privacy_report_.epsilon == pytest.approx(1.0, rel=1e-6)


def test_unclipped_payload_is_refused_by_the_distributed_default() -> None:
    """Under distributed shares a client's payload beyond its public clip bound is refused
    before any share is drawn (it could wrap the secure sum): nothing is released. (The same
    plant is caught by the trusted server's audit: ``test_audit_plants.py``.)"""
    plant = get_audit("simulate-fedtemp-trusted").plants["unclipped"]
    with plant.patch(), pytest.raises(ValueError, match="beyond the public bound"):
        run_audit("simulate-fedtemp", runs=100)

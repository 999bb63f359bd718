"""Deployed-path audits of federated calibration, and the defects they must catch.

Every audit of :mod:`privcal.audits.federated` calls ``simulate()`` (or the Flower server's
round) as a user does, with the default SecureNoise, on K vs K+1 clients; it passes unless the
release is not ``(epsilon, delta)``-DP (false failure probability ``alpha = 1e-6``). Planted
defects (monkeypatched into the real code path) make the same audits fail: a client that sends
its federated-Newton payload unclipped (FedTemp's default update, simulated and over Flower),
the observed-K denominator of issue 12 (parameter averaging dividing the noisy sum by the number
of clients that took part) and seeded noise reused in every run.
"""

from __future__ import annotations

import pytest

from privcal.audits import available_audits, get_audit, run_audit
from privcal.federated import methods, simulation
from privcal.privacy import SeededNoise

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


def test_fedcal_audit_reads_its_claim_from_the_run() -> None:
    """FedCal's audit (slow tier: minutes with SecureNoise) audits the run that reports this."""
    from privcal.audits.federated import _data, _parts

    z, y = _data()
    cal, _ = simulation.simulate("fedcal", z, y, _parts(1), rounds=1, epsilon=1.0, delta=1e-5)
    assert cal.privacy_report_.unit == "user" and cal.privacy_report_.status == "private"
    assert cal.privacy_report_.epsilon == pytest.approx(1.0, rel=1e-6)


@pytest.fixture()
def observed_k(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plant issue 12's defect: DP-FedAvg divides by the observed number of accepted clients."""
    real = methods._Scaling.server_step

    def server_step(self, state, total, n, dp=None, denominator=None):  # type: ignore[no-untyped-def]
        return real(self, state, total, n, dp=dp, denominator=float(n) if dp else denominator)

    monkeypatch.setattr(methods._Scaling, "server_step", server_step)


@pytest.mark.usefixtures("observed_k")
def test_observed_k_denominator_fails_the_averaging_audit() -> None:
    # the server's denominator is seed 003's trusted-server path; under the distributed
    # default the noise grows with the participants (K / t shares), which masks half the defect
    report = run_audit("simulate-fedtemp-averaging-trusted")
    assert not report.passed, str(report)  # epsilon_lower > the claimed 1 (1.4-2.0 measured)


@pytest.fixture()
def unclipped(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plant a client that skips clipping: its Newton payload leaves as computed."""
    monkeypatch.setattr(methods.FedTemp, "clip", lambda self, payload, dp: payload)
    monkeypatch.setattr(methods.FedTemp, "clip_many", lambda self, payloads, dp: payloads)


@pytest.mark.usefixtures("unclipped")
@pytest.mark.parametrize(
    ("name", "runs"),
    # simulate: the unclipped gradient (30 C_g) moves T to its trust-region edge, 300 runs see
    # it; Flower (default C_g = 28.3, an unclipped sum of 340 against a noise std of 128 on the
    # sum) needs the audit's full 2000
    [("simulate-fedtemp-trusted", 300), ("flower-server-round", 2000)],
)
def test_unclipped_newton_payload_fails_the_audit(name: str, runs: int) -> None:
    if name.startswith("flower"):
        pytest.importorskip("flwr")
    report = run_audit(name, runs=runs)
    assert not report.passed, str(report)
    assert report.epsilon_lower > 1.0


@pytest.mark.usefixtures("unclipped")
def test_unclipped_payload_is_refused_by_the_distributed_default() -> None:
    """Under distributed shares a client's payload beyond its public clip bound is refused
    before any share is drawn (it could wrap the secure sum): nothing is released."""
    with pytest.raises(ValueError, match="beyond the public bound"):
        run_audit("simulate-fedtemp", runs=100)


def test_seeded_noise_reused_fails_the_audit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plant a fixed seed: every run of simulate() draws the noise of SeededNoise(0)."""
    monkeypatch.setattr(simulation, "resolve_noise", lambda noise, owner: SeededNoise(0))
    report = run_audit("simulate-fedtemp", runs=100)
    assert not report.passed, str(report)
    assert report.epsilon_lower > 1.0


def test_seeded_server_noise_reused_fails_the_flower_audit(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("flwr")
    from privcal.federated.flower import task

    monkeypatch.setattr(task, "server_noise", lambda cfg, owner: SeededNoise(0))
    report = run_audit("flower-server-round", runs=100)
    assert not report.passed, str(report)

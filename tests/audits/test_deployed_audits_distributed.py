"""The aggregator-view audits of distributed noise, and the defects they must catch.

``private-temperature-aggregator`` (K = 4 sources, t = 1) and ``simulate-fedtemp-aggregator``
(K = 64 clients, t = 1) call the public entry points with SecureNoise and play the adversary
their reports allow: the aggregator with ``S - t`` colluding parties, who subtract their own
uploads from the secure sum, so exactly ``t`` honest shares remain. Their ``-default-t`` twins
run at each entry point's default threshold (``t = K = 16`` sources; ``t = 52`` of 64 clients,
12 colluding). Planted into the real code path (registered with each audit and run by
``tests/audits/test_audit_plants.py``), each defect makes the same audit fail:

* shares sized for ``K`` where the threshold ``t`` belongs (the ``ShareLaw`` built with
  ``n_parties``): the honest share's std is ``sqrt(K)`` times too small (2-fold and 8-fold);
* at the default threshold, a share std of ``1/t`` of one release's instead of ``1/sqrt(t)``
  (right at ``t = 1``, so only the ``-default-t`` audits can see it);
* one party uploading its encoded value without its share;
* every share drawn from ``SeededNoise`` with the same seed on every fit.

Biased rounding (``floor(s x)``, round-half-up) is not planted: it is no privacy defect. The
sensitivity ``D = ceil(s Delta) + m`` holds for every fixed rounding offset ``u`` in ``[0, 1)``
(``|floor(a + u) - floor(b + u)| <= ceil(|a - b|)``), and ``floor(s x)`` is ``u = 0``,
round-half-up ``u = 1/2``; even an offset chosen from the data moves a coordinate by at most one
more step, ``m`` steps of ``D ~ 3.3e4`` here (``epsilon`` off by 5e-4). It biases the decoded sum
by at most ``K / s`` per coordinate (accuracy, not privacy), which no privacy audit can see.
"""

from __future__ import annotations

import numpy as np
import pytest

from privcal.audits import available_audits, run_audit
from privcal.audits.federated import VIEW_CLIENTS, VIEW_THRESHOLD
from privcal.federated import simulation

# the audited fits are noise-dominated by design (few rows, many runs) and say so, which is
# beside the privacy claim; planted defects draw seeded noise
pytestmark = [
    pytest.mark.statistical,
    pytest.mark.filterwarnings("ignore::privcal.private.NoiseDominatedWarning"),
    pytest.mark.filterwarnings("ignore::privcal.privacy.InsecureNoiseWarning"),
]

AUDITS = (
    "private-temperature-aggregator",
    "simulate-fedtemp-aggregator",
    "private-temperature-aggregator-default-t",
    "simulate-fedtemp-aggregator-default-t",
)


def test_the_aggregator_audits_are_listed() -> None:
    audits = available_audits()
    for name in AUDITS:
        assert name in audits
    assert "three colluding" in audits["private-temperature-aggregator"].summary
    colluders = VIEW_CLIENTS - VIEW_THRESHOLD
    assert f"{colluders} colluding" in audits["simulate-fedtemp-aggregator"].summary


@pytest.mark.slow
@pytest.mark.parametrize("name", AUDITS)
def test_aggregator_audit_passes_with_default_noise(name: str) -> None:
    report = run_audit(name)
    assert report.passed, str(report)
    assert report.epsilon == pytest.approx(1.0, rel=1e-6)  # read from the entry point's report
    assert "collud" in report.neighbours


def test_private_audit_reads_its_claim_from_the_fit() -> None:
    """The claim is the distributed fit's own report: t = 1 of K = 4, three colluders allowed."""
    from privcal.audits.private import AGGREGATOR_PARTIES, _other_source_rows, neighbours
    from privcal.private import DataSource, PrivateTemperatureScaling

    (z, y), _ = neighbours()
    zo, yo = _other_source_rows()
    k = AGGREGATOR_PARTIES
    others = [DataSource(zo[i :: k - 1], yo[i :: k - 1], name=f"c{i}") for i in range(k - 1)]
    est = PrivateTemperatureScaling(aggregation="distributed", threshold=1).fit(
        sources=[DataSource(z, y, name="a"), *others]
    )
    report = est.privacy_report_
    assert report.epsilon == pytest.approx(1.0) and report.status == "private"
    assert any("up to 3 parties" in line for line in report.threat)


def test_simulate_audit_reads_its_claim_from_the_run() -> None:
    from privcal.audits.federated import _data, _view_parts

    z, y = _data()
    cal, _ = simulation.simulate(
        "fedtemp",
        z,
        y,
        _view_parts(0),
        rounds=1,
        epsilon=1.0,
        delta=1e-5,
        threshold=1,
        grad_clip=1.0,
        hess_clip=1.0,
    )
    report = cal.privacy_report_
    assert report.epsilon == pytest.approx(1.0, rel=1e-6) and report.status == "private"
    assert any(f"up to {VIEW_CLIENTS - 1} parties" in line for line in report.threat)
    # the enrolled client without data uploads (zero payload and share): nobody dropped
    assert cal.aggregator_views_[0].dropped == ()
    assert len(cal.aggregator_views_) == 2  # one round: the gradient and the curvature sums


def test_simulate_audit_reads_the_claimed_privacy_loss() -> None:
    """The read's means and stds: D's residual mean is 0 (a zero payload), D' moves each block
    by its clipped sum (norm 1) in grid units, and the round's loss has the ``mu`` of the run's
    zCDP budget (``rho = mu^2 / 2``, to within the rounding overhead of 0.1%)."""
    from privcal.audits.federated import PARAMS, ViewLoss, _data, _view_loss
    from privcal.federated import get_method
    from privcal.federated.dp import DPConfig
    from privcal.privacy import SecureNoise
    from privcal.privacy.accounting import zcdp_rho

    z, y = _data()
    dp = DPConfig(
        1.0,
        1e-5,
        1,
        SecureNoise(),
        aggregation="distributed",
        n_clients=VIEW_CLIENTS,
        threshold=VIEW_THRESHOLD,
    )
    fm = get_method("fedtemp", **PARAMS["fedtemp"])
    groups = fm.noise_groups(dp, fm.payload_shape(2))
    loss = _view_loss(dp, groups, z, y)
    assert isinstance(loss, ViewLoss)
    for g, m0, m1 in zip(groups, loss.low, loss.high, strict=True):
        assert np.all(m0 == 0.0)
        assert float(np.linalg.norm(m1)) == pytest.approx(dp.plan(g).encoding.scale, rel=1e-6)
    mu = 2.0 * float(loss(list(loss.high))[-1])  # at D''s mean the loss is +mu / 2
    assert mu == pytest.approx(np.sqrt(2.0 * zcdp_rho(1.0, 1e-5)), rel=2e-3)
    assert loss(list(loss.low))[-1] == pytest.approx(-mu / 2.0)

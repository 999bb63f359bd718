"""Deployed-path audits of the conformal layer, and the planted defects the same audits catch.

The audits (``privcal.audits.conformal``) call ``PrivateConformal(...).fit`` and
``private_quantile`` exactly as a user does: default bins, gamma and noise (``SecureNoise``), so
they are not seeded; a correct implementation fails with probability at most ``alpha = 1e-6``.

Planted defects, each registered with its audit, patched into the real code path and caught by
the *same* audit (``tests/audits/test_audit_plants.py`` runs them):

* **n-dependent validity under add/remove**: ``PrivateConformal``'s report claims add/remove (the
  old claim) while the target rank ``k`` and the full-set branch depend on ``n``; the audit then
  compares ``n = 96`` (the smallest valid ``n``: a finite threshold) with ``n = 95`` (full sets).
* **seeded noise reused**: every run draws from a fresh ``SeededNoise(seed)`` (a deployment that
  reuses its seed), so each output is a deterministic function of the data.

The plants for the two new derivations (the rank mechanism without its range ``1 + r``; the
bounded-range weights with add/remove's width under substitute) lose ``2.6 epsilon`` and
``2 epsilon`` only on events of probability ``~0.05`` and ``~0.007``: the deployed path, with
:class:`~privcal.privacy.SecureNoise` at ~3 ms a draw, cannot afford the runs that needs, so they
are planted into the exact law and audited by ``audit_pure_dp`` with 200 000 vectorised draws in
``tests/conformal/test_conformal_audit.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import privcal.audits.conformal as conformal_audits
from privcal.audits._registry import AuditReport, available_audits, get_audit
from privcal.conformal import (
    FullSetWarning,
    PrivateConformal,
    min_calibration_size,
    private_quantile,
)
from privcal.privacy import SeededNoise

# the planted-defect runs draw seeded noise on purpose (reproducible failures)
pytestmark = [
    pytest.mark.statistical,
    pytest.mark.filterwarnings("ignore::privcal.privacy.InsecureNoiseWarning"),
]


def _run(name: str, runs: int | None = None) -> AuditReport:
    """Run a registered audit (``get_audit`` imports every area that registers one)."""
    report = get_audit(name).run(runs=runs)
    print(report)
    return report


def _first_distinguishing_seed(outputs: Any) -> int:
    """The first seed whose (deterministic) outputs differ on the two neighbours.

    With a reused seed each side is a point mass; for some seeds the two point masses happen to
    coincide on a given pair (seed 0 does here; on the q = 0.5 substitute pair the first seed that
    separates them is 29), and then no test on this pair can see it.
    """
    for seed in range(200):
        a, b = outputs(seed)
        if a != b:
            return seed
    raise AssertionError("no seed in range(200) separates the neighbours")


# --- the audits of what is deployed -------------------------------------------------------------


def test_conformal_audits_are_registered() -> None:
    names = {
        "private-conformal",
        "private-conformal-localized",
        "private-quantile",
        "private-quantile-substitute",
        "private-risk-control",
    }
    assert names <= set(available_audits())
    assert get_audit("private-conformal").slow and get_audit("private-conformal").extra is None


@pytest.mark.slow
def test_private_conformal_audit_passes() -> None:
    res = _run("private-conformal")
    assert res.passed, str(res)
    assert res.epsilon == 1.0 and res.delta == 0.0  # read from the fit's own report
    n = conformal_audits.CONFORMAL_N
    assert "substitute" in res.relation and f"n = {n} (number of calibration examples)" in (
        res.relation
    )
    assert "moved from 0 to 1" in res.neighbours
    assert res.epsilon_lower <= 1.0


@pytest.mark.slow
def test_private_conformal_localized_audit_passes() -> None:
    res = _run("private-conformal-localized")
    assert res.passed, str(res)
    assert res.epsilon == 1.0 and res.delta == 0.0  # the parts' parallel composition
    n = conformal_audits.LOCALIZED_N
    assert f"n = {n} (number of calibration examples)" in res.relation
    assert "Theorem L" in res.relation and "moved from 0 to 1" in res.neighbours
    est = PrivateConformal().fit(*conformal_audits.localized_neighbours()[0])
    assert est.localize_n_ > 0  # the audited default is the localised path


def test_private_quantile_audit_passes() -> None:
    res = _run("private-quantile")
    assert res.passed, str(res)
    assert res.epsilon == 1.0 and "add/remove" in res.relation
    assert res.epsilon_lower <= 0.5  # add/remove: the loss is at most epsilon / 2


def test_private_quantile_substitute_audit_passes() -> None:
    res = _run("private-quantile-substitute")
    assert res.passed, str(res)
    assert "substitute" in res.relation and "n = 9 (number of scores)" in res.relation
    assert 0.0 < res.epsilon_lower <= 1.0  # exact loss 0.954 epsilon: the audit has power


# --- planted defects ----------------------------------------------------------------------------


def test_planted_add_remove_claim_compares_a_threshold_with_full_sets() -> None:
    """The ``add-remove-claim`` plant (caught in ``test_audit_plants.py``) audits n = 96, the
    smallest n with a finite threshold, against n = 95, which gets full sets."""
    d, d2, _ = conformal_audits.conformal_neighbours("add/remove")
    assert conformal_audits.CONFORMAL_N == min_calibration_size(0.1, 1.0)
    assert np.isfinite(PrivateConformal().fit(*d).threshold_)
    with pytest.warns(FullSetWarning):
        assert PrivateConformal().fit(*d2).threshold_ == np.inf
    with get_audit("private-conformal").plants["add-remove-claim"].patch():
        assert PrivateConformal().fit(*d).privacy_report_.relation == "add/remove"


@pytest.mark.parametrize(("method", "n0"), [("rank", 96), ("angelopoulos2022", 213)])
def test_full_set_branch_depends_on_n_which_the_report_declares_public(
    method: str, n0: int
) -> None:
    """n0 - 1 gives full sets, n0 a finite threshold: add/remove would reveal one example."""
    d, _, _ = conformal_audits.conformal_neighbours("substitute")
    logits = np.concatenate([d[0]] * 3)  # 3 * 96 rows: enough for n0 = 213 as well
    labels = np.concatenate([d[1]] * 3)
    assert min_calibration_size(0.1, 1.0, method=method) == n0
    small = PrivateConformal(method=method)
    with pytest.warns(FullSetWarning, match="k = |q~"):
        small.fit(logits[: n0 - 1], labels[: n0 - 1])
    big = PrivateConformal(method=method).fit(logits[:n0], labels[:n0])
    assert small.threshold_ == np.inf and np.isfinite(big.threshold_)
    # both reports state what makes this legitimate: n is public, neighbours substitute
    for est in (small, big):
        assert est.privacy_report_.relation == "substitute"
        assert est.privacy_report_.public[0].startswith(f"n = {est.n_} ")


def test_reused_seed_plants_use_a_seed_that_separates_the_neighbours() -> None:
    """Each ``reused-seed`` plant's seed is the first that separates its audit's neighbours."""
    d, d2, _ = conformal_audits.conformal_neighbours("substitute")
    assert (
        _first_distinguishing_seed(
            lambda s: [PrivateConformal(noise=SeededNoise(s)).fit(*x).threshold_ for x in (d, d2)]
        )
        == 1
    )
    d, d2, _ = conformal_audits.localized_neighbours()
    assert (
        _first_distinguishing_seed(
            lambda s: [
                (lambda e: (e.window_, e.threshold_))(
                    PrivateConformal(noise=SeededNoise(s)).fit(*x)
                )
                for x in (d, d2)
            ]
        )
        == 13
    )
    for relation, seed in (("add/remove", 6), ("substitute", 29)):
        d, d2, _ = conformal_audits.quantile_neighbours(relation)
        assert (
            _first_distinguishing_seed(
                lambda s, pair=(d, d2): [
                    private_quantile(x, 0.5, 1.0, 4, noise=SeededNoise(s)) for x in pair
                ]
            )
            == seed
        )
    summaries = [
        get_audit(n).plants["reused-seed"].summary
        for n in (
            "private-conformal",
            "private-conformal-localized",
            "private-quantile",
            "private-quantile-substitute",
        )
    ]
    for summary, seed in zip(summaries, (1, 13, 6, 29), strict=True):
        assert f"SeededNoise({seed})" in summary


@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    [
        "private-conformal-sources",
        "private-conformal-sources-distributed",
        "private-conformal-sources-groups",
        "private-conformal-groups",
    ],
)
def test_conformal_audits_across_parties_pass_with_defaults(name: str) -> None:
    res = _run(name)
    assert res.passed, str(res)
    assert res.epsilon == 1.0 and res.delta == 0.0  # read from the fit's own report
    relation = "add/remove" if "sources" in name else "substitute"
    assert relation in res.relation


# --- conformal risk control ----------------------------------------------------------------------


def test_risk_neighbours_sit_on_the_threshold() -> None:
    """The noiseless query at lambda = 0.6 is within the sensitivity above the threshold on D,
    so adding the worst-case row moves the exact crossing (from 0.6 to 1.0)."""
    import privcal.conformal.private.risk as risk_module
    from privcal.conformal import PrivateRiskControl, risk_curve

    d, d2, _ = conformal_audits.risk_neighbours()
    a = 0.1 - 0.001
    sens = risk_module.query_sensitivity(a, 1.0)
    threshold = 1.0 - a + risk_module.noise_margin(1.0, sens, 101, 0.001)
    q = [x[0].shape[0] * (a - risk_curve("fnr", *x)) for x in (d, d2)]
    assert 0 <= q[0][60] - threshold < sens and q[0][59] < threshold
    assert np.all(q[1][:100] < threshold) and q[1][100] >= threshold
    with get_audit("private-risk-control").plants["curve-without-noise"].patch():
        assert [PrivateRiskControl().fit(*x).lambda_ for x in (d, d2)] == [0.6, 1.0]
    assert (
        _first_distinguishing_seed(
            lambda s: [PrivateRiskControl(noise=SeededNoise(s)).fit(*x).lambda_ for x in (d, d2)]
        )
        == 0
    )
    assert "SeededNoise(0)" in get_audit("private-risk-control").plants["reused-seed"].summary


@pytest.mark.slow
def test_private_risk_control_audit_passes() -> None:
    res = _run("private-risk-control")
    assert res.passed, str(res)
    assert res.epsilon == 1.0 and res.delta == 0.0  # read from the fit's own report
    assert "add/remove" in res.relation and "row added" in res.neighbours

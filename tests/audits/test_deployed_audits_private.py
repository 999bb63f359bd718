"""Deployed-path audits of seed 000's entry points, and the planted defects they catch.

Each audit calls the public API as a user does (default arguments, SecureNoise) on worst-case
add/remove neighbours; a correct implementation fails with probability at most alpha = 1e-6.
The defects planted into the same code path (the exact release, a reused seed, the unclipped
NLL, the curve's increments released exact, the sensitivities split over bins, cells and
increments, the share laws of the aggregator audits) are registered with each audit and run by
``tests/audits/test_audit_plants.py``.
"""

from __future__ import annotations

import pytest

from privcal.audits import available_audits, run_audit

# the audits refit private temperatures on 40 rows thousands of times: each fit is
# noise-dominated and says so, which is beside the privacy claim; planted defects use seeded noise
pytestmark = [
    pytest.mark.statistical,
    pytest.mark.filterwarnings("ignore::privcal.private.NoiseDominatedWarning"),
    pytest.mark.filterwarnings("ignore::privcal.privacy.InsecureNoiseWarning"),
]

PRIVATE_AUDITS = (
    "datasource-accuracy-gap-sum",
    "datasource-accuracy-gap-curve",
    "datasource-clipped-nll-sum",
    "datasource-clipped-nll-increments",
    "datasource-bin-gaps",
    "datasource-bin-counts",
    "datasource-count",
    "private-temperature-acc",
    "private-temperature-nll",
    "private-temperature-ece",
    "private-histogram-binning",
)


def test_every_private_entry_point_has_a_registered_audit() -> None:
    assert set(PRIVATE_AUDITS) <= set(available_audits())


@pytest.mark.slow
@pytest.mark.parametrize("name", PRIVATE_AUDITS)
def test_deployed_path_passes_its_audit(name: str) -> None:
    report = run_audit(name)
    assert report.passed, str(report)
    assert report.epsilon == 1.0 and report.delta == 0.0  # read from the entry point's report
    assert "example-level add/remove" in report.relation
    assert report.confidence == pytest.approx(1 - 1e-6)

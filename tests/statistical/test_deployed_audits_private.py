"""Deployed-path audits of seed 000's entry points, and the planted defects they catch.

Each audit calls the public API as a user does (default arguments, SecureNoise) on worst-case
add/remove neighbours; a correct implementation fails with probability at most alpha = 1e-6.
The planted-defect tests put a real defect into the same code path and show that the same audit
fails, so a passing audit means something.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

import privcal.private.source as source_module
from privcal.audits import available_audits, run_audit
from privcal.metrics.statistics import clipped_nll_sum
from privcal.privacy import SeededNoise, laplace

# the audits refit private temperatures on 40 rows thousands of times: each fit is
# noise-dominated and says so, which is beside the privacy claim; planted defects use seeded noise
pytestmark = [
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


def test_planted_seeded_noise_reused_is_caught(monkeypatch: Any) -> None:
    """A deployment that reseeds its noise with the same seed on every fit is not private: the
    added row then moves the released bin value deterministically."""
    monkeypatch.setattr(source_module, "resolve_noise", lambda noise, owner: SeededNoise(0))
    report = run_audit("private-histogram-binning", runs=300)
    assert not report.passed, str(report)
    assert report.epsilon_lower > 2 * report.epsilon  # deterministic outputs: far off


def test_planted_unclipped_nll_is_caught(monkeypatch: Any) -> None:
    """Dropping the clip makes the added row's NLL (about 50) exceed the sensitivity B = 10."""

    def unclipped(logits: Any, labels: Any, temperature: Any, bound: Any) -> Any:
        return clipped_nll_sum(logits, labels, temperature, None)

    monkeypatch.setattr(source_module, "clipped_nll_sum", unclipped)
    report = run_audit("datasource-clipped-nll-sum", runs=2000)
    assert not report.passed, str(report)


def test_planted_exact_curve_increments_are_caught(monkeypatch: Any) -> None:
    """A curve query that puts noise on the anchor value only and releases the increments
    exact: the added row's increments then tell D' from D with certainty."""

    def anchor_only(value: Any, sensitivity: float, epsilon: float, noise: Any = None) -> Any:
        out, guarantee = laplace(value, sensitivity, epsilon, noise)
        v = np.asarray(value, dtype=float)
        return (np.concatenate([np.atleast_1d(out)[:1], v[1:]]) if v.ndim else out), guarantee

    seeds = itertools.count(100)  # seeded noise only makes the 2 x 960 queries fast
    monkeypatch.setattr(source_module, "resolve_noise", lambda n, o: SeededNoise(next(seeds)))
    monkeypatch.setattr(source_module, "laplace", anchor_only)
    report = run_audit("datasource-accuracy-gap-curve", runs=800)
    assert not report.passed, str(report)
    assert report.epsilon_lower > 1.5 * report.epsilon  # the true loss is unbounded


def test_planted_split_increment_sensitivity_is_caught(monkeypatch: Any) -> None:
    """NLL-T's increments priced as if the bound B + min(B, log C) were shared out over the 16
    coordinates (B / k each, a budget-split slip): the valley row moves them by 9.6 in L1,
    13 times the noise the defect pays for."""
    real = source_module.nll_curve_sensitivity
    monkeypatch.setattr(source_module, "nll_curve_sensitivity", lambda b, c: real(b, c) / 16)
    seeds = itertools.count(300)  # seeded noise only makes the 2 x 960 queries fast
    monkeypatch.setattr(source_module, "resolve_noise", lambda n, o: SeededNoise(next(seeds)))
    report = run_audit("datasource-clipped-nll-increments", runs=800)
    assert not report.passed, str(report)

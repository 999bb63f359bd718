"""Deployed-path audits of DP-TS / DP-PS pass with the default noise; planted defects fail them.

The audits (``privcal.audits.training``) fit ``DPTemperatureScaling`` / ``DPPlattScaling`` as a
user does on add/remove neighbours (one extreme row added). Two planted defects must be caught
by the same audits:

* seeded noise reused: every fit runs with ``noise=SeededNoise(0), seed=0`` (here);
* unbounded influence: no logit bound and no per-example gradient clipping, so the extreme row
  dominates the fit while the claim still assumes sensitivity ``C`` (registered with the audits
  and run by ``tests/audits/test_audit_plants.py``).
"""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("opacus")

import privcal.audits.training as audits_training  # noqa: E402
from privcal.audits import run_audit  # noqa: E402
from privcal.privacy import SeededNoise  # noqa: E402

pytestmark = pytest.mark.statistical

torch.set_num_threads(1)
AUDITS = ["dp-temperature-scaling", "dp-platt-scaling"]
CLASSES = {"dp-temperature-scaling": "DPTemperatureScaling", "dp-platt-scaling": "DPPlattScaling"}


@pytest.mark.slow
@pytest.mark.parametrize("name", AUDITS)
def test_audit_passes_with_default_noise(name: str) -> None:
    rep = run_audit(name)
    assert rep.passed, str(rep)
    assert rep.epsilon == pytest.approx(audits_training.AUDIT_EPSILON, rel=0.02)
    assert rep.epsilon <= audits_training.AUDIT_EPSILON
    assert "add/remove" in rep.relation and "number of classes" in rep.relation


@pytest.mark.parametrize("name", AUDITS)
def test_seeded_noise_reused_fails(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    base = getattr(audits_training, CLASSES[name])

    class Seeded(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, noise=SeededNoise(0), seed=0, **kwargs)

    Seeded.__name__ = base.__name__
    monkeypatch.setattr(audits_training, CLASSES[name], Seeded)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rep = run_audit(name, runs=150)
    assert not rep.passed, str(rep)

"""Every registered audit has planted defects, catches each of them, and is sized to see one.

Parametrised over the registry (:func:`privcal.audits.available_audits`), so an audit added
without a plant, or with a plant it does not catch, fails here:

* each audit registers at least one :class:`~privcal.audits.Plant`;
* each plant, planted into the real code path by its patch, makes the same audit fail
  (``epsilon_lower`` above the claim read from the entry point's own report) at the runs the
  plant states (where that is below the audit's default, the plant's definition says why it
  suffices), and every patched attribute is restored afterwards;
* the run-size rule: at its default runs, the largest bound the audit can report
  (:func:`~privcal.privacy.audit.max_epsilon_lower` with its number of events) is at least twice
  the claimed epsilon, so a defect that doubles the privacy loss is within its reach.

A correct release fails an audit with probability at most ``alpha = 1e-6``; a plant's audit is
unseeded (SecureNoise, as users call it) and is caught with the margins stated at each plant.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from privcal.audits import available_audits, get_audit
from privcal.audits.plants import patched
from privcal.privacy.audit import audit_dp, max_epsilon_lower

pytestmark = [
    pytest.mark.statistical,
    pytest.mark.filterwarnings("ignore::privcal.private.NoiseDominatedWarning"),
    pytest.mark.filterwarnings("ignore::privcal.privacy.InsecureNoiseWarning"),
    pytest.mark.filterwarnings("ignore:Optimal order is the"),
]

AUDITS = available_audits()


def _plant_cases() -> list[object]:
    cases = []
    for name, spec in AUDITS.items():
        for plant in spec.plants:
            marks = [pytest.mark.slow] if spec.slow else []
            cases.append(pytest.param(name, plant, marks=marks, id=f"{name}:{plant}"))
    return cases


@pytest.mark.parametrize("name", sorted(AUDITS))
def test_every_audit_has_a_plant(name: str) -> None:
    spec = AUDITS[name]
    assert spec.plants, f"audit {name!r} registers no planted defect"
    for plant in spec.plants.values():
        assert plant.summary and callable(plant.patch)
        assert plant.runs is None or plant.runs >= 100  # DeployedAudit.run's minimum


@pytest.mark.parametrize("name", sorted(AUDITS))
def test_default_runs_can_report_twice_the_claim(name: str) -> None:
    spec = AUDITS[name]
    assert spec.max_epsilon() >= 2.0 * spec.epsilon, (name, spec.runs, spec.max_epsilon())


@pytest.mark.parametrize(("name", "plant"), _plant_cases())
def test_plant_is_caught(name: str, plant: str) -> None:
    spec = get_audit(name)
    report = spec.run(runs=spec.plants[plant].runs, plant=plant)
    print(f"{name} --plant {plant}: {report}")
    assert not report.passed, str(report)
    assert report.epsilon_lower > report.epsilon
    # the registered budget is the one the entry point reports (DP-SGD's may spend a little less)
    assert 0.98 * spec.epsilon <= report.epsilon <= spec.epsilon * (1 + 1e-6)
    assert report.result.counts.size <= spec.events  # the Bonferroni factor max_epsilon assumes


def _patch_targets() -> list[object]:
    """Every module and class a registered plant patches (the test below checks the list)."""
    import privcal.conformal.private.estimator as conformal_estimator
    import privcal.conformal.private.risk as conformal_risk
    import privcal.conformal.quantile as conformal_quantile
    from privcal.federated import simulation
    from privcal.federated.methods import conformal as fed_conformal
    from privcal.federated.methods.newton import ScalingMethod
    from privcal.federated.methods.temperature import FedTemp
    from privcal.privacy import measurement as measurement_module
    from privcal.privacy.distributed import DistributedPlan, ShareLaw
    from privcal.private import DataSource
    from privcal.private import source as source_module
    from privcal.private import vocabulary as vocabulary_module

    targets: list[object] = [
        source_module,
        vocabulary_module,
        measurement_module,
        DataSource,
        ShareLaw,
        DistributedPlan,
        simulation,
        ScalingMethod,
        FedTemp,
        conformal_estimator,
        conformal_quantile,
        conformal_risk,
        fed_conformal,
        fed_conformal.FedConformal,
    ]
    try:
        from privcal.federated.flower import task

        targets.append(task)
    except ImportError:
        pass
    try:
        from opacus.optimizers import DPOptimizer

        import privcal.training.recalibration as recalibration

        targets += [recalibration, DPOptimizer]
    except ImportError:
        pass
    return targets


def _snapshot(targets: list[object]) -> list[dict[str, object]]:
    return [dict(vars(t)) for t in targets]


def _changed(before: list[dict[str, object]], after: list[dict[str, object]]) -> list[str]:
    return [
        name
        for b, a in zip(before, after, strict=True)
        for name in set(b) | set(a)
        if b.get(name, b) is not a.get(name, a)
    ]


@pytest.mark.parametrize(
    ("name", "plant"), [(n, p) for n, spec in sorted(AUDITS.items()) for p in spec.plants]
)
def test_plant_patches_the_library_and_restores_it(name: str, plant: str) -> None:
    targets = _patch_targets()
    before = _snapshot(targets)
    with AUDITS[name].plants[plant].patch():
        inside = _snapshot(targets)
    assert _changed(before, inside), "the plant patched none of the library's modules"
    assert _changed(before, _snapshot(targets)) == []


def test_unknown_plant_is_refused_naming_the_known_ones() -> None:
    spec = get_audit("datasource-count")
    with pytest.raises(ValueError, match="Known plants: exact-release"):
        spec.run(runs=100, plant="no-such-defect")


def test_patched_restores_everything_on_error() -> None:
    class Base:
        def inherited(self) -> str:
            return "real"

    class Target(Base):
        @classmethod
        def build(cls) -> str:
            return "real"

    module = type("M", (), {})()
    module.f = "real"  # type: ignore[attr-defined]
    cleared: list[int] = []
    with (
        pytest.raises(RuntimeError),
        patched(
            (Target, "build", classmethod(lambda cls: "planted")),
            (Target, "inherited", lambda self: "planted"),
            (module, "f", "planted"),
            clear=lambda: cleared.append(1),
        ),
    ):
        assert Target.build() == "planted" and module.f == "planted"  # type: ignore[attr-defined]
        assert Target().inherited() == "planted"
        raise RuntimeError
    assert Target.build() == "real" and module.f == "real"  # type: ignore[attr-defined]
    assert "inherited" not in vars(Target) and Target().inherited() == "real"
    assert isinstance(vars(Target)["build"], classmethod) and cleared == [1, 1]


@pytest.mark.parametrize(("runs", "events"), [(100, 1), (150, 5), (1000, 20)])
def test_max_epsilon_lower_is_what_complete_separation_shows(runs: int, events: int) -> None:
    """Two neighbours that never share an output reach exactly the ceiling."""
    edges = np.linspace(0.2, 0.8, events - 1) if events > 1 else None
    result = audit_dp(np.zeros(runs), np.ones(runs), edges if edges is not None else [0.5], 1.0)
    m = result.counts.size
    assert result.epsilon_lower == pytest.approx(max_epsilon_lower(runs, 1e-6, m), rel=1e-9)


def test_max_epsilon_lower_matches_the_issue() -> None:
    """Issue 31: 100 runs per side at a 1e-6 level (per bound) report at most about 1.9."""
    assert max_epsilon_lower(100, 4e-6, 1) == pytest.approx(math.log(0.871 / 0.129), abs=0.01)
    assert max_epsilon_lower(100, 1e-6, 20) < 2.0 <= max_epsilon_lower(150, 1e-6, 20, 1e-5)


def test_privacy_doc_lists_every_audit_and_plant() -> None:
    """docs/privacy.md's table of audits and plants names every registered audit and plant."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "privacy.md").read_text("utf-8")
    table = doc[doc.index("### Positive controls") :]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    for name, spec in AUDITS.items():
        row = next((r for r in rows if _names_audit(r.split(" | ")[0], name)), None)
        assert row is not None, f"docs/privacy.md has no row for audit {name!r}"
        for plant in spec.plants:
            assert f"`{plant}`" in row, f"docs/privacy.md's row of {name!r} lacks plant {plant!r}"


def _names_audit(cell: str, name: str) -> bool:
    """Whether a first cell (``| `a`, `b` ``) lists ``name`` among its audits."""
    return f"`{name}`" in [part.strip(" |") for part in cell.split(",")]

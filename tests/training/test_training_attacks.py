"""An analyst who picks a DP trainer's arguments (not the ledger's budget) against the ledger:
the trainers must run no more privacy loss than they charge and state.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("opacus")

from privcal.privacy import BudgetExceededError, PrivacyOdometer  # noqa: E402
from privcal.training import DPSGDTrainer  # noqa: E402

torch.set_num_threads(1)
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:Optimal order is the")]


def test_dp_sgd_noise_is_sized_for_the_steps_it_runs() -> None:
    """77 steps an epoch (77 rows, batch 1), 3 epochs: Opacus's make_private_with_epsilon sized
    the noise for int(3 / (1 / 77)) = 230 steps and the trainer ran 231. Before the fix the run
    was (2.00176, 1e-5)-DP by its own accountant, above the target 2 it was asked for, while
    the ledger (budget 2) took 2.0 and said the budget held."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(77, 2)).astype(np.float32)
    y = (X[:, 0] > 0).astype(int)
    odo = PrivacyOdometer(2.0, delta_budget=1e-5)
    trainer = DPSGDTrainer(epsilon=2.0, delta=1e-5, epochs=3, batch_size=1, ledger=odo).fit(X, y)
    assert trainer.steps_ == 231 and trainer.steps_per_epoch_ == 77
    assert trainer.epsilon_ <= 2.0
    assert trainer.privacy_report_.epsilon <= odo.spent == 2.0


# ---------------------------------------------------------------- DPRecalibration and its ledger
def _pipeline_data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 300)
    return rng.normal(size=(300, 4)) + 1.5 * np.eye(3, 4)[y], y


def _pipeline(trainer_ledger: object, calibrator_ledger: object, eps: float = 3.0) -> object:
    from privcal.training import DPRecalibration, DPTemperatureScaling

    return DPRecalibration(
        DPSGDTrainer(epsilon=1.0, delta=1e-6, epochs=1, batch_size=60, ledger=trainer_ledger),
        DPTemperatureScaling(eps, 1e-6, epochs=2, ledger=calibrator_ledger),
        validation_ratio=0.2,
    )


def test_a_pipeline_charges_both_stages_to_its_ledger() -> None:
    """The trainer charges the data's ledger, the calibrator was given none. Before the fix the
    ledger took the trainer's 1.0 while the pipeline's own report stated epsilon 3 on the same
    data (the calibrator's stage, never charged): a third of the loss on record."""
    odo = PrivacyOdometer(10.0, delta_budget=1e-4)
    pipe = _pipeline(odo, None).fit(*_pipeline_data())
    assert pipe.privacy_report_.epsilon == pytest.approx(3.0, rel=0.01)
    assert odo.spent == pytest.approx(4.0)  # both stages (parallel would allow 3; never less)
    assert pipe.calibrator.ledger is None  # the estimator passed in is left as it was


def test_a_refused_pipeline_burns_nothing() -> None:
    """One ledger of budget 1.5 for a (1 + 1)-epsilon pipeline: before the fix the trainer was
    charged 1.0 and trained, then the calibrator was refused, so the ledger lost 1.0 and no
    model came out. Now the whole pipeline is checked before the first stage is charged."""
    odo = PrivacyOdometer(1.5, delta_budget=1e-4)
    with pytest.raises(BudgetExceededError):
        _pipeline(odo, odo, eps=1.0).fit(*_pipeline_data())
    assert odo.spent == 0.0 and odo.releases == []


def test_a_pipeline_with_a_ledger_refuses_an_uncharged_stage(tmp_path: Path) -> None:
    """A non-private calibrator (or a second ledger) would use the data off the ledger's record."""
    from privcal.calibrators import TemperatureScaling
    from privcal.training import DPRecalibration

    odo = PrivacyOdometer(10.0, ledger=tmp_path / "a.sqlite", delta_budget=1e-4)
    plain = DPRecalibration(DPSGDTrainer(epsilon=1.0, epochs=1, ledger=odo), TemperatureScaling())
    with pytest.raises(ValueError, match="one ledger"):
        plain.fit(*_pipeline_data())
    other = PrivacyOdometer(10.0, ledger=tmp_path / "b.sqlite", delta_budget=1e-4)
    with pytest.raises(ValueError, match="one ledger"):
        _pipeline(odo, other).fit(*_pipeline_data())
    assert odo.spent == other.spent == 0.0
    # the same file under another spelling is one ledger
    (tmp_path / "link.sqlite").symlink_to(tmp_path / "a.sqlite")
    _pipeline(str(tmp_path / "a.sqlite"), tmp_path / "link.sqlite").fit(*_pipeline_data())
    assert odo.spent == pytest.approx(4.0)


# ------------------------------------------------------------- the gradient's public denominator
@pytest.mark.parametrize("cls_name", ["DPSGDTrainer", "DPSGLDTrainer"])
def test_the_mean_gradient_divides_by_a_public_number(
    cls_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """24 and 23 rows at batch 8 both run 3 steps an epoch (declared public), but Opacus divides
    each noisy sum by int(n q): 8 on one neighbour, 7 on the other. Before the fix that exposed
    n beyond the declared steps: every step's noise std differed by 1/7 between the neighbours,
    KL(N(0, 1/8^2) || N(0, 1/7^2)) = 0.0097 nats per coordinate and step on top of the
    accountant's epsilon (with batch 64, 640 vs 639 rows: 2.4e-4, or 235 nats over a
    4800-parameter MLP's 200 steps). The denominator is now the public batch size."""
    from opacus.optimizers import DPOptimizer

    import privcal.training as training

    seen: list[float] = []
    scale = DPOptimizer.scale_grad

    def spy(self: DPOptimizer) -> None:
        seen.append(self.expected_batch_size)
        scale(self)

    monkeypatch.setattr(DPOptimizer, "scale_grad", spy)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(24, 2)).astype(np.float32)
    y = (X[:, 0] > 0).astype(int)
    cls = getattr(training, cls_name)
    for n in (24, 23):
        seen.clear()
        trainer = cls(epsilon=1.0, epochs=1, batch_size=8, n_classes=2).fit(X[:n], y[:n])
        assert trainer.steps_per_epoch_ == 3 and set(seen) == {8}, (n, seen)

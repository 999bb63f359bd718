"""An analyst who picks a DP trainer's arguments (not the ledger's budget) against the ledger:
the trainers must run no more privacy loss than they charge and state.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("opacus")

from privcal.privacy import PrivacyOdometer  # noqa: E402
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

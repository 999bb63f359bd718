"""DP-SGLD's plan (issue 13): defaults that spend the budget on any data size, and the preset.

The steps per epoch below are digits' 70% split (1257 rows), 20 000 and 60 000 rows at the
default batch of 64: on main the defaults refused all three ("the first step ... already exceeds
epsilon"). The plan's ``tau`` must spend at most epsilon by Opacus's RDP at all its integer
orders, be tight (1% less ``tau`` overspends), and its decaying noise must bracket the constant
noise multiplier DP-SGD finds for the same budget, rate and step count.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("opacus")

from opacus.accountants.analysis import rdp as rdp_analysis  # noqa: E402
from opacus.accountants.rdp import RDPAccountant  # noqa: E402

from privcal.training import DPSGLDTrainer  # noqa: E402
from privcal.training.sgld import (  # noqa: E402
    PLAN_ORDERS,
    PRESETS,
    auto_lr,
    plan_sgld_temperature,
    sgld_noise_multiplier,
)

pytestmark = pytest.mark.filterwarnings("ignore:Optimal order is the")
INTEGER_ORDERS = [float(a) for a in RDPAccountant.DEFAULT_ALPHAS if float(a).is_integer()]
DELTA = 1e-5


def _sigmas(tau: float, per_epoch: int, epochs: int = 20) -> list[float]:
    lr = auto_lr(epochs * per_epoch, 1.0)
    return [sgld_noise_multiplier(lr * math.exp(-0.028 * e), tau) for e in range(epochs)]


def _epsilon(tau: float, per_epoch: int, orders: list[float]) -> float:
    q = 1.0 / per_epoch
    rdp = sum(
        np.asarray(
            rdp_analysis.compute_rdp(q=q, noise_multiplier=s, steps=per_epoch, orders=orders)
        )
        for s in _sigmas(tau, per_epoch)
    )
    return float(rdp_analysis.get_privacy_spent(orders=orders, rdp=rdp, delta=DELTA)[0])


def test_plan_orders_are_opacus_orders() -> None:
    """A subset of the accountant's orders: the planned epsilon bounds the reported one."""
    assert set(PLAN_ORDERS) <= set(RDPAccountant.DEFAULT_ALPHAS)


@pytest.mark.parametrize(("per_epoch", "epsilon"), [(20, 8.0), (313, 1.0), (938, 8.0)])
def test_default_plan_spends_the_budget_on_any_size(per_epoch: int, epsilon: float) -> None:
    tr = DPSGLDTrainer("mlp", epsilon=epsilon)
    lr, tau, steps = tr._plan(per_epoch, 1.0 / per_epoch)
    assert steps == 20 * per_epoch  # DP-SGD's step count: the defaults never refuse
    assert lr == auto_lr(steps, 1.0)
    assert _epsilon(tau, per_epoch, INTEGER_ORDERS) <= epsilon
    assert _epsilon(tau / 1.02, per_epoch, list(PLAN_ORDERS)) > epsilon  # tight to 1%


def test_plan_noise_brackets_dp_sgd_noise() -> None:
    """Same budget, rate and steps: DP-SGD's constant sigma lies within DP-SGLD's decaying ones.

    DP-SGD's sigma is the constant one that spends epsilon in these steps, so it lies in
    ``(sigma_last, sigma_first)`` iff the constant ``sigma_first`` underspends and the constant
    ``sigma_last`` overspends.
    """
    per_epoch, eps = 20, 1.0
    tau = plan_sgld_temperature(0.5, 0.028, 20, per_epoch, 1 / per_epoch, eps, DELTA)
    sig = _sigmas(tau, per_epoch)

    def constant(sigma: float) -> float:
        rdp = rdp_analysis.compute_rdp(
            q=1 / per_epoch, noise_multiplier=sigma, steps=20 * per_epoch, orders=INTEGER_ORDERS
        )
        return float(rdp_analysis.get_privacy_spent(orders=INTEGER_ORDERS, rdp=rdp, delta=DELTA)[0])

    assert constant(sig[0]) < eps < constant(sig[-1])


def test_auto_lr_is_sgd_step_size_for_the_step_count() -> None:
    """``10 / (C sqrt(T))`` with ``T >= 400``: 0.5 on digits (20 x 20 steps), smaller with more."""
    assert auto_lr(400, 1.0) == 0.5 == auto_lr(100, 1.0)
    assert auto_lr(6260, 1.0) == pytest.approx(10 / math.sqrt(6260))
    assert auto_lr(1600, 0.5) == pytest.approx(2 * auto_lr(1600, 1.0))  # update <= lr C
    with pytest.raises(ValueError, match="'lr' parameter of DPSGLDTrainer"):
        DPSGLDTrainer(lr="fast").fit(np.zeros((10, 2)), np.arange(10) % 2)


def test_plan_refuses_an_unreachable_budget() -> None:
    with pytest.raises(ValueError, match="No temperature spends at most epsilon"):
        plan_sgld_temperature(0.5, 0.028, 2, 20, 0.05, 0.05, DELTA)


def test_preset_is_seed_004_and_overridable() -> None:
    tr = DPSGLDTrainer.from_preset("knolle2021-mnist", "cnn")
    assert tr.model == "cnn"
    assert (tr.temperature, tr.lr, tr.decay, tr.prenoise) == (6.08, 0.005, 0.028, 0.046)
    assert (tr.epsilon, tr.delta) == (0.5, 1e-5) == (PRESETS["knolle2021-mnist"]["epsilon"], 1e-5)
    auto = DPSGLDTrainer.from_preset("knolle2021-mnist", temperature="auto", lr=0.5)
    assert (auto.temperature, auto.lr, auto.prenoise) == ("auto", 0.5, 0.046)
    with pytest.raises(ValueError, match=r"'name' parameter of DPSGLDTrainer\.from_preset"):
        DPSGLDTrainer.from_preset("knolle2021")


def test_quoted_preset_refuses_with_the_fix() -> None:
    """sigma = sqrt(2 * 0.005 * 6.08) = 0.247: one step overspends; the message names the fix."""
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(200, 4)), rng.integers(0, 2, 200)
    with pytest.raises(ValueError, match=r"noise multiplier .*0\.247.*temperature='auto'"):
        DPSGLDTrainer.from_preset("knolle2021-mnist").fit(X, y)

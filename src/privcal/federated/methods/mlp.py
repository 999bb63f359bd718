"""FedCal (Peng et al. 2024, post-hoc): an order-preserving MLP scaler by parameter averaging."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from privcal.calibrators import Calibrator
from privcal.federated.calibrators import MLPScaling, mlp_init, mlp_nll_and_grad
from privcal.federated.methods.base import State
from privcal.federated.methods.newton import ScalingMethod

__all__ = ["FedCal"]


class FedCal(ScalingMethod):
    """FedCal (Peng et al. 2024, post-hoc): order-preserving MLP scaler, 2 hidden layers of 64.

    Parameter averaging only: the MLP's curvature has no compact summed form.
    """

    name: ClassVar[str] = "fedcal"
    updates: ClassVar[tuple[str, ...]] = ("parameter-averaging",)

    def __init__(self, update: str = "parameter-averaging", local_iters: int = 20) -> None:
        super().__init__(update, local_iters)

    def x0(self, c: int) -> np.ndarray:
        return mlp_init(c)

    def loss(self, x: np.ndarray, z: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        return mlp_nll_and_grad(x, z, y)

    def calibrator(self, state: State, c: int) -> Calibrator:
        cal = MLPScaling()
        cal.coef_, cal.n_classes_ = np.asarray(state["params"]).copy(), c
        return cal

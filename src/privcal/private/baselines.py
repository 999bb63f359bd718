"""The two baselines of seed 000 (Sec. 5.1): no recalibration, and recalibration on one source.

* :class:`NoRecalibration` predicts ``softmax(z)`` unchanged.
* :func:`one_source` fits the **non-private** :class:`~privcal.calibrators.TemperatureScaling`
  on the data of a single source only: that party needs no privacy for its own data, but has
  little of it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from privcal.calibrators.base import Calibrator, register
from privcal.calibrators.temperature import TemperatureScaling
from privcal.metrics.statistics import softmax

__all__ = ["NoRecalibration", "one_source"]


@register
class NoRecalibration(Calibrator):
    """The identity calibrator: ``predict_proba(z) = softmax(z)`` (the "no recalibration" row)."""

    def _fit(self, z: np.ndarray, y: np.ndarray) -> None:
        return None

    def _predict_proba(self, z: np.ndarray) -> np.ndarray:
        return softmax(z)


def one_source(logits: Any, labels: Any, objective: str = "nll", **kwargs: Any) -> Calibrator:
    """Seed 000's "one source" baseline: non-private temperature scaling on one source's data.

    Parameters
    ----------
    logits, labels
        The data of the one source (it calibrates on its own data, so no privacy is needed).
    objective : {"nll", "ece", "acc"}, default="nll"
        Objective of :class:`~privcal.calibrators.TemperatureScaling` (seed 000 uses the
        standard NLL temperature scaling).
    **kwargs
        Passed to :class:`~privcal.calibrators.TemperatureScaling` (e.g. ``t_range``).
    """
    cal = TemperatureScaling(objective=objective, **kwargs)  # type: ignore[arg-type]
    return cal.fit(logits, labels)

"""Threshold mechanisms on seed 002's utility at an adjusted level ``q~`` (the shared release).

``method="bounded-range"`` (Theorem BR) and ``method="angelopoulos2022"`` (seed 002) both release
the DP ``q~``-quantile of the calibration scores with
:func:`~privcal.conformal.private_quantile`'s exponential mechanism on the utility

.. math::  w_j = \\max(\\#\\{i : [s_i] < e_j\\}/q,\\; \\#\\{i : [s_i] > e_j\\}/(1-q)),

and differ only in the weights (``exp(-epsilon q(1-q) w_j)`` against
``exp(-epsilon w_j / (2 max(1/q, 1/(1-q))))``, both epsilon-DP under substitute with ``n``
public: derived in :mod:`privcal.conformal.quantile`), the grid and how ``q~`` is chosen.
:class:`LevelMechanism` holds what they share; a subclass gives ``weights``, the grid and
:meth:`~privcal.conformal.private.ThresholdMechanism.plan`.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from privcal.conformal.private.mechanism import Plan, ThresholdMechanism
from privcal.conformal.quantile import (
    _private_quantile,
    quantile_penalties,
    quantile_release,
    quantile_scale,
)
from privcal.privacy.guarantee import Release
from privcal.privacy.noise import NoiseSource

__all__ = ["LevelMechanism"]

#: Named in the (unreachable for validated scores) errors of the shared release.
_OWNER = "PrivateConformal"


class LevelMechanism(ThresholdMechanism):
    """The release, penalties and report lines of a mechanism at a level ``q~`` with ``gamma``.

    ``weights`` is the :func:`~privcal.conformal.private_quantile` weighting; ``level_source``
    says in the report how ``q~`` was computed.
    """

    tuning = ("gamma",)
    weights: ClassVar[str]
    level_source: ClassVar[str]

    def scale(self, plan: Plan) -> float:
        """:func:`~privcal.conformal.quantile.quantile_scale` at ``q~``."""
        return quantile_scale(plan.level, plan.weights)

    def penalties(self, plan: Plan, less: Any, upto: Any, n: Any) -> np.ndarray:
        """``w = max(less/q~, (n - upto)/(1-q~))``
        (:func:`~privcal.conformal.quantile.quantile_penalties`)."""
        return quantile_penalties(less, upto, n, plan.level)

    def release(
        self, scores: np.ndarray, plan: Plan, epsilon: float, noise: NoiseSource, source: str
    ) -> tuple[float, Release]:
        """The DP ``q~``-quantile (:data:`~privcal.conformal.quantile.QUANTILE` or
        :data:`~privcal.conformal.quantile.QUANTILE_BOUNDED_RANGE`), stated for substitute."""
        value, guarantee, scale = _private_quantile(
            scores, plan.level, epsilon, plan.edges, noise, _OWNER, plan.weights
        )
        record = quantile_release(
            plan.level, plan.n_bins, scale, guarantee.epsilon, source, plan.weights
        )
        return value, record

    def shortfall(self, plan: Plan) -> str:
        return f"q~ = {plan.level:.4g} >= 1"

    def tuning_terms(self, plan: Plan) -> list[str]:
        return [f"gamma = {plan.gamma:.6g}", f"level q~ = {plan.level:.6g} ({self.level_source})"]

"""Calibration metrics and the shared statistics behind them."""

from privcal.metrics.calibration import (
    Reliability,
    accuracy,
    adaptive_ece,
    brier,
    classwise_ece,
    coverage,
    ece,
    mce,
    nll,
    reliability,
    set_size,
)
from privcal.metrics.statistics import BinStats, calibration_bins, softmax

__all__ = [
    "BinStats",
    "Reliability",
    "accuracy",
    "adaptive_ece",
    "brier",
    "calibration_bins",
    "classwise_ece",
    "coverage",
    "ece",
    "mce",
    "nll",
    "reliability",
    "set_size",
    "softmax",
]

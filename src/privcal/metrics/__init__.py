"""Calibration metrics and the shared statistics behind them."""

from privcal.metrics import calibration
from privcal.metrics.calibration import *  # noqa: F403 -- every metric is this package's API
from privcal.metrics.statistics import BinStats, calibration_bins, softmax

__all__ = [*calibration.__all__, "BinStats", "calibration_bins", "softmax"]

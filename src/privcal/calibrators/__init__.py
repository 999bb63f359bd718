"""Non-private calibrators (one estimator per method), following scikit-learn's conventions."""

from privcal.calibrators.base import (
    Calibrator,
    CrossFitWarning,
    FitWarning,
    NotFittedError,
    calibrator_from_dict,
)
from privcal.calibrators.binning import BBQ, HistogramBinning, IsotonicCalibration
from privcal.calibrators.progress import FitProgress, fit_progress
from privcal.calibrators.scaling import (
    IterationLimitWarning,
    MatrixScaling,
    PlattScaling,
    VectorScaling,
)
from privcal.calibrators.temperature import BoundaryWarning, BoundedNLLWarning, TemperatureScaling

__all__ = [
    "BBQ",
    "BoundaryWarning",
    "BoundedNLLWarning",
    "Calibrator",
    "CrossFitWarning",
    "FitProgress",
    "FitWarning",
    "HistogramBinning",
    "IsotonicCalibration",
    "IterationLimitWarning",
    "MatrixScaling",
    "NotFittedError",
    "PlattScaling",
    "TemperatureScaling",
    "VectorScaling",
    "calibrator_from_dict",
    "fit_progress",
]

#: Calibrators by CLI name.
METHODS = {
    "temperature": lambda: TemperatureScaling("nll"),
    "nll-t": lambda: TemperatureScaling("nll"),
    "ece-t": lambda: TemperatureScaling("ece"),
    "acc-t": lambda: TemperatureScaling("acc"),
    "platt": PlattScaling,
    "vector": VectorScaling,
    "op-vector": lambda: VectorScaling(order_preserving=True),
    "matrix": MatrixScaling,
    "histogram": HistogramBinning,
    "histogram-classwise": lambda: HistogramBinning(mode="classwise"),
    "bbq": BBQ,
    "isotonic": IsotonicCalibration,
}

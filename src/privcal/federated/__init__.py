"""Federated calibration with user-level DP (seed 003), simulated or over Flower.

The ``federated`` extra (``flwr[simulation]``) is needed only for
:mod:`privcal.federated.flower` and :func:`simulate_flower` (privcal's Flower apps on Flower's
Simulation Engine); the partitioners, methods and simulator need NumPy and SciPy only.
"""

from privcal._params import renamed_aliases
from privcal.federated.dp import (
    DPConfig,
    clip_l2,
    clip_rows_l2,
    expected_cohort,
    federated_report,
    noise_multiplier,
)
from privcal.federated.flower.simulation import simulate_flower
from privcal.federated.methods import (
    METHODS,
    FedBBQ,
    FedBin,
    FedCal,
    FedMatrix,
    FedMethod,
    FedOPVector,
    FedTemp,
    FedVector,
    get_method,
)
from privcal.federated.partition import (
    dirichlet_partition,
    group_partition,
    iid_partition,
    split_clients,
    stratified_partition,
)
from privcal.federated.simulation import evaluate, simulate

__all__ = [
    "METHODS",
    "DPConfig",
    "FedBBQ",
    "FedBin",
    "FedCal",
    "FedMatrix",
    "FedMethod",
    "FedOPVector",
    "FedTemp",
    "FedVector",
    "clip_l2",
    "clip_rows_l2",
    "dirichlet_partition",
    "evaluate",
    "expected_cohort",
    "federated_report",
    "get_method",
    "group_partition",
    "iid_partition",
    "noise_multiplier",
    "simulate",
    "simulate_flower",
    "split_clients",
    "stratified_partition",
]

#: ``FedTemperature``, the old name of :class:`FedTemp`, for one release (DeprecationWarning).
__getattr__ = renamed_aliases("privcal.federated", {"FedTemperature": ("FedTemp", FedTemp)})

"""Mechanisms, noise sources, guarantees, composition, the privacy odometer and accountants.

Layer just above :mod:`privcal.data`; imports only numpy, scipy, opendp, dp_accounting and the
standard library. See ``docs/privacy.md`` for the privacy maps and composition rules.
"""

from privcal.privacy.guarantee import (
    Guarantee,
    PrivacyReport,
    Release,
    basic_composition,
    parallel_composition,
)
from privcal.privacy.mechanisms import (
    analytic_gaussian_sigma,
    exponential,
    gaussian,
    laplace,
)
from privcal.privacy.noise import NoiseSource, SecureNoise, SeededNoise
from privcal.privacy.odometer import BudgetExceededError, PrivacyOdometer

__all__ = [
    "BudgetExceededError",
    "Guarantee",
    "NoiseSource",
    "PrivacyOdometer",
    "PrivacyReport",
    "Release",
    "SecureNoise",
    "SeededNoise",
    "analytic_gaussian_sigma",
    "basic_composition",
    "exponential",
    "gaussian",
    "laplace",
    "parallel_composition",
]

"""Mechanisms, noise sources, guarantees, composition, the privacy odometer and accountants.

Layer just above :mod:`privcal.data`; imports only numpy, scipy, opendp, dp_accounting and the
standard library. See ``docs/privacy.md`` for the privacy maps and composition rules.
"""

from privcal.privacy.guarantee import (
    NOT_PRIVATE,
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
from privcal.privacy.noise import (
    InsecureNoiseWarning,
    NoiseSource,
    SecureNoise,
    SeededNoise,
    noise_kind,
    resolve_noise,
)
from privcal.privacy.odometer import BudgetExceededError, PrivacyOdometer, UnaccountedFitWarning

__all__ = [
    "NOT_PRIVATE",
    "BudgetExceededError",
    "Guarantee",
    "InsecureNoiseWarning",
    "NoiseSource",
    "PrivacyOdometer",
    "PrivacyReport",
    "Release",
    "SecureNoise",
    "SeededNoise",
    "UnaccountedFitWarning",
    "analytic_gaussian_sigma",
    "basic_composition",
    "exponential",
    "gaussian",
    "laplace",
    "noise_kind",
    "parallel_composition",
    "resolve_noise",
]

"""Validated inputs, readers and writers, and the data sets privcal makes itself."""

from privcal.data.digits import CORRUPTIONS, DigitsShift, digits_shift
from privcal.data.io import Scores, read_scores, write_scores
from privcal.data.paths import cache_dir, shared_data_dir
from privcal.data.synthetic import gaussian_2d
from privcal.data.validation import (
    PROBS_ATOL,
    ProbabilitiesAsLogitsWarning,
    RoundedProbabilityWarning,
    ZeroProbabilityWarning,
    check_labels,
    check_probs,
    check_scores,
    probs_to_logits,
)

__all__ = [
    "CORRUPTIONS",
    "PROBS_ATOL",
    "DigitsShift",
    "ProbabilitiesAsLogitsWarning",
    "RoundedProbabilityWarning",
    "Scores",
    "ZeroProbabilityWarning",
    "cache_dir",
    "check_labels",
    "check_probs",
    "check_scores",
    "digits_shift",
    "gaussian_2d",
    "probs_to_logits",
    "read_scores",
    "shared_data_dir",
    "write_scores",
]

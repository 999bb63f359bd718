"""Conformal prediction sets, private and non-private (seed 002).

* :mod:`~privcal.conformal.scores`: LAC and APS conformity scores (``lac_scores``,
  ``aps_scores``).
* :class:`SplitConformal`: split conformal prediction with the exact rank
  ``ceil((n+1)(1-alpha))``.
* :func:`private_quantile`: the epsilon-DP quantile (exponential mechanism over bin edges, with
  the sensitivity ``max(1/q, 1/(1-q))``).
* :class:`PrivateConformal`: private prediction sets at the adjusted level ``adjusted_level``
  (Eq. 3) with ``optimal_gamma`` (Eq. 9-10) and ``optimal_bins`` (Algorithm 5).
* :mod:`~privcal.conformal.simulate`: vectorised simulation of many random calibration / test
  splits (the statistical tests and ``privcal bench angelopoulos2022``).

See ``docs/conformal.md``.
"""

from privcal.conformal._base import FullSetWarning, NotFittedError
from privcal.conformal.private import (
    CANDIDATE_BINS,
    PrivateConformal,
    adjusted_level,
    coverage_upper_bound,
    min_calibration_size,
    optimal_bins,
    optimal_gamma,
)
from privcal.conformal.quantile import private_quantile
from privcal.conformal.scores import SCORES, aps_scores, lac_scores
from privcal.conformal.split import SplitConformal, conformal_rank, conformal_threshold

__all__ = [
    "CANDIDATE_BINS",
    "SCORES",
    "FullSetWarning",
    "NotFittedError",
    "PrivateConformal",
    "SplitConformal",
    "adjusted_level",
    "aps_scores",
    "conformal_rank",
    "conformal_threshold",
    "coverage_upper_bound",
    "lac_scores",
    "min_calibration_size",
    "optimal_bins",
    "optimal_gamma",
    "private_quantile",
]

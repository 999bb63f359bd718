"""Conformal prediction sets, private and non-private (seed 002).

* :mod:`~privcal.conformal.scores`: LAC and APS conformity scores (``lac_scores``,
  ``aps_scores``).
* :class:`SplitConformal`: split conformal prediction with the exact rank
  ``ceil((n+1)(1-alpha))``.
* :func:`private_quantile`: the epsilon-DP quantile (exponential mechanism over bin edges, with
  the sensitivity ``max(1/q, 1/(1-q))``); :func:`private_quantile_report` also returns its
  privacy report.
* :class:`PrivateConformal`: private prediction sets, three mechanisms
  (:mod:`~privcal.conformal.private`): ``"rank"`` (the default, localised first from ``n =
  LOCALIZE_MIN_N``: :mod:`~privcal.conformal.localize`), ``"bounded-range"`` and seed 002's
  ``"angelopoulos2022"``.
* :class:`RiskControl` and :class:`PrivateRiskControl`: conformal risk control (Angelopoulos et
  al. 2024) on the risk curve :func:`risk_curve` over a public grid of ``lambda``; the private
  one releases ``lambda`` by a sparse-vector search (:mod:`~privcal.conformal.private.risk`).
* :mod:`~privcal.conformal.simulate`: vectorised simulation of many random calibration / test
  splits (the statistical tests and ``privcal bench angelopoulos2022``).

See ``docs/conformal.md``.
"""

from privcal.conformal._base import FullSetWarning, NotFittedError
from privcal.conformal.localize import LOCALIZE_FRACTION, LOCALIZE_MIN_N
from privcal.conformal.private import (
    CANDIDATE_BINS,
    DEFAULT_LOGIT_BINS,
    METHODS,
    PrivateConformal,
    adjusted_level,
    bounded_range_level,
    coverage_upper_bound,
    min_calibration_size,
    optimal_bins,
    optimal_gamma,
    rank_slope,
    rank_target,
)
from privcal.conformal.private.risk import PrivateRiskControl
from privcal.conformal.quantile import logit_edges, private_quantile, private_quantile_report
from privcal.conformal.risk import RiskControl, risk_curve
from privcal.conformal.scores import SCORES, aps_scores, lac_scores
from privcal.conformal.split import SplitConformal, conformal_rank, conformal_threshold

__all__ = [
    "CANDIDATE_BINS",
    "DEFAULT_LOGIT_BINS",
    "LOCALIZE_FRACTION",
    "LOCALIZE_MIN_N",
    "METHODS",
    "SCORES",
    "FullSetWarning",
    "NotFittedError",
    "PrivateConformal",
    "PrivateRiskControl",
    "RiskControl",
    "SplitConformal",
    "adjusted_level",
    "aps_scores",
    "bounded_range_level",
    "conformal_rank",
    "conformal_threshold",
    "coverage_upper_bound",
    "lac_scores",
    "logit_edges",
    "min_calibration_size",
    "optimal_bins",
    "optimal_gamma",
    "private_quantile",
    "private_quantile_report",
    "rank_slope",
    "rank_target",
    "risk_curve",
]

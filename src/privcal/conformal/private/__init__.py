"""Private prediction sets: seed 002's Algorithms 3-5 and two sharper mechanisms.

:class:`PrivateConformal` releases one threshold ``e_J``, an edge of a public grid
``0 = e_0 < ... < e_m = 1``, by an exponential mechanism over the ``m`` edges ``e_1..e_m`` of the
calibration scores, and returns the sets ``{y : S(x, y) <= e_J}``. Three methods, one module each
behind one interface (:class:`ThresholdMechanism`, registered by ``method=`` in
:data:`MECHANISMS`):

====================== ============== ============================ ==============================
``method``              grid ("auto")  utility / weights            target
====================== ============== ============================ ==============================
``"rank"``              logit, 3915    rank penalty, Theorem R      ``k - G(k) >= (n+1)(1-alpha)``
``"bounded-range"``     logit, 3915    ``exp(-eps q(1-q) w_j)``     ``q~`` of Theorem BR
``"angelopoulos2022"``  uniform, m*    ``exp(-eps w_j/(2 Delta))``  ``q~`` of Eq. 3 (seed 002)
====================== ============== ============================ ==============================

The interface, :class:`Plan`, the registry, :func:`conformal_plan` and
:func:`coverage_upper_bound` are in :mod:`~privcal.conformal.private.mechanism`; Theorem L
(localisation, :mod:`privcal.conformal.localize`) on the rank mechanism in
:mod:`~privcal.conformal.private.localized`. From ``n = 4000`` (at moderate epsilon), ``"rank"``
first localises the threshold on a quarter of the calibration set. Measured on the shared
networks (``docs/conformal.md``, epsilon = 1, n = 5000, alpha = 0.1, 100 splits): ``"rank"`` sets
are 0-1.8% larger than split conformal's (one stage: 0-2.4%), ``"angelopoulos2022"`` sets are
the full label set for APS on every network. The logit grid
(:func:`~privcal.conformal.quantile.logit_edges`) depends on ``m`` alone, so it is public; it
resolves ``1 - s`` to 1.8% of itself everywhere, where an equal-width grid puts the 0.9-quantile
of confident networks' scores in its last bin (the full label set).

Neighbouring relation: **substitute one calibration example, ``n`` public.** The target ``k``,
``q~``, ``m*``, ``gamma*`` and the full-set branch are deterministic functions of ``n`` (``n =
95`` gives full sets and ``n = 96`` a finite threshold by default), so under add/remove these
jumps alone would reveal one example; with ``n`` fixed only the release sees the data, and each
mechanism's release is pure epsilon-DP. Proofs: docs/conformal.md#proofs.
"""

# The mechanisms register in this order: METHODS and the error messages list them so.
from privcal.conformal.private.rank import RANK, rank_release, rank_slope, rank_target

# isort: split
from privcal.conformal.private.bounded_range import BOUNDED_RANGE, bounded_range_level

# isort: split
from privcal.conformal.private.angelopoulos2022 import (
    ANGELOPOULOS2022,
    AUTHORS_CODE_BINS,
    CANDIDATE_BINS,
    M_GRIDS,
    adjusted_level,
    optimal_bins,
    optimal_gamma,
)

# isort: split
from privcal.conformal.private.estimator import PrivateConformal
from privcal.conformal.private.localized import localized_threshold, plan_localization
from privcal.conformal.private.mechanism import (
    DEFAULT_LOGIT_BINS,
    MECHANISMS,
    Plan,
    ThresholdMechanism,
    conformal_plan,
    coverage_upper_bound,
    get_mechanism,
    register_mechanism,
)
from privcal.conformal.private.sample_size import min_calibration_size

#: Methods of :class:`PrivateConformal`, the names of the registered mechanisms (module
#: docstring).
METHODS: tuple[str, ...] = tuple(MECHANISMS)

__all__ = [
    "ANGELOPOULOS2022",
    "AUTHORS_CODE_BINS",
    "BOUNDED_RANGE",
    "CANDIDATE_BINS",
    "DEFAULT_LOGIT_BINS",
    "MECHANISMS",
    "METHODS",
    "M_GRIDS",
    "RANK",
    "Plan",
    "PrivateConformal",
    "ThresholdMechanism",
    "adjusted_level",
    "bounded_range_level",
    "conformal_plan",
    "coverage_upper_bound",
    "get_mechanism",
    "localized_threshold",
    "min_calibration_size",
    "optimal_bins",
    "optimal_gamma",
    "plan_localization",
    "rank_release",
    "rank_slope",
    "rank_target",
    "register_mechanism",
]

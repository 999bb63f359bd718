"""Private prediction sets: seed 002's Algorithms 3-5 and two sharper mechanisms.

:class:`PrivateConformal` releases one threshold ``e_J``, an edge of a public grid
``0 = e_0 < ... < e_m = 1``, by an exponential mechanism over the ``m`` edges ``e_1..e_m`` of the
calibration scores, and returns the sets ``{y : S(x, y) <= e_J}``. Three methods:

================== ============== ============================ ==================================
``method``          grid ("auto")  utility / weights            target
================== ============== ============================ ==================================
``"rank"``          logit, 3915    rank penalty, Theorem R      ``k - G(k) >= (n+1)(1-alpha)``
``"bounded-range"`` logit, 3915    ``exp(-eps q(1-q) w_j)``     ``q~`` of Theorem BR
``"angelopoulos2022"`` uniform,    ``exp(-eps w_j/(2 Delta))``  ``q~`` of Eq. 3 (seed 002)
                    ``m*``
================== ============== ============================ ==================================

From ``n = 4000`` (at moderate epsilon), ``"rank"`` first localises the threshold on a quarter
of the calibration set and runs Theorem R on the rest with only the grid's edges near it (Theorem L,
:mod:`privcal.conformal.localize`; ``localize=None`` keeps one stage). Measured on the shared
networks (``docs/conformal.md``, epsilon = 1, n = 5000, alpha = 0.1, 100 splits): ``"rank"``
sets are 0-1.8% larger than split conformal's (one stage: 0-2.4%), ``"angelopoulos2022"`` sets
are the full label set for APS on every network. Notation: ``c_j = #{i : s_i <= e_j}``
(``c_0 = 0``, ``c_m = n``) and ``[s]`` the right edge of the bin of ``s``, so ``s <= e_j`` iff
``[s] <= e_j``.

The logit grid (default)
------------------------
:func:`~privcal.conformal.quantile.logit_edges`: inner edges evenly spaced in ``logit(s)`` on
``[-37, 37]`` (``m = 4096`` requested, 3915 distinct doubles). It depends on ``m`` alone, so it
is public. Scores of confident networks crowd near 1 (APS: ``p_max``) or near 0 (LAC of a 99%
accurate model): an equal-width grid puts the 0.9-quantile of such scores in its last bin, whose
right edge is 1, the full label set (what seed 002's Algorithm 5 does on every shared network for
APS); the logit grid resolves ``1 - s`` to 1.8% of itself everywhere. ``m = 4096`` is where the
measured set sizes stop improving: ``m = 1024`` loses up to 1.5% (coarser bins), ``m = 16384``
gains nothing (the guard ``S`` grows with ``log m``).

Theorem R (``method="rank"``, the default)
-----------------------------------------
*Mechanism.* Target rank ``k`` and slope ``r > 0`` (public). The penalty of edge ``j`` is

.. math::  p_j = \\max(c_{j-1} - k + 1,\\; r (k - c_j),\\; 0),

zero at the edge ``j_0`` of the bin holding the ``k``-th smallest score (``c_{j_0-1} < k \\le
c_{j_0}``), ``+1`` per order statistic passed above it, ``+r`` per order statistic missing below
it (:func:`~privcal.conformal.quantile.rank_penalties`). The release is ``e_J`` with
:math:`P(J = j) \\propto \\exp(-\\epsilon p_j / (1 + r))`.

*Privacy (substitute, n public).* Substituting ``s -> s'`` with ``[s] <= [s']`` (else swap the
neighbours) lowers every ``c_j`` by 0 or 1 (by 1 exactly for ``[s] <= e_j < [s']``). So the
first argument of the max moves by ``-1`` or ``0``, the second by ``0`` or ``+r``, the third not
at all, and (as :math:`\\max(x + a, y + b, z) - \\max(x, y, z)` lies between the smallest and the
largest move) every :math:`p_j(D') - p_j(D) \\in [-1, r]`: one interval of width ``1 + r`` for
all ``j``. The bounded-range argument (:mod:`privcal.conformal.quantile`, "Bounded range") makes
the weights :math:`\\exp(-\\epsilon p_j/(1+r))` pure epsilon-DP. ``k`` depends on ``n``, which is
public (substitute); under add/remove with a fixed ``k`` the moves are ``[0, 1]`` and
``[-r, 0]``, the same width, but ``k`` is a function of ``n`` here, so add/remove is not claimed.

*Deficit tail.* Let ``D = k - c_J`` (how many order statistics the release misses). The
edges with ``c_j <= k - t`` have ``p_j >= r t``, so each weighs at most :math:`e^{-\\lambda t}`,
:math:`\\lambda = \\epsilon r/(1 + r)`; there are at most ``m - 1`` of them (``j_0`` is not
one), and ``p_{j_0} = 0``. With ``A`` their total weight and ``B`` that of the others but
``j_0``, :math:`P(D \\ge t \\mid \\text{data}) = A/(1 + A + B) \\le A/(1 + A)`, increasing in
``A``, so for every data set and ``t >= 1``

.. math::  P(D \\ge t \\mid \\text{data}) \\le \\pi_t = \\frac{x_t}{1 + x_t},\\qquad
           x_t = (m - 1)\\, e^{-\\lambda t}.

*Coverage.* Calibration and test scores i.i.d. (as in seed 002; ties and atoms allowed), ``F``
their CDF and ``g_j = F(e_j)``, fixed numbers. Leave one out over the ``n + 1`` points: for each
point ``i`` let ``J^(i)`` be the release on the other ``n``; the test point is missed when
``e_J < s_{n+1}``, and by exchangeability

.. math::

    P(Y \\notin C(X)) = \\frac{1}{n+1} \\sum_{i=1}^{n+1} P(e_{J^{(i)}} < s_i)
        = E\\Big[\\frac{1}{n+1} \\sum_{\\rho=1}^{n+1} \\theta_\\rho\\Big],

with ``theta_rho`` the chance (over the mechanism, given all ``n + 1`` scores) that the point of
rank ``rho`` (ties broken by index) is missed when it is the one left out. Let
``C_j = #{i <= n+1 : s_i <= e_j}`` be the counts of all ``n + 1`` points, each
``~ Bin(n+1, g_j)``. Take ``rho <= k`` and its bin ``b`` (``e_{b-1} < s_(rho) <= e_b``). The
edges ``j < b`` lie below ``s_(rho)``, so only points of rank ``< rho`` are below them:
``C_j <= rho - 1 <= k - 1``, leaving ``rho`` out does not change their counts, and their
penalty is exactly ``r (k - C_j)`` (weight ``e^{-lambda (k - C_j)}``). The zero-penalty edge of
the other ``n`` points (it holds their ``k``-th smallest, so its count is ``>= k``) is not among
them and weighs 1. So ``theta_rho <= h(A_rho)`` with :math:`h(a) = a/(1+a)` (increasing, concave)
and

.. math::  A_\\rho = \\sum_{j < m,\\; C_j \\le \\rho - 1} e^{-\\lambda (k - C_j)}
           \\le x_t = (m - 1)\\, e^{-\\lambda t},\\qquad t = k - \\rho + 1,

a function of the counts of the ``n + 1`` points alone. The points of rank ``rho > k`` are
charged ``theta_rho <= 1``. Jensen gives :math:`E\\,h(A_\\rho) \\le h(E A_\\rho)` and

.. math::

    E A_\\rho = \\sum_{j < m} \\sum_{l \\le k - t} P(C_j = l)\\, e^{-\\lambda (k - l)}
        \\le \\beta_t = (m - 1) \\sum_{d \\ge t} e^{-\\lambda d}\\, b(k - d),\\qquad
    b(l) = \\max_g P(\\mathrm{Bin}(n+1, g) = l)

(the mode, at ``g = l/(n+1)``). So :math:`P(Y \\notin C(X)) \\le (n + 1 - k + G)/(n+1)`, i.e.

.. math::

    P(Y \\in C(X)) \\ge \\frac{k - G}{n + 1},\\qquad
    G = \\sum_{t = 1}^{k} h\\big(\\min(x_t, \\beta_t)\\big)
      \\le S = \\sum_{t \\ge 1} \\frac{x_t}{1 + x_t}

(``_rank_guard``: summed numerically, the far tails bounded by geometric series, ``b`` rounded
up), and :func:`rank_target` returns the smallest ``k`` with ``k - G(k) >= (n+1)(1-alpha)``,
which gives coverage ``>= 1 - alpha``; when no ``k <= n`` qualifies no threshold is valid and
the sets are full. ``G`` is where the binomial spread of the data helps: one data set can put
all ``m - 1`` edges at one deficit (``S``, the bound used before, charges that for every ``t``),
but where the ``k``-th order statistic falls varies by ``~sqrt(n alpha (1-alpha))`` ranks, so on
average an edge sits at a given deficit with probability ``<= b ~ 1/sqrt(2 pi n alpha(1-alpha))``
(``G = 6.1`` against ``S = 10.5`` ranks at ``n = 5000``, ``m = 3915``, epsilon 1, ``r = 3``;
``G`` tends to ``S`` for small ``n``). No failure probability is traded away (seed 002 gives up
``gamma alpha`` of coverage to a high-probability bound): the deficit is bounded in expectation.
(An earlier form of this proof coupled the scores to uniforms and bounded the spacings below the
``k``-th calibration score; it needed an extra term ``e^{-lambda t} b(k-t+1)`` in ``beta_t`` for
the spacing that straddles an edge, and gave ``G = 6.7``, ``k = 4508``. The leave-one-out form
needs no spacings. Neither credits the points above rank ``k`` that the release covers, which
``bench/conformal_guard_slack.py`` measures.)

*Upper bound.* Symmetrically, edges with ``c_{j-1} >= k - 1 + u`` have ``p_j >= u``; with
``U = c_{J-1} - k + 1``, ``rho_u = y_u/(1 + y_u)`` and ``y_u = (m-1) e^{-epsilon u/(1+r)}``,
``e_J <= [Z]_(c_{J-1}+1)`` and seed 002's Lemma 2 give coverage
``<= (k + sum_u rho_u)/(n+1) + p_max`` (``p_max``: the largest bin probability),
:func:`coverage_upper_bound` with ``method="rank"``.

*Slope.* ``S`` shrinks and the overshoot above ``k`` grows with ``r``; :func:`rank_slope` takes
the ``r`` in ``0.25..20`` minimising ``S + 1/(e^{epsilon/(1+r)} - 1)`` (the overshoot when each
rank step has one edge; a function of ``m`` and epsilon alone): ``r = 3`` at ``m = 3915``,
epsilon = 1. At ``n = 5000``, alpha = 0.1: ``k = 4507`` (``G = 6.1``) against ``ceil(5001 *
0.9) = 4501`` (``4512`` with the cruder guard ``S``); seed 002's level (``m* = 256``) is
``q~ = 0.9059``, i.e. rank 4530, and its realised overshoot is larger still.

Theorem BR (``method="bounded-range"``)
--------------------------------------
Seed 002's utility ``w_j`` with the bounded-range weights :math:`\\exp(-\\epsilon q(1-q) w_j)`
(derived in :mod:`privcal.conformal.quantile`: epsilon-DP under both relations). With
probability ``>= 1 - delta`` the release has ``#{s_i <= e_J} > qn - log(m/delta)/(epsilon q)``.
On that event ``#{s_i <= e_J} >= K`` whenever ``qn - log(m/delta)/(epsilon q) >= K - 1``, and
then ``F(e_J) >= F(Z_(K))``; off it ``F >= 0``. So coverage ``>= K/(n+1) - delta``, which is
``>= 1 - alpha`` for ``K = ceil((n+1)(1 - alpha + delta))``. With ``delta = gamma alpha``,
``b = (K-1)/n`` and ``c = log(m/(gamma alpha))/(epsilon n)`` the smallest such level is
``q~ = (b + sqrt(b^2 + 4c))/2`` (:func:`bounded_range_level`; ``gamma`` minimises it over a
public grid). (Seed 002's proof multiplies by ``1 - gamma alpha`` instead of subtracting it,
which needs the event to be independent of the order statistic; the subtraction is always
valid and costs ``gamma alpha^2``.) At ``n = 5000``, epsilon = 1, alpha = 0.1, ``m = 3915``:
``q~ = 0.9039`` against seed 002's 0.9070 at the same ``m``.

Seed 002 (``method="angelopoulos2022"``)
---------------------------------------

With ``method="angelopoulos2022"``, :class:`PrivateConformal` releases the DP quantile of the
calibration scores (:func:`~privcal.conformal.private_quantile`, ``weights="sensitivity"``) at
the *adjusted level*

.. math::

    \\tilde q = \\frac{(n+1)(1-\\alpha)}{n(1-\\gamma\\alpha)}
              + \\frac{2}{\\epsilon n}\\log\\frac{m}{\\gamma\\alpha}          \\qquad (3)

which compensates for the noise of the exponential mechanism: by Lemma 1 the release has
empirical level at least :math:`\\tilde q - 2\\log(m/(\\gamma\\alpha))/(\\epsilon n)` except with
probability :math:`\\gamma\\alpha`, and the conformal argument then gives coverage
:math:`\\ge 1 - \\alpha` (Theorem 2), and at most

.. math::

    1 - (1-\\gamma)\\alpha + (1-\\gamma\\alpha)\\Big(2 p^m_{\\max} +
    \\frac{2(1 + \\max(\\tilde q/(1-\\tilde q), 1))\\log(m/(\\gamma\\alpha))}{(n+1)\\epsilon}\\Big)

(Theorem 3, :func:`coverage_upper_bound`). ``gamma`` and ``m`` are tuning parameters:

* :func:`optimal_gamma`: :math:`\\partial\\tilde q/\\partial\\gamma = 0` is the quadratic
  :math:`\\alpha^2\\gamma^2 - (\\alpha(1-\\alpha)\\epsilon(n+1)/2 + 2\\alpha)\\gamma + 1 = 0`
  (Eq. 9); :math:`\\gamma^*` minimises :math:`\\tilde q` over its roots in (0, 1) and ``1e-12``
  (Eq. 10). When no root lies in (0, 1), ``q~`` decreases on (0, 1) towards
  ``(n+1)/n + 2 log(m/alpha)/(epsilon n) > 1``, so every ``gamma`` gives ``q~ > 1`` and the
  fallback is harmless (full sets either way).
* :func:`optimal_bins`: Algorithm 5. Candidates: ``CANDIDATE_BINS``, 50 values log-spaced from
  ``10^2`` to ``10^6`` and rounded to integers (the grid of App. C). ``n`` scores are simulated
  from U(0, 1) with ``numpy.random.default_rng(seed)``; for each candidate ``m`` (with its
  :math:`\\gamma^*`) the **expected** output of Algorithm 3 on them is computed exactly from the
  mechanism's weights (not one noisy draw, so the choice is deterministic given ``seed`` and not
  at the mercy of a single draw), and the ``m`` with the smallest expected threshold wins
  (smallest ``m`` on ties). Candidates with :math:`\\tilde q \\ge 1` are skipped. Only public
  quantities (``n``, ``alpha``, ``epsilon``) are used, so this costs no privacy.

When :math:`\\tilde q \\ge 1` (or ``k > n``: ``n`` too small for ``epsilon`` and ``alpha``) no
valid private threshold exists: the estimator warns, names the smallest ``n`` that works
(:func:`min_calibration_size`) and returns the full label set instead of a fake cutoff.

Neighbouring relation: ``n`` is public
--------------------------------------
The target ``k``, :math:`\\tilde q`, :math:`m^*`, :math:`\\gamma^*` and the full-set branch are
deterministic functions of ``n`` (and of the public ``alpha`` and ``epsilon``): by default
(``"rank"``) ``n = 95`` gives full sets and ``n = 96`` a finite threshold at ``alpha = 0.1``,
``epsilon = 1`` (``212`` / ``213`` for ``"angelopoulos2022"``), and ``k`` moves with ``n``; for
``"angelopoulos2022"``, ``n = 301`` gives ``m* = 121`` and ``n = 302`` gives ``m* = 100``,
whose edges share only 1.0. Under add/remove neighbours ``n``
is private and these jumps alone reveal whether one example is present (the planted-defect test
``tests/statistical/test_deployed_audits_conformal.py`` shows an audit estimating an unbounded
loss). As in seed 002, ``n`` is therefore **public** and the guarantee is stated for the
relation *substitute one calibration example* (``n`` fixed): then every quantity above is a
constant and only the exponential mechanism sees the data (Theorem R for ``"rank"``; the
sensitivity and range of ``w_j`` under substitute are derived in
:mod:`privcal.conformal.quantile`).
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import gammaln

from privcal._params import check_int, check_option, check_probability, check_real
from privcal.conformal._base import ConformalBase, FullSetWarning
from privcal.conformal.localize import (
    LOCALIZE_MIN_EPS_N1,
    LOCALIZE_MIN_GUARD,
    SOURCES,
    Localization,
    check_localize,
    localization,
    localized_release,
    partition,
    window_edges,
)
from privcal.conformal.quantile import (
    _private_quantile,
    _private_rank_quantile,
    bin_edges,
    quantile_release,
    quantile_scale,
    quantile_sensitivity,
    rank_quantile_release,
)
from privcal.conformal.split import conformal_rank
from privcal.exceptions import PrivcalWarning
from privcal.privacy.filter import pure_dp_curve
from privcal.privacy.guarantee import PrivacyReport, Release
from privcal.privacy.noise import NoiseSource, noise_kind, resolve_noise
from privcal.privacy.odometer import as_odometer

__all__ = [
    "AUTHORS_CODE_BINS",
    "CANDIDATE_BINS",
    "DEFAULT_LOGIT_BINS",
    "METHODS",
    "M_GRIDS",
    "Plan",
    "PrivateConformal",
    "adjusted_level",
    "bounded_range_level",
    "conformal_plan",
    "coverage_upper_bound",
    "min_calibration_size",
    "optimal_bins",
    "optimal_gamma",
    "rank_release",
    "rank_slope",
    "rank_target",
]

#: The candidate numbers of bins of :func:`optimal_bins` (App. C): 50 log-spaced values 1e2..1e6.
CANDIDATE_BINS: tuple[int, ...] = tuple(
    int(v) for v in np.unique(np.round(np.logspace(2, 6, 50)).astype(np.int64))
)
#: The candidates of the authors' code (``get_optimal_gamma_m`` in
#: ``core/private_conformal_utils.py`` of github.com/aangelopoulos/private_prediction_sets, from
#: the 2021-09-22 "code finalized" commit on): ``np.logspace(4, 6, 50).astype(int)``.
AUTHORS_CODE_BINS: tuple[int, ...] = tuple(
    int(v) for v in np.unique(np.logspace(4, 6, 50).astype(np.int64))
)
#: Named rules of :func:`optimal_bins` (``m_grid=``): the paper's text (App. C: 1e2..1e6, smallest
#: expected threshold) or the authors' code (1e4..1e6, smallest threshold of one noisy draw).
M_GRIDS: tuple[str, ...] = ("paper-text", "authors-code")

_GAMMA_FLOOR = 1e-12


def _n_bins(bins: Any, owner: str) -> int:
    if isinstance(bins, int | np.integer) and not isinstance(bins, bool):
        return check_int(bins, "bins", owner, low=2)
    return int(bin_edges(bins, owner).size - 1)


def adjusted_level(n: int, alpha: float, epsilon: float, bins: Any, gamma: float) -> float:
    """The adjusted level ``q~`` of Eq. 3 (may be ``>= 1``: then no private threshold exists).

    Parameters
    ----------
    n : int
        Number of calibration points, ``>= 1``.
    alpha : float
        Miscoverage in ``(0, 1)``.
    epsilon : float
        In ``(0, inf)``.
    bins : int or array_like
        ``m >= 2`` or the bin edges (only their number ``m`` matters).
    gamma : float
        In ``(0, 1)``: the failure probability ``gamma * alpha`` given to the mechanism.

    Examples
    --------
    >>> round(adjusted_level(5000, 0.1, 1.0, 1000, 0.01), 4)
    0.9066
    """
    owner = "adjusted_level"
    n = check_int(n, "n", owner, low=1)
    a = check_probability(alpha, "alpha", owner)
    eps = check_real(epsilon, "epsilon", owner, low=0.0, low_open=True)
    g = check_probability(gamma, "gamma", owner)
    m = _n_bins(bins, owner)
    return (n + 1) * (1 - a) / (n * (1 - g * a)) + 2.0 / (eps * n) * math.log(m / (g * a))


def _level(n: int, a: float, eps: float, m: int, g: float) -> float:
    return (n + 1) * (1 - a) / (n * (1 - g * a)) + 2.0 / (eps * n) * math.log(m / (g * a))


def _gamma(n: int, a: float, eps: float, m: int) -> float:
    b = a * (1 - a) * eps * (n + 1) / 2.0 + 2.0 * a
    disc = b * b - 4.0 * a * a
    cands = [_GAMMA_FLOOR]
    if disc >= 0:
        root = math.sqrt(disc)
        # the smaller root, written to avoid cancellation; the larger is > 1 (product 1/a^2)
        small = 2.0 / (b + root)
        cands += [g for g in (small, (b + root) / (2.0 * a * a)) if 0.0 < g < 1.0]
    return min(cands, key=lambda g: (_level(n, a, eps, m, g), g))


def optimal_gamma(n: int, alpha: float, epsilon: float, bins: Any) -> float:
    """``gamma*`` of Eq. 9-10: the minimiser of ``q~`` among the roots in (0, 1) and 1e-12.

    Examples
    --------
    >>> round(optimal_gamma(5000, 0.1, 1.0, 1000), 5)
    0.00444
    """
    owner = "optimal_gamma"
    n = check_int(n, "n", owner, low=1)
    a = check_probability(alpha, "alpha", owner)
    eps = check_real(epsilon, "epsilon", owner, low=0.0, low_open=True)
    return _gamma(n, a, eps, _n_bins(bins, owner))


def _bin_groups(
    u_sorted: np.ndarray, q: float, eps: float, m: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """The mechanism's law for sorted scores and ``m`` equal-width bins, grouped.

    All empty bins between two occupied bins share the same ``w`` (both counts are constant
    there), so the law is a mixture over at most ``2n + 1`` groups: each occupied bin (one
    candidate), each run of empty bins before it, and the trailing run. Returns each group's
    log-weight (shifted so its maximum is 0), its number of bins, and the occupied bins, the
    occupied bin before each, and the length of the trailing run.
    """
    n = u_sorted.size
    b = np.minimum(np.maximum(np.ceil(u_sorted * m).astype(np.int64) - 1, 0), m - 1)
    start = np.flatnonzero(np.concatenate(([True], b[1:] != b[:-1])))
    occ = b[start]  # occupied bins, increasing (0-based)
    before = start  # scores in bins < occ_l
    upto = np.concatenate((start[1:], [n]))  # scores in bins <= occ_l
    prev = np.concatenate(([-1], occ[:-1]))
    gap = occ - prev - 1  # empty bins strictly between prev and occ
    last = int(m - 1 - occ[-1])
    # w per group: occupied bins, runs of empty bins before them, the trailing run
    w = np.concatenate(
        (
            np.maximum(before / q, (n - upto) / (1.0 - q)),
            np.maximum(before / q, (n - before) / (1.0 - q)),
            [n / q],
        )
    )
    count = np.concatenate((np.ones(occ.size), gap, [last])).astype(np.float64)
    lw = w * (-eps / (2.0 * quantile_sensitivity(q)))
    lw -= lw.max()
    return lw, count, occ, prev, last


def _expected_threshold(u_sorted: np.ndarray, q: float, eps: float, m: int) -> float:
    """``E[e_J]`` under the mechanism's law for sorted scores and ``m`` equal-width bins.

    Exact and ``O(n)`` whatever ``m`` (:func:`_bin_groups`): each group contributes its
    weight times the arithmetic-series sum of its edges ``j / m``.
    """
    lw, count, occ, prev, last = _bin_groups(u_sorted, q, eps, m)
    gap = count[occ.size : 2 * occ.size]
    # sum of the edges (b + 1) / m over the bins b of each group
    edge_sum = np.concatenate(
        (
            (occ + 1) / m,
            (prev + 2 + occ) * gap / (2.0 * m),
            [(occ[-1] + 2 + m) * last / (2.0 * m)],
        )
    )
    p = np.exp(lw)
    # not a BLAS dot: ddot is ~1000x slower when exp(lw) underflows to subnormals
    return float(np.sum(p * edge_sum) / np.sum(p * count))


def _sampled_threshold(
    u_sorted: np.ndarray, q: float, eps: float, m: int, rng: np.random.Generator
) -> float:
    """One draw ``e_J`` of the mechanism for sorted scores and ``m`` equal-width bins.

    The groups of :func:`_bin_groups`: a group is drawn with probability ``count * weight``,
    then a bin uniformly within it (the bins of a group share one weight).
    """
    lw, count, occ, prev, _ = _bin_groups(u_sorted, q, eps, m)
    first = np.concatenate((occ, prev + 1, [occ[-1] + 1]))  # first bin of each group
    p = np.exp(lw) * count
    g = int(rng.choice(p.size, p=p / p.sum()))
    j = int(first[g] + rng.integers(int(count[g])))
    return (j + 1) / m


def optimal_bins(
    n: int,
    alpha: float,
    epsilon: float,
    candidates: Any = None,
    seed: int = 0,
    m_grid: str = "paper-text",
) -> int:
    """``m*`` of Algorithm 5: the number of bins with the smallest private threshold on U(0, 1).

    Parameters
    ----------
    n : int
        Number of calibration points, ``>= 1``.
    alpha : float
        In ``(0, 1)``.
    epsilon : float
        In ``(0, inf)``.
    candidates : iterable of int or None, default=None
        ``None`` means the grid of ``m_grid``.
    seed : int, default=0
        Seeds the simulated U(0, 1) scores (``numpy.random.default_rng(seed)``) and, for
        ``"authors-code"``, the draws.
    m_grid : {"paper-text", "authors-code"}, default="paper-text"
        Which reading of Algorithm 5 (both use only public quantities):

        * ``"paper-text"``: App. C's grid, :data:`CANDIDATE_BINS` (50 values log-spaced from
          ``10^2`` to ``10^6``); each candidate scored by its **expected** threshold, computed
          exactly (deterministic given ``seed``).
        * ``"authors-code"``: the grid of the authors' public code, :data:`AUTHORS_CODE_BINS`
          (``np.logspace(4, 6, 50).astype(int)``, ``10^4`` to ``10^6``); each candidate scored
          by **one draw** of the mechanism on the simulated scores, as their
          ``get_optimal_gamma_m`` does. The paper's figures were made by that code
          (``docs/angelopoulos2022.md``). Differences kept from the authors' code: privcal's
          ``gamma*`` (Eq. 10) and mechanism (the one :class:`PrivateConformal` deploys) are
          used, ``m`` counts bins (their ``np.linspace(0, 1, m)`` has ``m - 1``), and the
          draws are seeded.

    Returns
    -------
    int
        The chosen ``m``; when every candidate has ``q~ >= 1`` the one with the smallest ``q~``.

    Notes
    -----
    See the module docstring. Cost ``O(len(candidates) n)``, a few ms for the default grid;
    results are cached by argument.

    Examples
    --------
    >>> optimal_bins(5000, 0.1, 1.0)
    256
    >>> optimal_bins(5000, 0.1, 1.0, m_grid="authors-code") in AUTHORS_CODE_BINS
    True
    """
    owner = "optimal_bins"
    n = check_int(n, "n", owner, low=1)
    a = check_probability(alpha, "alpha", owner)
    eps = check_real(epsilon, "epsilon", owner, low=0.0, low_open=True)
    seed = check_int(seed, "seed", owner, low=0)
    m_grid = check_option(m_grid, "m_grid", owner, M_GRIDS)
    default = CANDIDATE_BINS if m_grid == "paper-text" else AUTHORS_CODE_BINS
    grid = default if candidates is None else tuple(candidates)
    if not grid:
        raise ValueError(f"The 'candidates' parameter of {owner} must not be empty.")
    grid = tuple(check_int(m, "candidates", owner, low=2) for m in grid)
    return _optimal_bins(n, a, eps, grid, seed, m_grid == "authors-code")


@functools.lru_cache(maxsize=256)
def _optimal_bins(
    n: int, a: float, eps: float, grid: tuple[int, ...], seed: int, one_draw: bool = False
) -> int:
    """Algorithm 5 on validated arguments; cached (a pure function of public quantities)."""
    rng = np.random.default_rng(seed)
    u = np.sort(rng.random(n))
    best: tuple[float, int] | None = None
    fallback: tuple[float, int] | None = None
    for m in grid:
        g = _gamma(n, a, eps, m)
        q = _level(n, a, eps, m, g)
        if fallback is None or (q, m) < fallback:
            fallback = (q, m)
        if q >= 1.0:
            continue
        score = _sampled_threshold(u, q, eps, m, rng) if one_draw else None
        value = (_expected_threshold(u, q, eps, m) if score is None else score, m)
        if best is None or value < best:
            best = value
    assert fallback is not None
    return best[1] if best is not None else fallback[1]


def _feasible(n: int, a: float, eps: float, grid: tuple[int, ...]) -> bool:
    return any(_level(n, a, eps, m, _gamma(n, a, eps, m)) < 1.0 for m in grid)


#: Methods of :class:`PrivateConformal` (module docstring).
METHODS: tuple[str, ...] = ("rank", "bounded-range", "angelopoulos2022")

#: ``m`` requested by ``bins="auto"`` for the methods on the logit grid (3915 distinct bins).
DEFAULT_LOGIT_BINS = 4096

#: Slopes searched by :func:`rank_slope`.
_SLOPES = np.round(np.arange(0.25, 20.0 + 1e-9, 0.25), 2)

#: The ``gamma`` values searched by :func:`bounded_range_level`: 240 log-spaced in [1e-12, 1).
_BR_GAMMAS = np.logspace(-12.0, 0.0, 241)[:-1]


def _tail_sum(m: int, lam: float) -> float:
    """``S = sum_{t >= 1} x_t / (1 + x_t)`` with ``x_t = (m - 1) exp(-lam t)`` (Theorem R).

    Summed term by term until ``x_t < 1e-17``; the rest (at most ``sum x_t``, a geometric series)
    is added as its bound, so the returned value is never below the true sum.
    """
    x0 = math.log(max(m - 1, 1))
    t_max = max(1, math.ceil((x0 + 40.0) / lam))
    t = np.arange(1, t_max + 1, dtype=np.float64)
    x = np.exp(x0 - lam * t)
    rest = math.exp(x0 - lam * (t_max + 1)) / -math.expm1(-lam)
    return float(np.sum(x / (1.0 + x)) + rest)


@functools.lru_cache(maxsize=256)
def _rank_slope(m: int, eps: float) -> float:
    """The slope minimising ``S(r) + 1/(exp(eps/(1+r)) - 1)`` over :data:`_SLOPES`."""
    cost = [_tail_sum(m, eps * r / (1 + r)) + 1.0 / math.expm1(eps / (1 + r)) for r in _SLOPES]
    return float(_SLOPES[int(np.argmin(cost))])


def _mode_pmf(size: int, ell: np.ndarray) -> np.ndarray:
    """``b(l) = max_g P(Bin(size, g) = l)``, attained at ``g = l / size`` (Theorem R's guard).

    Evaluated in log space; the factor ``1 + 1e-9`` covers the rounding of ``gammaln``, so the
    result is never below the exact value (the guard only needs upper bounds).
    """
    ell = np.asarray(ell, dtype=np.float64)
    rest = size - ell
    with np.errstate(divide="ignore", invalid="ignore"):
        up = np.where(ell > 0, ell * np.log(ell / size), 0.0)
        down = np.where(rest > 0, rest * np.log(rest / size), 0.0)
    log_b = gammaln(size + 1.0) - gammaln(ell + 1.0) - gammaln(rest + 1.0) + up + down
    return np.minimum(np.exp(log_b) * (1.0 + 1e-9), 1.0)


def _rank_guard(n: int, k: int, m: int, lam: float) -> float:
    """``G = sum_t h(min(x_t, beta_t))`` of Theorem R, an upper bound computed in ``O(1/lam)``.

    ``h(a) = a/(1 + a)``, ``x_t = (m-1) e^{-lam t}`` and ``beta_t = (m-1) sum_{d >= t}
    e^{-lam d} b(k-d)`` with ``b`` of :func:`_mode_pmf` (``Bin(n+1, .)``).
    Terms are summed up to ``T = min(k, ceil((log(m-1) + 40)/lam))``; beyond ``T`` the sum over
    ``d`` is bounded by ``sum_{d > T} e^{-lam d}`` (``b <= 1``) and the sum over ``t`` by
    ``sum_{t > T} x_t``, two geometric series, so the result is never below the exact ``G``.
    """
    x0 = math.log(max(m - 1, 1))
    big_t = min(k, max(1, math.ceil((x0 + 40.0) / lam)))
    t = np.arange(1, big_t + 1, dtype=np.float64)
    decay = np.exp(-lam * t)
    beyond = math.exp(-lam * (big_t + 1)) / -math.expm1(-lam) if big_t < k else 0.0
    below = decay * _mode_pmf(n + 1, k - t)
    suffix = np.cumsum(below[::-1])[::-1] + beyond  # sum_{d >= t} e^{-lam d} b(k - d)
    beta = (m - 1) * suffix
    a = np.minimum((m - 1) * decay, beta)
    rest = (m - 1) * beyond if big_t < k else 0.0
    return float(np.sum(a / (1.0 + a)) + rest)


@functools.lru_cache(maxsize=1024)
def _rank_target(n: int, a: float, eps: float, m: int, r: float) -> int:
    """The smallest ``k`` with ``k - G(k) >= (n+1)(1-alpha)`` (Theorem R; a margin of 1e-9).

    ``G(k) <= S``, so ``k_S = ceil((n+1)(1-alpha) + S)`` always qualifies and the search runs
    over at most ``S + 1`` values; when none is ``<= n``, ``k_S > n`` is returned (full sets).
    """
    lam = eps * r / (1.0 + r)
    need = (n + 1) * (1.0 - a) + 1e-9
    k_s = math.ceil(need + _tail_sum(m, lam))
    for k in range(max(1, math.ceil(need)), min(k_s, n + 1)):
        if k - _rank_guard(n, k, m, lam) >= need:
            return k
    return k_s


def rank_slope(m: int, epsilon: float) -> float:
    """The default ``slope`` of ``method="rank"``: a public function of ``m`` and ``epsilon``.

    It minimises the guard ``S`` (module docstring, Theorem R) plus ``1/(exp(epsilon/(1+r)) - 1)``,
    the mean overshoot of the release above the target rank when every rank step has one edge,
    over ``r`` in ``0.25, 0.5, ..., 20``.

    Examples
    --------
    >>> rank_slope(3915, 1.0)
    3.0
    """
    owner = "rank_slope"
    m = check_int(m, "m", owner, low=2)
    return _rank_slope(m, check_real(epsilon, "epsilon", owner, low=0.0, low_open=True))


def rank_target(n: int, alpha: float, epsilon: float, bins: Any, slope: Any = "auto") -> int:
    """The target rank ``k`` of ``method="rank"``; ``k > n`` means no valid threshold.

    The smallest ``k`` with ``k - G(k) >= (n+1)(1-alpha)``, where the guard ``G`` (module
    docstring, Theorem R) bounds the expected number of order statistics the release misses,
    ``G <= S = sum_{t>=1} x_t/(1 + x_t)``, ``x_t = (m-1) exp(-epsilon r t/(1+r))``; coverage is
    then ``>= (k - G)/(n+1) >= 1 - alpha``.

    Examples
    --------
    >>> rank_target(5000, 0.1, 1.0, 3915), math.ceil(5001 * 0.9)
    (4507, 4501)
    """
    owner = "rank_target"
    n = check_int(n, "n", owner, low=1)
    a = check_probability(alpha, "alpha", owner)
    eps = check_real(epsilon, "epsilon", owner, low=0.0, low_open=True)
    m = _n_bins(bins, owner)
    r = _check_slope(slope, owner)
    return _rank_target(n, a, eps, m, _rank_slope(m, eps) if r is None else r)


def _check_slope(slope: Any, owner: str) -> float | None:
    """``None`` for "auto", else the validated positive slope."""
    if isinstance(slope, str):
        check_option(slope, "slope", owner, ("auto",))
        return None
    return check_real(slope, "slope", owner, low=0.0, low_open=True)


def _level_br(n: int, a: float, eps: float, m: int, g: Any) -> Any:
    """The bounded-range level for validated arguments; ``g`` may be an array of gammas."""
    d = np.asarray(g, dtype=np.float64) * a
    k = np.ceil((n + 1) * (1.0 - a + d))  # rounding up only makes q~ larger (safe)
    b = (k - 1.0) / n
    c = np.log(m / d) / (eps * n)
    q = (b + np.sqrt(b * b + 4.0 * c)) / 2.0
    return float(q) if q.ndim == 0 else q


def _gamma_br(n: int, a: float, eps: float, m: int) -> float:
    levels = _level_br(n, a, eps, m, _BR_GAMMAS)
    return float(_BR_GAMMAS[int(np.argmin(levels))])


def bounded_range_level(
    n: int, alpha: float, epsilon: float, bins: Any, gamma: Any = "auto"
) -> float:
    """The adjusted level ``q~`` of ``method="bounded-range"`` (``>= 1``: no valid threshold).

    ``q~ = (b + sqrt(b^2 + 4c)) / 2`` with ``b = (K - 1)/n``,
    ``K = ceil((n+1)(1 - alpha + gamma alpha))`` and ``c = log(m/(gamma alpha))/(epsilon n)``:
    the smallest ``q`` with ``q n - log(m/(gamma alpha))/(epsilon q) >= K - 1`` (module
    docstring, Theorem BR). ``gamma="auto"`` minimises ``q~`` over 240 values log-spaced in
    ``[1e-12, 1)``.

    Examples
    --------
    >>> round(bounded_range_level(5000, 0.1, 1.0, 4096), 4)
    0.9039
    >>> round(adjusted_level(5000, 0.1, 1.0, 4096, optimal_gamma(5000, 0.1, 1.0, 4096)), 4)
    0.907
    """
    owner = "bounded_range_level"
    n = check_int(n, "n", owner, low=1)
    a = check_probability(alpha, "alpha", owner)
    eps = check_real(epsilon, "epsilon", owner, low=0.0, low_open=True)
    m = _n_bins(bins, owner)
    if isinstance(gamma, str):
        check_option(gamma, "gamma", owner, ("auto",))
        return _level_br(n, a, eps, m, _gamma_br(n, a, eps, m))
    return _level_br(n, a, eps, m, check_probability(gamma, "gamma", owner))


@dataclass(frozen=True)
class Plan:
    """The public quantities of one private fit: functions of ``n``, ``alpha``, ``epsilon`` only.

    Attributes
    ----------
    method : str
    edges : ndarray
        The public bin edges (``m + 1`` of them).
    bins : int
        ``m``.
    level : float
        ``q~`` (``k / n`` for ``"rank"``).
    valid : bool
        Whether a finite threshold exists (else every set is the full label set).
    gamma : float
        ``nan`` for ``"rank"``.
    slope : float
        ``r`` of ``"rank"`` (``nan`` otherwise).
    rank : int
        ``k`` of ``"rank"`` (0 otherwise).
    weights : str
        How the exponential mechanism weighs the edges: ``"rank"``, ``"bounded-range"`` or
        ``"sensitivity"`` (:func:`~privcal.conformal.private_quantile`).
    """

    method: str
    edges: np.ndarray
    bins: int
    level: float
    valid: bool
    gamma: float = math.nan
    slope: float = math.nan
    rank: int = 0
    weights: str = "rank"

    @property
    def scale(self) -> float:
        """``r`` of the weights ``exp(-epsilon penalty / r)``: ``1 + slope`` for ``"rank"``."""
        if self.weights == "rank":
            return 1.0 + self.slope
        return quantile_scale(self.level, self.weights)


def _check_tuning(
    method: str, bins: Any, gamma: Any, slope: Any, owner: str
) -> tuple[float | None, float | None]:
    """Validate ``bins``, ``gamma`` and ``slope`` for ``method``; ``None`` stands for "auto"."""
    if isinstance(bins, str):
        check_option(bins, "bins", owner, ("auto",))
    else:
        bin_edges(bins, owner)
    g: float | None = None
    if not isinstance(gamma, str):
        g = check_probability(gamma, "gamma", owner)
    else:
        check_option(gamma, "gamma", owner, ("auto",))
    r = _check_slope(slope, owner)
    if method == "rank" and g is not None:
        raise ValueError(
            f"The 'gamma' parameter of {owner} applies to method='bounded-range' and "
            f"'angelopoulos2022' only (method='rank' has no gamma). Got {gamma!r} instead."
        )
    if method != "rank" and r is not None:
        raise ValueError(
            f"The 'slope' parameter of {owner} applies to method='rank' only. Got {slope!r} "
            f"with method={method!r} instead."
        )
    return g, r


def conformal_plan(
    n: int,
    alpha: float,
    epsilon: float,
    method: str = "rank",
    bins: Any = "auto",
    gamma: Any = "auto",
    slope: Any = "auto",
) -> Plan:
    """Edges, target and level of ``PrivateConformal(method=...)``, from public inputs only.

    ``n``, ``alpha``, ``epsilon``, ``method`` must be validated; ``bins``, ``gamma``, ``slope``
    are validated here. ``"rank"`` and ``"bounded-range"`` use the logit grid
    (:data:`DEFAULT_LOGIT_BINS` for ``"auto"``); ``"angelopoulos2022"`` equal-width bins (``m*``
    of :func:`optimal_bins` for ``"auto"``). Explicit edges are used as given. One function, so
    the estimator and :class:`~privcal.conformal.simulate.SplitSimulator` cannot disagree.
    """
    owner = "PrivateConformal"
    g_given, r = _check_tuning(method, bins, gamma, slope, owner)
    auto = isinstance(bins, str)
    if method == "angelopoulos2022":
        edges = bin_edges(optimal_bins(n, alpha, epsilon) if auto else bins, owner, "uniform")
        m = edges.size - 1
        g = _gamma(n, alpha, epsilon, m) if g_given is None else g_given
        q = _level(n, alpha, epsilon, m, g)
        return Plan(method, edges, m, q, q < 1.0, gamma=g, weights="sensitivity")
    edges = bin_edges(DEFAULT_LOGIT_BINS if auto else bins, owner, "logit")
    m = edges.size - 1
    if method == "bounded-range":
        g = _gamma_br(n, alpha, epsilon, m) if g_given is None else g_given
        q = _level_br(n, alpha, epsilon, m, g)
        return Plan(method, edges, m, q, q < 1.0, gamma=g, weights="bounded-range")
    r = _rank_slope(m, epsilon) if r is None else r
    k = _rank_target(n, alpha, epsilon, m, r)
    return Plan(method, edges, m, k / n, k <= n, slope=r, rank=k)


def min_calibration_size(
    alpha: float,
    epsilon: float,
    bins: Any = "auto",
    method: str = "rank",
    slope: Any = "auto",
) -> int:
    """Smallest ``n`` for which ``PrivateConformal(method=...)`` has a valid threshold.

    ``"rank"``: ``k <= n``; otherwise ``q~ < 1`` (for ``"angelopoulos2022"`` with ``"auto"``
    bins: for some ``m`` of :data:`CANDIDATE_BINS`). Validity is monotone in ``n``, so a doubling
    search and a bisection find it exactly.

    Examples
    --------
    >>> min_calibration_size(0.1, 1.0), min_calibration_size(0.1, 1.0, method="angelopoulos2022")
    (96, 213)
    """
    owner = "min_calibration_size"
    a = check_probability(alpha, "alpha", owner)
    eps = check_real(epsilon, "epsilon", owner, low=0.0, low_open=True)
    check_option(method, "method", owner, METHODS)
    if isinstance(bins, str) and isinstance(slope, str | int | float):
        return _min_calibration_size_auto(a, eps, method, slope)  # cached: the common case
    return _min_calibration_size(a, eps, bins, method, slope)


@functools.lru_cache(maxsize=64)
def _min_calibration_size_auto(a: float, eps: float, method: str, slope: Any) -> int:
    return _min_calibration_size(a, eps, "auto", method, slope)


def _min_calibration_size(a: float, eps: float, bins: Any, method: str, slope: Any) -> int:
    """The doubling search and bisection of :func:`min_calibration_size`."""
    owner = "min_calibration_size"
    if method == "angelopoulos2022":
        auto = isinstance(bins, str) and bins == "auto"
        grid = CANDIDATE_BINS if auto else (_n_bins(bins, owner),)

        def feasible(n: int) -> bool:
            return _feasible(n, a, eps, grid)

    else:

        def feasible(n: int) -> bool:
            return conformal_plan(n, a, eps, method, bins, "auto", slope).valid

    hi = 1
    while not feasible(hi):
        hi *= 2
        if hi > 2**50:  # pragma: no cover - cannot happen for a > 0, eps > 0
            raise RuntimeError("min_calibration_size did not converge")
    lo = hi // 2  # infeasible (or 0)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if feasible(mid):
            hi = mid
        else:
            lo = mid
    return hi


def coverage_upper_bound(
    n: int,
    alpha: float,
    epsilon: float,
    bins: Any,
    gamma: float,
    p_max: float,
    *,
    method: str = "angelopoulos2022",
    slope: Any = "auto",
) -> float:
    """Upper bound on the coverage of the private sets (at most 1 is not enforced).

    ``p_max`` is ``max_j P(s in I_j)``, the largest bin probability of the score distribution
    (estimate it from data). Only meaningful when a valid threshold exists.

    * ``"angelopoulos2022"`` (Theorem 3 of seed 002): ``1 - (1 - gamma) alpha + (1 - gamma
      alpha) (2 p_max + 2 (1 + max(q~/(1-q~), 1)) log(m/(gamma alpha)) / ((n + 1) epsilon))``.
    * ``"rank"`` (module docstring, Theorem R): ``(k + S_up)/(n+1) + p_max`` with
      ``S_up = sum_u y_u/(1 + y_u)``, ``y_u = (m-1) exp(-epsilon u/(1+r))``; ``gamma`` is
      ignored.
    * ``"bounded-range"``: with probability ``>= 1 - delta`` (``delta = gamma alpha``)
      ``#{[s_i] < e_J} < q~ n + log(m/delta)/(epsilon (1-q~))``, so the coverage is at most
      ``delta + ceil(q~ n + log(m/delta)/(epsilon (1-q~)))/(n+1) + p_max``.
    """
    owner = "coverage_upper_bound"
    check_option(method, "method", owner, METHODS)
    m = _n_bins(bins, owner)
    if method == "rank":
        r = _check_slope(slope, owner)
        r = _rank_slope(m, epsilon) if r is None else r
        k = _rank_target(n, alpha, epsilon, m, r)
        return (k + _tail_sum(m, epsilon / (1.0 + r))) / (n + 1) + p_max
    if method == "bounded-range":
        q = _level_br(n, alpha, epsilon, m, gamma)
        d = gamma * alpha
        top = math.ceil(q * n + math.log(m / d) / (epsilon * (1.0 - q)))
        return d + top / (n + 1) + p_max
    q = adjusted_level(n, alpha, epsilon, m, gamma)
    ratio = max(q / (1 - q), 1.0) if q < 1 else math.inf
    return (
        1
        - (1 - gamma) * alpha
        + (1 - gamma * alpha)
        * (2 * p_max + 2 * (1 + ratio) * math.log(m / (gamma * alpha)) / ((n + 1) * epsilon))
    )


class PrivateConformal(ConformalBase):
    """Epsilon-DP split conformal prediction sets (seed 002, with a sharper default mechanism).

    Parameters
    ----------
    score : {"lac", "aps", "aps-randomized"}, default="lac"
        Conformity score (values in [0, 1]).
    alpha : float, default=0.1
        Miscoverage level in ``(0, 1)``.
    epsilon : float, default=1.0
        Privacy loss in ``(0, inf)`` of the one release (the threshold).
    bins : "auto", int or array_like, default="auto"
        The public grid. ``"auto"``: :data:`DEFAULT_LOGIT_BINS` logit-spaced bins for
        ``"rank"`` and ``"bounded-range"``, ``m*`` of :func:`optimal_bins` (equal-width) for
        ``"angelopoulos2022"``; an int ``m >= 2``: ``m`` bins of that method's grid (logit,
        resp. equal-width); or edges ``0 = e_0 < ... < e_m = 1`` (any method).
    gamma : "auto" or float, default="auto"
        ``"bounded-range"`` and ``"angelopoulos2022"`` only: ``gamma alpha`` is the failure
        probability given to the mechanism. ``"auto"``: the minimiser of ``q~``
        (:func:`optimal_gamma` for the paper).
    noise : NoiseSource or None, default=None
        ``None`` means ``SecureNoise()``. ``SeededNoise(seed)`` (simulation only) warns
        :class:`~privcal.privacy.InsecureNoiseWarning` and the report says
        ``"not private: seeded noise"``.
    calibrator : fitted calibrator or None, default=None
        As in :class:`SplitConformal` (fitted on other data, and privately if that data is
        private: its privacy is not accounted here).
    random_state : int or None, default=0
        Seeds the ``u`` draws of randomised APS.
    method : {"rank", "bounded-range", "angelopoulos2022"}, default="rank"
        ``"rank"``: exponential mechanism with the rank penalty around the target rank ``k`` of
        :func:`rank_target` (Theorem R of the module docstring). ``"bounded-range"``: seed
        002's utility with bounded-range weights and the level of :func:`bounded_range_level`
        (Theorem BR). ``"angelopoulos2022"``: seed 002's Algorithms 3-5 exactly (equal-width
        grid, Eq. 3, Eq. 9-10, Algorithm 5), to reproduce the paper.
    slope : "auto" or float, default="auto"
        ``"rank"`` only: the cost ``r > 0`` of one missing order statistic relative to one extra
        (``"auto"``: :func:`rank_slope`).
    localize : "auto", None or float, default="auto"
        ``"rank"`` only: spend this fraction of the calibration set on localising the threshold
        (Theorem L, :mod:`privcal.conformal.localize`): two releases find a window of the grid
        around the ``(1 - alpha)``-quantile, and Theorem R runs on the other points with only
        the window's edges. ``"auto"``: 0.25 where it pays (``n >= 4000``, one stage's guard at
        least 3 ranks, ``epsilon n_1 >= 1000``: :func:`plan_localization`), else one stage;
        ``None``: always one stage. Same epsilon (the parts are disjoint), same coverage
        guarantee.

    Attributes
    ----------
    threshold_ : float
        The released edge ``e_J``, or ``inf`` when no valid threshold exists (full sets).
    level_ : float
        ``q~``: ``k / n`` for ``"rank"`` (``k_2 / n_2`` when localised), the adjusted level
        otherwise.
    gamma_ : float
        ``nan`` for ``"rank"``.
    slope_ : float
        ``nan`` unless ``"rank"``.
    rank_ : int
        ``k`` for ``"rank"`` (``k_2`` when localised), 0 otherwise.
    bins_ : int
        ``m`` (``m_2``, the window's bins, when localised).
    localize_n_ : int
        ``n_1``, the points spent on localising (0 for one stage).
    window_ : tuple of float
        The two released window ends ``(lo, hi)``, ordered (``(0.0, 1.0)`` for one stage); the
        part-2 grid is the grid's edges between them, with 0 and 1.
    n_ : int
    n_classes_ : int
    privacy_report_ : PrivacyReport
        ``unit="example"``, ``relation="substitute"``, ``public`` listing ``n`` and every
        quantity derived from it, ``noise`` (``"secure"`` or ``"seeded"``). One release (the
        exponential mechanism, its scale, shown in the ``sensitivity`` column as the range
        ``1 + slope`` for ``"rank"``, and ``epsilon``); localised, three: the window's two at
        ``epsilon/2`` on the localisation part and the threshold on the threshold part, composed
        in parallel. No release when there is no valid threshold (nothing data-dependent was
        released), but the relation and the public ``n`` are still stated.

    Privacy
    -------
    Unit: one calibration example. Neighbouring relation: **substitute** one calibration example;
    ``n`` is public. Add/remove is *not* claimed: the target ``k`` (or ``q~``), ``m*``,
    ``gamma*`` and the full-set branch are functions of ``n`` (see the module docstring for the
    jumps that would reveal one example under add/remove).

    * The score of example ``i`` is a function of that example alone (the model, the calibrator,
      the score function and randomised APS's ``u``, which are independent of the data, are
      fixed before calibration), so substituting one example substitutes one score.
    * The grid, ``k``, ``slope``, ``q~``, ``m`` and ``gamma`` depend only on the public ``n``,
      ``alpha``, ``epsilon`` and the arguments, so they are the same on both neighbours.
    * ``"rank"``: weights ``exp(-epsilon p_j / (1 + slope))``; under substitute every penalty
      moves within one interval of width ``1 + slope`` (Theorem R), so epsilon-DP by the
      bounded-range argument. ``"bounded-range"``: weights ``exp(-epsilon q~(1-q~) w_j)``,
      epsilon-DP likewise (:mod:`privcal.conformal.quantile`). ``"angelopoulos2022"``: weights
      ``exp(-epsilon w_j / (2 max(1/q~, 1/(1-q~))))``, the sensitivity bound.
    * Localised (``localize``, Theorem L): the two window releases (``epsilon/2`` each) read
      only the localisation part, the threshold (``epsilon``) only the threshold part; the parts
      are disjoint (a random split independent of the data), so the report composes them in
      parallel: ``epsilon`` in total.
    * Pure ``epsilon``-DP for the threshold (and the window), and for every prediction set
      computed from it (post-processing). Budget: the whole ``epsilon``.

    Audited as deployed (defaults, ``SecureNoise``, neighbours moving one score from 0 to 1) by
    ``privcal audit private-conformal`` (one stage, ``n = 96``) and ``privcal audit
    private-conformal-localized`` (``n = 4000``: window and threshold).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> z = 3 * rng.normal(size=(2000, 5)); y = z.argmax(1)
    >>> pc = PrivateConformal(alpha=0.1, epsilon=1.0).fit(z, y)
    >>> rep = pc.privacy_report_
    >>> rep.epsilon, rep.relation, rep.public[0], rep.status
    (1.0, 'substitute', 'n = 2000 (number of calibration examples)', 'private')
    >>> pc.predict_set(z[:3]).shape
    (3, 5)
    >>> pc.rank_, pc.bins_, pc.slope_
    (1808, 3915, 3.0)
    """

    _owner = "PrivateConformal"

    def __init__(
        self,
        score: str = "lac",
        alpha: float = 0.1,
        epsilon: float = 1.0,
        bins: Any = "auto",
        gamma: Any = "auto",
        noise: NoiseSource | None = None,
        calibrator: Any = None,
        random_state: int | None = 0,
        method: str = "rank",
        slope: Any = "auto",
        localize: Any = "auto",
        ledger: Any = None,
    ) -> None:
        self.score = score
        self.alpha = alpha
        self.epsilon = epsilon
        self.bins = bins
        self.gamma = gamma
        self.noise = noise
        self.calibrator = calibrator
        self.random_state = random_state
        self.method = method
        self.slope = slope
        self.localize = localize
        self.ledger = ledger

    def fit(self, logits: Any, labels: Any, input: str = "logits") -> PrivateConformal:
        """Release the private threshold from the calibration set.

        Parameters
        ----------
        logits : array_like of shape (n, C)
        labels : array_like of shape (n,)
        input : {"logits", "probs"}, default="logits"

        Returns
        -------
        self
        """
        owner = self._owner
        check_option(self.score, "score", owner, self._scores())
        check_option(self.method, "method", owner, METHODS)
        a = check_probability(self.alpha, "alpha", owner)
        eps = check_real(self.epsilon, "epsilon", owner, low=0.0, low_open=True)
        _check_tuning(self.method, self.bins, self.gamma, self.slope, owner)  # before the data
        check_localize(self.localize, self.method, owner)
        odometer = as_odometer(self.ledger, owner)
        src = resolve_noise(self.noise, owner)
        s = self._calibration_scores(logits, labels, input)
        n = int(s.size)
        plan = conformal_plan(n, a, eps, self.method, self.bins, self.gamma, self.slope)
        loc = plan_localization(n, a, eps, plan, self.method, self.localize, owner)
        if odometer is not None and (loc is not None or plan.valid):
            odometer.spend(
                f"{owner}.fit",
                eps,
                mechanism="exponential",
                rdp=pure_dp_curve(eps, odometer.rule.orders),
                relation="substitute",
            )
        self.localize_n_, self.window_ = 0, (0.0, 1.0)
        if (
            loc is not None
            and not isinstance(self.localize, str)
            and eps * loc.n1 < LOCALIZE_MIN_EPS_N1
        ):
            warnings.warn(
                f"PrivateConformal: localize={self.localize!r} gives epsilon * n_1 = "
                f"{eps * loc.n1:g} < {LOCALIZE_MIN_EPS_N1:g}: a window found from so few points "
                "is often wide or misses the quantile, and the sets grow (on some fits to the "
                "full label set). Coverage still holds. localize='auto' would use one stage here.",
                PrivcalWarning,
                stacklevel=2,
            )
        if loc is not None:
            return self._fit_localized(s, a, eps, plan, loc, src)
        self.n_, self.bins_, self.level_ = n, plan.bins, plan.level
        self.gamma_, self.slope_, self.rank_ = plan.gamma, plan.slope, plan.rank
        self.privacy_report_ = self._report(self._public(n, a, eps, plan), src)
        if not plan.valid:
            need = min_calibration_size(a, eps, self.bins, self.method, self.slope)
            what = (
                f"k = {plan.rank} > n" if plan.weights == "rank" else f"q~ = {plan.level:.4g} >= 1"
            )
            warnings.warn(
                f"PrivateConformal: {what} for n = {n}, epsilon = {eps:g}, alpha = {a:g}, "
                f"m = {plan.bins}: no private threshold is valid, so every prediction set is the "
                f"full label set. Use at least n = {need} calibration points (or a larger "
                "epsilon or alpha).",
                FullSetWarning,
                stacklevel=2,
            )
            self.threshold_ = math.inf
            return self
        self.threshold_ = self._release(s, eps, plan, src)
        return self

    def _fit_localized(
        self, s: np.ndarray, a: float, eps: float, plan: Plan, loc: Localization, src: NoiseSource
    ) -> PrivateConformal:
        """Theorem L (:mod:`privcal.conformal.localize`): window on part 1, threshold on part 2."""
        value, plan2, window, releases = localized_threshold(s, loc, a, eps, plan, self.slope, src)
        if not plan2.valid:
            warnings.warn(
                f"PrivateConformal: the threshold part (n_2 = {loc.n2} of n = {s.size}) has no "
                f"valid target for the window's m_2 = {plan2.bins} bins (k_2 > n_2), so every "
                "prediction set is the full label set. Use a smaller 'localize' fraction, "
                "localize=None, or a larger calibration set.",
                FullSetWarning,
                stacklevel=3,
            )
        self.n_, self.bins_, self.level_ = s.size, plan2.bins, plan2.level
        self.gamma_, self.slope_, self.rank_ = plan2.gamma, plan2.slope, plan2.rank
        self.localize_n_, self.window_ = loc.n1, window
        self.privacy_report_ = self._report(self._public(s.size, a, eps, plan, loc), src)
        self.privacy_report_.extend(releases)
        self.threshold_ = value
        return self

    @staticmethod
    def _report(public: tuple[str, ...], src: NoiseSource) -> PrivacyReport:
        """An empty report: one calibration example, substitute, ``public`` as given."""
        return PrivacyReport(
            unit="example", relation="substitute", public=public, noise=noise_kind(src)
        )

    def _release(self, s: np.ndarray, eps: float, plan: Plan, src: NoiseSource) -> float:
        """Draw the threshold with ``plan``'s mechanism and record the release in the report."""
        owner = self._owner
        if plan.weights == "rank":
            value = _private_rank_quantile(s, plan.rank, plan.slope, eps, plan.edges, src)
            self.privacy_report_.add(rank_release(plan, eps))
            return value
        value, guarantee, scale = _private_quantile(
            s, plan.level, eps, plan.edges, src, "substitute", owner, plan.weights
        )
        self.privacy_report_.add(
            quantile_release(
                plan.level, plan.bins, scale, guarantee.epsilon, "calibration", plan.weights
            )
        )
        return value

    def _public(
        self, n: int, a: float, eps: float, plan: Plan, loc: Localization | None = None
    ) -> tuple[str, ...]:
        """What the guarantee treats as public: ``n`` and everything computed from it."""
        auto = isinstance(self.bins, str)
        if plan.method == "angelopoulos2022":
            grid = f"bins m = {plan.bins}" + (
                " (Algorithm 5 from n, alpha, epsilon)" if auto else ""
            )
            tuning = [
                f"gamma = {plan.gamma:.6g}",
                f"level q~ = {plan.level:.6g} (Eq. 3 from n, alpha, epsilon, m, gamma)",
            ]
        else:
            kind = "logit-spaced" if auto or isinstance(self.bins, int | np.integer) else "given"
            grid = f"bins m = {plan.bins} ({kind} edges, fixed before the data)"
            if plan.method == "bounded-range":
                tuning = [
                    f"gamma = {plan.gamma:.6g}",
                    f"level q~ = {plan.level:.6g} (bounded range, from n, alpha, epsilon, m)",
                ]
            elif loc is None:
                tuning = [
                    f"slope = {plan.slope:g}",
                    f"target rank k = {plan.rank} (Theorem R from n, alpha, epsilon, m, slope)",
                ]
            else:
                tuning = [
                    f"localisation (Theorem L): n_1 = {loc.n1} and n_2 = {loc.n2} points, split "
                    "by a random permutation drawn independently of the data",
                    f"window targets k_lo = {loc.k_lo}, k_hi = {loc.k_hi} (delta = "
                    f"{loc.delta:.4g}), two releases at epsilon/2 on part 1",
                    "the part-2 grid (the edges between the window's ends), its slope and the "
                    "target rank k_2 (Theorem R from n_2) are functions of the part-1 releases",
                ]
        return (
            f"n = {n} (number of calibration examples)",
            f"alpha = {a:g}",
            f"epsilon = {eps:g}",
            f"method = {plan.method!r}",
            grid,
            *tuning,
            f"the score function ({self.score!r}), the model and the calibrator (fixed before "
            "calibration)",
        )


def plan_localization(
    n: int, alpha: float, epsilon: float, plan: Plan, method: str, localize: Any, owner: str
) -> Localization | None:
    """:func:`~privcal.conformal.localize.localization`; ``"auto"`` keeps one stage unless one
    stage's guard is at least :data:`~privcal.conformal.localize.LOCALIZE_MIN_GUARD` ranks,
    ``epsilon n_1 >=`` :data:`~privcal.conformal.localize.LOCALIZE_MIN_EPS_N1` and the
    threshold part has a valid target for a window holding every edge (the largest guard).
    Public checks; one function for the estimator and the simulator."""
    loc = localization(n, alpha, epsilon, plan.bins, method, localize, owner)
    if loc is None or localize != "auto":
        return loc
    r = _rank_slope(plan.bins, epsilon)
    guard = plan.rank - conformal_rank(n, alpha)
    if guard < LOCALIZE_MIN_GUARD or epsilon * loc.n1 < LOCALIZE_MIN_EPS_N1:
        return None
    return loc if _rank_target(loc.n2, alpha, epsilon, plan.bins, r) <= loc.n2 else None


def localized_threshold(
    s: np.ndarray,
    loc: Localization,
    alpha: float,
    epsilon: float,
    plan: Plan,
    slope: Any,
    noise: NoiseSource,
) -> tuple[float, Plan, tuple[float, float], list[Release]]:
    """Theorem L on the calibration scores ``s``: ``(threshold, part-2 plan, window, releases)``.

    The one implementation behind :class:`PrivateConformal` and
    :meth:`~privcal.conformal.simulate.SplitSimulator.private`. ``threshold`` is ``inf`` when
    ``k_2 > n_2`` (full sets; the part-1 releases were still made and are returned).
    """
    order = partition(s.size, noise)
    s1, s2 = s[order[: loc.n1]], s[order[loc.n1 :]]
    lo, hi, releases = localized_release(s1, loc, epsilon, plan.edges, noise)
    edges2 = window_edges(plan.edges, lo, hi)
    window = (min(lo, hi), max(lo, hi))
    if edges2.size < 3:  # a grid of 2 bins with lo = hi = 1: the only edge is 1, full sets
        return math.inf, Plan("rank", edges2, 1, 1.0, False), window, releases
    plan2 = conformal_plan(loc.n2, alpha, epsilon, "rank", edges2, "auto", slope)
    if not plan2.valid:
        return math.inf, plan2, window, releases
    value = _private_rank_quantile(s2, plan2.rank, plan2.slope, epsilon, edges2, noise)
    releases.append(rank_release(plan2, epsilon, SOURCES[1]))
    return value, plan2, window, releases


def rank_release(plan: Plan, epsilon: float, source: str = "calibration") -> Release:
    """The :class:`~privcal.privacy.Release` of one ``method="rank"`` threshold."""
    return rank_quantile_release(plan.rank, plan.bins, plan.slope, epsilon, source)

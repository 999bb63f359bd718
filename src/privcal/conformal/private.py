"""Private prediction sets (seed 002, Algorithms 3-5, Eq. 3, Eq. 9-10).

:class:`PrivateConformal` releases one threshold, the DP quantile of the calibration scores
(:func:`~privcal.conformal.private_quantile`) at the *adjusted level*

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

When :math:`\\tilde q \\ge 1` (``n`` too small for ``epsilon`` and ``alpha``) no valid private
threshold exists: the estimator warns, names the smallest ``n`` that works
(:func:`min_calibration_size`) and returns the full label set instead of a fake cutoff.

Neighbouring relation: ``n`` is public
--------------------------------------
:math:`\\tilde q`, :math:`m^*`, :math:`\\gamma^*` and the full-set branch are deterministic
functions of ``n`` (and of the public ``alpha`` and ``epsilon``): ``n = 212`` gives full sets and
``n = 213`` a finite threshold at ``alpha = 0.1``, ``epsilon = 1``; ``n = 301`` gives ``m* = 121``
and ``n = 302`` gives ``m* = 100``, whose edges share only 1.0. Under add/remove neighbours ``n``
is private and these jumps alone reveal whether one example is present (the planted-defect test
``tests/statistical/test_deployed_audits_conformal.py`` shows an audit estimating an unbounded
loss). As in seed 002, ``n`` is therefore **public** and the guarantee is stated for the
relation *substitute one calibration example* (``n`` fixed): then every quantity above is a
constant and only the exponential mechanism sees the data. Its sensitivity under substitute is
derived in :mod:`privcal.conformal.quantile`: each of the counts below and above edge ``j``
moves by at most one, so
:math:`\\max_j |w_j(D) - w_j(D')| \\le \\max(1/\\tilde q, 1/(1-\\tilde q))`.
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any

import numpy as np

from privcal._params import check_int, check_option, check_probability, check_real
from privcal.conformal._base import ConformalBase, FullSetWarning
from privcal.conformal.quantile import (
    _private_quantile,
    bin_edges,
    quantile_release,
    quantile_sensitivity,
)
from privcal.privacy.guarantee import PrivacyReport
from privcal.privacy.noise import NoiseSource, noise_kind, resolve_noise

__all__ = [
    "CANDIDATE_BINS",
    "PrivateConformal",
    "adjusted_level",
    "coverage_upper_bound",
    "min_calibration_size",
    "optimal_bins",
    "optimal_gamma",
]

#: The candidate numbers of bins of :func:`optimal_bins` (App. C): 50 log-spaced values 1e2..1e6.
CANDIDATE_BINS: tuple[int, ...] = tuple(
    int(v) for v in np.unique(np.round(np.logspace(2, 6, 50)).astype(np.int64))
)

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


def _expected_threshold(u_sorted: np.ndarray, q: float, eps: float, m: int) -> float:
    """``E[e_J]`` under the mechanism's law for sorted scores and ``m`` equal-width bins.

    Exact and ``O(n)`` whatever ``m``: all empty bins between two occupied bins share the same
    ``w`` (both counts are constant there), so the law is a mixture over at most ``2n + 1``
    groups: each occupied bin (one candidate), and each run of empty bins before it (``g``
    candidates with the arithmetic-series sum of their edges ``j / m``), plus the trailing run.
    """
    n = u_sorted.size
    b = np.minimum(np.maximum(np.ceil(u_sorted * m).astype(np.int64) - 1, 0), m - 1)
    start = np.flatnonzero(np.concatenate(([True], b[1:] != b[:-1])))
    occ = b[start]  # occupied bins, increasing (0-based)
    before = start  # scores in bins < occ_l
    upto = np.concatenate((start[1:], [n]))  # scores in bins <= occ_l
    prev = np.concatenate(([-1], occ[:-1]))
    gap = occ - prev - 1  # empty bins strictly between prev and occ
    last = m - 1 - occ[-1]
    # w per group: occupied bins, runs of empty bins before them, the trailing run
    w = np.concatenate(
        (
            np.maximum(before / q, (n - upto) / (1.0 - q)),
            np.maximum(before / q, (n - before) / (1.0 - q)),
            [n / q],
        )
    )
    count = np.concatenate((np.ones(occ.size), gap, [last])).astype(np.float64)
    # sum of the edges (b + 1) / m over the bins b of each group
    edge_sum = np.concatenate(
        (
            (occ + 1) / m,
            (prev + 2 + occ) * gap / (2.0 * m),
            [(occ[-1] + 2 + m) * last / (2.0 * m)],
        )
    )
    lw = w * (-eps / (2.0 * quantile_sensitivity(q)))
    lw -= lw.max()
    p = np.exp(lw)
    # not a BLAS dot: ddot is ~1000x slower when exp(lw) underflows to subnormals
    return float(np.sum(p * edge_sum) / np.sum(p * count))


def optimal_bins(
    n: int,
    alpha: float,
    epsilon: float,
    candidates: Any = None,
    seed: int = 0,
) -> int:
    """``m*`` of Algorithm 5: the number of bins with the smallest expected private threshold.

    Parameters
    ----------
    n : int
        Number of calibration points, ``>= 1``.
    alpha : float
        In ``(0, 1)``.
    epsilon : float
        In ``(0, inf)``.
    candidates : iterable of int or None, default=None
        ``None`` means :data:`CANDIDATE_BINS` (50 values log-spaced from 1e2 to 1e6).
    seed : int, default=0
        Seeds the simulated U(0, 1) scores (``numpy.random.default_rng(seed)``).

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
    >>> optimal_bins(5000, 0.1, 1.0) in CANDIDATE_BINS
    True
    """
    owner = "optimal_bins"
    n = check_int(n, "n", owner, low=1)
    a = check_probability(alpha, "alpha", owner)
    eps = check_real(epsilon, "epsilon", owner, low=0.0, low_open=True)
    seed = check_int(seed, "seed", owner, low=0)
    grid = CANDIDATE_BINS if candidates is None else tuple(candidates)
    if not grid:
        raise ValueError(f"The 'candidates' parameter of {owner} must not be empty.")
    grid = tuple(check_int(m, "candidates", owner, low=2) for m in grid)
    return _optimal_bins(n, a, eps, grid, seed)


@functools.lru_cache(maxsize=256)
def _optimal_bins(n: int, a: float, eps: float, grid: tuple[int, ...], seed: int) -> int:
    """Algorithm 5 on validated arguments; cached (a pure function of public quantities)."""
    u = np.sort(np.random.default_rng(seed).random(n))
    best: tuple[float, int] | None = None
    fallback: tuple[float, int] | None = None
    for m in grid:
        g = _gamma(n, a, eps, m)
        q = _level(n, a, eps, m, g)
        if fallback is None or (q, m) < fallback:
            fallback = (q, m)
        if q >= 1.0:
            continue
        value = (_expected_threshold(u, q, eps, m), m)
        if best is None or value < best:
            best = value
    assert fallback is not None
    return best[1] if best is not None else fallback[1]


def _feasible(n: int, a: float, eps: float, grid: tuple[int, ...]) -> bool:
    return any(_level(n, a, eps, m, _gamma(n, a, eps, m)) < 1.0 for m in grid)


def min_calibration_size(alpha: float, epsilon: float, bins: Any = "auto") -> int:
    """Smallest ``n`` for which ``q~ < 1`` (with ``gamma*``; over the candidate grid for "auto").

    ``q~`` decreases in ``n``, so a doubling search and a bisection find it exactly.

    Examples
    --------
    >>> min_calibration_size(0.1, 1.0)
    213
    """
    owner = "min_calibration_size"
    a = check_probability(alpha, "alpha", owner)
    eps = check_real(epsilon, "epsilon", owner, low=0.0, low_open=True)
    grid = CANDIDATE_BINS if isinstance(bins, str) and bins == "auto" else (_n_bins(bins, owner),)
    hi = 1
    while not _feasible(hi, a, eps, grid):
        hi *= 2
        if hi > 2**50:  # pragma: no cover - cannot happen for a > 0, eps > 0
            raise RuntimeError("min_calibration_size did not converge")
    lo = hi // 2  # infeasible (or 0)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _feasible(mid, a, eps, grid):
            hi = mid
        else:
            lo = mid
    return hi


def coverage_upper_bound(
    n: int, alpha: float, epsilon: float, bins: Any, gamma: float, p_max: float
) -> float:
    """Theorem 3's upper bound on the coverage of the private sets.

    ``p_max`` is ``max_j P(s in I_j)``, the largest bin probability of the score distribution
    (estimate it from data). The bound is ``1 - (1 - gamma) alpha + (1 - gamma alpha) (2 p_max +
    2 (1 + max(q~/(1-q~), 1)) log(m/(gamma alpha)) / ((n + 1) epsilon))``; only meaningful when
    ``q~ < 1``.
    """
    m = _n_bins(bins, "coverage_upper_bound")
    q = adjusted_level(n, alpha, epsilon, m, gamma)
    ratio = max(q / (1 - q), 1.0) if q < 1 else math.inf
    return (
        1
        - (1 - gamma) * alpha
        + (1 - gamma * alpha)
        * (2 * p_max + 2 * (1 + ratio) * math.log(m / (gamma * alpha)) / ((n + 1) * epsilon))
    )


class PrivateConformal(ConformalBase):
    """Epsilon-DP split conformal prediction sets (seed 002, Algorithms 3-5).

    Parameters
    ----------
    score : {"lac", "aps", "aps-randomized"}, default="lac"
        Conformity score (values in [0, 1]).
    alpha : float, default=0.1
        Miscoverage level in ``(0, 1)``.
    epsilon : float, default=1.0
        Privacy loss in ``(0, inf)`` of the one release (the threshold).
    bins : "auto", int or array_like, default="auto"
        ``"auto"``: ``m*`` of :func:`optimal_bins` (seed 0); an int ``m >= 2`` (equal-width
        bins) or edges ``0 = e_0 < ... < e_m = 1``.
    gamma : "auto" or float, default="auto"
        ``"auto"``: :func:`optimal_gamma`; else a value in ``(0, 1)``.
    noise : NoiseSource or None, default=None
        ``None`` means ``SecureNoise()``. ``SeededNoise(seed)`` (simulation only) warns
        :class:`~privcal.privacy.InsecureNoiseWarning` and the report says
        ``"not private: seeded noise"``.
    calibrator : fitted calibrator or None, default=None
        As in :class:`SplitConformal` (fitted on other data, and privately if that data is
        private: its privacy is not accounted here).
    random_state : int or None, default=0
        Seeds the ``u`` draws of randomised APS.

    Attributes
    ----------
    threshold_ : float
        The released edge ``e_J``, or ``inf`` when ``q~ >= 1`` (full sets).
    level_ : float
        ``q~`` (Eq. 3).
    gamma_ : float
    bins_ : int
        ``m``.
    n_ : int
    n_classes_ : int
    privacy_report_ : PrivacyReport
        ``unit="example"``, ``relation="substitute"``, ``public`` listing ``n`` and every
        quantity derived from it, ``noise`` (``"secure"`` or ``"seeded"``). One release (the
        exponential mechanism, its sensitivity ``max(1/q~, 1/(1-q~))`` and ``epsilon``); no
        release when ``q~ >= 1`` (nothing data-dependent was released), but the relation and the
        public ``n`` are still stated.

    Privacy
    -------
    Unit: one calibration example. Neighbouring relation: **substitute** one calibration example;
    ``n`` is public. Add/remove is *not* claimed: ``q~``, ``m*``, ``gamma*`` and the full-set
    branch are functions of ``n`` (see the module docstring for the jumps that would reveal one
    example under add/remove).

    * The score of example ``i`` is a function of that example alone (the model, the calibrator,
      the score function and randomised APS's ``u``, which are independent of the data, are
      fixed before calibration), so substituting one example substitutes one score.
    * ``q~``, ``m`` and ``gamma`` depend only on the public ``n``, ``alpha`` and ``epsilon``, so
      they are the same on both neighbours.
    * Sensitivity: with ``L_j`` and ``U_j`` the counts of (discretised) scores below and above
      edge ``e_j`` and ``w_j = max(L_j/q~, U_j/(1-q~))``, substituting ``s -> s'`` with
      ``[s] <= [s']`` changes ``L_j`` by 0 or -1 and ``U_j`` by 0 or +1 (opposite directions,
      at most one unit each), so ``|w_j(D) - w_j(D')| <= max(1/q~, 1/(1-q~))`` for every ``j``
      (derived in full in :mod:`privcal.conformal.quantile`).
    * Mechanism: :func:`~privcal.privacy.exponential` with weights ``exp(-epsilon w_j / (2
      max(1/q~, 1/(1-q~))))``: pure ``epsilon``-DP for the threshold, and for every prediction
      set computed from it (post-processing). Budget: the whole ``epsilon``, one release.

    Audited as deployed (defaults, ``SecureNoise``, neighbours moving one score from 0 to 1) by
    ``privcal audit private-conformal``.

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
    ) -> None:
        self.score = score
        self.alpha = alpha
        self.epsilon = epsilon
        self.bins = bins
        self.gamma = gamma
        self.noise = noise
        self.calibrator = calibrator
        self.random_state = random_state

    def fit(self, logits: Any, labels: Any, input: str = "logits") -> PrivateConformal:
        """Release the private threshold at level ``q~`` from the calibration set.

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
        a = check_probability(self.alpha, "alpha", owner)
        eps = check_real(self.epsilon, "epsilon", owner, low=0.0, low_open=True)
        auto_bins = isinstance(self.bins, str)
        if auto_bins:
            check_option(self.bins, "bins", owner, ("auto",))
        else:
            bin_edges(self.bins, owner)
        if isinstance(self.gamma, str):
            check_option(self.gamma, "gamma", owner, ("auto",))
        else:
            check_probability(self.gamma, "gamma", owner)
        src = resolve_noise(self.noise, owner)
        s = self._calibration_scores(logits, labels, input)
        n = int(s.size)
        m_or_edges = optimal_bins(n, a, eps) if auto_bins else self.bins
        m = _n_bins(m_or_edges, owner)
        g = _gamma(n, a, eps, m) if isinstance(self.gamma, str) else float(self.gamma)
        q = _level(n, a, eps, m, g)
        self.n_, self.bins_, self.gamma_, self.level_ = n, m, g, q
        self.privacy_report_ = PrivacyReport(
            unit="example",
            relation="substitute",
            public=self._public(n, a, eps, m, g, q, auto_bins),
            noise=noise_kind(src),
        )
        if q >= 1.0:
            need = min_calibration_size(a, eps, "auto" if auto_bins else m)
            warnings.warn(
                f"PrivateConformal: the adjusted level q~ = {q:.4g} >= 1 for n = {n}, "
                f"epsilon = {eps:g}, alpha = {a:g}, m = {m}: no private threshold is valid, so "
                f"every prediction set is the full label set. Use at least n = {need} "
                "calibration points (or a larger epsilon or alpha).",
                FullSetWarning,
                stacklevel=2,
            )
            self.threshold_ = math.inf
            return self
        value, guarantee, sens = _private_quantile(
            s, q, eps, m_or_edges, src, self.privacy_report_.relation, owner
        )
        self.threshold_ = value
        self.privacy_report_.add(quantile_release(q, m, sens, guarantee.epsilon, "calibration"))
        return self

    def _public(
        self, n: int, a: float, eps: float, m: int, g: float, q: float, auto_bins: bool
    ) -> tuple[str, ...]:
        """What the guarantee treats as public: ``n`` and everything computed from it."""
        how = " (Algorithm 5 from n, alpha, epsilon)" if auto_bins else ""
        return (
            f"n = {n} (number of calibration examples)",
            f"alpha = {a:g}",
            f"epsilon = {eps:g}",
            f"bins m = {m}{how}",
            f"gamma = {g:.6g}",
            f"level q~ = {q:.6g} (Eq. 3 from n, alpha, epsilon, m, gamma)",
            f"the score function ({self.score!r}), the model and the calibrator (fixed before "
            "calibration)",
        )

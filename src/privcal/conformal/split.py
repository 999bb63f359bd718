"""Split conformal prediction (non-private) with the exact finite-sample rank.

Given calibration scores :math:`s_1, \\dots, s_n` (exchangeable with the test score), the set
:math:`C(x) = \\{y : S(x, y) \\le s_{(k)}\\}` with :math:`k = \\lceil (n+1)(1-\\alpha) \\rceil`
(the ``k``-th smallest score) covers the true label with probability at least
:math:`1 - \\alpha`: the rank of the test score among the ``n + 1`` scores is uniform on
``1..n+1`` (ties only help), so :math:`P(S_{n+1} \\le s_{(k)}) \\ge k / (n + 1) \\ge 1 - \\alpha`;
for continuous scores it is exactly :math:`k / (n+1) < 1 - \\alpha + 1/(n+1)` (Vovk et al. 2005;
Lei et al. 2018; Angelopoulos & Bates 2021, Thm. D.1).

The rank is computed in exact rational arithmetic (see :func:`conformal_rank`), which avoids the
off-by-one errors of ``np.quantile``-based implementations (MAPIE PR #453 and #973: rounding of
``(n+1)(1-alpha)/n`` and the interpolation method). When ``k > n`` no finite threshold has the
guarantee: the set is every label, with a warning (never the largest score, which would cover
with probability only ``n / (n + 1) < 1 - alpha``).
"""

from __future__ import annotations

import math
import warnings
from fractions import Fraction
from typing import Any

import numpy as np

from privcal._params import check_int, check_probability, renamed
from privcal.calibrators.base import store_params
from privcal.conformal._base import ConformalBase, FullSetWarning
from privcal.conformal.groups import group_rows

__all__ = ["SplitConformal", "conformal_rank", "conformal_threshold", "smallest_n"]


def _exact(x: float) -> Fraction:
    """``x`` as the decimal it was written as (``0.1`` -> 1/10, not the binary double)."""
    return Fraction(repr(float(x)))


def conformal_rank(n: int, alpha: float) -> int:
    """The finite-sample rank ``k = ceil((n + 1)(1 - alpha))``, computed exactly.

    ``alpha`` is read as the shortest decimal that round-trips to the float (``repr``), so
    ``alpha = 0.1, n = 9`` gives ``k = 9`` (``10 * 0.9`` in floats is ``9.000000000000002``,
    whose ceiling 10 would be an off-by-one error) and ``alpha = 0.3, n = 9`` gives ``k = 7``.

    Parameters
    ----------
    n : int
        Number of calibration scores, ``>= 1``.
    alpha : float
        Miscoverage level in ``(0, 1)``.

    Returns
    -------
    int
        ``k``; may exceed ``n`` (then no finite threshold is valid).

    Examples
    --------
    >>> conformal_rank(9, 0.1), conformal_rank(99, 0.1), conformal_rank(5, 0.1)
    (9, 90, 6)
    """
    n = check_int(n, "n", "conformal_rank", low=1)
    a = _exact(check_probability(alpha, "alpha", "conformal_rank"))
    return math.ceil((n + 1) * (1 - a))


def smallest_n(alpha: float) -> int:
    """Smallest ``n`` with ``conformal_rank(n, alpha) <= n``, i.e. ``n >= 1/alpha - 1``."""
    a = _exact(check_probability(alpha, "alpha", "smallest_n"))
    return max(1, math.ceil(1 / a - 1))


def conformal_threshold(scores: Any, alpha: float) -> float:
    """The ``k``-th smallest of ``scores`` with ``k = conformal_rank(n, alpha)``; ``inf`` if k > n.

    Parameters
    ----------
    scores : array_like of shape (n,)
        Calibration scores, finite.
    alpha : float
        In ``(0, 1)``.

    Returns
    -------
    float
        The threshold; ``inf`` (the full label set) when ``k > n``, with a
        :class:`FullSetWarning` naming the smallest ``n`` that works.

    Examples
    --------
    >>> conformal_threshold([0.5, 0.1, 0.9, 0.3], alpha=0.2)
    0.9
    """
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    if s.size == 0:
        raise ValueError("The calibration set is empty: conformal_threshold needs n >= 1 scores.")
    if not np.all(np.isfinite(s)):
        raise ValueError("'scores' must be finite.")
    k = conformal_rank(s.size, alpha)
    if k > s.size:
        warnings.warn(
            f"n = {s.size} calibration points are too few for alpha = {alpha:g}: the rank "
            f"ceil((n+1)(1-alpha)) = {k} exceeds n, so every label is in every set. "
            f"Use at least n = {smallest_n(alpha)} calibration points.",
            FullSetWarning,
            stacklevel=2,
        )
        return float("inf")
    return float(np.partition(s, k - 1)[k - 1])


class SplitConformal(ConformalBase):
    """Split conformal prediction sets with the exact finite-sample rank.

    Parameters
    ----------
    score : {"lac", "aps", "aps-randomized"}, default="lac"
        Conformity score (:mod:`privcal.conformal.scores`).
    alpha : float, default=0.1
        Miscoverage level in ``(0, 1)``: sets cover with probability ``>= 1 - alpha``.
    calibrator : fitted calibrator or None, default=None
        If given, probabilities are ``calibrator.predict_proba(logits)`` instead of
        ``softmax(logits)``. It must have been fitted on data **other** than the calibration set
        (otherwise exchangeability, and so the guarantee, is lost).
    seed : int or None, default=0
        Seeds the ``u ~ U(0, 1)`` draws of randomised APS (ignored by the other scores).
        ``random_state`` is its deprecated name (one release, ``DeprecationWarning``).

    Attributes
    ----------
    threshold_ : float
        ``s_(k)``, or ``inf`` when ``k > n`` (every label in every set).
    rank_ : int
        ``k = ceil((n+1)(1-alpha))``.
    n_ : int
        Number of calibration points.
    n_classes_ : int

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> z = rng.normal(size=(200, 3)); y = z.argmax(1)
    >>> cp = SplitConformal(alpha=0.1).fit(z, y)
    >>> cp.rank_, cp.predict_set(z[:2]).shape
    (181, (2, 3))
    """

    _owner = "SplitConformal"

    @renamed(old="random_state", new="seed", owner="SplitConformal")
    def __init__(
        self,
        score: str = "lac",
        alpha: float = 0.1,
        calibrator: Any = None,
        seed: int | None = 0,
    ) -> None:
        store_params(self, locals())

    def fit(
        self, logits: Any, labels: Any, input: str = "logits", *, groups: Any = None
    ) -> SplitConformal:
        """Compute the calibration scores and the threshold ``s_(k)``.

        Parameters
        ----------
        logits : array_like of shape (n, C)
            Calibration outputs (logits, or probabilities with ``input="probs"``).
        labels : array_like of shape (n,)
            True labels.
        input : {"logits", "probs"}, default="logits"
        groups : array_like of shape (n,), optional
            One group label per row: one threshold per group from its own rows (Mondrian
            conformal prediction: coverage within every group), in ``thresholds_``.

        Returns
        -------
        self
        """
        alpha = self._validate_params()["alpha"]
        s = self._calibration_scores(logits, labels, input)
        self.thresholds_ = None
        if groups is not None:
            rows = group_rows(groups, s.size, self._owner)
            self.thresholds_ = {g: conformal_threshold(s[idx], alpha) for g, idx in rows.items()}
            self.group_sizes_ = {g: int(idx.size) for g, idx in rows.items()}
        self.n_ = int(s.size)
        self.rank_ = conformal_rank(self.n_, alpha)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FullSetWarning)
            self.threshold_ = conformal_threshold(s, alpha)
        if not np.isfinite(self.threshold_):
            warnings.warn(
                f"SplitConformal: n = {self.n_} calibration points are too few for alpha = "
                f"{alpha:g} (rank {self.rank_} > n); every prediction set is the full label set. "
                f"Use at least n = {smallest_n(alpha)} calibration points.",
                FullSetWarning,
                stacklevel=2,
            )
        return self

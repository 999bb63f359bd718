"""The smallest calibration set with a valid private threshold, for any registered mechanism.

Each mechanism's plan is a public function of ``n``, ``alpha``, ``epsilon`` and the tuning, and
whether it has a finite threshold (``k <= n``, or ``q~ < 1``) is monotone in ``n``
(:meth:`~privcal.conformal.private.ThresholdMechanism.validity`). :func:`min_calibration_size`
finds the boundary by a doubling search and a bisection; it reads no data and costs no privacy.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from privcal._params import EPSILON, check_probability, renamed
from privcal.conformal.private.mechanism import MECHANISMS, get_mechanism

__all__ = ["min_calibration_size"]


@renamed(old="bins", new="n_bins", owner="min_calibration_size")
def min_calibration_size(
    alpha: float,
    epsilon: float,
    n_bins: Any = "auto",
    method: str = "rank",
    slope: Any = "auto",
) -> int:
    """Smallest ``n`` for which ``PrivateConformal(method=...)`` has a valid threshold.

    ``"rank"``: ``k <= n``; otherwise ``q~ < 1`` (for ``"angelopoulos2022"`` with ``"auto"``
    n_bins: for some ``m`` of :data:`CANDIDATE_BINS`). Validity is monotone in ``n``, so a doubling
    search and a bisection find it exactly.

    Examples
    --------
    >>> min_calibration_size(0.1, 1.0), min_calibration_size(0.1, 1.0, method="angelopoulos2022")
    (96, 213)
    """
    owner = "min_calibration_size"
    a = check_probability(alpha, "alpha", owner)
    eps = EPSILON.check(epsilon, "epsilon", owner)
    get_mechanism(method, owner)
    if isinstance(n_bins, str) and isinstance(slope, str | int | float):
        return _min_calibration_size_auto(a, eps, method, slope)  # cached: the common case
    return _smallest(MECHANISMS[method].validity(a, eps, n_bins, slope))


@functools.lru_cache(maxsize=64)
def _min_calibration_size_auto(a: float, eps: float, method: str, slope: Any) -> int:
    return _smallest(MECHANISMS[method].validity(a, eps, "auto", slope))


def _smallest(feasible: Callable[[int], bool]) -> int:
    """The smallest ``n >= 1`` with ``feasible(n)``, for a monotone ``feasible``: doubling
    from 1, then bisection."""
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

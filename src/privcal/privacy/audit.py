"""Statistical audit of a mechanism's privacy claim from samples on two neighbouring datasets.

In the spirit of Google's ``verifyApproximateDp`` and DP-Sniper (Bichsel et al. 2021): draw
``n`` samples of ``M(D)`` and ``n'`` of ``M(D')``, count how often each *pre-specified* event
``B_i`` (``i = 1..m``) occurs, ``k_i ~ Bin(n, p_i)`` and ``k'_i ~ Bin(n', p'_i)``, and declare a
violation when

    lower(p_i) > e^epsilon upper(p'_i) + delta      (or the same with roles swapped),

with exact one-sided Clopper-Pearson bounds at level ``alpha / (4 m)`` each (Bonferroni over the
``4 m`` bounds). An ``(epsilon, delta)``-DP mechanism has ``p_i <= e^epsilon p'_i + delta`` for
every event, so **a correct mechanism fails with probability at most ``alpha``**, whatever the
sample sizes. ``epsilon_lower = max_i, both directions, log((lower(p_i) - delta) /
upper(p'_i))`` (0 when none is positive) is a ``1 - alpha`` lower confidence bound on the privacy
loss these events reveal; the audit fails iff ``epsilon_lower > epsilon``. Events must be fixed
before the samples are seen (bins of a fixed grid, tails beyond fixed thresholds).

*Largest reportable bound* (:func:`max_epsilon_lower`): an event seen in all ``n`` samples of
``M(D)`` and none of ``M(D')`` gives

    epsilon_max = log((level^(1/n) - delta) / (1 - level^(1/n'))),   level = alpha / (4 m),

1.91 at ``n = n' = 100``, ``level = 1e-6``: size an audit so that ``epsilon_max >= 2 epsilon``.
More: docs/privacy.md#auditing-mechanisms-statistically-privcalprivacyaudit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import beta as beta_dist

from privcal._params import NON_NEGATIVE, check_int, check_probability, check_real

__all__ = ["AuditResult", "audit_dp", "audit_pure_dp", "clopper_pearson", "max_epsilon_lower"]

Event = Callable[[np.ndarray], Any]


def clopper_pearson(k: Any, n: int, level: float) -> tuple[np.ndarray, np.ndarray]:
    """One-sided exact Clopper-Pearson bounds ``(lower, upper)``, each of error ``level``.

    ``P(p < lower) <= level`` and ``P(p > upper) <= level`` for ``k ~ Bin(n, p)``.
    ``lower = Beta^{-1}(level; k, n - k + 1)`` (0 when ``k = 0``) and
    ``upper = Beta^{-1}(1 - level; k + 1, n - k)`` (1 when ``k = n``).
    """
    k = np.asarray(k, dtype=float)
    with np.errstate(invalid="ignore"):
        lower = np.where(k > 0, beta_dist.ppf(level, np.maximum(k, 1), n - k + 1), 0.0)
        upper = np.where(k < n, beta_dist.ppf(1 - level, k + 1, np.maximum(n - k, 1)), 1.0)
    return lower, upper


@dataclass(frozen=True)
class AuditResult:
    """Outcome of :func:`audit_dp`.

    Attributes
    ----------
    passed : bool
        No event showed a violation at familywise error ``alpha``.
    epsilon, delta, alpha : float
        The claim audited and the error probability.
    epsilon_lower : float
        Lower confidence bound (level ``1 - alpha``) on the privacy loss shown by the events.
    n, n_prime : int
        Sample sizes.
    counts, counts_prime : ndarray of int
        Event counts under ``D`` and ``D'``.
    violations : tuple of int
        Indices of the events where a violation was found (either direction).
    worst_event : int
        Index of the event attaining ``epsilon_lower`` (-1 if none).
    """

    passed: bool
    epsilon: float
    delta: float
    alpha: float
    epsilon_lower: float
    n: int
    n_prime: int
    counts: np.ndarray
    counts_prime: np.ndarray
    violations: tuple[int, ...]
    worst_event: int

    def __str__(self) -> str:
        verdict = "PASSED" if self.passed else "FAILED"
        return (
            f"DP audit {verdict}: claim (epsilon={self.epsilon:g}, delta={self.delta:g}), "
            f"lower bound epsilon >= {self.epsilon_lower:.4g} at confidence {1 - self.alpha:g} "
            f"({len(self.counts)} events, n={self.n}, n'={self.n_prime}, "
            f"{len(self.violations)} violating events)"
        )


def _event_matrix(samples: np.ndarray, events: Any, name: str) -> np.ndarray:
    """Boolean matrix (m events x n samples)."""
    callables = isinstance(events, Sequence) and len(events) > 0
    if callables and all(callable(e) for e in events):
        rows = []
        for e in events:
            hit = np.asarray(e(samples), dtype=bool)
            if hit.shape != (samples.shape[0],):
                raise ValueError(
                    f"Each event of audit_dp must map {name} to a boolean array of shape "
                    f"({samples.shape[0]},). Got shape {hit.shape} instead."
                )
            rows.append(hit)
        return np.stack(rows)
    edges = np.asarray([] if callable(events) else events, dtype=float)
    if edges.ndim != 1 or edges.size == 0 or not np.all(np.diff(edges) > 0):
        raise ValueError(
            "The 'events' parameter of audit_dp must be an increasing 1-D array of bin edges or "
            f"a sequence of callables. Got {events!r} instead."
        )
    if samples.ndim != 1:
        raise ValueError(
            f"Bin edges need 1-D samples; {name} has shape {samples.shape}. Pass events instead."
        )
    # buckets (-inf, e0), [e0, e1), ..., [e_last, inf)
    idx = np.searchsorted(edges, samples, side="right")
    return idx[None, :] == np.arange(edges.size + 1)[:, None]


def audit_dp(
    sample_d: Any,
    sample_d_prime: Any,
    events: Any,
    epsilon: float,
    delta: float = 0.0,
    *,
    alpha: float = 1e-6,
) -> AuditResult:
    """Audit an ``(epsilon, delta)``-DP claim from samples of ``M(D)`` and ``M(D')``.

    Parameters
    ----------
    sample_d, sample_d_prime : array_like, shape (n,) or (n, ...)
        Independent samples of the mechanism on two neighbouring datasets.
    events : array_like of float or sequence of callables
        Either increasing bin edges ``e_0 < ... < e_{m-2}`` (buckets ``(-inf, e_0)``,
        ``[e_0, e_1)``, ..., ``[e_{m-2}, inf)``, so they cover the line), or callables mapping
        the sample array to a boolean array (arbitrary events, e.g. tails ``x > t``). Fix them
        before drawing.
    epsilon : float
        Claimed epsilon, ``>= 0``.
    delta : float, default=0.0
        Claimed delta in ``[0, 1)``.
    alpha : float, default=1e-6
        Probability that a correct mechanism fails the audit (familywise, Bonferroni).

    Notes
    -----
    See the module docstring for the statistics. Both directions (``D`` vs ``D'`` and ``D'`` vs
    ``D``) are checked.
    """
    owner = "audit_dp"
    eps = NON_NEGATIVE.check(epsilon, "epsilon", owner)
    dlt = check_real(delta, "delta", owner, low=0.0, high=1.0, high_open=True)
    a = check_probability(alpha, "alpha", owner)
    x = np.asarray(sample_d)
    y = np.asarray(sample_d_prime)
    if x.ndim == 0 or y.ndim == 0 or x.shape[0] == 0 or y.shape[0] == 0:
        raise ValueError(f"{owner} needs non-empty sample arrays. Got {x.shape} and {y.shape}.")
    ex = _event_matrix(x, events, "sample_d")
    ey = _event_matrix(y, events, "sample_d_prime")
    n, n2 = x.shape[0], y.shape[0]
    k = ex.sum(axis=1)
    k2 = ey.sum(axis=1)
    m = k.size
    level = a / (4.0 * m)
    lo1, hi1 = clopper_pearson(k, n, level)
    lo2, hi2 = clopper_pearson(k2, n2, level)
    bound = math.exp(eps)
    viol = (lo1 > bound * hi2 + dlt) | (lo2 > bound * hi1 + dlt)

    def loss(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        num = lo - dlt
        with np.errstate(divide="ignore", invalid="ignore"):
            out = np.where((num > 0) & (hi > 0), np.log(np.maximum(num, 1e-300) / hi), 0.0)
        return np.maximum(out, 0.0)

    per_event = np.maximum(loss(lo1, hi2), loss(lo2, hi1))
    worst = int(np.argmax(per_event)) if per_event.max() > 0 else -1
    lower, violations = float(per_event.max()), tuple(int(i) for i in np.flatnonzero(viol))
    passed = not bool(viol.any())
    return AuditResult(passed, eps, dlt, a, lower, n, n2, k, k2, violations, worst)


def audit_pure_dp(
    sample_d: Any,
    sample_d_prime: Any,
    events: Any,
    epsilon: float,
    *,
    alpha: float = 1e-6,
) -> AuditResult:
    """:func:`audit_dp` with ``delta = 0``: audit a pure ``epsilon``-DP claim."""
    return audit_dp(sample_d, sample_d_prime, events, epsilon, 0.0, alpha=alpha)


def max_epsilon_lower(
    runs: int,
    alpha: float = 1e-6,
    events: int = 1,
    delta: float = 0.0,
    runs_prime: int | None = None,
) -> float:
    """The largest ``epsilon_lower`` :func:`audit_dp` can report with these sample sizes.

    Reached when one event holds in all ``runs`` samples of ``M(D)`` and in none of the
    ``runs_prime`` (default ``runs``) samples of ``M(D')`` (the neighbours separate
    completely): ``log((level^(1/n) - delta) / (1 - level^(1/n')))`` with the per-bound level
    ``alpha / (4 events)`` (see the module docstring). 0 when even that shows nothing.

    Parameters
    ----------
    runs : int
        Samples of ``M(D)`` (and of ``M(D')`` unless ``runs_prime`` is given), ``>= 1``.
    alpha : float, default=1e-6
        The audit's error probability.
    events : int, default=1
        Number of events the audit tests (the Bonferroni factor ``m``); more events, a lower
        ceiling.
    delta : float, default=0.0
        The claimed delta, in ``[0, 1)``.
    runs_prime : int, optional
        Samples of ``M(D')``.
    """
    owner = "max_epsilon_lower"
    n = check_int(runs, "runs", owner, low=1)
    n2 = n if runs_prime is None else check_int(runs_prime, "runs_prime", owner, low=1)
    m = check_int(events, "events", owner, low=1)
    a = check_probability(alpha, "alpha", owner)
    dlt = check_real(delta, "delta", owner, low=0.0, high=1.0, high_open=True)
    level = a / (4.0 * m)
    lower = math.exp(math.log(level) / n)
    upper = -math.expm1(math.log(level) / n2)
    if lower <= dlt:
        return 0.0
    return max(0.0, math.log((lower - dlt) / upper))

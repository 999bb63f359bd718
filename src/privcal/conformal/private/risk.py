"""Private conformal risk control: ``PrivateRiskControl``, a sparse-vector search of the curve.

The statistic is :func:`~privcal.conformal.risk.risk_curve` (the same function as
:class:`~privcal.conformal.risk.RiskControl`); this module adds only the mechanism,
:func:`first_crossing`, and the margin it costs, :func:`noise_margin`. Derivation and guarantee:
:class:`PrivateRiskControl` ("Privacy", "Risk"); docs/conformal.md#conformal-risk-control.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from privcal._params import EPSILON, check_probability
from privcal.conformal.risk import RiskControl, RiskLoss, risk_curve
from privcal.privacy.filter import pure_dp_curve
from privcal.privacy.guarantee import PrivacyReport
from privcal.privacy.measurement import Measurement, register_measurement
from privcal.privacy.noise import NoiseSource, noise_kind, resolve_noise
from privcal.privacy.odometer import LedgerClone, as_odometer

__all__ = [
    "RISK_SPARSE_VECTOR",
    "PrivateRiskControl",
    "first_crossing",
    "noise_margin",
    "query_sensitivity",
]


def query_sensitivity(target: float, bound: float) -> float:
    """Sensitivity of each query ``q_j = sum_i (a - L_i(lambda_j))`` of :func:`first_crossing`.

    Privacy
    -------
    Add or remove one calibration row changes every ``q_j`` by ``a - L(lambda_j)`` with
    ``L in [0, B]``, so by at most ``max(a, B - a)``: sensitivity max(a, B - a) per query (the
    threshold ``B - a + t`` is public and reads no ``n``).
    """
    return max(target, bound - target)


#: The release of :func:`first_crossing` (AboveThreshold, Dwork & Roth 2014, Alg. 1).
RISK_SPARSE_VECTOR = register_measurement(
    Measurement(
        name="conformal.risk_control.sparse_vector",
        statistic="the first grid lambda whose risk query sum_i (a - L_i(lambda)) passes the "
        "threshold B - a + t (AboveThreshold: threshold noise Lap(2D/eps), query noise "
        "Lap(4D/eps), D the query sensitivity)",
        mechanism="sparse-vector",
        norm="utility",
        sensitivity=query_sensitivity,
        formula="max(a, B - a)",
        proof="privcal.conformal.private.risk.query_sensitivity",
    )
)


def noise_margin(epsilon: float, sensitivity: float, m: int, beta: float) -> float:
    """``t`` with ``P(rho - nu_j < -t for some j <= m) <= beta`` for :func:`first_crossing`'s noise.

    ``rho ~ Lap(2D/eps)``, ``nu_j ~ Lap(4D/eps)``: ``P(rho < -t_1) = exp(-t_1 eps/(2D)) / 2 =
    beta/2`` and, by the union bound, ``P(max_j nu_j > t_2) <= m exp(-t_2 eps/(4D)) / 2 =
    beta/2``, so ``t = (2D/eps) log(1/beta) + (4D/eps) log(m/beta)``.
    """
    d = sensitivity / epsilon
    return 2.0 * d * math.log(1.0 / beta) + 4.0 * d * math.log(m / beta)


def first_crossing(
    queries: np.ndarray, threshold: float, epsilon: float, sensitivity: float, noise: NoiseSource
) -> int:
    """AboveThreshold: the first ``j`` with ``q_j + nu_j >= threshold + rho`` (else the last).

    ``rho ~ Lap(2D/eps)`` once, ``nu_j ~ Lap(4D/eps)`` per query: ``eps``-DP for the index when
    every query moves by at most ``D`` between neighbours (Dwork & Roth 2014, Thm. 3.23; Lyu, Su
    & Li 2017, Alg. 1). The ``nu_j`` of the queries after the stop are drawn but never read, so
    drawing all ``m`` at once is the sequential algorithm. "No query passes" is the ``bottom``
    outcome of the same proof, reported as the last index (the full grid's end).
    """
    rho = float(noise.laplace(2.0 * sensitivity / epsilon))
    nu = np.asarray(noise.laplace(4.0 * sensitivity / epsilon, size=queries.size))
    hit = queries + nu >= threshold + rho
    return int(hit.argmax()) if hit.any() else queries.size - 1


class PrivateRiskControl(LedgerClone, RiskControl):
    """Epsilon-DP conformal risk control: ``E[L(C_lambda_(x), y)] <= alpha``.

    Parameters
    ----------
    loss : {"fnr", "miscoverage"} or RiskLoss, default="fnr"
    alpha : float, default=0.1
        The guaranteed expected loss, in ``(0, 1)``.
    epsilon : float, default=1.0
        Privacy loss in ``(0, inf)`` of the one release (``lambda_``).
    lambdas : array_like or None, default=None
        The public grid (``None``: ``DEFAULT_LAMBDAS``, 101 points).
    beta : float, default=0.001
        The failure probability of the noise bound ``t`` (:func:`noise_margin`); the rule targets
        ``a = alpha - beta B`` so that the failures cost at most ``beta B`` (see "Risk").
    noise : NoiseSource or None, default=None
        ``None``: ``SecureNoise()``; ``SeededNoise(seed)`` warns and the report says
        ``"not private: seeded noise"``.
    ledger : PrivacyOdometer, path or None, default=None
        Charged ``epsilon`` before the noise is drawn.

    Attributes
    ----------
    lambda_, lambda_index_, risk_bound_ (= ``alpha``), bound_ : as :class:`RiskControl`
        (no ``risk_curve_``: the curve without noise is not released; no ``n_``: under
        add/remove the number of rows is private, and only ``n >= n_min`` is public)
    margin_ : float
        ``t``.
    target_ : float
        ``a = alpha - beta B``.
    privacy_report_ : PrivacyReport
        One release, ``unit="example"``, ``relation="add/remove"``, the public terms below.

    Privacy
    -------
    Unit: one calibration row; relation: **add/remove** one row. Public: the grid, ``B``,
    ``alpha``, ``beta``, ``epsilon`` (so ``a``, ``D`` and ``t``), and whether ``n`` is at least
    the size rule's ``n_min`` (a refused fit raises before anything is released).

    * The queries ``q_j = sum_i (a - L_i(lambda_j)) = n (a - R_hat(lambda_j))`` come from
      :func:`~privcal.conformal.risk.risk_curve` (one statistic with the non-private twin).
      One row changes every ``q_j`` by ``a - L(lambda_j) in [a - B, a]``: sensitivity
      ``D = max(a, B - a)`` per query (:func:`query_sensitivity`). The threshold
      ``T = B - a + t`` reads no ``n``, so nothing else depends on the row count.
    * :func:`first_crossing` (AboveThreshold with ``rho ~ Lap(2D/eps)``, ``nu_j ~ Lap(4D/eps)``,
      halting at the first passing query) is ``epsilon``-DP for the released index, however
      many queries it reads (Dwork & Roth 2014, Thm. 3.23); ``lambda_`` and every set are
      post-processing. Releasing the whole noisy curve instead would need Laplace noise of
      scale ``D m / epsilon`` per point (L1 sensitivity ``D m``).

    Risk
    ----
    ``E[L(lambda_J)] <= alpha``: on the event ``E = {rho - nu_j >= -t for all j}`` (probability
    ``>= 1 - beta``, :func:`noise_margin`) ``lambda_J`` is at least the non-private rule at level
    ``a``, and ``not E`` costs at most ``beta B`` (proof: docs/conformal.md#conformal-risk-control,
    "Guarantee"). The rule is stricter by about ``beta B + t / n`` in risk (0.012 at ``n = 5000``,
    ``epsilon = 1``, ``alpha = 0.1``). Size rule: refused when ``n < n_min = ceil((B + t)/a - 1)``
    (no grid point could pass).

    Audited as deployed by ``privcal audit private-risk-control``.

    Examples
    --------
    >>> from privcal.data.synthetic import multilabel
    >>> p, y = multilabel(3000, seed=0)
    >>> prc = PrivateRiskControl("fnr", alpha=0.1, epsilon=1.0).fit(p, y)
    >>> rep = prc.privacy_report_
    >>> rep.epsilon, rep.relation, rep.status, round(prc.margin_, 1)
    (1.0, 'add/remove', 'private', 54.0)
    """

    _owner = "PrivateRiskControl"

    def __init__(
        self,
        loss: Any = "fnr",
        alpha: float = 0.1,
        epsilon: float = 1.0,
        lambdas: Any = None,
        beta: float = 0.001,
        noise: NoiseSource | None = None,
        ledger: Any = None,
    ) -> None:
        super().__init__(loss, alpha, lambdas)
        self.epsilon = epsilon
        self.beta = beta
        self.noise = noise
        self.ledger = ledger

    def _plan(self, rule: RiskLoss, alpha: float, m: int) -> tuple[float, float, float, float]:
        """``(eps, a, D, t)`` from public quantities only."""
        owner, bound = self._owner, float(rule.bound)
        eps = EPSILON.check(self.epsilon, "epsilon", owner)
        beta = check_probability(self.beta, "beta", owner)
        a = alpha - beta * bound
        if a <= 0:
            raise ValueError(
                f"{owner}: beta B = {beta * bound:g} must be below alpha = {alpha:g} (the rule "
                "targets alpha - beta B); use a smaller beta."
            )
        d = query_sensitivity(a, bound)
        return eps, a, d, noise_margin(eps, d, m, beta)

    def fit(self, inputs: Any, labels: Any, input: str = "probs") -> PrivateRiskControl:
        """Check everything, charge the ledger, then release ``lambda_`` (class docstring)."""
        owner = self._owner
        self._warn_refit()
        rule, alpha, lam = self._check()
        eps, a, d, t = self._plan(rule, alpha, lam.size)
        odometer = as_odometer(self.ledger, owner)
        curve = risk_curve(rule, inputs, labels, lam, input=input, owner=owner)
        n = int(np.shape(inputs)[0])
        self._check_rows(n, a, rule.bound, t)
        src = resolve_noise(self.noise, owner)
        release = RISK_SPARSE_VECTOR.record(
            f"risk_control(loss={rule.name}, m={lam.size})", eps, target=a, bound=rule.bound
        )
        if odometer is not None:
            rdp = pure_dp_curve(eps, odometer.rule.orders)
            odometer.spend_release(release, rdp=rdp, noise=noise_kind(src))
        queries = n * (a - curve)
        j = first_crossing(queries, rule.bound - a + t, eps, d, src)
        self._set(rule, lam, None, None, j, alpha)  # neither the curve nor n is released
        self.margin_, self.target_ = t, a
        public = (
            f"the grid of {lam.size} lambdas in [{lam[0]:g}, {lam[-1]:g}]",
            f"loss = {rule.name!r}, bound B = {rule.bound:g}",
            f"alpha = {alpha:g}, beta = {self.beta:g} (target a = {a:g})",
            f"epsilon = {eps:g}, noise bound t = {t:.4g}",
            "n >= n_min (the size rule: a refused fit releases nothing)",
        )
        self.privacy_report_ = PrivacyReport(
            [release], "example", "add/remove", public=public, noise=noise_kind(src)
        )
        return self

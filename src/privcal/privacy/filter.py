"""The admission rule of a ledger: basic composition or a Rényi filter, valid under full adaptivity.

A ledger (:class:`~privcal.privacy.odometer.PrivacyOdometer`) admits a sequence of releases
whose privacy parameters may be chosen after seeing earlier answers (fully adaptive
composition). A rule that decides, before each release, whether it may run is a **privacy
filter** (Rogers, Roth, Ullman & Vadhan 2016); this module states the rule privcal uses, the RDP
curves a release carries for it, and the figures a ledger reports.

Every release ``i`` records its ``(epsilon_i, delta_i)`` and its **RDP curve** ``r_i(alpha)`` on
the ledger's fixed grid of orders :data:`ORDERS` (Mironov 2017):

* a pure ``epsilon``-DP release (Laplace, exponential mechanism, a whole pure-DP fit):
  ``r(alpha) = min(epsilon, alpha epsilon^2 / 2)`` (:func:`pure_dp_curve`; ``epsilon`` because
  ``D_alpha <= D_inf``; ``alpha epsilon^2 / 2`` because ``epsilon``-DP implies
  ``epsilon^2/2``-zCDP, Bun & Steinke 2016, Prop. 3.3);
* a ``rho``-zCDP release (Gaussian rounds): ``r(alpha) = alpha rho`` (:func:`zcdp_curve`);
* DP-SGD: the Poisson-subsampled Gaussian over its steps (:func:`dpsgd_curve`).

The curves are computed by ``dp_accounting`` (:class:`dp_accounting.rdp.RdpAccountant` on the
grid) and the RDP-to-DP conversion is its ``compute_epsilon`` (Canonne, Kamath & Steinke 2020,
Prop. 12; Asoodeh et al. 2021). A release recorded without a curve and with ``delta > 0`` has
curve ``+inf`` (the Rényi branch can never admit past it).

The rule (:class:`FilterRule`)
------------------------------
A ledger with budget ``(epsilon, delta)`` splits ``delta = delta_b + delta_R`` once, when it is
created (``renyi_delta = delta_R``, stored in the ledger). A release is admitted iff, with it,
**either** branch holds for the whole record:

* **basic**: ``sum epsilon_i <= epsilon`` and ``sum delta_i <= delta_b``;
* **Rényi at order alpha**, for some ``alpha`` in the grid ``L`` (``|L| = m`` orders):
  ``conv_alpha(sum_i r_i(alpha), delta_R / m) <= epsilon``, with ``conv_alpha(R, d) =
  R + log(1 - 1/alpha) - log(d alpha) / (alpha - 1)`` (``dp_accounting``'s conversion at one
  order).

Otherwise it is refused and nothing is recorded. The sums only grow, so a branch that fails
once fails for good.

The guarantee
-------------
The ledger is an ``(epsilon, delta)``-DP **filter**: ``(epsilon, delta)``-DP under full
adaptivity, whatever order and size the steps take. Each branch alone is a known filter (basic:
Rogers et al. 2016, Whitehouse et al. 2023; Rényi at one order: Feldman & Zrnic 2021, Thm. 3.1,
so ``(epsilon, delta_R / m)``-DP); admitting when *either* holds is valid for the union over the
branches, paid in delta: ``delta_b + m (delta_R / m) = delta``. That split is fixed in advance,
which is why a ledger stores ``renyi_delta`` and its grid and refuses to be reopened with others.
With ``renyi_delta = 0`` (the default of :class:`PrivacyOdometer`, and what data sources and
Flower clients use) the rule is basic composition alone. Proof:
docs/privacy.md#proof-of-the-ledgers-filter.

What a ledger states (:class:`Composition`): the basic sums ``(sum epsilon_i, sum delta_i)``
and the Rényi figure ``(min_alpha conv_alpha(sum r_i(alpha), delta_R / m), delta_R)``, the smaller
epsilon *stated*; for adaptively chosen steps the guarantee is the filter's, the budget.

*Neighbouring relation:* one, fixed with the budget (:attr:`FilterRule.relation`). A
``"substitute"`` ledger counts an add/remove release by group privacy, ``(2 epsilon, (1 +
e^epsilon) delta)`` (the curve of ``2 epsilon``-DP for a pure one, none for an approximate one);
an ``"add/remove"`` ledger (the default) refuses a substitute release.

Plans fixed in advance (the rounds of a federation, the queries of a search) reach a ledger as
one step, accounted by their own accountant (e.g.
:func:`~privcal.privacy.accounting.pld_gaussian_epsilon`); a PLD rule over adaptive steps would
not be a valid filter, so the ledger's rule stays basic-or-Rényi.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from privcal._params import (
    EPSILON,
    FRACTION,
    NON_NEGATIVE,
    POSITIVE,
    check_int,
    check_option,
    check_real,
)
from privcal.privacy.guarantee import RELATIONS

__all__ = [
    "ORDERS",
    "Composition",
    "FilterRule",
    "Spend",
    "SpendRecord",
    "as_relation",
    "compose_spends",
    "dpsgd_curve",
    "event_curve",
    "pure_dp_curve",
    "zcdp_curve",
]

#: The fixed grid of Rényi orders every privcal ledger records curves on (16 orders, so the
#: Rényi branch pays ``log 16`` in its per-order delta ``delta_R / 16``).
ORDERS: tuple[float, ...] = (
    1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 16.0, 24.0, 32.0, 64.0,
)  # fmt: skip


def event_curve(event: Any, count: int = 1, orders: Sequence[float] | None = None) -> np.ndarray:
    """RDP curve of ``count`` compositions of a ``dp_accounting`` event on ``orders``.

    ``dp_accounting.rdp.RdpAccountant(orders)`` composes the event; its curve is read from the
    accountant (``dp_accounting`` has no public getter for it).

    Raises
    ------
    ValueError
        If ``dp_accounting``'s RDP accountant does not support the event.
    """
    from dp_accounting import rdp

    acc = rdp.RdpAccountant([float(a) for a in (ORDERS if orders is None else orders)])
    if not acc.supports(event):
        raise ValueError(
            f"dp_accounting's RDP accountant cannot account for {event!r}; record the release "
            "with an explicit rdp curve or without one (basic composition only)."
        )
    acc.compose(event, check_int(count, "count", "event_curve", low=0))
    return np.array(acc._rdp, dtype=np.float64)


def pure_dp_curve(epsilon: float, orders: Sequence[float] | None = None) -> np.ndarray:
    """RDP curve of a pure ``epsilon``-DP release: ``min(epsilon, alpha epsilon^2 / 2)``.

    ``epsilon``-DP implies ``D_alpha <= D_inf <= epsilon`` and ``epsilon^2/2``-zCDP (Bun &
    Steinke 2016, Prop. 3.3), i.e. ``D_alpha <= alpha epsilon^2 / 2`` for every ``alpha > 1``;
    the zCDP part is ``dp_accounting``'s ``ZCDpEvent(epsilon^2 / 2)``.
    """
    import dp_accounting

    eps = NON_NEGATIVE.check(epsilon, "epsilon", "pure_dp_curve")
    zcdp = event_curve(dp_accounting.ZCDpEvent(eps * eps / 2.0), 1, orders)
    return np.minimum(zcdp, eps)


def zcdp_curve(rho: float, orders: Sequence[float] | None = None) -> np.ndarray:
    """RDP curve of a ``rho``-zCDP release: ``alpha rho`` (Bun & Steinke 2016, Def. 1.1)."""
    import dp_accounting

    r = NON_NEGATIVE.check(rho, "rho", "zcdp_curve")
    return event_curve(dp_accounting.ZCDpEvent(r), 1, orders)


def dpsgd_curve(
    noise_multiplier: float,
    sample_rate: float,
    steps: int,
    orders: Sequence[float] | None = None,
) -> np.ndarray:
    """RDP curve of ``steps`` Poisson-subsampled Gaussian steps (DP-SGD, DP-SGLD).

    The same event :func:`privcal.privacy.accounting.rdp_epsilon` composes (Mironov, Talwar &
    Zhang 2019), on the ledger's grid.
    """
    import dp_accounting

    owner = "dpsgd_curve"
    z = POSITIVE.check(noise_multiplier, "noise_multiplier", owner)
    q = FRACTION.check(sample_rate, "sample_rate", owner)
    n = check_int(steps, "steps", owner, low=0)
    event = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z))
    return event_curve(event, n, orders)


@dataclass(frozen=True)
class Composition:
    """What a ledger's record composes to (:meth:`FilterRule.compose`).

    Attributes
    ----------
    basic_epsilon, basic_delta : float
        Basic composition: the sums.
    renyi_epsilon, renyi_delta : float
        The Rényi figure ``min_alpha conv_alpha(sum r_i(alpha), renyi_delta / m)`` at
        ``renyi_delta`` (``inf`` and ``0`` when the ledger has no Rényi branch).
    order : float or None
        The order that gives the Rényi figure.
    relation : {"add/remove", "substitute"}
        The neighbouring relation the figures hold under.
    """

    basic_epsilon: float
    basic_delta: float
    renyi_epsilon: float
    renyi_delta: float
    order: float | None
    relation: str = "add/remove"

    @property
    def stated(self) -> str:
        """``"renyi"`` when its epsilon is strictly smaller than the basic sum, else ``"basic"``."""
        return "renyi" if self.renyi_epsilon < self.basic_epsilon else "basic"

    @property
    def epsilon(self) -> float:
        """The stated epsilon (the smaller of the two)."""
        return self.renyi_epsilon if self.stated == "renyi" else self.basic_epsilon

    @property
    def delta(self) -> float:
        """The delta of the stated figure."""
        return self.renyi_delta if self.stated == "renyi" else self.basic_delta


@dataclass(frozen=True)
class FilterRule:
    """The admission rule of a ledger with budget ``(epsilon, delta)`` (module docstring).

    Parameters
    ----------
    epsilon : float
        Epsilon budget, ``> 0``.
    delta : float
        Delta budget in ``[0, 1)``.
    renyi_delta : float
        ``delta_R``, the part of ``delta`` backing the Rényi branch, in ``[0, delta]``; the basic
        branch keeps ``delta - renyi_delta``. ``0``: basic composition only.
    orders : tuple of float
        The Rényi orders (all ``> 1.01``).
    relation : {"add/remove", "substitute"}, default="add/remove"
        The neighbouring relation of the ledger's guarantee.
    """

    epsilon: float
    delta: float
    renyi_delta: float = 0.0
    orders: tuple[float, ...] = ORDERS
    relation: str = "add/remove"

    def __post_init__(self) -> None:
        owner = "FilterRule"
        EPSILON.check(self.epsilon, "epsilon", owner)
        check_real(self.delta, "delta", owner, low=0.0, high=1.0, high_open=True)
        if not 0.0 <= float(self.renyi_delta) <= float(self.delta):
            raise ValueError(
                f"The 'renyi_delta' of a ledger must be in [0, delta_budget={self.delta!r}] (the "
                f"part of the delta budget that backs the Rényi filter). Got "
                f"{self.renyi_delta!r}; pass renyi_delta=0 for basic composition only."
            )
        if not self.orders or min(self.orders) <= 1.01:
            raise ValueError(f"FilterRule needs Rényi orders > 1.01. Got {self.orders!r}.")
        check_option(self.relation, "relation", owner, RELATIONS)

    @property
    def basic_delta(self) -> float:
        """``delta_b = delta - renyi_delta``, the delta budget of the basic branch."""
        return max(0.0, float(self.delta) - float(self.renyi_delta))

    def compose(
        self, epsilons: Sequence[float], deltas: Sequence[float], curve: Any
    ) -> Composition:
        """The record's :class:`Composition` (``curve``: the summed RDP curves on the grid)."""
        relation = self.relation
        eps, dlt = math.fsum(epsilons), math.fsum(deltas)
        if self.renyi_delta <= 0.0:
            return Composition(eps, dlt, math.inf, 0.0, None, relation)
        from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

        total = np.asarray(curve, dtype=np.float64)
        per_order = float(self.renyi_delta) / len(self.orders)
        r_eps, order = compute_epsilon(list(self.orders), list(total), per_order)
        r_eps = float(r_eps)
        order_ = None if math.isinf(r_eps) else float(order)
        return Composition(eps, dlt, r_eps, float(self.renyi_delta), order_, relation)

    def admits(self, comp: Composition, rel_tol: float = 1e-12) -> bool:
        """Whether a record composing to ``comp`` is within the budget by either branch."""
        slack = 1.0 + rel_tol
        basic = (
            comp.basic_epsilon <= self.epsilon * slack
            and comp.basic_delta <= self.basic_delta * slack
        )
        return basic or comp.renyi_epsilon <= self.epsilon * slack


class Spend(NamedTuple):
    """One recorded spend as the admission rule sees it (``curve=None``: derive it)."""

    epsilon: float
    delta: float
    curve: np.ndarray | None
    relation: str

    @staticmethod
    def read(eps: float, dlt: float, curve: str | None, relation: str | None) -> Spend:
        """A spend from a ledger row (the curve as JSON, ``NULL`` relation: add/remove)."""
        c = None if curve is None else np.asarray(json.loads(curve), dtype=np.float64)
        return Spend(float(eps), float(dlt), c, relation or "add/remove")


def compose_spends(rule: FilterRule, rows: list[Spend]) -> Composition:
    """Compose recorded spends under ``rule`` and its neighbouring relation.

    A row without a curve has the pure-DP curve when its delta is 0 and ``+inf`` otherwise; the
    curves are built only when the rule has a Rényi branch. Under ``"substitute"`` an
    add/remove row counts by group privacy (:func:`as_relation`; Dwork & Roth 2014, Thm. 2.2
    and its approximate form).

    Raises
    ------
    ValueError
        If a row is a substitute release and the rule is add/remove.
    """
    return SpendRecord.of(rule, rows).composition()


class SpendRecord:
    """The composed terms of a record's spends under ``rule`` (immutable: :meth:`added` returns
    a new record), so that checking one more spend costs no Python pass over the earlier ones
    (an in-memory ledger that answers thousands of queries; :func:`compose_spends` is one pass).

    ``epsilons`` and ``deltas`` are each spend's terms under the rule's relation
    (:func:`as_relation`); ``curve`` is the sum of their RDP curves on ``rule.orders`` (zeros
    when the rule has no Rényi branch, which never reads it).
    """

    __slots__ = ("curve", "deltas", "epsilons", "rule")

    def __init__(
        self,
        rule: FilterRule,
        epsilons: tuple[float, ...] = (),
        deltas: tuple[float, ...] = (),
        curve: np.ndarray | None = None,
    ) -> None:
        self.rule = rule
        self.epsilons = epsilons
        self.deltas = deltas
        self.curve = np.zeros(len(rule.orders)) if curve is None else curve

    @classmethod
    def of(cls, rule: FilterRule, rows: list[Spend]) -> SpendRecord:
        """The record of ``rows`` under ``rule``."""
        record = cls(rule)
        for row in rows:
            record = record.added(row)
        return record

    def added(self, row: Spend) -> SpendRecord:
        """The record with ``row`` added (this record is unchanged)."""
        e, d, c = as_relation(row, self.rule.relation)
        if self.rule.renyi_delta <= 0.0:
            curve = self.curve
        elif c is not None:
            curve = self.curve + c
        else:
            curve = self.curve + (pure_dp_curve(e, self.rule.orders) if d == 0.0 else np.inf)
        return SpendRecord(self.rule, (*self.epsilons, e), (*self.deltas, d), curve)

    def composition(self) -> Composition:
        """The composition of the record."""
        return self.rule.compose(self.epsilons, self.deltas, self.curve)


def as_relation(row: Spend, relation: str) -> tuple[float, float, np.ndarray | None]:
    """``(epsilon, delta, curve)`` of ``row`` under ``relation`` (``None`` curve: derive it)."""
    if row.relation == relation:
        return row.epsilon, row.delta, row.curve
    if relation == "add/remove":
        raise ValueError(
            "A release that is DP for substituting one example (e.g. PrivateConformal, n public) "
            "cannot be charged to an add/remove ledger, whose guarantee would not cover it. "
            "Create the pipeline's ledger with relation='substitute' (PrivacyOdometer(..., "
            "relation='substitute') or 'privcal ledger init PATH --relation substitute'): it "
            "counts each add/remove step twice (group privacy)."
        )
    # add/remove -> substitute: group privacy over the two add/remove steps of a substitution
    if row.delta == 0.0:
        return 2.0 * row.epsilon, 0.0, None
    return 2.0 * row.epsilon, (1.0 + math.exp(row.epsilon)) * row.delta, np.array(np.inf)

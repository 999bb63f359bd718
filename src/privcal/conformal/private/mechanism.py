"""The one interface of a threshold mechanism, its registry, and the functions that dispatch.

A *threshold mechanism* releases one edge ``e_J`` of a public grid ``0 = e_0 < ... < e_m = 1``
by an exponential mechanism over the calibration scores. Every mechanism is an instance of
:class:`ThresholdMechanism` registered under its ``method=`` string
(:func:`register_mechanism`): its public :meth:`~ThresholdMechanism.plan`, the DP
:meth:`~ThresholdMechanism.release` (through the measurements of :mod:`privcal.conformal.quantile`),
the vectorised :meth:`~ThresholdMechanism.penalties` the simulator draws from, the report's
:meth:`~ThresholdMechanism.public_terms` and the :meth:`~ThresholdMechanism.coverage_bound`.

:func:`conformal_plan` and :func:`coverage_upper_bound` look the mechanism up by ``method``, so
:class:`~privcal.conformal.PrivateConformal` and
:class:`~privcal.conformal.simulate.SplitSimulator` never branch on it. A new mechanism is one
module that subclasses :class:`ThresholdMechanism` and calls :func:`register_mechanism`, imported
by :mod:`privcal.conformal.private`.

Guarantee shared by all: ``n`` is public and the neighbouring relation is *substitute one
calibration example*; every :class:`Plan` field is a function of ``n``, ``alpha``, ``epsilon``
and the arguments alone, so only the release sees the data (proof: docs/conformal.md#proofs,
"Neighbouring relation: n is public").
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from privcal._params import (
    POSITIVE,
    check_int,
    check_option,
    check_probability,
    renamed,
    renamed_attribute,
)
from privcal.conformal.quantile import bin_edges
from privcal.privacy.guarantee import Release
from privcal.privacy.noise import NoiseSource

__all__ = [
    "DEFAULT_LOGIT_BINS",
    "MECHANISMS",
    "Plan",
    "ThresholdMechanism",
    "Tuning",
    "bin_count",
    "check_slope",
    "check_tuning",
    "conformal_plan",
    "coverage_upper_bound",
    "get_mechanism",
    "register_mechanism",
]

#: ``m`` requested by ``n_bins="auto"`` for the methods on the logit grid (3915 distinct bins).
DEFAULT_LOGIT_BINS = 4096

#: The registered mechanisms by ``method=`` string, in registration order.
MECHANISMS: dict[str, ThresholdMechanism] = {}


def bin_count(n_bins: Any, owner: str) -> int:
    """``m`` of ``n_bins``: an int ``m >= 2`` as given, else the number of validated edges - 1."""
    if isinstance(n_bins, int | np.integer) and not isinstance(n_bins, bool):
        return check_int(n_bins, "n_bins", owner, low=2)
    return int(bin_edges(n_bins, owner).size - 1)


def auto_or(value: Any, name: str, owner: str, check: Callable[[Any, str, str], Any]) -> Any:
    """``None`` for ``"auto"`` (another string is refused), else ``check(value, name, owner)``."""
    if isinstance(value, str):
        check_option(value, name, owner, ("auto",))
        return None
    return check(value, name, owner)


def check_slope(slope: Any, owner: str) -> float | None:
    """``None`` for "auto", else the validated positive slope."""
    return auto_or(slope, "slope", owner, POSITIVE.check)


@dataclass(frozen=True)
class Tuning:
    """The validated tuning of a mechanism besides ``n_bins``; ``None`` stands for "auto".

    Attributes
    ----------
    gamma : float or None
        ``gamma alpha`` is the failure probability given to a level mechanism.
    slope : float or None
        ``r`` of the rank penalty.
    """

    gamma: float | None = None
    slope: float | None = None


@dataclass(frozen=True)
class Plan:
    """The public quantities of one private fit: functions of ``n``, ``alpha``, ``epsilon`` only.

    Attributes
    ----------
    method : str
    edges : ndarray
        The public bin edges (``m + 1`` of them).
    n_bins : int
        ``m`` (``bins`` is its deprecated name).
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
    n_bins: int
    level: float
    valid: bool
    gamma: float = math.nan
    slope: float = math.nan
    rank: int = 0
    weights: str = "rank"
    bins = renamed_attribute("n_bins")  # deprecated name, one release

    @property
    def mechanism(self) -> ThresholdMechanism:
        """The registered :class:`ThresholdMechanism` of ``method``."""
        return MECHANISMS[self.method]

    @property
    def scale(self) -> float:
        """``r`` of the weights ``exp(-epsilon penalty / r)``: ``1 + slope`` for ``"rank"``."""
        return self.mechanism.scale(self)


class ThresholdMechanism(ABC):
    """One way to release the threshold: the interface every ``method=`` implements.

    Class attributes: ``name`` (the ``method=`` string), ``grid`` (the shape of the grid for an
    int or ``"auto"`` ``n_bins``: ``"logit"`` or ``"uniform"``, :func:`~privcal.conformal.
    quantile.bin_edges`) and ``tuning`` (the tuning parameters it accepts besides ``n_bins``:
    ``"gamma"`` and/or ``"slope"``).
    """

    name: ClassVar[str]
    grid: ClassVar[str] = "logit"
    tuning: ClassVar[tuple[str, ...]] = ()

    # ------------------------------------------------------------------ public quantities
    def auto_bins(self, n: int, alpha: float, epsilon: float) -> int:
        """``m`` of ``n_n_bins="auto"`` (public): :data:`DEFAULT_LOGIT_BINS` unless overridden."""
        return DEFAULT_LOGIT_BINS

    def edges(self, n: int, alpha: float, epsilon: float, n_bins: Any, owner: str) -> np.ndarray:
        """The public grid: ``"auto"`` or an int ``m`` on this mechanism's ``grid``, or edges."""
        m = self.auto_bins(n, alpha, epsilon) if isinstance(n_bins, str) else n_bins
        return bin_edges(m, owner, self.grid)

    @abstractmethod
    def plan(self, n: int, alpha: float, epsilon: float, edges: np.ndarray, tuning: Tuning) -> Plan:
        """The :class:`Plan` on ``edges`` for validated arguments and ``tuning``."""

    def validity(
        self, alpha: float, epsilon: float, n_bins: Any, slope: Any
    ) -> Callable[[int], bool]:
        """``n -> plan(n).valid`` with ``gamma="auto"``: the public predicate that
        :func:`~privcal.conformal.min_calibration_size` searches (monotone in ``n``)."""
        return lambda n: conformal_plan(n, alpha, epsilon, self.name, n_bins, "auto", slope).valid

    # ------------------------------------------------------------------ the release
    @abstractmethod
    def scale(self, plan: Plan) -> float:
        """``r`` of the weights ``exp(-epsilon penalty_j / r)`` (the range or the sensitivity)."""

    @abstractmethod
    def penalties(self, plan: Plan, less: Any, upto: Any, n: Any) -> np.ndarray:
        """Penalty (minus the utility) of edges with ``less = #{[s] < e_j}`` and ``upto =
        #{[s] <= e_j}`` among ``n`` scores; any shapes that broadcast."""

    @abstractmethod
    def release(
        self, scores: np.ndarray, plan: Plan, epsilon: float, noise: NoiseSource, source: str
    ) -> tuple[float, Release]:
        """Draw ``e_J`` from ``scores`` (validated, in ``[0, 1]``) under a valid ``plan`` and
        return it with the :class:`~privcal.privacy.Release` record of the draw (``source``:
        which data it read, e.g. ``"calibration"``)."""

    @abstractmethod
    def shortfall(self, plan: Plan) -> str:
        """Why an invalid ``plan`` has no threshold (``"k = 97 > n"``), for the warning."""

    # ------------------------------------------------------------------ report and bounds
    def grid_term(self, plan: Plan, n_bins: Any) -> str:
        """The report's public line for the grid (``n_bins`` as the user gave it)."""
        kind = f"{self.grid}-spaced" if isinstance(n_bins, str | int | np.integer) else "given"
        return f"bins m = {plan.n_bins} ({kind} edges, fixed before the data)"

    @abstractmethod
    def tuning_terms(self, plan: Plan) -> list[str]:
        """The report's public lines for the tuning and the target (one-stage fits)."""

    def public_terms(self, plan: Plan, n_bins: Any) -> list[str]:
        """:meth:`grid_term` and :meth:`tuning_terms`: what this mechanism adds to ``public``."""
        return [self.grid_term(plan, n_bins), *self.tuning_terms(plan)]

    @abstractmethod
    def coverage_bound(
        self, n: int, alpha: float, epsilon: float, m: int, p_max: float, tuning: Tuning
    ) -> float:
        """Upper bound on the coverage (:func:`coverage_upper_bound`; ``tuning.gamma`` as given,
        ``tuning.slope`` validated)."""


def register_mechanism(mechanism: ThresholdMechanism) -> ThresholdMechanism:
    """Add ``mechanism`` to :data:`MECHANISMS` under its ``name`` (once) and return it."""
    if mechanism.name in MECHANISMS:
        raise ValueError(f"A threshold mechanism named {mechanism.name!r} is registered already.")
    MECHANISMS[mechanism.name] = mechanism
    return mechanism


def get_mechanism(method: str, owner: str) -> ThresholdMechanism:
    """The registered mechanism of ``method`` (validated against the registered names)."""
    return MECHANISMS[check_option(method, "method", owner, tuple(MECHANISMS))]


def _taking(param: str) -> str:
    """The registered methods that take ``param``, as the error messages name them."""
    names = [name for name, mech in MECHANISMS.items() if param in mech.tuning]
    if not names:
        return "no method"
    return f"method={names[0]!r}" + "".join(f" and {name!r}" for name in names[1:])


def check_tuning(
    mechanism: ThresholdMechanism, n_bins: Any, gamma: Any, slope: Any, owner: str
) -> Tuning:
    """Validate ``n_bins``, ``gamma`` and ``slope`` for ``mechanism``; ``None`` means "auto"."""
    auto_or(n_bins, "n_bins", owner, lambda edges, _, who: bin_edges(edges, who))
    g = auto_or(gamma, "gamma", owner, check_probability)
    r = check_slope(slope, owner)
    method = mechanism.name
    if "gamma" not in mechanism.tuning and g is not None:
        raise ValueError(
            f"The 'gamma' parameter of {owner} applies to {_taking('gamma')} only "
            f"(method={method!r} has no gamma). Got {gamma!r} instead."
        )
    if "slope" not in mechanism.tuning and r is not None:
        raise ValueError(
            f"The 'slope' parameter of {owner} applies to {_taking('slope')} only. Got {slope!r} "
            f"with method={method!r} instead."
        )
    return Tuning(gamma=g, slope=r)


@renamed(old="bins", new="n_bins", owner="conformal_plan")
def conformal_plan(
    n: int,
    alpha: float,
    epsilon: float,
    method: str = "rank",
    n_bins: Any = "auto",
    gamma: Any = "auto",
    slope: Any = "auto",
) -> Plan:
    """Edges, target and level of ``PrivateConformal(method=...)``, from public inputs only.

    ``n``, ``alpha``, ``epsilon``, ``method`` must be validated; ``n_bins``, ``gamma``, ``slope``
    are validated here. ``"rank"`` and ``"bounded-range"`` use the logit grid
    (:data:`DEFAULT_LOGIT_BINS` for ``"auto"``); ``"angelopoulos2022"`` equal-width bins (``m*``
    of :func:`optimal_bins` for ``"auto"``). Explicit edges are used as given. One function, so
    the estimator and :class:`~privcal.conformal.simulate.SplitSimulator` cannot disagree.
    """
    owner = "PrivateConformal"
    mechanism = MECHANISMS[method]
    tuning = check_tuning(mechanism, n_bins, gamma, slope, owner)
    edges = mechanism.edges(n, alpha, epsilon, n_bins, owner)
    return mechanism.plan(n, alpha, epsilon, edges, tuning)


@renamed(old="bins", new="n_bins", owner="coverage_upper_bound")
def coverage_upper_bound(
    n: int,
    alpha: float,
    epsilon: float,
    n_bins: Any,
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
    * ``"rank"`` (Theorem R): ``(k + S_up)/(n+1) + p_max`` with
      ``S_up = sum_u y_u/(1 + y_u)``, ``y_u = (m-1) exp(-epsilon u/(1+r))``; ``gamma`` is
      ignored.
    * ``"bounded-range"``: with probability ``>= 1 - delta`` (``delta = gamma alpha``)
      ``#{[s_i] < e_J} < q~ n + log(m/delta)/(epsilon (1-q~))``, so the coverage is at most
      ``delta + ceil(q~ n + log(m/delta)/(epsilon (1-q~)))/(n+1) + p_max``.

    Proofs: docs/conformal.md#proofs.
    """
    owner = "coverage_upper_bound"
    mechanism = get_mechanism(method, owner)
    m = bin_count(n_bins, owner)
    r = check_slope(slope, owner) if "slope" in mechanism.tuning else None
    return mechanism.coverage_bound(n, alpha, epsilon, m, p_max, Tuning(gamma=gamma, slope=r))

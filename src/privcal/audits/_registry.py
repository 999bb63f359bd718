"""The registry of deployed-path audits and the record each one returns."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privcal._params import check_int, check_probability
from privcal.audits.plants import Plant
from privcal.privacy.audit import AuditResult, audit_dp, max_epsilon_lower
from privcal.privacy.measurement import Measurement, get_measurement

#: Audit modules by area, with the extra each needs (``None``: core install).
AREAS: dict[str, str | None] = {
    "privcal.audits.private": None,
    "privcal.audits.conformal": None,
    "privcal.audits.conformal_parties": None,
    "privcal.audits.federated": "federated",
    "privcal.audits.federated_conformal": "federated",
    "privcal.audits.training": "torch",
}


@dataclass(frozen=True)
class AuditReport:
    """What one deployed-path audit found.

    Attributes
    ----------
    name : str
        The audit's registered name (``privcal audit NAME``).
    entry_point : str
        The call audited, as a user writes it (e.g. ``"PrivateConformal().fit(logits, labels)"``).
    relation : str
        The neighbouring relation and unit of the claim, and what is public.
    neighbours : str
        The two inputs compared.
    epsilon, delta : float
        The claim, read from the entry point's own privacy report (never typed in by hand).
    runs : int
        Independent runs of the entry point on each neighbour.
    result : AuditResult
        The statistics: ``result.epsilon_lower`` at confidence ``1 - result.alpha``.
    """

    name: str
    entry_point: str
    relation: str
    neighbours: str
    epsilon: float
    delta: float
    runs: int
    result: AuditResult

    @property
    def passed(self) -> bool:
        return self.result.passed

    @property
    def epsilon_lower(self) -> float:
        return self.result.epsilon_lower

    @property
    def confidence(self) -> float:
        return 1.0 - self.result.alpha

    def __str__(self) -> str:
        verdict = "PASSED" if self.passed else "FAILED"
        return (
            f"{self.name}: {verdict}. {self.entry_point} claims (epsilon={self.epsilon:g}, "
            f"delta={self.delta:g}) for {self.relation}; {self.runs} runs per neighbour "
            f"({self.neighbours}) give epsilon >= {self.epsilon_lower:.3g} at confidence "
            f"{self.confidence:g}."
        )


AuditFunction = Callable[..., AuditReport]


@dataclass(frozen=True)
class DeployedAudit:
    """A registered audit: ``function(runs=..., alpha=...)`` returns an :class:`AuditReport`.

    Attributes
    ----------
    name : str
    summary : str
        One line for ``privcal audit --list``.
    runs : int
        Default number of runs per neighbour: at least what the run-size rule needs
        (:attr:`max_epsilon` ``>= 2 epsilon``), and no more than the test tier it runs in allows.
    slow : bool
        Runs in the slow test tier (CI still runs it).
    extra : str or None
        The install extra it needs.
    function : callable
    events : int
        The most events the audit tests (its Bonferroni factor ``m``; a pilot can merge some).
    epsilon, delta : float
        The budget the audited call asks for. The audit reads its claim from the entry point's
        own report; the test suite checks that the two agree.
    plants : mapping of str to Plant
        The defects planted into this entry point that the audit must catch
        (``privcal audit NAME --plant DEFECT``).
    measurements : tuple of str
        The registered :class:`~privcal.privacy.measurement.Measurement` names whose releases
        the audited entry point makes; ``privcal audit --list`` prints their mechanism and
        sensitivity from the objects.
    """

    name: str
    summary: str
    runs: int
    slow: bool
    extra: str | None
    function: AuditFunction
    events: int = 20
    epsilon: float = 1.0
    delta: float = 0.0
    plants: Mapping[str, Plant] = field(default_factory=dict)
    measurements: tuple[str, ...] = ()

    def measured(self) -> list[Measurement]:
        """The measurements the audit tests (:attr:`measurements`, resolved)."""
        return [get_measurement(name) for name in self.measurements]

    def max_epsilon(self, runs: int | None = None, alpha: float = 1e-6) -> float:
        """The largest epsilon lower bound the audit can report at ``runs`` (default: its own):
        :func:`~privcal.privacy.audit.max_epsilon_lower`, neighbours separating completely on
        one of :attr:`events` events."""
        n = self.runs if runs is None else runs
        return max_epsilon_lower(n, alpha, self.events, self.delta)

    def plant(self, name: str) -> Plant:
        """The plant registered under ``name``; a ``ValueError`` lists the known ones otherwise."""
        if name not in self.plants:
            known = ", ".join(self.plants) or "none"
            raise ValueError(
                f"Unknown plant {name!r} for audit {self.name!r}. Known plants: {known} "
                "(listed by 'privcal audit --list')."
            )
        return self.plants[name]

    def run(
        self,
        runs: int | None = None,
        alpha: float = 1e-6,
        *,
        plant: str | None = None,
        **kwargs: Any,
    ) -> AuditReport:
        """Run the audit (``runs`` per neighbour; ``None``: :attr:`runs`), with the defect
        ``plant`` planted into the entry point for the duration of the run if given."""
        owner = f"audit {self.name!r}"
        n = self.runs if runs is None else check_int(runs, "runs", owner, low=100)
        a = check_probability(alpha, "alpha", owner)
        with contextlib.nullcontext() if plant is None else self.plant(plant).patch():
            return self.function(runs=n, alpha=a, **kwargs)


_AUDITS: dict[str, DeployedAudit] = {}


def register(
    name: str,
    *,
    summary: str,
    runs: int,
    slow: bool = False,
    extra: str | None = None,
    events: int = 20,
    epsilon: float = 1.0,
    delta: float = 0.0,
    plants: Mapping[str, Plant] | None = None,
    measurements: Sequence[Measurement] = (),
) -> Callable[[AuditFunction], AuditFunction]:
    """Decorator: register ``function(runs, alpha) -> AuditReport`` under ``name``, with the
    defects (``plants``) it must catch and the ``measurements`` whose releases it tests (see
    :class:`DeployedAudit` for the rest)."""
    if not measurements:
        raise ValueError(f"The audit {name!r} must name the measurements it tests.")

    def wrap(function: AuditFunction) -> AuditFunction:
        if name in _AUDITS:
            raise ValueError(f"An audit named {name!r} is already registered.")
        plant_map, measured = dict(plants or {}), tuple(m.name for m in measurements)
        _AUDITS[name] = DeployedAudit(
            name, summary, runs, slow, extra, function, events, epsilon, delta, plant_map, measured
        )
        return function

    return wrap


def available_audits(*, skip_missing: bool = True) -> dict[str, DeployedAudit]:
    """Every registered audit, by name (areas whose extra is not installed are skipped)."""
    for module, extra in AREAS.items():
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as err:
            missing_extra = extra is not None and not (err.name or "").startswith("privcal")
            if not (skip_missing and missing_extra):
                raise
    return dict(sorted(_AUDITS.items()))


def get_audit(name: str) -> DeployedAudit:
    """The audit registered under ``name``; a ``ValueError`` lists the names otherwise."""
    audits = available_audits()
    if name not in audits:
        raise ValueError(
            f"Unknown audit {name!r}. Available: {', '.join(audits) or 'none'} "
            "(run 'privcal audit --list')."
        )
    return audits[name]


def run_audit(
    name: str, runs: int | None = None, alpha: float = 1e-6, *, plant: str | None = None
) -> AuditReport:
    """Run the audit registered under ``name`` (``runs`` per neighbour; ``None``: its default),
    with its registered defect ``plant`` planted if given."""
    return get_audit(name).run(runs=runs, alpha=alpha, plant=plant)


def _relation_text(report: Any) -> str:
    public = "; ".join(report.public) if report.public else "nothing declared public"
    return f"{report.unit}-level {report.relation} (public: {public})"


def _pilot(draw: Callable[[int, int], Any], k: int) -> np.ndarray:
    """``k`` pilot runs per neighbour, ``D``'s then ``D'``'s (drawn first, then discarded)."""
    return np.concatenate([np.asarray(draw(0, k), float), np.asarray(draw(1, k), float)])


def tail_events(draw: Callable[[int, int], Any], runs: int) -> list[Any]:
    """Tail events ``x < t`` and ``x > t`` at the deciles of a pilot sample for an audit of
    ``runs`` runs (``max(50, runs // 5)`` runs per neighbour from ``draw``, drawn first and then
    discarded, so the events are fixed before the audited samples).

    Tails, not buckets: a defect that spreads ``D'`` over a range ``D`` never reaches shows in
    one tail event with all of its mass, where buckets would split it into many small counts.
    """
    pilot = _pilot(draw, max(50, runs // 5))
    ts = np.unique(np.quantile(pilot, np.linspace(0.1, 0.9, 9)))
    return [lambda x, t=t: x < t for t in ts] + [lambda x, t=t: x > t for t in ts]


def draws(run: Callable[[int], Any]) -> Callable[[int, int], np.ndarray]:
    """``draw(side, k)`` for :func:`audit_release` from ``run(side)``, one run of the entry point
    on neighbour ``side``: ``k`` independent runs, as floats."""
    return lambda side, k: np.array([run(side) for _ in range(k)], dtype=float)


def audit_release(
    name: str,
    entry_point: str,
    neighbours: str,
    draw: Callable[[int, int], Any],
    report: Any,
    *,
    runs: int,
    alpha: float,
    events: Any = None,
    pilot_fraction: float = 0.2,
    n_events: int = 20,
) -> AuditReport:
    """Audit a release from ``draw(side, k)``: ``k`` independent outputs on neighbour ``side``.

    Parameters
    ----------
    name, entry_point, neighbours : str
        Recorded in the report.
    draw : callable
        ``draw(0, k)`` runs the entry point ``k`` times on ``D`` and ``draw(1, k)`` on ``D'``,
        returning an array whose first axis has length ``k`` (a scalar per run, unless
        ``events`` are callables that read richer outputs).
    report : PrivacyReport
        The entry point's own report on ``D``: the claim (epsilon, delta, unit, relation, public
        quantities) is read from it, never typed in by hand.
    runs, alpha : int, float
        Runs per neighbour for the audit proper, and the audit's error probability.
    events : array_like or sequence of callables or None, default=None
        ``None``: bucket edges at ``n_events - 1`` quantiles of a *pilot* sample (``pilot_fraction
        * runs`` extra runs per side, drawn first and then discarded), so the events are fixed
        before the audited samples are drawn, as :func:`~privcal.privacy.audit.audit_dp` needs.
    """
    if events is None:
        k = max(50, int(pilot_fraction * runs))
        pilot = _pilot(draw, k).ravel()
        edges = np.unique(np.quantile(pilot, np.linspace(0, 1, n_events + 1)[1:-1]))
        events = edges if edges.size else np.array([float(pilot[0])])
    a, b = np.asarray(draw(0, runs)), np.asarray(draw(1, runs))
    result = audit_dp(a, b, events, report.epsilon, report.delta, alpha=alpha)
    eps, dlt = float(report.epsilon), float(report.delta)
    return AuditReport(
        name, entry_point, _relation_text(report), neighbours, eps, dlt, runs, result
    )

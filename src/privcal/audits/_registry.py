"""The registry of deployed-path audits and the record each one returns."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from privcal._params import check_int, check_probability
from privcal.privacy.audit import AuditResult, audit_dp

__all__ = [
    "AREAS",
    "AuditReport",
    "DeployedAudit",
    "audit_release",
    "available_audits",
    "get_audit",
    "register",
    "run_audit",
]

#: Audit modules by area, with the extra each needs (``None``: core install).
AREAS: dict[str, str | None] = {
    "privcal.audits.private": None,
    "privcal.audits.conformal": None,
    "privcal.audits.federated": "federated",
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
        Default number of runs per neighbour (chosen so the audit fits the test tier it runs in).
    slow : bool
        Runs in the slow test tier (CI still runs it).
    extra : str or None
        The install extra it needs.
    function : callable
    """

    name: str
    summary: str
    runs: int
    slow: bool
    extra: str | None
    function: AuditFunction

    def run(self, runs: int | None = None, alpha: float = 1e-6, **kwargs: Any) -> AuditReport:
        owner = f"audit {self.name!r}"
        n = self.runs if runs is None else check_int(runs, "runs", owner, low=100)
        a = check_probability(alpha, "alpha", owner)
        return self.function(runs=n, alpha=a, **kwargs)


_AUDITS: dict[str, DeployedAudit] = {}


def register(
    name: str, *, summary: str, runs: int, slow: bool = False, extra: str | None = None
) -> Callable[[AuditFunction], AuditFunction]:
    """Decorator: register ``function(runs, alpha) -> AuditReport`` under ``name``."""

    def wrap(function: AuditFunction) -> AuditFunction:
        if name in _AUDITS:
            raise ValueError(f"An audit named {name!r} is already registered.")
        _AUDITS[name] = DeployedAudit(name, summary, runs, slow, extra, function)
        return function

    return wrap


def _load(skip_missing: bool) -> None:
    """Import every area; with ``skip_missing``, skip an area whose *extra* is not installed."""
    for module, extra in AREAS.items():
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as err:
            missing_extra = extra is not None and not (err.name or "").startswith("privcal")
            if not (skip_missing and missing_extra):
                raise


def available_audits(*, skip_missing: bool = True) -> dict[str, DeployedAudit]:
    """Every registered audit, by name (areas whose extra is not installed are skipped)."""
    _load(skip_missing)
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


def run_audit(name: str, runs: int | None = None, alpha: float = 1e-6) -> AuditReport:
    """Run the audit registered under ``name`` (``runs`` per neighbour; ``None``: its default)."""
    return get_audit(name).run(runs=runs, alpha=alpha)


def _relation_text(report: Any) -> str:
    public = "; ".join(report.public) if report.public else "nothing declared public"
    return f"{report.unit}-level {report.relation} (public: {public})"


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

    Returns
    -------
    AuditReport
    """
    if events is None:
        k = max(50, int(pilot_fraction * runs))
        pilot = np.concatenate(
            [np.asarray(draw(0, k), float).ravel(), np.asarray(draw(1, k), float).ravel()]
        )
        edges = np.unique(np.quantile(pilot, np.linspace(0, 1, n_events + 1)[1:-1]))
        events = edges if edges.size else np.array([float(pilot[0])])
    a = np.asarray(draw(0, runs))
    b = np.asarray(draw(1, runs))
    result = audit_dp(a, b, events, report.epsilon, report.delta, alpha=alpha)
    return AuditReport(
        name=name,
        entry_point=entry_point,
        relation=_relation_text(report),
        neighbours=neighbours,
        epsilon=float(report.epsilon),
        delta=float(report.delta),
        runs=runs,
        result=result,
    )

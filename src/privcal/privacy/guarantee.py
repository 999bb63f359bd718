"""Privacy guarantees, the composition rules privcal uses, and the record of releases.

A :class:`Guarantee` states ``(epsilon, delta)``-DP with respect to a unit of privacy (one
``"example"`` or all examples of one ``"user"``) and a neighbouring relation (``"add/remove"`` one
unit, or ``"substitute"`` one unit). Guarantees are combined only by the functions here, never with
``+``, so that every composition names the theorem it uses:

* :func:`basic_composition`: ``k`` releases on the same data are
  ``(sum eps_i, sum delta_i)``-DP (Dwork & Roth 2014, Thm. 3.16);
* :func:`parallel_composition`: releases on disjoint parts of the data (disjoint sources, disjoint
  splits) are ``(max eps_i, max delta_i)``-DP under add/remove of one unit, since the unit lies in
  at most one part (McSherry 2009, Thm. 4; seed 001 Prop. A.1).

A :class:`PrivacyReport` lists every :class:`Release` and composes them: basic composition within
each source, parallel composition across sources.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from privcal._params import NON_NEGATIVE, check_option, check_real
from privcal._text import NO_SENSITIVITY, TEXT_WIDTH, format_table, number, wrap

__all__ = [
    "NOISE_KINDS",
    "NOT_PRIVATE",
    "RELATIONS",
    "UNITS",
    "Guarantee",
    "PrivacyReport",
    "Release",
    "basic_composition",
    "parallel_composition",
]

UNITS = ("example", "user")
RELATIONS = ("add/remove", "substitute")
NOISE_KINDS = ("secure", "seeded")
#: What a report built on seeded noise says about itself.
NOT_PRIVATE = "not private: seeded noise"


def _check_loss(record: Any, owner: str) -> None:
    """Check a frozen record's ``epsilon >= 0`` and ``delta`` in ``[0, 1)``, in place."""
    epsilon = NON_NEGATIVE.check(record.epsilon, "epsilon", owner)
    delta = check_real(record.delta, "delta", owner, low=0, high=1, high_open=True)
    object.__setattr__(record, "epsilon", epsilon)
    object.__setattr__(record, "delta", delta)


@dataclass(frozen=True)
class Guarantee:
    """An ``(epsilon, delta)``-DP guarantee.

    Parameters
    ----------
    epsilon : float
        Privacy loss bound, ``>= 0`` and finite.
    delta : float, default=0.0
        Failure probability, in ``[0, 1)``; ``0`` means pure DP.
    unit : {"example", "user"}, default="example"
        What one neighbouring step adds or removes: one record, or all records of one user.
    relation : {"add/remove", "substitute"}, default="add/remove"
        The neighbouring relation.

    Notes
    -----
    ``Guarantee`` deliberately defines no ``+``: compose with :func:`basic_composition` or
    :func:`parallel_composition`.

    Examples
    --------
    >>> basic_composition([Guarantee(0.5), Guarantee(0.25, 1e-6)])
    Guarantee(epsilon=0.75, delta=1e-06, unit='example', relation='add/remove')
    """

    epsilon: float
    delta: float = 0.0
    unit: str = "example"
    relation: str = "add/remove"

    def __post_init__(self) -> None:
        _check_loss(self, "Guarantee")
        check_option(self.unit, "unit", "Guarantee", UNITS)
        check_option(self.relation, "relation", "Guarantee", RELATIONS)

    @property
    def pure(self) -> bool:
        """True when ``delta == 0``."""
        return self.delta == 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _common(guarantees: Sequence[Guarantee], owner: str) -> tuple[str, str]:
    for g in guarantees:
        if not isinstance(g, Guarantee):
            raise TypeError(f"{owner} composes Guarantee objects. Got {g!r} instead.")
    units = {g.unit for g in guarantees}
    relations = {g.relation for g in guarantees}
    if len(units) > 1 or len(relations) > 1:
        raise ValueError(
            f"{owner} needs guarantees with the same unit and neighbouring relation. "
            f"Got units {sorted(units)} and relations {sorted(relations)} instead."
        )
    if not guarantees:
        return "example", "add/remove"
    return guarantees[0].unit, guarantees[0].relation


def basic_composition(guarantees: Iterable[Guarantee]) -> Guarantee:
    """Sequential (basic) composition: ``(sum_i eps_i, sum_i delta_i)``.

    Parameters
    ----------
    guarantees : iterable of Guarantee
        Guarantees of mechanisms run (possibly adaptively) on the same data, with one unit and
        relation. An empty iterable composes to ``Guarantee(0.0)``.

    Notes
    -----
    Dwork & Roth (2014), Theorem 3.16 (adaptive version: Dwork, Rothblum & Vadhan 2010). Sums use
    :func:`math.fsum` so that splitting a budget into equal parts composes back exactly.
    """
    gs = list(guarantees)
    unit, relation = _common(gs, "basic_composition")
    eps = math.fsum(g.epsilon for g in gs)
    delta = math.fsum(g.delta for g in gs)
    if delta >= 1.0:
        raise ValueError(
            f"basic_composition: the composed delta is {delta!r} >= 1, which guarantees nothing."
        )
    return Guarantee(eps, delta, unit, relation)


def parallel_composition(guarantees: Iterable[Guarantee]) -> Guarantee:
    """Parallel composition over disjoint data: ``(max_i eps_i, max_i delta_i)``.

    Parameters
    ----------
    guarantees : iterable of Guarantee
        Guarantees of mechanisms each run on its own disjoint part of the data (a unit lies in at
        most one part). An empty iterable composes to ``Guarantee(0.0)``.

    Notes
    -----
    McSherry (2009), Theorem 4. Under add/remove of one unit only the part holding that unit
    changes, so the other parts' outputs have the same law on both neighbours. For
    ``"substitute"`` the same holds when the substituted record stays in its part (the parts are
    fixed by public attributes, e.g. which party holds it).
    """
    gs = list(guarantees)
    unit, relation = _common(gs, "parallel_composition")
    if not gs:
        return Guarantee(0.0, 0.0, unit, relation)
    return Guarantee(max(g.epsilon for g in gs), max(g.delta for g in gs), unit, relation)


@dataclass(frozen=True)
class Release:
    """One private answer that left a data source.

    Parameters
    ----------
    query : str
        What was asked (e.g. ``"accuracy_gap_sum(T=1.5)"``).
    mechanism : str
        ``"laplace"``, ``"gaussian"``, ``"exponential"``, ... (free text).
    sensitivity : float
        Sensitivity used to calibrate the noise (``nan`` when not recorded).
    epsilon : float
        Privacy loss of this release, ``>= 0``.
    delta : float, default=0.0
        In ``[0, 1)``.
    source : str, default=""
        Which source (disjoint part of the data) answered; releases of different sources compose
        in parallel.
    """

    query: str
    mechanism: str
    sensitivity: float
    epsilon: float
    delta: float = 0.0
    source: str = ""

    def __post_init__(self) -> None:
        _check_loss(self, "Release")
        object.__setattr__(self, "sensitivity", float(self.sensitivity))

    def guarantee(self, unit: str = "example", relation: str = "add/remove") -> Guarantee:
        """The release's :class:`Guarantee`."""
        return Guarantee(self.epsilon, self.delta, unit, relation)

    @classmethod
    def from_guarantee(
        cls, query: str, mechanism: str, sensitivity: float, guarantee: Guarantee, source: str
    ) -> Release:
        """The record of a mechanism's ``guarantee`` at ``sensitivity``: the one place a
        release is made (:meth:`privcal.privacy.measurement.Measurement.record`)."""
        if not isinstance(guarantee, Guarantee):
            raise TypeError(f"Release.from_guarantee takes a Guarantee. Got {guarantee!r} instead.")
        return cls(query, mechanism, sensitivity, guarantee.epsilon, guarantee.delta, source)

    def for_source(self, source: str) -> Release:
        """The same release recorded under another source label (a report's name for it)."""
        return replace(self, source=source)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if math.isnan(self.sensitivity):
            d["sensitivity"] = None  # JSON has no NaN
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Release:
        sens = d.get("sensitivity")
        sens = float("nan") if sens is None else float(sens)
        query, mechanism, source = d["query"], d.get("mechanism", ""), d.get("source", "")
        return cls(query, mechanism, sens, d["epsilon"], d.get("delta", 0.0), source)


class PrivacyReport:
    """Every release of a private computation and its composed guarantee.

    Parameters
    ----------
    releases : iterable of Release, optional
    unit : {"example", "user"}, default="example"
    relation : {"add/remove", "substitute"}, default="add/remove"

    public : iterable of str, default=()
        The quantities the guarantee treats as public (e.g. ``"n (number of calibration
        examples)"``, ``"expected cohort size K=100"``): they are released or used without noise,
        so the relation must keep them fixed (``"substitute"``) or they must be declared up front.
    noise : {"secure", "seeded"}, default="secure"
        Where the noise came from. ``"seeded"`` (a seeded PRNG, :class:`SeededNoise`) means the
        releases are reproducible from the seed and **not private**; :attr:`status` says so.
    threat : iterable of str, default=()
        The threat model of a multi-party release: who adds the noise, what the aggregator
        sees, the threshold ``t`` of ``K`` and the collusion tolerated
        (:func:`privcal.privacy.distributed.threat_model`).

    Attributes
    ----------
    releases : list of Release
    public : tuple of str
    noise : str
    threat : tuple of str

    Notes
    -----
    Releases with the same ``source`` compose by :func:`basic_composition`; different sources hold
    disjoint data and compose by :func:`parallel_composition`. So :attr:`epsilon` is the largest
    per-source sum. A computation whose sources are *not* disjoint must put them under one source
    name.

    Examples
    --------
    >>> r = PrivacyReport([Release("q1", "laplace", 1.0, 0.5, source="a"),
    ...                    Release("q2", "laplace", 1.0, 0.25, source="a"),
    ...                    Release("q1", "laplace", 1.0, 0.5, source="b")])
    >>> r.epsilon
    0.75
    """

    def __init__(
        self,
        releases: Iterable[Release] | None = None,
        unit: str = "example",
        relation: str = "add/remove",
        *,
        public: Iterable[str] = (),
        noise: str = "secure",
        threat: Iterable[str] = (),
    ) -> None:
        self.releases: list[Release] = list(releases) if releases is not None else []
        self.unit = check_option(unit, "unit", "PrivacyReport", UNITS)
        self.relation = check_option(relation, "relation", "PrivacyReport", RELATIONS)
        self.public: tuple[str, ...] = tuple(str(p) for p in public)
        self.noise = check_option(noise, "noise", "PrivacyReport", NOISE_KINDS)
        self.threat: tuple[str, ...] = tuple(str(t) for t in threat)

    @property
    def private(self) -> bool:
        """False when any release drew seeded (non-secure) noise: then nothing is private."""
        return self.noise == "secure"

    @property
    def status(self) -> str:
        """``"private"`` or ``"not private: seeded noise"``."""
        return "private" if self.private else NOT_PRIVATE

    def add(self, release: Release) -> None:
        """Append one release."""
        if not isinstance(release, Release):
            raise TypeError(f"PrivacyReport.add takes a Release. Got {release!r} instead.")
        self.releases.append(release)

    def extend(self, releases: Iterable[Release]) -> None:
        """Append several releases."""
        for r in releases:
            self.add(r)

    def per_source(self) -> dict[str, Guarantee]:
        """Basic composition of the releases of each source, in order of first appearance."""
        groups: dict[str, list[Guarantee]] = {}
        for r in self.releases:
            groups.setdefault(r.source, []).append(r.guarantee(self.unit, self.relation))
        return {s: basic_composition(gs) for s, gs in groups.items()}

    @property
    def guarantee(self) -> Guarantee:
        """Parallel composition across sources of the per-source guarantees."""
        per = list(self.per_source().values())
        if not per:
            return Guarantee(0.0, 0.0, self.unit, self.relation)
        return parallel_composition(per)

    @property
    def epsilon(self) -> float:
        return self.guarantee.epsilon

    @property
    def delta(self) -> float:
        return self.guarantee.delta

    def __len__(self) -> int:
        return len(self.releases)

    def to_dict(self) -> dict[str, Any]:
        return {
            "epsilon": self.epsilon,
            "delta": self.delta,
            "unit": self.unit,
            "relation": self.relation,
            "public": list(self.public),
            "noise": self.noise,
            "status": self.status,
            "threat": list(self.threat),
            "per_source": {
                s: {"epsilon": g.epsilon, "delta": g.delta} for s, g in self.per_source().items()
            },
            "releases": [r.to_dict() for r in self.releases],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PrivacyReport:
        return cls(
            [Release.from_dict(r) for r in d.get("releases", [])],
            unit=d.get("unit", "example"),
            relation=d.get("relation", "add/remove"),
            public=d.get("public", ()),
            noise=d.get("noise", "secure"),
            threat=d.get("threat", ()),
        )

    def __repr__(self) -> str:
        return (
            f"PrivacyReport({len(self.releases)} releases, epsilon={self.epsilon:g}, "
            f"delta={self.delta:g}{'' if self.private else ', ' + NOT_PRIVATE})"
        )

    def __str__(self) -> str:
        return self.format()

    def format(self, width: int = TEXT_WIDTH) -> str:
        """The report as text, no line longer than ``width``: the releases as a table (one block
        per release when the columns would not fit, :func:`privcal._text.format_table`), then
        the guarantee per source and in total, the mechanisms, what is public, who is trusted
        and the status. A release with no recorded sensitivity shows ``—``."""
        header = ("source", "query", "mechanism", "sensitivity", "epsilon", "delta")
        rows = [
            (
                r.source,
                r.query,
                r.mechanism,
                number(r.sensitivity),
                f"{r.epsilon:g}",
                f"{r.delta:g}",
            )
            for r in self.releases
        ]
        out = [format_table(header, rows, width)]
        if any(math.isnan(r.sensitivity) for r in self.releases):
            out.extend(wrap(NO_SENSITIVITY, width))
        out.append("")
        lines = [
            f"source {s!r}: epsilon={g.epsilon:g}, delta={g.delta:g} (basic)"
            for s, g in self.per_source().items()
        ]
        lines.append(
            f"total ({self.unit}-level, {self.relation}, parallel across sources): "
            f"epsilon={self.epsilon:g}, delta={self.delta:g}"
        )
        mechanisms = sorted({r.mechanism for r in self.releases})
        lines.append(f"mechanism: {', '.join(mechanisms) if mechanisms else 'none (no release)'}")
        lines.append(f"public: {'; '.join(self.public) if self.public else 'nothing declared'}")
        lines.extend(f"trust: {t}" for t in self.threat)
        lines.append(f"status: {self.status}")
        for text in lines:
            out.extend(wrap(text, width))
        return "\n".join(out)

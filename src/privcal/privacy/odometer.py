"""A privacy odometer: the budget of one data source and the ledger of what it has spent.

The odometer records a spend **before** the caller releases the answer and refuses a spend that
would exceed the budget, recording nothing. Spends compose by basic composition (sum of epsilons
and sum of deltas), or, for a ledger created with ``renyi_delta > 0``, by the tighter of basic
composition and a Rényi filter: the admission rule and why it is a valid privacy filter under
fully adaptive composition are in :mod:`privcal.privacy.filter`. With ``ledger=PATH`` the record
is a SQLite file (:mod:`privcal.privacy.store`: WAL journal, ``synchronous=FULL``), so the spent
budget survives restarts, crashes (``SIGKILL``) and concurrent processes:

* each :meth:`PrivacyOdometer.spend` runs in one ``BEGIN IMMEDIATE`` transaction (read the total,
  check it against the budget, insert the spend, ``COMMIT``) and returns only after the commit.
  ``BEGIN IMMEDIATE`` takes SQLite's single write lock, so the check-and-insert of two processes
  are serialised: together they can never exceed the budget;
* a process killed after ``spend`` returned cannot lose the spend (it is committed to the WAL);
  one killed before the commit recorded nothing and released nothing.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sqlite3
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import privcal.privacy.store as store
from privcal._params import EPSILON, NON_NEGATIVE, POSITIVE, check_option, check_real
from privcal.exceptions import PrivcalWarning
from privcal.privacy.filter import (
    ORDERS,
    Composition,
    FilterRule,
    Spend,
    SpendRecord,
    as_relation,
    compose_spends,
)
from privcal.privacy.guarantee import (
    NOISE_KINDS,
    NOT_PRIVATE,
    RELATIONS,
    Guarantee,
    PrivacyReport,
    Release,
)

__all__ = [
    "REL_TOL",
    "BudgetExceededError",
    "LedgerClone",
    "LedgerRecord",
    "PrivacyOdometer",
    "UnaccountedFitWarning",
    "as_odometer",
    "read_ledger",
    "recorded_mechanism",
    "seeded_releases",
    "seeded_warning",
    "warn_unaccounted",
]

#: Relative tolerance of the budget check: ``spent + eps > budget * (1 + REL_TOL)`` is refused,
#: so that ``K`` spends of ``budget / K`` use the budget exactly despite rounding.
REL_TOL = 1e-12


def recorded_mechanism(mechanism: str, noise: str) -> str:
    """How a ledger records a release's ``mechanism``: marked ``(not private: seeded noise)``
    when its ``noise`` (:func:`~privcal.privacy.noise.noise_kind`) is ``"seeded"``."""
    return f"{mechanism} ({NOT_PRIVATE})" if noise == "seeded" else mechanism


def seeded_releases(releases: list[Release]) -> list[Release]:
    """The releases of a record that drew seeded noise (``spend(noise="seeded")`` marks their
    mechanism ``(not private: seeded noise)``)."""
    return [r for r in releases if r.mechanism.endswith(f"({NOT_PRIVATE})")]


def seeded_warning(releases: list[Release]) -> str | None:
    """The line a ledger's display adds when some of its releases drew seeded noise."""
    seeded = len(seeded_releases(releases))
    if not seeded:
        return None
    return (
        f"WARNING: {seeded} of {len(releases)} releases drew seeded noise ({NOT_PRIVATE}): "
        "reproducible from the seed, they are not private, and the budget they spent bounds "
        "nothing about them."
    )


class BudgetExceededError(RuntimeError):
    """A spend would exceed the odometer's budget; nothing was recorded.

    Attributes
    ----------
    budget, spent, requested : float
        Epsilon budget, epsilon spent before the request, epsilon requested.
    delta_budget, delta_spent, delta_requested : float
    """

    def __init__(
        self,
        name: str,
        query: str,
        budget: float,
        spent: float,
        requested: float,
        delta_budget: float = 0.0,
        delta_spent: float = 0.0,
        delta_requested: float = 0.0,
        note: str = "",
    ) -> None:
        self.budget, self.spent, self.requested = budget, spent, requested
        self.delta_budget, self.delta_spent = delta_budget, delta_spent
        self.delta_requested = delta_requested
        who = f"odometer {name!r}" if name else "odometer"
        msg = (
            f"Privacy budget of {who} exceeded by query {query!r}: budget epsilon={budget:g}, "
            f"spent {spent:g}, requested {requested:g} (remaining {max(budget - spent, 0.0):g})"
        )
        if delta_requested > 0 or delta_spent > 0 or delta_budget > 0:
            msg += (
                f"; delta budget={delta_budget:g}, spent {delta_spent:g}, "
                f"requested {delta_requested:g}"
            )
        super().__init__(
            msg
            + (f"; {note}" if note else "")
            + ". Nothing was recorded. Ask for at most the remaining epsilon, or release from "
            "other data: a budget spent on this data stays spent."
        )


class _BasicTotals:
    """``spent``, ``delta_spent`` and ``remaining`` of a record whose ``_spends()`` gives its
    rows, with a ``budget`` and a ``relation``."""

    budget: float
    relation: str

    def _spends(self) -> list[Spend]:
        raise NotImplementedError

    def _sums(self) -> tuple[float, float]:
        """``(sum epsilon, sum delta)`` of the rows as a ledger of :attr:`relation` counts them
        (a substitute ledger: each add/remove release by group privacy, :func:`as_relation`),
        without the RDP curves the Rényi branch needs."""
        terms = [as_relation(r, self.relation) for r in self._spends()]
        return math.fsum(t[0] for t in terms), math.fsum(t[1] for t in terms)

    @property
    def spent(self) -> float:
        """Epsilon spent (basic composition under the ledger's relation, :func:`math.fsum`;
        a ledger file's record includes spends by other processes)."""
        return self._sums()[0]

    @property
    def delta_spent(self) -> float:
        """Delta spent (under the ledger's relation)."""
        return self._sums()[1]

    @property
    def remaining(self) -> float:
        """Epsilon left, ``max(0, budget - spent)``."""
        return max(0.0, self.budget - self.spent)


class PrivacyOdometer(_BasicTotals):
    """Budget and ledger of one data source or one pipeline (a privacy filter).

    Parameters
    ----------
    budget : float
        Epsilon budget, ``> 0``.
    ledger : str, Path or None, default=None
        ``None``: the record lives in memory. A path: a SQLite file, created if missing; reopening
        it continues its record (:meth:`open` reads the budget it stores).
    delta_budget : float, default=0.0
        Delta budget in ``[0, 1)``; ``0`` allows only pure-DP spends.
    name : str, default=""
        Recorded as the ``source`` of every :class:`Release`.
    renyi_delta : float, default=0.0
        The part of ``delta_budget`` that backs a Rényi filter (:mod:`privcal.privacy.filter`):
        a spend is admitted when basic composition stays within ``(budget, delta_budget -
        renyi_delta)`` **or** the Rényi figure at ``renyi_delta`` stays within ``budget``. ``0``
        (default): basic composition alone, within ``(budget, delta_budget)``. Stored in the
        ledger with the budget; a pipeline ledger typically uses ``delta_budget / 2``.
    relation : {"add/remove", "substitute"}, default="add/remove"
        The neighbouring relation of the ledger's guarantee, fixed with the budget.
        ``"substitute"`` also takes releases that are DP for substituting one example (private
        conformal) and counts each add/remove release twice (group privacy); ``"add/remove"``
        refuses those (:mod:`privcal.privacy.filter`).

    Attributes
    ----------
    spent, remaining, delta_spent, releases
        Read from the record (the ledger file when there is one, so they include spends by other
        processes). ``spent`` and ``delta_spent`` are the basic sums under the ledger's relation
        (a ``"substitute"`` ledger counts each add/remove release twice, as its rule does).
    rule : FilterRule
        The admission rule.

    Notes
    -----
    Reopening a ledger: the stored budget, delta budget and ``renyi_delta`` must equal the given
    ones (relative tolerance ``1e-12``), otherwise ``ValueError`` ("a ledger shared by two
    budgets") before anything is spent; a budget cannot be raised by reopening. The stored name
    is kept; ``name`` only labels this process's view.

    Spends are refused when ``spent + epsilon > budget * (1 + 1e-12)`` (same for delta) and the
    Rényi branch does not admit them, so a budget split into ``K`` equal parts can be spent
    exactly. Totals use :func:`math.fsum`.

    Examples
    --------
    >>> odo = PrivacyOdometer(1.0, name="hospital")
    >>> odo.spend("count", 0.5, mechanism="laplace", sensitivity=1.0)
    >>> odo.remaining
    0.5
    """

    def __init__(
        self,
        budget: float,
        ledger: str | Path | None = None,
        delta_budget: float = 0.0,
        name: str = "",
        renyi_delta: float = 0.0,
        relation: str = "add/remove",
    ) -> None:
        owner = "PrivacyOdometer"
        self.budget = POSITIVE.check(budget, "budget", owner)
        self.delta_budget = check_real(
            delta_budget, "delta_budget", owner, low=0.0, high=1.0, high_open=True
        )
        self.renyi_delta = NON_NEGATIVE.check(renyi_delta, "renyi_delta", owner)
        self.relation = check_option(relation, "relation", owner, RELATIONS)
        self.rule = FilterRule(
            self.budget, self.delta_budget, self.renyi_delta, relation=self.relation
        )
        if not isinstance(name, str):
            raise ValueError(
                f"The 'name' parameter of {owner} must be a str. Got {name!r} instead."
            )
        self.name = name
        self.ledger = None if ledger is None else Path(ledger)
        self._lock = threading.Lock()
        self._memory: list[tuple[Release, Spend]] = []
        self._record = SpendRecord(self.rule)  # the in-memory record's composed terms
        if self.ledger is not None:
            self.ledger.parent.mkdir(parents=True, exist_ok=True)
            try:
                self._open_ledger()
            except sqlite3.OperationalError as err:
                if store.read_only(self.ledger):
                    message = store.read_only_message(self.ledger, err, spending=True)
                    raise ValueError(message) from None
                raise

    @classmethod
    def open(cls, ledger: str | Path, name: str = "") -> PrivacyOdometer:
        """Reopen an existing ledger file with the budget and filter it stores.

        Raises
        ------
        ValueError
            If there is no privcal ledger at ``ledger`` (the message says how to create one).
        """
        record = read_ledger(ledger)
        return cls(
            record.budget,
            ledger=record.path,
            delta_budget=record.delta_budget,
            name=name,
            renyi_delta=record.renyi_delta,
            relation=record.relation,
        )

    def _open_ledger(self) -> None:
        assert self.ledger is not None
        store.use_wal(self.ledger)
        with store.transaction(self.ledger) as con:
            store.create_tables(con, "budget", "spends", "filter")
            row = con.execute("SELECT epsilon, delta FROM budget WHERE id = 1").fetchone()
            if row is None:
                con.execute(
                    "INSERT INTO budget (id, epsilon, delta, name, created) VALUES (1, ?, ?, ?, ?)",
                    (self.budget, self.delta_budget, self.name, time.time()),
                )
            stored = con.execute(
                "SELECT renyi_delta, orders, relation FROM filter WHERE id = 1"
            ).fetchone()
            if stored is None:
                stored = (self.renyi_delta, json.dumps(list(ORDERS)), self.relation)
                con.execute(
                    "INSERT INTO filter (id, renyi_delta, orders, relation) VALUES (1, ?, ?, ?)",
                    stored,
                )
            if row is not None:
                self._check_same_budget(float(row[0]), float(row[1]), float(stored[0]), stored[2])
            orders = tuple(json.loads(stored[1]))
            self.rule = FilterRule(
                self.budget, self.delta_budget, self.renyi_delta, orders, self.relation
            )

    def _check_same_budget(self, eps: float, dlt: float, renyi: float, relation: str) -> None:
        same = (
            math.isclose(eps, self.budget, rel_tol=REL_TOL)
            and math.isclose(dlt, self.delta_budget, rel_tol=REL_TOL, abs_tol=0.0)
            and math.isclose(renyi, self.renyi_delta, rel_tol=REL_TOL, abs_tol=0.0)
            and relation == self.relation
        )
        if not same:
            raise ValueError(
                f"The ledger {str(self.ledger)!r} holds budget epsilon={eps!r}, delta={dlt!r}, "
                f"renyi_delta={renyi!r}, relation={relation!r}; PrivacyOdometer was given "
                f"budget={self.budget!r}, delta_budget={self.delta_budget!r}, "
                f"renyi_delta={self.renyi_delta!r}, relation={self.relation!r}: a ledger "
                "shared by two budgets. A ledger's budget cannot change; open it with its own "
                "(PrivacyOdometer.open(path)) or give this budget a new ledger file."
            )

    def _rows(self, con: sqlite3.Connection) -> list[Spend]:
        rows = con.execute(
            "SELECT epsilon, delta, rdp, relation FROM spends ORDER BY id"
        ).fetchall()
        return [Spend.read(e, d, c, rel) for e, d, c, rel in rows]

    def spend(
        self,
        query: str,
        epsilon: float,
        delta: float = 0.0,
        *,
        mechanism: str = "",
        sensitivity: float = float("nan"),
        rdp: Any = None,
        relation: str = "add/remove",
        noise: str = "secure",
    ) -> None:
        """Record a spend of ``(epsilon, delta)``, or raise and record nothing.

        Call this *before* releasing the answer; when it returns, the spend is durable.

        Parameters
        ----------
        query : str
        epsilon : float
            In ``(0, inf)``.
        delta : float, default=0.0
            In ``[0, 1)``.
        mechanism : str, default=""
        sensitivity : float, default=nan
        rdp : array-like or None, default=None
            The release's RDP curve on the ledger's orders (``rule.orders``; see
            :mod:`privcal.privacy.filter` for the curves of each mechanism). ``None``: the
            pure-DP bound when ``delta == 0``, else no curve (``+inf``: only basic composition
            can admit past it).
        relation : {"add/remove", "substitute"}, default="add/remove"
            The neighbouring relation of the release's guarantee. A ``"substitute"`` ledger
            counts an add/remove release twice; an ``"add/remove"`` ledger refuses a
            substitute one (``ValueError``, nothing recorded).
        noise : {"secure", "seeded"}, default="secure"
            The kind of noise the release draws (:func:`~privcal.privacy.noise.noise_kind`).
            A seeded release is recorded with its mechanism marked ``(not private: seeded
            noise)``: it is reproducible from the seed, so the budget it spends bounds nothing,
            and ``privcal ledger show`` and :meth:`report` say so.

        Raises
        ------
        BudgetExceededError
            If neither basic composition nor the Rényi filter admits the spend.
        """
        owner = "PrivacyOdometer.spend"
        row = self._spend_row(owner, epsilon, delta, rdp, relation)
        eps, dlt = row.epsilon, row.delta
        sens = float(sensitivity)
        how = recorded_mechanism(str(mechanism), check_option(noise, "noise", owner, NOISE_KINDS))
        release = Release(str(query), how, sens, eps, dlt, self.name)
        if self.ledger is None:
            with self._lock:
                with_it = self._record.added(row)
                self._check(query, with_it, row)
                self._record = with_it
                self._memory.append((release, row))
            return
        with store.transaction(self.ledger) as con:
            self._check(query, SpendRecord.of(self.rule, [*self._rows(con), row]), row)
            stored = (release.query, release.mechanism, None if math.isnan(sens) else sens)
            curve = None if row.curve is None else json.dumps(row.curve.tolist())
            con.execute(
                f"INSERT INTO spends ({_RELEASE_COLUMNS}, pid, time, rdp, relation) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (*stored, eps, dlt, self.name, os.getpid(), time.time(), curve, row.relation),
            )

    def spend_release(
        self,
        release: Release,
        *,
        rdp: Any = None,
        relation: str = "add/remove",
        noise: str = "secure",
    ) -> None:
        """:meth:`spend` the budget of ``release`` (the record of a
        :class:`~privcal.privacy.measurement.Measurement`) with its query, mechanism and
        sensitivity: the ledger's row is the release itself."""
        if not isinstance(release, Release):
            raise TypeError(
                f"PrivacyOdometer.spend_release takes a Release. Got {release!r} instead."
            )
        self.spend(
            release.query,
            release.epsilon,
            release.delta,
            mechanism=release.mechanism,
            sensitivity=release.sensitivity,
            rdp=rdp,
            relation=relation,
            noise=noise,
        )

    def check(
        self,
        query: str,
        epsilon: float,
        delta: float = 0.0,
        *,
        rdp: Any = None,
        relation: str = "add/remove",
    ) -> None:
        """Raise what :meth:`spend` would raise now, recording nothing (advisory, not atomic).

        For a step whose later parts are planned from its earlier releases: check the whole
        step up front, then :meth:`spend` each part before it releases.
        """
        row = self._spend_row("PrivacyOdometer.check", epsilon, delta, rdp, relation)
        self._check(query, self._current().added(row), row)

    def _spend_row(self, owner: str, epsilon: Any, delta: Any, rdp: Any, relation: Any) -> Spend:
        """The checked arguments of a spend (``epsilon > 0``, ``delta`` in ``[0, 1)``, the RDP
        curve on the ledger's orders, the relation) as the row the rule composes."""
        eps = EPSILON.check(epsilon, "epsilon", owner)
        dlt = check_real(delta, "delta", owner, low=0.0, high=1.0, high_open=True)
        curve = self._check_curve(rdp)
        return Spend(eps, dlt, curve, check_option(relation, "relation", owner, RELATIONS))

    def _check_curve(self, rdp: Any) -> np.ndarray | None:
        if rdp is None:
            return None
        curve = np.asarray(rdp, dtype=np.float64)
        if curve.shape != (len(self.rule.orders),) or bool(np.any(curve < 0)):
            raise ValueError(
                f"The 'rdp' curve of PrivacyOdometer.spend must hold {len(self.rule.orders)} "
                f"non-negative values, one per order of the ledger ({self.rule.orders}); build it "
                "with privcal.privacy.filter (pure_dp_curve, zcdp_curve, dpsgd_curve). Got shape "
                f"{curve.shape}."
            )
        return curve

    @contextlib.contextmanager
    def charge(
        self, query: str, epsilon: float, delta: float = 0.0, **how: Any
    ) -> Iterator[Guarantee]:
        """Context manager form of :meth:`spend` (the same arguments; ``how`` holds its
        keyword-only ones): spends on entry, yields the Guarantee.

        The spend stays recorded even if the block raises (the answer may already be out).
        """
        self.spend(query, epsilon, delta, **how)
        yield Guarantee(float(epsilon), float(delta), relation=how.get("relation", "add/remove"))

    def _check(self, query: str, record: SpendRecord, row: Spend) -> None:
        """Raise :class:`BudgetExceededError` unless ``record`` (the record with ``row`` added)
        is admitted."""
        with_it = record.composition()
        if self.rule.admits(with_it):
            return
        eps, dlt, _ = as_relation(row, self.relation)  # substitution doubles add/remove ones
        spent = with_it.basic_epsilon - eps
        dspent = with_it.basic_delta - dlt
        note = f"ledger file {str(self.ledger)!r}" if self.ledger is not None else ""
        if self.relation == "substitute":
            note += "; " if note else ""
            note += "a substitute ledger: each add/remove release counted twice (group privacy)"
        if self.rule.renyi_delta > 0:
            note += "; " if note else ""
            note += (
                f"the Rényi filter would reach epsilon={with_it.renyi_epsilon:g} at "
                f"delta={self.rule.renyi_delta:g} (the basic branch keeps delta "
                f"{self.rule.basic_delta:g} of the ledger's {self.delta_budget:g})"
            )
        raise BudgetExceededError(
            self.name, str(query), self.budget, spent, eps, self.rule.basic_delta, dspent, dlt, note
        )

    def _spends(self) -> list[Spend]:
        if self.ledger is None:
            with self._lock:
                return [row for _, row in self._memory]
        with contextlib.closing(store.connect(self.ledger)) as con:
            return self._rows(con)

    def _current(self) -> SpendRecord:
        """The record now (immutable): the in-memory one, or the ledger file's (every
        process's spends)."""
        if self.ledger is None:
            with self._lock:
                return self._record
        return SpendRecord.of(self.rule, self._spends())

    def can_spend(
        self, epsilon: float, delta: float = 0.0, rdp: Any = None, relation: str = "add/remove"
    ) -> bool:
        """Whether a spend of ``(epsilon, delta)`` would be accepted now (advisory only)."""
        row = self._spend_row("PrivacyOdometer.can_spend", epsilon, delta, rdp, relation)
        return self.rule.admits(self._current().added(row).composition())

    @property
    def releases(self) -> list[Release]:
        """Every recorded spend, in order."""
        if self.ledger is None:
            with self._lock:
                return [r for r, _ in self._memory]
        with contextlib.closing(store.connect(self.ledger)) as con:
            rows = con.execute(f"SELECT {_RELEASE_COLUMNS} FROM spends ORDER BY id").fetchall()
        return [_release(row) for row in rows]

    def report(self) -> PrivacyReport:
        """A :class:`PrivacyReport` of the recorded releases (``noise="seeded"`` when any drew
        seeded noise)."""
        releases = self.releases
        return PrivacyReport(releases, noise="seeded" if seeded_releases(releases) else "secure")

    def composition(self) -> Composition:
        """What the record composes to: basic sums, the Rényi figure, and which one is stated."""
        return self._current().composition()

    @property
    def guarantee(self) -> Guarantee:
        """Basic composition of everything spent, under the ledger's relation:
        ``Guarantee(spent, delta_spent, relation=relation)``."""
        return Guarantee(*self._sums(), relation=self.relation)

    def __deepcopy__(self, memo: dict[int, Any]) -> PrivacyOdometer:
        """A ledger is shared, never copied: a copy would hold a second budget for the same data.

        So ``sklearn.base.clone`` of an estimator with ``ledger=odometer`` charges the same one.
        """
        return self

    def __copy__(self) -> PrivacyOdometer:
        """The same ledger (see :meth:`__deepcopy__`)."""
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        """A file ledger pickles as the same file reopened (another process, e.g. a
        ``cross_val_score(..., n_jobs=2)`` worker, charges the same budget); an in-memory one
        refuses: its copy would hold a second budget, whose charges never come back."""
        if self.ledger is None:
            raise TypeError(
                "An in-memory PrivacyOdometer cannot be pickled or sent to another process (a "
                "joblib or multiprocessing worker): the copy would hold a second budget for the "
                "same data, and its charges would never reach this one. Use a ledger file, "
                "PrivacyOdometer(..., ledger=PATH), which every process charges, or n_jobs=1."
            )
        args = (self.budget, str(self.ledger), self.delta_budget, self.name, self.renyi_delta)
        return (type(self), (*args, self.relation))

    def __repr__(self) -> str:
        where = "memory" if self.ledger is None else str(self.ledger)
        return (
            f"PrivacyOdometer(budget={self.budget:g}, spent={self.spent:g}, "
            f"delta_budget={self.delta_budget:g}, name={self.name!r}, ledger={where!r})"
        )


def as_odometer(ledger: Any, owner: str) -> PrivacyOdometer | None:
    """The ``ledger=`` argument of an estimator as an odometer (``None`` stays ``None``).

    A :class:`PrivacyOdometer` is used as given; a path must be an existing ledger file, opened
    with the budget it stores (:meth:`PrivacyOdometer.open`).

    Raises
    ------
    ValueError
        If ``ledger`` is neither, or the path holds no privcal ledger.
    """
    if ledger is None or isinstance(ledger, PrivacyOdometer):
        return ledger
    if isinstance(ledger, (str, os.PathLike)):
        path = Path(ledger)
        if not path.is_file():
            raise ValueError(
                f"The 'ledger' of {owner} is {str(path)!r}, which does not exist. Create the "
                "ledger with its budget first: PrivacyOdometer(3.0, ledger=PATH, "
                "delta_budget=1e-5, renyi_delta=5e-6) or 'privcal ledger init PATH'."
            )
        return PrivacyOdometer.open(path)
    raise ValueError(
        f"The 'ledger' parameter of {owner} must be None, a PrivacyOdometer or the path of a "
        f"ledger file. Got {ledger!r} instead."
    )


class UnaccountedFitWarning(PrivcalWarning):
    """A private estimator with no ledger is fitted again, or cloned (to be fitted again):
    every fit is its own release, fits on the same rows compose, and nothing adds them up."""


def warn_unaccounted(est: Any, why: str, stacklevel: int) -> None:
    """Warn :class:`UnaccountedFitWarning` that ``est`` (with ``ledger=None``) ``why``."""
    if not hasattr(est, "ledger") or est.ledger is not None:  # not private, or charged
        return
    if not getattr(getattr(est, "noise", None), "secure", True):  # seeded: not private anyway
        return
    eps = getattr(est, "epsilon", None)
    warnings.warn(
        f"{type(est).__name__}(epsilon={eps}, ledger=None) {why}: each fit on arrays is its own "
        f"release of epsilon = {eps}, and fits on the same rows compose (k-fold "
        "cross-validation over c candidates and a refit spend (k - 1) c + 1 times epsilon on a "
        "row), but each privacy_report_ states its own fit and no ledger adds them up. Pass "
        "ledger=PrivacyOdometer(budget=...) (every clone shares it) to charge and cap them all "
        "(a fit over sources=[DataSource, ...] is charged to each source's own budget).",
        UnaccountedFitWarning,
        stacklevel=stacklevel,
    )


class LedgerClone:
    """Mixin of the private estimators (before ``BaseEstimator`` in the bases): scikit-learn's
    ``clone`` (cross-validation, grid search) warns :func:`warn_unaccounted` without a ledger."""

    def __sklearn_clone__(self) -> Any:
        warn_unaccounted(self, "is cloned by scikit-learn (each clone is fitted)", stacklevel=4)
        return super().__sklearn_clone__()  # type: ignore[misc]

    def _warn_refit(self, stacklevel: int = 4) -> None:
        """Warn before a fit on arrays of an estimator already fitted (its report replaced)."""
        if hasattr(self, "privacy_report_"):
            warn_unaccounted(self, "is fitted again", stacklevel=stacklevel)


@dataclass(frozen=True)
class LedgerRecord(_BasicTotals):
    """What a ledger holds, read without writing to it (:func:`read_ledger`).

    Attributes
    ----------
    path : Path
        The SQLite file.
    name : str
        The name stored with the budget.
    budget, delta_budget : float
        The epsilon and delta budgets.
    releases : list of Release
        Every recorded spend, in order.
    renyi_delta : float
        The delta backing the ledger's Rényi filter (0: basic composition only).
    orders : tuple of float
        The Rényi orders of the recorded curves.
    curves : list of ndarray or None
        Each release's recorded RDP curve (``None``: derived from its epsilon, see
        :mod:`privcal.privacy.filter`).
    relations : list of str
        Each release's neighbouring relation.
    relation : str
        The ledger's neighbouring relation.
    """

    path: Path
    name: str
    budget: float
    delta_budget: float
    releases: list[Release]
    renyi_delta: float = 0.0
    orders: tuple[float, ...] = ORDERS
    curves: list[np.ndarray | None] = field(default_factory=list)
    relations: list[str] = field(default_factory=list)
    relation: str = "add/remove"

    @property
    def rule(self) -> FilterRule:
        """The ledger's admission rule."""
        return FilterRule(
            self.budget, self.delta_budget, self.renyi_delta, self.orders, self.relation
        )

    def composition(self) -> Composition:
        """What the record composes to (basic sums, Rényi figure, which one is stated)."""
        return compose_spends(self.rule, self._spends())

    def _spends(self) -> list[Spend]:
        """The record's rows as the admission rule reads them."""
        n = len(self.releases)
        curves = self.curves or [None] * n
        relations = self.relations or ["add/remove"] * n
        return [
            Spend(r.epsilon, r.delta, c, rel)
            for r, c, rel in zip(self.releases, curves, relations, strict=True)
        ]


#: The columns of a ``spends`` row that make its :class:`Release` (:func:`_release`).
_RELEASE_COLUMNS = "query, mechanism, sensitivity, epsilon, delta, source"


def _release(row: Any) -> Release:
    """The :class:`Release` of a row's :data:`_RELEASE_COLUMNS` (NULL sensitivity: nan)."""
    q, m, s, e, d, src = row
    return Release(q, m, float("nan") if s is None else float(s), e, d, src)


def read_ledger(path: str | Path) -> LedgerRecord:
    """Read any privcal ledger (an odometer's SQLite file) without writing to it.

    Every ledger privcal writes has the odometer's ``budget`` and ``spends`` tables: those of
    ``privcal source init``, of ``DataSource(..., ledger=PATH)`` and ``PrivacyOdometer(...,
    ledger=PATH)`` from Python, and of a Flower client (``privcal federate client --ledger``).
    The file is opened read-only (``mode=ro``), so a read-only ledger can be inspected and
    reading changes nothing.

    Raises
    ------
    ValueError
        If there is no file at ``path``, if it is not a SQLite file with those tables, or if
        SQLite cannot open it because the file or its folder is read-only for this user (the
        message says so and how to fix it).
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"No ledger at {str(path)!r}.")
    try:
        with contextlib.closing(store.connect_read_only(path)) as con:
            budget = con.execute("SELECT epsilon, delta, name FROM budget WHERE id = 1").fetchone()
            columns = store.columns(con, "spends")
            extra = ", ".join(c if c in columns else "NULL" for c in ("rdp", "relation"))
            rows = con.execute(
                f"SELECT {_RELEASE_COLUMNS}, {extra} FROM spends ORDER BY id"
            ).fetchall()
            stored = None
            if "filter" in store.tables(con):
                rel = "relation" if "relation" in store.columns(con, "filter") else "'add/remove'"
                stored = con.execute(
                    f"SELECT renyi_delta, orders, {rel} FROM filter WHERE id = 1"
                ).fetchone()
    except sqlite3.DatabaseError as err:
        if isinstance(err, sqlite3.OperationalError) and store.read_only(path):
            raise ValueError(store.read_only_message(path, err, spending=False)) from None
        raise ValueError(
            f"{str(path)!r} is not a privcal ledger ({err}); ledgers are the SQLite files "
            "written by 'privcal source init', 'privcal ledger init', PrivacyOdometer(..., "
            "ledger=PATH), DataSource(..., ledger=PATH) or 'privcal federate client --ledger'."
        ) from None
    if budget is None:
        raise ValueError(f"{str(path)!r} is not a privcal ledger (it records no budget).")
    releases = [_release(row[:6]) for row in rows]
    read = [Spend.read(e, d, c, rel) for _, _, _, e, d, _, c, rel in rows]
    renyi, orders, relation = (
        (0.0, ORDERS, "add/remove")
        if stored is None
        else (float(stored[0]), json.loads(stored[1]), str(stored[2]))
    )
    eps, dlt, name = float(budget[0]), float(budget[1]), str(budget[2])
    curves, relations = [r.curve for r in read], [r.relation for r in read]
    orders = tuple(float(a) for a in orders)
    return LedgerRecord(path, name, eps, dlt, releases, renyi, orders, curves, relations, relation)

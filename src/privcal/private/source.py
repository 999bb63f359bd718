"""A private data source: one party's validation data behind a closed vocabulary of DP queries.

A :class:`DataSource` holds one party's logits and labels and a
:class:`~privcal.privacy.PrivacyOdometer`. A calibrator (seed 000, Sec. 3.2) never sees the rows:
it sends queries from the vocabulary below, and the source answers each with the Laplace
mechanism after recording the spend.

Query vocabulary
----------------
``accuracy_gap_sum(T)``, ``accuracy_gap_curve(Ts)``, ``clipped_nll_sum(T, B)``,
``clipped_nll_increments(Ts, B)``, ``bin_gaps(T, M)``, ``bin_counts(T, M)`` and ``count()``. Each
query is one :class:`~privcal.privacy.measurement.Measurement`
(:data:`privcal.private.queries.QUERY_MEASUREMENTS`): its statistic (a shared function of
:mod:`privcal.metrics.statistics`), the Laplace mechanism and its L1 sensitivity, derived in the
query method's docstring. The table of ``docs/private.md`` is generated from those objects.

Neighbouring relation: add or remove one example (one row of logits and its label). Under it the
number of rows ``n`` is itself private, so the source publishes only ``n_classes`` and its name;
none of the calibrators needs ``n`` (they compare sums, see :mod:`privcal.private.temperature`),
and :meth:`DataSource.count` sells a noisy ``n`` for those who do.

Every answer follows one path: the query's private method (``_accuracy_gap_sum`` ...) validates
the arguments and computes the exact statistic with the shared function, then
:meth:`DataSource._release` **spends on the odometer** (durable when there is a ledger) and only
then draws the noise with :func:`privcal.privacy.laplace` from the source's noise. A query that
would exceed the budget raises :class:`~privcal.privacy.BudgetExceededError` and spends nothing.
:meth:`DataSource.share` answers the same statistic as an upload to a secure sum with a
distributed noise share instead (``aggregation="distributed"``; :mod:`privcal.privacy.distributed`).

Disjointness is checked, not assumed
------------------------------------
Parallel composition across sources (the calibrators' ``privacy_report_``) holds only when no
example lies in two sources. Every source computes a 64-bit digest of each row (logits and
label, :func:`row_digests`) and an order-free fingerprint of its whole data
(:func:`data_fingerprint`). :func:`check_sources` refuses a list in which two sources are the
same object, share a ledger file, hold the same data, or share any row; a ledger binds the
fingerprint of the data it was first opened with and refuses other data, so one ledger keeps
the budget of exactly one data set.
"""

from __future__ import annotations

import hashlib
import math
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from privcal._params import check_int, check_real
from privcal.data.validation import check_labels, check_scores
from privcal.metrics.statistics import (
    accuracy_gap_sum,
    calibration_bins,
    clipped_nll_sum,
    top_confidence,
    top_correct,
)
from privcal.privacy import (
    BudgetExceededError,
    InsecureNoiseWarning,
    NoiseSource,
    PrivacyOdometer,
    PrivacyReport,
    Release,
    noise_kind,
    resolve_noise,
)
from privcal.privacy.distributed import AggregatorView, DistributedPlan, SecureSum
from privcal.privacy.measurement import Measurement
from privcal.private.queries import (
    DISTRIBUTED_LAPLACE,
    QUERIES,
    QUERY_MEASUREMENTS,
    nll_curve_sensitivity,
    query_sensitivity,
)

__all__ = [
    "MAX_ROWS",
    "QUERIES",
    "BinCounts",
    "DataSource",
    "InsecureNoiseWarning",
    "Share",
    "answer_all",
    "curve_from_release",
    "curve_release",
    "data_fingerprint",
    "nll_curve_sensitivity",
    "query_sensitivity",
    "row_digests",
]

#: What a source's answers treat as public (n, the number of rows, is private).
SOURCE_PUBLIC: tuple[str, ...] = (
    "n_classes (number of classes)",
    "the source's name",
    "query parameters (temperatures, bins, clip bounds)",
)


@dataclass(frozen=True)
class BinCounts:
    """Noisy per-bin counts returned by :meth:`DataSource.bin_counts`.

    Attributes
    ----------
    correct : ndarray of shape (M,)
        Noisy number of correctly classified examples per bin.
    incorrect : ndarray of shape (M,)
        Noisy number of misclassified examples per bin (released independently).
    """

    correct: np.ndarray
    incorrect: np.ndarray

    @property
    def total(self) -> np.ndarray:
        """``correct + incorrect``: the noisy number of examples per bin (post-processing)."""
        return self.correct + self.incorrect

    def __add__(self, other: Any) -> BinCounts:
        """Sum of two sources' counts (``0`` is the neutral start of a sum)."""
        if isinstance(other, BinCounts):
            return BinCounts(self.correct + other.correct, self.incorrect + other.incorrect)
        if isinstance(other, (int, float)) and other == 0:
            return self
        return NotImplemented

    __radd__ = __add__


_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


def _mix64(h: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a bijection of uint64 that spreads every input bit."""
    h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


def row_digests(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """A 64-bit digest of each row ``(logits[i], labels[i])`` (vectorised FNV-1a + splitmix64).

    Two rows get the same digest when their float64 logits (``-0.0`` read as ``0.0``) and their
    labels are equal; distinct rows collide with probability about ``2^-64`` per pair. Used to
    detect data shared by two sources, never released.
    """
    z = np.ascontiguousarray(np.asarray(logits, dtype=np.float64) + 0.0)
    words = z.view(np.uint64).reshape(z.shape[0], -1)
    h = np.full(z.shape[0], _FNV_OFFSET, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(words.shape[1]):
            h = (h ^ words[:, j]) * _FNV_PRIME
        h = (h ^ np.asarray(labels, dtype=np.int64).astype(np.uint64)) * _FNV_PRIME
        return _mix64(h)


def data_fingerprint(digests: np.ndarray, n_classes: int) -> str:
    """SHA-256 of the sorted row digests and the class count (the same rows in any order)."""
    h = hashlib.sha256(f"privcal-data-v1:{int(n_classes)}:".encode())
    h.update(np.sort(np.asarray(digests, dtype=np.uint64)).tobytes())
    return h.hexdigest()


_DATA_SCHEMA = """
CREATE TABLE IF NOT EXISTS data (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    fingerprint TEXT NOT NULL,
    n_classes INTEGER NOT NULL,
    created REAL NOT NULL
)
"""


def _bind_ledger(ledger: Path, fingerprint: str, n_classes: int) -> None:
    """Record ``fingerprint`` in the ledger, or refuse when the ledger holds another data set."""
    con = sqlite3.connect(ledger, timeout=60.0)
    try:
        with con:
            con.execute(_DATA_SCHEMA)
            row = con.execute("SELECT fingerprint FROM data WHERE id = 1").fetchone()
            if row is None:
                con.execute(
                    "INSERT INTO data (id, fingerprint, n_classes, created) VALUES (1, ?, ?, ?)",
                    (fingerprint, int(n_classes), time.time()),
                )
            elif row[0] != fingerprint:
                raise ValueError(
                    f"The 'ledger' {str(ledger)!r} keeps the budget of another data set "
                    f"(fingerprint {row[0][:12]}..., these rows give {fingerprint[:12]}...). "
                    "A ledger belongs to one data set: give this data a ledger of its own."
                )
    finally:
        con.close()


_SOURCE_SCHEMA = """
CREATE TABLE IF NOT EXISTS source (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    data TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    n_classes INTEGER NOT NULL,
    input TEXT NOT NULL,
    created REAL NOT NULL
)
"""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _check_grid(temperatures: Any, owner: str) -> np.ndarray:
    t = np.asarray(temperatures, dtype=np.float64)
    if (
        t.ndim != 1
        or t.size < 1
        or not np.all(np.isfinite(t))
        or np.any(t <= 0)
        or np.any(np.diff(t) <= 0)
    ):
        raise ValueError(
            f"The 'temperatures' parameter of {owner} must be a non-empty 1-D array of positive, "
            f"finite, strictly increasing temperatures. Got {temperatures!r} instead."
        )
    return t


def curve_release(curve: np.ndarray, anchor: int) -> np.ndarray:
    """The vector :meth:`DataSource.accuracy_gap_curve` releases: ``(G[a], diff(G))``.

    Works on the last axis, so ``curve`` may hold many curves (shape ``(..., k)``).
    """
    return np.concatenate([curve[..., anchor : anchor + 1], np.diff(curve, axis=-1)], axis=-1)


def curve_from_release(released: np.ndarray, anchor: int) -> np.ndarray:
    """Invert :func:`curve_release` (last axis): cumulative sums outward from the anchor."""
    base, inc = released[..., :1], released[..., 1:]
    right = base + np.cumsum(inc[..., anchor:], axis=-1)
    left = base - np.cumsum(inc[..., :anchor][..., ::-1], axis=-1)[..., ::-1]
    return np.concatenate([left, base, right], axis=-1)


#: Public bound on the rows of one source answering a secure sum (it sizes the modulus).
MAX_ROWS = 2**24


def _scalar(released: Any) -> float:
    return float(np.asarray(released, dtype=np.float64).reshape(()))


@dataclass(frozen=True)
class _Statistic:
    """One query's exact answer and what its release needs to know.

    ``value`` is the vector released (before noise); ``measurement`` is the query's
    (:data:`~privcal.private.queries.QUERY_MEASUREMENTS`, read when the statistic is computed)
    and ``params`` the public parameters its sensitivity reads; ``moved`` the most coordinates
    one example can move; ``row_bound`` the most one example adds to a coordinate's absolute
    value; ``finish`` the post-processing from the released vector to what the query returns.
    """

    label: str
    value: float | np.ndarray
    measurement: Measurement
    moved: int
    row_bound: float
    finish: Callable[[Any], Any]
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def sensitivity(self) -> float:
        """The L1 sensitivity under add/remove one example, read from the measurement."""
        return self.measurement.sensitivity_at(**self.params)

    def record(self, epsilon: float, source: str, mechanism: str | None = None) -> Release:
        """The release of this statistic at ``epsilon`` whose noise is drawn elsewhere."""
        return self.measurement.record(
            self.label, epsilon, source=source, mechanism=mechanism, **self.params
        )


@dataclass(frozen=True)
class Share:
    """A source's upload to a secure sum and the public plan that decodes the sum.

    Attributes
    ----------
    upload : ndarray of uint64
        Residues of the ring (what the secure sum receives from this source).
    plan : DistributedPlan
        Public: encoding, share law, threshold, bounds.
    finish : callable
        The query's post-processing of the decoded sum (e.g. the curve from its increments).
    label : str
        The query as recorded in the report.
    """

    upload: np.ndarray
    plan: DistributedPlan
    finish: Callable[[Any], Any]
    label: str


class DataSource:
    """One party's private logits and labels, answering only DP queries from a closed vocabulary.

    Parameters
    ----------
    logits : array_like of shape (n, C)
        Validation logits (or probabilities with ``input="probs"``). Private.
    labels : array_like of shape (n,)
        Labels in ``0..C-1``. Private.
    budget : float, default=1.0
        Epsilon budget of this source (``> 0``), kept by a :class:`PrivacyOdometer`.
    ledger : str, Path or None, default=None
        SQLite ledger of the odometer (spends survive restarts and concurrent processes).
    noise : NoiseSource or None, default=None
        ``None`` means :class:`~privcal.privacy.SecureNoise` (OpenDP samplers). A non-secure source
        (``SeededNoise``) raises an :class:`InsecureNoiseWarning`: use it only to simulate.
    name : str, default=""
        Public label; recorded as the ``source`` of every release.
    input : {"logits", "probs"}, default="logits"
    delta_budget : float, default=0.0
        The delta budget of the odometer (its queries are pure epsilon-DP and spend none; a
        ledger shared with approximate-DP spends, such as a federated client's, holds one).

    Attributes
    ----------
    n_classes : int
        Public: the number of classes.
    name : str
        Public.
    odometer : PrivacyOdometer
    noise : NoiseSource
    fingerprint : str
        Order-free SHA-256 of the rows (:func:`data_fingerprint`); kept in the ledger, never
        released. Sources with equal fingerprints or shared rows are refused together.

    Privacy
    -------
    Neighbouring relation: add/remove one example of this source. Each query is the Laplace
    mechanism with scale ``sensitivity / epsilon`` (pure ``epsilon``-DP, Dwork & Roth Thm. 3.6);
    the sensitivities are derived in each method's docstring. Answers compose by basic
    composition within the source (the odometer refuses to exceed ``budget``); different sources
    hold disjoint data and compose in parallel. Public: ``n_classes``, ``name``, the query
    parameters (temperatures, bin edges, clip bounds) chosen by the calibrator. Private: the rows
    and their number ``n``.

    Examples
    --------
    >>> import numpy as np, warnings
    >>> from privcal.privacy import SeededNoise
    >>> z = np.array([[2.0, 0.0], [0.0, 1.0], [3.0, 0.0]]); y = np.array([0, 0, 0])
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     src = DataSource(z, y, budget=1.0, noise=SeededNoise(0), name="h1")
    >>> v = src.accuracy_gap_sum(1.0, epsilon=0.5)
    >>> src.spent, src.remaining
    (0.5, 0.5)
    """

    #: Whether the source can upload a fixed-point answer plus a noise share to an in-process
    #: secure sum (:meth:`share`); sources answered over a transport add their own noise.
    uploads_shares: ClassVar[bool] = True
    #: How this source's shares reach a secure sum (the report's transport line):
    #: ``"in-process"`` (a simulation in one process) or ``"secagg+"`` (a Flower node).
    transport: ClassVar[str] = "in-process"
    #: The public bound on this source's rows that sizes its secure sums.
    max_rows: int = MAX_ROWS

    def __init__(
        self,
        logits: Any,
        labels: Any,
        budget: float = 1.0,
        ledger: str | Path | None = None,
        noise: NoiseSource | None = None,
        name: str = "",
        *,
        input: str = "logits",
        delta_budget: float = 0.0,
    ) -> None:
        owner = "DataSource"
        z = check_scores(logits, input=input)  # type: ignore[arg-type]
        y = check_labels(labels, z.shape[0], z.shape[1])
        if not isinstance(name, str):
            raise ValueError(
                f"The 'name' parameter of {owner} must be a str. Got {name!r} instead."
            )
        noise = resolve_noise(noise, f"DataSource {name!r}")
        self._z = z
        self._y = y
        self._z.setflags(write=False)
        self._y.setflags(write=False)
        self.n_classes = int(z.shape[1])
        self.name = name
        self.noise = noise
        self._digests = row_digests(z, y)
        self.fingerprint = data_fingerprint(self._digests, self.n_classes)
        self.odometer = PrivacyOdometer(budget, ledger=ledger, delta_budget=delta_budget, name=name)
        if self.odometer.ledger is not None:
            _bind_ledger(self.odometer.ledger, self.fingerprint, self.n_classes)
        self.history: list[Release] = []

    def privacy_report(self) -> PrivacyReport:
        """Every answer this object released, as a report (add/remove one example; n private).

        Public: the class count, the source's name and the query parameters (temperatures, bin
        counts, clip bounds), which the caller chose. ``noise`` records whether the answers drew
        secure or seeded noise.
        """
        return PrivacyReport(
            self.history,
            unit="example",
            relation="add/remove",
            public=SOURCE_PUBLIC,
            noise=noise_kind(self.noise),
        )

    # ------------------------------------------------------------------ public metadata
    @property
    def budget(self) -> float:
        return self.odometer.budget

    @property
    def spent(self) -> float:
        """Epsilon spent so far (all processes sharing the ledger)."""
        return self.odometer.spent

    @property
    def remaining(self) -> float:
        return self.odometer.remaining

    def can_spend(self, epsilon: float) -> bool:
        """Whether the ledger can pay ``epsilon`` now (public metadata; spends nothing)."""
        return bool(self.odometer.can_spend(epsilon))

    def __repr__(self) -> str:
        return (
            f"DataSource(name={self.name!r}, n_classes={self.n_classes}, "
            f"budget={self.budget:g}, spent={self.spent:g}, noise={self.noise!r})"
        )

    # ------------------------------------------------------------------ the one answering path
    def _epsilon(self, epsilon: Any, query: str) -> float:
        return check_real(epsilon, "epsilon", f"DataSource.{query}", low=0.0, low_open=True)

    def _charge(self, release: Release) -> None:
        """Spend ``release`` on the odometer (durable with a ledger), then keep it."""
        self.odometer.spend_release(release)
        self.history.append(release)

    def _release(self, stat: _Statistic, epsilon: float) -> Any:
        """The query's measurement: charged (recorded before anything leaves), then
        ``value + Lap``."""
        noisy, _ = stat.measurement.release(
            stat.value,
            epsilon,
            self.noise,
            query=stat.label,
            source=self.name,
            charge=self._charge,
            **stat.params,
        )
        return stat.finish(noisy)

    def share(
        self,
        query: str,
        epsilon: float,
        *,
        n_parties: int,
        threshold: int,
        ring: SecureSum | None = None,
        max_rows: int = MAX_ROWS,
        **params: Any,
    ) -> Share:
        """This source's upload to a secure sum of ``query`` with distributed noise.

        The same exact statistic as the query method ``query`` (the same shared function), then
        the distributed mechanism of :mod:`privcal.privacy.distributed` instead of the Laplace
        one: the vector is encoded in fixed point and a discrete Laplace share sized for
        ``threshold`` parties is added, so the sum of any ``t`` honest sources' uploads carries
        exactly the discrete Laplace noise of one ``epsilon``-DP release.

        Parameters
        ----------
        query : str
            A name of the vocabulary (:data:`QUERIES`).
        epsilon : float
            Budget of this answer (charged here, before anything is drawn).
        n_parties, threshold : int
            ``K`` sources answer; the shares are sized for ``t`` (public).
        ring : SecureSum, optional
            The secure sum the upload is for (its modulus); default 2^64.
        max_rows : int, default=MAX_ROWS
            The public bound on any source's rows that sizes the secure sum (a smaller ring,
            such as SecAgg+'s 2^31, needs a smaller bound).
        **params
            The query's own parameters (temperatures, bins, clip bound ...).

        Returns
        -------
        Share
            The upload (residues of the ring) and the public plan to decode the sum.

        Privacy
        -------
        Add/remove one example of this source moves the exact vector by at most the query's L1
        sensitivity ``Delta`` over at most ``m`` coordinates (the query's docstring), so the
        encoded vector moves by at most ``D = ceil(s Delta) + m`` whatever the rounding offsets
        (:mod:`privcal.privacy.distributed`). The sum the aggregator sees holds, besides the
        other sources' encoded vectors (independent of this source's data), at least ``t`` shares
        that sum to ``DLap(exp(-epsilon / D))``: pure ``epsilon``-DP for this source's examples
        against the aggregator, provided ``t`` sources are honest. Public besides the query's
        parameters: ``K``, ``t``, the scale and :data:`MAX_ROWS` (a source holds at most that many
        rows; it bounds the sum for the modulus).
        """
        if query not in QUERIES:
            raise ValueError(
                f"Unknown DataSource query {query!r}; the vocabulary is {', '.join(QUERIES)}."
            )
        eps = self._epsilon(epsilon, query)
        if self._z.shape[0] > max_rows:
            raise ValueError(
                f"DataSource {self.name!r} holds more than {max_rows} rows, the public bound its "
                "secure sums are sized for; split it into several sources."
            )
        stat = getattr(self, f"_{query}")(**params)
        ring = SecureSum() if ring is None else ring
        plan = share_plan(stat, eps, n_parties, threshold, ring.bits, max_rows)
        self._charge(stat.record(eps, self.name, DISTRIBUTED_LAPLACE))
        return Share(plan.share(stat.value, self.noise, ring), plan, stat.finish, stat.label)

    def _temperature(self, temperature: Any, query: str) -> float:
        return check_real(temperature, "temperature", f"DataSource.{query}", low=0.0, low_open=True)

    def _n_bins(self, n_bins: Any, query: str) -> int:
        return check_int(n_bins, "n_bins", f"DataSource.{query}", low=1)

    # ------------------------------------------------------------------ queries
    def accuracy_gap_sum(self, temperature: float, epsilon: float) -> float:
        """Noisy :math:`\\sum_i (1[\\text{correct}_i] - \\mathrm{conf}_T(i))` (Acc-T's statistic).

        Parameters
        ----------
        temperature : float
            ``T > 0`` (public).
        epsilon : float
            Budget of this answer, ``> 0``.

        Returns
        -------
        float

        Privacy
        -------
        Each term lies in ``[-1, 1]`` (``conf_T`` in ``[1/C, 1]``, correctness in {0, 1}), so
        adding or removing one example changes the sum by at most 1: sensitivity 1. Laplace
        scale ``1 / epsilon``; pure ``epsilon``-DP.
        """
        eps = self._epsilon(epsilon, "accuracy_gap_sum")
        return self._release(self._accuracy_gap_sum(temperature), eps)

    def _accuracy_gap_sum(self, temperature: Any) -> _Statistic:
        t = self._temperature(temperature, "accuracy_gap_sum")
        value = float(accuracy_gap_sum(self._z, self._y, t))
        return _Statistic(
            f"accuracy_gap_sum(T={t:.6g})",
            value,
            QUERY_MEASUREMENTS["accuracy_gap_sum"],
            1,
            1.0,
            _scalar,
        )

    def accuracy_gap_curve(self, temperatures: Any, epsilon: float, anchor: int = 0) -> np.ndarray:
        """Noisy :meth:`accuracy_gap_sum` at every temperature of a public increasing grid.

        One release answers the whole curve :math:`G(T_1), \\dots, G(T_k)`, with
        :math:`G(T) = \\sum_i 1[c_i] - \\mathrm{conf}_T(i)` computed by the shared
        ``accuracy_gap_sum`` at each :math:`T_j`. The released vector is the value at the anchor
        and the increments, :math:`(G(T_a), G(T_2) - G(T_1), \\dots, G(T_k) - G(T_{k-1}))`, each
        coordinate with Laplace noise; the curve is rebuilt from it by cumulative sums outward
        from the anchor (post-processing). So the noise of :math:`\\tilde G(T_j)` is the sum of
        ``|j - a| + 1`` Laplace draws: smallest at the anchor.

        Parameters
        ----------
        temperatures : array_like of shape (k,)
            Strictly increasing positive temperatures (public), ``k >= 1``.
        epsilon : float
            Budget of this answer (the whole curve), ``> 0``.
        anchor : int, default=0
            Index of the grid point whose value is released directly (public).

        Returns
        -------
        ndarray of shape (k,)
            The noisy curve :math:`\\tilde G(T_j)`.

        Privacy
        -------
        One example contributes :math:`g(T) = 1[c] - \\mathrm{conf}_T`, and the top-label
        confidence :math:`\\mathrm{conf}_T = 1 / \\sum_c e^{(z_c - z_{\\max}) / T}` is
        non-increasing in ``T`` (every exponent is ``<= 0`` and grows toward 0 with ``T``), so
        :math:`g` is non-decreasing and its increments on an increasing grid are all ``>= 0``.
        They telescope: :math:`\\sum_j |g(T_{j+1}) - g(T_j)| = \\mathrm{conf}_{T_1} -
        \\mathrm{conf}_{T_k} \\le 1 - 1/C`, and :math:`|g(T_a)| \\le 1`. Adding or removing the
        example therefore moves the released vector by at most :math:`2 - 1/C \\le 2` in L1,
        whatever ``k``: sensitivity 2. Laplace scale ``2 / epsilon`` per coordinate; pure
        ``epsilon``-DP. (Releasing the ``k`` values themselves would have sensitivity ``k``.)
        """
        eps = self._epsilon(epsilon, "accuracy_gap_curve")
        return self._release(self._accuracy_gap_curve(temperatures, anchor), eps)

    def _accuracy_gap_curve(self, temperatures: Any, anchor: Any = 0) -> _Statistic:
        owner = "DataSource.accuracy_gap_curve"
        temps = _check_grid(temperatures, owner)
        a = check_int(anchor, "anchor", owner, low=0)
        if a >= temps.size:
            raise ValueError(
                f"The 'anchor' parameter of {owner} must be an index into the {temps.size} "
                f"temperatures (0..{temps.size - 1}). Got {anchor!r} instead."
            )
        curve = np.asarray(accuracy_gap_sum(self._z, self._y, temps), dtype=np.float64)
        label = (
            f"accuracy_gap_curve(T={temps[0]:.6g}..{temps[-1]:.6g}, k={temps.size}, "
            f"anchor={temps[a]:.6g})"
        )
        # one example moves every coordinate (the anchor and each increment) by at most 1
        return _Statistic(
            label,
            curve_release(curve, a),
            QUERY_MEASUREMENTS["accuracy_gap_curve"],
            temps.size,
            1.0,
            lambda r: curve_from_release(np.asarray(r), a),
        )

    def clipped_nll_sum(self, temperature: float, epsilon: float, bound: float = 10.0) -> float:
        """Noisy :math:`\\sum_i \\min(\\ell_T(i), B)`: the NLL, each term clipped to ``[0, B]``.

        Parameters
        ----------
        temperature : float
            ``T > 0``.
        epsilon : float
        bound : float, default=10.0
            Clip bound ``B > 0`` (seed 000 uses 10).

        Returns
        -------
        float

        Privacy
        -------
        Each clipped term lies in ``[0, B]``: one example changes the sum by at most ``B``,
        sensitivity B. Without the clip one example's NLL is unbounded (``-log p_y`` grows without
        limit as ``p_y -> 0``), so no finite noise would make the sum private. Laplace scale
        ``B / epsilon``; pure ``epsilon``-DP.
        """
        eps = self._epsilon(epsilon, "clipped_nll_sum")
        return self._release(self._clipped_nll_sum(temperature, bound), eps)

    def _clipped_nll_sum(self, temperature: Any, bound: Any = 10.0) -> _Statistic:
        t = self._temperature(temperature, "clipped_nll_sum")
        b = check_real(bound, "bound", "DataSource.clipped_nll_sum", low=0.0, low_open=True)
        value = float(clipped_nll_sum(self._z, self._y, t, b))
        label = f"clipped_nll_sum(T={t:.6g}, B={b:g})"
        return _Statistic(
            label, value, QUERY_MEASUREMENTS["clipped_nll_sum"], 1, b, _scalar, {"bound": b}
        )

    def clipped_nll_increments(
        self, temperatures: Any, epsilon: float, bound: float = 10.0
    ) -> np.ndarray:
        """Noisy increments of :meth:`clipped_nll_sum` along a public increasing grid.

        One release answers the shape of the whole NLL curve: with
        :math:`F(T) = \\sum_i \\min(\\ell_T(i), B)` computed by the shared ``clipped_nll_sum``
        at every :math:`T_j`, the released vector is
        :math:`(F(T_2) - F(T_1), \\dots, F(T_k) - F(T_{k-1}))` with Laplace noise on each
        coordinate. The level :math:`F(T_1)` is not released: the minimiser of a sum of curves
        does not depend on it, and leaving it out saves ``B`` of sensitivity.

        Parameters
        ----------
        temperatures : array_like of shape (k,)
            Strictly increasing positive temperatures (public), ``k >= 2``.
        epsilon : float
            Budget of this answer (the whole curve), ``> 0``.
        bound : float, default=10.0
            Clip bound ``B > 0`` (public).

        Returns
        -------
        ndarray of shape (k - 1,)

        Privacy
        -------
        Add/remove one example moves the released vector by that example's own increments,
        whose L1 norm is the total variation (TV) of :math:`f(T) = \\min(\\ell_T, B)` along
        the grid. Write :math:`d_c = z_c - \\max z \\le 0`, :math:`\\beta = 1 / T` and
        :math:`\\ell(\\beta) = \\log \\sum_c e^{\\beta d_c} - \\beta d_y`: a log-sum-exp of
        functions linear in :math:`\\beta` minus a linear one, so convex in :math:`\\beta`.

        * :math:`d_y = 0` (the label has the top logit): :math:`\\ell' = E_p[d] \\le 0`, so
          :math:`f` is monotone along the grid and, as :math:`0 \\le \\ell \\le \\log C`,
          :math:`\\mathrm{TV} \\le \\min(B, \\log C)`.
        * :math:`d_y < 0`: :math:`f = \\min(\\ell, B)` is quasi-convex in :math:`\\beta` (its
          sublevel sets are those of :math:`\\ell`, or the whole line), so along the grid it
          falls to its smallest value :math:`m` and then rises:
          :math:`\\mathrm{TV} = (f(T_1) - m) + (f(T_k) - m)`. The falling part is at most
          :math:`B - m \\le B`. For the rising part, every :math:`e^{\\beta d_c} \\le 1` and the
          top class contributes 1, so :math:`\\beta |d_y| \\le \\ell(\\beta) \\le \\beta |d_y| +
          \\log C`; with :math:`\\beta_k = 1 / T_k` the smallest grid value of :math:`\\beta`,
          :math:`m \\ge \\min(B, \\beta_k |d_y|)` and :math:`f(T_k) \\le \\min(B, \\beta_k |d_y|
          + \\log C)`, so :math:`f(T_k) - m \\le \\min(B, \\log C)`.

        Hence :math:`\\mathrm{TV} \\le B + \\min(B, \\log C)` for every example, whatever the
        grid and its size :math:`k`: sensitivity B + min(B, log C)
        (:func:`nll_curve_sensitivity`; releasing the ``k`` values instead would cost ``k B``).
        ``C`` is public. For a label below the top logit the bound
        has a slack of at least :math:`\\log 2` (:math:`p_y \\le 1/2`, so :math:`m \\ge \\log 2`),
        which covers floating-point rounding of the computed terms. Laplace scale
        ``(B + min(B, log C)) / epsilon`` per coordinate; pure ``epsilon``-DP.
        """
        eps = self._epsilon(epsilon, "clipped_nll_increments")
        return self._release(self._clipped_nll_increments(temperatures, bound), eps)

    def _clipped_nll_increments(self, temperatures: Any, bound: Any = 10.0) -> _Statistic:
        owner = "DataSource.clipped_nll_increments"
        temps = _check_grid(temperatures, owner)
        if temps.size < 2:
            raise ValueError(
                f"The 'temperatures' parameter of {owner} must hold at least 2 temperatures "
                f"(the release is their {temps.size - 1} increments). Got {temperatures!r} "
                "instead."
            )
        b = check_real(bound, "bound", owner, low=0.0, low_open=True)
        curve = np.asarray(clipped_nll_sum(self._z, self._y, temps, b), dtype=np.float64)
        label = (
            f"clipped_nll_increments(T={temps[0]:.6g}..{temps[-1]:.6g}, k={temps.size}, B={b:g})"
        )
        # one clipped term lies in [0, B], so each increment moves by at most B
        params = {"bound": b, "n_classes": self.n_classes}
        m = QUERY_MEASUREMENTS["clipped_nll_increments"]
        return _Statistic(label, np.diff(curve), m, temps.size - 1, b, np.asarray, params)

    def bin_gaps(self, temperature: float, epsilon: float, n_bins: int = 15) -> np.ndarray:
        """Noisy per-bin sums of ``1[correct] - conf_T`` over equal-width confidence bins.

        The vector ECE-T needs: ``sum_m |gaps_m| / n`` is the binned ECE at ``T``.

        Parameters
        ----------
        temperature : float
        epsilon : float
        n_bins : int, default=15
            Equal-width, right-closed bins on [0, 1] (public edges).

        Returns
        -------
        ndarray of shape (n_bins,)

        Privacy
        -------
        One example falls in exactly one bin and changes that bin's sum by its term, at most 1
        in absolute value; the other bins are unchanged: L1 sensitivity 1 whatever ``n_bins``.
        Independent Laplace noise of scale ``1 / epsilon`` per bin; pure ``epsilon``-DP.
        """
        eps = self._epsilon(epsilon, "bin_gaps")
        return self._release(self._bin_gaps(temperature, n_bins), eps)

    def _bin_gaps(self, temperature: Any, n_bins: Any = 15) -> _Statistic:
        t = self._temperature(temperature, "bin_gaps")
        m = self._n_bins(n_bins, "bin_gaps")
        stats = calibration_bins(top_confidence(self._z, t), top_correct(self._z, self._y), m)
        label = f"bin_gaps(T={t:.6g}, M={m})"
        return _Statistic(label, stats.gaps(), QUERY_MEASUREMENTS["bin_gaps"], 1, 1.0, np.asarray)

    def bin_counts(self, epsilon: float, n_bins: int = 15, temperature: float = 1.0) -> BinCounts:
        """Noisy per-bin numbers of correct and of incorrect predictions (histogram binning).

        Parameters
        ----------
        epsilon : float
        n_bins : int, default=15
        temperature : float, default=1.0
            Temperature of the confidences that are binned.

        Returns
        -------
        BinCounts
            ``correct``, ``incorrect`` and ``total = correct + incorrect``.

        Privacy
        -------
        The released vector is ``(correct_1..M, incorrect_1..M)``: one example adds 1 to exactly
        one of these ``2M`` cells: L1 sensitivity 1. Seed 000 (App. C.2.3)
        releases ``(correct, total)`` instead, with sensitivity 2 (one example moves a correct
        cell and a total cell); both carry the same information (``total = correct +
        incorrect``), but ours needs half the noise scale. Laplace scale ``1 / epsilon`` per
        cell; pure ``epsilon``-DP.
        """
        eps = self._epsilon(epsilon, "bin_counts")
        return self._release(self._bin_counts(n_bins, temperature), eps)

    def _bin_counts(self, n_bins: Any = 15, temperature: Any = 1.0) -> _Statistic:
        m = self._n_bins(n_bins, "bin_counts")
        t = self._temperature(temperature, "bin_counts")
        stats = calibration_bins(top_confidence(self._z, t), top_correct(self._z, self._y), m)
        value = np.concatenate([stats.sum_correct, stats.counts - stats.sum_correct])

        def finish(released: Any) -> BinCounts:
            out = np.asarray(released, dtype=np.float64)
            return BinCounts(out[:m], out[m:])

        return _Statistic(
            f"bin_counts(T={t:.6g}, M={m})", value, QUERY_MEASUREMENTS["bin_counts"], 1, 1.0, finish
        )

    def count(self, epsilon: float) -> float:
        """Noisy number of examples ``n`` (private under add/remove).

        Privacy
        -------
        Adding or removing one example changes ``n`` by 1: sensitivity 1, Laplace scale
        ``1 / epsilon``; pure ``epsilon``-DP.
        """
        eps = self._epsilon(epsilon, "count")
        return self._release(self._count(), eps)

    def _count(self) -> _Statistic:
        return _Statistic(
            "count", float(self._z.shape[0]), QUERY_MEASUREMENTS["count"], 1, 1.0, _scalar
        )

    # ------------------------------------------------------------------ ledger-backed sources
    @classmethod
    def init_ledger(
        cls,
        data: str | Path,
        ledger: str | Path,
        budget: float = 1.0,
        name: str = "",
        *,
        input: str = "auto",
    ) -> DataSource:
        """Create the ledger of a source over the scores file ``data`` (``privcal source init``).

        The ledger (a SQLite file) gets the odometer's tables and a ``source`` row with the
        absolute data path, its SHA-256, ``n_classes`` and the input kind. The data stay where
        they are, with the source. Returns the opened source (``SecureNoise``).
        """
        from privcal.data.io import read_scores

        data_path = Path(data).resolve()
        scores = read_scores(data_path, input=input)  # type: ignore[arg-type]
        if scores.logits is None:
            raise ValueError(
                f"{str(data_path)!r} holds top-label scores only; a DataSource needs full "
                "logit or probability vectors."
            )
        ledger = Path(ledger)
        src = cls(scores.logits, scores.labels, budget=budget, ledger=ledger, name=name)
        con = sqlite3.connect(ledger, timeout=60.0)
        try:
            with con:
                con.execute(_SOURCE_SCHEMA)
                row = con.execute("SELECT data, sha256 FROM source WHERE id = 1").fetchone()
                digest = _sha256(data_path)
                if row is None:
                    con.execute(
                        "INSERT INTO source (id, data, sha256, n_classes, input, created) "
                        "VALUES (1, ?, ?, ?, ?, ?)",
                        (str(data_path), digest, src.n_classes, input, time.time()),
                    )
                elif row[0] != str(data_path) or row[1] != digest:
                    raise ValueError(
                        f"The ledger {str(ledger)!r} already belongs to the data {row[0]!r} "
                        f"(sha256 {row[1][:12]}...); a ledger keeps the budget of one data set."
                    )
        finally:
            con.close()
        return src

    @classmethod
    def open(
        cls, ledger: str | Path, noise: NoiseSource | None = None, name: str | None = None
    ) -> DataSource:
        """Reopen a source created by :meth:`init_ledger` (``privcal source init``).

        Reads the budget and the data path from the ledger, checks the data's SHA-256 (a ledger's
        record is only meaningful for the data it was spent on) and continues the record.
        """
        from privcal.data.io import read_scores

        path = Path(ledger)
        if not path.is_file():
            raise ValueError(f"No source ledger at {str(path)!r}; create one with 'source init'.")
        con = sqlite3.connect(path, timeout=60.0)
        try:
            try:
                src_row = con.execute(
                    "SELECT data, sha256, input FROM source WHERE id = 1"
                ).fetchone()
                bud_row = con.execute("SELECT epsilon, name FROM budget WHERE id = 1").fetchone()
            except sqlite3.DatabaseError:
                src_row = bud_row = None
        finally:
            con.close()
        if src_row is None or bud_row is None:
            raise ValueError(
                f"{str(path)!r} is not a privcal source ledger (no 'source' and 'budget' rows); "
                "create one with 'privcal source init'."
            )
        data, digest, kind = src_row
        data_path = Path(data)
        if not data_path.is_file():
            raise ValueError(f"The data {data!r} of the source ledger {str(path)!r} is missing.")
        if _sha256(data_path) != digest:
            raise ValueError(
                f"The data {data!r} changed since the source ledger {str(path)!r} was created; "
                "its privacy record no longer describes it."
            )
        scores = read_scores(data_path, input=kind)
        return cls(
            scores.logits,
            scores.labels,
            budget=float(bud_row[0]),
            ledger=path,
            noise=noise,
            name=str(bud_row[1]) if name is None else name,
        )

    from_ledger = open

    @classmethod
    def answer_together(
        cls, sources: Sequence[DataSource], method: str, **kwargs: Any
    ) -> list[Any]:
        """Every source's answer to one query of the vocabulary, in order.

        In process the sources answer one after the other; a transport where the round trip
        costs (:class:`~privcal.federated.flower.sources.RemoteSource`) sends one query to all
        of its sources at once. Each source charges its own ledger exactly as a single call
        does.
        """
        return [getattr(src, method)(**kwargs) for src in sources]

    @classmethod
    def share_together(
        cls,
        sources: Sequence[DataSource],
        method: str,
        epsilon: float,
        threshold: int,
        **kwargs: Any,
    ) -> tuple[AggregatorView, DistributedPlan, Callable[[Any], Any]]:
        """Every source's share of one query summed by an in-process :class:`SecureSum`
        (a simulation of the protocol: this process holds every source's rows).

        Returns the aggregator's view (the modular sum and who dropped), the public plan that
        decodes it and the query's post-processing. Transports override it
        (:class:`~privcal.federated.flower.sources.SecAggSource`: one SecAgg+ round).
        """
        ring = SecureSum()
        k = len(sources)
        shares = [
            src.share(method, epsilon, n_parties=k, threshold=threshold, ring=ring, **kwargs)
            for src in sources
        ]
        plan = shares[0].plan
        if any(sh.plan != plan for sh in shares[1:]):
            raise ValueError(
                f"The sources answered {method} with different public plans (scale, share law "
                "or shape); a secure sum needs one plan for all of them."
            )
        view = ring.aggregate([sh.upload for sh in shares], threshold, plan.shape)
        return view, plan, shares[0].finish


def share_plan(
    stat: _Statistic, epsilon: float, n_parties: int, threshold: int, bits: int, max_rows: int
) -> DistributedPlan:
    """The public plan of one query's secure sum: the discrete Laplace shares of
    :meth:`DataSource.share` for ``stat``'s sensitivity, the coordinates one example moves, and
    ``max_rows`` times its row bound as each party's value bound. Reads only ``stat``'s public
    fields (never its value beyond its shape), so the aggregator builds the same plan from
    :func:`public_statistic`."""
    return DistributedPlan.laplace(
        stat.sensitivity,
        epsilon,
        stat.moved,
        n_parties=n_parties,
        threshold=threshold,
        value_bound=max_rows * stat.row_bound,
        shape=np.shape(stat.value),
        bits=bits,
    )


def public_statistic(query: str, n_classes: int, **params: Any) -> _Statistic:
    """``query``'s statistic on a public one-row placeholder of ``n_classes`` classes.

    A statistic's label, sensitivity, moved coordinates, row bound, shape and post-processing
    depend on the query's parameters and the class count only, never on the rows (they are the
    add/remove bounds of the query's docstring); only its value does, and the value here is the
    placeholder's. An aggregator that holds no data builds the public plan of a secure sum from
    it (:func:`share_plan`), the same plan the sources build from their own rows.
    """
    if query not in QUERIES:
        raise ValueError(
            f"Unknown DataSource query {query!r}; the vocabulary is {', '.join(QUERIES)}."
        )
    placeholder = DataSource(np.zeros((1, int(n_classes))), np.zeros(1, dtype=np.int64))
    stat: _Statistic = getattr(placeholder, f"_{query}")(**params)
    return stat


def share_all(
    sources: Sequence[DataSource], method: str, epsilon: float, threshold: int, **kwargs: Any
) -> tuple[AggregatorView, DistributedPlan, Callable[[Any], Any]]:
    """One query answered by every source through a secure sum: the aggregator's view, the
    public plan and the query's post-processing. Sources of one kind answer together
    (:meth:`DataSource.share_together`: an in-process :class:`SecureSum`, or one SecAgg+ round
    over Flower); each source charges its own ledger before it uploads."""
    kinds = {type(src) for src in sources}
    kind = kinds.pop() if len(kinds) == 1 else DataSource
    return kind.share_together(list(sources), method, epsilon, threshold, **kwargs)


def answer_all(sources: Sequence[DataSource], method: str, **kwargs: Any) -> list[Any]:
    """Every source's answer to one query: sources of one kind answer together
    (:meth:`DataSource.answer_together`, e.g. one message round over Flower), mixed kinds one
    after the other. The answers and the ledgers' records are those of single calls."""
    kinds = {type(src) for src in sources}
    if len(kinds) == 1:
        return kinds.pop().answer_together(list(sources), method, **kwargs)
    return [getattr(src, method)(**kwargs) for src in sources]


def check_sources(sources: Any, owner: str) -> list[DataSource]:
    """Validate a non-empty list of distinct DataSources with one class count."""
    try:
        srcs = list(sources)
    except TypeError:
        srcs = None
    if not srcs:
        raise ValueError(
            f"The 'sources' parameter of {owner} must be a non-empty list of DataSource. "
            f"Got {sources!r} instead."
        )
    for s in srcs:
        if not isinstance(s, DataSource):
            raise ValueError(
                f"The 'sources' parameter of {owner} must be a non-empty list of DataSource. "
                f"Got an element {s!r} instead."
            )
    if len({id(s) for s in srcs}) != len(srcs):
        raise ValueError(
            f"The 'sources' parameter of {owner} lists the same DataSource twice; sources must "
            "hold disjoint data (their guarantees compose in parallel)."
        )
    check_disjoint(srcs, owner)
    classes = sorted({s.n_classes for s in srcs})
    if len(classes) > 1:
        raise ValueError(
            f"The sources given to {owner} disagree on the number of classes: {classes}. All "
            "sources must score the same classifier."
        )
    return srcs


def _same_data_error(owner: str, a: DataSource, b: DataSource, what: str) -> ValueError:
    return ValueError(
        f"The 'sources' parameter of {owner}: sources {a.name!r} and {b.name!r} {what}; their "
        "guarantees would compose in parallel only if they held disjoint data. List the data "
        "once: merge the two into one DataSource, or remove the shared rows from one of them."
    )


def check_disjoint(sources: list[DataSource], owner: str) -> None:
    """Refuse sources that share a ledger file, hold the same data or share any row.

    Parallel composition (``max`` over sources) is valid only when each example lies in at most
    one source; two sources over the same rows would each pay ``epsilon`` while those rows lose
    the sum. Row identity is the 64-bit :func:`row_digests` (equal logits and label).
    """
    ledgers: dict[Path, DataSource] = {}
    prints: dict[str, DataSource] = {}
    for s in sources:
        if s.odometer.ledger is not None:
            key = s.odometer.ledger.resolve()
            if key in ledgers:
                raise _same_data_error(owner, ledgers[key], s, f"share the ledger {str(key)!r}")
            ledgers[key] = s
        if s.fingerprint in prints:
            raise _same_data_error(owner, prints[s.fingerprint], s, "hold the same data")
        prints[s.fingerprint] = s
    digests = np.concatenate([s._digests for s in sources])
    owners = np.repeat(np.arange(len(sources)), [s._digests.size for s in sources])
    order = np.argsort(digests, kind="stable")
    d, o = digests[order], owners[order]
    clash = np.flatnonzero((d[1:] == d[:-1]) & (o[1:] != o[:-1]))
    if clash.size:
        i, j = int(o[clash[0]]), int(o[clash[0] + 1])
        shared = np.intersect1d(sources[i]._digests, sources[j]._digests).size
        raise _same_data_error(
            owner, sources[i], sources[j], f"share {shared} identical rows (logits and label)"
        )


def sources_report(
    releases: list[Release],
    sources: list[DataSource],
    public: tuple[str, ...] = (),
    threat: tuple[str, ...] = (),
) -> PrivacyReport:
    """The report of a fit over ``sources``: add/remove one example of one source.

    Public: :data:`SOURCE_PUBLIC`, the number of sources, and the fit's own ``public`` items
    (plus :data:`MAX_ROWS` when the answers went through a secure sum). The noise is
    ``"seeded"`` (not private) as soon as one source drew seeded noise. ``threat`` is the
    threat model (:func:`privacy.distributed.threat_model`).
    """
    seeded = any(not s.noise.secure for s in sources)
    shared = any("distributed" in r.mechanism for r in releases)
    bound = max(s.max_rows for s in sources)
    rows = (f"each source holds at most {bound} rows (sizes the secure sum)",)
    return PrivacyReport(
        releases,
        unit="example",
        relation="add/remove",
        public=(
            *SOURCE_PUBLIC,
            f"the number of sources ({len(sources)})",
            *public,
            *(rows if shared else ()),
        ),
        noise="seeded" if seeded else "secure",
        threat=threat,
    )


def check_share_rows(sources: list[DataSource], owner: str) -> None:
    """Refuse, before any budget is spent, a source that cannot upload shares to an in-process
    secure sum (one answered over a transport, such as Flower's ``RemoteSource``, adds its own
    noise: mixing it into a distributed fit would release its answer with a share's noise
    only), or one too large for the secure sum's bound."""
    for s in sources:
        if not s.uploads_shares:
            raise ValueError(
                f"The 'sources' parameter of {owner}: source {s.name!r} ({type(s).__name__}) "
                "answers with its own noise and cannot upload shares to a secure sum; fit "
                "with aggregation='local', or give only in-process DataSources."
            )
        rows = getattr(s, "_z", None)  # a source held by a node checks its rows itself
        if rows is not None and rows.shape[0] > MAX_ROWS:
            raise ValueError(
                f"The 'sources' parameter of {owner}: source {s.name!r} holds more than "
                f"MAX_ROWS={MAX_ROWS} rows, the public bound a secure sum is sized for; split it "
                "into several sources."
            )


def check_budgets(sources: list[DataSource], epsilon: float) -> None:
    """Refuse to start when a source cannot pay ``epsilon`` (nothing is spent anywhere)."""
    for s, ok in zip(sources, answer_all(sources, "can_spend", epsilon=epsilon), strict=True):
        if not ok:
            spent = s.spent
            raise BudgetExceededError(s.name, "fit", s.budget, spent, epsilon)


def split_budget(epsilon: float, parts: int) -> list[float]:
    """``parts`` per-query budgets that sum (by :func:`math.fsum`) to ``epsilon`` exactly.

    The first ``parts - 1`` are ``epsilon / parts``; the last is ``epsilon - fsum(first)``, which
    is exact (Sterbenz) and differs from ``epsilon / parts`` by at most an ulp, so the composed
    guarantee is exactly ``epsilon`` rather than ``epsilon`` plus rounding.
    """
    if parts == 1:
        return [epsilon]
    share = epsilon / parts
    head = [share] * (parts - 1)
    last = epsilon - math.fsum(head)  # exact by Sterbenz's lemma
    # fsum rounds the exact sum of head once; nudge the last share by ulps until the composed
    # total is epsilon itself (a few steps at most: ulp(last) < ulp(epsilon)).
    for _ in range(64):
        total = math.fsum([*head, last])
        if total == epsilon:
            break
        last = math.nextafter(last, -math.inf if total > epsilon else math.inf)
    else:  # pragma: no cover - cannot happen for finite positive epsilon
        raise RuntimeError(f"cannot split epsilon={epsilon!r} into {parts} exact parts")
    return [*head, last]

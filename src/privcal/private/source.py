"""A private data source: one party's validation data behind a closed vocabulary of DP queries.

A :class:`DataSource` holds one party's logits and labels and a
:class:`~privcal.privacy.PrivacyOdometer`. A calibrator (seed 000, Sec. 3.2) never sees the rows:
it sends queries of the vocabulary (:mod:`privcal.private.vocabulary`: each query's shared
statistic, its measurement, and its L1 sensitivity derived in the query method's docstring).

Neighbouring relation: add or remove one example. ``n`` is then private, so the source publishes
only ``n_classes`` and its name; the calibrators compare sums and need no ``n``
(:mod:`privcal.private.temperature`), and :meth:`DataSource.count` sells a noisy one.

Every answer follows one path: the query's private method (``_accuracy_gap_sum`` ...) validates
the arguments and computes the exact statistic, then :meth:`DataSource._release` **spends on the
odometer** (durable with a ledger) and only then draws the Laplace noise. A query that would
exceed the budget raises :class:`~privcal.privacy.BudgetExceededError` and spends nothing.
:meth:`DataSource.share` answers the same statistic as an upload to a secure sum with a
distributed noise share (``aggregation="distributed"``; :mod:`privcal.privacy.distributed`).

Disjointness is checked, not assumed: parallel composition across sources needs each example in
one source only, so every source keeps a digest of each row and a fingerprint of its data
(:mod:`privcal.private.rows`, refused together by :func:`~privcal.private.parallel.check_sources`),
and a ledger binds the fingerprint it was first opened with (one ledger, one data set).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from privcal._params import EPSILON, warn_renamed
from privcal.data.validation import check_labels, check_scores
from privcal.privacy import (
    NoiseSource,
    PrivacyOdometer,
    PrivacyReport,
    Release,
    noise_kind,
    resolve_noise,
    store,
)
from privcal.privacy.distributed import AggregatorView, DistributedPlan, SecureSum
from privcal.private.queries import (
    MAX_ROWS,
    RowPart,
    Share,
    Statistic,
    distributed_laplace,
    query_measurement,
    share_plan,
)
from privcal.private.rows import data_fingerprint, row_digests
from privcal.private.vocabulary import Vocabulary

__all__ = ["DataSource"]

#: What a source's answers treat as public (n, the number of rows, is private).
SOURCE_PUBLIC: tuple[str, ...] = (
    "n_classes (number of classes)",
    "the source's name",
    "query parameters (temperatures, bins, clip bounds)",
)


class DataSource(Vocabulary):
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
        (``SeededNoise``) raises an :class:`~privcal.privacy.InsecureNoiseWarning`: use it only to
        simulate.
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
        Order-free SHA-256 of the rows (:func:`~privcal.private.data_fingerprint`); kept in the
        ledger, never released. Sources with equal fingerprints or shared rows are refused together.

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
        z = check_scores(logits, input=input)  # type: ignore[arg-type]
        y = check_labels(labels, z.shape[0], z.shape[1])
        if not isinstance(name, str):
            raise ValueError(
                f"The 'name' parameter of DataSource must be a str. Got {name!r} instead."
            )
        self.noise = resolve_noise(noise, f"DataSource {name!r}")
        self._z = z
        self._y = y
        self._z.setflags(write=False)
        self._y.setflags(write=False)
        self.n_classes = int(z.shape[1])
        self.name = name
        self._digests = row_digests(z, y)
        self.fingerprint = data_fingerprint(self._digests, self.n_classes)
        self.odometer = PrivacyOdometer(budget, ledger=ledger, delta_budget=delta_budget, name=name)
        if self.odometer.ledger is not None:
            _bind_data(self.odometer.ledger, self.fingerprint, self.n_classes)
        self.history: list[Release] = []
        self._split_spent: dict[tuple[int, float], dict[int, float]] = {}
        self._charge_lock = threading.Lock()

    def privacy_report(self) -> PrivacyReport:
        """Every answer this object released (add/remove one example; public:
        :data:`SOURCE_PUBLIC`; ``noise``: secure or seeded).

        The two sides of one row split keep their labels (disjoint rows: parallel composition)
        only while they are all the source released; sides of several splits, or a side and
        the whole data, share rows, so then every answer is labelled with the source's name
        (basic composition: an upper bound on what the ledger charged)."""
        noise = noise_kind(self.noise)
        releases = self.history
        splits = sum(1 for sides in self._split_spent.values() if sides)
        if splits > 1 or (splits and any(r.source == self.name for r in releases)):
            releases = [r.for_source(self.name) for r in releases]
        return PrivacyReport(releases, "example", "add/remove", public=SOURCE_PUBLIC, noise=noise)

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
    def _charge(self, release: Release, part: RowPart | None = None) -> None:
        """Spend ``release`` on the odometer (durable with a ledger), then keep it.

        A release on one side of a row split (``part``) is charged only what it adds to the
        largest side's total of that split (parallel composition: the sides' rows are disjoint).
        A side's total grows only once the ledger has taken the charge: a refused release adds
        nothing, so it cannot pay for the other side's later ones.
        """
        spent, total = release.epsilon, 0.0
        sides: dict[int, float] = {}
        with self._charge_lock:
            if part is not None:
                # a split is its key and its fraction: the two sides of one (key, fraction) are
                # disjoint, sides of different fractions overlap and compose by basic composition
                sides = self._split_spent.setdefault((part.key, part.fraction), {})
                before = max(sides.values(), default=0.0)
                total = sides.get(part.side, 0.0) + release.epsilon
                spent = max(before, total) - before
            if spent > 0:
                self.odometer.spend_release(
                    replace(release, epsilon=spent), noise=noise_kind(self.noise)
                )
            if part is not None:
                sides[part.side] = total
            self.history.append(release)

    def _answer(self, query: str, epsilon: Any, *args: Any) -> Any:
        """``epsilon`` checked, then the exact statistic of ``_<query>(*args)`` released."""
        eps = EPSILON.check(epsilon, "epsilon", f"DataSource.{query}")
        return self._release(getattr(self, f"_{query}")(*args), eps)

    def _release(self, stat: Statistic, epsilon: float) -> Any:
        """The query's measurement: charged (recorded before anything leaves), then
        ``value + Lap``."""
        noisy, _ = stat.measurement.release(
            stat.value,
            epsilon,
            self.noise,
            query=stat.label,
            source=self.name if stat.part is None else stat.part.label(self.name),
            charge=lambda release: self._charge(release, stat.part),
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
            A name of the vocabulary (:data:`~privcal.private.QUERIES`).
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
        parameters: ``K``, ``t``, the scale and :data:`~privcal.private.queries.MAX_ROWS` (a source
        holds at most that many rows; it bounds the sum for the modulus).
        """
        query_measurement(query)  # a name of the vocabulary
        eps = EPSILON.check(epsilon, "epsilon", f"DataSource.{query}")
        if self._z.shape[0] > max_rows:
            raise ValueError(
                f"DataSource {self.name!r} holds more than {max_rows} rows, the public bound its "
                "secure sums are sized for; split it into several sources."
            )
        stat = getattr(self, f"_{query}")(**params)
        ring = SecureSum() if ring is None else ring
        plan = share_plan(stat, eps, n_parties, threshold, ring.bits, max_rows)
        label = self.name if stat.part is None else stat.part.label(self.name)
        self._charge(stat.record(eps, label, distributed_laplace(threshold, n_parties)), stat.part)
        return Share(plan.share(stat.value, self.noise, ring), plan, stat.finish, stat.label)

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
        allow_seeded_noise: bool = False,
    ) -> DataSource:
        """Create the ledger of a source over the scores file ``data`` (``privcal source init``).

        The ledger (a SQLite file) gets the odometer's tables and a ``source`` row with the
        absolute data path, its SHA-256, ``n_classes``, the input kind and whether :meth:`open`
        takes seeded noise (``allow_seeded_noise``, the owner's choice, fixed at creation). The
        data stay where they are, with the source. Returns the opened source (``SecureNoise``).
        """
        from privcal.private.ledgers import init_source_ledger

        return init_source_ledger(cls, data, ledger, budget, name, input, allow_seeded_noise)

    @classmethod
    def open(
        cls, ledger: str | Path, noise: NoiseSource | None = None, name: str | None = None
    ) -> DataSource:
        """Reopen a source created by :meth:`init_ledger` (``privcal source init``).

        Reads the budget and the data path from the ledger, checks the data's SHA-256 (a ledger's
        record is only meaningful for the data it was spent on) and continues the record. Seeded
        ``noise`` is refused unless the ledger was created with ``allow_seeded_noise``.
        """
        from privcal.private.ledgers import open_source_ledger

        return open_source_ledger(cls, ledger, noise, name)

    @classmethod
    def from_ledger(cls, *args: Any, **kwargs: Any) -> DataSource:
        """The old name of :meth:`open`, for one release (a ``DeprecationWarning``)."""
        warn_renamed("method", "from_ledger", "open", "DataSource", 2)
        return cls.open(*args, **kwargs)

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


def _bind_data(ledger: Path, fingerprint: str, n_classes: int) -> None:
    """Record ``fingerprint`` in the ledger, or refuse when the ledger holds another data set."""
    values = {"fingerprint": fingerprint, "n_classes": int(n_classes), "created": time.time()}
    row = store.claim_row(ledger, "data", values, ("fingerprint",))
    if row is not None and row[0] != fingerprint:
        raise ValueError(
            f"The 'ledger' {str(ledger)!r} keeps the budget of another data set "
            f"(fingerprint {row[0][:12]}..., these rows give {fingerprint[:12]}...). "
            "A ledger belongs to one data set: give this data a ledger of its own."
        )

"""Seed 000's calibrator / data-source protocol over Flower: remote DataSources.

Each SuperNode that holds private logits and a privacy ledger answers DP queries from
:class:`privcal.private.DataSource`'s closed vocabulary (``accuracy_gap_sum``,
``clipped_nll_sum``, ``bin_gaps``, ``count``) with :class:`~privcal.privacy.SecureNoise`, after
its odometer has recorded the spend. On the server, :class:`RemoteSource` is a DataSource whose
queries travel as Flower ``query`` messages, so the unchanged private estimators (e.g.
``PrivateTemperatureScaling(objective="acc")``, DP Acc-T) run over the federation:
``est.fit(sources=[RemoteSource(grid, node_id, ...), ...])``.

Privacy is the DataSource's: add/remove one example of one source, pure epsilon-DP per query,
basic composition in each source's own SQLite ledger (which refuses queries beyond its budget),
parallel composition across sources. Only the noisy answers and their release records leave a
node. Each node also bounds what one run may cost it by its own policy
(:func:`source_refusal`), checked before it reads its data.

One message round per query: the estimators ask every source through
:func:`privcal.private.parallel.answer_all`, and :meth:`RemoteSource.answer_together` pushes the
query to all the sources' nodes at once and collects the replies (the nodes answer in
parallel), instead of one round trip per source.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import ConfigRecord, Message, MessageType, RecordDict

from privcal.federated.flower.messaging import send_and_receive
from privcal.federated.flower.task import mixed_unit_refusal, write_status
from privcal.federated.policy import ClientPolicy
from privcal.privacy import BudgetExceededError, PrivacyOdometer, Release, SecureNoise
from privcal.private import DataSource
from privcal.private.queries import check_part, distributed_laplace

__all__ = [
    "QUERIES",
    "RemoteSource",
    "SecAggSource",
    "answer_source_query",
    "budget_answer",
    "ledger_budget",
    "node_source",
    "run_label",
    "source_refusal",
]

#: The fields of a release a node's reply carries (its source's name is the server's label).
_RELEASE_FIELDS = ("query", "mechanism", "sensitivity", "epsilon", "delta")

#: Queries a node answers (DataSource methods, plus budget status).
QUERIES = (
    "accuracy_gap_sum",
    "accuracy_gap_curve",
    "clipped_nll_sum",
    "clipped_nll_increments",
    "bin_gaps",
    "count",
    "score_histogram",
    "can_spend",
    "status",
)


def source_refusal(node: dict[str, Any], cfg: dict[str, Any], run_id: int = 0) -> str | None:
    """Why this node refuses a data-source query of run ``run_id``, or ``None``; reads the
    node's ledger and policy, never its data (the caller reads the data only when this is
    ``None``).

    The node's :class:`~privcal.federated.policy.ClientPolicy` bounds what one run may cost it:
    the epsilon this run's queries have spent (the ledger's releases recorded under this run,
    :func:`run_label`) plus what the query adds to it (:func:`_cost`: on one side of a row
    split, only what the ledger charges) may not pass ``max_epsilon``. The noise is always
    the node's own :class:`~privcal.privacy.SecureNoise`, whatever the server asks.
    """
    if not node.get("ledger"):
        return "this node has no --ledger: it does not act as a data source"
    method = str(cfg["query"])
    if method not in QUERIES:
        return f"unknown query {method!r}; allowed: {', '.join(QUERIES)}"
    if method in ("status", "can_spend"):
        return None
    kwargs = json.loads(str(cfg.get("kwargs", "{}")))
    requested = _cost(node, run_id, float(kwargs.get("epsilon", 0.0)), kwargs.get("part"))
    policy = ClientPolicy.from_node(node)
    eps, delta = ledger_budget(node)
    odo = PrivacyOdometer(eps, ledger=str(node["ledger"]), delta_budget=delta)
    mixed = mixed_unit_refusal(odo, federated=False)
    if mixed is not None:
        return mixed
    label = run_label(node, run_id)
    spent = math.fsum(r.epsilon for r in odo.releases if r.source == label)
    if not spent + requested <= policy.max_epsilon * (1.0 + 1e-12):  # NaN too
        return (
            f"this query asks for epsilon {requested:g} after {spent:g} in this run, above this "
            f"source's policy of at most {policy.max_epsilon:g} per run"
        )
    return None


def _cost(node: dict[str, Any], run_id: int, epsilon: float, part: Any) -> float:
    """What a query of ``epsilon`` adds to this run's charge: all of it, except on one side of
    a row split this run's source has answered on, where the ledger is charged only what the
    side adds to the larger side's total (parallel composition, :meth:`DataSource._charge`)."""
    src = _NODE_SOURCES.get((str(node["ledger"]), int(run_id)))
    if part is None or src is None or not (math.isfinite(epsilon) and epsilon > 0):
        return epsilon
    try:
        side = check_part(part, "DataSource.score_histogram")
    except ValueError:  # the query itself refuses it, before any charge
        return epsilon
    totals = src._split_spent.get((side.key, side.fraction), {})
    before = max(totals.values(), default=0.0)
    return max(before, totals.get(side.side, 0.0) + epsilon) - before


def secagg_source_refusal(cfg: dict[str, Any], t: int, own_rows: int) -> str | None:
    """Why a source refuses a query round over SecAgg+ on public grounds, or ``None``: the run
    must be distributed (a source answers only with a noise share), the round's share threshold
    the run's ``t`` (the share is sized for ``t``: a larger one would shrink it), and the run's
    ``source-max-rows`` at least ``own_rows``, the source's own public bound (node config
    ``max-rows``, default the run default's 4096). The source then refuses on its row count
    only against its own bound (:func:`too_many_rows`), which no server can move, so a server
    cannot search for a source's row count by varying ``source-max-rows``."""
    if cfg.get("aggregation") != "distributed":
        return "over SecAgg+ a source answers only in a distributed run (with a noise share)"
    if int(cfg.get("share-threshold", t)) != t:
        return (
            f"the query's share threshold {cfg['share-threshold']} is not the run's t={t}: its "
            "noise share would be sized for another number of honest sources"
        )
    if int(cfg["source-max-rows"]) < own_rows:
        return (
            f"the run sizes its sums for {cfg['source-max-rows']} rows a source, below this "
            f"source's public bound of {own_rows} rows (node config max-rows)"
        )
    return None


def too_many_rows(n: int, own_rows: int) -> str | None:
    """A source holding more rows than its own public bound refuses every query (the one bit,
    ``n > own_rows``, that its refusal shows; the bound is the source's, not the server's)."""
    if n > own_rows:
        return (
            f"this source holds more rows than its public bound of {own_rows} (node config "
            "max-rows); split it into several sources"
        )
    return None


def ledger_budget(node: dict[str, Any]) -> tuple[float, float]:
    """The node's ``(epsilon, delta)`` budget: the one its ledger stores when the file exists
    (a federated client's ledger holds a delta budget; a data source spends none of it), else
    the node's ``budget`` and ``delta-budget``."""
    from privcal.privacy.odometer import read_ledger

    path = Path(str(node["ledger"]))
    if path.is_file():
        record = read_ledger(path)
        return record.budget, record.delta_budget
    return float(node.get("budget", 1.0)), float(node.get("delta-budget", 0.0))


#: The node's source of each (ledger, run): kept across the run's messages, so answers on the
#: two sides of one row split are charged in parallel (a restarted node charges both: safe).
_NODE_SOURCES: dict[tuple[str, int], DataSource] = {}


def node_source(z: np.ndarray, y: np.ndarray, node: dict[str, Any], run_id: int) -> DataSource:
    """The node's ledger-backed :class:`DataSource` for run ``run_id`` (secure noise, its
    releases recorded under :func:`run_label`), one per run and ledger in this process."""
    key = (str(node["ledger"]), int(run_id))
    if key not in _NODE_SOURCES:
        eps, delta = ledger_budget(node)
        name = run_label(node, run_id)
        _NODE_SOURCES[key] = DataSource(z, y, eps, key[0], SecureNoise(), name, delta_budget=delta)
    return _NODE_SOURCES[key]


def budget_answer(node: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """A source's answer to ``status`` (budget, spent, remaining) or ``can_spend``, read from
    its ledger alone (the rows are not needed, and a budget question releases nothing about
    them: it depends on the ledger only)."""
    if not node.get("ledger"):
        return {"refused": "this node has no --ledger: it does not act as a data source"}
    eps, delta = ledger_budget(node)
    odo = PrivacyOdometer(eps, ledger=str(node["ledger"]), delta_budget=delta)
    if str(cfg["query"]) == "status":
        return {"value": json.dumps([odo.budget, odo.spent, odo.remaining])}
    kwargs = json.loads(str(cfg.get("kwargs", "{}")))
    return {"value": json.dumps(bool(odo.can_spend(float(kwargs["epsilon"]))))}


def run_label(node: dict[str, Any], run_id: int) -> str:
    """The name a source's releases of run ``run_id`` carry in its ledger."""
    return f"{node.get('name', '') or 'source'} (run {int(run_id)})"


def answer_source_query(
    z: np.ndarray, y: np.ndarray, node: dict[str, Any], cfg: dict[str, Any], run_id: int = 0
) -> dict[str, Any]:
    """Node side: answer one query through a ledger-backed :class:`DataSource` (after
    :func:`source_refusal`, which the caller checks before it reads ``z`` and ``y``)."""
    refusal = source_refusal(node, cfg, run_id)
    if refusal is not None:
        return {"refused": refusal}
    method = str(cfg["query"])
    src = node_source(z, y, node, run_id)
    kwargs = json.loads(str(cfg.get("kwargs", "{}")))
    if method == "status":
        return {"value": json.dumps([src.budget, src.spent, src.remaining])}
    if method == "can_spend":
        return {"value": json.dumps(bool(src.odometer.can_spend(float(kwargs["epsilon"]))))}
    before = len(src.history)
    try:
        value = getattr(src, method)(**kwargs)
    except BudgetExceededError as err:
        return {"refused": str(err)}
    releases = [[getattr(r, f) for f in _RELEASE_FIELDS] for r in src.history[before:]]
    for rel in src.history[before:]:
        write_status(
            node,
            f"query {rel.query}: answered (released at epsilon {rel.epsilon:.3g}; the ledger "
            f"has {src.spent:.3g} of {src.budget:g} spent)",
        )
    return {
        "value": json.dumps(np.asarray(value, dtype=np.float64).tolist()),
        "releases": json.dumps(releases),
    }


def plain_json(value: Any) -> Any:
    """JSON for query parameters: NumPy arrays and scalars as lists and numbers."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"query parameter {value!r} is not JSON")


def _typed(value: Any) -> Any:
    """A node's answer as the in-process DataSource method returns it: curves and bin
    vectors as float arrays, sums and counts as floats, budget checks as booleans."""
    if isinstance(value, bool):
        return value
    if isinstance(value, list):
        return np.asarray(value, dtype=np.float64)
    return float(value)


class _RemoteOdometer:
    #: The ledger is a file on the node, out of the server's reach (each node's own ledger binds
    #: its data; see RemoteSource).
    ledger = None

    def __init__(self, source: RemoteSource) -> None:
        self.source = source

    def can_spend(self, epsilon: float, delta: float = 0.0) -> bool:
        return bool(self.source._call("can_spend", epsilon=float(epsilon)))

    @property
    def budget(self) -> float:
        return float(self.source._call("status")[0])

    @property
    def spent(self) -> float:
        return float(self.source._call("status")[1])

    @property
    def remaining(self) -> float:
        return float(self.source._call("status")[2])


class RemoteSource(DataSource):
    """A :class:`DataSource` held by a Flower SuperNode; every query is one message round trip.

    Parameters
    ----------
    grid : flwr.serverapp.Grid
    node_id : int
    n_classes : int
        Public number of classes.
    name : str
    timeout : float
        Seconds to wait for each answer.
    """

    #: A node answers with its own noise (``aggregation="local"``); the distributed form of the
    #: protocol over SecAgg+ is not built yet, and a distributed fit refuses remote sources.
    uploads_shares = False

    def __init__(
        self, grid: Any, node_id: int, n_classes: int, name: str = "", timeout: float = 60.0
    ) -> None:  # no super().__init__: the data is remote
        self._grid = grid
        self.node_id = int(node_id)
        self.n_classes = int(n_classes)
        self.name = name or f"node{node_id}"
        self.timeout = float(timeout)
        self.noise = SecureNoise()  # what the node uses
        self.odometer = _RemoteOdometer(self)  # type: ignore[assignment]
        self.history: list[Release] = []
        # the node's row digests and data fingerprint never leave it (a hash of the data is not
        # private), so the server cannot check that two nodes hold disjoint rows: each node is
        # one party whose rows are its own (declared), and its own ledger refuses other data
        self._digests = np.empty(0, dtype=np.uint64)
        self.fingerprint = f"remote node {self.node_id}"

    def __repr__(self) -> str:
        return f"RemoteSource(node_id={self.node_id}, name={self.name!r})"

    def _message(self, query: str, kwargs: dict[str, Any]) -> Message:
        plain = json.dumps(kwargs, default=plain_json)
        cfg = ConfigRecord({"task": "source", "query": query, "kwargs": plain, "round": 0})
        content = RecordDict({"config": cfg})
        return Message(content, dst_node_id=self.node_id, message_type=MessageType.QUERY)

    def _answer(self, query: str, reply: Message | None) -> Any:
        """The value of a node's reply (its releases go into :attr:`history`)."""
        if reply is None:
            raise RuntimeError(f"{self!r} did not answer {query!r} within {self.timeout:g} s.")
        if reply.has_error():
            raise RuntimeError(f"{self!r} failed on {query!r}: {reply.error.reason}")
        info = dict(reply.content["info"])
        if "refused" in info:
            raise RuntimeError(f"{self!r} refused {query!r}: {info['refused']!s}")
        for row in json.loads(str(info.get("releases", "[]"))):
            # the node's own records read back (its source's measurements made them)
            record = dict(zip(_RELEASE_FIELDS, row, strict=True))
            self.history.append(Release.from_dict({**record, "source": self.name}))
        return json.loads(str(info["value"]))

    def _call(self, query: str, **kwargs: Any) -> Any:
        replies = send_and_receive(self._grid, [self._message(query, kwargs)], self.timeout)
        return self._answer(query, replies[0] if replies else None)

    @classmethod
    def answer_together(
        cls, sources: Sequence[DataSource], method: str, **kwargs: Any
    ) -> list[Any]:
        """One message round: the query goes to every source's node at once, and each node
        answers from its own ledger-backed DataSource (see the module docstring).

        Sources on different grids (or not remote) answer one after the other. A node that
        errs, refuses or times out raises, naming it, once every reply of the round is in.
        """
        remote = [s for s in sources if isinstance(s, RemoteSource)]
        grids = {id(s._grid) for s in remote}
        if len(remote) != len(sources) or len(grids) != 1 or method not in QUERIES:
            return super().answer_together(sources, method, **kwargs)
        msgs = [s._message(method, kwargs) for s in remote]
        timeout = max(s.timeout for s in remote)
        replies = send_and_receive(remote[0]._grid, msgs, timeout)
        by_node = {int(r.metadata.src_node_id): r for r in replies}
        return [_typed(s._answer(method, by_node.get(s.node_id))) for s in remote]

    def _at(self, query: str, temperature: float, epsilon: float, **kwargs: Any) -> Any:
        """The answer to a query at one ``temperature``."""
        return self._call(query, temperature=float(temperature), epsilon=float(epsilon), **kwargs)

    def accuracy_gap_sum(self, temperature: float, epsilon: float) -> float:
        return float(self._at("accuracy_gap_sum", temperature, epsilon))

    def accuracy_gap_curve(self, temperatures: Any, epsilon: float, anchor: int = 0) -> np.ndarray:
        return self._curve("accuracy_gap_curve", temperatures, epsilon, anchor=int(anchor))

    def clipped_nll_sum(self, temperature: float, epsilon: float, bound: float = 10.0) -> float:
        return float(self._at("clipped_nll_sum", temperature, epsilon, bound=float(bound)))

    def clipped_nll_increments(
        self, temperatures: Any, epsilon: float, bound: float = 10.0
    ) -> np.ndarray:
        return self._curve("clipped_nll_increments", temperatures, epsilon, bound=float(bound))

    def _curve(self, query: str, temperatures: Any, epsilon: float, **kwargs: Any) -> np.ndarray:
        """The float array a curve query over ``temperatures`` answers with."""
        temps = np.asarray(temperatures, dtype=np.float64).tolist()
        answer = self._call(query, temperatures=temps, epsilon=float(epsilon), **kwargs)
        return np.asarray(answer, dtype=np.float64)

    def bin_gaps(self, temperature: float, epsilon: float, n_bins: int = 15) -> np.ndarray:
        return np.asarray(self._at("bin_gaps", temperature, epsilon, n_bins=int(n_bins)))

    def score_histogram(
        self, edges: Any, epsilon: float, score: str = "lac", part: Any = None, by: Any = None
    ) -> np.ndarray:
        grids = [np.asarray(e, dtype=np.float64).tolist() for e in edges] if by else None
        return np.asarray(
            self._call(
                "score_histogram",
                by=by,
                edges=grids if by else np.asarray(edges, dtype=np.float64).tolist(),
                epsilon=float(epsilon),
                score=str(score),
                part=None if part is None else [int(part[0]), float(part[1]), int(part[2])],
            ),
            dtype=np.float64,
        )

    def can_spend(self, epsilon: float) -> bool:
        return bool(self._call("can_spend", epsilon=float(epsilon)))

    def count(self, epsilon: float) -> float:
        return float(self._call("count", epsilon=float(epsilon)))

    def bin_counts(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("RemoteSource does not forward bin_counts yet.")


class SecAggSource(RemoteSource):
    """A :class:`RemoteSource` that answers a distributed fit with shares through SecAgg+.

    Seed 000's protocol with distributed noise across processes: for each query, every source's
    node charges its own ledger (under its own policy), computes the query's exact statistic,
    encodes it in fixed point, adds a discrete Laplace share sized for ``t`` sources
    (:meth:`DataSource.share`, the code the in-process protocol runs) and uploads the residues
    through one SecAgg+ round; the calibrator sees only their modular sum
    (:meth:`share_together`). Budget checks (``can_spend``, ``status``) travel as plain
    messages. ``sums`` runs the SecAgg+ rounds
    (:class:`~privcal.federated.flower.secagg.SecAggSourceSums`).
    """

    uploads_shares = True
    transport = "secagg+"

    def __init__(self, grid: Any, node_id: int, n_classes: int, sums: Any, **kwargs: Any) -> None:
        super().__init__(grid, node_id, n_classes, **kwargs)
        self.sums = sums
        self.max_rows = int(sums.cfg["source-max-rows"])  # public: sizes SecAgg+'s 2^31 ring

    @classmethod
    def share_together(
        cls,
        sources: Sequence[DataSource],
        method: str,
        epsilon: float,
        threshold: int,
        **kwargs: Any,
    ) -> Any:
        """One SecAgg+ round: every source's share of ``method``; returns the aggregator's
        view, the public plan and the query's post-processing. Each source's release (charged
        by its node before it uploads) is recorded in its ``history``."""
        remote = [s for s in sources if isinstance(s, SecAggSource)]
        if len(remote) != len(sources) or len({id(s.sums) for s in remote}) != 1:
            raise ValueError(
                "A secure sum over SecAgg+ needs every source to be a SecAggSource of one "
                "federation; mixed sources cannot share one secure sum."
            )
        view, plan, stat = remote[0].sums.secure_sum(
            [s.node_id for s in remote], method, epsilon, threshold, remote[0].n_classes, kwargs
        )
        mechanism = distributed_laplace(threshold, len(remote))
        for s in remote:
            s.history.append(stat.record(epsilon, s.name, mechanism))
        return view, plan, stat.finish

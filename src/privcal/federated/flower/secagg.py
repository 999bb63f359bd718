"""SecAgg+ transport for privcal payloads: Flower's legacy SecAggPlusWorkflow + secaggplus_mod.

Flower's SecAgg+ (today only through the legacy strategy API) does not sum vectors: every client
uploads ``[w, w * clip(x, -R, R)]`` quantised to integers in ``[0, Q)`` (stochastic rounding),
and the server recovers the weighted *mean* :math:`\\sum_k w_k x_k / \\sum_k w_k`, with
``w_k = num_examples``. privcal therefore

* sends ``num_examples = 1`` and sets ``max_weight = 1`` so that the mean is unweighted and the
  weight factor ``num_examples / max_weight`` (multiplied into the payload *before*
  quantisation) is 1; Flower's default ``max_weight = 1000`` would make the quantisation
  1000 times coarser;
* scales each payload by ``R / bound`` before upload (``bound`` = the largest absolute entry a
  payload can have: the method's ``payload_bound`` under DP (its clip bounds), the run's
  ``secagg-bound`` otherwise) and unscales the mean: ``total = n * mean * bound / R``.

Privacy: the clients follow the plain ClientApp's rule
(:func:`~privcal.federated.flower.task.charge_round`) and send ``num_examples = 1``, a public
constant. SecAgg+ samples every declared node each round, so the fixed denominator of scaling
methods is ``num-nodes`` (``sample-rate`` must be 1); the server sees only the sum.

Round trip (tested): each entry is quantised with step ``2R / Q`` in the scaled domain, so the
recovered sum of ``n`` payloads is within ``n * (2R / Q) * bound / R = 2 n bound / Q`` of the
plain sum, entrywise (plus float rounding). Entries above ``bound`` would be clipped by Flower,
so clients refuse to send a payload that exceeds it.

Distributed noise (``aggregation = "distributed"``, the default of ``privcal federate
--secagg`` under DP): the server adds no noise and never sees a noiseless value. Each client
encodes its clipped payload in fixed point and adds a discrete Gaussian share per noise group
(:meth:`~privcal.federated.dp.DPConfig.client_uploads`, the code ``simulate`` runs), as residues
``v`` modulo ``M = 2^31`` (:data:`~privcal.federated.flower.task.RING_BITS`). SecAgg+ then
carries them *exactly*: with ``Q = M - 1``, ``R = Q / 2`` and ``max_weight = 1`` the client
sends ``v - R`` (a half-integer below ``2^31``, exact in float64), Flower's quantiser maps it to
``(v - R + R) * Q / (2R) = v`` (an integer, so its stochastic rounding is the identity, and it
fits Flower's int32), masks it and sums modulo ``M``. The server's SecAgg+ workflow hands the
strategy ``(S - n R) Q / (n Q mod M)`` for the modular sum ``S`` of ``n`` survivors, which
:func:`~privcal.federated.flower.ring.wire_to_residues` inverts exactly (float64 error far
below 1/2, checked) into the :class:`~privcal.privacy.distributed.AggregatorView` that the
in-process :class:`~privcal.privacy.distributed.SecureSum` gives ``simulate``; the plan then
lifts it, refuses a wrapped sum and decodes it, and the accountant records the plan's ``rho``.
The ring arithmetic lives in :mod:`privcal.federated.flower.ring`.

Threshold: SecAgg+'s reconstruction threshold is the noise threshold ``t`` itself
(:func:`secagg_threshold`); a halted SecAgg+ stage ends the run (:class:`HaltingSecAggPlus`)
and nothing of that round is released. Every client checks the run and SecAgg+'s setup against
its own policy (:func:`policy_mod`) before any key leaves the node, and again
(:func:`~privcal.federated.flower.task.charge_round`) before its data is read.

Trust (stated in every distributed report): SecAgg+ protects the uploads against an
*honest-but-curious* server, one that follows the protocol; the server together with ``t - 1``
colluding clients can unmask one client's upload, which carries ``1 / t`` of the noise variance
(the report's fallback epsilon). Flower draws the masks from NumPy's Mersenne Twister seeded
with a 32-bit XOR fold of the shared key (flwrlabs/flower issue 7522), so a mask has at most 32
bits of entropy against a server that searches for it.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import ConfigRecord, Context, Error, Message, MessageType, RecordDict
from flwr.client import ClientApp, NumPyClient
from flwr.client.mod import secaggplus_mod
from flwr.client.mod.secure_aggregation.secaggplus_mod import SecAggPlusState
from flwr.common import FitIns, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.common.constant import ErrorCode
from flwr.common.secure_aggregation.secaggplus_constants import (
    RECORD_KEY_CONFIGS,
    RECORD_KEY_STATE,
    Key,
    Stage,
)
from flwr.server import LegacyContext, ServerApp, ServerConfig
from flwr.server.strategy import FedAvg
from flwr.server.workflow import DefaultWorkflow
from flwr.server.workflow.constant import Key as WorkflowKey

from privcal.federated.dp import DPConfig, expected_cohort
from privcal.federated.flower.client_app import FAILED_ROUND, answered_line, end_locally
from privcal.federated.flower.messaging import PolledGrid
from privcal.federated.flower.ring import (
    from_wire,
    residues_to_wire,
    ring_ranges,
    to_wire,
    wire_to_residues,
)
from privcal.federated.flower.secaggplus import (
    HaltingSecAggPlus,
    share_keys_refusal,
    unmask_refusal,
    upload_refusal,
)
from privcal.federated.flower.server_app import (
    check_on_server,
    end_run,
    finish_run,
    join_run,
    progress_line,
    stop_on_signal,
)
from privcal.federated.flower.task import (
    DEFAULTS,
    RING_BITS,
    charge_round,
    client_data,
    client_node,
    client_noise,
    client_payload,
    dp_from_config,
    dump_json,
    join_answer,
    method_from_config,
    round_refusal,
    run_terms,
    server_noise,
    server_state,
    width_refusal,
    write_status,
)
from privcal.federated.flower.transcript import transcript_mod
from privcal.federated.methods import FedMethod
from privcal.federated.policy import ClientPolicy, run_threshold
from privcal.privacy import SecureNoise
from privcal.privacy.distributed import AggregatorView, SecureSum, TooFewSurvivorsError

__all__ = [
    "client",
    "from_wire",
    "payload_bound",
    "residues_to_wire",
    "ring_ranges",
    "secagg_threshold",
    "server",
    "to_wire",
    "wire_to_residues",
]

log = logging.getLogger("privcal.federated")


def payload_bound(cfg: dict[str, Any], fm: FedMethod) -> float:
    """Largest absolute entry of a payload in this run (see the module docstring): the
    method's clip bound under DP (:meth:`FedMethod.payload_bound`), ``secagg-bound`` without."""
    dp = dp_from_config(cfg, SecureNoise())  # only its clip bounds are read
    if dp is not None:
        return float(fm.payload_bound(dp))
    return float(cfg["secagg-bound"])


def secagg_threshold(t: int, n_nodes: int) -> int:
    """SecAgg+'s reconstruction threshold for a noise threshold ``t`` of ``n_nodes`` clients: ``t``
    itself, so that SecAgg+ never unmasks a sum of fewer than ``t`` uploads (fewer than ``t``
    shares carry less noise than the release claims).

    Flower's SecAgg+ needs ``2 <= threshold < number of shares`` (every declared client holds
    one share of each secret), so ``t`` outside ``[2, K - 1]`` cannot be enforced and is a
    ``ValueError``, before any process starts (``privcal federate server`` checks it first).
    """
    t, k = int(t), int(n_nodes)
    if not 2 <= t <= k - 1:
        raise ValueError(
            f"A noise threshold t={t} of K={k} clients cannot be enforced by SecAgg+, whose "
            f"reconstruction threshold must be in [2, K - 1 = {k - 1}]: use a threshold in that "
            "range (--threshold), or more clients."
        )
    return t


def policy_mod(msg: Message, context: Context, call_next: Any) -> Message:
    """Check each SecAgg+ stage's message against this client's policy before it answers.

    At the ``setup`` stage of every round the server declares the reconstruction threshold,
    the number of shares and the clients sampled; the client refuses (an error reply the server
    sees, one status line on its console, nothing charged) a run configuration its
    :class:`~privcal.federated.policy.ClientPolicy` refuses, or a setup whose reconstruction
    threshold is not the run's noise threshold ``t``
    (:meth:`~privcal.federated.policy.ClientPolicy.secagg_refusal`).

    In a distributed run it also refuses a setup whose quantisation is not the exact ring the
    shares travel in (:func:`ring_ranges` and ``max_weight = 1``). The server sets these per
    client: with ``max_weight`` large for every client but one, the others' uploads are
    multiplied by 0 before they are masked, and the "sum" is that one client's upload alone,
    which carries ``1 / t`` of the noise variance (the report's fallback epsilon, with no
    colluding client at all).

    At the ``share_keys`` stage it refuses more key holders than the run's K
    (:func:`share_keys_refusal`). Before its upload it refuses a request whose forwarded key
    shares do not come from distinct clients it shares keys with (:func:`upload_refusal`); at
    the ``unmask`` stage, a request that would give the server both secrets of one client
    (:func:`unmask_refusal`).

    A client with a collusion margin (:meth:`~privcal.federated.policy.ClientPolicy.
    cohort_refusal`) also counts the clients of the sum at each stage: the sample at the setup,
    the clients that shared their keys with it before it uploads (``collect_masked_vectors``),
    the survivors the server lists active at the unmask.
    """
    if msg.metadata.message_type != MessageType.TRAIN:
        return call_next(msg, context)
    configs: Any = msg.content.config_records.get(RECORD_KEY_CONFIGS)
    stage = str(configs.get(Key.STAGE)) if configs is not None else ""
    record = context.state.config_records.get(RECORD_KEY_STATE)
    state = SecAggPlusState(**dict(record or {}))
    node = client_node(context.node_config, context.run_config)
    policy = ClientPolicy.from_node(node)
    cfg = {**DEFAULTS, **dict(context.run_config), "secagg": True}  # whatever the run says
    if stage == Stage.SETUP:
        reason = _setup_refusal(configs, cfg, policy)
    elif stage == Stage.SHARE_KEYS:
        reason = share_keys_refusal(configs, state, int(cfg["num-nodes"]))
    elif stage == Stage.COLLECT_MASKED_VECTORS:  # itself and the clients that sent it shares
        clients = len(configs.get(Key.SOURCE_LIST, [])) + 1
        reason = upload_refusal(configs, state) or policy.cohort_refusal(
            cfg, clients, _STAGE_CLIENTS[stage]
        )
    elif stage == Stage.UNMASK:
        clients = len(configs.get(Key.ACTIVE_NODE_ID_LIST, []))
        reason = unmask_refusal(configs, state) or policy.cohort_refusal(
            cfg, clients, _STAGE_CLIENTS[stage]
        )
    else:
        reason = None
    if reason is None:
        return call_next(msg, context)
    write_status(node, f"round {_STAGE_NAMES[stage]}: refused ({reason})")
    return Message(
        Error(code=ErrorCode.MOD_FAILED_PRECONDITION, reason=f"privcal client refused: {reason}"),
        reply_to=msg,
    )


#: A SecAgg+ stage as a client's status line names it.
_STAGE_NAMES = {
    Stage.SETUP: "setup",
    Stage.SHARE_KEYS: "share keys",
    Stage.COLLECT_MASKED_VECTORS: "upload",
    Stage.UNMASK: "unmask",
}

#: What a stage's clients are, in a collusion-margin refusal.
_STAGE_CLIENTS = {
    Stage.COLLECT_MASKED_VECTORS: "the sum this client would upload to (the clients that "
    "shared their keys)",
    Stage.UNMASK: "the sum the server would unmask (the survivors it lists active)",
}


def _setup_refusal(configs: Any, cfg: dict[str, Any], policy: ClientPolicy) -> str | None:
    """Why this client (``policy``) refuses SecAgg+'s setup of the run ``cfg``
    (:func:`policy_mod`); or ``None``."""
    counts = (Key.THRESHOLD, Key.SHARE_NUMBER, Key.SAMPLE_NUMBER)
    keys = (Key.CLIPPING_RANGE, Key.TARGET_RANGE, Key.MOD_RANGE, Key.MAX_WEIGHT)
    for key in (*counts, *keys):  # Flower reads them after the round's fit (charged)
        value = configs.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"SecAgg+'s setup value {key} = {value!r} is not a number"
        if key in counts and not float(value).is_integer():
            return f"SecAgg+'s setup value {key} = {value!r} is not a count"
        if not value > 0:  # Flower divides by the ranges and the weight
            return f"SecAgg+'s setup value {key} = {value!r} is not positive"
    reason = policy.refusal(cfg) or policy.secagg_refusal(cfg, *(int(configs[k]) for k in counts))
    got, exact = [float(configs[k]) for k in keys], [*ring_ranges(RING_BITS), 1.0]
    if reason is None and cfg["aggregation"] == "distributed" and got != exact:
        reason = (
            f"SecAgg+'s quantisation (clipping, target and modulus ranges, max weight: "
            f"{', '.join(f'{v:g}' for v in got)}) is not the exact ring of the run's noise "
            f"shares ({', '.join(f'{v:g}' for v in exact)}): it would not sum them as sent"
        )
    return reason


class _PrivcalClient(NumPyClient):
    """Answers one SecAgg+ round: ``[scaled clipped payload]``, ``num_examples = 1`` (a public
    constant, never the client's size), no metrics. Same rule as the plain ClientApp
    (:func:`~privcal.federated.flower.task.charge_round`); a refusal raises, which SecAgg+
    treats as a dropout.
    """

    def __init__(self, context: Context) -> None:
        self.node = client_node(context.node_config, context.run_config)
        self.context = context  # its state keeps this client's own row-cap seed
        self.run_config = dict(context.run_config)
        self.node_id = int(context.node_id)
        self.run_id = int(context.run_id)

    def fit(self, parameters: list[np.ndarray], config: dict[str, Any]) -> Any:
        # the run's terms are the run configuration's, which policy_mod checked against
        # SecAgg+'s setup: a round's config adds only its round (or a source's query)
        cfg, refusal = run_terms(config, self.run_config)
        if refusal is None and "query" in config:  # seed 000: a data source's share of a query
            return self._source_share(cfg)
        if refusal is None:  # the round's terms and state first: a bad one costs nothing
            try:
                fm = method_from_config(cfg, self.context)
                sent = {"params": np.asarray(parameters[0])} if fm.kind == "scaling" else {}
                state = server_state(fm, sent, int(cfg["n-classes"]), cfg)
            except (ValueError, TypeError, IndexError) as err:
                refusal = str(err)
        if refusal is None:
            refusal = (  # the policy before the data is read (width_refusal reads it)
                ClientPolicy.from_node(self.node).refusal(cfg)
                or width_refusal(self.node, self.run_config, cfg)
                or round_refusal(self.context, cfg)
                or charge_round(self.node, cfg, self.run_id)
            )
        if refusal is not None:  # SecAgg+ has no refusal message: the client drops out
            what = (
                f"query {config['query']}"
                if "query" in config
                else f"round {cfg['round']}/{cfg['rounds']}"
            )
            write_status(self.node, f"{what}: refused ({refusal})")
            raise RuntimeError(f"privcal client refused the round: {refusal}")
        try:  # from here the errors may depend on the data: their text stays on this node
            return self._upload(fm, state, cfg)
        except Exception as err:
            rnd = f"round {cfg['round']}/{cfg['rounds']}"
            write_status(self.node, f"{rnd}: failed ({type(err).__name__}: {err})")
            raise RuntimeError(FAILED_ROUND) from None

    def _upload(self, fm: FedMethod, state: dict[str, np.ndarray], cfg: dict[str, Any]) -> Any:
        """This client's SecAgg+ input for a round its ledger charged: its payload, with its
        noise share in a distributed run, on the wire."""
        z, y = client_data(self.node, self.run_config)
        payload = client_payload(fm, state, z, y, cfg)
        write_status(self.node, answered_line(self.node, cfg))
        owner = "the privcal SecAgg+ ClientApp"
        noise = client_noise(cfg, self.node_id, owner, ClientPolicy.from_node(self.node))
        dp = dp_from_config(cfg, noise)
        if dp is not None and dp.aggregation == "distributed":
            groups = fm.noise_groups(dp, payload.shape)
            uploads = dp.client_uploads(payload, groups, SecureSum(dp.bits))
            return [residues_to_wire(np.concatenate(uploads), dp.bits)], 1, {}
        bound = payload_bound(cfg, fm)
        if np.abs(payload).max(initial=0.0) > bound:
            raise ValueError(
                f"payload entry {np.abs(payload).max():g} exceeds secagg-bound={bound:g}; "
                "raise secagg-bound or use DP clipping."
            )
        wire = to_wire(payload, bound, float(cfg["secagg-clipping-range"])).ravel()
        return [wire], 1, {}

    def _source_share(self, cfg: dict[str, Any]) -> Any:
        """This source's upload for one query: its ledger charged (under its own policy) before
        its rows are read, then :meth:`~privcal.private.DataSource.share`'s fixed-point
        statistic plus a discrete Laplace share sized for ``t`` of ``K`` sources, as residues
        modulo ``2^31`` that SecAgg+ carries exactly. Nothing else leaves the node."""
        from privcal.federated.flower.sources import (
            node_source,
            secagg_source_refusal,
            source_refusal,
            too_many_rows,
        )

        query, kwargs = str(cfg["query"]), json.loads(str(cfg["kwargs"]))
        k, t = run_threshold(cfg)
        own = int(self.node.get("max-rows", DEFAULTS["source-max-rows"]))  # never the server's
        refusal = source_refusal(self.node, cfg, self.run_id) or secagg_source_refusal(cfg, t, own)
        if refusal is None:  # the data is read only now; its size against the source's own bound
            z, y = client_data(self.node, self.run_config)
            refusal = too_many_rows(len(y), own)
        if refusal is not None:
            write_status(self.node, f"query {query}: refused ({refusal})")
            raise RuntimeError(f"privcal client refused the query: {refusal}")
        src = node_source(z, y, self.node, self.run_id)
        share = src.share(
            query,
            float(kwargs.pop("epsilon")),
            n_parties=k,
            threshold=t,
            ring=SecureSum(RING_BITS),
            max_rows=int(cfg["source-max-rows"]),
            **kwargs,
        )
        rel = src.history[-1]
        write_status(
            self.node,
            f"query {rel.query}: answered with a distributed share (released at epsilon "
            f"{rel.epsilon:.3g}; the ledger has {src.spent:.3g} of {src.budget:g} spent)",
        )
        return [residues_to_wire(share.upload.ravel(), RING_BITS)], 1, {}


def _client_fn(context: Context) -> Any:
    return _PrivcalClient(context).to_client()


def end_mod(msg: Message, context: Context, call_next: Any) -> Message:
    """Answer the server's plain messages as the plain ClientApp does: the end of the run
    (``task = "end"``: check the calibrator on this client's own data, show it on its own
    console, reply empty) and a data source's budget questions (``task = "source"`` with query
    ``status`` or ``can_spend``; every other query of a source over SecAgg+ is answered with
    shares only, in a SecAgg+ round). Every other message goes on to SecAgg+."""
    if str(msg.metadata.message_type) == MessageType.QUERY and "config" in msg.content:
        cfg = dict(msg.content["config"])
        node = client_node(context.node_config, context.run_config)
        info: dict[str, Any] | None = None
        if cfg.get("task") == "end":
            end_locally(node, context, cfg)
            info = {"ok": True}
        elif cfg.get("task") == "join":
            terms, refusal = run_terms(cfg, context.run_config)
            info = (
                join_answer(node, terms, context.run_config, int(context.run_id))
                if refusal is None
                else {"refused": refusal}
            )
        elif cfg.get("task") == "source":
            from privcal.federated.flower.sources import budget_answer

            info = (
                budget_answer(node, cfg)
                if cfg.get("query") in ("status", "can_spend")
                else {"refused": "over SecAgg+ this source answers with shares only"}
            )
        if info is not None:
            return Message(RecordDict({"info": ConfigRecord(info)}), reply_to=msg)
    return call_next(msg, context)


#: Legacy ClientApp with Flower's SecAgg+ mod (inside the transcript mod: a transcript holds
#: the masked uploads the server receives; the end mod answers the end of the run; the policy
#: mod refuses a run or a SecAgg+ setup the client's policy refuses, before any key is sent).
client = ClientApp(client_fn=_client_fn, mods=[transcript_mod, end_mod, policy_mod, secaggplus_mod])


class _Strategy(FedAvg):
    """FedAvg whose aggregate is unscaled into a sum and fed to the privcal server step."""

    def __init__(
        self,
        fm: FedMethod,
        cfg: dict[str, Any],
        c: int,
        n_nodes: int,
        dp: DPConfig | None,
        out_dir: Path | None,
        cohort: list[int],
    ) -> None:
        self.fm, self.cfg, self.c, self.dp, self.out_dir = fm, cfg, c, dp, out_dir
        self.cohort = set(cohort)
        self.sampled: list[int] = []  # the clients sent the current round's setup
        self.state = fm.init(c)
        self.views: list[list[AggregatorView]] = []
        self.survivors: list[int] = []  # clients in each round's secure sum
        self.history: list[dict[str, Any]] = []
        self.n_nodes = n_nodes
        self.t0 = time.perf_counter()
        super().__init__(
            fraction_fit=1.0,
            fraction_evaluate=0.0,
            min_fit_clients=n_nodes,
            min_available_clients=n_nodes,
            min_evaluate_clients=0,
            initial_parameters=ndarrays_to_parameters([self._params()]),
            on_fit_config_fn=lambda rnd: {"round": rnd},
        )

    def _params(self) -> np.ndarray:
        return np.asarray(self.state.get("params", np.zeros(1)), dtype=np.float64)

    def configure_fit(self, server_round: int, parameters: Any, client_manager: Any) -> Any:
        """Every client of the cohort (those asked to join in round 0) connected now.
        (FedAvg's ``sample`` waits up to a day for all ``num-nodes``: a client that left
        between rounds held the run, and every surviving client, until ``--timeout``.) A client
        gone is a dropout: SecAgg+ and the threshold ``t`` decide whether the round still
        releases. A client that connected after round 0 is not sampled: it would make the
        setup's sample larger than the declared K, which every client refuses."""
        fit = FitIns(parameters, {"round": server_round})
        sampled = [p for p in client_manager.all().values() if int(p.node_id) in self.cohort]
        self.sampled = sorted(int(p.node_id) for p in sampled)
        return [(proxy, fit) for proxy in sampled]

    def _distributed_total(self, mean: np.ndarray, n: int) -> np.ndarray:
        """The released round total from the secure sum of the clients' shares (no server
        noise): one :class:`AggregatorView` per noise group, lifted and decoded by its plan."""
        dp = self.dp
        assert dp is not None
        t = int(dp.threshold or self.n_nodes)
        if n < t:
            raise TooFewSurvivorsError(
                f"privcal: only {n} of {self.n_nodes} clients survived the SecAgg+ round, fewer "
                f"than the threshold t={t} the noise shares were sized for; nothing is released."
            )
        shape = self.fm.payload_shape(self.c)
        residues = wire_to_residues(mean, n, dp.bits)
        out = np.zeros(int(np.prod(shape)))
        views, start = [], 0
        for g in self.fm.noise_groups(dp, shape):
            view = AggregatorView(residues[start : start + g.index.size], (), dp.bits)
            out[g.index] = dp.plan(g).release(view)
            views.append(view)
            start += g.index.size
        self.views.append(views)
        if self.out_dir is not None:  # the aggregator's whole view of the run
            dump_json(
                self.out_dir / "aggregator_view.json",
                [[v.modular_sum.tolist() for v in vs] for vs in self.views],
            )
        return out.reshape(shape)

    def aggregate_fit(self, server_round: int, results: Any, failures: Any) -> Any:
        if not results:
            raise RuntimeError(f"privcal: SecAgg+ round {server_round} has no results.")
        mean = parameters_to_ndarrays(results[0][1].parameters)[0]
        n = len(results)
        self.survivors.append(n)
        if self.dp is not None and self.dp.aggregation == "distributed":
            total = self._distributed_total(mean, n)
        else:
            bound = payload_bound(self.cfg, self.fm)
            total = from_wire(mean, n, bound, float(self.cfg["secagg-clipping-range"]))
            total = total.reshape(self.fm.payload_shape(self.c))
        cohort = expected_cohort(1.0, self.n_nodes)  # every declared node, every round
        self.state = self.fm.server_step(self.state, total, n, dp=self.dp, denominator=cohort)
        eps = self.dp.spent_epsilon() if self.dp is not None else 0.0
        seconds = time.perf_counter() - self.t0
        # SecAgg+ reports a client that refused or left once per stage it missed: count the
        # declared clients that did not reply (a refusal is a dropout here), and name those sent
        # the setup, as the plain ServerApp names a client that did not reply
        dropped = max(self.n_nodes - n, 0)
        answered = {int(proxy.node_id) for proxy, _ in results}
        for nid in sorted(set(self.sampled) - answered):
            print(f"privcal: round {server_round}: client {nid} sent no SecAgg+ upload; dropped")
        if self.dp is not None:  # only public quantities (see server_app)
            self.history.append({"round": server_round, "epsilon_spent": eps})
        else:
            row = {"round": server_round, "n_clients": n, "failures": dropped, "seconds": seconds}
            self.history.append({**row, "epsilon_spent": 0.0})
        budget = float(self.cfg["epsilon"]) if self.dp is not None else 0.0
        rounds = int(self.cfg["rounds"])
        print(progress_line(server_round, rounds, n, dropped, 0, eps, budget, seconds))
        self.t0 = time.perf_counter()
        if self.out_dir is not None:
            dump_json(self.out_dir / "history.json", self.history)
        return ndarrays_to_parameters([self._params()]), {}


class _QueryStrategy(FedAvg):
    """The strategy of one data-source query's SecAgg+ round: sends the query to the source
    nodes (``configure_fit``) and keeps the secure sum's unweighted mean (``aggregate_fit``)."""

    def __init__(self) -> None:
        super().__init__(fraction_evaluate=0.0, min_evaluate_clients=0)
        self.nodes: list[int] = []
        self.config: dict[str, Any] = {}
        self.result: tuple[np.ndarray, set[int]] | None = None

    def configure_fit(self, server_round: int, parameters: Any, client_manager: Any) -> Any:
        proxies = {int(c.node_id): c for c in client_manager.all().values()}
        missing = [n for n in self.nodes if n not in proxies]
        if missing:
            raise RuntimeError(f"privcal: the source nodes {missing} are no longer connected.")
        return [(proxies[n], FitIns(parameters, dict(self.config))) for n in self.nodes]

    def aggregate_fit(self, server_round: int, results: Any, failures: Any) -> Any:
        mean = parameters_to_ndarrays(results[0][1].parameters)[0]
        answered = {int(proxy.node_id) for proxy, _ in results}
        self.result = (np.asarray(mean, dtype=np.float64), answered)
        return None, {}


class SecAggSourceSums:
    """The aggregator's side of seed 000's protocol over SecAgg+: one SecAgg+ round per query.

    :meth:`secure_sum` builds the query's public plan from the public statistic
    (:func:`~privcal.private.parallel.public_statistic`,
    :func:`~privcal.private.queries.share_plan`: the plan every source builds from its own
    rows), sends the query to the sources' nodes as
    the config of a SecAgg+ round whose reconstruction threshold is ``t``
    (:func:`secagg_threshold`), and turns SecAgg+'s aggregate into the
    :class:`~privcal.privacy.distributed.AggregatorView` (:func:`wire_to_residues`): the
    modular sum of the sources' uploads, all the aggregator sees. Fewer than ``t`` survivors
    halt SecAgg+ (:class:`HaltingSecAggPlus`): nothing is released.
    """

    def __init__(self, grid: Any, context: Context, cfg: dict[str, Any]) -> None:
        from flwr.compat.common import recorddict_compat as compat
        from flwr.server.client_manager import SimpleClientManager
        from flwr.server.compat.app_utils import start_update_client_manager_thread
        from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD

        self.grid, self.cfg = grid, cfg
        self.strategy = _QueryStrategy()
        self.legacy = LegacyContext(
            context=context,
            config=ServerConfig(num_rounds=1),
            strategy=self.strategy,
            client_manager=SimpleClientManager(),
        )
        self._thread, self._stop, done = start_update_client_manager_thread(
            grid, self.legacy.client_manager
        )
        done.wait()
        self._round = 0
        self._configs = ConfigRecord({WorkflowKey.CURRENT_ROUND: 0})
        self.legacy.state.config_records[MAIN_CONFIGS_RECORD] = self._configs
        self.legacy.state.array_records[MAIN_PARAMS_RECORD] = compat.parameters_to_arrayrecord(
            ndarrays_to_parameters([np.zeros(1)]), True
        )

    def close(self) -> None:
        self._stop.set()
        self._thread.join()

    def secure_sum(
        self,
        nodes: list[int],
        query: str,
        epsilon: float,
        threshold: int,
        n_classes: int,
        kwargs: dict[str, Any],
    ) -> tuple[AggregatorView, Any, Any]:
        """One query's secure sum over the source ``nodes``: ``(view, plan, public statistic)``."""
        from privcal.federated.flower.sources import plain_json
        from privcal.private.parallel import public_statistic
        from privcal.private.queries import share_plan

        k = len(nodes)
        stat = public_statistic(query, n_classes, **kwargs)
        max_rows = int(self.cfg["source-max-rows"])
        plan = share_plan(stat, float(epsilon), k, int(threshold), RING_BITS, max_rows)
        self.strategy.nodes = list(nodes)
        self.strategy.config = {
            "query": query,
            "kwargs": json.dumps({**kwargs, "epsilon": float(epsilon)}, default=plain_json),
            "share-threshold": int(threshold),
        }
        self.strategy.result = None
        self._round += 1
        self._configs[WorkflowKey.CURRENT_ROUND] = self._round
        reconstruction = secagg_threshold(int(threshold), k)
        timeout = float(self.cfg["round-timeout-s"])
        HaltingSecAggPlus.of(k, reconstruction, ring_ranges(RING_BITS), timeout)(
            self.grid, self.legacy
        )
        if self.strategy.result is None:
            raise RuntimeError(f"privcal: the SecAgg+ round of {query} returned no sum.")
        mean, answered = self.strategy.result
        n = len(answered)
        residues = wire_to_residues(mean, n, RING_BITS)
        dropped = tuple(j for j, nid in enumerate(nodes) if nid not in answered)
        view = AggregatorView(residues.reshape(plan.shape), dropped, RING_BITS)
        print(f"privcal: query {stat.label}: secure sum of {n} of {k} sources", flush=True)
        return view, plan, stat


#: Legacy ServerApp running DefaultWorkflow(fit_workflow=SecAggPlusWorkflow(...)).
server = ServerApp()


@server.main()
def _main(grid: Any, context: Context) -> None:
    cfg: dict[str, Any] = {**DEFAULTS, **dict(context.run_config)}
    with stop_on_signal(grid, cfg):
        grid = PolledGrid(grid)  # SecAgg+'s stages poll for replies as privcal's rounds do
        if cfg["method"] == "acc-t":  # seed 000's data sources, distributed noise over SecAgg+
            _seed000_secagg(grid, context, cfg)
        else:
            _federate(grid, context, cfg)


def _federate(grid: Any, context: Context, cfg: dict[str, Any]) -> None:
    """A federated method's run over SecAgg+: round 0 (:func:`~privcal.federated.flower.
    server_app.join_run`), ``T`` SecAgg+ rounds, the release."""
    # the round's cohort is every client asked to join: one that refused is a SecAgg+ dropout
    # while it is still listed, one that connected later takes no part
    cohort = join_run(grid, cfg)[0]
    fm = method_from_config(cfg)
    c = int(cfg["n-classes"])
    out_dir = Path(str(cfg["out-dir"])) if cfg["out-dir"] else None
    if float(cfg["sample-rate"]) < 1.0:
        raise RuntimeError(
            "privcal: SecAgg+ runs use every declared client in every round; set sample-rate = 1."
        )
    dp = (
        dp_from_config(cfg, server_noise(cfg, "the privcal SecAgg+ ServerApp"))
        if float(cfg["epsilon"]) > 0
        else None
    )
    n_nodes = int(cfg["num-nodes"])
    strategy = _Strategy(fm, cfg, c, n_nodes, dp, out_dir, cohort)
    legacy = LegacyContext(
        context=context, config=ServerConfig(num_rounds=int(cfg["rounds"])), strategy=strategy
    )
    if dp is not None and dp.aggregation == "distributed":
        for g in fm.noise_groups(dp, fm.payload_shape(c)):
            dp.plan(g)  # refuses a ring too small for the bound before any round
        ranges = ring_ranges(dp.bits)
        reconstruction = secagg_threshold(int(dp.threshold or n_nodes), n_nodes)
    else:
        clipping = float(cfg["secagg-clipping-range"])
        ranges = (clipping, int(cfg["secagg-quantization-range"]), 1 << 32)
        reconstruction = max(2, n_nodes - 2)
    timeout = float(cfg["round-timeout-s"])
    halting = HaltingSecAggPlus.of(n_nodes, reconstruction, ranges, timeout)
    workflow = DefaultWorkflow(fit_workflow=halting)
    workflow(grid, legacy)
    # the plain ServerApp's end of run: report, calibrator, check, and the clients' end message
    survivors = min(strategy.survivors) if strategy.survivors else None
    cal = finish_run(fm, strategy.state, c, dp, cfg, out_dir, survivors)
    check_on_server(cal, cfg, out_dir, fm.releases)
    end_run(grid, cohort, cal, cfg, fm.releases)


def _seed000_secagg(grid: Any, context: Context, cfg: dict[str, Any]) -> None:
    """Seed 000's DP Acc-T over the SuperNodes as data sources, each query's answers summed by
    SecAgg+ with distributed noise shares (``aggregation = "distributed"``)."""
    from privcal.federated.flower.server_app import seed000
    from privcal.federated.flower.sources import SecAggSource

    sums = SecAggSourceSums(grid, context, cfg)
    try:
        seed000(
            grid,
            cfg,
            lambda nid: SecAggSource(
                grid, nid, int(cfg["n-classes"]), sums, timeout=float(cfg["round-timeout-s"])
            ),
            aggregation="distributed",
        )
    finally:
        sums.close()

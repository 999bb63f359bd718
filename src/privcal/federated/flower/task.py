"""Framework-free glue between Flower records and privcal's federated methods.

Also the client-side rule shared by the plain and the SecAgg+ ClientApp (:func:`charge_round`):
nothing leaves a client except the clipped payload of a round that its ledger has already
charged, or, in a run without DP (which claims no privacy), its exact payload. And what stays
on a client across a run's messages, in the node's ``context.state``: the rounds it answered
(:func:`round_refusal`) and its row-cap seed (:func:`client_seed`).
"""

from __future__ import annotations

import functools
import json
import math
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from privcal.federated.dp import DPConfig
from privcal.federated.methods import FedMethod, get_method
from privcal.federated.methods.conformal import FED_CONFORMAL_ROWS
from privcal.federated.policy import ClientPolicy
from privcal.privacy import (
    BudgetExceededError,
    NoiseSource,
    PrivacyOdometer,
    SecureNoise,
    SeededNoise,
    resolve_noise,
)
from privcal.privacy.odometer import recorded_mechanism

__all__ = [
    "DEFAULTS",
    "array_of",
    "charge_round",
    "client_data",
    "client_node",
    "client_noise",
    "client_payload",
    "client_seed",
    "composed_epsilon",
    "dp_from_config",
    "join_answer",
    "load_client_data",
    "method_from_config",
    "released_file",
    "server_noise",
    "width_refusal",
]

#: SecAgg+'s ring for distributed noise shares: Flower quantises every upload to an int32 and
#: sums modulo a power of two below 2^32, so privcal's residues live modulo 2^31.
RING_BITS = 31

#: Run configuration keys and defaults (``[tool.flwr.app.config]`` of the generated app).
DEFAULTS: dict[str, Any] = {
    "method": "fedtemp",
    "n-classes": 0,
    "rounds": 3,
    "epsilon": 0.0,  # 0 = no DP
    "delta": 1e-5,
    "clip": 0.5,
    "clip-pos": 10.0,
    "clip-neg": 50.0,
    "sample-rate": 1.0,
    "seed": 0,
    "n-levels": 7,
    "n-bins": 32,  # FedBin's default (seed 003: 15)
    "alpha": 0.1,  # conformal-lac / conformal-aps: the sets' miscoverage level
    "row-cap": FED_CONFORMAL_ROWS,  # conformal-*: r, the most rows a client uses (public)
    "weighting": "all",  # "none" | "all" | "changed" (binning)
    "local-iters": 50,
    "iterations": 5,  # acc-t (seed 000) search evaluations
    "min-clients": 2,
    "num-nodes": 2,
    "wait-nodes-s": 60.0,
    "plan": "",  # the server's plan of the run (privcal.federated.plan), shown to each client
    "round-timeout-s": 60.0,
    "noise": "secure",  # "secure" (OpenDP) | "seeded" (tests; the report says not private)
    "secagg": False,
    # who adds the noise of a DP run: "trusted" (the server, to the exact sum) or "distributed"
    # (each client a discrete Gaussian share; needs secagg: the server sees only the sum)
    "aggregation": "trusted",
    "threshold": 0,  # t of distributed shares; 0 = default_threshold(num-nodes)
    # data sources over SecAgg+ (acc-t, distributed): the public bound on a source's rows that
    # sizes the secure sums in SecAgg+'s 2^31 ring (the in-process protocol uses MAX_ROWS)
    "source-max-rows": 4096,
    "secagg-clipping-range": 8.0,
    "secagg-quantization-range": 4194304,
    "secagg-bound": 1000.0,
    "out-dir": "",
    "val": "",  # the server's labelled validation split (checked against uncalibrated)
    # Flower's Simulation Engine: a node's data is partition `partition-id` of `partitions`
    # (one score file split by dirichlet_partition, or a folder of one file per partition)
    "partitions": "",
    "partition-beta": 0.1,
    "partition-seed": 0,
    # and, when `ledgers` names a folder, partition k keeps its ledger there (client-k.sqlite)
    "ledgers": "",
    "ledger-budget": 1.0,
    "ledger-delta-budget": 1e-5,
}


#: What a message may say beside the run configuration: its task and round, and what the server
#: says with them (a data source's query and its arguments, the plan line, the release at the
#: end and whether the node was in the run, why a run stopped). Every other term of a run is its run
#: configuration's.
MESSAGE_KEYS = frozenset(
    {
        "task",
        "round",
        "query",
        "kwargs",
        "share-threshold",
        "plan",
        "calibrator",
        "sets",
        "in-run",
        "stopped",
    }
)


def run_terms(message: Mapping[str, Any], run_config: Mapping[str, Any]) -> tuple[dict, str | None]:
    """The configuration a client acts on, and the reason it refuses the message (or ``None``).

    The terms of a run (method, ``epsilon``, ``delta``, ``rounds``, ``aggregation``, ``secagg``,
    ``num-nodes``, ``threshold``, the clip, ``row-cap``, ``noise``, ...) are the run
    configuration's: Flower's SuperLink hands the same one to every SuperNode of the run, and it
    is what the client's policy checks. A message adds only :data:`MESSAGE_KEYS`; one that sets
    any other term to another value is refused, so a server can neither change a run's terms
    between rounds (e.g. ``rounds``, to have each round's noise sized for a larger share of the
    budget than the ledger was charged) nor tell one client other terms than the rest (e.g. a
    smaller threshold, or another row cap, to shrink the noise shares that protect it).
    """
    base = {**DEFAULTS, **dict(run_config)}
    cfg = {**base, **{k: v for k, v in message.items() if k in MESSAGE_KEYS}}
    for key in sorted(k for k in message if k not in MESSAGE_KEYS and k in base):
        if message[key] != base[key]:
            return cfg, (
                f"the message sets {key} = {message[key]!r} but the run's configuration (the same "
                f"for every client, checked by this client's policy) says {base[key]!r}; a run's "
                "terms cannot change between messages"
            )
    task = str(message.get("task", "source" if "query" in message else "step"))  # SecAgg+: none
    if task in ("step", "source") and (task == "source") != (cfg["method"] == "acc-t"):
        return cfg, (
            f"a {task} message in a run of {cfg['method']}: seed 000's data sources (acc-t) "
            "answer queries and the federated methods rounds, so that a run's policy bounds one "
            "kind of release, never both"
        )
    return cfg, None


#: The ``context.state`` record where a client keeps the rounds it answered, one entry per run.
_ROUNDS_RECORD = "privcal-rounds"


def round_refusal(context: Any, cfg: Mapping[str, Any]) -> str | None:
    """Refuse a round outside ``1..T`` or answered before in this run, ledger or not.

    The client keeps the rounds it answered in ``context.state`` (on the node, never sent), so a
    client without a ledger also answers each round of a run once: a server cannot average the
    noise away by asking the same rows again. (A ledger client also finds them in its ledger,
    which survives a restart: :func:`charge_round`.) Records the round when it is not refused.
    """
    rnd, t = int(cfg["round"]), int(cfg["rounds"])
    if not 1 <= rnd <= t:
        return f"round {rnd} is not a round of this run (1 to {t}); nothing was charged"
    done = rounds_answered(context)
    if rnd in done:
        return (
            f"this client already answered round {rnd} of run {int(context.run_id)}; a second "
            "answer would be a release its privacy accounting did not plan for"
        )
    _state_record(context, _ROUNDS_RECORD)[str(int(context.run_id))] = ",".join(
        str(r) for r in [*done, rnd]
    )
    return None


def rounds_answered(context: Any) -> list[int]:
    """The rounds of the run ``context.run_id`` this client took up: its own record, kept on
    the node (:func:`round_refusal`; a round its ledger then refused included)."""
    record, key = _state_record(context, _ROUNDS_RECORD), str(int(context.run_id))
    return [int(r) for r in str(record[key]).split(",")] if key in record else []


def array_of(record: Any, key: str) -> np.ndarray:
    """``record[key]`` as a NumPy array (an :class:`flwr.app.Array` entry of an ArrayRecord)."""
    value = record[key]
    if not hasattr(value, "numpy"):
        raise ValueError(f"Record entry {key!r} is not an Array: {type(value).__name__}.")
    return np.asarray(value.numpy())


def method_from_config(cfg: dict[str, Any], context: Any = None) -> FedMethod:
    """The :class:`FedMethod` named by a run configuration.

    ``context``: the Flower ``Context`` of the client that runs the method. A conformal method
    then keeps the rows its own secret seed draws (:func:`client_seed`); the server builds the
    method without one (it never runs a client step).
    """
    name = str(cfg["method"])
    weighting = None if cfg["weighting"] == "none" else cfg["weighting"]
    params: dict[str, Any] = {}
    if name in ("fedtemp", "fedvector", "fedopvector", "fedmatrix", "fedcal"):
        params["local_iters"] = int(cfg["local-iters"])
    elif name in ("conformal-lac", "conformal-aps"):
        params.update(alpha=float(cfg["alpha"]), row_cap=int(cfg["row-cap"]))
        if context is not None:
            params["seed"] = client_seed(context)
    elif name == "fedbin":
        params.update(n_bins=int(cfg["n-bins"]), weighting=weighting)
    elif name.startswith("fedbbq"):
        params["n_levels"] = int(cfg["n-levels"])
        if name == "fedbbq" and weighting:
            return get_method("fedbbq-all", weighting=weighting, **params)
    return get_method(name, **params)


#: The ``context.state`` record where a client keeps its row-cap seed, one entry per run.
_SEED_RECORD = "privcal-row-seed"


def client_seed(context: Any) -> int:
    """This client's own seed of the run ``context.run_id``: drawn with :mod:`secrets` on the
    client's first message of the run that needs it and kept in ``context.state``, which Flower
    keeps on the node (SuperNode, or the Simulation Engine's node state) across the run's
    messages and never sends. FedConformal's row cap (:func:`~privcal.federated.methods.
    conformal.cap_rows`) then keeps the same rows every round, and neither the server nor the
    run configuration can choose which rows they are."""
    import secrets

    record, key = _state_record(context, _SEED_RECORD), str(int(context.run_id))
    if key not in record:
        record[key] = secrets.randbits(63)
    return int(record[key])


def _state_record(context: Any, name: str) -> Any:
    """The node's ``context.state`` record ``name`` (kept on the node, never sent), created empty
    on first use."""
    from flwr.app import ConfigRecord

    if name not in context.state:
        context.state[name] = ConfigRecord()
    return context.state[name]


def released_file(method: str) -> str:
    """The file a run of ``method`` writes its release to: ``sets.json`` for a method whose
    release is prediction sets (:attr:`FedMethod.releases`), else ``calibrator.json``."""
    if method == "acc-t":
        return "calibrator.json"
    return f"{method_from_config({**DEFAULTS, 'method': method}).releases}.json"


def server_noise(cfg: dict[str, Any], owner: str) -> NoiseSource:
    """The server's noise: :class:`SecureNoise`, or ``SeededNoise(seed + 1)`` when the run config
    says ``noise = "seeded"`` (warns ``InsecureNoiseWarning``; the report is "not private")."""
    seeded = SeededNoise(int(cfg["seed"]) + 1) if _seeded(cfg, owner) else None
    return resolve_noise(seeded, owner)


def _seeded(cfg: dict[str, Any], owner: str) -> bool:
    """Whether the run config asks for seeded noise (``noise`` is "secure" or "seeded")."""
    if cfg["noise"] not in ("secure", "seeded"):
        raise ValueError(
            f"The 'noise' run config of {owner} must be 'secure' or 'seeded'. "
            f"Got {cfg['noise']!r} instead."
        )
    return bool(cfg["noise"] == "seeded")


def client_noise(
    cfg: dict[str, Any], node_id: int, owner: str, policy: ClientPolicy
) -> NoiseSource:
    """A client's noise for its distributed shares: :class:`SecureNoise`, or ``SeededNoise``
    keyed by the run's seed, the node and the round (``noise = "seeded"``, tests only: warns
    ``InsecureNoiseWarning``; the report is "not private") when the client's own policy allows
    it. A seeded run the policy does not allow is a ``PermissionError`` (the client's
    :func:`charge_round` has refused it before; this is the last line of that defence)."""
    seeded = None
    if _seeded(cfg, owner):
        if not policy.allow_seeded_noise:
            raise PermissionError(
                f"{owner}: the run asks for seeded noise and this client's policy allows secure "
                "noise only"
            )
        key = [int(cfg["seed"]) + 2, int(node_id) % 2**63, int(cfg.get("round", 0))]
        seeded = SeededNoise(np.random.default_rng(key))
    return resolve_noise(seeded, owner)


def dp_from_config(cfg: dict[str, Any], noise: NoiseSource) -> DPConfig | None:
    """The run's :class:`DPConfig` (``None`` when ``epsilon = 0``: no DP).

    ``aggregation = "distributed"`` sizes the shares for ``threshold`` of ``num-nodes`` clients
    (``0``: :func:`~privcal.federated.dp.default_threshold`) in SecAgg+'s ring
    (:data:`RING_BITS` bits); it needs ``secagg``, the only transport here whose server sees
    the sum alone.
    """
    if float(cfg["epsilon"]) <= 0:
        return None
    aggregation = str(cfg.get("aggregation", DEFAULTS["aggregation"]))
    if aggregation == "distributed" and not bool(cfg.get("secagg", False)):
        raise ValueError(
            "aggregation = 'distributed' needs secagg = true: without a secure sum the server "
            "would see each client's upload, which carries only a share of the noise "
            "(privcal federate --secagg)."
        )
    threshold = int(cfg.get("threshold", 0)) or None
    return DPConfig(
        float(cfg["epsilon"]),
        float(cfg["delta"]),
        int(cfg["rounds"]),
        noise=noise,
        clip=float(cfg["clip"]),
        clip_pos=float(cfg["clip-pos"]),
        clip_neg=float(cfg["clip-neg"]),
        aggregation=aggregation,
        n_clients=int(cfg["num-nodes"]),
        threshold=threshold if aggregation == "distributed" else None,
        bits=RING_BITS if aggregation == "distributed" else 64,
    )


def server_state(
    fm: FedMethod, sent: dict[str, np.ndarray], c: int, cfg: dict[str, Any]
) -> dict[str, np.ndarray]:
    """The round's state, from the method's own ``init(c)`` and what the server ``sent``,
    once every term of the round is checked: a ``ValueError`` before the ledger is charged or
    the data read (a bad term must cost the client nothing).

    The run's privacy terms must make a :class:`DPConfig` (:func:`dp_from_config`: the clip,
    the number of clients, ...) and, under distributed noise, every noise group's plan (a ring
    too small for the payload bound, such as a huge ``row-cap``, would otherwise raise only
    when the client forms its upload, after its ledger took the round). A state entry of
    another shape than ``init(c)``'s, or ``params`` that are not finite, is refused: it depends
    on the server's message and the model's width only, and a native solver must never see
    arrays of other sizes than it was sized for (FedCal's L-BFGS-B, given parameters longer
    than the MLP, wrote past its buffers).
    """
    dp = dp_from_config(cfg, SecureNoise())
    if dp is not None and dp.aggregation == "distributed":
        for group in fm.noise_groups(dp, fm.payload_shape(c)):
            dp.plan(group)
    own = fm.init(c)
    for key in (k for k in own if k in sent):
        if np.shape(sent[key]) != own[key].shape or (
            key == "params" and not np.isfinite(sent[key]).all()
        ):
            raise ValueError(
                f"The server's state entry {key!r} for {fm.name} is not the method's own (shape "
                f"{own[key].shape}{', finite' if key == 'params' else ''}); nothing was sent."
            )
    return {**own, **sent}


def client_payload(
    fm: FedMethod, state: dict[str, np.ndarray], z: np.ndarray, y: np.ndarray, cfg: dict[str, Any]
) -> np.ndarray:
    """One client's reply: the method's client step, clipped under DP (the server adds noise).

    ``state`` is checked against this client's logits' width (:func:`server_state`). Under DP
    a payload with a NaN or infinite entry (a step the method cannot compute at the server's
    ``state``, on some data only) is sent as zeros: inside every clip bound, so the release
    keeps its sensitivity, where a refusal or an error would tell the server, with no noise,
    something of the client's data.
    """
    state = server_state(fm, state, z.shape[1], cfg)
    dp = dp_from_config(cfg, SecureNoise())  # the client only clips; it never draws noise
    with np.errstate(all="ignore"):  # an overflow's warning is no reply's business either
        payload = np.asarray(fm.client_step(state, z, y), dtype=np.float64)
        if dp is not None:
            payload = fm.clip(np.where(np.isfinite(payload).all(), payload, 0.0), dp)
    return np.asarray(payload, dtype=np.float64)


def composed_epsilon(cfg: dict[str, Any], rounds_done: int) -> float:
    """The run's epsilon after ``rounds_done`` of its ``T`` rounds: ``r rho / T`` converted at
    ``delta``, with ``rho`` the run's whole budget (:func:`~privcal.federated.dp.run_rho`; each
    round's noise is sized for ``rho / T`` or less) and the run's conversion (exact Gaussian for
    the server's noise, zCDP for distributed shares), so ``composed_epsilon(cfg, T) <=
    epsilon``. Public: it reads the run configuration only."""
    from privcal.federated.dp import conversion_of, run_epsilon, run_rho

    if rounds_done <= 0:
        return 0.0
    eps, dlt, t = float(cfg["epsilon"]), float(cfg["delta"]), int(cfg["rounds"])
    conversion = conversion_of(str(cfg.get("aggregation", DEFAULTS["aggregation"])))
    return run_epsilon(min(rounds_done, t) * run_rho(eps, dlt, conversion) / t, dlt, conversion)


def _node_ledger(node: Mapping[str, Any]) -> PrivacyOdometer:
    """The client's ledger as its node config names it (``ledger``, ``budget``, ...)."""
    return PrivacyOdometer(
        float(node.get("budget", 1.0)),
        ledger=str(node["ledger"]),
        delta_budget=float(node.get("delta-budget", 1e-5)),
        name=str(node.get("name", "client")),
    )


#: How a client's ledger names the rounds of a federated run it charged (:func:`charge_round`).
RUN_LABEL = "federated run "


def mixed_unit_refusal(odo: PrivacyOdometer, federated: bool) -> str | None:
    """Why ``odo`` cannot take a federated run's round (``federated``) or a data-source answer,
    or ``None``: one ledger counts one unit. A federated run is user-level DP (this client's
    whole data set), any other spend example-level (one row); summed, the two epsilons state
    neither guarantee (a row of a user-level run at epsilon costs up to twice it, group
    privacy; a row-level answer is user-level only at ``n`` times its epsilon)."""
    other = [r for r in odo.releases if r.query.startswith(RUN_LABEL) != federated]
    if not other:
        return None
    held, asked = (
        ("example-level spends (data-source answers or local fits)", "a federated run's round")
        if federated
        else ("federated runs (user-level)", "a data-source answer (example-level)")
    )
    return (
        f"this client's ledger holds {held}; {asked} is of another neighbouring relation and "
        "does not compose with them in one ledger: give it a ledger of its own; nothing was "
        "charged"
    )


def charge_round(node: dict[str, Any], cfg: dict[str, Any], run_id: int = 0) -> str | None:
    """Check the run against this client's policy, then charge its ledger for one round, both
    *before* it reads its data or computes its reply; ``None`` (it may reply) or the reason it
    refuses.

    First the client's own :class:`~privcal.federated.policy.ClientPolicy` (node config; the
    run configuration cannot lower it): a run it refuses charges nothing. A client with a
    ``ledger`` refuses runs without DP and keeps its ledger at or above the loss it has taken
    on: before round ``r`` it records ``composed_epsilon(r)`` (:func:`composed_epsilon`, what
    the server shows after round ``r``) minus what this run has already charged (found by the
    run's id: a client first sampled in round 3 pays for rounds 1-3 at once) and, the first
    time, the run's ``delta``; the last round brings the ledger to the run's declared
    ``(epsilon, delta)`` exactly. Nothing is charged and the round refused when the ledger
    cannot pay the *rest of the run* (as :func:`join_answer` checks in round 0: a client never
    goes on with a run it would have to leave half-way), for a round outside ``1..T`` or one
    answered before, or for a run id whose earlier charges are not this run's (other terms:
    :func:`_same_run`; a server that reuses a run id cannot have a new run's rounds charged as
    the rest of an old one). The charge is left in ``node["charged"]``. A client without a ledger
    keeps no budget of its own and always replies (the server's report accounts for every
    round).
    """
    refusal = ClientPolicy.from_node(node).refusal(cfg)
    if refusal is not None:
        return refusal
    if not node.get("ledger"):
        return None
    eps = float(cfg["epsilon"])  # > 0: a client with a ledger never accepts runs without DP
    odo = _node_ledger(node)
    mixed = mixed_unit_refusal(odo, federated=True)
    if mixed is not None:
        return mixed
    label = f"{RUN_LABEL}{run_id}, "
    before = [r for r in odo.releases if r.query.startswith(label)]
    rnd, t = int(cfg["round"]), int(cfg["rounds"])
    if not 1 <= rnd <= t:
        return f"round {rnd} is not a round of this run (1 to {t}); nothing was charged"
    if any(r.query.startswith(f"{label}round {rnd} of ") for r in before):
        return (
            f"this client already answered round {rnd} of run {run_id}; a second answer would "
            "be a release its ledger did not plan for"
        )
    charged = math.fsum(r.epsilon for r in before)
    noise = "seeded" if cfg.get("noise") == "seeded" else "secure"
    mechanism = (
        "discrete gaussian shares (distributed, zCDP composed over rounds)"
        if cfg.get("aggregation") == "distributed"
        else "gaussian (server-side, rounds composed exactly as one Gaussian)"
    )
    if before and not _same_run(before, label, cfg, charged, recorded_mechanism(mechanism, noise)):
        return (
            f"this client's ledger holds charges of run {run_id} under other terms (epsilon "
            f"{charged:.4g} so far); a run id names one run, whose terms cannot change"
        )
    delta = 0.0 if before else float(cfg["delta"])
    if not odo.can_spend(max(eps - charged, 1e-300), delta):
        # the rest of the run must fit, as in round 0 (join_answer): never leave a run half-way
        return (
            f"the rest of the run costs epsilon {eps - charged:.4g}; this client's budget "
            f"(ledger) has {odo.remaining:.4g} of {odo.budget:g} left; nothing was charged"
        )
    # the run's composed epsilon so far; after the last round the run's declared epsilon
    # (composed_epsilon(T) <= epsilon: the ledger then records exactly the report's claim)
    target = eps if rnd == t else composed_epsilon(cfg, rnd)
    charge = target - charged  # > 0: composed_epsilon increases with r
    try:
        odo.spend(
            f"{label}round {rnd} of {t} ({cfg['method']})",
            charge,
            delta,
            mechanism=mechanism,
            noise=noise,
        )
    except BudgetExceededError as err:
        return str(err)
    node["charged"] = charge
    return None


def _same_run(
    before: list[Any], label: str, cfg: Mapping[str, Any], charged: float, mechanism: str
) -> bool:
    """Whether a ledger's earlier charges under a run id are this run's: the same rounds ``T``,
    method and mechanism, the run's ``delta`` first, and, in all, what :func:`charge_round`
    charges up to the last round answered (the run's ``epsilon`` at ``T``, else
    :func:`composed_epsilon`). Charged as the continuation of another run, a run's rounds would
    be recorded at a fraction of their cost (and its delta not at all)."""
    t, suffix = int(cfg["rounds"]), f" of {int(cfg['rounds'])} ({cfg['method']})"
    if any(not r.query.endswith(suffix) or r.mechanism != mechanism for r in before):
        return False
    last = max(int(r.query[len(label) :].split()[1]) for r in before)
    expected = float(cfg["epsilon"]) if last == t else composed_epsilon(dict(cfg), last)
    return math.isclose(charged, expected, rel_tol=1e-9) and math.isclose(
        before[0].delta, float(cfg["delta"]), rel_tol=1e-9
    )


def width_refusal(
    node: Mapping[str, Any], run_config: Mapping[str, Any], cfg: Mapping[str, Any]
) -> str | None:
    """Why this client refuses the run's ``n-classes``: not the width of its own logits (the
    shared model's output size, not a property of its rows), or ``None``. Checked in round 0
    and again before each round is charged: a server that skips round 0 must not have a round
    charged that the client then cannot compute (its state and payload have the model's
    width)."""
    z, _ = client_data(node, run_config)
    c = int(cfg["n-classes"])
    if z.shape[1] == c:
        return None
    return (
        f"this client's logits have {z.shape[1]} classes and the run asks for "
        f"n-classes = {c} (the server's --n-classes must be the model's output size)"
    )


def join_answer(
    node: dict[str, Any], cfg: dict[str, Any], run_config: Mapping[str, Any], run_id: int = 0
) -> dict[str, Any]:
    """A client's answer to the server's round 0 (``task = "join"``), before any round.

    The client checks, in this order, and refuses with the first reason that applies (the reply
    ``{"refused": reason}``; nothing is charged, nothing of its data is sent):

    1. its own :class:`~privcal.federated.policy.ClientPolicy` (the run configuration only);
    2. the run's ``n-classes`` against the width of its own logits (the shared model's output
       size, not a property of its rows): a mismatch would fail every round, or release a
       calibrator for another model;
    3. with a ledger, that the run's whole ``(epsilon, delta)`` fits in what the ledger has
       left (a run charges its declared epsilon over its ``T`` rounds, :func:`charge_round`), so
       a client never starts a run it would have to leave half-way with its budget spent.

    Otherwise it answers ``{"joined": True}`` and writes the plan and its cost against its own
    ledger to its status file (what ``privcal federate client`` shows) before round 1.
    """
    policy = ClientPolicy.from_node(node)
    refusal = policy.refusal(cfg)
    refusal = refusal or width_refusal(node, run_config, cfg)
    cost = ""
    eps, dlt = float(cfg["epsilon"]), float(cfg["delta"])
    if refusal is None and node.get("ledger") and eps > 0:
        odo = _node_ledger(node)
        refusal = mixed_unit_refusal(odo, federated=True)
        if refusal is None and not odo.can_spend(eps, dlt):
            refusal = (
                f"the run costs epsilon {eps:g}, delta {dlt:g}; this client's ledger has "
                f"epsilon {odo.remaining:.4g} of {odo.budget:g} left (delta "
                f"{odo.delta_spent:.3g} of {odo.delta_budget:g} spent)"
            )
        elif refusal is None:
            cost = (
                f"; it will charge this client's ledger epsilon {eps:g} over its "
                f"{int(cfg['rounds'])} rounds ({odo.remaining - eps:.4g} of {odo.budget:g} left "
                "after the run)"
            )
    if refusal is not None:
        write_status(node, f"end: refused the run ({refusal})")
        return {"refused": refusal}
    what = (
        f"epsilon {eps:g}, delta {dlt:g}, {cfg.get('aggregation', 'trusted')} aggregation"
        if eps > 0
        else "no DP (exact payloads)"
    )
    write_status(
        node, f"joined run {run_id}: {cfg['method']}, {int(cfg['rounds'])} rounds, {what}{cost}"
    )
    if cfg.get("plan"):
        write_status(node, f"plan: {cfg['plan']}")
    return {"joined": True}


def load_client_data(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """A client's calibration logits and labels: ``.npz`` with ``logits`` and ``labels``.

    Other formats go through :func:`privcal.data.read_scores`. The logits and labels are
    validated (finite, labels in ``range(C)``); a damaged or incomplete file is a ``ValueError``
    that names the file and what it must hold.
    """
    from privcal.data.validation import check_labels, check_scores

    p = Path(path)
    if p.suffix != ".npz":
        from privcal.data import read_scores

        s = read_scores(p)
        if s.logits is None:
            raise ValueError(f"{p} holds no logits; federated calibration needs full logits.")
        return np.asarray(s.logits, dtype=np.float64), np.asarray(s.labels)
    try:
        with np.load(p, allow_pickle=False) as d:
            arrays = {k: d[k] for k in ("logits", "labels") if k in d.files}
    except (OSError, EOFError, ValueError, zipfile.BadZipFile) as err:
        raise ValueError(f"{str(p)!r} is not a readable .npz file ({err}).") from None
    if len(arrays) < 2:
        raise ValueError(
            f"{str(p)!r} must hold 'logits' and 'labels' arrays "
            "(np.savez(path, logits=..., labels=...)); federated calibration needs labels."
        )
    z = check_scores(arrays["logits"], input="logits", name="logits")
    y = check_labels(arrays["labels"], z.shape[0], z.shape[1])
    return np.asarray(z, dtype=np.float64), np.asarray(y)


def client_node(node_config: Mapping[str, Any], run_config: Mapping[str, Any]) -> dict[str, Any]:
    """The node configuration the ClientApp acts on (``data``, ``ledger``, ``budget`` ...).

    A deployed SuperNode's own ``--node-config``, unchanged (its privacy policy included). A
    node of Flower's Simulation Engine has only ``partition-id`` and ``num-partitions``: the
    operator who writes the run config runs every client, so it takes the permissive policy;
    with a ``ledgers`` folder, partition ``k`` keeps its ledger there (``client-k.sqlite``,
    budgets ``ledger-budget`` and ``ledger-delta-budget``) and charges it as a deployed client
    does (:func:`charge_round`). A node that names its own ``data`` is deployed,
    ``partition-id`` or not: its rows are not the run configuration's, nor its policy or ledger.
    """
    node = dict(node_config)
    simulated = "partition-id" in node and not node.get("data")
    if simulated:  # the operator runs every client: its run config is their policy
        node = {**ClientPolicy.permissive().to_node(), **node}
    folder = str(run_config.get("ledgers", ""))
    if folder and simulated and not node.get("ledger"):
        k = int(node["partition-id"])
        node["ledger"] = str(Path(folder) / f"client-{k}.sqlite")
        node["budget"] = float(run_config.get("ledger-budget", DEFAULTS["ledger-budget"]))
        node["delta-budget"] = float(
            run_config.get("ledger-delta-budget", DEFAULTS["ledger-delta-budget"])
        )
        node.setdefault("name", f"client-{k}")
    return node


def client_data(
    node: Mapping[str, Any], run_config: Mapping[str, Any]
) -> tuple[np.ndarray, np.ndarray]:
    """The calibration logits and labels of the client that a node is: its own file (node config
    ``data``) or, under Flower's Simulation Engine, partition ``partition-id`` of the run
    config's ``partitions`` (:func:`partition_data`). The node reads its rows itself: the
    server never sends data.
    """
    if node.get("data"):
        return load_client_data(str(node["data"]))
    if "partition-id" in node:
        return partition_data(
            str(run_config.get("partitions", "")),
            int(node["partition-id"]),
            int(node["num-partitions"]),
            float(run_config.get("partition-beta", DEFAULTS["partition-beta"])),
            int(run_config.get("partition-seed", DEFAULTS["partition-seed"])),
        )
    raise ValueError(
        "This node holds no data: its node config needs 'data' (a score file) or, under "
        "Flower's Simulation Engine, a 'partition-id' with the run config's 'partitions'."
    )


def partition_data(
    source: str | Path, partition_id: int, num_partitions: int, beta: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Rows of partition ``partition_id`` out of ``num_partitions`` (Flower's Simulation Engine).

    ``source`` is either

    * a score file holding every client's rows, split by
      ``dirichlet_partition(labels, n_clients=num_partitions, beta=beta, seed=seed)``
      (:func:`privcal.federated.dirichlet_partition`; the same call gives
      :func:`privcal.federated.simulate` the same clients), or
    * a folder of score files, one per partition: partition ``k`` is the ``k``-th file in name
      order, and there must be exactly ``num_partitions`` of them.

    A process reads a file and draws its split once (cached on the file's path, size and
    modification time), so a Ray actor that serves thousands of partitions pays for it once.
    """
    if not str(source):
        raise ValueError(
            "The 'partitions' run config of the privcal ClientApp must name a score file or a "
            "folder of score files (one per partition). Got '' instead."
        )
    p = Path(source)
    if not 0 <= partition_id < num_partitions:
        raise ValueError(
            f"The partition id of the privcal ClientApp must be in [0, {num_partitions}). "
            f"Got {partition_id} instead."
        )
    if p.is_dir():
        files = _partition_files(str(p))
        if len(files) != num_partitions:
            raise ValueError(
                f"The 'partitions' folder {str(p)!r} must hold one score file per partition "
                f"({num_partitions}). Got {len(files)} files instead."
            )
        return load_client_data(files[partition_id])
    try:
        st = p.stat()
    except OSError as err:
        raise ValueError(f"The 'partitions' file {str(p)!r} cannot be read ({err}).") from None
    z, y, parts = _dirichlet_split(
        str(p), st.st_mtime_ns, st.st_size, num_partitions, float(beta), int(seed)
    )
    rows = parts[partition_id]
    return z[rows], y[rows]


#: Files a ``partitions`` folder may hold (what :func:`load_client_data` reads).
PARTITION_SUFFIXES = (".npz", ".csv", ".parquet", ".npy")


@functools.lru_cache(maxsize=4)
def _partition_files(folder: str) -> list[str]:
    return sorted(
        str(f) for f in Path(folder).iterdir() if f.is_file() and f.suffix in PARTITION_SUFFIXES
    )


@functools.lru_cache(maxsize=2)
def _dirichlet_split(
    path: str, _mtime: int, _size: int, k: int, beta: float, seed: int
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    from privcal.federated.partition import dirichlet_partition

    z, y = load_client_data(path)
    return z, y, dirichlet_partition(y, n_clients=k, beta=beta, seed=seed)


def dump_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=float))
    tmp.replace(path)


def write_status(node: dict[str, Any], text: str) -> None:
    """Append one line to the node's ``status`` file (node config), if it has one.

    ``privcal federate client`` shows these lines: the ClientApp runs in a process of its own
    that Flower starts, so a file is how it reaches the person running the client.
    """
    path = node.get("status")
    if path:
        with open(str(path), "a", encoding="utf-8") as fh:
            fh.write(text.rstrip("\n") + "\n")

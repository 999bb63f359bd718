"""Flower ServerApp: privcal's federated calibration over the Message API.

Each round the server samples nodes (rate ``sample-rate``, seeded), sends them the global state
(``ArrayRecord``) and the run configuration (``ConfigRecord``) in a ``query`` message, sums the
accepted payloads, and applies the method's server step (with Gaussian noise from a privcal
NoiseSource under DP: ``SecureNoise`` unless ``noise = "seeded"``). A reply with an error (a
crashed client), a refusal (a spent budget), a wrong shape or a NaN is dropped with a logged
reason and the round continues; with fewer than ``min-clients`` accepted updates the run stops
with a clear error. One zCDP accountant covers the whole run; its epsilon is in the history.
Outputs (``out-dir``): ``calibrator.json`` (``Calibrator.to_dict``) and ``history.json``.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.serverapp import Grid, ServerApp

from privcal.federated.dp import DPConfig, validate_payload
from privcal.federated.flower.task import DEFAULTS, array_of, dump_json, method_from_config
from privcal.privacy import SecureNoise, SeededNoise

log = logging.getLogger("privcal.federated")
app = ServerApp()


def _wait_nodes(grid: Grid, n: int, wait_s: float) -> list[int]:
    deadline = time.monotonic() + wait_s
    while True:
        ids = sorted(grid.get_node_ids())
        if len(ids) >= n or time.monotonic() > deadline:
            return ids
        time.sleep(0.5)


def _query(
    grid: Grid, nodes: list[int], state: dict[str, np.ndarray], cfg: dict[str, Any], timeout: float
) -> list[Message]:
    msgs = []
    for nid in nodes:
        content = RecordDict(
            {
                "state": ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in state.items()}),
                "config": ConfigRecord(cfg),
            }
        )
        msgs.append(Message(content, dst_node_id=nid, message_type=MessageType.QUERY))
    return list(grid.send_and_receive(msgs, timeout=timeout))


def _accepted(replies: list[Message], shape: tuple[int, ...], rnd: int) -> list[np.ndarray]:
    out = []
    for r in replies:
        nid = r.metadata.src_node_id
        if r.has_error():
            log.warning("Round %d: client %s failed (%s); dropped.", rnd, nid, r.error.reason)
            print(
                f"privcal: round {rnd}: client {nid} failed ({r.error.reason}); dropped", flush=True
            )
            continue
        info = dict(r.content["info"]) if "info" in r.content else {}
        if "refused" in info:
            reason = str(info["refused"])
            print(f"privcal: round {rnd}: client {nid} refused: {reason}", flush=True)
            continue
        arr = validate_payload(array_of(r.content["arrays"], "payload"), shape, nid)
        if arr is None:
            print(
                f"privcal: round {rnd}: rejected the update of client {nid} (bad shape or "
                "non-finite values)",
                flush=True,
            )
            continue
        out.append(arr)
    return out


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg: dict[str, Any] = {**DEFAULTS, **dict(context.run_config)}
    if cfg["method"] == "acc-t":
        _seed000(grid, cfg)
        return
    fm = method_from_config(cfg)
    rounds = int(cfg["rounds"])
    out_dir = Path(str(cfg["out-dir"])) if cfg["out-dir"] else None
    nodes = _wait_nodes(grid, int(cfg["num-nodes"]), float(cfg["wait-nodes-s"]))
    if len(nodes) < int(cfg["min-clients"]):
        raise RuntimeError(
            f"privcal: only {len(nodes)} SuperNodes connected; min-clients is {cfg['min-clients']}."
        )
    timeout = float(cfg["round-timeout-s"])
    dp = None
    if float(cfg["epsilon"]) > 0:
        noise = SeededNoise(int(cfg["seed"]) + 1) if cfg["noise"] == "seeded" else SecureNoise()
        dp = DPConfig(
            float(cfg["epsilon"]),
            float(cfg["delta"]),
            rounds,
            noise=noise,
            clip=float(cfg["clip"]),
            clip_pos=float(cfg["clip-pos"]),
            clip_neg=float(cfg["clip-neg"]),
        )
    c = int(cfg["n-classes"])
    if c < 2:
        raise RuntimeError(f"privcal: run config 'n-classes' must be >= 2. Got {c}.")
    state = fm.init(c)
    if fm.kind == "binning" and dp is None and getattr(fm, "weighting", None):
        # non-DP weighting needs the class totals N_j (Sec. 4.1): one count query to all nodes
        counts = _query(grid, nodes, {}, {**cfg, "task": "count", "round": 0}, timeout)
        totals = [array_of(r.content["arrays"], "payload") for r in counts if not r.has_error()]
        state["class_totals"] = np.sum([t for t in totals if t.size == c], axis=0)
    shape = fm.payload_shape(c)
    rng = np.random.default_rng(int(cfg["seed"]))
    p = float(cfg["sample-rate"])
    history = []
    for t in range(1, rounds + 1):
        t0 = time.perf_counter()
        live = sorted(grid.get_node_ids())
        sampled = live if p >= 1.0 else [n for n in live if rng.random() < p]
        replies = _query(grid, sampled, state, {**cfg, "round": t}, timeout)
        missing = set(sampled) - {r.metadata.src_node_id for r in replies}
        for nid in sorted(missing):
            print(
                f"privcal: round {t}: no reply from client {nid} within {timeout:g} s; dropped",
                flush=True,
            )
        payloads = _accepted(replies, shape, t)
        if len(payloads) < int(cfg["min-clients"]):
            raise RuntimeError(
                f"privcal: round {t} has {len(payloads)} accepted updates out of "
                f"{len(sampled)} sampled clients; min-clients is {cfg['min-clients']}."
            )
        total = np.sum(payloads, axis=0)
        state = fm.server_step(state, total, len(payloads), dp=dp, denominator=p * len(nodes))
        history.append(
            {
                "round": t,
                "n_clients": len(payloads),
                "sampled": len(sampled),
                "seconds": time.perf_counter() - t0,
                "epsilon_spent": dp.spent_epsilon() if dp else 0.0,
            }
        )
        print(f"privcal: round {t}: {len(payloads)}/{len(sampled)} clients", flush=True)
        if out_dir is not None:
            dump_json(out_dir / "history.json", history)
    if out_dir is not None:
        dump_json(out_dir / "calibrator.json", fm.calibrator(state, c).to_dict())
        dump_json(out_dir / "state.json", {k: np.asarray(v).tolist() for k, v in state.items()})


def _seed000(grid: Grid, cfg: dict[str, Any]) -> None:
    """Seed 000's protocol: DP Acc-T over the SuperNodes acting as remote DataSources."""
    from privcal.federated.flower.sources import RemoteSource
    from privcal.private import PrivateTemperatureScaling

    nodes = _wait_nodes(grid, int(cfg["num-nodes"]), float(cfg["wait-nodes-s"]))
    if len(nodes) < int(cfg["min-clients"]):
        raise RuntimeError(
            f"privcal: only {len(nodes)} SuperNodes connected; min-clients is {cfg['min-clients']}."
        )
    # the nodes that act as data sources (they hold a ledger) answer a status query
    probe = _query(
        grid,
        nodes,
        {},
        {"task": "source", "query": "status", "kwargs": "{}", "round": 0},
        float(cfg["round-timeout-s"]),
    )
    ids = []
    for r in probe:
        info = {} if r.has_error() else dict(r.content["info"])
        if r.has_error() or "refused" in info:
            print(
                f"privcal: node {r.metadata.src_node_id} is not a data source; skipped", flush=True
            )
        else:
            ids.append(r.metadata.src_node_id)
    if len(ids) < int(cfg["min-clients"]):
        raise RuntimeError(
            f"privcal: {len(ids)} nodes act as data sources; min-clients is {cfg['min-clients']}."
        )
    sources = [
        RemoteSource(grid, nid, int(cfg["n-classes"]), timeout=float(cfg["round-timeout-s"]))
        for nid in sorted(ids)
    ]
    est = PrivateTemperatureScaling(
        objective="acc", epsilon=float(cfg["epsilon"]), iterations=int(cfg["iterations"])
    )
    est.fit(sources=sources)
    out_dir = Path(str(cfg["out-dir"])) if cfg["out-dir"] else None
    print(f"privcal: DP Acc-T over {len(sources)} sources: T = {est.temperature_:.4g}", flush=True)
    if out_dir is not None:
        dump_json(out_dir / "calibrator.json", est.to_dict())
        dump_json(
            out_dir / "history.json",
            [
                {"query": r.query, "epsilon": r.epsilon, "source": r.source}
                for r in est.privacy_report_.releases
            ],
        )

"""Flower ClientApp: one privcal client step per ``query`` message.

Node configuration (``flower-supernode --node-config``): ``data`` (``.npz`` with ``logits`` and
``labels``), optional ``ledger`` (SQLite path of the client's
:class:`~privcal.privacy.PrivacyOdometer`), ``budget`` and ``delta-budget`` (the client's own
epsilon and delta budget, default 1.0 and 1e-5). A client with a ledger refuses non-private runs
and charges ``(epsilon / T, delta / T)`` per round *before* replying; once its budget is spent
it refuses further rounds (the server logs the refusal and continues without it). A share of
``epsilon / T`` per round is a bookkeeping split of the run's zCDP-composed ``(epsilon,
delta)`` guarantee: after ``T`` rounds the ledger holds exactly the run's guarantee.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from privcal.federated.dp import DPConfig
from privcal.federated.flower.task import (
    DEFAULTS,
    array_of,
    load_client_data,
    method_from_config,
)
from privcal.privacy import BudgetExceededError, PrivacyOdometer, SeededNoise

app = ClientApp()


def _reply(msg: Message, payload: np.ndarray | None, info: dict[str, Any]) -> Message:
    content = RecordDict({"info": ConfigRecord(info)})
    if payload is not None:
        content["arrays"] = ArrayRecord({"payload": Array(np.ascontiguousarray(payload))})
    return Message(content, reply_to=msg)


@app.query()
def query(msg: Message, context: Context) -> Message:
    cfg = {**DEFAULTS, **dict(msg.content["config"])}
    node = context.node_config
    z, y = load_client_data(str(node["data"]))
    if str(cfg.get("task", "step")) == "source":  # seed 000 protocol: a remote DataSource
        from privcal.federated.flower.sources import answer_source_query

        return _reply(msg, None, answer_source_query(z, y, dict(node), cfg))
    if str(cfg.get("task", "step")) == "count":
        counts = np.bincount(y, minlength=z.shape[1]).astype(np.float64)
        return _reply(msg, counts, {"n": int(y.size)})
    die_at = int(node.get("die-at-round", 0))
    if die_at and int(cfg["round"]) == die_at:
        os._exit(1)  # test hook: a client killed mid-round
    fm = method_from_config(cfg)
    state = {k: array_of(msg.content["state"], k) for k in msg.content["state"]}
    eps = float(cfg["epsilon"])
    ledger = node.get("ledger")
    if ledger:
        if eps <= 0:
            return _reply(msg, None, {"refused": "this client only joins DP runs"})
        odo = PrivacyOdometer(
            float(node.get("budget", 1.0)),
            ledger=str(ledger),
            delta_budget=float(node.get("delta-budget", 1e-5)),
            name=str(node.get("name", "client")),
        )
        try:
            odo.spend(
                f"federated round {cfg['round']} ({cfg['method']})",
                eps / int(cfg["rounds"]),
                float(cfg["delta"]) / int(cfg["rounds"]),
                mechanism="gaussian (server-side, zCDP)",
            )
        except BudgetExceededError as err:
            return _reply(msg, None, {"refused": str(err)})
    payload = fm.client_step(state, z, y)
    if eps > 0:
        dp = DPConfig(
            eps,
            float(cfg["delta"]),
            int(cfg["rounds"]),
            noise=SeededNoise(0),
            clip=float(cfg["clip"]),
            clip_pos=float(cfg["clip-pos"]),
            clip_neg=float(cfg["clip-neg"]),
        )
        payload = fm.clip(payload, dp)
    return _reply(msg, np.asarray(payload, dtype=np.float64), {"n": int(y.size)})

"""Flower ClientApp: one privcal client step per ``query`` message.

Node configuration (``flower-supernode --node-config``): ``data`` (``.npz`` with ``logits`` and
``labels``), optional ``ledger`` (SQLite path of the client's
:class:`~privcal.privacy.PrivacyOdometer`), ``budget`` and ``delta-budget`` (the client's own
epsilon and delta budget, default 1.0 and 1e-5).

What leaves the client (user-level DP, add/remove one client):

* ``task = "step"`` in a DP run: only the *clipped* payload (``arrays["payload"]``) of a round
  that the client's ledger charged first (:func:`~privcal.federated.flower.task.charge_round`);
  the server adds the noise and accounts for it. No example count, no metadata of its data.
* ``task = "step"`` without DP: the exact payload (such a run claims no privacy); clients with
  a ledger refuse it.
* ``task = "count"``: the exact class counts, answered **only** in runs without DP (the server
  needs them for Sec. 4.1 weighting; a DP run weights from the noisy histograms, App. B.5) and
  never by a client with a ledger.
* ``task = "source"``: seed 000's DataSource queries, each charged by its own ledger
  (:mod:`privcal.federated.flower.sources`).
* A refusal: ``info["refused"]``, a reason that depends on the client's budget, not its data.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from privcal.federated.flower.task import (
    DEFAULTS,
    array_of,
    charge_round,
    client_payload,
    load_client_data,
    method_from_config,
)

app = ClientApp()


def _payload_reply(msg: Message, payload: np.ndarray) -> Message:
    arrays = ArrayRecord({"payload": Array(np.ascontiguousarray(payload, dtype=np.float64))})
    return Message(RecordDict({"arrays": arrays}), reply_to=msg)


def _info_reply(msg: Message, info: dict[str, Any]) -> Message:
    return Message(RecordDict({"info": ConfigRecord(info)}), reply_to=msg)


@app.query()
def query(msg: Message, context: Context) -> Message:
    cfg = {**DEFAULTS, **dict(msg.content["config"])}
    node = dict(context.node_config)
    task = str(cfg.get("task", "step"))
    if task == "source":  # seed 000 protocol: a remote DataSource
        from privcal.federated.flower.sources import answer_source_query

        z, y = load_client_data(str(node["data"]))
        return _info_reply(msg, answer_source_query(z, y, node, cfg))
    if task == "count":
        if float(cfg["epsilon"]) > 0 or node.get("ledger"):
            return _info_reply(msg, {"refused": "class counts are only sent in runs without DP"})
        z, y = load_client_data(str(node["data"]))
        return _payload_reply(msg, np.bincount(y, minlength=z.shape[1]).astype(np.float64))
    die_at = int(node.get("die-at-round", 0))
    if die_at and int(cfg["round"]) == die_at:
        os._exit(1)  # test hook: a client killed mid-round
    refusal = charge_round(node, cfg)  # before the data is read
    if refusal is not None:
        return _info_reply(msg, {"refused": refusal})
    z, y = load_client_data(str(node["data"]))
    state = {k: array_of(msg.content["state"], k) for k in msg.content["state"]}
    return _payload_reply(msg, client_payload(method_from_config(cfg), state, z, y, cfg))

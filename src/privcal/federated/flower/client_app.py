"""Flower ClientApp: one privcal client step per ``query`` message.

Node configuration (``flower-supernode --node-config``): ``data`` (``.npz`` with ``logits`` and
``labels``), optional ``ledger`` (SQLite path of the client's
:class:`~privcal.privacy.PrivacyOdometer`), ``budget`` and ``delta-budget`` (the client's own
epsilon and delta budget, default 1.0 and 1e-5).

What leaves the client (user-level DP, add/remove one client):

* ``task = "step"`` in a DP run: only the *clipped* payload (``arrays["payload"]``) of a round
  that the client's ledger charged first (:func:`~privcal.federated.flower.task.charge_round`);
  the server adds the noise and accounts for it. No example count, no metadata of its data.
* ``task = "step"`` without DP: the exact payload (such a run claims no privacy), only from a
  client whose policy accepts ``"none"`` (never one with a ledger).
* A conformal method uses at most ``row-cap`` of the client's rows, drawn by the client's own
  seed (:func:`~privcal.federated.flower.task.client_seed`), so the server cannot pick them.
* Every ``step`` is first checked against the client's own privacy policy
  (:class:`~privcal.federated.policy.ClientPolicy`): a run it refuses is refused before the
  data is read, and nothing is charged. Then the width of its logits (the model's output size)
  is checked against the run's ``n-classes``, before the round is charged.
* ``task = "count"``: the exact class counts, answered **only** in runs without DP (the server
  needs them for Sec. 4.1 weighting; a DP run weights from the noisy histograms, App. B.5) and
  only by a client whose policy accepts ``"none"``.
* ``task = "source"``: seed 000's DataSource queries, each charged by its own ledger
  (:mod:`privcal.federated.flower.sources`).
* ``task = "join"`` (round 0, before any round): the client checks the run against its policy,
  its logits' width against ``n-classes`` and, with a ledger, the run's whole cost against
  what its ledger has left; it answers ``joined`` or a refusal, and shows the plan and its cost
  on its own console (:func:`~privcal.federated.flower.task.join_answer`).
* ``task = "end"``: the run is over; the reply is empty (``info["ok"]``). The client checks
  the release on its *own* data (:func:`end_locally`) and writes the result only to its own
  ``status`` file, which ``privcal federate client`` shows before it exits. Nothing of the
  check is sent.
* A refusal: ``info["refused"]``, a reason that depends on the client's budget, not its data.

Progress (``status`` file, local only): one line per round (answered, or refused and why).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from privcal.federated.flower.task import (
    array_of,
    charge_round,
    client_data,
    client_node,
    client_payload,
    composed_epsilon,
    join_answer,
    method_from_config,
    round_refusal,
    rounds_answered,
    run_terms,
    server_state,
    width_refusal,
    write_status,
)
from privcal.federated.flower.transcript import transcript_mod
from privcal.federated.policy import ClientPolicy

#: The end line of a node the server did not take into the run (:func:`end_locally`).
WITHOUT_THIS_CLIENT = (
    "the run ended without this client (the server did not take it into the run, and it "
    "answered no round of it)"
)

#: Every reply goes out through :func:`~privcal.federated.flower.transcript.transcript_mod`.
app = ClientApp(mods=[transcript_mod])


def _payload_reply(msg: Message, payload: np.ndarray) -> Message:
    arrays = ArrayRecord({"payload": Array(np.ascontiguousarray(payload, dtype=np.float64))})
    return Message(RecordDict({"arrays": arrays}), reply_to=msg)


def _info_reply(msg: Message, info: dict[str, Any]) -> Message:
    return Message(RecordDict({"info": ConfigRecord(info)}), reply_to=msg)


def query(msg: Message, context: Context) -> Message:
    cfg, refusal = run_terms(dict(msg.content["config"]), context.run_config)
    node = client_node(context.node_config, context.run_config)
    task = str(cfg.get("task", "step"))
    if refusal is None and cfg["aggregation"] == "distributed" and task != "end":
        refusal = (
            "the run asks for distributed aggregation, but this client runs without SecAgg+ "
            "(secagg = false): it would send its payload with no noise share for the server to "
            "read alone"
        )
    if refusal is not None:
        write_status(node, f"{task}: refused ({refusal})")
        return _info_reply(msg, {"refused": refusal})
    if task == "source":  # seed 000 protocol: a remote DataSource
        from privcal.federated.flower.sources import answer_source_query, source_refusal

        refusal = source_refusal(node, cfg, int(context.run_id))  # before the data is read
        if refusal is not None:
            write_status(node, f"query {cfg.get('query')}: refused ({refusal})")
            return _info_reply(msg, {"refused": refusal})
        z, y = client_data(node, context.run_config)
        return _info_reply(msg, answer_source_query(z, y, node, cfg, int(context.run_id)))
    if task == "join":
        return _info_reply(msg, join_answer(node, cfg, context.run_config, int(context.run_id)))
    if task == "end":
        end_locally(node, context, cfg)
        return _info_reply(msg, {"ok": True})
    if task == "count":
        if float(cfg["epsilon"]) > 0:
            return _info_reply(msg, {"refused": "class counts are only sent in runs without DP"})
        refusal = ClientPolicy.from_node(node).refusal(cfg)  # a run without DP: "none"
        if refusal is not None:
            write_status(node, f"class counts: refused ({refusal})")
            return _info_reply(msg, {"refused": refusal})
        z, y = client_data(node, context.run_config)
        return _payload_reply(msg, np.bincount(y, minlength=z.shape[1]).astype(np.float64))
    die_at = int(node.get("die-at-round", 0))
    if die_at and int(cfg["round"]) == die_at:  # test hook: a client that crashes mid-round
        raise RuntimeError(f"die-at-round={die_at}: this client crashes in round {die_at}")
    # before the data is read: the round's terms and state; the policy; then the logits' width
    # (the model's); a round of this run, once; the ledger
    sent = {k: array_of(msg.content["state"], k) for k in msg.content["state"]}
    try:
        fm = method_from_config(cfg, context)  # a conformal method: this client's row seed
        state = server_state(fm, sent, int(cfg["n-classes"]), cfg)
    except (ValueError, TypeError) as err:
        refusal = str(err)
    else:
        refusal = (  # the policy first: a run it refuses is refused before the data is read
            ClientPolicy.from_node(node).refusal(cfg)
            or width_refusal(node, context.run_config, cfg)
            or round_refusal(context, cfg)
            or charge_round(node, cfg, int(context.run_id))
        )
    rnd = f"round {cfg['round']}/{cfg['rounds']}"
    if refusal is not None:
        write_status(node, f"{rnd}: refused ({refusal})")
        return _info_reply(msg, {"refused": refusal})
    z, y = client_data(node, context.run_config)
    reply = _payload_reply(msg, client_payload(fm, state, z, y, cfg))
    write_status(node, answered_line(node, cfg))
    return reply


#: What the server learns of a round that failed on a client: this text, whatever the error.
FAILED_ROUND = "the round failed on this client; why is on its own console only"


def _failed_round(fn: Any) -> Any:
    """``fn`` (:func:`query`), with a round that raises (this client's data file gone or
    damaged mid-run) shown on this client's console as ``round r/T: failed (why)``; the server
    gets a failed reply whose text is :data:`FAILED_ROUND` (the client ends with status 1).
    The error's own text may carry the client's paths or values of its data: it stays here."""

    def run(msg: Message, context: Context) -> Message:
        try:
            return fn(msg, context)
        except Exception as err:
            cfg: dict[str, Any] = dict(msg.content["config"]) if "config" in msg.content else {}
            if "round" in cfg and str(cfg.get("task", "step")) == "step":
                node = client_node(context.node_config, context.run_config)
                rnd = f"round {int(cfg['round'])}/{int(cfg.get('rounds', 0))}"
                write_status(node, f"{rnd}: failed ({type(err).__name__}: {err})")
            raise RuntimeError(FAILED_ROUND) from None

    return run


app.query()(_failed_round(query))


def answered_line(node: dict[str, Any], cfg: dict[str, Any]) -> str:
    """A client's status line for a round it answered; with a ledger, what it was charged
    (``node["charged"]``, set by :func:`~privcal.federated.flower.task.charge_round`) and the
    run's composed epsilon so far."""
    rnd = f"round {cfg['round']}/{cfg['rounds']}"
    if not node.get("ledger"):
        return f"{rnd}: answered (sent)"
    return (
        f"{rnd}: answered (charged epsilon {node['charged']:.3g} to the ledger: the run's "
        f"composed epsilon is {composed_epsilon(cfg, int(cfg['round'])):.3g} of "
        f"{float(cfg['epsilon']):g} after {rnd})"
    )


def end_locally(node: dict[str, Any], context: Context, cfg: dict[str, Any]) -> None:
    """The server's end of the run (``task = "end"``), shown on this client's console only.

    A run that released a calibrator sends it (``calibrator``): the client checks it against
    its uncalibrated logits on its own data. A run that released prediction sets sends them
    (``sets``): the client checks their coverage and mean size on its own data
    (:func:`~privcal.metrics.compare.check_sets`). Nothing of either check is sent. A
    run the server stopped before its release (interrupted, or too few clients joined) sends
    ``stopped`` with the reason instead. The end says whether the server took this node into
    the run (``in-run``): a node it did not take that answered no round of the run says so in
    its end line (:func:`took_part`).

    The server chooses what it sends here, as often as it likes, and nothing is charged for it:
    a check that fails (a calibrator whose probabilities overflow on some rows) is shown on
    this console only, never raised, so that the reply is the same whatever the client's data.
    """
    if not node.get("status"):
        return
    if cfg.get("stopped"):
        write_status(node, f"end: the server stopped the run ({cfg['stopped']})")
        return
    import json

    from privcal.calibrators import calibrator_from_dict
    from privcal.federated.methods.conformal import FederatedConformalSets
    from privcal.metrics.compare import check_sets, compare_uncalibrated

    try:
        z, y = client_data(node, context.run_config)
        if cfg.get("sets"):
            sets = FederatedConformalSets.from_dict(json.loads(str(cfg["sets"])))
            summary = check_sets(sets, z, y)["summary"]
        else:
            cal = calibrator_from_dict(json.loads(str(cfg["calibrator"])))
            summary = compare_uncalibrated(cal, z, y)["summary"]
    except Exception as err:  # any error here depends on the data: it stays on this node
        summary = f"failed ({type(err).__name__}: {err})"
    write_status(node, f"check on this client's data: {summary}")
    ended = "the run is over" if took_part(context, cfg) else WITHOUT_THIS_CLIENT
    write_status(node, f"end: {ended}")


def took_part(context: Context, cfg: Mapping[str, Any]) -> bool:
    """Whether this client took part in the run that ``cfg`` ends: it answered a round of it (its
    own record, :func:`~privcal.federated.flower.task.rounds_answered`), or the server's end does
    not say otherwise (``in-run``).

    Only ``in-run = false``, and no round of its own, says it took no part: the server can
    neither make a client that answered a round say it took none, nor fail the client's end
    with a malformed value (read as no word from the server).
    """
    return bool(rounds_answered(context)) or cfg.get("in-run") is not False

"""In-process Flower federation: privcal's ServerApp and ClientApp in one Python process.

:class:`LocalGrid` is a :class:`flwr.serverapp.Grid` that hands every message straight to a
ClientApp object (``client_app.app``, or the SecAgg+ ``secagg.client`` with its mods) with that
node's :class:`flwr.app.Context`, and returns the reply. The server and client code are the
deployed ones, message for message (the same ``Message`` / ``RecordDict`` objects, the same
error replies when a client raises); only the transport (SuperLink, SuperNodes, one
``flwr-clientapp`` process per message) is left out. A round therefore costs the clients'
computation plus microseconds per message, against seconds per message over SuperNodes,
where Flower 1.41 starts a fresh ``flwr-clientapp`` process (which imports privcal) for every
message and each SuperNode polls the SuperLink every 3 s when idle.

Use it for local experiments, tests and benchmarks (:func:`run_local`); a real federation
across machines uses :mod:`privcal.federated.flower.deploy` (``privcal federate``). Nothing here
is a privacy boundary: all clients' data live in the one process.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from copy import deepcopy
from typing import Any

from flwr.app import Context, Error, Message, RecordDict
from flwr.common.constant import SUPERLINK_NODE_ID, ErrorCode
from flwr.serverapp import Grid
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity

from privcal.federated.flower.task import DEFAULTS

__all__ = ["LocalGrid", "run_local"]


@contextmanager
def _identity(run_id: int, node_id: int) -> Iterator[None]:
    """Set Flower's per-process task identity (what ``Message`` stamps) for a block."""
    saved = (TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id)
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = run_id, run_id, node_id
    try:
        yield
    finally:
        TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = saved


class LocalGrid(Grid):
    """A Grid whose nodes are ClientApp calls in this process.

    Parameters
    ----------
    client_app : flwr.clientapp.ClientApp
        The app every node runs (``privcal.federated.flower.client_app.app``).
    node_configs : sequence of mapping
        One node configuration per node (what ``flower-supernode --node-config`` holds:
        ``data``, ``ledger``, ``budget`` ...). Node ids are ``2, 3, ...`` (1 is the SuperLink's).
    run_config : mapping
        The run configuration the clients see (``context.run_config``).
    """

    def __init__(
        self,
        client_app: Any,
        node_configs: Sequence[Mapping[str, Any]],
        run_config: Mapping[str, Any],
        run_id: int = 1,
    ) -> None:
        self.client_app = client_app
        self._run = Run.create_empty(run_id)
        self.contexts = {
            SUPERLINK_NODE_ID + 1 + k: Context(
                run_id=run_id,
                node_id=SUPERLINK_NODE_ID + 1 + k,
                node_config=dict(cfg),
                state=RecordDict(),  # kept across messages (SecAgg+ keeps its keys here)
                run_config=dict(run_config),
            )
            for k, cfg in enumerate(node_configs)
        }
        self._replies: dict[str, Message] = {}
        self._ids = itertools.count(1)

    def set_run(self, run: Run) -> None:
        self._run = run

    @property
    def run(self) -> Run:
        return self._run

    def create_message(
        self,
        content: RecordDict,
        message_type: str,
        dst_node_id: int,
        group_id: str,
        ttl: float | None = None,
    ) -> Message:
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> Iterable[int]:
        return list(self.contexts)

    def _deliver(self, msg: Message) -> Message:
        """One node's reply, or the error reply Flower sends when a ClientApp raises.

        The node gets its own copy of the message, as over the wire (mods edit the content).
        """
        ctx = self.contexts[msg.metadata.dst_node_id]
        msg = deepcopy(msg)
        with _identity(self._run.run_id, ctx.node_id):
            try:
                reply = self.client_app(msg, ctx)
            except Exception as err:
                reason = f"{type(err)}:<'{err}'>"
                code = ErrorCode.CLIENT_APP_RAISED_EXCEPTION
                reply = Message(Error(code, reason), reply_to=msg)
        reply.metadata.__dict__["_src_node_id"] = ctx.node_id
        return reply

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for msg in messages:
            md = msg.metadata.__dict__
            md["_run_id"] = self._run.run_id
            md["_src_node_id"] = SUPERLINK_NODE_ID
            md["_message_id"] = f"local-{next(self._ids)}"
            if msg.metadata.dst_node_id not in self.contexts:
                continue
            self._replies[msg.metadata.message_id] = self._deliver(msg)
            ids.append(msg.metadata.message_id)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return [self._replies.pop(i) for i in message_ids if i in self._replies]

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        return list(self.pull_messages(self.push_messages(messages)))


def run_local(
    config: Mapping[str, Any],
    node_configs: Sequence[Mapping[str, Any]],
    grid_class: type[LocalGrid] = LocalGrid,
) -> float:
    """Run privcal's Flower ServerApp over in-process nodes; return the wall-clock seconds.

    Parameters
    ----------
    config : mapping
        Run configuration (keys of :data:`~privcal.federated.flower.task.DEFAULTS`; ``secagg``
        selects the SecAgg+ apps). ``num-nodes`` defaults to ``len(node_configs)``.
    node_configs : sequence of mapping
        One node configuration per client (``data`` and optionally ``ledger``, ``budget``).
    grid_class : LocalGrid subclass, default LocalGrid
        The grid the run goes over (tests pass one whose nodes stop answering mid-run).

    Returns
    -------
    float
        Seconds the run took (outputs go to ``config["out-dir"]`` as in a deployed run).
    """
    cfg = {**DEFAULTS, "num-nodes": len(node_configs), **config}
    if cfg["secagg"]:
        from privcal.federated.flower.secagg import client, server
    else:
        from privcal.federated.flower.client_app import app as client
        from privcal.federated.flower.server_app import app as server
    grid = grid_class(client, node_configs, cfg)
    ctx = Context(
        run_id=1, node_id=SUPERLINK_NODE_ID, node_config={}, state=RecordDict(), run_config=cfg
    )
    t0 = time.perf_counter()
    with _identity(1, SUPERLINK_NODE_ID):
        server(grid, ctx)
    return time.perf_counter() - t0

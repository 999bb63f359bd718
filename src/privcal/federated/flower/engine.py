"""One linear pass for Flower's Simulation Engine's message dispatch (Flower 1.41).

Flower's Simulation Engine (``flwr-simulation``, ``flwr.server.superlink.fleet.vce``) hands the
ServerApp's messages to the ClientApp workers with a thread that, every 0.1 s, calls
``state.get_message_ins(node_id, limit=1)`` once per simulated node
(``vce_api.add_messages_to_queue``). The in-memory link state answers each call by walking
*every* stored message (and re-validating each one), so one sweep costs ``N x M`` message checks
for ``N`` nodes and ``M`` stored messages: with ``N = M = 1000`` about 8-17 s on the 2-core
build machine, with ``N = M = 10^4`` many minutes per sweep (bench/RESULTS.md). A federation of
thousands of clients then spends its time in that loop, not in the clients.

:func:`patch_dispatch` replaces that one function with :func:`add_messages_to_queue`, which
does the same job in one pass over the stored messages per sweep: the undelivered messages
addressed to the engine's nodes, validated by the link state's own check (expired or
out-of-federation messages are dropped as Flower drops them), at most one per node per sweep,
marked delivered with Flower's timestamp, in the order the ServerApp pushed them. Nothing else
of the engine changes (the workers, the Ray backend, the replies, the ServerApp's Grid). It is
applied only inside a process where Flower's engine module is already loaded (the
``flwr-simulation`` process, which loads privcal's ClientApp before it starts the dispatch
thread) and never when ``PRIVCAL_STOCK_SIMULATION_ENGINE=1`` (bench/bench_flower.py measures
the stock engine that way).
"""

from __future__ import annotations

import os
import sys
from typing import Any

__all__ = ["add_messages_to_queue", "patch_dispatch"]

_MODULE = "flwr.server.superlink.fleet.vce.vce_api"


def add_messages_to_queue(state: Any, queue: Any, nodes_mapping: Any, f_stop: Any) -> None:
    """Flower's dispatch loop (``vce_api.add_messages_to_queue``), one pass per sweep."""
    from flwr.server.superlink.linkstate import InMemoryLinkState

    if not isinstance(state, InMemoryLinkState):  # another link state: Flower's own loop
        sys.modules[_MODULE].__dict__["_privcal_stock_dispatch"](
            state, queue, nodes_mapping, f_stop
        )
        return
    while not f_stop.is_set():
        for msg in undelivered(state, nodes_mapping):
            queue.put(msg)
        f_stop.wait(0.1)


def undelivered(state: Any, nodes: Any) -> list[Any]:
    """The messages one stock sweep would hand out: per node its first undelivered message."""
    from flwr.supercore.date import now

    with state.lock:
        ids = [
            mid
            for mid, m in state.message_ins_store.items()
            if m.metadata.delivered_at == "" and m.metadata.dst_node_id in nodes
        ]
        state._check_stored_messages(set(ids))  # Flower's expiry / federation check
        out, seen = [], set()
        for mid in ids:
            msg = state.message_ins_store.get(mid)
            if msg is None or msg.metadata.dst_node_id in seen:
                continue
            seen.add(msg.metadata.dst_node_id)
            out.append(msg)
        delivered_at = now().isoformat()
        for msg in out:
            msg.metadata.delivered_at = delivered_at
    return out


def patch_dispatch() -> bool:
    """Install :func:`add_messages_to_queue` in a loaded Simulation Engine; True if installed."""
    module = sys.modules.get(_MODULE)
    if module is None or os.environ.get("PRIVCAL_STOCK_SIMULATION_ENGINE") == "1":
        return False
    names = module.__dict__
    if names.get("add_messages_to_queue") is not add_messages_to_queue:
        names.setdefault("_privcal_stock_dispatch", names["add_messages_to_queue"])
        names["add_messages_to_queue"] = add_messages_to_queue
    return True

"""The server's message exchange with its nodes: push a batch, poll for the replies.

One module that both the ServerApp (:mod:`~privcal.federated.flower.server_app`) and the remote
data sources (:mod:`~privcal.federated.flower.sources`) import, so neither imports the other.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from typing import Any

from flwr.app import Message
from flwr.serverapp import Grid

__all__ = ["POLL_S", "PolledGrid", "exchange", "send_and_receive"]

#: Seconds between the server's polls for replies (Flower's ``Grid.send_and_receive`` waits
#: 3 s between polls, which would dominate a round).
POLL_S = 0.05


def send_and_receive(grid: Grid, msgs: list[Message], timeout: float) -> list[Message]:
    """Push ``msgs`` and collect the replies that arrive within ``timeout`` seconds.

    Polls every :data:`POLL_S` seconds, or, when a poll itself takes long (a pull checks every
    outstanding message: with thousands of clients in Flower's Simulation Engine it costs tens
    of milliseconds and holds the link state's lock), waits twice the last poll's duration, so
    that polling takes at most a third of the round.
    """
    return exchange(grid, msgs, timeout)[1]


def exchange(
    grid: Grid, msgs: list[Message], timeout: float
) -> tuple[dict[str, int], list[Message]]:
    """:func:`send_and_receive`, also returning ``{message id: destination node}``."""
    pushed = set(grid.push_messages(msgs)) - {None}
    # both Flower's grids (and privcal's local one) set each message's id when they push it
    dst = {
        m.metadata.message_id: int(m.metadata.dst_node_id)
        for m in msgs
        if m.metadata.message_id in pushed
    }
    ids = set(dst)
    deadline = time.monotonic() + timeout
    replies: list[Message] = []
    while ids:
        t0 = time.monotonic()
        got = list(grid.pull_messages(ids))
        replies += got
        ids -= {m.metadata.reply_to_message_id for m in got}
        if not ids or time.monotonic() > deadline:
            break
        time.sleep(max(POLL_S, 2.0 * (time.monotonic() - t0)))
    return dst, replies


class PolledGrid:
    """``grid`` whose ``send_and_receive`` is :func:`send_and_receive` (a poll every
    :data:`POLL_S` seconds) instead of Flower's fixed 3 s sleep between pulls; every other
    attribute is ``grid``'s own.

    For Flower's own workflows, which call ``grid.send_and_receive``: SecAgg+'s four stages do,
    and at 3 s each the sleeps alone made a round last 12 s.
    """

    def __init__(self, grid: Grid) -> None:
        self._grid = grid

    def __getattr__(self, name: str) -> Any:
        return getattr(self._grid, name)

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> list[Message]:
        """Flower's ``Grid.send_and_receive`` (``timeout=None``: wait for every reply)."""
        wait_s = math.inf if timeout is None else timeout
        return send_and_receive(self._grid, list(messages), wait_s)

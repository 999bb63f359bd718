"""The server's message exchange with its nodes: push a batch, poll for the replies.

One module that both the ServerApp (:mod:`~privcal.federated.flower.server_app`) and the remote
data sources (:mod:`~privcal.federated.flower.sources`) import, so neither imports the other.

A reply whose upload never completed ends the exchange at its deadline, not minutes later.
Flower (1.41) stores a reply's message when the node pushes it and the message's objects as
they arrive; a node killed between the two leaves a reply whose objects never come. The
ServerApp's ``Grid.pull_messages`` hands such a reply to Flower's ``pull_objects``, which
retries the missing object for up to 500 tries or 2 hours, backing off to 10 s; the SuperLink
gives up on the upload only after its object-push session expires (180 s). A SecAgg+ client
killed as it answered held its server in that round for three minutes. :func:`exchange`
therefore bounds ``pull_objects`` by its own deadline (:func:`bounded_pull_objects`, installed
into Flower's ``HttpGrid`` on import: it has no parameter for it), so such a reply arrives as
Flower's ``MESSAGE_UNAVAILABLE`` error within about a second of the round's timeout, and the
node counts as a dropout.
"""

from __future__ import annotations

import contextvars
import math
import time
from collections.abc import Callable, Iterable
from typing import Any

from flwr.app import Message
from flwr.serverapp import Grid
from flwr.supercore.inflatable.inflatable_utils import pull_objects as _flower_pull_objects
from flwr.superlink.grid import http_grid

__all__ = ["POLL_S", "PolledGrid", "bounded_pull_objects", "exchange", "send_and_receive"]

#: Seconds between the server's polls for replies (Flower's ``Grid.send_and_receive`` waits
#: 3 s between polls, which would dominate a round).
POLL_S = 0.05

#: The deadline (``time.monotonic()``) of the exchange running in this context; ``inf`` outside.
_DEADLINE: contextvars.ContextVar[float] = contextvars.ContextVar("deadline", default=math.inf)

#: Longest wait between two tries of an object inside an exchange (Flower's default: 10 s).
PULL_BACKOFF_CAP_S = 1.0

#: Seconds past an exchange's deadline that a reply's objects may still take to arrive: the
#: SuperLink lists a reply once its message is pushed, before its objects, and hands it over
#: only once (a healthy reply pulled just before the deadline must not be lost).
PULL_GRACE_S = 1.0


def bounded_pull_objects(
    object_ids: list[str], pull_object_fn: Callable[[str], bytes], **kwargs: Any
) -> dict[str, bytes]:
    """Flower's ``pull_objects``, giving up at the running exchange's deadline.

    Inside :func:`exchange`, ``max_time`` is the time left to its deadline plus
    :data:`PULL_GRACE_S`, tries are not counted, and the backoff between them is at most
    :data:`PULL_BACKOFF_CAP_S`; an object still missing then raises Flower's
    ``ObjectPullError``, which ``HttpGrid.pull_messages`` turns into an error reply. Outside an
    exchange it is Flower's own function, unchanged.
    """
    left = _DEADLINE.get() - time.monotonic()
    if math.isfinite(left):
        kwargs.setdefault("max_time", max(left, 0.0) + PULL_GRACE_S)
        kwargs.setdefault("max_tries_per_object", None)
        kwargs.setdefault("backoff_cap", PULL_BACKOFF_CAP_S)
    return _flower_pull_objects(object_ids, pull_object_fn, **kwargs)


http_grid.pull_objects = bounded_pull_objects  # module docstring: no parameter sets this bound


def send_and_receive(grid: Grid, msgs: list[Message], timeout: float) -> list[Message]:
    """Push ``msgs`` and collect the replies that arrive within ``timeout`` seconds.

    Polls every :data:`POLL_S` seconds, or, when a poll itself takes long (a pull checks every
    outstanding message: with thousands of clients in Flower's Simulation Engine it costs tens
    of milliseconds and holds the link state's lock), waits twice the last poll's duration, so
    that polling takes at most a third of the round. A reply whose upload is still incomplete at
    the deadline comes back as Flower's ``MESSAGE_UNAVAILABLE`` error reply (module docstring).
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
    token = _DEADLINE.set(deadline)
    try:
        while ids:
            t0 = time.monotonic()
            got = list(grid.pull_messages(ids))
            replies += got
            ids -= {m.metadata.reply_to_message_id for m in got}
            now = time.monotonic()
            # the last pull is one that began after the deadline: a pull that ran past it (held
            # by a reply whose upload stalled) did not see the replies that came meanwhile
            if not ids or t0 > deadline:
                break
            if now <= deadline:
                time.sleep(max(POLL_S, 2.0 * (now - t0)))
    finally:
        _DEADLINE.reset(token)
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

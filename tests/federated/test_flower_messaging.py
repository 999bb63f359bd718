"""The server's message exchange: :class:`~privcal.federated.flower.messaging.PolledGrid` gives
Flower's own workflows (SecAgg+'s four stages) privcal's short poll for replies."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("flwr")

from privcal.federated.flower.messaging import POLL_S, PolledGrid

pytestmark = pytest.mark.integration


class _SlowGrid:
    """Answers every pushed message from the ``answer_on``-th pull on (a reply that takes a
    few polls); counts its pulls."""

    def __init__(self, answer_on: int) -> None:
        self.answer_on, self.pulls, self.ids = answer_on, 0, []
        self.node_ids = [3, 4]

    def get_node_ids(self) -> list[int]:
        return self.node_ids

    def push_messages(self, messages: Any) -> list[str]:
        self.ids = []
        for k, m in enumerate(messages):
            m.metadata.message_id = f"m{k}"
            self.ids.append(m.metadata.message_id)
        return list(self.ids)

    def pull_messages(self, ids: Any) -> list[Any]:
        self.pulls += 1
        if self.pulls < self.answer_on:
            return []
        return [SimpleNamespace(metadata=SimpleNamespace(reply_to_message_id=i)) for i in ids]

    def send_and_receive(self, *_: Any, **__: Any) -> list[Any]:
        raise AssertionError("Flower's own send_and_receive (a 3 s sleep per poll) was called")


def _messages(k: int) -> list[Any]:
    return [SimpleNamespace(metadata=SimpleNamespace(dst_node_id=3 + j)) for j in range(k)]


@pytest.mark.parametrize("timeout", [None, 30.0])
def test_polled_grid_returns_every_reply_within_a_few_polls(timeout: float | None) -> None:
    grid = _SlowGrid(answer_on=3)
    t0 = time.monotonic()
    replies = PolledGrid(grid).send_and_receive(_messages(2), timeout=timeout)  # type: ignore[arg-type]
    elapsed = time.monotonic() - t0
    assert sorted(r.metadata.reply_to_message_id for r in replies) == ["m0", "m1"]
    assert grid.pulls == 3
    assert elapsed < 20 * POLL_S  # two polls' wait, far from Flower's 2 x 3 s


def test_polled_grid_gives_up_at_its_timeout_and_is_the_grid_otherwise() -> None:
    grid = _SlowGrid(answer_on=10**9)  # never answers
    polled = PolledGrid(grid)  # type: ignore[arg-type]
    t0 = time.monotonic()
    assert polled.send_and_receive(_messages(2), timeout=0.3) == []
    assert 0.3 <= time.monotonic() - t0 < 2.0
    assert polled.get_node_ids() == [3, 4]  # every other attribute is the grid's own


class _StalledUploadGrid(_SlowGrid):
    """A reply that the SuperLink has, whose objects never arrive (its node was killed during
    the upload): pulled as Flower's ``HttpGrid.pull_messages`` pulls one, through the
    ``pull_objects`` of Flower's module, whose ``ObjectPullError`` becomes an error reply."""

    def pull_messages(self, ids: Any) -> list[Any]:
        from flwr.supercore.inflatable.inflatable_utils import (
            ObjectPullError,
            ObjectUnavailableError,
        )
        from flwr.superlink.grid import http_grid

        def never(object_id: str) -> bytes:
            self.pulls += 1
            raise ObjectUnavailableError(object_id)

        try:
            http_grid.pull_objects(["object"], never)
        except ObjectPullError:
            return [SimpleNamespace(metadata=SimpleNamespace(reply_to_message_id=i)) for i in ids]
        raise AssertionError("an object that never arrived was pulled")


@pytest.mark.timeout(30)
def test_a_reply_whose_upload_never_completes_ends_the_exchange_at_its_deadline() -> None:
    """Flower retries such an object for 180 s or more (up to 2 h, backing off to 10 s); the
    exchange's deadline bounds it: one error reply for the message within a second or so of
    the timeout (the backoff, at most PULL_BACKOFF_CAP_S)."""
    from privcal.federated.flower.messaging import PULL_BACKOFF_CAP_S

    grid = _StalledUploadGrid(answer_on=1)
    t0 = time.monotonic()
    replies = PolledGrid(grid).send_and_receive(_messages(1), timeout=0.5)  # type: ignore[arg-type]
    elapsed = time.monotonic() - t0
    assert [r.metadata.reply_to_message_id for r in replies] == ["m0"]
    assert grid.pulls >= 2  # retried until the deadline, then given up
    assert 0.5 <= elapsed < 0.5 + 1.2 * PULL_BACKOFF_CAP_S + 1.0

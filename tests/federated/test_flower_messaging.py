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


class _Link:
    """The SuperLink's runtime API as Flower's ``HttpGrid`` calls it, with a reply per pushed
    message ``m<k>``: ``listed[k]`` seconds after the start the link lists it (a node pushed
    it; ``PullMessages`` hands it over once), ``objects[k]`` seconds after the start its
    objects have arrived (``None``: never, its node was killed during the upload)."""

    def __init__(self, listed: list[float], objects: list[float | None]) -> None:
        from flwr.app import ConfigRecord, Message, RecordDict
        from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects

        from privcal.federated.flower.local import _identity

        self.t0, self.objects, self.replies, self.contents = time.monotonic(), {}, {}, {}
        for k, (at, ready) in enumerate(zip(listed, objects, strict=True)):
            with _identity(1, 1):
                ins = Message(RecordDict(), dst_node_id=2 + k, message_type="train")
            ins.metadata.__dict__["_message_id"] = f"m{k}"
            with _identity(1, 2 + k):
                reply = Message(RecordDict({"k": ConfigRecord({"k": k})}), reply_to=ins)
            reply.metadata.__dict__["_message_id"] = reply.object_id
            self.replies[f"m{k}"] = (at, reply)
            for oid, obj in get_all_nested_objects(reply).items():
                self.contents[oid], self.objects[oid] = obj.deflate(), ready

    def _now(self) -> float:
        return time.monotonic() - self.t0

    def PullMessages(self, request: Any) -> Any:  # Flower's RPC names
        from flwr.common.serde import message_to_proto
        from flwr.proto.runtime_pb2 import PullAppMessagesResponse
        from flwr.supercore.inflatable.inflatable_object import get_object_tree

        out = [i for i in request.message_ids if i in self.replies]
        out = [i for i in out if self.replies[i][0] <= self._now()]
        replies = [self.replies.pop(i)[1] for i in out]  # handed over once
        return PullAppMessagesResponse(
            messages_list=[message_to_proto(r) for r in replies],
            message_object_trees=[get_object_tree(r) for r in replies],
        )

    def PullObject(self, request: Any) -> Any:
        from flwr.proto.message_pb2 import PullObjectResponse

        ready = self.objects[request.object_id]
        if ready is None or self._now() < ready:
            return PullObjectResponse(object_found=True, object_available=False)
        content = self.contents[request.object_id]
        return PullObjectResponse(object_found=True, object_available=True, object_content=content)

    def ConfirmMessageReceived(self, request: Any) -> None:
        return None


class _HttpGridOver(_SlowGrid):
    """Pushes as :class:`_SlowGrid` does; pulls through Flower's own ``HttpGrid.pull_messages``
    against a :class:`_Link`."""

    def __init__(self, link: _Link) -> None:
        from flwr.supercore.run import Run
        from flwr.superlink.grid.http_grid import HttpGrid

        super().__init__(answer_on=1)
        self.http = HttpGrid(token="test")
        self.http._client = link  # type: ignore[assignment]
        self.http.set_run(Run.create_empty(1))

    def pull_messages(self, ids: Any) -> list[Any]:
        return list(self.http.pull_messages(ids))


def _exchange(link: _Link, k: int, timeout: float) -> tuple[dict[str, bool], float]:
    """``{message id: replied with an error}`` of an exchange of ``k`` messages, and its
    seconds."""
    t0 = time.monotonic()
    replies = PolledGrid(_HttpGridOver(link)).send_and_receive(_messages(k), timeout=timeout)  # type: ignore[arg-type]
    return {r.metadata.reply_to_message_id: r.has_error() for r in replies}, time.monotonic() - t0


@pytest.mark.timeout(30)
def test_a_reply_whose_upload_never_completes_ends_the_exchange_at_its_deadline() -> None:
    """Flower retries such an object for 180 s or more (up to 2 h, backing off to 10 s); the
    exchange's deadline bounds it: Flower's error reply for the message (its node is a
    dropout) within the grace and one backoff of the timeout."""
    from flwr.common.constant import ErrorCode

    from privcal.federated.flower.messaging import PULL_BACKOFF_CAP_S, PULL_GRACE_S

    link = _Link(listed=[0.0], objects=[None])
    grid = _HttpGridOver(link)
    t0 = time.monotonic()
    replies = PolledGrid(grid).send_and_receive(_messages(1), timeout=0.5)  # type: ignore[arg-type]
    elapsed = time.monotonic() - t0
    assert [r.metadata.reply_to_message_id for r in replies] == ["m0"]
    assert replies[0].error.code == ErrorCode.MESSAGE_UNAVAILABLE
    assert 0.5 <= elapsed < 0.5 + PULL_GRACE_S + 1.2 * PULL_BACKOFF_CAP_S + 1.0


@pytest.mark.timeout(30)
def test_a_reply_that_comes_while_a_stalled_one_holds_the_pull_is_kept() -> None:
    """The stalled reply (listed at once) holds its pull past the 2 s deadline; a survivor's
    reply listed 0.2 s in is still collected, by one more pull (it was counted as a dropout:
    a round could fall below its threshold for one killed client)."""
    link = _Link(listed=[0.0, 0.2], objects=[None, 0.2])
    got, _ = _exchange(link, 2, timeout=2.0)
    assert got == {"m0": True, "m1": False}


@pytest.mark.timeout(30)
def test_objects_that_come_just_after_the_deadline_are_still_pulled() -> None:
    """A reply the link handed over at the deadline, whose objects arrive 0.3 s later (within
    PULL_GRACE_S), is pulled: the link hands a reply over once, so giving up at the deadline
    (one try, as the bound first did) would lose a healthy client's answer."""
    from flwr.supercore.inflatable.inflatable_utils import ObjectUnavailableError

    from privcal.federated.flower import messaging

    t0 = time.monotonic()

    def arrives_at_0_3_s(object_id: str) -> bytes:
        if time.monotonic() - t0 < 0.3:
            raise ObjectUnavailableError(object_id)
        return b"content"

    token = messaging._DEADLINE.set(t0)  # inside an exchange whose deadline is now
    try:
        assert messaging.bounded_pull_objects(["o"], arrives_at_0_3_s) == {"o": b"content"}
    finally:
        messaging._DEADLINE.reset(token)

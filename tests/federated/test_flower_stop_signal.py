"""The ServerApp's Ctrl-C: a signal during a push takes effect once the push is whole.

A message pushed without its contents holds every SuperNode that received it (each retries
pulling the contents and never takes the stop message queued behind it), so the clients wait
out ``--retry-s``. These tests send the signal to the process itself from inside a fake grid's
push, as the operator's Ctrl-C would arrive.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from flwr.common.constant import ErrorCode

from privcal.federated.flower import server_app
from privcal.federated.flower.local import _identity
from privcal.federated.flower.server_app import stop_on_signal

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def _run_identity() -> Any:
    with _identity(7, 1):  # what Flower sets in a ServerApp process (Message stamps it)
        yield


class _Reply:
    def __init__(self, to: str, error: int | None) -> None:
        self.error = None if error is None else type("E", (), {"code": error, "reason": "x"})()
        self.metadata = type("M", (), {"reply_to_message_id": to, "src_node_id": 0})()

    def has_error(self) -> bool:
        return self.error is not None


class _Grid:
    """Records each push (whole or cut short) and answers every message it pushed: ``answer``
    ``"ok"``, ``"none"`` (a client that never took it: no reply) or an error code."""

    def __init__(self, signal_in_push: int | None, answer: str | int = "ok") -> None:
        self.signal_in_push = signal_in_push
        self.answer = answer
        self.pushes: list[tuple[str, bool]] = []
        self.ids: list[str] = []

    def get_node_ids(self) -> list[int]:
        return [1, 2]

    def push_messages(self, messages: Any) -> list[str]:
        msgs = list(messages)
        task = str(msgs[0].content["config"]["task"])
        self.pushes.append((task, False))
        if self.signal_in_push is not None:
            sig, self.signal_in_push = self.signal_in_push, None
            os.kill(os.getpid(), sig)  # delivered here, mid-push
        ids = [f"{task}-{k}" for k in range(len(msgs))]
        for m, mid in zip(msgs, ids, strict=True):
            m.metadata.__dict__["_message_id"] = mid
        self.pushes[-1] = (task, True)  # the push finished: every message whole
        self.ids = ids
        return ids

    def pull_messages(self, ids: Any) -> list[_Reply]:
        if self.answer == "none":
            return []
        return [_Reply(i, None if self.answer == "ok" else int(self.answer)) for i in ids]


def _round(grid: _Grid) -> None:
    from privcal.federated.flower.server_app import _query

    _query(grid, [1, 2], {}, {"task": "fit", "round": 1}, 0.2)  # type: ignore[arg-type]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_a_push_stops_the_run_after_the_push(sig: int, tmp_path: Path) -> None:
    grid, before = _Grid(signal_in_push=sig), signal.getsignal(sig)
    with pytest.raises(RuntimeError, match="stopped by its operator"):
        with stop_on_signal(grid, {"out-dir": str(tmp_path)}):  # type: ignore[arg-type]
            _round(grid)
            pytest.fail("the round after the signal ran")
    assert grid.pushes == [("fit", True), ("end", True)]  # the round's push whole, then the stop
    assert json.loads((tmp_path / "interrupted.json").read_text()) == {"clients_told": True}
    assert signal.getsignal(sig) == before  # the handlers are restored


@pytest.mark.parametrize(
    ("answer", "told"),
    [
        ("none", False),  # a live client that never took the stop: it waits for the server
        (int(ErrorCode.CLIENT_APP_RAISED_EXCEPTION), False),
        (int(ErrorCode.NODE_UNAVAILABLE), True),  # took it and exited before its answer left
    ],
)
def test_clients_told_means_no_client_is_left_waiting(
    tmp_path: Path, answer: int | str, told: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server_app, "STOP_WAIT_S", 0.3)  # a client that never answers
    grid = _Grid(signal_in_push=signal.SIGINT, answer=answer)
    with pytest.raises(RuntimeError, match="stopped by its operator"):
        with stop_on_signal(grid, {"out-dir": str(tmp_path)}):  # type: ignore[arg-type]
            _round(grid)
    assert json.loads((tmp_path / "interrupted.json").read_text()) == {"clients_told": told}


def test_the_grid_is_left_as_it_was() -> None:
    grid = _Grid(signal_in_push=None)
    push = grid.push_messages
    with stop_on_signal(grid, {}):  # type: ignore[arg-type]
        _round(grid)
    assert grid.push_messages == push and grid.pushes == [("fit", True)]

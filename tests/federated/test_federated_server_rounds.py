"""The ServerApp's per-round lines (issue 26): a client that leaves counts once as dropped, the
epsilon lines of server and client say what they are, and a noise-dominated FedTemp release
says so on the server's console. Runs privcal's real ServerApp and ClientApp in one process
(:class:`~privcal.federated.flower.local.LocalGrid`).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import Context, Error, Message, RecordDict
from flwr.common.constant import SUPERLINK_NODE_ID, ErrorCode

from privcal.federated.flower import client_app, server_app
from privcal.federated.flower.local import LocalGrid, _identity
from privcal.federated.flower.task import DEFAULTS
from privcal.privacy.accounting import gaussian_rho, pld_gaussian_epsilon


class LeavingGrid(LocalGrid):
    """Node ``gone`` leaves before round ``at``: from then on the SuperLink answers its
    messages with Flower's NODE_UNAVAILABLE error reply, sent from the SuperLink's own id."""

    def __init__(self, *args: Any, gone: int, at: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gone, self.at = gone, at

    def push_messages(self, messages: Any) -> Any:
        ids = []
        for msg in messages:
            cfg = dict(msg.content["config"]) if "config" in msg.content else {}
            left = msg.metadata.dst_node_id == self.gone and int(cfg.get("round", 0)) >= self.at
            left = left or (msg.metadata.dst_node_id == self.gone and cfg.get("task") == "end")
            if not left:
                ids += list(super().push_messages([msg]))
                continue
            md = msg.metadata.__dict__
            md["_run_id"], md["_src_node_id"] = self.run.run_id, SUPERLINK_NODE_ID
            md["_message_id"] = f"local-{next(self._ids)}"
            reply = Message(Error(ErrorCode.NODE_UNAVAILABLE, "node unavailable"), reply_to=msg)
            reply.metadata.__dict__["_src_node_id"] = SUPERLINK_NODE_ID
            self._replies[msg.metadata.message_id] = reply
            ids.append(msg.metadata.message_id)
        return ids


def _clients(tmp_path: Path, k: int, rows: int = 300, scale: float = 10.0) -> list[dict[str, Any]]:
    rng = np.random.default_rng(0)
    nodes = []
    for i in range(k):
        y = rng.integers(0, 10, rows)
        z = rng.normal(size=(rows, 10))
        z[np.arange(rows), y] += 1.5
        np.savez(tmp_path / f"c{i}.npz", logits=scale * z, labels=y)
        nodes.append(
            {
                "data": str(tmp_path / f"c{i}.npz"),
                "ledger": str(tmp_path / f"c{i}.sqlite"),
                "budget": 1.0,
                "status": str(tmp_path / f"c{i}.status"),
            }
        )
    return nodes


def _run(grid: LocalGrid, cfg: dict[str, Any]) -> None:
    ctx = Context(
        run_id=1, node_id=SUPERLINK_NODE_ID, node_config={}, state=RecordDict(), run_config=cfg
    )
    with _identity(1, SUPERLINK_NODE_ID):
        server_app.app(grid, ctx)


def _config(tmp_path: Path, k: int, **kw: Any) -> dict[str, Any]:
    return {
        **DEFAULTS,
        "method": "fedtemp",
        "rounds": 3,
        "num-nodes": k,
        "min-clients": 1,
        "n-classes": 10,
        "epsilon": 1.0,
        "delta": 1e-5,
        "out-dir": str(tmp_path / "out"),
        "round-timeout-s": 5.0,
        "wait-nodes-s": 1.0,
        **kw,
    }


@pytest.mark.filterwarnings("ignore::privcal.private.temperature.NoiseDominatedWarning")
def test_a_client_that_leaves_counts_once_as_dropped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = _config(tmp_path, 2)
    nodes = _clients(tmp_path, 2)
    grid = LeavingGrid(client_app.app, nodes, cfg, gone=SUPERLINK_NODE_ID + 2, at=2)
    _run(grid, cfg)
    out = capsys.readouterr().out
    assert re.search(r"round 1/3: 2 replied, 0 dropped, 0 refused", out), out
    for t in (2, 3):  # one of the two clients left: 1 replied, 1 dropped (not 2)
        assert re.search(rf"round {t}/3: 1 replied, 1 dropped, 0 refused", out), out
    # the dropped client is named by its own id, not the SuperLink's
    assert f"client {SUPERLINK_NODE_ID + 2} failed" in out
    assert f"client {SUPERLINK_NODE_ID} failed" not in out


@pytest.mark.filterwarnings("ignore::privcal.private.temperature.NoiseDominatedWarning")
def test_server_and_client_epsilon_lines_say_what_they_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = _config(tmp_path, 2)
    nodes = _clients(tmp_path, 2)
    _run(LocalGrid(client_app.app, nodes, cfg), cfg)
    out = capsys.readouterr().out
    spent = re.findall(r"epsilon spent so far (\S+) of 1 \((\d) of 3 rounds composed\)", out)
    assert [t for _, t in spent] == ["1", "2", "3"], out
    eps = [float(e) for e, _ in spent]
    assert eps[0] < eps[1] < eps[2] == pytest.approx(1.0)
    status = Path(nodes[0]["status"]).read_text()
    # independently: r of the T = 3 rounds of the server's Gaussian noise are one Gaussian with
    # (sensitivity / sigma)^2 = 2 r rho / 3, read from dp-accounting's PLD accountant
    rho = gaussian_rho(1.0, 1e-5)
    totals = [pld_gaussian_epsilon(1.0 / math.sqrt(2.0 * r * rho / 3), 1e-5) for r in (1, 2)]
    assert totals == pytest.approx([0.548, 0.801], abs=6e-4)  # 0.551, 0.802 by zCDP
    totals.append(1.0)
    charges = [totals[0], totals[1] - totals[0], totals[2] - totals[1]]
    for t, (charge, total) in enumerate(zip(charges, totals, strict=True), 1):
        assert (
            f"round {t}/3: answered (charged epsilon {charge:.3g} to the ledger: the run's "
            f"composed epsilon is {total:.3g} of 1 after round {t}/3)"
        ) in status, status


@pytest.mark.filterwarnings("ignore::privcal.privacy.InsecureNoiseWarning")
def test_a_noise_dominated_fedtemp_release_warns_on_the_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two clients at user-level epsilon 1: each clipped gradient sum is at most C_g, the
    noise std of their sum C_g s_g is about 8 C_g, so the release is T = 1 and the server's
    console says why (seeded noise, so that the test is deterministic)."""
    cfg = _config(tmp_path, 2, noise="seeded")
    nodes = _clients(tmp_path, 2, rows=200, scale=1.2)
    for node in nodes:  # each client opts in to the test's seeded noise itself
        node["allow-seeded-noise"] = True
    _run(LocalGrid(client_app.app, nodes, cfg), cfg)
    out = capsys.readouterr().out
    assert "privcal: WARNING: FedTemp under DP" in out and "falls back to T = 1" in out, out
    cal = (tmp_path / "out" / "calibrator.json").read_text()
    assert '"temperature_": 1.0' in cal and "falls back to T = 1" in cal


def test_a_stopped_client_ends_its_executor_thread_quietly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ctrl-C on ``privcal federate client`` stops the SuperNode; a task in flight then fails
    with httpx.ConnectError, which used to end the executor thread with a long traceback."""
    import threading

    import httpx

    from privcal.federated.flower import executor

    class Res:
        token = "t"

        def HasField(self, name: str) -> bool:
            return True

    class Client:
        def AcquireTask(self, request: object) -> Res:
            return Res()

        def close(self) -> None:
            pass

    stop = threading.Event()
    calls: list[str] = []

    def gone(address: str, token: str) -> None:
        calls.append(token)
        if len(calls) == 2:  # the second task: Ctrl-C lands while it runs
            stop.set()
        raise httpx.ConnectError("All connection attempts failed")

    monkeypatch.setattr(executor, "_client", lambda address, token=None: Client())
    monkeypatch.setattr(executor, "run_task", gone)
    crashed: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: crashed.append(args.exc_value))
    (thread,) = executor.serve_many(["127.0.0.1:1"], stop)
    thread.join(timeout=10)
    assert not thread.is_alive() and crashed == [] and calls == ["t", "t"]

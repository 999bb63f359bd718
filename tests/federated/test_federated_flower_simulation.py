"""The Simulation Engine path runs the audited apps on the same rows, without starting Ray.

A node of Flower's Simulation Engine carries only ``partition-id`` / ``num-partitions``; the
ClientApp reads partition ``k`` of the run config's ``partitions`` (``task.client_data``) and,
with ``ledgers``, charges client ``k``'s own ledger (``task.client_node``). Checked here:

* a simulated node's reply to round 1 is, array for array, the reply the deployed-path audit
  (``flower-server-round``, :func:`privcal.audits.federated._client_replies`) gets from the same
  ClientApp handler for a SuperNode whose ``data`` file holds the same rows; the generated app
  names the same ServerApp and ClientApp objects; a single file is split by
  ``dirichlet_partition`` exactly as ``simulate`` is given it;
* a simulated client's ledger charges ``epsilon / T`` per round and refuses past its budget;
* bad partition settings fail with a message that names the setting;
* the engine's linear dispatch (:mod:`privcal.federated.flower.engine`) hands out the messages
  Flower's own per-node sweep hands out, one per node per sweep.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import Array, ArrayRecord, ConfigRecord, Context, RecordDict

from privcal.audits import federated as audit
from privcal.federated import dirichlet_partition
from privcal.federated.flower.client_app import query
from privcal.federated.flower.task import (
    DEFAULTS,
    client_data,
    composed_epsilon,
    method_from_config,
)

CFG = {**DEFAULTS, "rounds": 2, "n-classes": 2, "num-nodes": 2, "epsilon": 1.0, "round": 1}


def _message(state: dict[str, np.ndarray], cfg: dict, node_id: int):  # type: ignore[no-untyped-def]
    arrays = ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in state.items()})
    return audit._instruction(RecordDict({"state": arrays, "config": ConfigRecord(cfg)}), node_id)


def _simulated(k: int, n: int, run_config: dict) -> Context:
    node = {"partition-id": k, "num-partitions": n}  # all Flower's engine gives a node
    return Context(
        run_id=1, node_id=k + 1, node_config=node, state=RecordDict(), run_config=run_config
    )


def test_simulated_node_replies_as_the_audited_client(tmp_path: Path) -> None:
    fm = method_from_config(CFG)
    state = fm.init(2)
    deployed = audit._client_replies(CFG, state, tmp_path)  # the audit's ClientApp replies
    folder = tmp_path / "parts"
    folder.mkdir()
    clients = (  # the audit's two clients, as _client_replies builds them
        audit._client(audit.ROWS, 0.2, int(0.8 * audit.ROWS)),
        audit._client(audit.FLOWER_ROWS, audit.FLOWER_LOGIT, int(0.6 * audit.FLOWER_ROWS)),
    )
    for k, (zk, yk) in enumerate(clients):
        np.savez(folder / f"client{k}.npz", logits=zk, labels=yk)
    run_config = {**CFG, "partitions": str(folder)}
    for k in range(2):
        # the server's messages carry the run configuration (and the round)
        reply = query(_message(state, run_config, k + 1), _simulated(k, 2, run_config))
        got = reply.content["arrays"]["payload"].numpy()
        want = deployed[k].content["arrays"]["payload"].numpy()
        assert np.array_equal(got, want)
        assert np.abs(want).max() > 0
    # the app that `flwr run` submits to the engine names these very objects
    from privcal.federated.flower.deploy import write_app

    text = (write_app(tmp_path / "app", {}) / "pyproject.toml").read_text()
    assert 'serverapp = "privcal.federated.flower.server_app:app"' in text
    assert 'clientapp = "privcal.federated.flower.client_app:app"' in text


def test_single_file_is_split_as_simulate_splits_it(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    z = rng.normal(size=(300, 3))
    y = rng.integers(0, 3, 300)
    np.savez(tmp_path / "all.npz", logits=z, labels=y)
    parts = dirichlet_partition(y, n_clients=7, beta=0.3, seed=5)
    run_config = {
        "partitions": str(tmp_path / "all.npz"),
        "partition-beta": 0.3,
        "partition-seed": 5,
    }
    for k in (0, 3, 6):
        zk, yk = client_data({"partition-id": k, "num-partitions": 7}, run_config)
        assert np.array_equal(zk, z[parts[k]]) and np.array_equal(yk, y[parts[k]])


@pytest.mark.parametrize("pays", ["the whole run", "round 1 only"])
def test_simulated_ledger_charges_then_refuses(tmp_path: Path, pays: str) -> None:
    """A simulated client with a ledger charges each round it answers; a ledger that cannot pay
    the rest of the run refuses (nothing charged), as a deployed client does."""
    from privcal.privacy import PrivacyOdometer

    fm = method_from_config(CFG)
    state = fm.init(2)
    z, y = audit._data()
    np.savez(tmp_path / "all.npz", logits=z, labels=y)
    budget = CFG["epsilon"] if pays == "the whole run" else composed_epsilon(CFG, 1)
    run_config = {
        **CFG,
        "partitions": str(tmp_path / "all.npz"),
        "ledgers": str(tmp_path / "ledgers"),
        "ledger-budget": budget,
    }
    (tmp_path / "ledgers").mkdir()
    ctx = _simulated(0, 2, run_config)
    first = query(_message(state, run_config, 1), ctx)
    second = query(_message(state, {**run_config, "round": 2}, 1), ctx)
    again = query(_message(state, {**run_config, "round": 2}, 1), ctx)  # a second answer: refused
    assert "refused" in dict(again.content["info"])
    odo = PrivacyOdometer(
        budget, ledger=tmp_path / "ledgers" / "client-0.sqlite", delta_budget=1e-5
    )
    if pays == "the whole run":
        assert "arrays" in first.content and "arrays" in second.content
        assert odo.spent == pytest.approx(budget)
    else:
        assert "rest of the run costs epsilon 1" in dict(first.content["info"])["refused"]
        assert "refused" in dict(second.content["info"])
        assert odo.spent == 0.0


def test_bad_partition_settings_name_the_setting(tmp_path: Path) -> None:
    node = {"partition-id": 0, "num-partitions": 3}
    with pytest.raises(ValueError, match="'partitions' run config"):
        client_data(node, {})
    (tmp_path / "a.npz").write_bytes(b"")
    with pytest.raises(ValueError, match=r"one score file per partition \(3\). Got 1"):
        client_data(node, {"partitions": str(tmp_path)})
    with pytest.raises(ValueError, match="node holds no data"):
        client_data({}, {})


def test_linear_dispatch_hands_out_what_flower_does() -> None:
    from flwr.app import Message, MessageType
    from flwr.proto.task_pb2 import Task  # type: ignore[attr-defined]
    from flwr.server.superlink.fleet.vce.vce_api import _register_nodes
    from flwr.server.superlink.linkstate import LinkStateFactory
    from flwr.server.superlink.linkstate.in_memory_linkstate import RunRecord
    from flwr.supercore.constant import FLWR_IN_MEMORY_DB_NAME, NOOP_FEDERATION_ID
    from flwr.supercore.object_store import ObjectStoreFactory
    from flwr.supercore.run import Run
    from flwr.supercore.task_identity import TaskIdentity
    from flwr.superlink.federation import NoOpFederationManager
    from flwr.superlink.grid import InMemoryGrid

    from privcal.federated.flower.engine import undelivered

    def sweeps(stock: bool) -> list[list[tuple[int, int]]]:
        factory = LinkStateFactory(
            FLWR_IN_MEMORY_DB_NAME, NoOpFederationManager(), ObjectStoreFactory()
        )
        state = factory.state()
        run = Run.create_empty(run_id=5)
        run.primary_task_id, run.federation_id = 3, NOOP_FEDERATION_ID
        state.run_ids[5] = RunRecord(run=run)
        state.task_store[3] = Task(task_id=3, run_id=5)
        TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 3, 5, 1
        mapping = _register_nodes(4, factory)
        grid = InMemoryGrid(state_factory=factory)
        grid.set_run(run)
        nodes = list(mapping)
        # node 0 gets two messages, node 2 one, nodes 1 and 3 none
        dst = [nodes[0], nodes[2], nodes[0]]
        grid.push_messages(
            [
                Message(
                    RecordDict({"c": ConfigRecord({"i": i})}),
                    dst_node_id=d,
                    message_type=MessageType.QUERY,
                )
                for i, d in enumerate(dst)
            ]
        )
        out = []
        for _ in range(3):
            if stock:
                got = [m for n in mapping for m in state.get_message_ins(node_id=n, limit=1)]
            else:
                got = undelivered(state, mapping)
            out.append(
                sorted((nodes.index(m.metadata.dst_node_id), int(m.content["c"]["i"])) for m in got)
            )
        return out

    stock, ours = sweeps(True), sweeps(False)
    assert ours == stock == [[(0, 0), (2, 1)], [(0, 2)], []]

"""A server cannot change a run's terms through its messages (a malicious server's attempts).

Each test calls the real client code as Flower does (the plain ClientApp's query handler, the
SecAgg+ client's ``fit``) with the run configuration every node of the run gets, and a message
that tries to weaken the client's guarantee: the client refuses, sends nothing of its data and
charges nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict

from privcal.audits.federated import _instruction
from privcal.federated.flower import client_app, secagg, task
from privcal.federated.policy import ClientPolicy
from privcal.privacy import PrivacyOdometer

pytestmark = pytest.mark.integration

C = 5
RUN = {
    **task.DEFAULTS,
    "method": "conformal-lac",
    "n-classes": C,
    "epsilon": 1.0,
    "delta": 1e-5,
    "rounds": 2,
    "num-nodes": 5,
}


@pytest.fixture
def data(tmp_path: Path) -> str:
    rng = np.random.default_rng(0)
    y = rng.integers(0, C, 200)
    np.savez(tmp_path / "site.npz", logits=3.0 * np.eye(C)[y] + rng.normal(size=(200, C)), labels=y)
    return str(tmp_path / "site.npz")


def _message(cfg: dict[str, Any]) -> Message:
    """The server's query to node 7 (the audits' own message builder), with the method's state."""
    state = task.method_from_config(cfg).init(C)
    arrays = ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in state.items()})
    return _instruction(RecordDict({"config": ConfigRecord(cfg), "state": arrays}), 7)


def _context(node: dict[str, Any], run_config: dict[str, Any]) -> Context:
    return Context(run_id=1, node_id=7, node_config=node, state=RecordDict(), run_config=run_config)


def _spent(ledger: Path) -> float:
    return PrivacyOdometer(1.0, ledger=ledger, delta_budget=1e-5).spent


def _refusal(reply: Message) -> str:
    assert "arrays" not in reply.content, "the client sent a payload"
    return str(dict(reply.content["info"])["refused"])


@pytest.mark.parametrize(
    "change",
    [
        {"rounds": 1},  # each round's noise sized for a larger share of the budget
        {"epsilon": 0.9},
        {"row-cap": 400},  # another client's shares sized for one row
        {"secagg": True, "aggregation": "distributed"},  # the payload without a share
        {"num-nodes": 2001, "threshold": 2000},
    ],
)
def test_a_message_cannot_change_the_runs_terms(
    data: str, tmp_path: Path, change: dict[str, Any]
) -> None:
    ledger = tmp_path / "l.sqlite"
    node = {"data": data, "ledger": str(ledger), "budget": 1.0}
    reply = client_app.query(_message({**RUN, **change, "round": 1}), _context(node, RUN))
    key = sorted(change)[0]
    assert f"the message sets {key} = " in _refusal(reply)
    assert "terms cannot change between messages" in _refusal(reply)
    assert _spent(ledger) == 0.0
    # the same round with the run's own terms is answered
    reply = client_app.query(_message({**RUN, "round": 1}), _context(node, RUN))
    assert "arrays" in reply.content and _spent(ledger) > 0


def test_the_plain_app_refuses_distributed_aggregation(data: str, tmp_path: Path) -> None:
    """A run whose configuration asks for distributed noise but runs without SecAgg+ (so the
    plain ClientApp answers) would send the payload with no share: refused."""
    policy = ClientPolicy(1.0, 1e-5, 3, ("distributed",), False)
    node = {"data": data, "ledger": str(tmp_path / "l.sqlite"), **policy.to_node()}
    run = {**RUN, "aggregation": "distributed"}
    for task_name in ("join", "step"):
        reply = client_app.query(
            _message({**run, "task": task_name, "round": 1}), _context(node, run)
        )
        assert "runs without SecAgg+" in _refusal(reply)
    assert _spent(tmp_path / "l.sqlite") == 0.0


def test_a_client_without_a_ledger_answers_each_round_once(data: str) -> None:
    ctx = _context({"data": data}, RUN)  # one node's context for the whole run
    assert "arrays" in client_app.query(_message({**RUN, "round": 1}), ctx).content
    assert "already answered round 1" in _refusal(
        client_app.query(_message({**RUN, "round": 1}), ctx)
    )
    assert "not a round of this run" in _refusal(
        client_app.query(_message({**RUN, "round": 3}), ctx)
    )
    assert "arrays" in client_app.query(_message({**RUN, "round": 2}), ctx).content


SECAGG_RUN = {**RUN, "secagg": True, "aggregation": "distributed", "threshold": 4}


@pytest.mark.parametrize(
    "change",
    [
        {"num-nodes": 2001, "threshold": 2000},  # shares sized for 2000 others: 20x less noise
        {"aggregation": "trusted"},  # the exact payload, masked only
        {"rounds": 1},
    ],
)
def test_a_secagg_rounds_config_cannot_change_the_runs_terms(
    data: str, tmp_path: Path, change: dict[str, Any]
) -> None:
    ledger = tmp_path / "l.sqlite"
    node = {"data": data, "ledger": str(ledger), "budget": 1.0}
    client = secagg._PrivcalClient(_context(node, SECAGG_RUN))
    with pytest.raises(RuntimeError, match="terms cannot change between messages"):
        client.fit([np.zeros(1)], {"round": 1, **change})
    assert _spent(ledger) == 0.0
    wire, examples, _ = client.fit([np.zeros(1)], {"round": 1})  # the run's own terms
    assert examples == 1 and np.asarray(wire[0]).size > 0
    with pytest.raises(RuntimeError, match="already answered round 1"):
        client.fit([np.zeros(1)], {"round": 1})


# -- seed 000's data sources over SecAgg+ ----------------------------------------------------------
SOURCE_RUN = {**SECAGG_RUN, "method": "acc-t"}


def _source_round(epsilon: float = 0.5, **extra: Any) -> dict[str, Any]:
    return {"query": "count", "kwargs": json.dumps({"epsilon": epsilon}), **extra}


def _source_spent(ledger: Path) -> float:
    return PrivacyOdometer.open(ledger).spent if ledger.exists() else 0.0


def _source(data: str, tmp_path: Path, run: dict[str, Any], **node: Any) -> Any:
    ledger = {"ledger": str(tmp_path / "s.sqlite"), "budget": 10.0, "name": "h"}
    return secagg._PrivcalClient(_context({"data": data, **ledger, **node}, run))


@pytest.mark.parametrize(
    ("run", "extra", "reason"),
    [
        (SOURCE_RUN, {"share-threshold": 2000}, "not the run's t=4"),  # a 500x smaller share
        ({**SOURCE_RUN, "aggregation": "trusted"}, {}, "only in a distributed run"),
        ({**SOURCE_RUN, "source-max-rows": 150}, {}, "below this source's public bound of 4096"),
        (SECAGG_RUN, {}, "a source message in a run of conformal-lac"),  # a second per-run budget
    ],
)
def test_a_source_refuses_a_query_round_it_cannot_answer_as_accounted(
    data: str, tmp_path: Path, run: dict[str, Any], extra: dict[str, Any], reason: str
) -> None:
    src = _source(data, tmp_path, run)
    with pytest.raises(RuntimeError, match=reason):
        src.fit([np.zeros(1)], _source_round(**extra))
    assert _source_spent(tmp_path / "s.sqlite") == 0.0


def test_a_sources_row_count_refusal_does_not_move_with_the_run(data: str, tmp_path: Path) -> None:
    """Whether a source answers depends on its rows only against its own bound (node config
    max-rows), never the run's source-max-rows: a server cannot search for its row count."""
    said = set()
    for max_rows in (4096, 10_000, 1_000_000):
        src = _source(
            data, tmp_path, {**SOURCE_RUN, "source-max-rows": max_rows}, **{"max-rows": 150}
        )
        with pytest.raises(RuntimeError) as err:  # 200 rows > its own bound of 150
            src.fit([np.zeros(1)], _source_round())
        said.add(str(err.value))
    assert len(said) == 1 and "more rows than its public bound of 150" in said.pop()
    answered = _source(data, tmp_path, SOURCE_RUN).fit([np.zeros(1)], _source_round())
    assert answered[1] == 1 and _source_spent(tmp_path / "s.sqlite") == pytest.approx(0.5)


def test_a_round_in_a_source_run_and_a_nan_epsilon_are_refused(data: str, tmp_path: Path) -> None:
    src = _source(data, tmp_path, SOURCE_RUN)
    with pytest.raises(RuntimeError, match="a step message in a run of acc-t"):
        src.fit([np.zeros(1)], {"round": 1})
    with pytest.raises(RuntimeError, match="policy of at most"):
        src.fit([np.zeros(1)], _source_round(epsilon=float("nan")))
    assert _source_spent(tmp_path / "s.sqlite") == 0.0

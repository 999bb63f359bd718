"""A malicious server against the clients of prediction sets over Flower: the federated
conformal methods (``conformal-lac`` / ``conformal-aps``) and the data sources that answer
``PrivateConformal(...).fit(sources=...)``; the run configuration it writes (row cap, model
width) and the messages it sends.

Each test calls the real client code as Flower does (the plain ClientApp's query handler, the
SecAgg+ client's ``fit``, a source node's query answer) with the run configuration every node
of the run gets. What must hold: a round the client cannot answer as planned is refused before
its ledger is charged, so a server cannot spend a client's budget on releases that never take
place, and a client's per-run policy counts what its ledger is charged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import Context, RecordDict

from privcal.federated.flower import secagg, task
from privcal.privacy import PrivacyOdometer

pytestmark = pytest.mark.integration

C = 5
BUDGET, DELTA_BUDGET = 10.0, 1e-3


def _site(tmp_path: Path, rows: int = 50) -> str:
    rng = np.random.default_rng(rows)
    np.savez(tmp_path / "s.npz", logits=rng.normal(size=(rows, C)), labels=rng.integers(0, C, rows))
    return str(tmp_path / "s.npz")


def _node(tmp_path: Path) -> dict[str, Any]:
    return {
        "data": _site(tmp_path),
        "ledger": str(tmp_path / "l.sqlite"),
        "budget": BUDGET,
        "delta-budget": DELTA_BUDGET,
        "max-delta": DELTA_BUDGET,
        "status": str(tmp_path / "status"),
    }


def _run(**terms: Any) -> dict[str, Any]:
    return {
        **task.DEFAULTS,
        "method": "conformal-lac",
        "n-classes": C,
        "epsilon": 1.0,
        "rounds": 2,
        "num-nodes": 5,
        "secagg": True,
        "aggregation": "distributed",
        **terms,
    }


def _spent(node: dict[str, Any]) -> tuple[float, float]:
    odo = PrivacyOdometer(BUDGET, ledger=node["ledger"], delta_budget=DELTA_BUDGET)
    return odo.spent, odo.delta_spent


def test_a_row_cap_too_large_for_the_ring_is_refused_before_the_charge(tmp_path: Path) -> None:
    """Over SecAgg+ the noise shares live in a ring of 2^31, sized by the payload bound ``r``
    (the run's row cap). Before the fix a client checked the ring only when it formed its
    upload, after its ledger took the round: with ``row-cap = 10^8`` every round raised
    "A modulus of 2^31 is too small", so a server spent a client's whole run, epsilon 1 and
    delta 1e-5 (two rounds: 0.686 then 0.686 more), on releases that never left the node, run
    after run. Now the round is refused with nothing charged, and an honest row cap is then
    answered in the same run."""
    node = _node(tmp_path)
    run = _run(**{"row-cap": 10**8})
    ctx = Context(run_id=3, node_id=7, node_config=node, state=RecordDict(), run_config=run)
    for rnd in (1, 2):
        with pytest.raises(RuntimeError, match="refused the round"):
            secagg._PrivcalClient(ctx).fit([np.zeros(1)], {"round": rnd})
    assert "too small" in Path(node["status"]).read_text()
    assert _spent(node) == (0.0, 0.0)
    honest = _run()
    ctx = Context(run_id=4, node_id=7, node_config=node, state=RecordDict(), run_config=honest)
    wire, examples, _ = secagg._PrivcalClient(ctx).fit([np.zeros(1)], {"round": 1})
    assert examples == 1 and np.asarray(wire[0]).size == 4
    assert _spent(node)[0] == pytest.approx(task.composed_epsilon(honest, 1))


@pytest.mark.parametrize("method", ["fedvector", "fedbin"])
@pytest.mark.parametrize("app", ["plain", "secagg"])
def test_a_round_for_another_model_width_is_refused_before_the_charge(
    tmp_path: Path, method: str, app: str
) -> None:
    """Round 0 (``join``) refuses a run whose ``n-classes`` is not the width of the client's
    logits, but a server may skip it and send round 1 with ``n-classes = 6`` to a 5-class
    client, and a state sized for 6. Before the fix the round was checked against the run's
    ``n-classes`` before the charge and against the logits after it: the ledger paid epsilon
    0.684 (and delta 1e-5) for round 1 of a 2-round run, then the client raised and sent
    nothing (every method whose state or payload has the model's width: all but conformal)."""
    node = _node(tmp_path)
    run = _run(method=method, **{"n-classes": C + 1})
    if app == "plain":
        run.update(secagg=False, aggregation="trusted")
    fm = task.method_from_config(run)
    state = fm.init(C + 1)
    ctx = Context(run_id=5, node_id=7, node_config=node, state=RecordDict(), run_config=run)
    if app == "plain":
        from flwr.app import Array, ArrayRecord, ConfigRecord

        from privcal.audits.federated import _instruction
        from privcal.federated.flower import client_app

        arrays = ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in state.items()})
        content = RecordDict({"config": ConfigRecord({**run, "round": 1}), "state": arrays})
        reply = client_app.query(_instruction(content, 7), ctx)
        assert "n-classes = 6" in str(dict(reply.content["info"])["refused"])
    else:
        params = [state["params"]] if "params" in state else [np.zeros(1)]
        with pytest.raises(RuntimeError, match="refused the round"):
            secagg._PrivcalClient(ctx).fit(params, {"round": 1})
        assert "n-classes = 6" in Path(node["status"]).read_text()
    assert _spent(node) == (0.0, 0.0)


def test_a_sources_per_run_policy_counts_the_two_sides_of_a_split_once(tmp_path: Path) -> None:
    """PrivateConformal over sources asks each node two histograms on the two sides of one row
    split (disjoint rows: the node's ledger charges the larger side's total). Before the fix
    the node's per-run policy counted both in full: at max-epsilon 1 it answered stage 1
    (charged 1) and refused stage 2 (1 + 1 > 1), so a fit at the policy's epsilon could never
    finish and every node paid epsilon 1 for it. The policy now counts what the ledger is
    charged: side 1 at 1 is free, a further 0.5 on either side or another split is refused."""
    import json

    from privcal.federated.flower.sources import answer_source_query

    rng = np.random.default_rng(0)
    z, y = rng.normal(size=(200, 3)), rng.integers(0, 3, 200)
    node = {"ledger": str(tmp_path / "l.sqlite"), "budget": 5.0, "max-epsilon": 1.0}

    def ask(eps: float, part: list[Any] | None) -> dict[str, str]:
        kwargs = {"edges": np.linspace(0.0, 1.0, 5).tolist(), "epsilon": eps, "part": part}
        cfg = {"query": "score_histogram", "kwargs": json.dumps(kwargs)}
        return answer_source_query(z, y, node, cfg, run_id=1)

    assert "value" in ask(1.0, [7, 0.25, 0])
    assert "value" in ask(1.0, [7, 0.25, 1])
    for eps, part in ((0.5, [7, 0.25, 1]), (0.5, [7, 0.25, 0]), (0.5, [8, 0.25, 1])):
        assert "policy of at most 1 per run" in ask(eps, part)["refused"]
    assert "policy of at most 1 per run" in ask(float("nan"), [7, 0.25, 1])["refused"]
    assert PrivacyOdometer(5.0, ledger=node["ledger"]).spent == pytest.approx(1.0)

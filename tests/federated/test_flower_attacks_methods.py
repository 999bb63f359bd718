"""A malicious server against the federated methods' clients (beyond seed 000's sources).

Each test calls the real client code as Flower does (the plain ClientApp's query handler, the
SecAgg+ client's ``fit`` and its end mod) with the run configuration every node of the run gets
and a message the server crafts. What must hold: nothing a client sends depends on its data
except through the noise its ledger was charged for (no data-dependent error or dropout), and
its ledger records at least what its answers cost.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict

from privcal.audits.federated import _instruction
from privcal.calibrators import VectorScaling
from privcal.federated.flower import client_app, secagg, secaggplus, task
from privcal.privacy import PrivacyOdometer

pytestmark = pytest.mark.integration

C = 5


def _site(tmp_path: Path, name: str, rows: int, big_logit: bool = False) -> str:
    """A client's score file; ``big_logit``: one row's class-0 logit is 3 (all others within 1)."""
    rng = np.random.default_rng(rows)
    y = rng.integers(0, C, rows)
    z = np.clip(rng.normal(size=(rows, C)), -1.0, 1.0)
    if big_logit:
        z[0, 0] = 3.0
    np.savez(tmp_path / name, logits=z, labels=y)
    return str(tmp_path / name)


def _context(node: dict[str, Any], run_config: dict[str, Any], run_id: int = 1) -> Context:
    return Context(
        run_id=run_id, node_id=7, node_config=node, state=RecordDict(), run_config=run_config
    )


def _message(cfg: dict[str, Any], state: dict[str, np.ndarray] | None = None) -> Message:
    if state is None:
        state = task.method_from_config({**task.DEFAULTS, **cfg}).init(C)
    arrays = ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in state.items()})
    return _instruction(RecordDict({"config": ConfigRecord(cfg), "state": arrays}), 7)


def _spent(ledger: Path, budget: float = 1.0, delta: float = 1e-5) -> tuple[float, float]:
    odo = PrivacyOdometer(budget, ledger=ledger, delta_budget=delta)
    return odo.spent, odo.delta_spent


# --- the end of a run: the client's check on its own data must not answer the server -------


def _overflowing_calibrator() -> str:
    """Vector scaling whose class-0 scale overflows the calibrated logit of any row whose class-0
    logit is above about 1.8: its probabilities are NaN on such a row, finite elsewhere."""
    cal = VectorScaling()
    cal.coef_, cal.intercept_, cal.n_classes_ = np.array([1e308, 1, 1, 1, 1.0]), np.zeros(C), C
    return json.dumps(cal.to_dict())


def _end(app: str, node: dict[str, Any], run: dict[str, Any], calibrator: str) -> Message:
    msg = _instruction(
        RecordDict(
            {"config": ConfigRecord({"task": "end", "calibrator": calibrator, "in-run": True})}
        ),
        7,
    )
    if app == "plain":
        return client_app.query(msg, _context(node, run))
    return secagg.end_mod(msg, _context(node, run), lambda m, c: pytest.fail("not an end"))


@pytest.mark.parametrize("app", ["plain", "secagg"])
def test_the_end_check_answers_the_same_whatever_the_data(tmp_path: Path, app: str) -> None:
    """The server sends "end" with a calibrator of its choosing, as often as it likes (nothing
    is charged for it). Before the fix the client's check raised on the rows the calibrator
    overflows, and Flower sent the error, "'probs' contains 1 non-finite values, first in row
    0", to the server: one bit of the client's logits and a row index per message, unbounded.
    """
    run = {**task.DEFAULTS, "method": "fedvector", "n-classes": C, "epsilon": 1.0}
    replies = []
    for name, big in (("a.npz", False), ("b.npz", True)):
        status = tmp_path / f"{name}.status"
        node = {"data": _site(tmp_path, name, 40, big), "status": str(status)}
        reply = _end(app, node, run, _overflowing_calibrator())
        assert not reply.has_error(), reply.error.reason
        replies.append(dict(reply.content["info"]))
        assert "end: the run is over" in status.read_text()  # the client's own console
    assert replies[0] == replies[1] == {"ok": True}


@pytest.mark.parametrize(
    ("in_run", "answered", "ended"),
    [
        (True, False, "the run is over"),
        (False, False, client_app.WITHOUT_THIS_CLIENT),
        (False, True, "the run is over"),  # the server cannot disown a client's rounds
        ("false", False, "the run is over"),  # not a bool: no word from the server
        (None, False, "the run is over"),
    ],
)
def test_only_the_server_and_the_clients_own_record_together_say_it_took_no_part(
    tmp_path: Path, in_run: object, answered: bool, ended: str
) -> None:
    run = {**task.DEFAULTS, "method": "fedtemp", "n-classes": C, "rounds": 2}
    status = tmp_path / "status.log"
    node = {"data": _site(tmp_path, "a.npz", 40), "status": str(status)}
    context = _context(node, run)
    if answered:
        assert task.round_refusal(context, {**run, "round": 1}) is None  # records round 1
    cfg = {"task": "end", "calibrator": _identity_calibrator()}
    if in_run is not None:
        cfg["in-run"] = in_run
    msg = _instruction(RecordDict({"config": ConfigRecord(cfg)}), 7)
    reply = client_app.query(msg, context)
    assert not reply.has_error(), reply.error.reason
    assert status.read_text().splitlines()[-1] == f"end: {ended}"


def _identity_calibrator() -> str:
    cal = VectorScaling()
    cal.coef_, cal.intercept_, cal.n_classes_ = np.ones(C), np.zeros(C), C
    return json.dumps(cal.to_dict())


# --- a server state that makes the payload non-finite on some data only ---------------------


def _matrix_state() -> dict[str, np.ndarray]:
    """FedMatrix at the identity but for one off-diagonal weight of 1e307: its penalty gradient
    ``2 * 0.1 * 1e307 * n`` overflows once the client keeps about 90 rows, so the client's
    payload is finite or not according to its (private) number of rows."""
    fm = task.method_from_config({**task.DEFAULTS, "method": "fedmatrix"})
    state = fm.init(C)
    state["params"][1] = 1e307
    return state


SECAGG_RUN = {
    **task.DEFAULTS,
    "method": "fedmatrix",
    "n-classes": C,
    "epsilon": 1.0,
    "rounds": 2,
    "num-nodes": 5,
    "secagg": True,
    "aggregation": "distributed",
    "threshold": 4,
}


def test_a_secagg_client_uploads_whatever_its_data_at_any_server_state(tmp_path: Path) -> None:
    """Over SecAgg+ with distributed noise, a client whose upload cannot be formed raises and
    SecAgg+ sees it drop out. Before the fix a non-finite payload (here: a client with more
    than about 90 rows) raised in the share step, so the server learnt a bit of the client's
    data with no noise at all: one exact bit per round, whatever epsilon it was charged."""
    params = _matrix_state()["params"]
    for rows in (40, 400):
        node = {"data": _site(tmp_path, f"s{rows}.npz", rows), "budget": 1.0}
        client = secagg._PrivcalClient(_context(node, SECAGG_RUN))
        wire, examples, _ = client.fit([params], {"round": 1})
        assert examples == 1 and np.isfinite(np.asarray(wire[0])).all()


@pytest.mark.parametrize("aggregation", ["trusted", "distributed"])
def test_a_non_finite_payload_is_sent_as_zeros(tmp_path: Path, aggregation: str) -> None:
    """Under DP a payload the method cannot compute at the server's state contributes nothing
    (zeros are inside every clip bound, so the release keeps its sensitivity)."""
    fm = task.method_from_config({**task.DEFAULTS, "method": "fedmatrix"})
    cfg = {**SECAGG_RUN, "aggregation": aggregation}
    z, y = task.load_client_data(_site(tmp_path, "s.npz", 400))
    payload = task.client_payload(fm, _matrix_state(), z, y, cfg)
    assert payload.shape == fm.payload_shape(C) and not payload.any()


_LONG_PARAMS = """
import numpy as np
from privcal.federated.flower import task
cfg = {**task.DEFAULTS, "method": "fedcal", "epsilon": 1.0, "local-iters": 3}
fm = task.method_from_config(cfg)
x = np.tile(fm.init(3)["params"], 2)
rng = np.random.default_rng(0)
for n in (1, 5, 50):
    try:
        task.client_payload(fm, {"params": x}, rng.normal(size=(n, 3)), rng.integers(0, 3, n), cfg)
        print("answered")
    except ValueError as err:
        print("refused:", err)
"""


def test_a_state_of_another_shape_is_refused_before_any_step() -> None:
    """FedCal's local fit hands the server's parameters to SciPy's L-BFGS-B with a gradient of
    the MLP's own size. Before the fix parameters twice as long were taken as they came: the
    solver wrote past its buffers and the client process died of heap corruption ("double
    free or corruption"), its payload made of memory it does not own. Run in a process of
    its own, as such a client would be."""
    out = subprocess.run(
        [sys.executable, "-c", _LONG_PARAMS], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-500:]
    lines = out.stdout.splitlines()
    assert len(lines) == 3 and all("is not the method's own" in line for line in lines)


def _setup(**ranges: float) -> Message:
    """SecAgg+'s setup message to node 7 for SECAGG_RUN, with the quantisation ``ranges``."""
    from flwr.common.secure_aggregation.secaggplus_constants import (
        RECORD_KEY_CONFIGS,
        Key,
        Stage,
    )

    clipping, target, modulus = secagg.ring_ranges(task.RING_BITS)
    values = {"clipping": clipping, "target": target, "modulus": modulus, "weight": 1.0}
    values.update(ranges)
    config = {
        Key.STAGE: Stage.SETUP,
        Key.SAMPLE_NUMBER: 5,
        Key.SHARE_NUMBER: 5,
        Key.THRESHOLD: 4,
        Key.CLIPPING_RANGE: float(values["clipping"]),
        Key.TARGET_RANGE: int(values["target"]),
        Key.MOD_RANGE: int(values["modulus"]),
        Key.MAX_WEIGHT: float(values["weight"]),
    }
    content = RecordDict({RECORD_KEY_CONFIGS: ConfigRecord(config)})
    return _instruction(content, 7, message_type="train")


@pytest.mark.parametrize(
    "ranges",
    [
        {"weight": 1e12},  # this client's upload multiplied by 0: the sum is the others' alone
        {"clipping": 1.0},  # its residue clipped to [-1, 1] before it is masked
        {"target": 2**20},
    ],
)
def test_a_secagg_setup_must_carry_the_shares_exactly(tmp_path: Path, ranges: Any) -> None:
    """The server sends SecAgg+'s quantisation to each client on its own. Before the fix a
    client took any: with ``max_weight`` huge for every client but one, the masked sum is that
    client's upload alone (plus known constants), whose noise is one share, ``1 / t`` of the
    release's variance: at (1, 1e-5) and t = 4 of 5 the run's epsilon for that client is the
    report's fallback (2.14 instead of 1; 12.1 at t = 80 of 100), with no colluding client."""
    node = {"data": _site(tmp_path, "s.npz", 40), "status": str(tmp_path / "status")}
    ctx = _context(node, SECAGG_RUN)
    passed: list[Message] = []

    def call_next(msg: Message, context: Context) -> Message:
        passed.append(msg)
        return msg

    secagg.policy_mod(_setup(), ctx, call_next)  # the honest setup goes on to SecAgg+
    assert len(passed) == 1
    reply = secagg.policy_mod(_setup(**ranges), ctx, call_next)
    assert len(passed) == 1 and reply.has_error()
    assert "is not the exact ring of the run's noise shares" in reply.error.reason


def test_a_deployed_node_with_a_partition_id_keeps_its_own_policy(tmp_path: Path) -> None:
    """Flower's own deployment examples start SuperNodes with ``--node-config
    "partition-id=0 num-partitions=2"``. Before the fix such a node took the Simulation
    Engine's permissive policy even with its own ``data``: a run without DP had its exact
    payload (a run with seeded noise, noise the server can subtract) where its own default
    policy refuses both."""
    node = {"data": _site(tmp_path, "s.npz", 40), "partition-id": 0, "num-partitions": 2}
    for change in ({"epsilon": 0.0}, {"noise": "seeded"}):
        run = {**task.DEFAULTS, "method": "fedbin", "n-classes": C, "epsilon": 1.0, **change}
        reply = client_app.query(_message({**run, "round": 1}), _context(node, run))
        assert "arrays" not in reply.content
        assert "this client's policy" in str(dict(reply.content["info"])["refused"])


# --- the ledger across runs: a run id names one run -----------------------------------------


def test_a_reused_run_id_with_other_terms_is_refused(tmp_path: Path) -> None:
    """A client's ledger finds a run's earlier charges by its run id (Flower's, which the
    SuperLink assigns). Before the fix a second run under the same id was charged as the rest
    of the first: after rounds 1 and 2 of run A (epsilon 1, T = 2), round 3 of run B (epsilon
    1.01, T = 3) was charged epsilon 0.01 and delta 0, where that round alone is epsilon 0.55
    at delta 1e-5 (A and it, composed exactly: 1.17, not the 1.01 recorded). Each further
    reuse (T = 4, 5, ..., epsilon up by 1e-9) adds a round of rho / T for nothing: the true
    loss grows like log(reuses) while the ledger stays at 1."""
    ledger = tmp_path / "l.sqlite"
    node = {"data": _site(tmp_path, "s.npz", 100), "ledger": str(ledger), "budget": 3.0}
    node.update({"delta-budget": 2e-5, "max-epsilon": 2.0, "max-delta": 1e-5})
    run_a = {**task.DEFAULTS, "method": "fedbin", "n-classes": C, "epsilon": 1.0, "rounds": 2}
    ctx = _context(node, run_a)
    for rnd in (1, 2):
        assert "arrays" in client_app.query(_message({**run_a, "round": rnd}), ctx).content
    spent = _spent(ledger, 3.0, 2e-5)
    assert spent == pytest.approx((1.0, 1e-5))
    run_b = {**run_a, "epsilon": 1.01, "rounds": 3}
    reply = client_app.query(_message({**run_b, "round": 3}), _context(node, run_b))
    assert "arrays" not in reply.content
    assert "under other terms" in str(dict(reply.content["info"])["refused"])
    assert _spent(ledger, 3.0, 2e-5) == spent
    # the same run under a fresh id is charged in full
    ctx = _context(node, run_b, run_id=2)
    for rnd in (1, 2, 3):
        assert "arrays" in client_app.query(_message({**run_b, "round": rnd}), ctx).content
    assert _spent(ledger, 3.0, 2e-5) == pytest.approx((2.01, 2e-5))


def test_a_run_resumed_under_its_own_id_and_terms_is_charged_as_one(tmp_path: Path) -> None:
    """A client restarted mid-run (its node state lost, its ledger kept) goes on with the
    same run: the rounds left are charged up to the run's epsilon, the delta once."""
    ledger = tmp_path / "l.sqlite"
    node = {"data": _site(tmp_path, "s.npz", 100), "ledger": str(ledger), "budget": 1.0}
    run = {**task.DEFAULTS, "method": "fedtemp", "n-classes": C, "epsilon": 1.0, "rounds": 3}
    assert "arrays" in client_app.query(_message({**run, "round": 1}), _context(node, run)).content
    ctx = _context(node, run)  # the restart: a fresh node state
    for rnd in (2, 3):
        assert "arrays" in client_app.query(_message({**run, "round": rnd}), ctx).content
    assert _spent(ledger) == pytest.approx((1.0, 1e-5))


# --- a bad term or state costs the client nothing ---------------------------------------------


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"clip-pos": -1.0}, "'clip_pos' parameter of DPConfig"),
        ({"num-nodes": 0}, "'n_clients' parameter of DPConfig"),
        ({"params": "long"}, "is not the method's own"),
    ],
)
@pytest.mark.parametrize("app", ["plain", "secagg"])
def test_a_bad_term_or_state_is_refused_before_the_ledger_is_charged(
    tmp_path: Path, app: str, change: dict[str, Any], why: str
) -> None:
    """Before the fix the run's privacy terms and the server's state were checked after the
    round was charged: a server could burn a client's budget with releases that never took
    place. Now they are refused with nothing charged, and the round is not used up."""
    ledger = tmp_path / "l.sqlite"
    node = {"data": _site(tmp_path, "s.npz", 100), "ledger": str(ledger), "budget": 1.0}
    node["status"] = str(tmp_path / "status")
    run = {**task.DEFAULTS, "method": "fedvector", "n-classes": C, "epsilon": 1.0, "rounds": 2}
    if app == "secagg":
        run = {**SECAGG_RUN, "method": "fedvector"}
    params = task.method_from_config(run).init(C)["params"]
    if change.get("params") == "long":
        params = np.tile(params, 2)
    else:
        run.update(change)
    ctx = _context(node, run)
    if app == "plain":
        info = dict(
            client_app.query(_message({**run, "round": 1}, {"params": params}), ctx).content
        )
        assert "arrays" not in info and why in str(dict(info["info"])["refused"])
    else:
        with pytest.raises(RuntimeError, match="refused the round"):
            secagg._PrivcalClient(ctx).fit([params], {"round": 1})
        assert why in (tmp_path / "status").read_text()
    assert _spent(ledger) == (0.0, 0.0)


def test_an_unmask_request_for_both_secrets_of_a_client_is_refused(tmp_path: Path) -> None:
    """A server (running a modified SecAgg+ workflow, with no colluding client) lists client 2
    as both active and dropped in the unmask request. Flower 1.41's clients would each send
    both 2's mask-seed share and its private-key share: the server rebuilt both secrets and
    stripped every mask from 2's upload, which alone carries 1/t of the noise variance (a
    helper's in-process attack recovered it bit for bit, epsilon 3.7 against a policy of 2).
    Every client now refuses the request (``secaggplus.unmask_refusal``): the round halts and
    nothing is released."""
    from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key
    from flwr.server.workflow import SecAggPlusWorkflow

    from privcal.federated.flower.local import run_local
    from privcal.federated.policy import ClientPolicy

    policy = ClientPolicy(max_epsilon=2.0, max_delta=1e-5, min_threshold=3, accept=("distributed",))
    nodes = [{"data": _site(tmp_path, f"s{k}.npz", 120 + k), **policy.to_node()} for k in range(5)]

    class Evil:  # the grid as the modified unmask stage uses it
        def __init__(self, grid: Any) -> None:
            self.grid = grid

        def __getattr__(self, name: str) -> Any:
            return getattr(self.grid, name)

        def send_and_receive(self, msgs: Any, timeout: Any = None) -> Any:
            for m in msgs:
                configs = m.content.config_records[RECORD_KEY_CONFIGS]
                configs[Key.DEAD_NODE_ID_LIST] = [*configs[Key.DEAD_NODE_ID_LIST], 2]
            return self.grid.send_and_receive(msgs, timeout=timeout)

    real = SecAggPlusWorkflow.unmask_stage

    def evil_unmask(self: Any, grid: Any, context: Any, state: Any) -> bool:
        return real(self, Evil(grid), context, state)

    conf = {"method": "fedtemp", "rounds": 2, "n-classes": C, "min-clients": 2, "epsilon": 2.0,
            "threshold": 3, "secagg": True, "aggregation": "distributed",
            "round-timeout-s": 0.5, "out-dir": str(tmp_path / "out")}  # fmt: skip
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(SecAggPlusWorkflow, "unmask_stage", evil_unmask)
        with pytest.raises(RuntimeError, match=r"lists clients \[2\] as both active and dropped"):
            run_local(conf, nodes)
    assert not (tmp_path / "out" / "privacy_report.json").exists()


def test_unmask_refusal_names_each_inconsistent_request() -> None:
    from flwr.client.mod.secure_aggregation.secaggplus_mod import SecAggPlusState
    from flwr.common.secure_aggregation.secaggplus_constants import Key

    state = SecAggPlusState(
        nid=4, **{"rd_seed_share_dict:K": [2, 3, 4], "rd_seed_share_dict:V": [b"a", b"b", b"c"]}
    )

    def ask(active: list[int], dropped: list[int]) -> str | None:
        configs = {Key.ACTIVE_NODE_ID_LIST: active, Key.DEAD_NODE_ID_LIST: dropped}
        return secaggplus.unmask_refusal(configs, state)

    assert ask([3, 4], [2]) is None  # an honest request: 2 dropped, 3 and 4 answering
    assert "as both active and dropped" in str(ask([2, 3, 4], [2]))
    assert "this client, which is answering, as dropped" in str(ask([2, 3], [4]))
    assert "lists a client twice" in str(ask([3, 3, 4], []))
    assert "clients [9] this client holds no shares of" in str(ask([3, 4], [9]))


def test_upload_refusal_names_each_inconsistent_request() -> None:
    import base64

    from flwr.client.mod.secure_aggregation.secaggplus_mod import SecAggPlusState
    from flwr.common.secure_aggregation.crypto.symmetric_encryption import encrypt
    from flwr.common.secure_aggregation.secaggplus_constants import Key
    from flwr.common.secure_aggregation.secaggplus_utils import share_keys_plaintext_concat

    keys = {n: base64.urlsafe_b64encode(bytes([n]) * 32) for n in (2, 3)}
    state = SecAggPlusState(nid=4, **{"ss2_dict:K": [2, 3], "ss2_dict:V": [keys[2], keys[3]]})

    def share(src: int, dst: int = 4, key: int | None = None) -> bytes:
        plain = share_keys_plaintext_concat(src, dst, b"b-share", b"sk-share")
        return encrypt(keys[src if key is None else key], plain)

    def ask(sources: list[int], shares: list[bytes] | None = None) -> str | None:
        cts = [share(n) if n in keys else b"x" for n in sources] if shares is None else shares
        configs = {Key.SOURCE_LIST: sources, Key.CIPHERTEXT_LIST: cts}
        return secaggplus.upload_refusal(configs, state)

    assert ask([2, 3]) is None and ask([3]) is None  # the clients that shared keys with 4
    assert "lists a client's key shares twice" in str(ask([2, 3, 3]))
    assert "sources and key shares differ in number" in str(ask([2, 3], [share(2)]))
    assert "from clients [4, 9] this client shares no key with" in str(ask([2, 4, 9]))
    # Flower decrypts them only after the round's fit: a forged or misdirected share is refused
    # before the data is read
    assert "from client 3 does not decrypt as one" in str(ask([2, 3], [share(2), b"forged"]))
    assert "from client 3 does not decrypt" in str(ask([2, 3], [share(2), share(2, key=3)]))
    assert "from client 2 does not decrypt" in str(ask([2], [share(2, dst=5)]))


def test_share_keys_refusal_bounds_the_key_holders_by_k() -> None:
    """A server that connected more clients than the run declares hands each the keys of all
    of them; 2t of them could then split an unmask at t > K/2. At most K key holders (and no
    more than the setup's sample) are accepted."""
    from flwr.client.mod.secure_aggregation.secaggplus_mod import SecAggPlusState
    from flwr.common.secure_aggregation.secaggplus_constants import Key

    state = SecAggPlusState(nid=2, sample_num=5)

    def ask(n: int, k: int = 5) -> str | None:
        configs = {Key.STAGE: "share_keys", **{str(i): [b"pk1", b"pk2"] for i in range(2, 2 + n)}}
        return secaggplus.share_keys_refusal(configs, state, k)

    assert ask(5) is None and ask(3) is None
    assert "lists 6 clients, more than the round's 5" in str(ask(6))
    assert "lists 5 clients, more than the round's 4" in str(ask(5, k=4))


def test_repeated_key_shares_do_not_pass_a_collusion_margin(tmp_path: Path) -> None:
    """Distributed DP over SecAgg+, t = 3 of K = 5; client 2 alone needs its sums to withstand
    one colluder (S >= 4). Clients 5 and 6 die at the setup, so 3 clients share keys. The
    server then repeats the key shares of 3 in 2's upload request and those of 2 in 3's: Flower
    1.41's client decrypts both copies, the doubled pair masks still cancel in the sum, and 2
    counted 4 clients and uploaded into a sum of 3 (a helper's attack released it). Client 2
    now refuses a request that lists a client twice, before its data is read."""
    from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key, Stage

    from privcal.federated.flower.local import LocalGrid, run_local
    from privcal.federated.policy import ClientPolicy

    victim, partner, dead = 2, 3, (5, 6)
    nodes = [
        {"data": _site(tmp_path, f"s{k}.npz", 120 + k), "status": str(tmp_path / f"s{k}.log"),
         **ClientPolicy(50.0, 1e-5, 2, ("distributed",), collusion_margin=int(k == 0)).to_node()}
        for k in range(5)
    ]  # fmt: skip

    class Repeating(LocalGrid):
        def _deliver(self, msg):  # type: ignore[no-untyped-def]
            nid, configs = (
                msg.metadata.dst_node_id,
                msg.content.config_records.get(RECORD_KEY_CONFIGS),
            )
            stage = configs.get(Key.STAGE) if configs is not None else None
            if nid in dead and stage in (
                Stage.SETUP,
                Stage.SHARE_KEYS,
                Stage.COLLECT_MASKED_VECTORS,
            ):
                return None
            if stage == Stage.COLLECT_MASKED_VECTORS and nid in (victim, partner):
                other = partner if nid == victim else victim
                srcs, cts = list(configs[Key.SOURCE_LIST]), list(configs[Key.CIPHERTEXT_LIST])
                configs[Key.SOURCE_LIST] = [*srcs, other]
                configs[Key.CIPHERTEXT_LIST] = [*cts, cts[srcs.index(other)]]
            return super()._deliver(msg)

        def pull_messages(self, message_ids):  # type: ignore[no-untyped-def]
            return [m for m in super().pull_messages(message_ids) if m is not None]

    conf = {"method": "fedtemp", "rounds": 1, "n-classes": C, "min-clients": 2, "epsilon": 2.0,
            "threshold": 3, "secagg": True, "aggregation": "distributed",
            "round-timeout-s": 0.5, "out-dir": str(tmp_path / "out")}  # fmt: skip
    with pytest.raises(RuntimeError, match="lists a client's key shares twice"):
        run_local(conf, nodes, grid_class=Repeating)
    status = Path(nodes[0]["status"]).read_text()
    assert "round upload: refused (the upload request lists a client's key shares twice)" in status
    assert ": answered (" not in status, status
    assert not (tmp_path / "out" / "calibrator.json").exists()

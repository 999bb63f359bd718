"""Everything a Flower client sends, field by field, and the ledger it charges first.

The ClientApp's only messages are its replies to the server's ``query`` messages (Flower's own
connection traffic carries no privcal data), and the SecAgg+ client's only upload is the
``(parameters, num_examples, metrics)`` triple of ``fit`` (masked by ``secaggplus_mod``). The
handlers are called directly, as Flower calls them, on a client that holds a privacy ledger.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Message,
    RecordDict,
)

from privcal.audits.federated import _instruction
from privcal.federated import FedBBQ, expected_cohort
from privcal.federated.flower import client_app, secagg, task
from privcal.federated.flower import server_app as srv
from privcal.privacy import InsecureNoiseWarning, PrivacyOdometer

C = 3
RUN = {"epsilon": 1.0, "delta": 1e-5, "rounds": 4, "n-classes": C, "num-nodes": 2}


@pytest.fixture()
def node(tmp_path: Path) -> dict[str, object]:
    rng = np.random.default_rng(0)
    z = 4.0 * rng.normal(size=(57, C))
    y = rng.integers(0, C, 57)
    np.savez(tmp_path / "d.npz", logits=z, labels=y)
    return {"data": str(tmp_path / "d.npz"), "ledger": str(tmp_path / "l.sqlite"), "budget": 1.0}


def _query(content: RecordDict) -> Message:
    return _instruction(content, 7)  # type: ignore[no-any-return]


def _context(
    node: dict[str, object], run_config: dict[str, object] | None = None, run_id: int = 1
) -> Context:
    return Context(
        run_id=run_id, node_id=7, node_config=node, state=RecordDict(), run_config=run_config or {}
    )


def _step(
    node: dict[str, object], cfg: dict[str, object], state: dict[str, np.ndarray], run_id: int = 1
) -> Message:
    arrays = ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in state.items()})
    msg = _query(RecordDict({"state": arrays, "config": ConfigRecord(cfg)}))
    return client_app.query(msg, _context(node, cfg, run_id=run_id))


def _spent(node: dict[str, object]) -> float:
    return PrivacyOdometer(1.0, ledger=str(node["ledger"]), delta_budget=1e-5).spent


@pytest.mark.parametrize("method", ["fedtemp", "fedbbq"])
def test_a_dp_round_sends_only_the_clipped_payload_after_charging(
    node: dict[str, object], method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = []
    real_load = client_app.client_data

    def load(node_config, run_config):  # type: ignore[no-untyped-def]
        seen.append(_spent(node))  # the ledger's state when the client first reads its data
        return real_load(node_config, run_config)

    monkeypatch.setattr(client_app, "client_data", load)
    cfg = {**task.DEFAULTS, **RUN, "method": method, "weighting": "none", "round": 1}
    fm = task.method_from_config(cfg)
    state = fm.init(C)
    reply = _step(node, cfg, state)

    # charged the run's composed epsilon after round 1 of 4 before the data was read
    first = task.composed_epsilon(cfg, 1)
    assert 0.25 < first < 1.0
    assert seen == [pytest.approx(first)]
    assert _spent(node) == pytest.approx(first)
    # every field of the reply: one ArrayRecord with one entry, nothing else
    assert set(reply.content.keys()) == {"arrays"}
    assert set(reply.content["arrays"].keys()) == {"payload"}
    payload = task.array_of(reply.content["arrays"], "payload")
    z, y = task.load_client_data(str(node["data"]))
    dp = task.dp_from_config(cfg, task.server_noise(cfg, "test"))
    assert dp is not None
    np.testing.assert_array_equal(payload, fm.clip(fm.client_step(state, z, y), dp))
    np.testing.assert_array_equal(fm.clip(payload, dp), payload)  # already within the bounds
    assert np.abs(payload).max() <= fm.payload_bound(dp) + 1e-9
    if isinstance(fm, FedBBQ):
        assert np.linalg.norm(payload[0], axis=1).max() <= 10.0 + 1e-9
        assert np.linalg.norm(payload[1], axis=1).max() <= 50.0 + 1e-9


def test_spent_budget_refuses_with_a_reason_only(node: dict[str, object]) -> None:
    cfg = {**task.DEFAULTS, **RUN, "method": "fedtemp", "rounds": 1, "round": 1}
    state = {"params": np.array([1.0])}
    assert set(_step(node, cfg, state).content.keys()) == {"arrays"}  # spends the whole 1.0
    reply = _step(node, cfg, state, run_id=2)  # the next run
    assert set(reply.content.keys()) == {"info"}
    assert set(reply.content["info"].keys()) == {"refused"}
    assert "budget" in str(reply.content["info"]["refused"]).lower()
    assert _spent(node) == pytest.approx(1.0)


@pytest.mark.parametrize(("rnd", "reason"), [(1, "already answered round 1"), (3, "not a round")])
def test_a_round_is_answered_once_and_only_within_the_run(
    node: dict[str, object], rnd: int, reason: str
) -> None:
    """A server that asks a round again (or one beyond T) gets a refusal, not a second release
    the ledger did not plan for; nothing more is charged."""
    cfg = {**task.DEFAULTS, **RUN, "method": "fedtemp", "rounds": 2, "round": 1}
    state = {"params": np.array([1.0])}
    assert set(_step(node, cfg, state).content.keys()) == {"arrays"}
    spent = _spent(node)
    reply = _step(node, {**cfg, "round": rnd}, state)
    assert reason in str(reply.content["info"]["refused"])
    assert _spent(node) == spent


def test_ledger_client_refuses_runs_without_dp(node: dict[str, object]) -> None:
    cfg = {**task.DEFAULTS, **RUN, "epsilon": 0.0, "method": "fedtemp", "round": 1}
    reply = _step(node, cfg, {"params": np.array([1.0])})
    assert set(reply.content.keys()) == {"info"}
    assert "no DP (epsilon 0)" in str(reply.content["info"]["refused"])
    assert _spent(node) == 0.0


@pytest.mark.parametrize(("epsilon", "ledger"), [(1.0, False), (0.0, True), (1.0, True)])
def test_class_counts_are_only_sent_in_runs_without_dp(
    node: dict[str, object], epsilon: float, ledger: bool
) -> None:
    nd = node if ledger else {"data": node["data"]}
    cfg = {**task.DEFAULTS, **RUN, "epsilon": epsilon, "task": "count", "round": 0}
    reply = client_app.query(_query(RecordDict({"config": ConfigRecord(cfg)})), _context(nd, cfg))
    assert set(reply.content.keys()) == {"info"} and "refused" in reply.content["info"]


def test_class_counts_in_a_run_without_dp_are_the_only_exact_release(
    node: dict[str, object],
) -> None:
    nd = {"data": node["data"], "accept": "none"}  # this client accepts runs without DP
    cfg = {**task.DEFAULTS, **RUN, "epsilon": 0.0, "task": "count", "round": 0}
    reply = client_app.query(_query(RecordDict({"config": ConfigRecord(cfg)})), _context(nd, cfg))
    assert set(reply.content.keys()) == {"arrays"}
    assert task.array_of(reply.content["arrays"], "payload").sum() == 57


def test_secagg_client_charges_and_sends_a_public_weight(node: dict[str, object]) -> None:
    run = {**task.DEFAULTS, **RUN, "method": "fedtemp"}
    client = secagg._PrivcalClient(_context(node, run))
    fm = task.method_from_config(run)
    params, num_examples, metrics = client.fit([fm.init(C)["params"]], {"round": 1})
    assert _spent(node) == pytest.approx(task.composed_epsilon(run, 1))
    assert num_examples == 1 and metrics == {}  # a public constant, never the client's size
    assert len(params) == 1 and np.abs(params[0]).max() <= run["secagg-clipping-range"]
    with pytest.raises(RuntimeError, match=r"no DP \(epsilon 0\)"):
        secagg._PrivcalClient(_context(node, {**run, "epsilon": 0.0})).fit(
            [np.array([1.0])], {"round": 2}
        )


def test_server_round_divides_by_the_declared_cohort(
    node: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server step gets the fixed public cohort p K, whatever the number of replies."""
    cfg = {**task.DEFAULTS, **RUN, "method": "fedtemp", "noise": "seeded", "sample-rate": 0.5}
    fm = task.method_from_config(cfg)
    state = fm.init(C)
    seeded_ok = {"data": node["data"], "allow-seeded-noise": True}  # the client opts in
    reply = _step(seeded_ok, {**cfg, "round": 1}, state)
    with pytest.warns(InsecureNoiseWarning):
        dp = task.dp_from_config(cfg, task.server_noise(cfg, "test"))
    seen = []
    real = fm.server_step

    def spy(st, total, n, dp=None, denominator=None):  # type: ignore[no-untyped-def]
        seen.append((n, denominator))
        return real(st, total, n, dp=dp, denominator=denominator)

    monkeypatch.setattr(fm, "server_step", spy)
    cohort = srv.declared_cohort(cfg)
    shape = fm.payload_shape(C)
    srv.release_round(fm, state, [reply], shape, 1, dp, cohort)
    srv.release_round(fm, state, [reply, reply], shape, 2, dp, cohort)
    assert cohort == expected_cohort(0.5, 2) == 1.0
    assert seen == [(1, 1.0), (2, 1.0)]


def test_seeded_server_noise_marks_the_report_not_private() -> None:
    cfg = {**task.DEFAULTS, **RUN, "method": "fedbbq", "noise": "seeded"}
    fm = task.method_from_config(cfg)
    with pytest.warns(InsecureNoiseWarning):
        dp = task.dp_from_config(cfg, task.server_noise(cfg, "the privcal ServerApp"))
    fm.server_step(fm.init(C), np.zeros(fm.payload_shape(C)), 0, dp=dp)
    report = srv.run_report(fm, dp, C, cfg)
    assert report.status == "not private: seeded noise"
    assert (report.unit, report.relation) == ("user", "add/remove")
    assert any("K=2" in p for p in report.public)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        secure = task.server_noise({**cfg, "noise": "secure"}, "x")
    assert secure.secure
    with pytest.raises(ValueError, match="'noise' run config"):
        task.server_noise({**cfg, "noise": "nope"}, "x")


@pytest.mark.parametrize(
    ("entry", "preset", "expected"),
    [
        ("import privcal.federated.flower.executor", None, "0"),
        ("from privcal.cli._flower import need_flwr; need_flwr()", None, "0"),
        ("import privcal.federated.flower.executor", "1", "1"),  # the user opted in
    ],
)
def test_flower_telemetry_is_off_unless_the_user_opts_in(
    entry: str, preset: str | None, expected: str, tmp_path: Path
) -> None:
    """Flower reads FLWR_TELEMETRY_ENABLED once, on import; privcal sets "0" before that, in a
    fresh interpreter as a user's process would start, and passes it to the processes it runs."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "FLWR_TELEMETRY_ENABLED"}
    if preset is not None:
        env["FLWR_TELEMETRY_ENABLED"] = preset
    code = (
        f"{entry}\nimport flwr.supercore.telemetry as t\n"
        "from privcal.federated.flower.deploy import FlowerProcesses\n"
        f"print(t.FLWR_TELEMETRY_ENABLED, FlowerProcesses({str(tmp_path)!r}).env"
        "['FLWR_TELEMETRY_ENABLED'])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == [expected, expected], out.stderr


def test_a_signal_while_the_run_timer_starts_leaves_no_thread_holding_the_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI turns SIGTERM into an exception in the main thread. If it lands inside the run
    timer's start (the moment the test of the real processes sends it: just after `flwr run`
    starts), the timer thread is already running: it must be a daemon and cancelled, or the
    process stays open for the run's whole timeout after its cleanup (the flaky SIGTERM test)."""
    import subprocess
    import sys
    import threading

    from privcal.federated.flower.deploy import FlowerProcesses

    fp = FlowerProcesses(tmp_path)
    sleeper = [sys.executable, "-c", "import time; time.sleep(30)"]
    started: list[subprocess.Popen[str]] = []

    def spawn(name: str, args: object, piped: bool = False) -> subprocess.Popen[str]:
        assert (name, piped) == ("flwr-run", True)
        started.append(
            subprocess.Popen(sleeper, stdout=subprocess.PIPE, text=True, start_new_session=True)
        )
        fp.procs["flwr-run"] = started[-1]
        return started[-1]

    monkeypatch.setattr(fp, "_spawn", spawn)
    start = threading.Timer.start

    def start_then_signal(self: threading.Timer) -> None:
        start(self)
        raise KeyboardInterrupt  # what the handler raises, right after the thread started

    monkeypatch.setattr(threading.Timer, "start", start_then_signal)
    before = set(threading.enumerate())
    with pytest.raises(KeyboardInterrupt):
        fp.run({"method": "fedtemp"}, timeout_s=600)
    left = [t for t in set(threading.enumerate()) - before if t.is_alive() and not t.daemon]
    assert left == []
    assert "flwr-run" not in fp.procs and started[0].poll() is not None  # stopped on the way out
    assert started[0].stdout is not None
    started[0].stdout.close()


def test_the_supernode_launcher_runs_flower_without_importing_privcal() -> None:
    """A SuperNode process runs only Flower: its launcher is started from its file, so none of
    privcal's packages (scipy, scikit-learn) is imported on its way (half its start-up time)."""
    import subprocess
    import sys

    from privcal.federated.flower.deploy import supernode_command

    cmd = supernode_command("127.0.0.1:1", {"data": "x.npz"}, ["--insecure"], 1.0, 1)
    assert cmd[1] == "-P" and cmd[2].endswith("supernode.py")
    code = (
        "import runpy, sys\n"
        f"sys.argv = [{cmd[2]!r}, '--help']\n"
        "try:\n"
        f"    runpy.run_path({cmd[2]!r}, run_name='__main__')\n"
        "except SystemExit as e:\n"
        "    assert e.code in (0, None), e.code\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'privcal'))"
    )
    out = subprocess.run(
        [sys.executable, "-P", "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout + out.stderr
    assert "flower-supernode" in out.stdout  # Flower's own help: the SuperNode ran


def test_a_supernode_whose_port_was_taken_starts_again_on_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``free_port`` hands out a port that is free when asked; on a busy machine another
    process may bind it before the SuperNode does, which then exits ("address already in use")
    and its client said it could not reach the server (a CI flake with a Ray run beside it).
    The SuperNode now starts again on another port."""
    import socket

    from privcal.federated.flower import deploy

    fp = deploy.FlowerProcesses(tmp_path)  # its SuperLink port drawn before the patch
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    ports = iter([taken.getsockname()[1], deploy.free_port()])
    monkeypatch.setattr(deploy, "free_port", lambda: next(ports))
    try:
        proc = fp.start_supernode(
            "node", {"data": "x"}, wait_s=0, retry_s=30, superlink="127.0.0.1:9"
        )
        assert proc.poll() is None, (tmp_path / "node.log").read_text()
        assert fp.runtime["node"] != f"127.0.0.1:{taken.getsockname()[1]}"
    finally:
        fp.stop()
        taken.close()


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs Linux's /proc")
def test_stop_ends_what_outlived_its_parent(tmp_path: Path) -> None:
    """Ray's ClientAppActor workers are the raylet's children and, under load, outlived
    ``privcal federate simulate``: stop() ends every process that carries the object's mark,
    a descendant or not, and leaves a process without it alone."""
    import subprocess
    import sys

    from privcal.federated.flower.deploy import FlowerProcesses, _marked

    fp = FlowerProcesses(tmp_path)
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    orphan = subprocess.Popen(sleeper, env=fp.env, start_new_session=True)  # no one's child
    other = subprocess.Popen(sleeper, start_new_session=True)
    try:
        assert _marked(fp.mark) == [orphan.pid]
        fp.stop()
        assert orphan.wait(timeout=5) == -9 and _marked(fp.mark) == []
        assert other.poll() is None
    finally:
        for proc in (orphan, other):
            proc.kill()
            proc.wait()

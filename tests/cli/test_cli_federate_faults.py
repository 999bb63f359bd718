"""``privcal federate`` as real processes under faults the SIGTERM/SIGINT tests do not cover.

Each test starts the server and its clients as separate ``privcal federate`` processes (the
SuperLink on a free port), injects one fault, and checks that every process privcal started
ends within a bounded time, each client exits with one line and a non-zero status, no
temporary folder is left, and the ledgers and the server's files say what happened.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("flwr")

from privcal.federated.flower.deploy import FlowerProcesses, free_port
from privcal.privacy import PrivacyOdometer

# these runs share the machine with the other xdist worker's tests: each bound on a shutdown
# is a deadline polled for, many times what an idle machine takes
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(120)]

BIN = Path(sys.executable).parent
ENV = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "PYTHONUNBUFFERED": "1"}

#: The ``client_files`` fixture (tests/cli/conftest.py): writes each client's data file.
ClientFiles = Callable[[Path, list[str]], None]


def _start(args: list[str], wd: Path, log: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["privcal", "federate", *args],
        cwd=wd,
        env=ENV,
        stdout=(wd / log).open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _wait_for(path: Path, needle: str, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if path.exists() and needle in path.read_text(errors="replace"):
            return
        time.sleep(0.2)
    raise AssertionError(f"no {needle!r} in {path.name} within {wait_s} s:\n{path.read_text()}")


def _alive(pids: list[int]) -> list[str]:
    out = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if state != "Z":
            out.append(f"{pid} {cmd[:120]}")
    return out


def _work_dirs(pids: list[int]) -> set[Path]:
    """The temporary folders (``privcal-flwr-*``) the processes ``pids`` run in."""
    out = set()
    for pid in pids:
        try:
            cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
        except OSError:
            continue
        if cwd.name.startswith("privcal-flwr-") and cwd.parent == Path(tempfile.gettempdir()):
            out.add(cwd)
    return out


def _existing(dirs: set[Path]) -> set[Path]:
    return {d for d in dirs if d.exists()}


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _client(wd: Path, name: str, port: int, *extra: str) -> subprocess.Popen[bytes]:
    """``privcal federate client`` of ``name.npz`` (log ``name.log``), ``--retry-s 10``."""
    args = ["--superlink", f"127.0.0.1:{port}", "--data", f"{name}.npz", "--insecure"]
    return _start(["client", *args, "--retry-s", "10", *extra], wd, f"{name}.log")


def _federation(
    wd: Path,
    client_files: ClientFiles,
    k: int,
    rounds: int,
    server_extra: tuple[str, ...] = (),
    client_extra: tuple[str, ...] = (),
) -> tuple[subprocess.Popen[bytes], list[subprocess.Popen[bytes]]]:
    """``k`` clients ``site0..`` (each with a ledger of budget 5) and a FedTemp server at
    epsilon 5 over ``rounds`` rounds (``--force``: the plan is not the point), as processes:
    ``(server, clients)``."""
    names = [f"site{j}" for j in range(k)]
    client_files(wd, names)
    port = free_port()
    clients = [
        _client(wd, n, port, "--budget", "5", "--ledger", f"{n}.sqlite", *client_extra)
        for n in names
    ]
    server = _start(
        ["server", "--port", str(port), "--method", "fedtemp", "--rounds", str(rounds),
         "--num-nodes", str(k), "--n-classes", "10", "--epsilon", "5", "--insecure", "--out",
         "out", "--force", *server_extra],
        wd, "server.log",
    )  # fmt: skip
    return server, clients


@pytest.mark.timeout(240)  # the sum of its waits (60 + 15 + 3 x 40 s)
def test_sigkill_of_the_server_mid_run_leaves_no_process_and_an_honest_record(
    tmp_path: Path, client_files: ClientFiles
) -> None:
    """SIGKILL to ``privcal federate server`` after round 1 of 3 (it cannot clean up): within
    15 s no process it started remains (its ServerApp, whose calls retry forever, used to
    outlive it with ``flwr run`` and the SuperLink, holding the port), its temporary folder is
    gone and ``interrupted.json`` says the clients were not told; each client exits 1 with
    "Lost the server" after ``--retry-s`` (not "Stopped by SIGINT", exit 130: Flower's
    in-process task heartbeat sent SIGINT to the client), and each ledger holds exactly the
    rounds it answered (the server's history holds round 1; a client whose round-2 reply left
    before the kill holds round 2 as well)."""
    names = ["site0", "site1", "site2"]
    server, clients = _federation(tmp_path, client_files, 3, 3)
    port = int(server.args[server.args.index("--port") + 1])
    try:
        _wait_for(tmp_path / "server.log", "round 1/3", 60)
        tree = FlowerProcesses._descendants(server.pid)
        work = _work_dirs(tree)
        client_work = _work_dirs([q for c in clients for q in FlowerProcesses._descendants(c.pid)])
        assert len(work) == 1 and len(client_work) == 3
        server.send_signal(signal.SIGKILL)
        server.wait()  # reaped, as a shell would
        deadline = time.monotonic() + 15
        while _alive(tree) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _alive(tree) == []
        assert _existing(work) == set()
        assert _port_free(port)
        info = json.loads((tmp_path / "out" / "interrupted.json").read_text())
        assert info["interrupted"] is True and info["clients_told"] is False
        for c in clients:
            assert c.wait(timeout=40) == 1
    finally:
        for p in [server, *clients]:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
    history = json.loads((tmp_path / "out" / "history.json").read_text())
    spent = history[-1]["epsilon_spent"]
    for n in names:
        log = (tmp_path / f"{n}.log").read_text()
        assert "Error: Lost the server at" in log and "SIGINT" not in log, log
        # charged for the rounds it answered: round 1 (the server's history), and round 2
        # when its reply had left before the server was killed (a release all the same)
        answered = re.findall(r"answered \(charged .* composed epsilon is (\S+) of 5", log)
        assert answered and float(answered[0]) == pytest.approx(spent, rel=1e-2), log
        odo = PrivacyOdometer.open(tmp_path / f"{n}.sqlite")
        assert odo.spent == pytest.approx(float(answered[-1]), rel=1e-2), (n, answered)
    assert _existing(client_work) == set()


@pytest.mark.timeout(300)  # the sum of its waits (90 + 150 + 3 x 15 + 10 s), should all run long
def test_a_secagg_client_killed_mid_run_is_a_dropout_and_the_run_ends_within_minutes(
    tmp_path: Path, client_files: ClientFiles
) -> None:
    """SIGKILL to one of four SecAgg+ clients (noise threshold t = 3 of K = 4) once it has
    answered round 1 of 2. SecAgg+ counts it as a dropout: each stage it misses waits out
    ``--round-timeout`` (15 s here), and every round releases the sum of the three survivors'
    uploads (any t of them carry the noise), whether the SuperLink still lists the dead client
    or no longer does (its heartbeat lapses after about a minute).

    Before: the server waited up to 180 s in Flower's retries for the killed client's
    unfinished upload (messaging: a pull with no deadline); a round whose setup the dead
    client missed halted with a ``KeyError`` from every survivor (Flower's unmask stage asked
    them for the key share of a client that never shared one, ``secaggplus.only_key_holders``);
    once the dead client was no longer listed, the survivors refused a setup of 3 (their
    policy took only a sample of exactly K) and the run failed; earlier still the server
    waited in FedAvg's ``sample`` until ``--timeout``. No process is left, the clients stop at
    once, and each ledger holds the rounds its client answered.

    A fifth client that connects after round 0 (the run has its four) takes no part: it is
    charged nothing and exits 1, the run having ended without it. It used to be sampled into
    the next SecAgg+ setup, whose five clients every client refused (more than the declared
    K = 4), and, when a run ended without it, to exit 0 with "The run is over"."""
    names = [f"site{k}" for k in range(4)]
    # --retry-s 30: a client told of the end stops within seconds, one left to find out only
    # after 30 s
    server, clients = _federation(
        tmp_path, client_files, 4, 2, ("--secagg", "--round-timeout", "15"), ("--retry-s", "30")
    )
    client_files(tmp_path, ["late"])
    port = int(server.args[server.args.index("--port") + 1])
    try:
        _wait_for(tmp_path / "site3.log", "round 1/2: answered", 90)
        clients[3].send_signal(signal.SIGKILL)
        clients[3].wait()
        # the run has at least 15 s to go (round 1's unmask stage waits for the dead client)
        late = _client(tmp_path, "late", port, "--budget", "5", "--ledger", "late.sqlite")
        clients.append(late)
        tree = [q for p in [server, *clients] for q in FlowerProcesses._descendants(p.pid)]
        work = _work_dirs(tree)
        # each stage the dead client misses waits out --round-timeout (15 s); at most 3 + 4
        assert server.wait(timeout=150) == 0, (tmp_path / "server.log").read_text()
        for c in [*clients[:3], late]:  # told at once that the run ended (not after --retry-s)
            assert c.wait(timeout=15) == (1 if c is late else 0)
        deadline = time.monotonic() + 10
        while _alive(tree) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _alive(tree) == []
        assert _existing(work) == set()
    finally:
        for p in [server, *clients]:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
    out = (tmp_path / "server.log").read_text()
    assert "Traceback" not in out and "KeyError" not in out, out
    assert "round 2/2: 3 replied, 1 dropped" in out, out  # the survivors' sum, released
    assert (tmp_path / "out" / "privacy_report.json").exists()
    for n in names:
        log = (tmp_path / f"{n}.log").read_text()
        answered = re.findall(r"answered \(charged .* composed epsilon is (\S+) of 5", log)
        spent = PrivacyOdometer.open(tmp_path / f"{n}.sqlite").spent
        assert answered and spent == pytest.approx(float(answered[-1]), rel=1e-2), (n, log)
        assert len(answered) == (1 if n == names[3] else 2), (n, log)
    late_log = (tmp_path / "late.log").read_text()
    assert re.search(r": (answered|refused) \(", late_log) is None, late_log  # no round
    assert "Error: The run ended without this client" in late_log, late_log
    assert PrivacyOdometer.open(tmp_path / "late.sqlite").spent == 0.0


def test_a_client_whose_data_file_goes_after_joining_says_so_and_is_not_charged(
    tmp_path: Path, client_files: ClientFiles
) -> None:
    """A client's ``--data`` file is removed once it has joined: the run goes on without it
    (dropped each round), its ledger is charged nothing, and it says why on its own console
    (``round r/T: failed (...)``) and exits 1. It used to show no line for its failed rounds,
    miss the end of the run (its local check raised) and end, 10 s after the run, with "Lost
    the server", which was still there."""
    server, clients = _federation(tmp_path, client_files, 3, 2)
    try:
        _wait_for(tmp_path / "site2.log", "joined run", 60)
        (tmp_path / "site2.npz").unlink()
        assert server.wait(timeout=60) == 0, (tmp_path / "server.log").read_text()
        codes = [c.wait(timeout=8) for c in clients]
    finally:
        for p in [server, *clients]:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
    log = (tmp_path / "site2.log").read_text()
    assert codes == [0, 0, 1], log
    assert "round 1/2: failed (ValueError: " in log and "not a readable .npz file" in log, log
    assert "Error: This client failed 2 round(s) of the run" in log and "Lost the server" not in log
    assert PrivacyOdometer.open(tmp_path / "site2.sqlite").spent == 0.0
    assert "round 2/2: 2 replied, 1 dropped" in (tmp_path / "server.log").read_text()

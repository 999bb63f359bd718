"""``privcal federate`` as docs/cli.md gives it: real SuperLink, SuperNodes and CLI processes.

Runs the documented two-client block (no DP), then the five-client block (ledgers, user-level
DP), each as written in docs/cli.md (synthetic over-confident logits in the files they name)
with one change: the SuperLink listens on a free port instead of the default 9092 (the server
gets ``--port``, each client ``--superlink``: :func:`_blocks`), so that runs side by side (two
pytest-xdist workers, or another checkout's tests on the same machine) never share a port; and
checks the server's per-round progress lines, the clients' status lines and end,
that the calibrator is not worse than the uncalibrated model on the clients' data, that a spent
ledger refuses with exit status 3, and that no process or temporary folder is left after the
run and after SIGTERM.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")

from privcal.calibrators import calibrator_from_dict
from privcal.federated.flower.deploy import FlowerProcesses, free_port
from privcal.metrics import ece
from privcal.metrics.statistics import softmax

# the runs as documented share the machine with the other worker's tests; the two that time
# their shutdown (SIGTERM, SIGINT: a dozen processes within seconds) are exclusive: no other test
# runs at once (xdist)
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

DOCS = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
BIN = Path(sys.executable).parent

#: The ``client_files`` fixture (tests/cli/conftest.py): writes each client's data file.
ClientFiles = Callable[[Path, list[str]], None]


def _blocks() -> list[str]:
    """The bash blocks of the ``privcal federate`` section of docs/cli.md, each with its
    SuperLink on a free port of its own (:func:`_on_free_port`)."""
    text = DOCS.read_text()
    start = text.index("## `privcal federate`")
    section = text[start : text.index("\n## ", start + 5)]
    return [_on_free_port(b) for b in re.findall(r"```bash\n(.*?)```", section, flags=re.S)]


def _on_free_port(block: str) -> str:
    """``block`` with its server's SuperLink on a free loopback port (``--port``) and its
    clients pointed there (``--superlink``) instead of the documented default 127.0.0.1:9092."""
    assert "--port" not in block and "--superlink" not in block, block
    port = free_port()
    server = "privcal federate server "
    client = "privcal federate client "
    assert server in block and client in block, block
    block = block.replace(server, f"{server}--port {port} ")
    return block.replace(client, f"{client}--superlink 127.0.0.1:{port} ")


def _start(block: str, wd: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.Popen(
        ["bash", "-c", f"{block}\nwait"],
        cwd=wd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _tmp_dirs() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("privcal-flwr-*")}


def _pipe_holders(proc: subprocess.Popen[str]) -> dict[int, str]:
    """Processes that still hold the write end of ``proc``'s stdout pipe, with their command
    line, state, kernel wait channel and thread names (what a hang after SIGTERM needs)."""
    assert proc.stdout is not None
    target = os.readlink(f"/proc/self/fd/{proc.stdout.fileno()}")  # "pipe:[inode]"
    out = {}
    for fd in Path("/proc").glob("[0-9]*/fd/*"):
        try:
            if os.readlink(fd) != target or int(fd.parent.parent.name) == os.getpid():
                continue
            pid = int(fd.parent.parent.name)
            base = Path(f"/proc/{pid}")
            state = (base / "stat").read_text().rsplit(")", 1)[1].split()[0]
            threads = sorted((t / "comm").read_text().strip() for t in (base / "task").iterdir())
            command = _cmdline(pid).replace(b"\x00", b" ").decode()
            wchan = (base / "wchan").read_text()
            out[pid] = f"{command} state={state} wchan={wchan} threads={threads}"
        except (OSError, ValueError):
            continue
    return out


def _alive(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            out.append(pid)
    return out


def _run_block(block: str, wd: Path, k: int, out: str, epsilon: float | None) -> str:
    before = _tmp_dirs()
    proc = _start(block, wd)
    seen: list[int] = []
    lines = []
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            lines.append(line)
            if "replied" in line:  # the run's processes are up: note every one seen
                seen = sorted(set(seen) | set(FlowerProcesses._descendants(proc.pid)))
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    output = "".join(lines)
    (wd / "block-output.log").write_text(output)  # whole, for a failure's assertion cuts it
    assert len(seen) > 2 * k, output  # SuperLink, SuperNodes, Flower helpers, CLI processes
    assert proc.returncode == 0, output
    # progress: one line per round with the counts and the spend; every client ends
    for t in range(1, 4):
        spent = (
            "no DP" if epsilon is None else rf"epsilon spent so far \S+ of {epsilon:g} \({t} of 3"
        )
        assert re.search(rf"round {t}/3: {k} replied, 0 dropped, 0 refused; {spent}", output)
    assert "Traceback" not in output
    assert output.count("end: the run is over") == k
    if epsilon is None:  # no ledger: nothing is charged
        assert output.count("round 3/3: answered (sent)") == k
    else:  # the server's composed total and each ledger's share agree after the last round
        assert f"epsilon spent so far {epsilon:g} of {epsilon:g} (3 of 3 rounds composed" in output
        share = re.compile(
            r"round 3/3: answered \(charged epsilon \S+ to the ledger: the run's composed "
            rf"epsilon is {epsilon:g} of {epsilon:g} after round 3/3\)"
        )
        assert len(share.findall(output)) == k
    # the calibrator is not worse than the uncalibrated model on the clients' data
    cal = calibrator_from_dict(json.loads((wd / out / "calibrator.json").read_text()))
    z = np.concatenate([np.load(p)["logits"] for p in sorted(wd.glob("*.npz"))])
    y = np.concatenate([np.load(p)["labels"] for p in sorted(wd.glob("*.npz"))])
    # ("not worse" is up to the ECE's sampling error, SE <= sqrt(e (1 - e) / n): under DP a
    # noise-dominated FedTemp release is T = 1; a client warns exactly when its own check is
    # worse)
    e_uncal, e_cal = ece(softmax(z), y), ece(cal.predict_proba(z), y)
    assert e_cal <= e_uncal + 3 * np.sqrt(e_uncal * (1 - e_uncal) / len(y))
    for line in output.splitlines():
        if line.startswith("check on this client's data"):
            e0, e1 = map(float, re.findall(r"ECE (\S+) -> (\S+),", line)[0])
            assert ("WARNING" in line) == (e1 > e0)
    # nothing left behind
    time.sleep(0.5)
    assert _alive(seen) == [], output
    assert _tmp_dirs() <= before
    return output


def test_documented_commands_two_then_five_clients(
    tmp_path: Path, client_files: ClientFiles
) -> None:
    two, five = _blocks()[:2]
    wd2, wd5 = tmp_path / "two", tmp_path / "five"
    wd2.mkdir()
    wd5.mkdir()
    client_files(wd2, ["client0", "client1"])
    client_files(wd5, [f"site{k}" for k in range(5)])
    assert "--epsilon" not in two and "--ledger" not in two  # two clients: no DP
    _run_block(two, wd2, 2, "federated-out", None)
    epsilon = float(re.findall(r"--epsilon (\S+)", five)[0])
    _run_block(five, wd5, 5, "federated-out-5", epsilon)
    # the block again: every ledger is spent, so every client refuses in round 0; the server
    # ends within 30 s of its start with one line naming why, each client with one line (exit
    # status 3)
    again = five.replace("--out federated-out-5", "--out federated-out-5-again")
    assert again != five  # a new folder: the first run's private release is not written over
    proc = _start(again, wd5)
    assert proc.stdout is not None
    lines, started = [], None
    try:
        for line in proc.stdout:
            lines.append(line)
            if started is None and "SuperLink on" in line:
                started = time.monotonic()
        proc.wait(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    output = "".join(lines)
    assert started is not None and time.monotonic() - started < 30, output
    assert output.count("Error: This client refused the run: the run costs epsilon 5") == 5
    assert "refused: 0 of 5 clients joined; min-clients is 2 (5 refused" in output, output
    # one Error line per client and one for the server (a node that left after refusing may
    # show as Flower's "Error: Node Unavailable" inside the server's refusal lines)
    errors = [ln for ln in output.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 6 and "Traceback" not in output, output


def test_documented_secagg_run_sends_no_noiseless_value(
    tmp_path: Path, client_files: ClientFiles
) -> None:
    """The documented SecAgg+ block with distributed noise, as written: the run ends like the
    others (progress, ledgers, every client's end, nothing left behind), the report says the
    server saw only the secure sum, and no reply in any client's transcript (every SecAgg+
    stage, after masking) carries the client's noiseless round-1 payload or its encoding."""
    from privcal.federated import FedTemp
    from privcal.federated.flower.task import DEFAULTS, client_payload, dp_from_config
    from privcal.federated.flower.transcript import (
        carries,
        noiseless_forms,
        read_transcript,
        reply_arrays,
    )
    from privcal.privacy import SecureNoise

    block = _blocks()[2]
    assert "--secagg" in block and "--transcript" in block
    names = [f"site{k}" for k in range(5)]
    client_files(tmp_path, names)
    epsilon = float(re.findall(r"--epsilon (\S+)", block)[0])
    _run_block(block, tmp_path, 5, "federated-secagg", epsilon)
    out = tmp_path / "federated-secagg"
    report = json.loads((out / "privacy_report.json").read_text())
    assert any("aggregation=distributed" in s for s in report["threat"])
    assert len(json.loads((out / "aggregator_view.json").read_text())) == 3  # one per round
    conf = {**DEFAULTS, "method": "fedtemp", "rounds": 3, "n-classes": 10, "num-nodes": 5}
    conf.update(epsilon=epsilon, delta=1e-5, secagg=True, aggregation="distributed")
    fm = FedTemp()
    dp = dp_from_config(conf, SecureNoise())
    for name in names:
        data = np.load(tmp_path / f"{name}.npz")
        x = client_payload(fm, fm.init(10), data["logits"], data["labels"], conf)
        forms = noiseless_forms(x, dp, fm)
        replies = read_transcript(tmp_path / f"{name}.jsonl")
        arrays = [a for e in replies for a in reply_arrays(e)]
        assert len(replies) >= 12 and arrays  # 4 SecAgg+ stages x 3 rounds, then the end
        for arr in arrays:
            assert not any(carries(arr, f, tol=0.5) for f in forms), name


@pytest.mark.exclusive
def test_sigterm_stops_every_process_and_removes_temporary_folders(
    tmp_path: Path, client_files: ClientFiles
) -> None:
    two = _blocks()[0]
    client_files(tmp_path, ["client0", "client1"])
    before = _tmp_dirs()
    proc = _start(two, tmp_path)
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:  # until the server has submitted the run to its SuperLink
        lines.append(line)
        if "SuperLink on" in line:
            break
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # ... and every Flower process is up
        tree = FlowerProcesses._descendants(proc.pid)
        names = [_cmdline(p) for p in tree]
        if sum(b"flwr\x00run" in n or b"supernode" in n for n in names) >= 3:
            break
        time.sleep(0.5)
    cli = [p for p, n in zip(tree, names, strict=True) if b"privcal\x00federate\x00" in n]
    assert len(cli) == 3 and len(tree) > 3, "".join(lines)
    for pid in cli:
        os.kill(pid, signal.SIGTERM)
    try:
        rest, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired as err:  # name what still holds the output pipe
        holders = _pipe_holders(proc)
        for pid in holders:
            os.kill(pid, signal.SIGKILL)
        raise AssertionError(f"output still open 60 s after SIGTERM: {holders}") from err
    assert rest.count("Stopped by SIGTERM") == 3, rest
    time.sleep(0.5)
    assert _alive(tree) == []
    assert _tmp_dirs() <= before


@pytest.mark.exclusive
def test_sigint_to_the_server_in_round_1_ends_every_process(
    tmp_path: Path, client_files: ClientFiles
) -> None:
    """Ctrl-C to the server of the documented five-client SecAgg+ block in round 1: within
    10 s no process privcal started remains (checked by PID), every client exits 0 with one
    line saying the server stopped the run, the port is free, and the output folder says the
    run was interrupted."""
    import socket

    block = _blocks()[2]
    port = int(re.findall(r"--port (\d+)", block)[0])
    client_files(tmp_path, [f"site{k}" for k in range(5)])
    proc = _start(block, tmp_path)
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:  # until every client has joined: round 1 is under way
        lines.append(line)
        if "clients joined the run" in line:
            break
    tree = FlowerProcesses._descendants(proc.pid)
    server = [p for p in tree if b"federate\x00server" in _cmdline(p)]
    assert len(server) == 1, "".join(lines)
    t0 = time.monotonic()
    os.kill(server[0], signal.SIGINT)
    try:
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    took = time.monotonic() - t0
    output = "".join(lines) + rest
    assert took < 10, output
    assert _alive(tree) == [], output
    assert output.count("The server stopped the run (the server's operator stopped") == 5, output
    assert "Stopped by SIGINT" in output and "Traceback" not in output, output
    with socket.socket() as s:  # the run's port is free again (a server can listen)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen()
    info = json.loads((tmp_path / "federated-secagg" / "interrupted.json").read_text())
    assert info["signal"] == "SIGINT" and info["clients_told"] is True


def test_documented_sources_over_secagg_send_no_noiseless_answer(
    tmp_path: Path, client_files: ClientFiles
) -> None:
    """Seed 000's data-source protocol over SecAgg+, as docs/cli.md gives it: three sources as
    separate processes answer DP Acc-T's query with distributed shares; each ledger is charged
    the fit's epsilon once; the report names SecAgg+ as the transport; and no reply in any
    source's transcript (every SecAgg+ stage, after masking) carries its noiseless answer or its
    fixed-point encoding."""
    from privcal.calibrators.search import geometric_grid
    from privcal.federated.flower.ring import residues_to_wire
    from privcal.federated.flower.transcript import carries, read_transcript, reply_arrays
    from privcal.privacy.odometer import read_ledger
    from privcal.private import DataSource
    from privcal.private.plan import CURVE_ANCHOR, CURVE_HIGH, CURVE_LOW, CURVE_RATIO

    block = _blocks()[3]
    assert "--method acc-t" in block and "--secagg" in block
    names = [f"hospital{k}" for k in range(3)]
    client_files(tmp_path, names)
    before = _tmp_dirs()
    proc = _start(block, tmp_path)
    seen: list[int] = []
    lines = []
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            lines.append(line)
            if not seen and "secure sum of" in line:
                seen = FlowerProcesses._descendants(proc.pid)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    output = "".join(lines)
    assert proc.returncode == 0, output
    assert "Traceback" not in output
    assert "secure sum of 3 of 3 sources" in output and "DP Acc-T over 3 sources" in output
    assert output.count("end: the run is over") == 3
    out = tmp_path / "federated-sources"
    report = json.loads((out / "privacy_report.json").read_text())
    assert report["epsilon"] == pytest.approx(1.0)
    threat = " ".join(report["threat"])
    assert "Flower's SecAgg+" in threat and "threshold t=2 of K=3" in threat
    assert all("distributed discrete laplace" in r["mechanism"] for r in report["releases"])
    grid = geometric_grid(CURVE_LOW, CURVE_HIGH, CURVE_RATIO)
    anchor = int(np.argmin(np.abs(np.log(grid / CURVE_ANCHOR))))
    for name in names:
        assert read_ledger(tmp_path / f"{name}.sqlite").spent == pytest.approx(1.0)
        data = np.load(tmp_path / f"{name}.npz")
        src = DataSource(data["logits"], data["labels"])
        exact = np.asarray(src._accuracy_gap_curve(grid, anchor).value, dtype=np.float64)
        forms = [exact]
        for scale in (2.0**k for k in range(0, 21)):  # every fixed-point scale, either rounding
            for enc in (np.floor(scale * exact), np.floor(scale * exact) + 1):
                residues = np.mod(enc, 2.0**31)
                forms += [residues, residues_to_wire(residues.astype(np.uint64), 31)]
        replies = read_transcript(tmp_path / f"{name}.jsonl")
        arrays = [a for e in replies for a in reply_arrays(e)]
        assert arrays, name
        for arr in arrays:
            assert not any(carries(arr, f, tol=0.5) for f in forms), name
    time.sleep(0.5)
    assert _alive(seen) == [], output
    assert _tmp_dirs() <= before

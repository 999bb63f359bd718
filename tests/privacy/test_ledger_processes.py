"""The SQLite ledger of PrivacyOdometer across processes: crash safety and concurrent spending."""

from __future__ import annotations

import math
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from privcal.privacy import PrivacyOdometer

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(sys.platform == "win32", reason="uses SIGKILL"),
]

SRC = str(Path(__file__).resolve().parents[2] / "src")
TIMEOUT = 120


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _spawn(code: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )


def test_sigkilled_process_loses_no_acknowledged_spend(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.sqlite"
    child = _spawn(
        f"""
        from privcal.privacy import PrivacyOdometer
        odo = PrivacyOdometer(1e6, ledger={str(ledger)!r}, name="child")
        i = 0
        while True:
            odo.spend(f"q{{i}}", 0.001, mechanism="laplace", sensitivity=1.0)
            print(i, flush=True)  # acknowledged: the spend was committed before this line
            i += 1
        """
    )
    acked: list[int] = []
    deadline = time.monotonic() + TIMEOUT
    assert child.stdout is not None
    try:
        while len(acked) < 40:
            assert time.monotonic() < deadline, "child too slow"
            line = child.stdout.readline()
            assert line, f"child died: {child.stderr.read() if child.stderr else ''}"
            acked.append(int(line))
    finally:
        os.kill(child.pid, signal.SIGKILL)
        # through the same buffered reader: readline may already hold acks read from the pipe,
        # which communicate(timeout=...) (raw reads of the descriptor) would never see
        out = child.stdout.read()
        child.wait(timeout=TIMEOUT)
    acked += [int(s) for s in out.split()]  # acks already in the pipe when it was killed
    assert child.returncode == -signal.SIGKILL

    con = sqlite3.connect(ledger)
    try:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        con.close()
    odo = PrivacyOdometer(1e6, ledger=ledger)
    queries = [r.query for r in odo.releases]
    assert {f"q{i}" for i in acked} <= set(queries)
    # at most one spend committed but not yet acknowledged when the signal hit
    assert len(acked) <= len(queries) <= len(acked) + 1
    assert queries == [f"q{i}" for i in range(len(queries))]
    assert math.isclose(odo.spent, 0.001 * len(queries), rel_tol=1e-12)


def test_two_processes_never_exceed_the_shared_budget(tmp_path: Path) -> None:
    ledger = tmp_path / "shared.sqlite"
    go = tmp_path / "go"
    PrivacyOdometer(1.0, ledger=ledger, name="shared")  # create the ledger with its budget
    code = f"""
        import os, time
        from pathlib import Path
        from privcal.privacy import BudgetExceededError, PrivacyOdometer
        odo = PrivacyOdometer(1.0, ledger={str(ledger)!r}, name="p" + str(os.getpid()))
        while not Path({str(go)!r}).exists():
            time.sleep(0.001)
        ok = 0
        for i in range(100):
            try:
                odo.spend(f"q{{i}}", 0.01)
                ok += 1
            except BudgetExceededError:
                pass
        print(ok, flush=True)
        """
    children = [_spawn(code), _spawn(code)]
    time.sleep(0.5)
    go.touch()
    successes = []
    for child in children:
        try:
            out, err = child.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            for c in children:
                c.kill()
            pytest.fail("a spending process did not finish in time")
        assert child.returncode == 0, err
        successes.append(int(out.strip()))

    odo = PrivacyOdometer(1.0, ledger=ledger)
    rows = odo.releases
    assert len(rows) == sum(successes)
    assert odo.spent <= 1.0 + 1e-12
    assert math.isclose(odo.spent, 0.01 * sum(successes), rel_tol=1e-12)
    # the relative tolerance lets 100 spends of 0.01 use a budget of 1.0 exactly
    assert sum(successes) == 100
    print("successes per process:", successes)

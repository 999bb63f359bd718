"""``privcal federate --method conformal-lac --secagg`` as real processes: the bash block of
docs/conformal.md (five clients with ledgers, a SuperLink, SecAgg+ with distributed noise
shares) runs as written on a free port and writes ``sets.json``, its report and each client's
coverage check. The apps' logic, plain and SecAgg+, with and without DP, is checked in process
by ``tests/federated/test_flower_conformal.py``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")

from privcal.federated.flower.deploy import free_port
from privcal.federated.methods.conformal import FederatedConformalSets
from privcal.metrics.calibration import coverage

# not exclusive: it times neither rounds nor shutdown, so it may share the machine (the tests
# that do are exclusive, and run alone)
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

DOCS = Path(__file__).resolve().parents[2] / "docs" / "conformal.md"
BIN = Path(sys.executable).parent


def _block() -> str:
    """The bash block of docs/conformal.md's federated section, on a free loopback port."""
    text = DOCS.read_text()
    start = text.index("## Federated conformal prediction")
    section = text[start : text.index("\n## ", start + 5)]
    (block,) = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    port = free_port()
    block = block.replace("privcal federate server ", f"privcal federate server --port {port} ")
    return block.replace(
        "privcal federate client ", f"privcal federate client --superlink 127.0.0.1:{port} "
    )


def test_documented_conformal_secagg_run_writes_the_sets(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    for k in range(5):
        y = rng.integers(0, 10, 300)
        z = rng.normal(size=(300, 10))
        z[np.arange(300), y] += 3.0
        np.savez(tmp_path / f"site{k}.npz", logits=z, labels=y)
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.Popen(
        ["bash", "-c", f"{_block()}\nwait"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=400)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, output
    assert "Traceback" not in output, output
    out = tmp_path / "fed-sets"
    sets = FederatedConformalSets.from_dict(json.loads((out / "sets.json").read_text()))
    report = json.loads((out / "privacy_report.json").read_text())
    assert report["released"]["parameters"]["threshold"] == sets.threshold_
    assert any("aggregation=distributed" in t for t in report["threat"])
    assert (out / "aggregator_view.json").exists() and not (out / "calibrator.json").exists()
    wrote = re.search(rf"Wrote {re.escape(str(out / 'sets.json'))}; beside it: (.*)", output)
    assert wrote is not None, output
    others = sorted(
        f.name for f in out.iterdir() if f.name not in ("sets.json", "privacy_report.json")
    )
    assert wrote.group(1).split(", ") == others and "history.json" in others, output
    # every client checked the sets on its own data, on its own console
    checks = re.findall(r"check on this client's data: coverage (\S+) \(target 0.9\)", output)
    assert len(checks) == 5, output
    mine = []
    for k in range(5):
        d = np.load(tmp_path / f"site{k}.npz")
        mine.append(f"{coverage(sets.predict_set(d['logits']), d['labels']):.4f}")
    assert sorted(checks) == sorted(mine)
    assert output.count("end: the run is over") == 5

"""``privcal federate simulate``: privcal's Flower apps on Flower's Simulation Engine (Ray).

One real run, as a user types it (a ``privcal`` process that starts a simulation SuperLink,
``flwr run``, ``flwr-simulation`` and Ray): six clients Dirichlet-split from one file, three DP
rounds with seeded server noise. Checked: exit status 0 with one progress line per round; the
temperature equals :func:`privcal.federated.simulate`'s on the same partitions
(``dirichlet_partition(labels, n_clients=6, beta=0.5, seed=2)``) with the same noise seed
(``SeededNoise(seed + 1)``), so the engine runs the same client and server steps; the run's
privacy report is the deployed apps' (user-level, ``K = 6`` declared, "not private: seeded
noise"); and no process the run started (Ray's included: they carry a marker in their
environment) is left. A Ray start costs seconds, so this is the one run; bad input is checked
in-process, before any work.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

pytest.importorskip("flwr")

from privcal.calibrators import calibrator_from_dict
from privcal.cli import app
from privcal.federated import dirichlet_partition, simulate
from privcal.privacy import SeededNoise

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent
MARK = "PRIVCAL_SIMULATION_TEST"


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    z = 3.0 * rng.normal(size=(240, 4))  # over-confident: the fitted T is well above 1
    y = np.argmax(z + 2.0 * rng.normal(size=z.shape), axis=1)
    path = tmp_path_factory.mktemp("sim") / "scores.npz"
    np.savez(path, logits=z, labels=y)
    return path, z, y


def _marked(token: str) -> list[str]:
    """Command lines of live processes whose environment carries ``MARK=token``."""
    needle = f"{MARK}={token}".encode()
    found = []
    for env in Path("/proc").glob("[0-9]*/environ"):
        try:
            if needle in env.read_bytes().split(b"\0"):
                found.append((env.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            continue
    return found


BAD = [
    (["--num-nodes", "0"], "--num-nodes"),
    (["--num-nodes", "3", "--beta", "0"], "--beta"),
    (["--num-nodes", "3", "--method", "fedfoo"], "--method"),
    (["--num-nodes", "3", "--epsilon", "1", "--delta", "1.5"], "--delta"),
    (["--num-nodes", "3", "--noise", "loud"], "--noise"),
    (["--num-nodes", "100000"], "use at most 240 clients"),  # more clients than rows
    (["--num-nodes", "200", "--beta", "0.01"], "use fewer clients or a larger beta"),
]


@pytest.mark.parametrize(("args", "fragment"), BAD)
def test_bad_input_is_one_error_line_before_any_work(
    data: tuple[Path, np.ndarray, np.ndarray], tmp_path: Path, args: list[str], fragment: str
) -> None:
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["federate", "simulate", str(data[0]), *args, "--out", str(out)])
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.exit_code == 2, res.stderr
    assert len(lines) == 1 and lines[0].startswith("Error: ") and fragment in lines[0], lines
    assert not out.exists()  # nothing started, nothing written


def test_missing_data_is_one_error_line(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        app, ["federate", "simulate", str(tmp_path / "nope.npz"), "--num-nodes", "2"]
    )
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and "nope.npz" in lines[0], res.stderr


@pytest.mark.slow
@pytest.mark.exclusive  # Ray and a SuperLink with six simulated nodes: no other test at once
@pytest.mark.timeout(900)
def test_simulation_engine_run_equals_simulate_and_leaves_nothing(
    data: tuple[Path, np.ndarray, np.ndarray], tmp_path: Path
) -> None:
    path, z, y = data
    token = uuid.uuid4().hex
    env = {**os.environ, MARK: token, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    out = tmp_path / "out"
    args = ["--num-nodes", "6", "--beta", "0.5", "--seed", "2", "--rounds", "3"]
    res = subprocess.run(
        [
            str(BIN / "privcal"),
            "federate",
            "simulate",
            str(path),
            *args,
            "--epsilon",
            "1",
            "--noise",
            "seeded",
            "--num-cpus",
            "2",
            "--out",
            str(out),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=800,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    for t in (1, 2, 3):
        assert f"round {t}/3: 6 replied, 0 dropped, 0 refused" in res.stderr, res.stderr
    assert not _marked(token), _marked(token)  # no SuperLink, flwr-simulation or Ray process

    parts = dirichlet_partition(y, n_clients=6, beta=0.5, seed=2)
    with pytest.warns(UserWarning, match="seeded noise is not private"):
        ref, _ = simulate(
            "fedtemp",
            z,
            y,
            parts,
            rounds=3,
            epsilon=1.0,
            delta=1e-5,
            seed=2,
            noise=SeededNoise(3),
            aggregation="trusted",  # the engine runs the plain apps: the server adds the noise
        )
    got = calibrator_from_dict(json.loads((out / "calibrator.json").read_text())).temperature_
    assert got == pytest.approx(ref.temperature_, rel=1e-9, abs=0)
    # the rounds moved T, and not onto a bound of t_range: the equality is not trivial
    assert abs(got - 1.0) > 0.01 and 0.06 < got < 19.0
    report = json.loads((out / "privacy_report.json").read_text())
    # the server adds what it released and its fallback decision (report_with_release)
    assert set(report) - set(ref.privacy_report_.to_dict()) == {"released", "fallback"}
    assert not report["fallback"]["fell_back"]
    stripped = {k: v for k, v in report.items() if k not in ("released", "fallback")}
    assert stripped == json.loads(json.dumps(ref.privacy_report_.to_dict()))
    history = json.loads((out / "history.json").read_text())
    assert [set(h) for h in history] == [{"round", "epsilon_spent"}] * 3  # DP: no counts

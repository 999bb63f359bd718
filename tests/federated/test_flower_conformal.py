"""Federated conformal sets (``conformal-lac``) over privcal's Flower apps, plain and SecAgg+.

The real ServerApp and ClientApps over in-process nodes (:func:`~privcal.federated.flower.
local.run_local`, message for message the deployed apps; ``tests/cli/
test_cli_federate_conformal.py`` runs them as processes). Checked: a run writes ``sets.json``
whose threshold is the method's own ``FedConformal.calibrator`` on the run's state, and
``privacy_report.json``'s ``released`` block states it; without DP the sets equal
:func:`~privcal.federated.simulate`'s; every client checks the sets' coverage on its own data
(its console only) and the server's ``--val`` does on its split; each client's row-cap seed is
its own (drawn per run, never in a message); ``privcal report`` reads the folder.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("flwr")

from typer.testing import CliRunner

from privcal.cli import app
from privcal.conformal import FullSetWarning
from privcal.federated import dirichlet_partition, simulate
from privcal.federated.flower import local, task
from privcal.federated.flower.local import run_local
from privcal.federated.methods import conformal as fc
from privcal.federated.methods.conformal import FederatedConformalSets
from privcal.federated.policy import ClientPolicy
from privcal.metrics.calibration import coverage

pytestmark = pytest.mark.integration

K, C, ROWS = 6, 5, 900


@pytest.fixture(scope="module")
def federation(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, ...]:
    wd = tmp_path_factory.mktemp("conformal")
    rng = np.random.default_rng(0)
    y = rng.integers(0, C, ROWS)
    z = 4.0 * np.eye(C)[y] + rng.normal(size=(ROWS, C))
    parts = dirichlet_partition(y, K, 0.5, seed=0)
    nodes = []
    for k, idx in enumerate(parts):
        np.savez(wd / f"c{k}.npz", logits=z[idx], labels=y[idx])
        node = {"data": str(wd / f"c{k}.npz"), "status": str(wd / f"status{k}.txt")}
        nodes.append({**node, **ClientPolicy.permissive().to_node()})
    np.savez(wd / "val.npz", logits=z, labels=y)
    return nodes, wd, z, y, parts


def _run(nodes: list[dict], out: Path, **cfg: Any) -> dict[str, Any]:
    conf = {"method": "conformal-lac", "rounds": 2, "n-classes": C, "out-dir": str(out), **cfg}
    run_local(conf, nodes)
    return json.loads((out / "sets.json").read_text())


def _released_equals_the_method(out: Path, saved: dict[str, Any]) -> FederatedConformalSets:
    """sets.json is FedConformal.calibrator on the run's state.json, and the report states it."""
    state = {k: np.asarray(v) for k, v in json.loads((out / "state.json").read_text()).items()}
    fm = task.method_from_config(json.loads((out / "config.json").read_text()))
    with warnings.catch_warnings():  # a DP run of this small federation may release full sets
        warnings.simplefilter("ignore", FullSetWarning)
        mine = fm.calibrator(state, C)
    sets = FederatedConformalSets.from_dict(saved)
    assert (sets.threshold_, sets.bin_, sets.margin_) == (mine.threshold_, mine.bin_, mine.margin_)
    np.testing.assert_array_equal(sets.counts_, mine.counts_)
    assert not (out / "calibrator.json").exists()
    return sets


@pytest.mark.parametrize(
    "mode",
    [
        {"epsilon": 1.0},  # trusted: the server adds the noise
        {"epsilon": 1.0, "secagg": True, "aggregation": "distributed"},  # SecAgg+ shares
    ],
    ids=["trusted", "secagg-distributed"],
)
def test_a_dp_run_writes_the_sets_and_their_report(federation, mode: dict) -> None:  # type: ignore[no-untyped-def]
    nodes, wd, _z, _y, _parts = federation
    out = wd / ("secagg" if mode.get("secagg") else "trusted")
    for k in range(K):
        Path(nodes[k]["status"]).unlink(missing_ok=True)
    sets = _released_equals_the_method(out, _run(nodes, out, **mode))
    report = json.loads((out / "privacy_report.json").read_text())
    assert report["epsilon"] == pytest.approx(1.0, rel=1e-6) and report["unit"] == "user"
    released = report["released"]
    assert released["class"] == "FederatedConformalSets" and report["fallback"] is None
    assert released["parameters"]["threshold"] == sets.threshold_
    assert released["parameters"]["bin"] == sets.bin_
    assert released["parameters"]["margin"] == sets.margin_ > 0
    assert released["text"].startswith("sets {y : S(x, y) <= ")
    assert (out / "aggregator_view.json").exists() == bool(mode.get("secagg"))
    # each client checked the sets on its own rows, on its own console
    for k in range(K):
        lines = Path(nodes[k]["status"]).read_text().splitlines()
        check = next(ln for ln in lines if ln.startswith("check on this client's data"))
        d = np.load(nodes[k]["data"])
        cov = coverage(sets.predict_set(d["logits"]), d["labels"])
        assert f"coverage {cov:.4f} (target 0.9)" in check, check


def test_without_dp_the_sets_are_simulates_and_the_server_checks_them(federation) -> None:  # type: ignore[no-untyped-def]
    """--epsilon 0: the exact histograms, so (with every row kept) simulate's sets; --val
    gives check.json with coverage and mean set size; privcal report reads the folder."""
    nodes, wd, z, y, parts = federation
    out = wd / "plain"
    saved = _run(nodes, out, **{"row-cap": ROWS, "val": str(wd / "val.npz"), "alpha": 0.2})
    sets = _released_equals_the_method(out, saved)
    sim, _ = simulate("conformal-lac", z, y, parts, rounds=2, alpha=0.2, row_cap=ROWS, seed=0)
    assert (sets.threshold_, sets.bin_, sets.alpha) == (sim.threshold_, sim.bin_, 0.2)
    assert not (out / "privacy_report.json").exists()
    check = json.loads((out / "check.json").read_text())
    pred = sets.predict_set(z)
    assert check["coverage"] == coverage(pred, y) >= 0.8 and check["target"] == 0.8
    assert check["set_size"] == pytest.approx(pred.sum(1).mean())
    res = CliRunner().invoke(app, ["report", str(out), "--out", str(wd / "plain.html")])
    assert res.exit_code == 0, res.output
    page = (wd / "plain.html").read_text()
    assert "sets.json" in page and "coverage" in page


def test_each_client_keeps_its_own_rows_and_the_server_never_sees_the_seed(
    federation, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """Each client draws its row-cap seed once per run (secrets) into its own context.state:
    the same rows every round, a different seed per client and per run whatever the run
    configuration, and no message in either direction carries it."""
    nodes, wd, *_ = federation
    seen: list[Any] = []
    grids: list[Any] = []
    real = local.LocalGrid._deliver

    def deliver(self: Any, msg: Any) -> Any:
        reply = real(self, msg)
        seen.extend([msg.content, reply.content])
        if self not in grids:
            grids.append(self)
        return reply

    monkeypatch.setattr(local.LocalGrid, "_deliver", deliver)
    cfg = {"row-cap": 3, "rounds": 3}
    saved = [_run(nodes, wd / f"seed{i}", **cfg) for i in range(2)]
    seeds = [[int(ctx.state[task._SEED_RECORD]["1"]) for ctx in g.contexts.values()] for g in grids]
    assert len(set(seeds[0] + seeds[1])) == 2 * K  # per client and per run
    # the same r rows every round: the summed histogram is T times one round's
    state = json.loads((wd / "seed0" / "state.json").read_text())
    expected = 0
    for node, seed in zip(nodes, seeds[0], strict=True):
        d = np.load(node["data"])
        fm = fc.FedConformalLAC(row_cap=3, seed=seed)
        expected = expected + fm.client_step(fm.init(C), d["logits"], d["labels"])
    np.testing.assert_array_equal(state["hist"], 3 * expected)
    assert saved[0]["fitted"]["counts_"] == expected.tolist()  # H~ = the rounds' mean
    for content in seen:  # nothing the server sends or receives holds a client's seed
        for rec in content.config_records.values():
            values = [str(v) for v in rec.values()]
            assert not any(str(s) in v for s in seeds[0] + seeds[1] for v in values)
        for rec in content.array_records.values():
            for arr in rec.values():
                assert not np.isin(np.asarray(seeds[0] + seeds[1], float), arr.numpy()).any()


def test_sets_round_trip_and_a_damaged_file_names_its_field(federation) -> None:  # type: ignore[no-untyped-def]
    _nodes, _wd, z, y, parts = federation
    sets, _ = simulate("conformal-aps", z, y, parts, rounds=1, seed=0)
    back = FederatedConformalSets.from_dict(json.loads(json.dumps(sets.to_dict())))
    np.testing.assert_array_equal(back.predict_set(z), sets.predict_set(z))
    assert (back.score, back.alpha, back.threshold_, back.bin_) == (
        "aps",
        sets.alpha,
        sets.threshold_,
        sets.bin_,
    )
    for field, value in (("bin_", 99), ("threshold_", 0.5), ("edges_", [0.0, 0.5])):
        bad = sets.to_dict()
        bad["fitted"][field] = value
        with pytest.raises(ValueError, match=f"fitted.{field}"):
            FederatedConformalSets.from_dict(bad)


@pytest.mark.slow
@pytest.mark.exclusive  # Ray and a simulation SuperLink: no other test at once
@pytest.mark.timeout(600)
def test_simulation_engine_run_writes_the_sets(federation, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """privcal federate simulate --method conformal-aps: the same apps on Flower's Simulation
    Engine (Ray) write sets.json; each simulated client keeps the same rows every round (its
    seed in the engine's node state), so without DP the summed histogram is T times a round's."""
    _nodes, wd, z, _y, _parts = federation
    out = tmp_path / "sim"
    args = ["federate", "simulate", str(wd / "val.npz"), "--num-nodes", str(K), "--beta", "0.5"]
    args += ["--method", "conformal-aps", "--rounds", "3", "--row-cap", "3", "--num-cpus", "2"]
    res = CliRunner().invoke(app, [*args, "--val", str(wd / "val.npz"), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert {"coverage", "set_size"} <= set(json.loads((out / "check.json").read_text()))
    sets = FederatedConformalSets.from_dict(json.loads((out / "sets.json").read_text()))
    hist = np.asarray(json.loads((out / "state.json").read_text())["hist"])
    assert hist.sum() == 3 * 3 * K and np.all(hist % 3 == 0)  # r = 3 rows, T = 3 rounds
    assert sets.score == "aps" and sets.predict_set(z[:4]).shape == (4, C)

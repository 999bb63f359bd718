"""Real Flower deployment on loopback: a SuperLink and 5 SuperNodes started by the test.

Checks that the Flower apps give the simulator's calibrator (same data, no noise) for FedTemp
and FedBBQ with T=3, and that a client killed mid-round does not crash the server.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")

from privcal.calibrators import calibrator_from_dict
from privcal.federated import FedBBQ, dirichlet_partition, simulate
from privcal.federated.flower.deploy import FlowerProcesses

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

N_CLIENTS = 5


@pytest.fixture(scope="module")
def federation(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    wd = tmp_path_factory.mktemp("flower")
    rng = np.random.default_rng(0)
    z = 3.0 * rng.normal(size=(600, 4))
    y = np.argmax(z + 2.0 * rng.normal(size=z.shape), axis=1)
    parts = dirichlet_partition(y, N_CLIENTS, 0.5, seed=0)
    fp = FlowerProcesses(wd)
    try:
        fp.start_superlink()
        for k, idx in enumerate(parts):
            np.savez(wd / f"c{k}.npz", logits=z[idx], labels=y[idx])
            fp.start_supernode(f"node{k}", {"data": str(wd / f"c{k}.npz")})
        yield fp, wd, z, y, parts
    finally:
        fp.stop()


def _run(fp: FlowerProcesses, wd: Path, **cfg: object) -> tuple[dict, list]:
    out = wd / str(cfg["method"]) / str(cfg.get("tag", ""))
    conf = {
        "rounds": 3,
        "num-nodes": N_CLIENTS,
        "n-classes": 4,
        "min-clients": 2,
        "out-dir": str(out),
        **{k: v for k, v in cfg.items() if k != "tag"},
    }
    res = fp.run(conf, timeout_s=240)
    assert res.returncode == 0, res.stdout + res.stderr
    assert (out / "calibrator.json").exists(), res.stdout + res.stderr
    return (
        json.loads((out / "calibrator.json").read_text()),
        json.loads((out / "history.json").read_text()),
    )


@pytest.mark.parametrize("method", ["fedtemp", "fedbbq"])
def test_flower_matches_simulator(federation, method: str) -> None:  # type: ignore[no-untyped-def]
    fp, wd, z, y, parts = federation
    cal_dict, history = _run(fp, wd, method=method, weighting="none")
    assert [h["n_clients"] for h in history] == [N_CLIENTS] * 3
    sim, _ = simulate(method, z, y, parts, rounds=3, seed=0)
    flower = calibrator_from_dict(cal_dict)
    assert type(flower) is type(sim)
    np.testing.assert_allclose(flower.predict_proba(z), sim.predict_proba(z), rtol=0, atol=1e-9)
    if method == "fedtemp":
        assert flower.temperature_ == pytest.approx(sim.temperature_, rel=1e-10)


def test_secaggplus_sum_matches_plain_sum(federation) -> None:  # type: ignore[no-untyped-def]
    """SecAgg+ (legacy workflow + secaggplus_mod): the histogram sum within quantisation error."""
    fp, wd, z, y, parts = federation
    bound, q = 600.0, 4194304
    _cal_dict, history = _run(
        fp,
        wd,
        method="fedbbq",
        weighting="none",
        tag="secagg",
        rounds=1,
        secagg=True,
        **{"n-levels": 3, "secagg-bound": bound, "secagg-quantization-range": q},
    )
    assert history[0]["n_clients"] == N_CLIENTS
    state = json.loads((wd / "fedbbq" / "secagg" / "state.json").read_text())
    fm = FedBBQ(n_levels=3, weighting=None)
    plain = sum(fm.client_step(fm.init(4), z[i], y[i]) for i in parts)
    err = np.abs(np.array(state["hist"]) - plain).max()
    assert err <= 2 * N_CLIENTS * bound / q + 1e-9
    assert np.abs(plain).sum() > 100  # the comparison is not vacuous


def test_dp_run_releases_only_declared_quantities(federation) -> None:  # type: ignore[no-untyped-def]
    """A DP run (SecureNoise): per-round history without client counts or timings, and a
    privacy report that names the unit, relation and the declared federation size."""
    fp, wd, z, _y, _parts = federation
    cal_dict, history = _run(fp, wd, method="fedtemp", tag="dp", rounds=2, epsilon=1.0)
    assert [set(h) for h in history] == [{"round", "epsilon_spent"}] * 2
    assert history[-1]["epsilon_spent"] == pytest.approx(1.0, rel=1e-6)
    report = json.loads((wd / "fedtemp" / "dp" / "privacy_report.json").read_text())
    assert (report["unit"], report["relation"], report["status"]) == (
        "user",
        "add/remove",
        "private",
    )
    assert report["epsilon"] == pytest.approx(1.0, rel=1e-6)
    assert any(f"K={N_CLIENTS}" in p for p in report["public"])
    assert calibrator_from_dict(cal_dict).predict_proba(z[:3]).shape == (3, 4)


@pytest.fixture(scope="module")
def sources(federation):  # type: ignore[no-untyped-def]
    """Two more SuperNodes acting as seed-000 data sources, each with its own SQLite ledger.

    They join the same SuperLink (two SuperLinks on one host would share Flower's internal
    ServerAppIo port); the five plain nodes refuse source queries and are skipped.
    """
    fp, wd = federation[0], federation[1] / "sources"
    wd.mkdir()
    rng = np.random.default_rng(1)
    z = 3.0 * rng.normal(size=(400, 4))
    y = np.argmax(z + 2.0 * rng.normal(size=z.shape), axis=1)
    try:
        for k in range(2):
            np.savez(wd / f"s{k}.npz", logits=z[k::2], labels=y[k::2])
            fp.start_supernode(
                f"source{k}",
                {
                    "data": str(wd / f"s{k}.npz"),
                    "ledger": str(wd / f"l{k}.sqlite"),
                    "budget": 1.0,
                    "name": f"h{k}",
                },
            )
        yield fp, wd
    finally:
        fp.stop("source0")
        fp.stop("source1")


def test_seed000_acc_t_over_flower_respects_ledgers(sources) -> None:  # type: ignore[no-untyped-def]
    """DP Acc-T over remote DataSources; the second run is refused by the spent ledgers."""
    from privcal.privacy import PrivacyOdometer

    fp, wd = sources
    cfg = {
        "method": "acc-t",
        "epsilon": 0.6,
        "iterations": 1,
        "num-nodes": 2,
        "n-classes": 4,
        "min-clients": 2,
    }
    cal_dict, releases = _run(fp, wd, tag="first", **cfg)
    assert cal_dict["class"] == "PrivateTemperatureScaling"
    assert cal_dict["fitted"]["privacy_report_"]["epsilon"] == pytest.approx(0.6)
    assert len(releases) == 4 and all(r["epsilon"] == pytest.approx(0.3) for r in releases)
    for k in range(2):
        assert PrivacyOdometer(1.0, ledger=wd / f"l{k}.sqlite").spent == pytest.approx(0.6)
    out = wd / "acc-t" / "second"
    res = fp.run({**cfg, "out-dir": str(out)}, timeout_s=240)
    assert not (out / "calibrator.json").exists()
    assert "BudgetExceededError" in res.stdout + res.stderr
    for k in range(2):  # nothing more was spent
        assert PrivacyOdometer(1.0, ledger=wd / f"l{k}.sqlite").spent == pytest.approx(0.6)


def test_client_killed_mid_round(federation) -> None:  # type: ignore[no-untyped-def]
    fp, wd, _z, _y, _parts = federation
    # one extra node whose ClientApp process kills itself in round 1
    fp.start_supernode("victim", {"data": str(wd / "c0.npz"), "die-at-round": 1})
    cal_dict, history = _run(
        fp,
        wd,
        method="fedtemp",
        rounds=1,
        tag="kill",
        **{"num-nodes": N_CLIENTS + 1, "round-timeout-s": 20.0},
    )
    # the victim's update is lost (and the two ledger nodes refuse a non-DP run), the round
    # still finishes with the five plain clients
    assert history[0]["n_clients"] == N_CLIENTS
    assert history[0]["sampled"] > N_CLIENTS
    assert cal_dict["class"] == "TemperatureScaling"
    fp.stop("victim")

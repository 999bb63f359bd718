"""privcal's Flower ServerApp and ClientApps, message for message, over in-process nodes.

:class:`~privcal.federated.flower.local.LocalGrid` hands every Flower message to the deployed
ClientApp objects (the SecAgg+ one with its mods), so these tests cover the apps' logic without
starting processes; ``tests/cli/test_cli_federate.py`` runs the same apps over a real
SuperLink and SuperNodes (``privcal federate``). Checked here: the apps give the simulator's
calibrator (same data, no noise) for FedTemp and FedBBQ; SecAgg+ recovers the histogram sum
within its quantisation error; a DP run releases only declared quantities; seed 000's Acc-T
over remote ledgers respects them; a client that crashes mid-round does not stop the server.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")

from privcal.calibrators import calibrator_from_dict
from privcal.federated import FedBBQ, dirichlet_partition, simulate
from privcal.federated.flower.local import run_local
from privcal.federated.policy import ClientPolicy
from privcal.private.queries import distributed_laplace

pytestmark = pytest.mark.integration

N_CLIENTS = 5


@pytest.fixture(scope="module")
def federation(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    wd = tmp_path_factory.mktemp("flower")
    rng = np.random.default_rng(0)
    z = 3.0 * rng.normal(size=(600, 4))
    y = np.argmax(z + 2.0 * rng.normal(size=z.shape), axis=1)
    parts = dirichlet_partition(y, N_CLIENTS, 0.5, seed=0)
    nodes = []
    for k, idx in enumerate(parts):
        np.savez(wd / f"c{k}.npz", logits=z[idx], labels=y[idx])
        # one operator runs every in-process client here: the permissive policy (seeded noise,
        # any epsilon, runs without DP); tests/federated/test_client_policy.py checks refusals
        nodes.append({"data": str(wd / f"c{k}.npz"), **ClientPolicy.permissive().to_node()})
    return nodes, wd, z, y, parts


def _run(nodes: list[dict], wd: Path, **cfg: object) -> tuple[dict, list]:
    out = wd / str(cfg["method"]) / str(cfg.pop("tag", ""))
    conf = {"rounds": 3, "n-classes": 4, "min-clients": 2, "out-dir": str(out), **cfg}
    run_local(conf, nodes)
    return (
        json.loads((out / "calibrator.json").read_text()),
        json.loads((out / "history.json").read_text()),
    )


@pytest.mark.parametrize("method", ["fedtemp", "fedbbq"])
def test_flower_matches_simulator(federation, method: str) -> None:  # type: ignore[no-untyped-def]
    nodes, wd, z, y, parts = federation
    cal_dict, history = _run(nodes, wd, method=method, weighting="none")
    assert [h["n_clients"] for h in history] == [N_CLIENTS] * 3
    sim, _ = simulate(method, z, y, parts, rounds=3, seed=0)
    flower = calibrator_from_dict(cal_dict)
    assert type(flower) is type(sim)
    np.testing.assert_allclose(flower.predict_proba(z), sim.predict_proba(z), rtol=0, atol=1e-9)
    if method == "fedtemp":
        assert flower.temperature_ == pytest.approx(sim.temperature_, rel=1e-10)


def test_secaggplus_sum_matches_plain_sum(federation) -> None:  # type: ignore[no-untyped-def]
    """SecAgg+ (legacy workflow + secaggplus_mod): the histogram sum within quantisation error."""
    nodes, wd, z, y, parts = federation
    bound, q = 600.0, 4194304
    _cal_dict, history = _run(
        nodes,
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


def _killed_grid(deaths: dict[int, str], delisted: bool) -> type:
    """A :class:`LocalGrid` whose node ``nid`` stops answering (as if killed) at the first
    SecAgg+ message of stage ``deaths[nid]`` (``Stage.SETUP``, ...); ``delisted``: from then on
    the link no longer lists it (its heartbeat has lapsed), so later rounds do not sample it."""
    from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key

    from privcal.federated.flower.local import LocalGrid

    class Killed(LocalGrid):
        killed: frozenset[int] = frozenset()

        def _deliver(self, msg):  # type: ignore[no-untyped-def]
            nid = msg.metadata.dst_node_id
            configs = msg.content.config_records.get(RECORD_KEY_CONFIGS)
            if nid in deaths and configs is not None:
                if configs.get(Key.STAGE) == deaths[nid]:
                    self.killed = self.killed | {nid}
            if nid in self.killed:
                return None  # no reply, ever again
            return super()._deliver(msg)

        def pull_messages(self, message_ids):  # type: ignore[no-untyped-def]
            return [m for m in super().pull_messages(message_ids) if m is not None]

        def get_node_ids(self):  # type: ignore[no-untyped-def]
            gone = self.killed if delisted else set()
            return [n for n in super().get_node_ids() if n not in gone]

    return Killed


@pytest.mark.parametrize(
    "first",
    ["collect_masked_vectors", "setup", "share_keys"],
    ids=["both at masked vectors", "one at setup", "one at share keys"],
)
def test_secaggplus_sums_the_survivors_of_clients_killed_mid_run(
    federation, first: str, capsys
) -> None:  # type: ignore[no-untyped-def]
    """Two of five SecAgg+ clients die (stop answering, as if killed) in round 1: one at the
    stage ``first``, the other at the masked-vectors stage, after sharing its keys; in round 2
    both miss the setup. Both rounds release the sum of the three survivors (reconstruction
    threshold 3), within the quantisation error.

    With Flower 1.41's workflow alone, a round with a client gone before sharing its keys
    halted (every survivor was asked for its key share: ``KeyError``) or, beside a client
    dropped at the masked-vectors stage, failed on the server (a setup dropout has no public
    key) or released a wrong sum (the server removed a mask against a share-keys dropout that
    no upload carried)."""
    from flwr.common.secure_aggregation.secaggplus_constants import Stage

    deaths = {2: getattr(Stage, first.upper()), 3: Stage.COLLECT_MASKED_VECTORS}  # node ids 2..
    nodes, wd, z, y, parts = federation
    bound, q = 600.0, 4194304
    out = wd / "fedbbq" / f"killed-{first}"
    conf = {"method": "fedbbq", "weighting": "none", "rounds": 2, "n-classes": 4,
            "min-clients": 2, "out-dir": str(out), "secagg": True, "round-timeout-s": 0.5,
            "n-levels": 3, "secagg-bound": bound, "secagg-quantization-range": q}  # fmt: skip
    run_local(conf, [dict(n) for n in nodes], grid_class=_killed_grid(deaths, delisted=False))
    history = json.loads((out / "history.json").read_text())
    assert [(h["n_clients"], h["failures"]) for h in history] == [(3, 2), (3, 2)]
    printed = capsys.readouterr().out
    for t in (1, 2):  # the server names them, as the plain ServerApp does
        for nid in deaths:
            assert f"privcal: round {t}: client {nid} sent no SecAgg+ upload; dropped" in printed
    state = json.loads((out / "state.json").read_text())
    fm = FedBBQ(n_levels=3, weighting=None)
    survivors = [parts[k] for k in range(N_CLIENTS) if k + 2 not in deaths]
    plain = sum(fm.client_step(fm.init(4), z[i], y[i]) for i in survivors)
    err = np.abs(np.array(state["hist"]) - 2 * plain).max()  # the two rounds' totals
    assert err <= 2 * 2 * len(survivors) * bound / q + 1e-9
    assert np.abs(plain).sum() > 100  # the comparison is not vacuous


@pytest.mark.parametrize("delisted", [False, True], ids=["still listed", "heartbeat lapsed"])
def test_a_distributed_secagg_run_goes_on_without_a_killed_client(  # type: ignore[no-untyped-def]
    federation, delisted: bool
) -> None:
    """Distributed DP over SecAgg+, t = 4 of K = 5: one client dies in round 1. Each later
    round releases the four survivors' sum, whether the link still lists the dead client (it
    misses the setup) or no longer does (a sample of 4 < K: the survivors' policy accepts any
    sample from t to K; it refused every sample but K, so the run failed once the dead
    client's heartbeat lapsed, about a minute after it died)."""
    nodes, wd, _z, _y, _parts = federation
    out = wd / "fedtemp" / f"killed-{delisted}"
    conf = {"method": "fedtemp", "rounds": 3, "n-classes": 4, "min-clients": 2, "epsilon": 50.0,
            "secagg": True, "aggregation": "distributed", "round-timeout-s": 0.5,
            "out-dir": str(out)}  # fmt: skip
    from flwr.common.secure_aggregation.secaggplus_constants import Stage

    deaths = {2: Stage.COLLECT_MASKED_VECTORS}
    run_local(conf, [dict(n) for n in nodes], grid_class=_killed_grid(deaths, delisted))
    history = json.loads((out / "history.json").read_text())
    assert [h["round"] for h in history] == [1, 2, 3]
    assert history[-1]["epsilon_spent"] == pytest.approx(50.0, rel=1e-6)
    assert (out / "privacy_report.json").exists()


def test_dp_run_releases_only_declared_quantities(federation) -> None:  # type: ignore[no-untyped-def]
    """A DP run (SecureNoise): per-round history without client counts or timings, and a
    privacy report that names the unit, relation and the declared federation size."""
    nodes, wd, z, _y, _parts = federation
    cal_dict, history = _run(nodes, wd, method="fedtemp", tag="dp", rounds=2, epsilon=1.0)
    assert [set(h) for h in history] == [{"round", "epsilon_spent"}] * 2
    assert history[-1]["epsilon_spent"] == pytest.approx(1.0, rel=1e-6)
    report = json.loads((wd / "fedtemp" / "dp" / "privacy_report.json").read_text())
    assert (report["unit"], report["relation"], report["status"]) == (
        "user",
        "add/remove",
        "private",
    )
    assert report["epsilon"] == pytest.approx(1.0, rel=1e-6)
    # what the run released and whether it fell back (issue 32), beside the report's own keys
    fb = report["fallback"]
    assert report["released"]["parameters"]["temperature"] == cal_dict["fitted"]["temperature_"]
    assert fb["temperature"] == cal_dict["fitted"]["temperature_"]
    assert fb["fell_back"] == (fb["z"] < fb["threshold"]) and fb["rule"] == "identity"
    assert any(f"K={N_CLIENTS}" in p for p in report["public"])
    assert calibrator_from_dict(cal_dict).predict_proba(z[:3]).shape == (3, 4)


def test_seed000_acc_t_over_flower_respects_ledgers(tmp_path: Path) -> None:
    """DP Acc-T over remote DataSources; the second run is refused by the spent ledgers."""
    from privcal.privacy import BudgetExceededError, PrivacyOdometer

    rng = np.random.default_rng(1)
    z = 3.0 * rng.normal(size=(400, 4))
    y = np.argmax(z + 2.0 * rng.normal(size=z.shape), axis=1)
    nodes: list[dict] = [{"data": "unused"}]  # a plain node: not a data source, skipped
    for k in range(2):
        np.savez(tmp_path / f"s{k}.npz", logits=z[k::2], labels=y[k::2])
        nodes.append(
            {
                "data": str(tmp_path / f"s{k}.npz"),
                "ledger": str(tmp_path / f"l{k}.sqlite"),
                "budget": 1.0,
                "name": f"h{k}",
            }
        )
    cfg = {"method": "acc-t", "epsilon": 0.6, "iterations": 1, "num-nodes": 3}
    cal_dict, releases = _run(nodes, tmp_path, tag="first", **cfg)
    assert cal_dict["class"] == "PrivateTemperatureScaling"
    assert cal_dict["fitted"]["privacy_report_"]["epsilon"] == pytest.approx(0.6)
    per_source: dict[str, float] = {}
    for r in releases:  # every release is charged to the node that answered it
        per_source[r["source"]] = per_source.get(r["source"], 0.0) + r["epsilon"]
    assert len(per_source) == 2 and all(v == pytest.approx(0.6) for v in per_source.values())
    for k in range(2):
        assert PrivacyOdometer(1.0, ledger=tmp_path / f"l{k}.sqlite").spent == pytest.approx(0.6)
    out = tmp_path / "acc-t" / "second"
    with pytest.raises(BudgetExceededError):
        run_local({**cfg, "n-classes": 4, "out-dir": str(out)}, nodes)
    assert not (out / "calibrator.json").exists()
    for k in range(2):  # nothing more was spent
        assert PrivacyOdometer(1.0, ledger=tmp_path / f"l{k}.sqlite").spent == pytest.approx(0.6)


def test_client_crashing_mid_round_is_dropped(federation, capsys) -> None:  # type: ignore[no-untyped-def]
    nodes, wd, _z, _y, _parts = federation
    victim = {**nodes[0], "die-at-round": 1}  # its policy too: it joins, then crashes
    cal_dict, history = _run([*nodes, victim], wd, method="fedtemp", rounds=1, tag="kill")
    assert history[0]["n_clients"] == N_CLIENTS
    assert history[0]["sampled"] == N_CLIENTS + 1
    assert cal_dict["class"] == "TemperatureScaling"
    out = capsys.readouterr().out
    assert f"round 1/1: {N_CLIENTS} replied, 1 dropped, 0 refused; no DP" in out
    # the server learns that the round failed, not why (the error's text stays on the client)
    from privcal.federated.flower.client_app import FAILED_ROUND

    assert FAILED_ROUND in out and "crashes in round" not in out


def _round_one_secrets(z: np.ndarray, y: np.ndarray, parts: list, cfg: dict) -> list[np.ndarray]:
    """Each client's noiseless round-1 FedTemp payload in every form it could take on the wire
    (:func:`~privcal.federated.flower.transcript.noiseless_forms`): what must never leave it."""
    from privcal.federated import FedTemp
    from privcal.federated.flower.task import DEFAULTS, client_payload, dp_from_config
    from privcal.federated.flower.transcript import noiseless_forms
    from privcal.privacy import SecureNoise

    conf = {**DEFAULTS, "n-classes": 4, "num-nodes": len(parts), **cfg}
    fm = FedTemp()
    dp = dp_from_config(conf, SecureNoise())
    out = []
    for idx in parts:
        out += noiseless_forms(client_payload(fm, fm.init(4), z[idx], y[idx], conf), dp, fm)
    return out


def test_secaggplus_distributed_noise_never_leaves_a_client_noiseless(federation) -> None:  # type: ignore[no-untyped-def]
    """SecAgg+ with distributed discrete Gaussian shares (the default under DP with secagg):
    the run releases with the declared guarantee, the server's view is the noisy secure sum
    only, and no reply any client sent (its transcript, read after SecAgg+'s masking) carries
    its noiseless round-1 payload or its encoding. The same check finds the payload in the
    transcripts of the trusted plain run, where the server receives it (the check has teeth)."""
    from privcal.federated.flower.transcript import carries, read_transcript, reply_arrays

    nodes, wd, z, y, parts = federation
    dp_cfg = {"method": "fedtemp", "rounds": 2, "epsilon": 50.0}  # signal far above the noise

    def transcripts(tag: str, **cfg: object) -> list[list[dict]]:
        paths = [wd / f"{tag}-t{k}.jsonl" for k in range(len(nodes))]
        tnodes = [{**n, "transcript": str(p)} for n, p in zip(nodes, paths, strict=True)]
        _run(tnodes, wd, tag=tag, **dp_cfg, **cfg)
        return [read_transcript(p) for p in paths]

    dist = transcripts("dist", secagg=True, aggregation="distributed")
    out = wd / "fedtemp" / "dist"
    report = json.loads((out / "privacy_report.json").read_text())
    assert report["status"] == "private"
    assert report["epsilon"] == pytest.approx(50.0, rel=1e-6)
    assert any("aggregation=distributed" in s for s in report["threat"])
    assert "distributed discrete Gaussian shares" in report["releases"][0]["mechanism"]
    views = json.loads((out / "aggregator_view.json").read_text())
    assert len(views) == 2 and all(len(v) == 2 for v in views)  # rounds x (gradient, curvature)
    secrets = _round_one_secrets(z, y, parts, {**dp_cfg, "secagg": True})
    for replies in dist:
        assert len(replies) >= 8  # 4 SecAgg+ stages x 2 rounds
        for entry in replies:
            for arr in reply_arrays(entry):
                for secret in secrets:
                    assert not carries(arr, secret, tol=0.5), entry["message_type"]
    plain = transcripts("plain")  # trusted, no secure sum: the server sees the payload
    found = [
        any(carries(arr, s, tol=1e-12) for e in replies for arr in reply_arrays(e))
        for replies, s in zip(plain, secrets[:: len(secrets) // len(parts)], strict=True)
    ]
    assert all(found)


def test_secaggplus_carries_the_shares_exactly(federation) -> None:  # type: ignore[no-untyped-def]
    """The server's view of round 1 is exactly the sum modulo 2^31 of the uploads the clients
    make with the in-process code (``DPConfig.client_uploads``, what ``simulate`` runs): seeded
    client noise makes each upload reproducible, so SecAgg+'s transport is checked bit for bit."""
    from privcal.federated import FedTemp
    from privcal.federated.flower.task import (
        DEFAULTS,
        RING_BITS,
        client_noise,
        client_payload,
        dp_from_config,
    )
    from privcal.privacy.distributed import SecureSum

    nodes, wd, z, y, parts = federation
    cfg = {"method": "fedtemp", "rounds": 2, "epsilon": 50.0, "secagg": True}
    with pytest.warns(UserWarning, match="not private"):
        _run(nodes, wd, tag="exact", aggregation="distributed", noise="seeded", seed=3, **cfg)
    views = json.loads((wd / "fedtemp" / "exact" / "aggregator_view.json").read_text())
    conf = {**DEFAULTS, **cfg, "n-classes": 4, "num-nodes": N_CLIENTS, "noise": "seeded"}
    conf.update(aggregation="distributed", seed=3, round=1)
    fm, ring = FedTemp(), SecureSum(RING_BITS)
    total = None
    for k, idx in enumerate(parts):  # LocalGrid's node ids are 2, 3, ...
        with pytest.warns(UserWarning, match="not private"):
            dp = dp_from_config(conf, client_noise(conf, k + 2, "test", ClientPolicy.permissive()))
        assert dp is not None
        x = client_payload(fm, fm.init(4), z[idx], y[idx], conf)
        up = np.concatenate(dp.client_uploads(x, fm.noise_groups(dp, x.shape), ring))
        total = up if total is None else (total + up) & np.uint64(2**RING_BITS - 1)
    assert total is not None
    assert np.concatenate(views[0]).astype(np.uint64).tolist() == total.tolist()


def test_data_source_queries_take_one_message_round_each(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Seed 000 over Flower: every query of DP Acc-T goes to all sources in one push (the
    nodes answer in parallel), so a fit of Q queries over K sources is Q rounds, not Q x K."""
    from privcal.federated.flower.local import LocalGrid

    rng = np.random.default_rng(2)
    z = 3.0 * rng.normal(size=(600, 4))
    y = np.argmax(z + 2.0 * rng.normal(size=z.shape), axis=1)
    k = 3
    nodes = []
    for i in range(k):
        np.savez(tmp_path / f"s{i}.npz", logits=z[i::k], labels=y[i::k])
        nodes.append(
            {"data": str(tmp_path / f"s{i}.npz"), "ledger": str(tmp_path / f"l{i}.sqlite")}
        )
    pushes: list[int] = []
    real = LocalGrid.push_messages

    def counting(self, messages):  # type: ignore[no-untyped-def]
        messages = list(messages)
        if all("source" == str(m.content["config"].get("task", "")) for m in messages):
            pushes.append(len(messages))
        return real(self, messages)

    monkeypatch.setattr(LocalGrid, "push_messages", counting)
    _cal, releases = _run(nodes, tmp_path, method="acc-t", epsilon=0.6, iterations=1)
    queries = len(releases) // k  # every query is answered once by every source
    assert queries >= 1 and len(releases) == queries * k
    # the status probe, the budget check, then one push per query
    assert pushes == [k] * (queries + 2)


def test_seed000_fit_warnings_reach_the_operator(tmp_path: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A warning of DP Acc-T's fit over remote sources (here a planted one, so that the test
    does not depend on the secure noise) is printed as a ``privcal: WARNING`` line, as the
    federated methods' are, not raised into the ServerApp."""
    import warnings

    from privcal.private import NoiseDominatedWarning, PrivateTemperatureScaling

    real_fit = PrivateTemperatureScaling.fit

    def fit(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        out = real_fit(self, *args, **kwargs)
        warnings.warn("planted: the noise dominates", NoiseDominatedWarning, stacklevel=2)
        return out

    monkeypatch.setattr(PrivateTemperatureScaling, "fit", fit)
    rng = np.random.default_rng(5)
    z = 3.0 * rng.normal(size=(200, 4))
    y = z.argmax(1)
    nodes = []
    for k in range(2):
        np.savez(tmp_path / f"s{k}.npz", logits=z[k::2], labels=y[k::2])
        nodes.append(
            {"data": str(tmp_path / f"s{k}.npz"), "ledger": str(tmp_path / f"l{k}.sqlite")}
        )
    _run(nodes, tmp_path, method="acc-t", epsilon=0.5, iterations=1, **{"num-nodes": 2})
    assert "privcal: WARNING: planted: the noise dominates" in capsys.readouterr().out


def test_secaggplus_counts_a_refusing_client_once(federation, capsys) -> None:  # type: ignore[no-untyped-def]
    """A client whose ledger cannot pay the whole run refuses it in round 0 (its console says
    why; its ledger is not charged), and in every SecAgg+ round it is counted once (4 replied,
    1 dropped), whatever number of SecAgg+ stages it missed; 4 survivors still meet the default
    t = 4 of 5."""
    from privcal.federated.flower.task import DEFAULTS, composed_epsilon
    from privcal.privacy import PrivacyOdometer

    nodes, wd, _z, _y, _parts = federation
    cfg = {"method": "fedtemp", "rounds": 2, "epsilon": 50.0, "secagg": True}
    first = composed_epsilon({**DEFAULTS, **cfg, "aggregation": "distributed"}, 1)
    status = wd / "refuser-status.log"
    refuser = {
        **nodes[0],
        "ledger": str(wd / "refuser.sqlite"),
        "budget": first * (1 + 1e-9),  # pays round 1 only
        "delta-budget": 1e-5,
        "status": str(status),
    }
    _run([refuser, *nodes[1:]], wd, tag="refuse", aggregation="distributed", **cfg)
    out = capsys.readouterr().out
    assert "refused the run: the run costs epsilon 50" in out, out
    assert "privcal: 4 of 5 clients joined the run" in out, out
    for t in (1, 2):
        assert f"privcal: round {t}/2: 4 replied, 1 dropped, 0 refused" in out, out
    lines = status.read_text()
    assert lines.startswith("end: refused the run (the run costs epsilon 50"), lines
    assert "answered" not in lines, lines
    ledger = PrivacyOdometer(first * (1 + 1e-9), ledger=refuser["ledger"], delta_budget=1e-5)
    assert ledger.spent == 0.0


def test_data_sources_over_secaggplus_answer_with_shares(tmp_path: Path) -> None:
    """Seed 000 over SecAgg+ with distributed noise (in-process nodes): every source's ledger
    is charged the fit's epsilon once, the report names SecAgg+ and the threshold, the fit
    calibrates, and a source's budget questions travel as plain messages."""
    from privcal.metrics import ece
    from privcal.metrics.statistics import softmax
    from privcal.privacy.odometer import read_ledger

    rng = np.random.default_rng(1)
    z = 3.0 * rng.normal(size=(800, 4))
    y = np.argmax(z + 2.0 * rng.normal(size=z.shape), axis=1)
    nodes = []
    for k in range(4):
        np.savez(tmp_path / f"s{k}.npz", logits=z[k::4], labels=y[k::4])
        nodes.append({"data": str(tmp_path / f"s{k}.npz"), "ledger": str(tmp_path / f"l{k}.sqlite"),
                      "budget": 2.0, "status": str(tmp_path / f"st{k}.log")})  # fmt: skip
    out = tmp_path / "out"
    cfg = {"method": "acc-t", "n-classes": 4, "epsilon": 1.0, "secagg": True, "min-clients": 3}
    run_local({**cfg, "aggregation": "distributed", "out-dir": str(out)}, nodes)
    report = json.loads((out / "privacy_report.json").read_text())
    threat = " ".join(report["threat"])
    assert "Flower's SecAgg+" in threat and "threshold t=3 of K=4" in threat
    assert "at most 4096 rows" in " ".join(report["public"])
    assert {r["mechanism"] for r in report["releases"]} == {distributed_laplace(3, 4)}
    for node in nodes:
        assert read_ledger(node["ledger"]).spent == pytest.approx(1.0)
        assert "answered with a distributed share" in Path(node["status"]).read_text()
    cal = calibrator_from_dict(json.loads((out / "calibrator.json").read_text()))
    assert ece(cal.predict_proba(z), y) < ece(softmax(z), y)


def test_public_statistic_is_what_a_source_builds_from_its_rows() -> None:
    """The aggregator's plan (from the public placeholder) is the plan every source builds
    from its own rows: same label, sensitivity, moved coordinates, row bound and shape."""
    from privcal.private import DataSource
    from privcal.private.parallel import public_statistic
    from privcal.private.queries import share_plan

    rng = np.random.default_rng(3)
    src = DataSource(rng.normal(size=(30, 5)), rng.integers(0, 5, 30))
    grid = np.geomspace(0.5, 4.0, 6)
    cases = [("accuracy_gap_curve", {"temperatures": grid, "anchor": 2}),
             ("bin_gaps", {"temperature": 1.5, "n_bins": 7}), ("count", {}),
             ("clipped_nll_increments", {"temperatures": grid, "bound": 5.0})]  # fmt: skip
    for query, params in cases:
        mine, public = getattr(src, f"_{query}")(**params), public_statistic(query, 5, **params)
        assert (mine.label, mine.sensitivity, mine.moved, mine.row_bound) == (
            public.label, public.sensitivity, public.moved, public.row_bound)  # fmt: skip
        assert np.shape(mine.value) == np.shape(public.value)
        assert share_plan(mine, 0.5, 4, 3, 31, 4096) == share_plan(public, 0.5, 4, 3, 31, 4096)


@pytest.mark.parametrize(
    ("reason", "shown"),
    [
        ("<class 'KeyError'>:<'2'>", "a client's ClientApp raised KeyError: 2"),
        (
            "<class 'flwr.common.ValueError'>:<'Available neighbours number smaller'>",
            "a client's ClientApp raised ValueError: Available neighbours number smaller",
        ),
        ("privcal client refused: over budget", "privcal client refused: over budget"),
    ],
)
def test_a_halted_secagg_stage_names_a_clients_exception_readably(reason: str, shown: str) -> None:
    """Flower sends a ClientApp's exception as ``<class 'X'>:<'text'>``; the run's error line
    says which exception and its text, and passes a client's own refusal through."""
    from flwr.app import Error

    from privcal.federated.flower.secaggplus import failure_reason

    assert failure_reason(Exception(Error(0, reason))) == shown


@pytest.mark.parametrize("secagg", [False, True], ids=["plain", "secagg"])
def test_more_clients_than_declared_stop_the_run_before_any_spend(  # type: ignore[no-untyped-def]
    federation, tmp_path: Path, secagg: bool
) -> None:
    """Five clients connected to a run declared for K = 4: the server stops in round 0 with
    the reason, before any round (the report would state K = 4; over SecAgg+ every client
    refused the first setup of 5, after the join had cleared them)."""
    from privcal.privacy import PrivacyOdometer

    nodes, _wd, _z, _y, _parts = federation
    ledgers = [
        {**n, "ledger": str(tmp_path / f"l{k}.sqlite"), "budget": 5.0} for k, n in enumerate(nodes)
    ]
    conf = {"method": "fedtemp", "rounds": 2, "n-classes": 4, "min-clients": 2, "epsilon": 1.0,
            "num-nodes": N_CLIENTS - 1, "secagg": secagg, "out-dir": str(tmp_path)}  # fmt: skip
    with pytest.raises(RuntimeError, match="5 clients connected, more than the run's declared"):
        run_local(conf, ledgers)
    for node in ledgers:
        assert PrivacyOdometer(5.0, ledger=node["ledger"]).spent == 0.0


def _late_join_grid(late: int) -> type:
    """A :class:`LocalGrid` on which node ``late``'s answer to the join request never arrives
    in time (it is delivered, so the client decides and shows that it joins, but the server
    waited out its round-0 timeout): the server takes the run without it."""
    from privcal.federated.flower.local import LocalGrid

    class LateJoin(LocalGrid):
        def _deliver(self, msg):  # type: ignore[no-untyped-def]
            reply = super()._deliver(msg)
            cfg = msg.content["config"] if "config" in msg.content else {}
            late_join = msg.metadata.dst_node_id == late and cfg.get("task") == "join"
            return None if late_join else reply

        def pull_messages(self, message_ids):  # type: ignore[no-untyped-def]
            return [m for m in super().pull_messages(message_ids) if m is not None]

    return LateJoin


def test_a_client_whose_join_answer_came_late_is_told_it_took_no_part(
    federation, tmp_path: Path
) -> None:
    """The server chose the run's clients without a client whose join answer came late; that
    client showed "joined run" on its console, took part in no round, and the end of the run
    tells it so (its end line differs from the others', and ``privcal federate client`` exits 1
    on it). It used to end with "the run is over" like the others."""
    from privcal.federated.flower.client_app import WITHOUT_THIS_CLIENT
    from privcal.federated.flower.local import SUPERLINK_NODE_ID

    nodes, _wd, _z, _y, _parts = federation
    with_status = [{**n, "status": str(tmp_path / f"s{k}.log")} for k, n in enumerate(nodes)]
    late = SUPERLINK_NODE_ID + 2  # the second node's id (LocalGrid numbers them from 1 up)
    conf = {"method": "fedtemp", "rounds": 1, "n-classes": 4, "min-clients": 2,
            "round-timeout-s": 2, "out-dir": str(tmp_path)}  # fmt: skip
    run_local(conf, with_status, grid_class=_late_join_grid(late))
    lines = [Path(n["status"]).read_text().splitlines() for n in with_status]
    assert lines[1][0].startswith("joined run "), lines[1]
    assert not any(": answered (" in ln for ln in lines[1]), lines[1]
    assert lines[1][-1] == f"end: {WITHOUT_THIS_CLIENT}", lines[1]
    for k in (0, 2, 3, 4):
        assert any(": answered (" in ln for ln in lines[k]), lines[k]
        assert lines[k][-1] == "end: the run is over", lines[k]


@pytest.mark.parametrize(
    ("death", "refused_at"),
    [("setup", "upload"), ("collect_masked_vectors", "unmask")],
    ids=["dies at setup", "dies after sharing keys"],
)
def test_a_collusion_margin_refuses_a_sum_that_dropouts_left_too_small(  # type: ignore[no-untyped-def]
    federation, death: str, refused_at: str
) -> None:
    """Distributed DP over SecAgg+, t = 4 of K = 5, every client with ``collusion-margin = 1``
    (its noise must still come from t shares with one client colluding: sums of at least 5).
    The full run is accepted. When one client dies in round 1, the survivors' sum of 4 would
    withstand no colluder: they refuse it before they upload (it died at the setup: 4 clients
    shared keys) or at the unmask (it died after sharing its keys: 4 survivors), the stage
    halts and nothing of the round is released. Without the margin the same run goes on
    (:func:`test_a_distributed_secagg_run_goes_on_without_a_killed_client`)."""
    from flwr.common.secure_aggregation.secaggplus_constants import Stage

    nodes, wd, _z, _y, _parts = federation
    margin = [{**n, "collusion-margin": 1, "status": str(wd / f"m{k}.log")} for k, n in
              enumerate(nodes)]  # fmt: skip
    conf = {"method": "fedtemp", "rounds": 2, "n-classes": 4, "min-clients": 2, "epsilon": 50.0,
            "secagg": True, "aggregation": "distributed", "round-timeout-s": 0.5}  # fmt: skip
    full = wd / "fedtemp" / "margin-full"
    run_local({**conf, "out-dir": str(full)}, [dict(n) for n in margin])
    assert (full / "privacy_report.json").exists()
    out = wd / "fedtemp" / f"margin-{death}"
    killed = _killed_grid({2: getattr(Stage, death.upper())}, delisted=False)
    with pytest.raises(RuntimeError, match="fewer than this client's collusion margin of 1"):
        run_local({**conf, "out-dir": str(out)}, [dict(n) for n in margin], grid_class=killed)
    assert not (out / "calibrator.json").exists()
    for node in margin[1:]:
        lines = Path(node["status"]).read_text()
        assert f"round {refused_at}: refused (" in lines, lines
        assert "holds against 0 colluding clients" in lines, lines

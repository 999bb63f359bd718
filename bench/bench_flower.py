"""Flower round time: in-process simulator, in-process Flower, and SuperNodes on localhost.

Rows (FedTemp without DP, T = 3 rounds, K clients over a synthetic 4-class pool of 200 rows
per client; seconds per round = median of the rounds' ``seconds`` in ``history.json``):

* ``simulate``: :func:`privcal.federated.simulate` (arrays, no messages);
* ``flower in-process``: privcal's ServerApp and ClientApp over
  :class:`privcal.federated.flower.local.LocalGrid` (Flower messages, no transport);
* ``flower supernodes``: a real SuperLink and K SuperNodes (``--isolation process``, 0.25 s idle
  poll) whose ClientApps run in one long-lived privcal executor
  (:mod:`privcal.federated.flower.executor`), what ``privcal federate`` runs;
* ``flower stock`` (``--stock``): stock ``flower-supernode`` (subprocess isolation: one
  ``flwr-clientapp`` process per message, 3 s idle polls), what main ran before;
* ``--floor``: Flower's own floor, a stock Flower app whose ServerApp sends one empty ``query``
  per node per round and whose ClientApp answers it empty, over stock SuperNodes.

``--engine`` times Flower's Simulation Engine as a user runs it: ``privcal federate simulate``
(a real process; SuperLink in simulation mode, ``flwr-simulation``, Ray actors on both cores)
on one file of ``100 K`` rows Dirichlet-split over ``K`` clients (beta 0.5, seed 0), beside
``simulate`` and ``run_local`` on the same partitions. Seconds per round are the ServerApp's
own round durations, which end its progress lines (median over rounds 2..T; the first round,
which waits for Ray's actors to start, is reported apart); the temperature is compared with
``simulate``'s (same partitions; under DP the same noise seed, ``--noise seeded``); the run
must exit 0 and leave no process (Ray's included, found by a marker in their environment).
``--stock-engine`` also times Flower's unpatched dispatch loop
(``PRIVCAL_STOCK_SIMULATION_ENGINE=1``); ``--dispatch`` times one dispatch sweep
of both in one process.

Run::

    .venv/bin/python bench/bench_flower.py --clients 5 20 100 [--stock] [--no-deploy]
    .venv/bin/python bench/bench_flower.py --floor --clients 20
    .venv/bin/python bench/bench_flower.py --engine --clients 100 1000 10000 --rounds 12 \
        [--epsilon 1] [--stock-engine] [--no-local]
    .venv/bin/python bench/bench_flower.py --dispatch --clients 1000 2000 10000
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def _data(k: int, wd: Path) -> tuple[np.ndarray, np.ndarray, list[np.ndarray], list[dict]]:
    rng = np.random.default_rng(0)
    z = 3.0 * rng.normal(size=(200 * k, 4))
    y = np.argmax(z + 2.0 * rng.normal(size=z.shape), axis=1)
    parts = np.array_split(rng.permutation(len(y)), k)
    nodes = []
    for i, idx in enumerate(parts):
        np.savez(wd / f"c{i}.npz", logits=z[idx], labels=y[idx])
        nodes.append({"data": str(wd / f"c{i}.npz")})
    return z, y, parts, nodes


def _per_round(out: Path) -> float:
    return statistics.median(h["seconds"] for h in json.loads((out / "history.json").read_text()))


def _deployed(k: int, wd: Path, nodes: list[dict], stock: bool, rounds: int) -> float:
    from privcal.federated.flower import deploy

    fp = deploy.FlowerProcesses(wd / ("stock" if stock else "dep"))
    try:
        fp.start_superlink()
        for i, node in enumerate(nodes):
            if stock:
                cmd = [
                    deploy._bin("flower-supernode"),
                    "--insecure",
                    "--superlink",
                    fp.address,
                    "--port",
                    str(deploy.free_port()),
                    "--node-config",
                    f'data="{node["data"]}"',
                ]
                fp._spawn(f"n{i}", cmd)
            else:
                fp.start_supernode(f"n{i}", node, wait_s=0)
        for i in range(k):
            fp._wait_log(f"n{i}", "SuperNode ID", 600)
        out = wd / ("out-stock" if stock else "out-dep")
        cfg = {
            "method": "fedtemp",
            "rounds": rounds,
            "n-classes": 4,
            "num-nodes": k,
            "out-dir": str(out),
            "round-timeout-s": 600.0,
        }
        res = fp.run(cfg, timeout_s=1800)
        if res.returncode != 0 or not (out / "history.json").exists():
            raise RuntimeError(f"the deployed run failed:\n{res.stdout[-3000:]}")
        return _per_round(out)
    finally:
        fp.stop()


_NOOP_APP = """
from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
import json, time

client = ClientApp()
server = ServerApp()


@client.query()
def answer(msg: Message, context: Context) -> Message:
    return Message(RecordDict(), reply_to=msg)


@server.main()
def main(grid: Grid, context: Context) -> None:
    cfg = dict(context.run_config)
    while len(list(grid.get_node_ids())) < int(cfg["num-nodes"]):
        time.sleep(0.5)
    times = []
    for _ in range(int(cfg["rounds"])):
        t0 = time.perf_counter()
        msgs = [Message(RecordDict({"c": ConfigRecord({"x": 1})}), dst_node_id=n,
                        message_type=MessageType.QUERY) for n in grid.get_node_ids()]
        list(grid.send_and_receive(msgs, timeout=600))
        times.append(time.perf_counter() - t0)
    open(cfg["out"], "w").write(json.dumps(times))
"""


def _floor(k: int, wd: Path, rounds: int) -> float:
    """Seconds per round of a stock Flower app that does nothing, over k stock SuperNodes."""
    from privcal.federated.flower import deploy

    app = wd / "noop"
    (app / "noop").mkdir(parents=True)
    (app / "noop" / "__init__.py").write_text("")
    (app / "noop" / "app.py").write_text(_NOOP_APP)
    out = wd / "noop-times.json"
    (app / "pyproject.toml").write_text(
        "\n".join(
            [
                "[build-system]",
                'requires = ["hatchling"]',
                'build-backend = "hatchling.build"',
                "[project]",
                'name = "noop"',
                'version = "1.0.0"',
                "dependencies = []",
                "[tool.hatch.build.targets.wheel]",
                'packages = ["."]',
                "[tool.flwr.app]",
                'publisher = "bench"',
                "[tool.flwr.app.components]",
                'serverapp = "noop.app:server"',
                'clientapp = "noop.app:client"',
                "[tool.flwr.app.config]",
                f"num-nodes = {k}",
                f"rounds = {rounds}",
                f'out = "{out}"',
                "",
            ]
        )
    )
    fp = deploy.FlowerProcesses(wd / "floor")
    try:
        fp.start_superlink()
        for i in range(k):
            cmd = [
                deploy._bin("flower-supernode"),
                "--insecure",
                "--superlink",
                fp.address,
                "--port",
                str(deploy.free_port()),
            ]
            fp._spawn(f"n{i}", cmd)
        for i in range(k):
            fp._wait_log(f"n{i}", "SuperNode ID", 600)
        proc = fp._spawn(
            "flwr-run", [deploy._bin("flwr"), "run", str(app), "privcal", "--stream"], piped=True
        )
        proc.communicate(timeout=3600)
        times = json.loads(out.read_text())
        return statistics.median(times[1:] if len(times) > 1 else times)
    finally:
        fp.stop()


def _engine_data(k: int, wd: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    z = 3.0 * rng.normal(size=(100 * k, 4))
    y = np.argmax(z + 2.0 * rng.normal(size=z.shape), axis=1)
    path = wd / f"scores-{k}.npz"
    np.savez(path, logits=z, labels=y)
    return path, z, y


def _marked(token: str) -> list[str]:
    needle = f"PRIVCAL_BENCH_RUN={token}".encode()
    found = []
    for env in Path("/proc").glob("[0-9]*/environ"):
        try:
            if needle in env.read_bytes().split(b"\0"):
                found.append((env.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            continue
    return found


def _engine_run(
    data: Path, k: int, rounds: int, epsilon: float, out: Path, stock: bool
) -> dict[str, float]:
    """``privcal federate simulate`` as a user runs it; per-round times from its progress."""
    import os
    import subprocess
    import uuid

    token = uuid.uuid4().hex
    env = {**os.environ, "PRIVCAL_BENCH_RUN": token}
    if stock:
        env["PRIVCAL_STOCK_SIMULATION_ENGINE"] = "1"
    cmd = [
        str(Path(sys.executable).parent / "privcal"),
        "federate",
        "simulate",
        str(data),
        "--num-nodes",
        str(k),
        "--beta",
        "0.5",
        "--seed",
        "0",
        "--rounds",
        str(rounds),
        "--epsilon",
        str(epsilon),
        "--noise",
        "seeded",
        "--out",
        str(out),
    ]
    t0 = time.perf_counter()
    stamps = []
    proc = subprocess.Popen(
        cmd, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
    )
    assert proc.stderr is not None
    seconds = []  # the ServerApp's own duration of each round (its progress line ends with it)
    for line in proc.stderr:
        if line.startswith("round "):
            stamps.append(time.perf_counter() - t0)
            seconds.append(float(line.rsplit("; ", 1)[1].split()[0]))
            print(f"  [{stamps[-1]:7.1f} s] {line.rstrip()}", file=sys.stderr, flush=True)
    code = proc.wait()
    total = time.perf_counter() - t0
    left = _marked(token)
    if code != 0 or left or len(stamps) != rounds:
        raise RuntimeError(
            f"privcal federate simulate: exit {code}, {len(stamps)} rounds, processes left: {left}"
        )
    return {
        "first": seconds[0],
        "per_round": float(np.median(seconds[1:] if rounds > 1 else seconds)),
        "total": total,
    }


def _engine(args: argparse.Namespace) -> None:
    import json as _json

    from privcal.calibrators import calibrator_from_dict
    from privcal.federated import dirichlet_partition, simulate
    from privcal.federated.flower.local import run_local
    from privcal.privacy import SeededNoise

    dp = args.epsilon > 0
    print(
        f"Flower Simulation Engine, FedTemp, T = {args.rounds}, "
        + (f"epsilon = {args.epsilon:g} (seeded noise)" if dp else "no DP")
    )
    print(
        "| K | simulate (s/round) | run_local (s/round) | engine (s/round) | engine: first round "
        "(s) | engine: total (s) | stock engine (s/round) | abs(T - T_simulate) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for k in args.clients:
        with tempfile.TemporaryDirectory(prefix="privcal-bench-") as tmp:
            wd = Path(tmp)
            data, z, y = _engine_data(k, wd)
            parts = dirichlet_partition(y, n_clients=k, beta=0.5, seed=0)
            kw = {"epsilon": args.epsilon, "delta": 1e-5, "noise": SeededNoise(1)} if dp else {}
            t0 = time.perf_counter()
            ref, _ = simulate("fedtemp", z, y, parts, rounds=args.rounds, seed=0, **kw)
            sim = (time.perf_counter() - t0) / args.rounds
            local = "-"
            if not args.no_local:
                nodes = [{"partition-id": i, "num-partitions": k} for i in range(k)]
                t0 = time.perf_counter()
                run_local(
                    {
                        "method": "fedtemp",
                        "rounds": args.rounds,
                        "n-classes": 4,
                        "partitions": str(data),
                        "partition-beta": 0.5,
                        "partition-seed": 0,
                        "epsilon": args.epsilon,
                        "noise": "seeded",
                        "min-clients": 1,
                    },
                    nodes,
                )
                local = f"{(time.perf_counter() - t0) / args.rounds:.3f}"
            res = _engine_run(data, k, args.rounds, args.epsilon, wd / "out", False)
            cal = calibrator_from_dict(_json.loads((wd / "out" / "calibrator.json").read_text()))
            diff = abs(cal.temperature_ - ref.temperature_)
            stock = "-"
            if args.stock_engine:
                st = _engine_run(data, k, args.rounds, args.epsilon, wd / "stock", True)
                stock = f"{st['per_round']:.2f}"
            print(
                f"| {k} | {sim:.4f} | {local} | {res['per_round']:.2f} | {res['first']:.1f} | "
                f"{res['total']:.1f} | {stock} | {diff:.1e} (T = {ref.temperature_:.6f}) |",
                flush=True,
            )


def _dispatch(args: argparse.Namespace) -> None:
    """One dispatch sweep with K pending messages: Flower's per-node loop vs privcal's pass."""
    from flwr.app import ConfigRecord, Message, MessageType, RecordDict
    from flwr.proto.task_pb2 import Task
    from flwr.server.superlink.fleet.vce.vce_api import _register_nodes
    from flwr.server.superlink.linkstate import LinkStateFactory
    from flwr.server.superlink.linkstate.in_memory_linkstate import RunRecord
    from flwr.supercore.constant import FLWR_IN_MEMORY_DB_NAME, NOOP_FEDERATION_ID
    from flwr.supercore.object_store import ObjectStoreFactory
    from flwr.supercore.run import Run
    from flwr.supercore.task_identity import TaskIdentity
    from flwr.superlink.federation import NoOpFederationManager
    from flwr.superlink.grid import InMemoryGrid

    from privcal.federated.flower.engine import undelivered

    print("| K nodes = K messages | Flower's sweep (s) | privcal's sweep (s) | ratio |")
    print("| --- | --- | --- | --- |")
    for k in args.clients:
        times = {}
        for stock in (False, True):
            if stock and k > args.stock_max:
                continue
            factory = LinkStateFactory(
                FLWR_IN_MEMORY_DB_NAME, NoOpFederationManager(), ObjectStoreFactory()
            )
            state = factory.state()
            run = Run.create_empty(run_id=5)
            run.primary_task_id, run.federation_id = 3, NOOP_FEDERATION_ID
            state.run_ids[5] = RunRecord(run=run)
            state.task_store[3] = Task(task_id=3, run_id=5)
            TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 3, 5, 1
            mapping = _register_nodes(k, factory)
            grid = InMemoryGrid(state_factory=factory)
            grid.set_run(run)
            grid.push_messages(
                [
                    Message(
                        RecordDict({"c": ConfigRecord({"i": 1})}),
                        dst_node_id=n,
                        message_type=MessageType.QUERY,
                    )
                    for n in mapping
                ]
            )
            t0 = time.perf_counter()
            if stock:
                got = [m for n in mapping for m in state.get_message_ins(node_id=n, limit=1)]
            else:
                got = undelivered(state, mapping)
            times[stock] = time.perf_counter() - t0
            assert len(got) == k
        flw = f"{times[True]:.2f}" if True in times else f"not run (> {args.stock_max})"
        ratio = f"{times[True] / times[False]:.0f}x" if True in times else "-"
        print(f"| {k} | {flw} | {times[False]:.3f} | {ratio} |", flush=True)


def main() -> None:
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the Flower processes too
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, nargs="+", default=[5, 20, 100])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--stock", action="store_true", help="also time stock flower-supernode")
    ap.add_argument("--no-deploy", action="store_true", help="in-process rows only")
    ap.add_argument("--floor", action="store_true", help="Flower's floor: a no-op stock app")
    ap.add_argument("--engine", action="store_true", help="Flower's Simulation Engine")
    ap.add_argument("--epsilon", type=float, default=0.0, help="--engine: DP epsilon")
    ap.add_argument("--stock-engine", action="store_true", help="--engine: also Flower's loop")
    ap.add_argument("--no-local", action="store_true", help="--engine: skip run_local")
    ap.add_argument("--dispatch", action="store_true", help="one dispatch sweep, both loops")
    ap.add_argument("--stock-max", type=int, default=4000, help="--dispatch: largest stock K")
    args = ap.parse_args()
    if args.engine:
        _engine(args)
        return
    if args.dispatch:
        _dispatch(args)
        return
    if args.floor:
        print("| K | Flower's floor: no-op stock app, stock SuperNodes (s/round) |")
        print("| --- | --- |")
        for k in args.clients:
            with tempfile.TemporaryDirectory(prefix="privcal-bench-") as tmp:
                print(f"| {k} | {_floor(k, Path(tmp), args.rounds):.3f} |", flush=True)
        return
    from privcal.federated import simulate
    from privcal.federated.flower.local import run_local

    print("| K | simulate (s/round) | flower in-process | flower supernodes | flower stock |")
    print("| --- | --- | --- | --- | --- |")
    for k in args.clients:
        with tempfile.TemporaryDirectory(prefix="privcal-bench-") as tmp:
            wd = Path(tmp)
            z, y, parts, nodes = _data(k, wd)
            t0 = time.perf_counter()
            simulate("fedtemp", z, y, parts, rounds=args.rounds)
            sim = (time.perf_counter() - t0) / args.rounds
            run_local(
                {
                    "method": "fedtemp",
                    "rounds": args.rounds,
                    "n-classes": 4,
                    "out-dir": str(wd / "local"),
                },
                nodes,
            )
            local = _per_round(wd / "local")
            dep = stock = "-"
            if not args.no_deploy:
                dep = f"{_deployed(k, wd, nodes, False, args.rounds):.3f}"
                if args.stock:
                    stock = f"{_deployed(k, wd, nodes, True, args.rounds):.3f}"
            print(f"| {k} | {sim:.4f} | {local:.4f} | {dep} | {stock} |", flush=True)


if __name__ == "__main__":
    main()

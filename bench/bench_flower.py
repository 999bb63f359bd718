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
  ``flwr-clientapp`` process per message, 3 s idle polls), what main ran before.

Run::

    .venv/bin/python bench/bench_flower.py --clients 5 20 100 [--stock] [--no-deploy]
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


def main() -> None:
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the Flower processes too
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, nargs="+", default=[5, 20, 100])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--stock", action="store_true", help="also time stock flower-supernode")
    ap.add_argument("--no-deploy", action="store_true", help="in-process rows only")
    args = ap.parse_args()
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

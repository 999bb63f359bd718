"""Benchmark privcal.federated: simulator rounds per second and Flower localhost round time.

Run from the repository root::

    .venv/bin/python bench/bench_federated.py --out federated.md  # then copy into RESULTS.md
    .venv/bin/python bench/bench_federated.py --no-flower

Simulator: netcal LeNet-5 CIFAR-10 logits (10000 x 10) over K = 100 and K = 1000 Dirichlet
clients (beta = 0.1; with K = 1000 some clients hold no row and sit out), every client in
every round (p = 1), FedTemp and weighted FedBBQ, with
and without DP (SeededNoise); rounds per second = T / wall time of ``simulate`` (T = 10, no
evaluation), best of 3. Flower: a real SuperLink and K = 5 / 20 SuperNodes on 127.0.0.1
(insecure), FedTemp, T = 3; the time per round is the ServerApp's own round timing (send,
client steps, replies), averaged over the rounds; startup and ``flwr run`` overhead excluded and
reported separately.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import best_of, machine, markdown_table

from privcal.federated import dirichlet_partition, simulate
from privcal.privacy import InsecureNoiseWarning, SeededNoise

warnings.simplefilter("ignore", InsecureNoiseWarning)  # a speed benchmark, not a release

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "netcal-cifar"


def load() -> tuple[np.ndarray, np.ndarray]:
    with np.load(DATA / "lenet-5-cifar-10.npz") as d:
        p = np.clip(d["predictions"].astype(np.float64), np.finfo(float).tiny, None)
        return np.log(p), np.asarray(d["ground_truth"])


def bench_simulator(z: np.ndarray, y: np.ndarray) -> list[list[object]]:
    rows: list[list[object]] = []
    for k in (100, 1000):
        parts = dirichlet_partition(y, k, 0.1, seed=0, min_size=0)
        for method in ("fedtemp", "fedbbq-all"):
            for eps in (None, 1.0):
                t, _ = best_of(
                    lambda m=method, e=eps, pp=parts: simulate(
                        m,
                        z,
                        y,
                        pp,
                        rounds=10,
                        epsilon=e,
                        delta=None if e is None else 1e-5,
                        noise=None if e is None else SeededNoise(1),  # as in RESULTS.md
                    ),
                    repeats=3,
                )
                rows.append(
                    [
                        k,
                        method,
                        "none" if eps is None else "(1, 1e-5)",
                        f"{10 / t:.1f}",
                        f"{1000 * t / 10:.1f}",
                    ]
                )
                print(rows[-1], flush=True)
    return rows


def bench_flower(z: np.ndarray, y: np.ndarray) -> list[list[object]]:
    from privcal.federated.flower.deploy import FlowerProcesses

    rows: list[list[object]] = []
    for k in (5, 20):
        parts = dirichlet_partition(y[:2000], k, 0.5, seed=0)
        wd = Path(tempfile.mkdtemp(prefix="bench-flwr-"))
        t0 = time.perf_counter()
        with FlowerProcesses(wd) as fp:
            fp.start_superlink()
            for i, idx in enumerate(parts):
                np.savez(wd / f"c{i}.npz", logits=z[idx], labels=y[idx])
                fp.start_supernode(f"node{i}", {"data": str(wd / f"c{i}.npz")})
            start = time.perf_counter() - t0
            t1 = time.perf_counter()
            res = fp.run(
                {
                    "method": "fedtemp",
                    "rounds": 3,
                    "num-nodes": k,
                    "n-classes": 10,
                    "out-dir": str(wd / "out"),
                    "round-timeout-s": 300.0,
                },
                900,
            )
            total = time.perf_counter() - t1
        if res.returncode != 0:
            raise RuntimeError(res.stdout + res.stderr)
        hist = json.loads((wd / "out" / "history.json").read_text())
        per_round = float(np.mean([h["seconds"] for h in hist]))
        rows.append([k, f"{per_round:.1f}", f"{total:.1f}", f"{start:.1f}"])
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-flower", action="store_true")
    ap.add_argument("--out", default="federated-bench.md")
    args = ap.parse_args()
    z, y = load()
    sim = bench_simulator(z, y)
    md = [
        "# privcal.federated benchmarks",
        "",
        f"Command: `.venv/bin/python bench/bench_federated.py` on {machine()}. The machine was "
        "shared with other jobs: timings are noisy (best of 3 for the simulator).",
        "",
        "## Simulator (`simulate`, netcal LeNet-5 CIFAR-10, 10000 x 10, p = 1, T = 10)",
        "",
        markdown_table(["clients K", "method", "DP", "rounds / s", "ms / round"], sim),
        "",
    ]
    if not args.no_flower:
        fl = bench_flower(z, y)
        md += [
            "## Flower on localhost (real SuperLink + SuperNodes, insecure, FedTemp, T = 3)",
            "",
            markdown_table(
                ["SuperNodes", "s / round (ServerApp)", "flwr run total (s)", "startup (s)"], fl
            ),
            "",
            "Each round sends one `query` message per node; the SuperNode starts a fresh "
            "`flwr-clientapp` process per message (Flower's subprocess isolation), which "
            "imports privcal (NumPy, SciPy, scikit-learn): that process start, not the "
            "calibration step (milliseconds), dominates the round time.",
        ]
    Path(args.out).write_text("\n".join(md) + "\n")
    print(f"Wrote {args.out}")


if __name__ == "__main__":
    main()

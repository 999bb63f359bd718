"""Benchmark privcal.federated: federated vs central fits, simulator speed, Flower round time.

Run from the repository root::

    .venv/bin/python bench/bench_federated.py --out federated.md  # then copy into RESULTS.md
    .venv/bin/python bench/bench_federated.py --no-flower
    .venv/bin/python bench/bench_federated.py --only-central  # issue 13's acceptance table

Federated vs central (issue 13): :func:`privcal.experiments.maddock2025.against_central` on the
netcal WRN-16-4 CIFAR-10 / CIFAR-100 and DenseNet-BC-100 CIFAR-100 outputs: calibrate on a
seeded half, evaluate on the other; Dirichlet(0.1) over 100 clients, 12 rounds, p = 1; no DP,
and epsilon = 1, delta = 1e-5 (user level) averaged over 10 noise draws. FedTemp (Newton, the
default) and FedTemp with parameter averaging (seed 003), FedVector and FedMatrix (Newton;
FedMatrix on 10 classes only: its block curvature has 515k entries per client at 100 classes).

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
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import best_of, machine, markdown_table

from privcal.experiments import maddock2025
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


NETWORKS = (
    "wideresnet-16-4-cifar-10.npz",
    "wideresnet-16-4-cifar-100.npz",
    "densenet-bc-100-cifar-100.npz",
)


def bench_against_central() -> list[list[object]]:
    """Issue 13's table: each federated scaling method against its central fit."""
    rows: list[list[object]] = []
    for fname in NETWORKS:
        net = maddock2025.load_network(fname)
        if net is None:
            continue
        c = net[0].shape[1]
        for method in ("fedtemp", "fedtemp-averaging", "fedvector", "fedmatrix"):
            if method == "fedmatrix" and c > 10:
                continue
            central = "fedtemp" if method == "fedtemp-averaging" else method
            t0 = time.perf_counter()
            r = maddock2025.against_central(*net, central, **_averaging(method))
            temp = (
                f"{r['central_t']:.4f} / {r['fed_t']:.4f} / {r['dp_t']:.4f}"
                if "central_t" in r
                else "-"
            )
            rows.append(
                [
                    fname.removesuffix(".npz"),
                    method,
                    f"{100 * r['uncal_cwece']:.3f}",
                    f"{100 * r['central_cwece']:.3f}",
                    f"{100 * r['fed_cwece']:.3f} ({r['fed_cwece'] / r['central_cwece']:.3f})",
                    f"{100 * r['dp_cwece']:.3f} ({r['dp_cwece'] / r['central_cwece']:.3f})",
                    temp,
                    f"{100 * r['central_accuracy']:.2f} / {100 * r['fed_accuracy']:.2f} / "
                    f"{100 * r['dp_accuracy']:.2f}",
                    f"{time.perf_counter() - t0:.0f}",
                ]
            )
            print(rows[-1], flush=True)
    return rows


def _averaging(method: str) -> dict[str, Any]:
    return {"update": "parameter-averaging"} if method.endswith("-averaging") else {}


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
    ap.add_argument("--only-central", action="store_true")
    ap.add_argument("--out", default="federated-bench.md")
    args = ap.parse_args()
    md = [
        "# privcal.federated benchmarks",
        "",
        f"Command: `.venv/bin/python bench/bench_federated.py` on {machine()}. The machine was "
        "shared with other jobs: timings are noisy (best of 3 for the simulator).",
        "",
        "## Federated vs central fit (Dirichlet 0.1, K = 100, T = 12, p = 1)",
        "",
        "cwECE in % on the evaluation half (ratio to the central fit); DP: epsilon = 1, "
        "delta = 1e-5 (user level), mean of 10 noise draws; temperatures central / no DP / DP; "
        "accuracy central / no DP / DP.",
        "",
        markdown_table(
            [
                "network",
                "method",
                "uncalibrated",
                "central",
                "federated, no DP",
                "federated, DP",
                "T",
                "accuracy (%)",
                "s",
            ],
            bench_against_central(),
        ),
        "",
    ]
    if args.only_central:
        Path(args.out).write_text("\n".join(md) + "\n")
        print(f"Wrote {args.out}")
        return
    z, y = load()
    sim = bench_simulator(z, y)
    md += [
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

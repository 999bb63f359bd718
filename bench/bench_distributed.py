"""Distributed noise (issue 25): K parties paying the noise of one release.

Part 1, the data-source protocol: 100 sources x 20 examples of a held-out CIFAR-10 network,
epsilon = 1, median held-out ECE over ``--splits`` random splits of private NLL-T, ECE-T, Acc-T
and histogram binning with ``aggregation="local"`` (each source its own noise),
``"distributed"`` (t = K) and the same 2000 examples answering as one source.

Part 2, federated: 100 Dirichlet(0.1) clients, 12 rounds, epsilon = 1, delta = 1e-5; FedTemp and
weighted FedBBQ, trusted server vs distributed shares with t = 80; mean classwise ECE over
``--draws`` noise draws (secure noise), accuracy.

    python -m bench.bench_distributed [--splits 20] [--draws 10] [--networks NAME ...]
                                      [--part sources|federated|both]
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

from privcal.data import shared_data_dir
from privcal.federated import dirichlet_partition, simulate
from privcal.metrics import accuracy, classwise_ece, ece
from privcal.private import DataSource, PrivateHistogramBinning, PrivateTemperatureScaling

NETWORKS = ("wideresnet-16-4-cifar-10", "lenet-5-cifar-10")
METHODS = {
    "private NLL-T": lambda agg: PrivateTemperatureScaling("nll", aggregation=agg),
    "private ECE-T": lambda agg: PrivateTemperatureScaling("ece", aggregation=agg),
    "private Acc-T": lambda agg: PrivateTemperatureScaling("acc", aggregation=agg),
    "private histogram binning": lambda agg: PrivateHistogramBinning(aggregation=agg),
}


def _load(name: str) -> tuple[np.ndarray, np.ndarray]:
    root = shared_data_dir()
    assert root is not None, "needs ../shared/data"
    d = np.load(root / "netcal-cifar" / f"{name}.npz")
    return np.log(d["predictions"].astype(np.float64)), d["ground_truth"].astype(np.int64)


def data_sources(splits: int, networks: tuple[str, ...] = NETWORKS) -> None:
    print("| network | method | local (100 sources) | distributed (t = K = 100) | one source |")
    print("|---|---|---|---|---|")
    for net in networks:
        z, y = _load(net)
        scores: dict[tuple[str, str], list[float]] = {}
        base = []
        for r in range(splits):
            idx = np.random.default_rng(r).permutation(z.shape[0])
            cal, test = idx[:2000], idx[2000:]
            base.append(ece(np.exp(z[test]), y[test]))
            for name, make in METHODS.items():
                for mode in ("local", "distributed", "one"):
                    if mode == "one":
                        sources = [DataSource(z[cal], y[cal], name="all")]
                    else:
                        sources = [
                            DataSource(z[cal[i::100]], y[cal[i::100]], name=f"s{i}")
                            for i in range(100)
                        ]
                    agg = "local" if mode == "one" else mode
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        est = make(agg).fit(sources=sources)
                    p = est.predict_proba(z[test])
                    scores.setdefault((name, mode), []).append(ece(p, y[test]))
        print(f"| {net} | uncalibrated | {np.median(base):.4f} | | |")
        for name in METHODS:
            row = [np.median(scores[(name, m)]) for m in ("local", "distributed", "one")]
            print(f"| {net} | {name} | {row[0]:.4f} | {row[1]:.4f} | {row[2]:.4f} |")


def federated(draws: int) -> None:
    z, y = _load("wideresnet-16-4-cifar-10")
    zc, yc, zt, yt = z[:5000], y[:5000], z[5000:], y[5000:]
    parts = dirichlet_partition(yc, n_clients=100, beta=0.1, seed=0, min_size=0)
    print(f"uncalibrated cwECE {classwise_ece(np.exp(zt), yt):.4f}")
    print("| method | aggregation | mean cwECE | accuracy | seconds/run |")
    print("|---|---|---|---|---|")
    for method in ("fedtemp", "fedbbq-all"):
        for agg, t in (("trusted", None), ("distributed", 80)):
            cw, acc, t0 = [], [], time.perf_counter()
            for _ in range(draws):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    cal, _ = simulate(
                        method,
                        zc,
                        yc,
                        parts,
                        rounds=12,
                        epsilon=1.0,
                        delta=1e-5,
                        aggregation=agg,
                        threshold=t,
                    )
                p = cal.predict_proba(zt)
                cw.append(classwise_ece(p, yt))
                acc.append(accuracy(p, yt))
            sec = (time.perf_counter() - t0) / draws
            print(f"| {method} | {agg} | {np.mean(cw):.4f} | {np.mean(acc):.4f} | {sec:.1f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--splits", type=int, default=20)
    ap.add_argument("--draws", type=int, default=10)
    ap.add_argument("--networks", nargs="+", default=list(NETWORKS), choices=NETWORKS)
    ap.add_argument("--part", choices=("sources", "federated", "both"), default="both")
    args = ap.parse_args()
    if args.part in ("federated", "both"):
        federated(args.draws)
    if args.part in ("sources", "both"):
        data_sources(args.splits, tuple(args.networks))


if __name__ == "__main__":
    main()

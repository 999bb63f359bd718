"""Federated conformal prediction with user-level DP against its baselines (issue 34 item 2).

netcal-cifar ``wideresnet-16-4-cifar-100`` (probabilities -> logits ``log p``), 5000 calibration
rows split over 100 clients by Dirichlet(0.5) label skew, the other 5000 rows the test set;
LAC, ``alpha = 0.1``, 20 random splits. Rows:

* ``conformal-lac`` (``simulate``, one round, user-level ``(epsilon, 1e-5)``, distributed
  discrete Gaussian shares and trusted Gaussian noise; ``SecureNoise``);
* central ``PrivateConformal(epsilon)`` on the pooled calibration rows (example level);
* FedCP-QQ (Humbert et al. 2023: each client's local ``l``-th score, the server's ``k``-th of
  those), non-private, ``(l, k)`` chosen for the median client size (its guarantee assumes equal
  client sizes and i.i.d. clients);
* split conformal on the pooled rows, non-private.

Prints mean coverage +- its standard error over splits and the mean set size.

    PYTHONPATH=src python bench/federated_conformal.py [--splits 20] [--epsilon 1]
    PYTHONPATH=src python bench/federated_conformal.py --clients 1000 --min-size 0 [--bins 16]
"""

from __future__ import annotations

import argparse
import logging
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from privcal.conformal import PrivateConformal, SplitConformal
from privcal.federated import dirichlet_partition, simulate
from privcal.metrics.conformity import lac_scores

DATA = Path("/work/shared/data/netcal-cifar/wideresnet-16-4-cifar-100.npz")


def qq_coverage(n: int, k_clients: int, local: int, server: int) -> float:
    """FedCP-QQ's coverage for i.i.d. clients of ``n`` rows: ``E[V]``, ``V`` the ``server``-th
    smallest of ``K`` i.i.d. ``Beta(local, n - local + 1)`` (each client's ``local``-th uniform
    score)."""
    v = np.linspace(0.0, 1.0, 4001)
    g = stats.beta.cdf(v, local, n - local + 1)
    below = stats.binom.sf(server - 1, k_clients, g)  # P(V <= v)
    return float(np.trapezoid(1.0 - below, v))


def fedcp_qq(scores: list[np.ndarray], alpha: float) -> float:
    """The one-round quantile of local quantiles: the smallest valid ``(l, k)`` pair's
    threshold (``l`` at the median client size, scaled to each client's size)."""
    sizes = np.array([s.size for s in scores if s.size])
    n, k = int(np.median(sizes)), len(sizes)
    best = None
    for local in range(1, n + 1):
        for server in range(1, k + 1):
            if qq_coverage(n, k, local, server) >= 1 - alpha:
                if best is None or local / n + server / k < best[0]:
                    best = (local / n + server / k, local, server)
                break
    if best is None:
        return 1.0
    _, local, server = best
    q = [np.sort(s)[min(s.size, int(np.ceil(local / n * s.size))) - 1] for s in scores if s.size]
    return float(np.sort(q)[server - 1])


def run(
    splits: int,
    epsilon: float,
    alpha: float,
    clients: int,
    seed: int,
    min_size: int = 1,
    **method: Any,
) -> dict:
    d = np.load(DATA)
    p = np.asarray(d["predictions"], dtype=np.float64)
    y = np.asarray(d["ground_truth"])
    z = np.log(np.clip(p, 1e-12, None))
    s_all = lac_scores(p)
    rng = np.random.default_rng(seed)
    out: dict[str, tuple[list[float], list[float]]] = {}

    def record(name: str, threshold: float, test: np.ndarray) -> None:
        sets = s_all[test] <= threshold
        cov, size = out.setdefault(name, ([], []))
        cov.append(float(sets[np.arange(test.size), y[test]].mean()))
        size.append(float(sets.sum(axis=1).mean()))

    for split in range(splits):
        perm = rng.permutation(y.size)
        cal, test = perm[: y.size // 2], perm[y.size // 2 :]
        parts = dirichlet_partition(
            y[cal], n_clients=clients, beta=0.5, seed=seed + split, min_size=min_size
        )
        for agg in ("distributed", "trusted"):
            sets, _ = simulate(
                "conformal-lac",
                z[cal],
                y[cal],
                parts,
                rounds=1,
                epsilon=epsilon,
                delta=1e-5,
                aggregation=agg,
                seed=split,
                alpha=alpha,
                **method,
            )
            record(f"conformal-lac ({agg}, user-level)", sets.threshold_, test)
        cp = PrivateConformal(score="lac", alpha=alpha, epsilon=epsilon).fit(z[cal], y[cal])
        record("central PrivateConformal (example-level)", cp.threshold_, test)
        s_cal = s_all[cal, y[cal]]
        record("FedCP-QQ (non-private)", fedcp_qq([s_cal[i] for i in parts], alpha), test)
        split_cp = SplitConformal(score="lac", alpha=alpha).fit(z[cal], y[cal])
        record("split conformal (non-private)", split_cp.threshold_, test)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--splits", type=int, default=20)
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--alpha", type=float, default=0.1)
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--min-size", type=int, default=1, help="dirichlet_partition's min_size")
    ap.add_argument("--bins", type=int, default=None, help="conformal-lac's n_bins")
    ap.add_argument("--floor", type=float, default=None, help="conformal-lac's floor")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    method = {k: v for k, v in (("n_bins", args.bins), ("floor", args.floor)) if v is not None}
    out = run(
        args.splits, args.epsilon, args.alpha, args.clients, args.seed, args.min_size, **method
    )
    print(f"| method | coverage (mean +- SE, {args.splits} splits) | mean set size |")
    print("|---|---|---|")
    for name, (cov, size) in out.items():
        se = np.std(cov, ddof=1) / np.sqrt(len(cov)) if len(cov) > 1 else 0.0
        print(f"| {name} | {np.mean(cov):.4f} +- {se:.4f} | {np.mean(size):.2f} |")


if __name__ == "__main__":
    main()

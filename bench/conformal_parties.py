"""Private prediction sets across parties (issue 34's "Must hold"), on the real networks.

1. **Sources.** One network's 7000 calibration rows split over 20 sources by Dirichlet(0.5) label
   skew (a class's rows go to the sources in Dirichlet proportions), LAC, alpha 0.1, epsilon 1 per
   source: ``PrivateConformal(aggregation="distributed" | "local").fit(sources=...)`` against the
   central ``PrivateConformal(epsilon=1)`` on the pooled rows and split conformal, 20 splits, on
   the rest as test rows. Coverage +- SE over splits, mean set size, size relative to central.
2. **Groups.** Groups = the predicted class: ``PrivateConformal(epsilon=1).fit(..., groups=g)`` on
   a 70% calibration split, every group's test coverage over 20 splits, on every network of
   ``../shared/data`` with full probability vectors whose every group holds at least 500
   calibration rows (the others are listed with their smallest group).

Secure noise throughout (as users call it), so the private rows vary a little between runs.

    PYTHONPATH=src python -m bench.conformal_parties [--splits 20] [--part sources|groups|all]
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import numpy as np

from privcal.conformal import PrivateConformal, SplitConformal
from privcal.private import DataSource

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
NETWORKS = {
    "wideresnet-16-4-cifar-100": "netcal-cifar/wideresnet-16-4-cifar-100.npz",
    "densenet-bc-100-cifar-100": "netcal-cifar/densenet-bc-100-cifar-100.npz",
    "wideresnet-16-4-cifar-10": "netcal-cifar/wideresnet-16-4-cifar-10.npz",
    "lenet-5-cifar-10": "netcal-cifar/lenet-5-cifar-10.npz",
    "lenet-5-cifar-100": "netcal-cifar/lenet-5-cifar-100.npz",
    "cifar10 (cleanlab)": "cleanlab-heldout/cifar10",
    "mnist (cleanlab)": "cleanlab-heldout/mnist",
    "imdb (cleanlab)": "cleanlab-heldout/imdb",
    "20news (cleanlab)": "cleanlab-heldout/20news",
}


def load(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Logits ``log p`` (zeros clipped at the smallest positive float) and labels."""
    rel = NETWORKS[name]
    if rel.endswith(".npz"):
        d = np.load(DATA / rel)
        p, y = d["predictions"].astype(np.float64), d["ground_truth"]
    else:
        p, y = np.load(DATA / f"{rel}_probs.npy"), np.load(DATA / f"{rel}_labels.npy")
    return np.log(np.clip(p, np.finfo(np.float64).tiny, None)), y.astype(np.int64)


def _hit_size(sets: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    return float(sets[np.arange(y.size), y].mean()), float(sets.sum(1).mean())


def sources(name: str, splits: int, n_cal: int = 7000, k: int = 20, alpha: float = 0.1) -> None:
    z, y = load(name)
    c = z.shape[1]
    rows: dict[str, list[tuple[float, float]]] = {}
    for r in range(splits):
        rng = np.random.default_rng(r)
        perm = rng.permutation(y.size)
        cal, test = perm[:n_cal], perm[n_cal:]
        share = rng.dirichlet(np.full(k, 0.5), size=c)  # per class, over the k sources
        owner = np.array([rng.choice(k, p=share[label]) for label in y[cal]])
        fits = {"central PrivateConformal(epsilon=1)": PrivateConformal(alpha=alpha)}
        fits["split conformal (not private)"] = SplitConformal(alpha=alpha)
        for est in fits.values():
            est.fit(z[cal], y[cal])
        for aggregation in ("distributed", "local"):
            srcs = [
                DataSource(z[cal][owner == i], y[cal][owner == i], name=f"s{i}")
                for i in range(k)
                if np.any(owner == i)
            ]
            est = PrivateConformal(alpha=alpha, aggregation=aggregation)
            fits[f"sources, {aggregation}"] = est.fit(sources=srcs)
        for label, est in fits.items():
            rows.setdefault(label, []).append(_hit_size(est.predict_set(z[test]), y[test]))
    central = np.mean([s for _, s in rows["central PrivateConformal(epsilon=1)"]])
    print(
        f"\n{name}: {k} sources (Dirichlet 0.5 label skew) of {n_cal} calibration rows, "
        f"LAC, alpha {alpha}, epsilon 1 per source, {splits} splits"
    )
    print("| fit | coverage +- SE | mean set size | size vs central |")
    print("|---|---|---|---|")
    for label, v in rows.items():
        a = np.asarray(v)
        se = a[:, 0].std(ddof=1) / np.sqrt(len(a))
        print(
            f"| {label} | {a[:, 0].mean():.4f} +- {se:.4f} | {a[:, 1].mean():.3f} | "
            f"{a[:, 1].mean() / central - 1:+.1%} |"
        )


def groups(name: str, splits: int, alpha: float = 0.1, min_rows: int = 500) -> None:
    z, y = load(name)
    g = z.argmax(1)
    n_cal = int(0.7 * y.size)
    smallest = min(
        np.bincount(g[perm[:n_cal]], minlength=z.shape[1]).min()
        for perm in (np.random.default_rng(r).permutation(y.size) for r in range(splits))
    )
    if smallest < min_rows:
        print(
            f"| {name} | skipped: a predicted class has {smallest} calibration rows "
            f"(< {min_rows}) | | |"
        )
        return
    cover = []
    for r in range(splits):
        perm = np.random.default_rng(r).permutation(y.size)
        cal, test = perm[:n_cal], perm[n_cal:]
        est = PrivateConformal(alpha=alpha).fit(z[cal], y[cal], groups=g[cal])
        hit = est.predict_set(z[test], groups=g[test])[np.arange(test.size), y[test]]
        cover.append([hit[g[test] == k].mean() for k in range(z.shape[1])])
    a = np.asarray(cover)
    mean, se = a.mean(0), a.std(0, ddof=1) / np.sqrt(splits)
    worst = int(mean.argmin())
    ok = "yes" if mean.min() >= 1 - alpha - 0.02 else "NO"
    print(
        f"| {name} | {mean.min():.4f} +- {se[worst]:.4f} (class {worst}) | "
        f"{mean.mean():.4f} | {ok} |"
    )


def sources_groups(name: str, splits: int, n_cal: int = 7000, k: int = 20) -> None:
    """Groups = the predicted class over ``k`` sources (Dirichlet 0.5), distributed: each
    class's mean test coverage over the splits, beside the single-party Mondrian fit."""
    z, y = load(name)
    c, alpha = z.shape[1], 0.1
    cover: dict[str, list[list[float]]] = {"sources": [], "one party": []}
    for r in range(splits):
        rng = np.random.default_rng(r)
        perm = rng.permutation(y.size)
        cal, test = perm[:n_cal], perm[n_cal:]
        share = rng.dirichlet(np.full(k, 0.5), size=c)
        owner = np.array([rng.choice(k, p=share[label]) for label in y[cal]])
        srcs = [DataSource(z[cal][owner == i], y[cal][owner == i], name=f"s{i}")
                for i in range(k) if np.any(owner == i)]  # fmt: skip
        g_test = z[test].argmax(1)
        fits = {
            "sources": PrivateConformal(alpha=alpha, aggregation="distributed").fit(
                sources=srcs, groups="predicted"
            ),
            "one party": PrivateConformal(alpha=alpha).fit(z[cal], y[cal], groups=z[cal].argmax(1)),
        }
        for label, est in fits.items():
            hit = est.predict_set(z[test], groups=g_test)[np.arange(test.size), y[test]]
            cover[label].append([hit[g_test == g].mean() for g in range(c)])
    print(
        f"\n{name}: groups = the predicted class, {k} sources (Dirichlet 0.5) of {n_cal} rows, "
        f"distributed, epsilon 1, {splits} splits"
    )
    print("| fit | worst class's coverage +- SE | mean over classes |")
    print("|---|---|---|")
    for label, v in cover.items():
        a = np.asarray(v)
        mean, se = a.mean(0), a.std(0, ddof=1) / np.sqrt(splits)
        w = int(mean.argmin())
        print(f"| {label} | {mean[w]:.4f} +- {se[w]:.4f} (class {w}) | {mean.mean():.4f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits", type=int, default=20)
    parser.add_argument(
        "--part", choices=("sources", "groups", "sources-groups", "all"), default="all"
    )
    parser.add_argument("--network", default="wideresnet-16-4-cifar-100")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    if args.part in ("sources", "all"):
        sources(args.network, args.splits)
    if args.part in ("sources-groups", "all"):
        sources_groups("wideresnet-16-4-cifar-10", args.splits)
    if args.part in ("groups", "all"):
        print(
            f"\nGroups = the predicted class, PrivateConformal(epsilon=1), LAC, alpha 0.1, "
            f"70% calibration, {args.splits} splits: each group's mean test coverage"
        )
        print("| network | worst group's coverage +- SE | mean over groups | >= 0.88 |")
        print("|---|---|---|---|")
        for name in NETWORKS:
            groups(name, args.splits)


if __name__ == "__main__":
    main()

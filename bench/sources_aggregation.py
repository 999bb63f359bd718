"""DP Acc-T across three data sources: distributed shares against local noise, real networks.

Run from the repository root::

    .venv/bin/python bench/sources_aggregation.py

Each netcal network in ../shared/data is split 50/50 by ``default_rng(0).permutation``; each of
10 runs deals three sources of 1000 rows from the first half (``default_rng(100 + r)``) and fits
``PrivateTemperatureScaling(objective="acc", epsilon=1)`` over them with ``aggregation="local"``
(each source adds its own Laplace noise) and ``"distributed"`` (discrete Laplace shares summed by
the in-process secure sum: the arithmetic of ``privcal federate server --method acc-t --secagg``),
default secure noise. Held-out ECE (second half) against the uncalibrated model and the
non-private Acc-T twin (``TemperatureScaling(objective="acc")`` on the same 3000 rows of run 0's
pool size).
"""

from __future__ import annotations

import warnings

import numpy as np

NETWORKS = ("lenet-5-cifar-10", "wideresnet-16-4-cifar-10", "densenet-bc-100-cifar-100")


def main() -> None:
    from privcal.calibrators import TemperatureScaling
    from privcal.data import shared_data_dir
    from privcal.metrics import ece
    from privcal.metrics.statistics import softmax
    from privcal.private import DataSource, PrivateTemperatureScaling

    print("| network | uncalibrated | non-private Acc-T | local, median (runs better) | "
          "distributed, median (runs better) |")  # fmt: skip
    print("|---|---|---|---|---|")
    for net in NETWORKS:
        d = np.load(shared_data_dir() / "netcal-cifar" / f"{net}.npz")
        z = np.log(np.clip(d["predictions"].astype(float), 1e-300, None))
        y = d["ground_truth"]
        perm = np.random.default_rng(0).permutation(y.size)
        cal, test = perm[: y.size // 2], perm[y.size // 2 :]
        base = ece(softmax(z[test]), y[test])
        twin = TemperatureScaling(objective="acc").fit(z[cal[:3000]], y[cal[:3000]])
        cells = []
        for agg in ("local", "distributed"):
            scores = []
            for r in range(10):
                idx = np.random.default_rng(100 + r).permutation(cal)[:3000].reshape(3, 1000)
                sources = [DataSource(z[i], y[i], name=f"s{k}") for k, i in enumerate(idx)]
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    est = PrivateTemperatureScaling(objective="acc", epsilon=1.0, aggregation=agg)
                    est.fit(sources=sources)
                scores.append(ece(est.predict_proba(z[test]), y[test]))
            better = int(np.sum(np.array(scores) < base))
            cells.append(f"{np.median(scores):.4f} ({better} of 10)")
        twin_ece = ece(twin.predict_proba(z[test]), y[test])
        print(f"| {net} | {base:.4f} | {twin_ece:.4f} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()

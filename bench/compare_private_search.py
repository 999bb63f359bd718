"""Measure Acc-T / NLL-T / ECE-T search variants under the same budget (docs/private.md).

Usage: .venv/bin/python -m bench.compare_private_search [--trials 200]
Prints the median over settings of the per-setting mean test ECE, on digits_shift (severity 5,
all corruptions, the sources panel at epsilon=1 and the epsilon panel) and on real networks
(100 sources x 20 samples, epsilon=1).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from privcal.experiments.luo2020 import GridPoint, MethodSpec, default_grid, load_datasets, run

VARIANTS = (
    MethodSpec("Acc-T golden [0.5, 3]", "temperature", "acc", "golden", (0.5, 3.0)),
    MethodSpec("Acc-T golden [0.25, 8]", "temperature", "acc", "golden", (0.25, 8.0)),
    MethodSpec("Acc-T golden auto (locate at 3)", "temperature", "acc", "golden", "auto"),
    MethodSpec("Acc-T bisect [0.5, 3]", "temperature", "acc", "bisect", (0.5, 3.0)),
    MethodSpec("Acc-T bisect [0.25, 8]", "temperature", "acc", "bisect", (0.25, 8.0)),
    MethodSpec("Acc-T bisect [0.5, 30] (auto)", "temperature", "acc", "bisect", "auto"),
    MethodSpec("NLL-T golden [0.5, 3]", "temperature", "nll", "golden", (0.5, 3.0)),
    MethodSpec("NLL-T golden auto", "temperature", "nll", "golden", "auto"),
    MethodSpec("ECE-T golden [0.5, 3]", "temperature", "ece", "golden", (0.5, 3.0)),
    MethodSpec("ECE-T golden auto", "temperature", "ece", "golden", "auto"),
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    t0 = time.perf_counter()
    grid = [p for p in default_grid(899) if p.panel in ("sources", "epsilon")]
    digits = run(trials=args.trials, grid=grid, methods=VARIANTS, progress=False, jobs=args.jobs)
    tab = digits.table()
    shared = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "netcal-cifar"
    real = {}
    for name in ("densenet-bc-100-cifar-100", "lenet-5-cifar-10", "wideresnet-16-4-cifar-10"):
        path = shared / f"{name}.npz"
        if path.is_file():
            real.update(load_datasets(path))
    rtab = {}
    if real:
        r = run(
            real,
            trials=args.trials,
            grid=[GridPoint("sources", 100, 20, 1.0)],
            methods=VARIANTS,
            progress=False,
            jobs=args.jobs,
        )
        for m in r.methods:
            rtab[m] = [row["ece_mean"] for row in r.rows if row["method"] == m]
    print(f"| variant | digits_shift median / mean | {' | '.join(real)} |")
    print("|---|---|" + "---|" * len(real))
    for m, (med, mean) in tab.items():
        cells = " | ".join(f"{v:.4f}" for v in rtab.get(m, []))
        print(f"| {m} | {med:.4f} / {mean:.4f} | {cells} |")
    print(f"\n{args.trials} trials; {time.perf_counter() - t0:.0f} s")
    _ = np


if __name__ == "__main__":
    main()

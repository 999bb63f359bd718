"""Measure Acc-T / NLL-T / ECE-T search variants under the same budget (docs/private.md).

Usage: .venv/bin/python -m bench.compare_private_search [--trials 100] [--splits 40] [--draws 20]

Two tables:

1. **Variants** (``--trials`` splits per setting, one noise draw per split): the median over
   settings of the per-setting mean test ECE on digits_shift (severity 5, all corruptions, the
   sources panel at epsilon=1 and the epsilon panel) and on the real networks (100 sources x 20
   samples, epsilon=1).
2. **Noise as drawn** (issue 13): on the three CIFAR-10 networks, ``--splits`` splits x
   ``--draws`` independent noise draws of every default (:func:`luo2020.noise_pooled_ece`, the
   function the statistical test uses): the median test ECE over 5 x splits and over all draws,
   and the spread over noise-seed sets (the median over the splits of each draw: min / median /
   max).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from privcal.data import read_scores
from privcal.experiments.luo2020 import (
    GridPoint,
    MethodSpec,
    default_grid,
    load_datasets,
    noise_pooled_ece,
    run,
)

VARIANTS = (
    MethodSpec("Acc-T golden-section [0.5, 3] (seed 000)", "temperature", "acc", "golden-section"),
    MethodSpec("Acc-T golden [0.25, 8]", "temperature", "acc", "golden", (0.25, 8.0)),
    MethodSpec("Acc-T golden auto (locate at 3)", "temperature", "acc", "golden", "auto"),
    MethodSpec("Acc-T bisect [0.5, 3]", "temperature", "acc", "bisect", (0.5, 3.0)),
    MethodSpec("Acc-T bisect [0.5, 30]", "temperature", "acc", "bisect", "auto"),
    MethodSpec("Acc-T curve [0.5, 32]", "temperature", "acc", "curve", (0.5, 32.0)),
    MethodSpec("Acc-T curve [0.25, 64] (default)", "temperature", "acc", "curve", "auto"),
    MethodSpec("NLL-T golden [0.5, 3]", "temperature", "nll", "golden", (0.5, 3.0)),
    MethodSpec("NLL-T golden auto (default)", "temperature", "nll", "golden", "auto"),
    MethodSpec("ECE-T golden [0.5, 3]", "temperature", "ece", "golden", (0.5, 3.0)),
    MethodSpec("ECE-T golden auto (default)", "temperature", "ece", "golden", "auto"),
)

#: The defaults and seed 000's Acc-T, measured for the noise as drawn.
DEFAULTS = (
    MethodSpec("No recalibration", "none"),
    MethodSpec("Acc-T (default: curve)", "temperature", "acc"),
    MethodSpec("Acc-T golden-section (seed 000)", "temperature", "acc", "golden-section"),
    MethodSpec("Acc-T bisect [0.5, 30]", "temperature", "acc", "bisect"),
    MethodSpec("NLL-T (default)", "temperature", "nll"),
    MethodSpec("ECE-T (default)", "temperature", "ece"),
)

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
REAL = ("densenet-bc-100-cifar-100", "lenet-5-cifar-10", "wideresnet-16-4-cifar-10")
CIFAR10 = (
    "netcal-cifar/wideresnet-16-4-cifar-10.npz",
    "netcal-cifar/lenet-5-cifar-10.npz",
    "cleanlab-heldout/cifar10_probs.npy",
)


def variants_table(trials: int, jobs: int) -> None:
    grid = [p for p in default_grid(899) if p.panel in ("sources", "epsilon")]
    tab = run(trials=trials, grid=grid, methods=VARIANTS, progress=False, jobs=jobs).table()
    real = {}
    for name in REAL:
        path = SHARED / "netcal-cifar" / f"{name}.npz"
        if path.is_file():
            real.update(load_datasets(path))
    rtab: dict[str, list[float]] = {}
    if real:
        r = run(
            real,
            trials=trials,
            grid=[GridPoint("sources", 100, 20, 1.0)],
            methods=VARIANTS,
            progress=False,
            jobs=jobs,
        )
        for m in r.methods:
            rtab[m] = [row["ece_mean"] for row in r.rows if row["method"] == m]
    print(f"| variant | digits_shift median / mean | {' | '.join(real)} |")
    print("|---|---|" + "---|" * len(real))
    for m, (med, mean) in tab.items():
        cells = " | ".join(f"{v:.4f}" for v in rtab.get(m, []))
        print(f"| {m} | {med:.4f} / {mean:.4f} | {cells} |")


def noise_table(splits: int, draws: int) -> None:
    print("\n| network | method | median 5 draws | median all draws | per draw: min / med / max |")
    print("|---|---|---|---|---|")
    for rel in CIFAR10:
        path = SHARED / rel
        if not path.is_file():
            continue
        sc = read_scores(path)
        res = noise_pooled_ece(sc.logits, sc.labels, DEFAULTS, splits=splits, draws=draws)
        for m, e in res.items():
            per = np.median(e, axis=1)
            print(
                f"| {path.stem} | {m} | {np.median(e[:5]):.4f} | {np.median(e):.4f} | "
                f"{per.min():.4f} / {np.median(per):.4f} / {per.max():.4f} |"
            )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--splits", type=int, default=40)
    ap.add_argument("--draws", type=int, default=20)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--skip-variants", action="store_true")
    args = ap.parse_args()
    t0 = time.perf_counter()
    if not args.skip_variants:
        variants_table(args.trials, args.jobs)
    noise_table(args.splits, args.draws)
    print(f"\n{args.trials} trials per setting; {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()

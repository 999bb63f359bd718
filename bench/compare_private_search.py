"""Measure Acc-T / NLL-T / ECE-T search variants under the same budget (docs/private.md).

Usage: .venv/bin/python -m bench.compare_private_search [--trials 100] [--splits 40] [--draws 20]
       [--scoreboard-draws 5] [--skip-variants] [--skip-noise] [--skip-scoreboard]

Three tables:

1. **Variants** (``--trials`` splits per setting, one noise draw per split): the median over
   settings of the per-setting mean test ECE on digits_shift (severity 5, all corruptions, the
   sources panel at epsilon=1 and the epsilon panel) and on the real networks (100 sources x 20
   samples, epsilon=1).
2. **Noise as drawn** (issue 13): on the three CIFAR-10 networks, ``--splits`` splits x
   ``--draws`` independent noise draws of every default (:func:`luo2020.noise_pooled_ece`, the
   function the statistical test uses): the median test ECE over 5 x splits and over all draws,
   and the spread over noise-seed sets (the median over the splits of each draw: min / median /
   max).
3. **Scoreboard protocol** (``bench/SCOREBOARD.md``): on :data:`SCOREBOARD_DATA`, the
   scoreboard's 5 calibration/test halvings (``scoreboard.split_indices``), one private source
   holding the calibration half, each search of private NLL-T at epsilon 0.5 / 1 / 4 fitted
   through :class:`~privcal.private.PrivateTemperatureScaling` as the scoreboard calls it. Draw 0
   uses the scoreboard's own noise seeds (so its rows are the scoreboard's numbers for that
   search); ``--scoreboard-draws`` adds independent draws. Printed: the median test ECE over
   splits x draws, the paired difference to the uncalibrated model (mean over splits of the
   per-split mean over draws, with its SE over splits, the scoreboard's worse-than-nothing
   test) and the ratio to the non-private twin ``TemperatureScaling("nll")``.
"""

from __future__ import annotations

import argparse
import math
import time
import warnings
import zlib
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
    MethodSpec("NLL-T golden-section [0.5, 3] (seed 000)", "temperature", "nll", "golden-section"),
    MethodSpec("NLL-T golden auto (locate at 3)", "temperature", "nll", "golden", "auto"),
    MethodSpec("NLL-T curve [0.25, 64] (default)", "temperature", "nll", "curve", "auto"),
    MethodSpec("ECE-T golden [0.5, 3]", "temperature", "ece", "golden", (0.5, 3.0)),
    MethodSpec("ECE-T golden auto (default)", "temperature", "ece", "golden", "auto"),
)

#: The defaults and seed 000's Acc-T, measured for the noise as drawn.
DEFAULTS = (
    MethodSpec("No recalibration", "none"),
    MethodSpec("Acc-T (default: curve)", "temperature", "acc"),
    MethodSpec("Acc-T golden-section (seed 000)", "temperature", "acc", "golden-section"),
    MethodSpec("Acc-T bisect [0.5, 30]", "temperature", "acc", "bisect"),
    MethodSpec("NLL-T (default: curve)", "temperature", "nll"),
    MethodSpec("NLL-T golden auto (before)", "temperature", "nll", "golden"),
    MethodSpec("ECE-T (default)", "temperature", "ece"),
)

#: Private NLL-T searches compared under the scoreboard's protocol (label -> search).
NLL_SEARCHES = {
    "golden (before: locate at 3, golden section)": "golden",
    "golden-section [0.5, 3] (seed 000)": "golden-section",
    "curve (one release of the increments)": "curve",
}
SCOREBOARD_DATA = ("mnist", "lenet-5-cifar-100", "wideresnet-16-4-cifar-10")
SCOREBOARD_EPSILONS = (0.5, 1.0, 4.0)

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
REAL = ("densenet-bc-100-cifar-100", "lenet-5-cifar-10", "wideresnet-16-4-cifar-10")
CIFAR10 = (
    "netcal-cifar/wideresnet-16-4-cifar-10.npz",
    "netcal-cifar/lenet-5-cifar-10.npz",
    "cleanlab-heldout/cifar10_probs.npy",
)


def variants_table(trials: int, jobs: int) -> None:
    grid = [p for p in default_grid(899) if p.panel in ("sources", "epsilon")]
    tab = run(trials=trials, grid=grid, methods=VARIANTS, jobs=jobs).table()
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


def _scoreboard_fits(
    name: str, draws: int
) -> tuple[np.ndarray, np.ndarray, dict[tuple[str, float], np.ndarray]]:
    """Test ECE of uncalibrated, the twin and each NLL-T search: ``(splits,)``, ``(splits,)``
    and ``(splits, draws)`` arrays, on the scoreboard's splits and noise seeds."""
    from privcal.calibrators import TemperatureScaling
    from privcal.experiments import scoreboard as sb
    from privcal.experiments.scoreboard.rows import _seed
    from privcal.metrics import ece
    from privcal.metrics.statistics import softmax
    from privcal.privacy import SeededNoise
    from privcal.private import PrivateTemperatureScaling

    data = sb.load_dataset(name)
    z, y = data.logits, data.labels
    assert z is not None
    crc = zlib.crc32(b"private nll-t")
    parts = sb.split_indices(data.n, data.n // 2, 5, 0)
    base, twin = np.empty(len(parts)), np.empty(len(parts))
    out = {(m, e): np.empty((len(parts), draws)) for m in NLL_SEARCHES for e in SCOREBOARD_EPSILONS}
    for r, (cal, test) in enumerate(parts):
        zc, yc, zt, yt = z[cal], y[cal], z[test], y[test]
        base[r] = ece(softmax(zt), yt)
        twin[r] = ece(TemperatureScaling("nll").fit(zc, yc).predict_proba(zt), yt)
        for i, eps in enumerate(SCOREBOARD_EPSILONS):
            for k in range(draws):
                seed = _seed(0, r, i, crc) if k == 0 else _seed(0, r, i, crc, k)
                for label, search in NLL_SEARCHES.items():
                    est = PrivateTemperatureScaling(
                        "nll", epsilon=eps, search=search, noise=SeededNoise(seed)
                    )
                    out[(label, eps)][r, k] = ece(est.fit(zc, yc).predict_proba(zt), yt)
    return base, twin, out


def scoreboard_table(draws: int) -> None:
    print(
        "\n| data set | private NLL-T search | eps | median ECE % | vs none (pp, mean ± SE), "
        "all draws | vs none, draw 0 (the scoreboard's seeds) | ratio to twin |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in SCOREBOARD_DATA:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            base, twin, out = _scoreboard_fits(name, draws)
        print(
            f"| {name} | uncalibrated / twin nll-t | inf | {100 * np.median(base):.2f} / "
            f"{100 * np.median(twin):.2f} | twin {100 * np.mean(twin - base):+.2f} | |"
        )
        for (label, eps), e in out.items():
            print(
                f"| {name} | {label} | {eps:g} | {100 * np.median(e):.2f} | "
                f"{_versus(e.mean(axis=1), base)} | {_versus(e[:, 0], base)} | "
                f"{np.mean(e) / np.mean(twin):.2f} |"
            )


def _versus(ece: np.ndarray, base: np.ndarray) -> str:
    """The scoreboard's paired test: mean ± SE over splits of ``ece - base`` (pp) and its mark."""
    diff = ece - base
    se = diff.std(ddof=1) / math.sqrt(diff.size)
    mark = " **WORSE**" if diff.mean() > 2 * se else ""
    return f"{100 * diff.mean():+.2f} ± {100 * se:.2f}{mark}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--splits", type=int, default=40)
    ap.add_argument("--draws", type=int, default=20)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--scoreboard-draws", type=int, default=5)
    ap.add_argument("--skip-variants", action="store_true")
    ap.add_argument("--skip-noise", action="store_true")
    ap.add_argument("--skip-scoreboard", action="store_true")
    args = ap.parse_args()
    t0 = time.perf_counter()
    if not args.skip_variants:
        variants_table(args.trials, args.jobs)
    if not args.skip_noise:
        noise_table(args.splits, args.draws)
    if not args.skip_scoreboard:
        scoreboard_table(args.scoreboard_draws)
    print(f"\n{args.trials} trials per setting; {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()

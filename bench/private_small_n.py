"""What the private fits' defaults do on few rows: refused, fallen back, or kept, and the mean
held-out ECE change of what they save.

Run with ``python -m bench.private_small_n [--fits 200]`` from the repository root (about
2 min). Synthetic over-confident logits (100 classes, labels drawn with three times the logits'
noise scale: issue 32's ``tiny.npz`` generator) at epsilon 0.1; for each ``n``, ``--fits``
seeded data sets and noise draws (seeded noise: a simulation, not a private release). Each fit
uses the estimator's defaults, as ``privcal fit`` does without ``--force``: a fit refused
before any release (``TooFewRowsError``) or one that fell back saves nothing (a change of 0
against doing nothing); the mean is over all fits, with its standard error.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np

from privcal.metrics.calibration import ece
from privcal.metrics.statistics import softmax
from privcal.privacy import SeededNoise
from privcal.private import PrivateHistogramBinning, PrivateTemperatureScaling, TooFewRowsError

ROWS = (20, 100, 150, 200, 400, 1000)


def scores(n: int, c: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Over-confident logits: labels drawn with three times the logits' noise scale."""
    rng = np.random.default_rng(seed)
    z = 3.0 * rng.normal(size=(n, c))
    return z, np.argmax(z / 3.0 + rng.normal(size=z.shape), axis=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fits", type=int, default=200)
    args = parser.parse_args()
    z_test, y_test = scores(20000, 100, 7)
    before = ece(softmax(z_test), y_test)
    print(f"uncalibrated held-out ECE {100 * before:.1f}%")
    print("| method | n | refused | fell back | kept | mean dECE (pp) | worst (pp) |")
    print("|:--|--:|--:|--:|--:|--:|--:|")
    makers = {
        "Acc-T": lambda s: PrivateTemperatureScaling("acc", epsilon=0.1, noise=SeededNoise(s)),
        "histogram": lambda s: PrivateHistogramBinning(epsilon=0.1, noise=SeededNoise(s)),
    }
    for name, make in makers.items():
        for n in ROWS:
            refused = fell = 0
            change = np.zeros(args.fits)
            for s in range(args.fits):
                z, y = scores(n, 100, 1000 + s)
                est = make(s)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    try:
                        est.fit(z, y)
                    except TooFewRowsError:
                        refused += 1
                        continue
                if getattr(est, "temperature_", None) == 1.0 or (
                    name == "histogram" and not np.isfinite(est.bin_values_).any()
                ):
                    fell += 1
                    continue
                change[s] = 100 * (ece(est.predict_proba(z_test), y_test) - before)
            kept = args.fits - refused - fell
            se = change.std(ddof=1) / np.sqrt(args.fits)
            print(
                f"| {name} | {n} | {refused} | {fell} | {kept} | {change.mean():+.2f} +- "
                f"{se:.2f} | {change.max():+.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()

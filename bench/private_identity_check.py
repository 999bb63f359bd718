"""How often the private temperature fits warn that their release cannot tell T from 1.

Run with ``python -m bench.private_identity_check [--objective ece] [--splits 10]`` from the
repository root (about 2 min for ECE-T). For every shared network (and digits_shift), each
epsilon in {0.5, 1, 4} and ``--splits`` seeded halvings (the scoreboard's ``split_indices``),
``PrivateTemperatureScaling(objective, epsilon=eps)`` with its defaults is fitted on the
calibration half (seeded noise: a simulation, not a private release) and scored on the test
half. The table gives how many fits raised a ``NoiseDominatedWarning`` and the mean change of
ECE against the uncalibrated model (percentage points) among the warned and the quiet fits:
the warning should cover the fits that hurt, and stay off where the release clearly helps.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np

from privcal.experiments import scoreboard as sb
from privcal.metrics.calibration import ece
from privcal.metrics.statistics import softmax
from privcal.privacy import SeededNoise
from privcal.private import NoiseDominatedWarning, PrivateTemperatureScaling

EPSILONS = (0.5, 1.0, 4.0)


def _mean(x: np.ndarray) -> str:
    return f"{x.mean():+.3f}" if x.size else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objective", default="ece", choices=("acc", "nll", "ece"))
    parser.add_argument("--splits", type=int, default=10)
    args = parser.parse_args()
    print("| data set | eps | warned | dECE warned (pp) | dECE quiet (pp) |")
    print("|:--|--:|--:|--:|--:|")
    for name in sb.dataset_names(toplabel=False):
        data = sb.load_dataset(name)
        assert data.logits is not None
        z, y = data.logits, data.labels
        for eps in EPSILONS:
            warned, change = [], []
            parts = sb.split_indices(data.n, data.n // 2, args.splits, 0)
            for r, (cal, test) in enumerate(parts):
                noise = SeededNoise(1000 * r + int(10 * eps))
                # fallback="none": measure what the flagged fits would do (the default releases
                # T = 1 for them, a change of exactly 0)
                est = PrivateTemperatureScaling(
                    args.objective, epsilon=eps, noise=noise, fallback="none"
                )
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    est.fit(z[cal], y[cal])
                warned.append(any(w.category is NoiseDominatedWarning for w in caught))
                before = ece(softmax(z[test]), y[test])
                change.append(100.0 * (ece(est.predict_proba(z[test]), y[test]) - before))
            w, d = np.array(warned), np.array(change)
            print(f"| {name} | {eps:g} | {w.sum()}/{w.size} | {_mean(d[w])} | {_mean(d[~w])} |")


if __name__ == "__main__":
    main()

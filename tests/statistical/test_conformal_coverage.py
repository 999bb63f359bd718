"""Coverage validity of private and split conformal sets over 1000 random splits (seed 002).

For every data set x epsilon in {0.5, 1, 5, 10} x alpha in {0.05, 0.1} x score in {LAC, APS}
(non-randomised APS), n = 5000 calibration points, 1000 seeded random calibration/test splits:
mean coverage >= 1 - alpha - 3 SE (SE = std over splits / sqrt(1000)), and <= Theorem 3's
upper bound + 3 SE (p_max estimated as the largest bin frequency of the pool's true-label
scores). Data sets: wideresnet-16-4-cifar-10 and densenet-bc-100-cifar-100 (netcal-cifar),
cleanlab cifar10 (cifar10_probs.npy + cifar10_labels.npy), and digits_shift(0) **pooled at
severity 5** (15 corruptions x 899 = 13485 rows; random splits of the pool are exchangeable).
Vectorised across splits by :class:`privcal.conformal.simulate.SplitSimulator`.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from privcal.conformal import aps_scores, coverage_upper_bound, lac_scores
from privcal.conformal.simulate import SplitSimulator
from privcal.metrics.statistics import softmax
from privcal.privacy import SeededNoise

pytestmark = pytest.mark.slow

N_CAL = 5000
SPLITS = 1000
EPSILONS = (0.5, 1.0, 5.0, 10.0)
ALPHAS = (0.05, 0.1)
DATASETS = (
    "wideresnet-16-4-cifar-10",
    "densenet-bc-100-cifar-100",
    "cleanlab-cifar10",
    "digits_shift-sev5",
)
TABLE: list[tuple] = []


def _load(name: str, shared: Path) -> tuple[np.ndarray, np.ndarray]:
    from privcal.data import digits_shift, read_scores

    if name == "digits_shift-sev5":
        z, y, _ = digits_shift(0).pool(5)
        return np.asarray(z), np.asarray(y)
    path = (
        shared / "cleanlab-heldout" / "cifar10"
        if name == "cleanlab-cifar10"
        else (shared / "netcal-cifar" / f"{name}.npz")
    )
    sc = read_scores(path)
    assert sc.logits is not None
    return sc.logits, sc.labels


@pytest.mark.parametrize("dataset", DATASETS)
def test_coverage_validity(dataset: str, shared_data: Path) -> None:
    z, y = _load(dataset, shared_data)
    p = softmax(z)
    failures = []
    for score, f in (("lac", lac_scores), ("aps", aps_scores)):
        S = f(p)
        sim = SplitSimulator(S, y, n=N_CAL, splits=SPLITS, seed=0, sizes=False)
        s_true = S[np.arange(len(y)), y]
        for alpha in ALPHAS:
            base = sim.split(alpha)
            TABLE.append(
                (
                    dataset,
                    score,
                    alpha,
                    "split",
                    base.mean_coverage,
                    base.se_coverage,
                    1 - alpha + 1 / (N_CAL + 1),
                )
            )
            if base.mean_coverage < 1 - alpha - 3 * base.se_coverage:
                failures.append((score, alpha, "split", base.mean_coverage))
            for eps in EPSILONS:
                res = sim.private(alpha, eps, noise=SeededNoise(int(eps * 10) + int(alpha * 100)))
                cov, se = res.mean_coverage, res.se_coverage
                m = res.bins
                p_max = np.bincount(
                    np.minimum(np.ceil(s_true * m).astype(int) - 1, m - 1).clip(0), minlength=m
                ).max() / len(y)
                upper = (
                    coverage_upper_bound(N_CAL, alpha, eps, m, res.gamma, p_max)
                    if res.level < 1
                    else math.inf
                )
                TABLE.append((dataset, score, alpha, eps, cov, se, upper))
                if cov < 1 - alpha - 3 * se or cov > upper + 3 * se:
                    failures.append((score, alpha, eps, cov, se, upper))
    assert not failures, failures


def test_cost_of_privacy_wideresnet(shared_data: Path) -> None:
    """n = 5000, epsilon = 5, alpha = 0.1, LAC: private mean set size within 5% of split."""
    z, y = _load("wideresnet-16-4-cifar-10", shared_data)
    sim = SplitSimulator(lac_scores(softmax(z)), y, n=N_CAL, splits=SPLITS, seed=0)
    base = sim.split(0.1)
    priv = sim.private(0.1, 5.0, noise=SeededNoise(0))
    print(
        f"\ncost of privacy: split size {base.mean_size:.4f} cov {base.mean_coverage:.4f}; "
        f"private size {priv.mean_size:.4f} cov {priv.mean_coverage:.4f} (m={priv.bins}, "
        f"q~={priv.level:.4f}); ratio {priv.mean_size / base.mean_size:.4f}"
    )
    assert priv.mean_size <= 1.05 * base.mean_size
    assert priv.mean_coverage >= 0.9 - 3 * priv.se_coverage


def test_zz_print_table() -> None:
    """Print the coverage table collected above (run with -s to see it)."""
    for row in TABLE:
        d, s, a, e, cov, se, up = row
        print(f"{d:28s} {s:4s} alpha={a:<5g} eps={e!s:6s} cov={cov:.4f} se={se:.5f} bound={up:.4f}")

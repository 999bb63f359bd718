"""Coverage validity of private and split conformal sets over random splits (seed 002).

For every data set x epsilon in {0.5, 1, 5, 10} x alpha in {0.05, 0.1} x score in {LAC, APS}
(non-randomised APS), n = 5000 calibration points, seeded random calibration/test splits, for
``PrivateConformal``'s ``method="rank"`` in both forms its default takes (two stages,
``localize=0.25``, Theorem L, 500 splits; one stage, ``localize=None``, 1000 splits): mean
coverage >= 1 - alpha - 3 SE (SE = std over splits / sqrt(splits)); for one stage also <=
Theorem R's upper bound + 3 SE
(p_max estimated as the largest bin frequency of the pool's true-label scores under the logit
grid).

``test_informative_private_sets`` is the fast version of issue 13's check (the full table over
every shared data set is ``python -m bench.bench_conformal --only-informative``, made by the same
:func:`~privcal.conformal.simulate.compare_methods`): at epsilon = 1, n = 5000, alpha = 0.1 on 100
seeded splits the default's coverage is >= 0.9 - 3 SE and its mean set size at most 1.02x (LAC)
/ 1.05x (APS) split conformal's, and seed 002's Algorithms 3-5 give larger sets.

Data sets of the validity test: wideresnet-16-4-cifar-10 and densenet-bc-100-cifar-100 (netcal),
cleanlab cifar10 (cifar10_probs.npy + cifar10_labels.npy), and digits_shift(0) **pooled at
severity 5** (15 corruptions x 899 = 13485 rows; random splits of the pool are exchangeable).
Vectorised across splits by :class:`privcal.conformal.simulate.SplitSimulator`.
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path

import numpy as np
import pytest

from privcal.conformal import aps_scores, coverage_upper_bound, lac_scores, logit_edges
from privcal.conformal.simulate import SplitSimulator, compare_methods
from privcal.data.validation import RoundedProbabilityWarning
from privcal.metrics.statistics import bin_indices, softmax
from privcal.privacy import SeededNoise

pytestmark = [pytest.mark.statistical, pytest.mark.slow]

N_CAL = 5000
SPLITS = 1000
#: Splits of the two-stage (localised) fits, which run split by split (the estimator's own
#: function on each); their SE is sqrt(2) times that of 1000 splits, still below 2e-4 here.
LOCALIZED_SPLITS = 500
EPSILONS = (0.5, 1.0, 5.0, 10.0)
ALPHAS = (0.05, 0.1)
DATASETS = (
    "wideresnet-16-4-cifar-10",
    "densenet-bc-100-cifar-100",
    "cleanlab-cifar10",
    "digits_shift-sev5",
)


def _load(name: str, shared: Path) -> tuple[np.ndarray, np.ndarray]:
    from privcal.data import digits_shift, read_scores

    if name == "digits_shift-sev5":
        z, y, _ = digits_shift(0).pool(5)
        return np.asarray(z), np.asarray(y)
    path = (
        shared / "cleanlab-heldout" / name.removeprefix("cleanlab-")
        if name.startswith("cleanlab-")
        else (shared / "netcal-cifar" / f"{name}.npz")
    )
    # cleanlab's imdb probabilities leave [0, 1] by rounding: clipped, with a warning
    rounded = name == "cleanlab-imdb"
    with pytest.warns(RoundedProbabilityWarning) if rounded else contextlib.nullcontext():
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
        two_stage = SplitSimulator(S, y, n=N_CAL, splits=LOCALIZED_SPLITS, seed=0, sizes=False)
        s_true = S[np.arange(len(y)), y]
        for alpha in ALPHAS:
            base = sim.split(alpha)
            if base.mean_coverage < 1 - alpha - 3 * base.se_coverage:
                failures.append((score, alpha, "split", base.mean_coverage))
            for eps in EPSILONS:
                seed = int(eps * 10) + int(alpha * 100)
                # two stages (Theorem L; the default at epsilon 1-2 here): coverage >= 1 - alpha
                # holds given the window, whose grid changes per split, so only the lower bound
                loc = two_stage.private(alpha, eps, noise=SeededNoise(seed + 1000), localize=0.25)
                assert loc.n_bins < 3915  # the window's grid, not the full one
                if loc.mean_coverage < 1 - alpha - 3 * loc.se_coverage:
                    failures.append((score, alpha, f"{eps} localised", *_cov(loc)))
                res = sim.private(alpha, eps, noise=SeededNoise(seed), localize=None)
                cov, se = res.mean_coverage, res.se_coverage
                m = res.n_bins
                edges = logit_edges(4096)
                assert edges.size == m + 1
                p_max = np.bincount(bin_indices(s_true, m, edges), minlength=m).max() / len(y)
                upper = (
                    coverage_upper_bound(N_CAL, alpha, eps, m, res.gamma, p_max, method="rank")
                    if res.level <= 1
                    else math.inf
                )
                if cov < 1 - alpha - 3 * se or cov > upper + 3 * se:
                    failures.append((score, alpha, eps, cov, se, upper))
    assert not failures, failures


def _cov(res: object) -> tuple[float, float]:
    return res.mean_coverage, res.se_coverage  # type: ignore[attr-defined]


def test_cost_of_privacy_wideresnet(shared_data: Path) -> None:
    """n = 5000, epsilon = 5, alpha = 0.1, LAC: private mean set size within 5% of split."""
    z, y = _load("wideresnet-16-4-cifar-10", shared_data)
    sim = SplitSimulator(lac_scores(softmax(z)), y, n=N_CAL, splits=SPLITS, seed=0)
    base = sim.split(0.1)
    priv = sim.private(0.1, 5.0, noise=SeededNoise(0))
    print(
        f"\ncost of privacy: split size {base.mean_size:.4f} cov {base.mean_coverage:.4f}; "
        f"private size {priv.mean_size:.4f} cov {priv.mean_coverage:.4f} (m={priv.n_bins}, "
        f"q~={priv.level:.4f}); ratio {priv.mean_size / base.mean_size:.4f}"
    )
    assert priv.mean_size <= 1.05 * base.mean_size
    assert priv.mean_coverage >= 0.9 - 3 * priv.se_coverage


#: (data set, score) rows of the fast check: two CIFAR-10 networks, imdb and both CIFAR-100 LAC
#: rows (densenet met since the binomial guard of Theorem R, wideresnet since Theorem L's
#: localisation; 0.5 s each); bench/bench_conformal.py (d) runs every shared data set.
INFORMATIVE = (
    ("wideresnet-16-4-cifar-100", "lac"),
    ("densenet-bc-100-cifar-100", "lac"),
    ("wideresnet-16-4-cifar-10", "lac"),
    ("wideresnet-16-4-cifar-10", "aps"),
    ("cleanlab-cifar10", "lac"),
    ("cleanlab-cifar10", "aps"),
    ("cleanlab-imdb", "lac"),
    ("cleanlab-imdb", "aps"),
)
SIZE_TARGET = {"lac": 1.02, "aps": 1.05}


@pytest.mark.parametrize(("dataset", "score"), INFORMATIVE)
def test_informative_private_sets(dataset: str, score: str, shared_data: Path) -> None:
    """Issue 13 at epsilon = 1, n = 5000, alpha = 0.1, 100 splits: valid and nearly as small."""
    z, y = _load(dataset, shared_data)
    S = (lac_scores if score == "lac" else aps_scores)(softmax(z))
    res = compare_methods(S, y, n=N_CAL, splits=100, methods=("rank", "angelopoulos2022"))
    base, rank, paper = res["split"], res["rank"], res["angelopoulos2022"]
    print(
        f"\n{dataset} {score}: split {base.mean_size:.4f}; rank {rank.mean_size:.4f} "
        f"(x{rank.mean_size / base.mean_size:.4f}, cov {rank.mean_coverage:.4f}); "
        f"angelopoulos2022 {paper.mean_size:.4f} (cov {paper.mean_coverage:.4f})"
    )
    assert base.mean_size < S.shape[1]  # split conformal's sets are not already full
    assert rank.mean_coverage >= 0.9 - 3 * rank.se_coverage
    assert rank.mean_size <= SIZE_TARGET[score] * base.mean_size
    assert rank.mean_size < paper.mean_size


def test_hardest_row_meets_the_target_for_the_noise_as_drawn(shared_data: Path) -> None:
    """WRN-16-4 CIFAR-100 LAC, the row one stage missed (x1.024): the mean over ten noise seeds.

    Each seed's ratio is a mean over the same 100 splits; over seeds it varies with sd ~0.002,
    so the mean of ten has SE ~0.0007 and the measured 1.018 clears 1.02 by ~2.5 SE.
    """
    z, y = _load("wideresnet-16-4-cifar-100", shared_data)
    sim = SplitSimulator(lac_scores(softmax(z)), y, n=N_CAL, splits=100, seed=0)
    base = sim.split(0.1).mean_size
    runs = [sim.private(0.1, 1.0, noise=SeededNoise(s)) for s in range(1, 11)]
    ratios = np.array([r.mean_size / base for r in runs])
    print(
        f"\nwideresnet-16-4-cifar-100 LAC over 10 noise seeds: {ratios.mean():.4f} ± "
        f"{ratios.std(ddof=1) / math.sqrt(10):.4f}"
    )
    assert ratios.mean() <= SIZE_TARGET["lac"]
    assert all(r.mean_coverage >= 0.9 - 3 * r.se_coverage for r in runs)

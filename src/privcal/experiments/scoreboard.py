"""The scoreboard: every method with its defaults, beside doing nothing and its non-private twin.

``privcal bench scoreboard`` writes ``bench/SCOREBOARD.md`` from :func:`run` and
:func:`render`; the tests call the same per-row functions (:func:`calibration_rows`,
:func:`federated_rows`, :func:`conformal_rows`, :func:`toplabel_rows`, :func:`claim_rows`).

Protocol
--------
* **Data.** Every file of the shared real classifier outputs (``log p`` as logits; the 20
  newsgroups file's exact zeros are clipped by :func:`~privcal.data.read_scores`, which warns)
  and :func:`privcal.data.digits_shift` pooled at severity 5.  The ``cifar-toplabel`` CSVs hold
  the top-label confidence only: they are scored with top-label ECE and top-label histogram
  binning; every other method needs the full score vector and is listed as not applicable.
* **Splits.** ``R`` seeded random halvings into a calibration and a test part (conformal: ``n =
  min(5000, N/2)`` calibration points).  Each method is fitted on the calibration part through
  its public API **with its default arguments** (plus ``epsilon`` and, for seeded noise, a
  :class:`~privcal.privacy.SeededNoise`), and scored on the test part.  Private noise is drawn
  afresh on every split, so the spread over splits contains both the sampling and the noise.
* **Epsilon.** ``epsilon = inf`` is the non-private twin itself (the private estimator's
  statistic without its mechanism).
* **Worse than doing nothing.** For calibration, the per-split paired difference
  ``d_r = ECE(method) - ECE(uncalibrated)`` (classwise ECE for the federated methods, which
  target it) is averaged; a method is marked worse when ``mean(d) > 2 SE(d)``, ``SE = sd(d) /
  sqrt(R)``, i.e. worse than no calibration beyond the sampling (and noise) spread over splits.
  The same test on the error rate ``1 - accuracy`` marks a calibrator that loses accuracy (only
  those that can change the top-1 prediction can), whatever its ECE does.
  For conformal prediction "doing nothing" is the full label set: a method is marked when its
  coverage is below ``1 - alpha`` by more than 3 SE (invalid; :func:`coverage_se`, which adds
  the pool's own sampling error to the spread over splits) or its mean set size is within 1% of
  the number of classes (no information).

Every private fit here draws **seeded** noise: a simulation of the mechanism's law, not a private
release (:data:`SIMULATION_NOTE`).
"""

from __future__ import annotations

import math
import time
import warnings
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any

import numpy as np

from privcal.privacy import InsecureNoiseWarning, SeededNoise
from privcal.report import format_value, markdown_table, write_summary

__all__ = [
    "DIGITS",
    "EPSILONS",
    "FULL",
    "QUICK",
    "SIMULATION_NOTE",
    "Config",
    "Dataset",
    "Scoreboard",
    "calibration_metrics",
    "calibration_row",
    "calibration_rows",
    "claim_rows",
    "conformal_rows",
    "coverage_se",
    "dataset_names",
    "federated_rows",
    "load_dataset",
    "render",
    "run",
    "toplabel_rows",
    "worse_than_nothing",
    "write_json",
]

#: Printed on every scoreboard: the private numbers are simulations.
SIMULATION_NOTE = "simulation, seeded noise: not a private release"
#: The privacy budgets scored; ``inf`` is the non-private twin.
EPSILONS: tuple[float, ...] = (0.5, 1.0, 4.0, math.inf)
#: privcal's own shifted data set (all corruptions pooled at severity 5).
DIGITS = "digits_shift-sev5"
#: Miscoverage level of the conformal rows.
ALPHA = 0.1
#: Federated protocol of the issue (seed 003 Sec. 5): Dirichlet label skew over 100 clients.
FED_CLIENTS, FED_BETA, FED_ROUNDS, FED_DELTA = 100, 0.1, 12, 1e-5
#: The shared files, by folder.
_NETCAL = (
    "wideresnet-16-4-cifar-10",
    "lenet-5-cifar-10",
    "wideresnet-16-4-cifar-100",
    "densenet-bc-100-cifar-100",
    "lenet-5-cifar-100",
)
_CLEANLAB = ("cifar10", "mnist", "imdb", "20news")
_TOPLABEL = (
    "densenet40_c10",
    "resnet110_c10",
    "densenet40_c100",
    "resnet110_c100",
    "resnet50_birds",
)


# ----------------------------------------------------------------------------------- data
@dataclass(frozen=True)
class Dataset:
    """Labelled classifier outputs: full ``logits`` or, for top-label files, ``confidence`` and
    ``correct`` (``1[predicted == label]``)."""

    name: str
    labels: np.ndarray
    logits: np.ndarray | None = None
    confidence: np.ndarray | None = None
    correct: np.ndarray | None = None

    @property
    def n(self) -> int:
        return int(self.labels.shape[0])

    @property
    def n_classes(self) -> int | None:
        return None if self.logits is None else int(self.logits.shape[1])


def dataset_names(*, toplabel: bool = True) -> tuple[str, ...]:
    """Every data set of the scoreboard: the shared files, then :data:`DIGITS`."""
    names = (*_NETCAL, *_CLEANLAB, *(_TOPLABEL if toplabel else ()), DIGITS)
    return names


def _path(name: str) -> Any:
    from privcal.data import shared_data_dir

    root = shared_data_dir()
    if root is None:
        raise FileNotFoundError(
            "The scoreboard needs the shared real classifier outputs (shared/data beside the "
            "repository, or the folder named by PRIVCAL_SHARED_DATA); none was found."
        )
    if name in _NETCAL:
        return root / "netcal-cifar" / f"{name}.npz"
    if name in _CLEANLAB:
        return root / "cleanlab-heldout" / f"{name}_probs.npy"
    if name in _TOPLABEL:
        return root / "cifar-toplabel" / f"probs_{name}_logits.csv"
    raise ValueError(
        f"The 'name' parameter of load_dataset must be one of {dataset_names()}. Got "
        f"{name!r} instead."
    )


@cache
def load_dataset(name: str, seed: int = 0) -> Dataset:
    """Load (once per process) one scoreboard data set with privcal's readers."""
    if name == DIGITS:
        from privcal.data import digits_shift

        z, y, _ = digits_shift(seed).pool(5)
        return Dataset(name, np.asarray(y), logits=np.asarray(z, dtype=np.float64))
    from privcal.data import read_scores

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 20news: exact zeros clipped (documented above)
        sc = read_scores(_path(name))
    if sc.logits is None:
        assert sc.confidence is not None and sc.predicted is not None
        correct = (sc.predicted == sc.labels).astype(np.float64)
        return Dataset(name, sc.labels, confidence=sc.confidence, correct=correct)
    return Dataset(name, sc.labels, logits=sc.logits)


def split_indices(
    n: int, n_cal: int, splits: int, seed: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """``splits`` seeded random (calibration, test) partitions of ``range(n)``."""
    rng = np.random.default_rng([seed, n, n_cal])
    out: list[tuple[np.ndarray, np.ndarray]] = []
    for _ in range(splits):
        perm = rng.permutation(n)
        out.append((perm[:n_cal], perm[n_cal:]))
    return out


# ------------------------------------------------------------------------------- configuration
@dataclass(frozen=True)
class Config:
    """What one scoreboard run scores.

    ``splits`` calibration splits, ``conformal_splits`` conformal splits, ``federated`` the data
    sets of the federated rows, ``claims`` which seeds' claims are checked (``torch`` ones run
    only with ``torch=True``).
    """

    datasets: tuple[str, ...]
    epsilons: tuple[float, ...] = EPSILONS
    splits: int = 5
    conformal_splits: int = 20
    federated: tuple[str, ...] = ("wideresnet-16-4-cifar-10", "wideresnet-16-4-cifar-100")
    fed_draws: int = 3
    claim_trials: int = 40
    torch: bool = False
    seed: int = 0
    name: str = "full"


#: ``privcal bench scoreboard``: every data set and budget.
FULL = Config(datasets=dataset_names(), torch=True)
#: ``--quick`` (CI): four data sets (no 100-class one), two budgets, fewer splits.
QUICK = Config(
    datasets=("wideresnet-16-4-cifar-10", "20news", "resnet110_c10", DIGITS),
    epsilons=(1.0, math.inf),
    splits=3,
    conformal_splits=10,
    federated=("wideresnet-16-4-cifar-10",),
    fed_draws=2,
    claim_trials=10,
    name="quick",
)


# ---------------------------------------------------------------------------------- helpers
def calibration_metrics(probs: np.ndarray, labels: np.ndarray) -> tuple[float, float, float]:
    """``(ECE, classwise ECE, accuracy)`` of ``probs`` on ``labels``: one split's values of a
    scoreboard row (:func:`calibration_row`)."""
    from privcal.metrics import accuracy, classwise_ece, ece

    return ece(probs, labels), classwise_ece(probs, labels), accuracy(probs, labels)


def _seed(*keys: int) -> int:
    """An integer seed derived from ``keys`` (independent streams per split and method)."""
    return int(np.random.SeedSequence(list(keys)).generate_state(1)[0])


def _quiet(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, int]:
    """``fn(*args, **kwargs)`` and the number of warnings it raised (reported, not shown).

    :class:`~privcal.privacy.InsecureNoiseWarning` is not counted: every private fit here draws
    seeded noise on purpose, and the scoreboard says so once (:data:`SIMULATION_NOTE`).
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.simplefilter("ignore", InsecureNoiseWarning)
        out = fn(*args, **kwargs)
    return out, len(caught)


def _fit_proba(est: Any, zc: np.ndarray, yc: np.ndarray, zt: np.ndarray) -> np.ndarray:
    return np.asarray(est.fit(zc, yc).predict_proba(zt))


def _fit_sets(est: Any, zc: np.ndarray, yc: np.ndarray, zt: np.ndarray) -> np.ndarray:
    return np.asarray(est.fit(zc, yc).predict_set(zt))


def worse_than_nothing(method: np.ndarray, baseline: np.ndarray) -> tuple[float, float, bool]:
    """Paired test of "worse than doing nothing" over splits.

    Returns ``(mean(d), SE(d), mean(d) > 2 SE(d))`` for ``d = method - baseline`` (per-split
    errors; lower is better), ``SE = sd(d, ddof=1) / sqrt(R)``.  With one split there is no
    spread and nothing is marked.
    """
    d = np.asarray(method, dtype=np.float64) - np.asarray(baseline, dtype=np.float64)
    if d.size < 2:
        return float(d.mean()), math.nan, False
    se = float(d.std(ddof=1) / math.sqrt(d.size))
    mean = float(d.mean())
    return mean, se, bool(mean > 2.0 * se and mean > 0.0)


def calibration_row(
    task: str,
    dataset: str,
    method: str,
    epsilon: float,
    twin: str,
    values: np.ndarray,
    baseline: np.ndarray,
    warnings_count: int = 0,
    key: int = 0,
) -> dict[str, Any]:
    """A calibration row from per-split ``values[r] = (ece, cwece, accuracy)``; ``key`` picks
    the error that the worse-than-nothing test compares (0: ECE, 1: classwise ECE).

    The same paired test runs on the error rate ``1 - accuracy``: a calibrator that changes
    the top-1 prediction (vector, matrix, classwise binning) is also worse than doing nothing
    when it loses accuracy beyond the spread over splits, whatever its ECE does. ``why`` names
    what failed.
    """
    mean = values.mean(axis=0)
    diff, se, worse_error = worse_than_nothing(values[:, key], baseline[:, key])
    acc_diff, _, worse_accuracy = worse_than_nothing(1.0 - values[:, 2], 1.0 - baseline[:, 2])
    why = [("ECE", "classwise ECE")[key]] if worse_error else []
    if worse_accuracy:
        why.append(f"accuracy {-100 * acc_diff:+.2f} pp")
    return {
        "task": task,
        "dataset": dataset,
        "method": method,
        "epsilon": epsilon,
        "twin": twin,
        "ece": float(mean[0]),
        "cwece": float(mean[1]),
        "accuracy": float(mean[2]),
        "splits": int(values.shape[0]),
        "diff": diff,
        "diff_se": se,
        "worse": bool(why),
        "why": ", ".join(why),
        "warnings": warnings_count,
    }


def _add_ratios(rows: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """``ratio = row[key] / twin[key]`` for private rows whose twin row exists."""
    by = {(r["dataset"], r["method"]): r for r in rows if r["epsilon"] == math.inf}
    for r in rows:
        twin = by.get((r["dataset"], r["twin"]))
        ok = twin is not None and twin[key] > 0 and r["epsilon"] != math.inf
        r["ratio"] = r[key] / twin[key] if ok and twin is not None else math.nan
    return rows


# ------------------------------------------------------------------------------- calibration
def _private_specs() -> dict[str, tuple[Callable[[float, int], Any], str]]:
    """Private calibrator label -> (factory(epsilon, seed), label of its non-private twin)."""
    from privcal.private import PrivateHistogramBinning, PrivateTemperatureScaling

    def temp(obj: str) -> Callable[[float, int], Any]:
        return lambda eps, s: PrivateTemperatureScaling(obj, epsilon=eps, noise=SeededNoise(s))

    return {
        "private acc-t": (temp("acc"), "acc-t"),
        "private nll-t": (temp("nll"), "nll-t"),
        "private ece-t": (temp("ece"), "ece-t"),
        "private histogram": (
            lambda eps, s: PrivateHistogramBinning(epsilon=eps, noise=SeededNoise(s)),
            "histogram",
        ),
    }


#: Methods not run above :data:`SLOW_CLASSES` classes, and why.
SLOW_METHODS: dict[str, str] = {
    "matrix": "MatrixScaling takes > 5 min per fit on 100 classes (2 cores)",
    "fedmatrix": "FedMatrix takes > 5 min per run on 100 classes (2 cores)",
}
SLOW_CLASSES = 20


def skipped_methods(n_classes: int) -> dict[str, str]:
    """Methods the scoreboard does not run on ``n_classes`` classes, with the reason."""
    out: dict[str, str] = {}
    if n_classes > 2:
        out["platt"] = "binary classifiers only"
    if n_classes > SLOW_CLASSES:
        out.update(SLOW_METHODS)
    return out


def _nonprivate_specs(n_classes: int) -> dict[str, Callable[[], Any]]:
    """Every applicable non-private calibrator of :data:`privcal.calibrators.METHODS` except
    :func:`skipped_methods`; the alias ``temperature`` is scored once, as ``nll-t`` (the twin
    name the private rows use)."""
    from privcal.calibrators import METHODS

    skip = skipped_methods(n_classes)
    return {n: f for n, f in METHODS.items() if n != "temperature" and n not in skip}


def calibration_rows(
    data: Dataset, epsilons: Sequence[float] = EPSILONS, splits: int = 5, seed: int = 0
) -> list[dict[str, Any]]:
    """Uncalibrated, every non-private calibrator and every private one at each ``epsilon``.

    Each method is fitted with its defaults on the calibration half of ``splits`` random
    halvings and scored (ECE, classwise ECE, accuracy) on the test half.  Rows carry the mean
    over splits, the paired difference to the uncalibrated ECE with its SE and the
    worse-than-nothing mark (:func:`worse_than_nothing`), and for private rows the ratio of
    their ECE to their non-private twin's.
    """
    assert data.logits is not None
    z, y = data.logits, data.labels
    parts = split_indices(data.n, data.n // 2, splits, seed)
    nonprivate = _nonprivate_specs(z.shape[1])
    private = _private_specs()
    finite = [e for e in epsilons if e != math.inf]
    values: dict[tuple[str, float], list[tuple[float, float, float]]] = {}
    warned: dict[tuple[str, float], int] = {}

    for r, (cal, test) in enumerate(parts):
        zc, yc, zt, yt = z[cal], y[cal], z[test], y[test]
        values.setdefault(("uncalibrated", math.inf), []).append(
            calibration_metrics(_softmax(zt), yt)
        )
        fits = {(name, math.inf): factory() for name, factory in nonprivate.items()}
        for name, (make, _) in private.items():
            for i, eps in enumerate(finite):
                fits[(name, eps)] = make(eps, _seed(seed, r, i, zlib.crc32(name.encode())))
        for key, est in fits.items():
            probs, n_warn = _quiet(_fit_proba, est, zc, yc, zt)
            values.setdefault(key, []).append(calibration_metrics(probs, yt))
            warned[key] = warned.get(key, 0) + n_warn
    base = np.array(values[("uncalibrated", math.inf)])
    twins = {name: twin for name, (_, twin) in private.items()}
    rows = [
        calibration_row(
            "calibration",
            data.name,
            name,
            eps,
            twins.get(name, name),
            np.array(v),
            base,
            warned.get((name, eps), 0),
        )
        for (name, eps), v in values.items()
    ]
    return _add_ratios(rows, "ece")


def _softmax(z: np.ndarray) -> np.ndarray:
    from privcal.metrics.statistics import softmax

    return softmax(z)


# -------------------------------------------------------------------------------- federated
#: Federated method -> label of its central non-private twin (``privcal.calibrators.METHODS``).
FED_METHODS: dict[str, str] = {
    "fedtemp": "nll-t",
    "fedvector": "vector",
    "fedmatrix": "matrix",
    "fedbin": "histogram-classwise",
    "fedbbq-all": "bbq",
}


def federated_rows(
    data: Dataset,
    epsilons: Sequence[float] = EPSILONS,
    draws: int = 3,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Federated calibrators (``simulate`` with their defaults) beside their central twins.

    One calibration/test halving per draw; the calibration half is spread over
    :data:`FED_CLIENTS` clients by Dirichlet(:data:`FED_BETA`) label skew, each method runs
    :data:`FED_ROUNDS` rounds (user-level ``(epsilon, FED_DELTA)``-DP for finite epsilon) and is
    scored on the test half; the central twin is fitted on the union of the clients' data.  The
    worse-than-nothing test compares classwise ECE, the objective of seed 003.
    """
    from privcal.calibrators import METHODS
    from privcal.federated import dirichlet_partition, simulate

    assert data.logits is not None
    z, y = data.logits, data.labels
    values: dict[tuple[str, float], list[tuple[float, float, float]]] = {}
    warned: dict[tuple[str, float], int] = {}
    for r, (cal, test) in enumerate(split_indices(data.n, data.n // 2, draws, seed + 1)):
        zc, yc, zt, yt = z[cal], y[cal], z[test], y[test]
        clients = dirichlet_partition(yc, n_clients=FED_CLIENTS, beta=FED_BETA, seed=seed + r)
        values.setdefault(("uncalibrated", math.inf), []).append(
            calibration_metrics(_softmax(zt), yt)
        )
        for method, twin in FED_METHODS.items():
            if method in skipped_methods(z.shape[1]):
                continue
            if len(values.get((twin, math.inf), [])) <= r:
                probs, n_warn = _quiet(_fit_proba, METHODS[twin](), zc, yc, zt)
                values.setdefault((twin, math.inf), []).append(calibration_metrics(probs, yt))
                warned[(twin, math.inf)] = warned.get((twin, math.inf), 0) + n_warn
            for eps in epsilons:
                noise = SeededNoise(_seed(seed, r, zlib.crc32(method.encode())))
                dp = {"epsilon": eps, "delta": FED_DELTA} if eps != math.inf else {}
                fitted, n_warn = _quiet(
                    simulate, method, zc, yc, clients, FED_ROUNDS, seed=seed + r, noise=noise, **dp
                )
                values.setdefault((method, eps), []).append(
                    calibration_metrics(fitted[0].predict_proba(zt), yt)
                )
                warned[(method, eps)] = warned.get((method, eps), 0) + n_warn
    base = np.array(values[("uncalibrated", math.inf)])
    rows = []
    for (name, eps), v in values.items():
        twin = FED_METHODS.get(name, name)
        rows.append(
            calibration_row(
                "federated",
                data.name,
                name,
                eps,
                twin,
                np.array(v),
                base,
                warned.get((name, eps), 0),
                key=1,
            )
        )
    # the federated method without DP is compared with its central twin too
    central = {row["method"]: row for row in rows if row["method"] not in FED_METHODS}
    for row in rows:
        ref = central.get(row["twin"]) if row["method"] in FED_METHODS else None
        ok = ref is not None and ref["cwece"] > 0
        row["ratio"] = row["cwece"] / ref["cwece"] if ok and ref is not None else math.nan
    return rows


# -------------------------------------------------------------------------------- conformal
def coverage_se(coverages: np.ndarray, alpha: float, n_pool: int) -> float:
    """Standard error of the mean coverage over splits of one pool of ``n_pool`` examples.

    Splits of the same pool share its data, so their spread misses the pool's own sampling
    error: the pool-conditional coverage differs from the population's by about
    ``sqrt(alpha (1 - alpha) / n_pool)``.  Both parts are added in quadrature,
    ``SE^2 = sd^2 / R + alpha (1 - alpha) / n_pool`` (``sd`` over the ``R`` splits).
    """
    c = np.asarray(coverages, dtype=np.float64)
    spread = float(c.var(ddof=1) / c.size) if c.size > 1 else 0.0
    return math.sqrt(spread + alpha * (1 - alpha) / n_pool)


def conformal_rows(
    data: Dataset,
    epsilons: Sequence[float] = EPSILONS,
    splits: int = 20,
    alpha: float = ALPHA,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Split conformal (LAC, APS) and :class:`~privcal.conformal.PrivateConformal` at each epsilon.

    ``n = min(5000, N / 2)`` calibration points per split.  Per row: mean test coverage and its
    SE (:func:`coverage_se`), mean set size, the ratio of the private set size to split
    conformal's, and the mark (coverage below ``1 - alpha`` by more than 3 SE, or sets within 1%
    of the full label set, which is what "no conformal prediction" gives).
    """
    from privcal.conformal import PrivateConformal, SplitConformal

    assert data.logits is not None
    z, y = data.logits, data.labels
    n_classes = z.shape[1]
    n_cal = min(5000, data.n // 2)
    parts = split_indices(data.n, n_cal, splits, seed + 2)
    rows = []
    for score in ("lac", "aps"):
        results: dict[tuple[str, float], list[tuple[float, float]]] = {}
        for r, (cal, test) in enumerate(parts):
            zc, yc, zt, yt = z[cal], y[cal], z[test], y[test]
            fits: dict[tuple[str, float], Any] = {("split", math.inf): SplitConformal(score, alpha)}
            for eps in epsilons:
                if eps != math.inf:
                    noise = SeededNoise(_seed(seed, r, int(eps * 1000), zlib.crc32(score.encode())))
                    fits[("private", eps)] = PrivateConformal(
                        score, alpha, epsilon=eps, noise=noise
                    )
            for key, est in fits.items():
                sets, _ = _quiet(_fit_sets, est, zc, yc, zt)
                cov = float(sets[np.arange(yt.shape[0]), yt].mean())
                results.setdefault(key, []).append((cov, float(sets.sum(axis=1).mean())))
        split_size = float(np.mean([s for _, s in results[("split", math.inf)]]))
        for (kind, eps), v in results.items():
            arr = np.array(v)
            cov, size = float(arr[:, 0].mean()), float(arr[:, 1].mean())
            se = coverage_se(arr[:, 0], alpha, data.n)
            invalid = cov < 1 - alpha - 3 * se
            full = size >= 0.99 * n_classes
            rows.append(
                {
                    "task": "conformal",
                    "dataset": data.name,
                    "method": f"{kind} {score}",
                    "epsilon": eps,
                    "twin": f"split {score}",
                    "coverage": cov,
                    "coverage_se": se,
                    "size": size,
                    "n_classes": n_classes,
                    "n_cal": n_cal,
                    "splits": len(v),
                    "ratio": size / split_size if kind == "private" else math.nan,
                    "worse": bool(invalid or full),
                    "why": "invalid coverage" if invalid else ("full sets" if full else ""),
                }
            )
    return rows


# -------------------------------------------------------------------------------- top label
def toplabel_rows(data: Dataset, splits: int = 5, seed: int = 0) -> list[dict[str, Any]]:
    """Top-label files: top-label ECE of the model and of top-label histogram binning.

    The binning is :func:`~privcal.metrics.statistics.calibration_bins` of the calibration
    half's confidences (the statistic :class:`~privcal.calibrators.HistogramBinning` bins with),
    each test confidence replaced by its bin's accuracy (empty bins keep the input).  Accuracy is
    unchanged by construction; the columns that need class vectors are not applicable.
    """
    from privcal.metrics.statistics import bin_indices, calibration_bins

    assert data.confidence is not None and data.correct is not None
    conf, corr = data.confidence, data.correct
    vals: dict[str, list[tuple[float, float, float]]] = {"uncalibrated": [], "histogram": []}
    for cal, test in split_indices(data.n, data.n // 2, splits, seed):
        acc = float(corr[test].mean())
        stats = calibration_bins(conf[cal], corr[cal])
        with np.errstate(invalid="ignore", divide="ignore"):
            table = stats.accuracy()
        new = table[bin_indices(conf[test], stats.counts.size)]
        new = np.where(np.isnan(new), conf[test], new)
        for key, c in (("uncalibrated", conf[test]), ("histogram", new)):
            vals[key].append((calibration_bins(c, corr[test]).ece(), math.nan, acc))
    base = np.array(vals["uncalibrated"])
    rows = [
        calibration_row("top-label", data.name, k, math.inf, k, np.array(v), base)
        for k, v in vals.items()
    ]
    for r in rows:
        r["ratio"] = math.nan
    return rows


# ----------------------------------------------------------------------------------- claims
@dataclass
class Claim:
    """One seed paper's headline claim and whether it reproduces here."""

    seed: str
    claim: str
    measured: str
    verdict: str  # "reproduced", "not reproduced", "not run"


def _claim_000(trials: int, seed: int) -> Claim:
    from privcal.experiments.luo2020 import GridPoint
    from privcal.experiments.luo2020 import run as luo_run

    d = load_dataset("wideresnet-16-4-cifar-10", seed)
    assert d.logits is not None
    grid = [GridPoint("sources", 100, 20, 1.0)]
    tab = luo_run(
        {d.name: (d.logits, d.labels)}, trials=trials, grid=grid, seed=seed, progress=False
    ).table()
    acc, nll, ece_t = (tab[m][0] for m in ("Acc-T", "NLL-T", "ECE-T"))
    ok = acc < min(nll, ece_t, tab["Histogram binning"][0])
    return Claim(
        "000 Luo et al. 2020",
        "Acc-T has the lowest ECE of the DP recalibration methods (100 sources x 20, eps=1)",
        f"wideresnet CIFAR-10, {trials} trials: Acc-T {acc:.4f}, NLL-T {nll:.4f}, ECE-T "
        f"{ece_t:.4f}, hist {tab['Histogram binning'][0]:.4f} (issue target Acc-T <= 0.027)",
        "reproduced" if ok else "not reproduced",
    )


def _claim_002(rows: list[dict[str, Any]]) -> Claim:
    at1 = [r for r in rows if r["task"] == "conformal" and r["epsilon"] == 1.0]
    if not at1:
        return Claim("002 Angelopoulos et al. 2022", _C002, "no conformal rows at eps=1", "not run")
    valid = all(not r["why"] == "invalid coverage" for r in at1)
    worst = max(at1, key=lambda r: r["ratio"])
    ok = valid and all(r["ratio"] <= 1.05 for r in at1)
    return Claim(
        "002 Angelopoulos et al. 2022",
        _C002,
        f"{len(at1)} (data set, score) pairs; coverage valid: {valid}; largest size ratio "
        f"{worst['ratio']:.2f} ({worst['dataset']}, {worst['method']})",
        "reproduced" if ok else "not reproduced",
    )


_C002 = "private conformal sets keep coverage >= 1-alpha and are barely larger than split (eps=1)"


def _claim_003(rows: list[dict[str, Any]]) -> Claim:
    fed = {(r["dataset"], r["method"], r["epsilon"]): r for r in rows if r["task"] == "federated"}
    pairs = [
        (k[0], k[2], fed[k]["cwece"], fed[(k[0], "fedtemp", k[2])]["cwece"])
        for k in fed
        if k[1] == "fedbbq-all" and (k[0], "fedtemp", k[2]) in fed
    ]
    if not pairs:
        return Claim("003 Maddock et al. 2025", _C003, "no federated rows", "not run")
    wins = sum(bbq < temp for _, _, bbq, temp in pairs)
    return Claim(
        "003 Maddock et al. 2025",
        _C003,
        f"FedBBQ (weighted) below FedTemp in {wins}/{len(pairs)} (data set, epsilon) settings; "
        "FedTemp here is privcal's federated Newton, cwECE 0.98-1.01x central TS at eps=1 "
        "(seed 003's parameter averaging, `fedtemp-averaging`, is compared in "
        "`privcal bench maddock2025`)",
        "reproduced" if wins > len(pairs) / 2 else "not reproduced",
    )


_C003 = "weighted FedBBQ has lower cwECE than FedTemp (Dirichlet 0.1, 100 clients)"


def _claim_001(seed: int) -> Claim:
    from privcal.experiments.bu2023 import run_tasks, summarise

    s = summarise(run_tasks(seeds=(seed,), tasks=("digits", "digits_shift"), epsilons=(8.0,)))
    frac = s["dp_higher_ece_fraction"]
    return Claim(
        "001 Bu et al. 2023",
        "DP-SGD is worse calibrated than SGD; DP-TS repairs it",
        f"DP-SGD ECE > SGD ECE in {frac:.0%} of tasks; DP-TS cuts DP-SGD's ECE "
        f"{s['dpts_ece_reduction_mean']:.2f}x (paper: >= 2x); non-private TS on the same "
        f"held-out split, the most any temperature fitted there can do: "
        f"{s['npts_ece_reduction_mean']:.2f}x",
        "reproduced" if frac == 1.0 and s["dpts_ece_reduction_mean"] >= 2.0 else "not reproduced",
    )


def _claim_004(seed: int) -> Claim:
    from privcal.experiments.knolle2021 import run_rows

    rows, _ = run_rows(seeds=(seed,), epsilon=3.0)
    tasks = sorted({r["task"] for r in rows})
    ece = {(r["task"], r["method"]): r["ece"] for r in rows}
    wins = [ece[(t, "DP-SGLD")] < ece[(t, "DP-SGD")] for t in tasks]
    measured = ", ".join(
        f"{t}: {ece[(t, 'DP-SGD')]:.3f} -> {ece[(t, 'DP-SGLD')]:.3f}" for t in tasks
    )
    return Claim(
        "004 Knolle et al. 2021",
        "DP-SGLD is better calibrated than DP-SGD at equal epsilon (3)",
        f"ECE DP-SGD -> DP-SGLD, seed {seed}: {measured}",
        "reproduced" if all(wins) else "not reproduced",
    )


def claim_rows(config: Config, rows: list[dict[str, Any]]) -> list[Claim]:
    """The headline claim of each seed paper, checked with its protocol function (000, 001,
    004) or on the scoreboard's own rows (002, 003).  Torch claims run with ``config.torch``."""
    out = [_claim_000(config.claim_trials, config.seed)]
    torch_claims = (_claim_001, _claim_004)
    if config.torch:
        out.append(torch_claims[0](config.seed))
    else:
        out.append(
            Claim(
                "001 Bu et al. 2023",
                "DP-SGD is worse calibrated than SGD; DP-TS repairs it",
                "needs torch training: not run with --quick or --no-torch",
                "not run",
            )
        )
    out += [_claim_002(rows), _claim_003(rows)]
    if config.torch:
        out.append(torch_claims[1](config.seed))
    else:
        out.append(
            Claim(
                "004 Knolle et al. 2021",
                "DP-SGLD is better calibrated than DP-SGD at equal epsilon (3)",
                "needs torch training: not run with --quick or --no-torch",
                "not run",
            )
        )
    return out


# -------------------------------------------------------------------------------------- run
@dataclass
class Scoreboard:
    """Output of :func:`run`: the rows of every section, the claims, and the run's settings."""

    config: Config
    rows: list[dict[str, Any]] = field(default_factory=list)
    claims: list[Claim] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    def worse(self) -> list[dict[str, Any]]:
        """Rows marked worse than doing nothing."""
        return [r for r in self.rows if r.get("worse")]


def _tasks(config: Config) -> list[tuple[str, str]]:
    """The independent units of work: ``("data", name)`` per data set (calibration and
    conformal, or top-label) and ``("federated", name)``."""
    return [("data", n) for n in config.datasets] + [("federated", n) for n in config.federated]


def steps(config: Config) -> int:
    """Number of progress steps :func:`run` reports (one per task, plus the claims)."""
    return len(_tasks(config)) + 1


def _run_task(kind: str, name: str, config: Config) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Rows and skipped methods (with reasons) of one task of :func:`_tasks`."""
    data = load_dataset(name, config.seed)
    if kind == "federated":
        return federated_rows(data, config.epsilons, config.fed_draws, config.seed), {}
    if data.logits is None:
        why = (
            "top-label CSV (confidence only): scaling, private, federated and conformal methods "
            "need the full score vector"
        )
        return toplabel_rows(data, config.splits, config.seed), {name: why}
    rows = calibration_rows(data, config.epsilons, config.splits, config.seed)
    rows += conformal_rows(data, config.epsilons, config.conformal_splits, seed=config.seed)
    skipped = {f"{name} / {m}": why for m, why in skipped_methods(data.n_classes or 0).items()}
    return rows, skipped


def run(
    config: Config = QUICK, on_step: Callable[[str], None] | None = None, jobs: int = 1
) -> Scoreboard:
    """Score every method of ``config`` on every data set; see the module docstring.

    ``on_step(description)`` is called after each step (:func:`steps` of them), for a progress
    bar.  ``jobs > 1`` runs the data sets in that many worker processes; the results do not
    depend on it (every split and noise draw is seeded by data set, split and method).
    """
    from privcal._params import check_int

    jobs = check_int(jobs, "jobs", "scoreboard.run", low=1)
    tick = on_step or (lambda _: None)
    start = time.perf_counter()
    board = Scoreboard(config)
    tasks = _tasks(config)
    results: dict[int, tuple[list[dict[str, Any]], dict[str, str]]] = {}
    if jobs == 1:
        for i, (kind, name) in enumerate(tasks):
            results[i] = _run_task(kind, name, config)
            tick(f"{name}: {kind}")
    else:
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = {pool.submit(_run_task, k, n, config): i for i, (k, n) in enumerate(tasks)}
            for fut in as_completed(futures):
                i = futures[fut]
                results[i] = fut.result()
                tick(f"{tasks[i][1]}: {tasks[i][0]}")
    for i in range(len(tasks)):
        board.rows += results[i][0]
        board.skipped.update(results[i][1])
    board.claims = claim_rows(config, board.rows)
    tick("claims")
    board.seconds = time.perf_counter() - start
    return board


# ------------------------------------------------------------------------------------ render
def _mark(r: dict[str, Any]) -> str:
    """``**WORSE** (what failed; N warnings)``, the warnings alone, or nothing."""
    notes = [r["why"]] if r.get("worse") and r.get("why") else []
    if r.get("warnings"):
        notes.append(f"{r['warnings']} warnings")
    text = f"({'; '.join(notes)})" if notes else ""
    return f"**WORSE** {text}".strip() if r.get("worse") else text


def _calibration_table(rows: list[dict[str, Any]], key: str = "ECE") -> list[str]:
    """A calibration table; ``key`` names the error that 'vs none' and the mark compare."""
    head = [
        "data set",
        "method",
        "eps",
        "ECE %",
        "cwECE %",
        "acc %",
        f"vs none, {key} (pp) ± SE",
        "ratio to twin",
        "twin",
        "mark",
    ]
    body = [
        [
            r["dataset"],
            r["method"],
            format_value(r["epsilon"], "epsilon"),
            format_value(r["ece"], "percent"),
            format_value(r["cwece"], "percent"),
            format_value(r["accuracy"], "percent"),
            f"{100 * r['diff']:+.2f} ± {format_value(r['diff_se'], 'percent')}",
            format_value(r["ratio"], "ratio"),
            r["twin"] if r["method"] != r["twin"] else "",
            _mark(r),
        ]
        for r in rows
    ]
    return markdown_table(head, body)


def _conformal_table(rows: list[dict[str, Any]]) -> list[str]:
    head = [
        "data set",
        "method",
        "eps",
        "coverage ± SE",
        "mean size",
        "classes",
        "size ratio to split",
        "mark",
    ]
    body = [
        [
            r["dataset"],
            r["method"],
            format_value(r["epsilon"], "epsilon"),
            f"{r['coverage']:.4f} ± {r['coverage_se']:.4f}",
            f"{r['size']:.3f}",
            r["n_classes"],
            format_value(r["ratio"], "ratio"),
            _mark(r),
        ]
        for r in rows
    ]
    return markdown_table(head, body)


def render(board: Scoreboard, command: str = "privcal bench scoreboard") -> str:
    """The scoreboard as Markdown (what ``bench/SCOREBOARD.md`` holds)."""
    c = board.config
    rows = board.rows
    lines = [
        "# privcal scoreboard",
        "",
        f"Generated by `{command}` ({c.name} configuration, seed {c.seed}) in "
        f"{board.seconds:.0f} s. Every private number is a **{SIMULATION_NOTE}**.",
        "",
        "Each method is called through its public API with its **default arguments** (plus "
        "epsilon and a seeded noise source). Calibration: "
        f"{c.splits} random calibration/test halvings per data set; conformal: "
        f"{c.conformal_splits} splits with n = min(5000, N/2), alpha = {ALPHA}; federated: "
        f"{c.fed_draws} draw(s), Dirichlet({FED_BETA}) over {FED_CLIENTS} clients, "
        f"{FED_ROUNDS} rounds, delta = {FED_DELTA:g}. eps = inf is the non-private twin.",
        "",
        "**Worse than doing nothing** (`**WORSE**`): for calibration, the per-split paired "
        "difference to the uncalibrated model (ECE; classwise ECE for federated methods; and "
        "the error rate 1 - accuracy) has mean > 2 SE over splits (not tested with a single "
        "split or draw); the mark says which failed; for conformal, "
        "coverage below 1 - alpha by more than 3 SE (spread over splits plus the pool's own "
        "sampling error), or sets within 1% of the full label set. 'ratio to twin' is "
        "private / non-private (ECE, federated cwECE, conformal set size). Errors are in "
        "percent; 'vs none' in percentage points.",
        "",
        "## Seed papers' headline claims",
        "",
        *markdown_table(
            ["seed", "claim", "measured here", "verdict"],
            [[k.seed, k.claim, k.measured, k.verdict] for k in board.claims],
        ),
        "",
    ]
    worse = board.worse()
    lines += ["## Marked worse than doing nothing", ""]
    if worse:
        lines += [
            f"- {r['task']}: {r['dataset']} / {r['method']} / eps "
            + format_value(r["epsilon"], "epsilon")
            + (f" ({r['why']})" if r.get("why") else "")
            for r in worse
        ]
    else:
        lines.append("None.")
    lines.append("")
    sections = (
        (
            "Calibration (ECE, classwise ECE, accuracy on the test halves)",
            "calibration",
            _calibration_table,
        ),
        (
            f"Federated calibration (Dirichlet({FED_BETA}) over {FED_CLIENTS} clients, "
            f"{FED_ROUNDS} rounds; 'vs none' compares classwise ECE)",
            "federated",
            lambda sel: _calibration_table(sel, "cwECE"),
        ),
        ("Top-label files", "top-label", _calibration_table),
        ("Conformal prediction (coverage, mean set size)", "conformal", _conformal_table),
    )
    for title, task, table in sections:
        sel = [r for r in rows if r["task"] == task]
        if sel:
            lines += [f"## {title}", "", *table(sel), ""]
    if board.skipped:
        lines += ["## Not applicable", ""]
        lines += [f"- {k}: {v}" for k, v in board.skipped.items()]
        lines.append("")
    return "\n".join(lines)


def write_json(board: Scoreboard, path: Any, command: str = "privcal bench scoreboard") -> Any:
    """Write the scoreboard's rows, claims and settings as JSON (what ``privcal report`` reads;
    errors as fractions, ``epsilon`` ``"inf"`` for the non-private twin)."""
    from dataclasses import asdict

    c = board.config
    note = (
        f"{c.name} configuration, seed {c.seed}, {board.seconds:.0f} s; every private number is "
        f"a {SIMULATION_NOTE}. 'vs none' is the paired difference to the uncalibrated model "
        "± its SE over splits (classwise ECE for federated methods); a row is marked when it "
        "is above 2 SE."
    )
    data = {
        "config": asdict(c),
        "seconds": board.seconds,
        "note": note,
        "rows": board.rows,
        "claims": [asdict(k) for k in board.claims],
        "skipped": board.skipped,
    }
    return write_summary(path, "scoreboard", data)


def quick_config(**changes: Any) -> Config:
    """:data:`QUICK` with ``changes`` (a smaller run for tests)."""
    return replace(QUICK, **changes)

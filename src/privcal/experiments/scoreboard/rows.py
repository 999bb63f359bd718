"""The scoreboard's metric rows: calibration, federated calibration, conformal prediction and
top-label calibration, one tidy dict per (data set, method, budget)."""

from __future__ import annotations

import math
import warnings
import zlib
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from privcal.experiments._progress import derived_seed
from privcal.experiments.scoreboard.config import (
    ALPHA,
    EPSILONS,
    FED_BETA,
    FED_CLIENTS,
    FED_DELTA,
    FED_ROUNDS,
    Dataset,
    split_indices,
)
from privcal.metrics.statistics import softmax
from privcal.privacy import InsecureNoiseWarning, SeededNoise


# ---------------------------------------------------------------------------------- helpers
def calibration_metrics(probs: np.ndarray, labels: np.ndarray) -> tuple[float, float, float]:
    """``(ECE, classwise ECE, accuracy)`` of ``probs`` on ``labels``: one split's values of a
    scoreboard row (:func:`calibration_row`)."""
    from privcal.metrics import accuracy, classwise_ece, ece

    return ece(probs, labels), classwise_ece(probs, labels), accuracy(probs, labels)


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
    row: dict[str, Any] = dict(
        task=task, dataset=dataset, method=method, epsilon=epsilon, twin=twin
    )
    row |= dict(ece=float(mean[0]), cwece=float(mean[1]), accuracy=float(mean[2]))
    row |= dict(splits=int(values.shape[0]), diff=diff, diff_se=se, worse=bool(why))
    return row | dict(why=", ".join(why), warnings=warnings_count)


def _add_ratios(rows: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """``ratio = row[key] / twin[key]`` for rows with a twin (a private or federated method)
    whose row exists; ``nan`` for the others."""
    by = {(r["dataset"], r["method"]): r for r in rows if r["epsilon"] == math.inf}
    for r in rows:
        twin = by.get((r["dataset"], r["twin"]))
        ok = twin is not None and twin[key] > 0 and r["method"] != r["twin"]
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
    values: defaultdict[tuple[str, float], list[tuple[float, float, float]]] = defaultdict(list)
    warned: Counter[tuple[str, float]] = Counter()
    for r, (cal, test) in enumerate(parts):
        zc, yc, zt, yt = z[cal], y[cal], z[test], y[test]
        values[("uncalibrated", math.inf)].append(calibration_metrics(softmax(zt), yt))
        fits = {(name, math.inf): factory() for name, factory in nonprivate.items()}
        for name, (make, _) in private.items():
            for i, eps in enumerate(finite):
                fits[(name, eps)] = make(eps, derived_seed(seed, r, i, zlib.crc32(name.encode())))
        for key, est in fits.items():
            probs, n_warn = _quiet(_fit_proba, est, zc, yc, zt)
            values[key].append(calibration_metrics(probs, yt))
            warned[key] += n_warn
    base = np.array(values[("uncalibrated", math.inf)])
    twins = {name: twin for name, (_, twin) in private.items()}
    rows = []
    for (name, eps), v in values.items():
        head = ("calibration", data.name, name, eps, twins.get(name, name))
        rows.append(calibration_row(*head, np.array(v), base, warned[(name, eps)]))
    return _add_ratios(rows, "ece")


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
    values: defaultdict[tuple[str, float], list[tuple[float, float, float]]] = defaultdict(list)
    warned: Counter[tuple[str, float]] = Counter()
    for r, (cal, test) in enumerate(split_indices(data.n, data.n // 2, draws, seed + 1)):
        zc, yc, zt, yt = z[cal], y[cal], z[test], y[test]
        clients = dirichlet_partition(yc, n_clients=FED_CLIENTS, beta=FED_BETA, seed=seed + r)
        values[("uncalibrated", math.inf)].append(calibration_metrics(softmax(zt), yt))
        for method, twin in FED_METHODS.items():
            if method in skipped_methods(z.shape[1]):
                continue
            if len(values.get((twin, math.inf), [])) <= r:
                probs, n_warn = _quiet(_fit_proba, METHODS[twin](), zc, yc, zt)
                values[(twin, math.inf)].append(calibration_metrics(probs, yt))
                warned[(twin, math.inf)] += n_warn
            for eps in epsilons:
                noise = SeededNoise(derived_seed(seed, r, zlib.crc32(method.encode())))
                dp = {"epsilon": eps, "delta": FED_DELTA} if eps != math.inf else {}
                fitted, n_warn = _quiet(
                    simulate, method, zc, yc, clients, FED_ROUNDS, seed=seed + r, noise=noise, **dp
                )
                values[(method, eps)].append(calibration_metrics(fitted[0].predict_proba(zt), yt))
                warned[(method, eps)] += n_warn
    base = np.array(values[("uncalibrated", math.inf)])
    rows = []
    for (name, eps), v in values.items():
        head = ("federated", data.name, name, eps, FED_METHODS.get(name, name))
        rows.append(calibration_row(*head, np.array(v), base, warned[(name, eps)], key=1))
    return _add_ratios(rows, "cwece")  # without DP too: against the central twin


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
        stream = zlib.crc32(score.encode())
        results: dict[tuple[str, float], list[tuple[float, float]]] = {}
        for r, (cal, test) in enumerate(parts):
            zc, yc, zt, yt = z[cal], y[cal], z[test], y[test]
            fits: dict[tuple[str, float], Any] = {("split", math.inf): SplitConformal(score, alpha)}
            for eps in epsilons:
                if eps != math.inf:
                    noise = SeededNoise(derived_seed(seed, r, int(eps * 1000), stream))
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
            row = dict(task="conformal", dataset=data.name, method=f"{kind} {score}", epsilon=eps)
            row |= dict(twin=f"split {score}", coverage=cov, coverage_se=se, size=size)
            row |= dict(n_classes=n_classes, n_cal=n_cal, splits=len(v))
            row["ratio"] = size / split_size if kind == "private" else math.nan
            why = "invalid coverage" if invalid else ("full sets" if full else "")
            rows.append(row | dict(worse=bool(invalid or full), why=why))
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
    return _add_ratios(rows, "ece")  # no twins: nan

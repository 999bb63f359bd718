"""Seed 000's batched simulation: method specifications, the setting grid, the batched searches
and one setting's private fits for all trials at once (see :mod:`privcal.experiments.luo2020`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from privcal.calibrators.binning import rescale_top_label
from privcal.calibrators.search import _bisect, _golden, convex_argmin, monotone_root
from privcal.metrics.statistics import (
    accuracy_gap_terms,
    bin_indices,
    nll_terms,
    softmax,
    top_confidence,
    top_correct,
)
from privcal.privacy import NoiseSource, SeededNoise
from privcal.private.binning import noisy_bin_values
from privcal.private.plan import AUTO_SPLIT, SearchPlan, search_plan
from privcal.private.queries import curve_from_release, curve_release, nll_curve_sensitivity

__all__ = [
    "MAX_ELEMENTS",
    "METHODS",
    "ONE_SOURCE_EVALUATIONS",
    "ONE_SOURCE_RANGE",
    "GridPoint",
    "MethodSpec",
    "bisect_sign_batch",
    "default_grid",
    "golden_section_batch",
    "grouped_ece",
    "noise_pooled_ece",
    "simulate",
]


# ----------------------------------------------------------------------------- specifications
@dataclass(frozen=True)
class MethodSpec:
    """One recalibration method of the protocol.

    ``kind``: ``"none"`` (no recalibration), ``"one_source"`` (non-private NLL temperature
    scaling on source 0 only), ``"hist"`` (private histogram binning; ``counts="split"`` releases
    (correct, incorrect) with sensitivity 1 as :class:`~privcal.private.PrivateHistogramBinning`
    does, ``counts="paper"`` seed 000's (correct, total) with sensitivity 2) or ``"temperature"``
    (private temperature scaling with ``objective``, ``search`` and ``t_range`` as in
    :class:`~privcal.private.PrivateTemperatureScaling`).
    """

    label: str
    kind: str
    objective: str = "acc"
    search: str = "auto"
    t_range: Any = "auto"
    counts: str = "split"


#: The methods of seed 000's Table 1, in its order (privcal's defaults), and seed 000's own
#: Acc-T search (golden section over [0.5, 3], Alg. 1) beside its default, the curve search.
METHODS: tuple[MethodSpec, ...] = (
    MethodSpec("No recalibration", "none"),
    MethodSpec("One source", "one_source"),
    MethodSpec("Histogram binning", "hist"),
    MethodSpec("ECE-T", "temperature", "ece"),
    MethodSpec("NLL-T", "temperature", "nll"),
    MethodSpec("Acc-T", "temperature", "acc"),
    MethodSpec("Acc-T (golden section, Luo et al. 2020)", "temperature", "acc", "golden-section"),
)

#: Range of the "one source" baseline: the non-private TemperatureScaling default.
ONE_SOURCE_RANGE = (0.05, 20.0)
#: Golden-section evaluations of the batched one-source NLL fit: the bracket shrinks to
#: ``0.618^29 ~ 9e-7`` of the log range (log 400), i.e. the NLL optimum to ~3e-6 relative.
ONE_SOURCE_EVALUATIONS = 30
#: Trials are processed in chunks so that one chunk's test logits hold at most this many floats
#: (memory stays ~1 GB on CIFAR-100-sized inputs; digits_shift needs a single chunk).
MAX_ELEMENTS = 10_000_000


@dataclass(frozen=True)
class GridPoint:
    """One setting: ``panel`` in {"sources", "samples", "epsilon"}."""

    panel: str
    n_sources: int
    n_samples: int
    epsilon: float


def default_grid(n_total: int) -> list[GridPoint]:
    """App. E.1's sweeps, scaled to a data set of ``n_total`` examples.

    With ``n_total >= 5000`` the CIFAR grid of App. E.1: sources 10..250 (step 10) with 10
    samples; samples 5..50 (step 5) with 50 sources; epsilon 0.2..2.0 with 50 sources x 30
    samples. Smaller sets (digits_shift: 899 per corruption) keep at most ~56% of the examples
    for the sources: sources 5..50 (step 5) x 10 samples; samples 2..20 (step 2) x 25 sources;
    epsilon 0.2..2.0 with 25 sources x 12 samples.
    """
    eps = [round(0.2 * k, 1) for k in range(1, 11)]
    if n_total >= 5000:
        a = [GridPoint("sources", d, 10, 1.0) for d in range(10, 251, 10)]
        b = [GridPoint("samples", 50, n, 1.0) for n in range(5, 51, 5)]
        c = [GridPoint("epsilon", 50, 30, e) for e in eps]
    else:
        scale = n_total / 899.0
        d_max = max(1, int(50 * scale))
        a = [GridPoint("sources", d, 10, 1.0) for d in range(5, d_max + 1, 5)] or [
            GridPoint("sources", max(1, d_max), 10, 1.0)
        ]
        d_b = max(1, int(25 * scale))
        b = [GridPoint("samples", d_b, n, 1.0) for n in range(2, 21, 2)]
        c = [GridPoint("epsilon", d_b, 12, e) for e in eps]
    return a + b + c


# ----------------------------------------------------------------------------- batch searches
def golden_section_batch(
    f: Callable[[np.ndarray], np.ndarray], lo: Any, hi: Any, evaluations: int
) -> np.ndarray:
    """:func:`~privcal.calibrators.search.golden_section` (geometric) for many brackets at once.

    ``f`` maps an array of temperatures (one per bracket) to objective values. Same arithmetic
    as the scalar search, so each entry equals the scalar result given the same ``f`` values.
    """
    if evaluations < 2:
        raise ValueError(f"golden_section_batch needs at least 2 evaluations; got {evaluations}.")
    return _golden(f, lo, hi, evaluations, geometric=True)[0]


def bisect_sign_batch(
    g: Callable[[np.ndarray], np.ndarray], lo: Any, hi: Any, evaluations: int
) -> np.ndarray:
    """:func:`~privcal.calibrators.search.bisect_sign` (geometric) for many brackets at once."""
    if evaluations < 1:
        raise ValueError(f"bisect_sign_batch needs at least 1 evaluation; got {evaluations}.")
    return _bisect(g, lo, hi, evaluations, geometric=True)[0]


def grouped_ece(conf: np.ndarray, correct: np.ndarray, n_bins: int = 15) -> np.ndarray:
    """Top-label ECE of each row of ``(R, m)`` confidences / correctness (equal-width bins).

    Row ``r`` gives ``calibration_bins(conf[r], correct[r], n_bins).ece()``: same bin rule
    (:func:`~privcal.metrics.statistics.bin_indices`), sums by one grouped ``bincount``.
    """
    r, m = conf.shape
    idx = (bin_indices(conf, n_bins) + n_bins * np.arange(r)[:, None]).ravel()
    s_conf = np.bincount(idx, weights=conf.ravel(), minlength=r * n_bins)
    s_corr = np.bincount(idx, weights=correct.ravel(), minlength=r * n_bins)
    return np.abs(s_corr - s_conf).reshape(r, n_bins).sum(axis=1) / m


# ----------------------------------------------------------------------------- one setting
@dataclass
class _Setting:
    """The arrays of one setting for all trials."""

    z_val: np.ndarray  # (trials, d, n, C)
    correct_val: np.ndarray  # (trials, d, n)
    y_val: np.ndarray  # (trials, d, n)
    z_test: np.ndarray  # (trials, m, C)
    correct_test: np.ndarray  # (trials, m)
    y_test: np.ndarray  # (trials, m)


def _split(
    z: np.ndarray, y: np.ndarray, trials: int, d: int, n: int, rng: np.random.Generator
) -> _Setting:
    total = z.shape[0]
    if d * n >= total:
        raise ValueError(
            f"{d} sources x {n} samples need more than the {total} examples available (at least "
            "one must be left for the test split)."
        )
    perm = np.argsort(rng.random((trials, total)), axis=1)
    val, test = perm[:, : d * n], perm[:, d * n :]
    correct = top_correct(z, y)
    c = z.shape[1]
    return _Setting(
        z_val=z[val].reshape(trials, d, n, c),
        correct_val=correct[val].reshape(trials, d, n),
        y_val=y[val].reshape(trials, d, n),
        z_test=z[test],
        correct_test=correct[test],
        y_test=y[test],
    )


def _scaled(z: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Logits of each trial divided by its temperature, flattened to rows ``(R, C)``."""
    shape = (t.size,) + (1,) * (z.ndim - 1)
    return (z / t.reshape(shape)).reshape(-1, z.shape[-1])


def simulate(
    spec: MethodSpec,
    s: _Setting,
    epsilon: float,
    noise: NoiseSource,
    *,
    iterations: int = 5,
    n_bins: int = 15,
    nll_bound: float = 10.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Run one method on all trials of one setting: ``(test ECE, temperature)`` per trial.

    ``temperature`` is NaN for histogram binning. Noise is drawn in query order: for each query,
    one ``(trials, d)`` (or ``(trials, d, k)`` for vector queries) Laplace array.
    """
    trials, d, n, _ = s.z_val.shape
    if spec.kind == "none":
        t = np.ones(trials)
    elif spec.kind == "one_source":
        z0, y0 = s.z_val[:, 0], s.y_val[:, 0]

        def nll(t: np.ndarray) -> np.ndarray:
            return nll_terms(_scaled(z0, t), y0.ravel(), 1.0).reshape(trials, n).sum(axis=1)

        t = golden_section_batch(nll, *ONE_SOURCE_RANGE, evaluations=ONE_SOURCE_EVALUATIONS)
    elif spec.kind == "hist":
        conf = top_confidence(s.z_val.reshape(-1, s.z_val.shape[-1]), 1.0)
        corr = s.correct_val.ravel()
        group = np.repeat(np.arange(trials * d), n) * n_bins + bin_indices(conf, n_bins)
        size = trials * d * n_bins
        n_corr = np.bincount(group, weights=corr, minlength=size).reshape(trials, d, n_bins)
        n_all = np.bincount(group, minlength=size).reshape(trials, d, n_bins)
        if spec.counts == "paper":  # seed 000: (correct, total), L1 sensitivity 2
            counts = np.concatenate([n_corr, n_all], axis=2)
            noisy = (counts + noise.laplace(2.0 / epsilon, size=counts.shape)).sum(axis=1)
            c_pos = np.maximum(noisy[:, :n_bins], 0.0)
            tot = np.maximum(noisy[:, n_bins:], 0.0)
            with np.errstate(invalid="ignore", divide="ignore"):
                values = np.where(tot > 0, np.minimum(c_pos / np.where(tot > 0, tot, 1), 1), np.nan)
        else:
            counts = np.concatenate([n_corr, n_all - n_corr], axis=2)
            noisy = (counts + noise.laplace(1.0 / epsilon, size=counts.shape)).sum(axis=1)
            values = noisy_bin_values(noisy[:, :n_bins], noisy[:, n_bins:])  # (trials, M)
        p = softmax(s.z_test.reshape(-1, s.z_test.shape[-1]))
        top = p.max(axis=1)
        b = bin_indices(top, n_bins).reshape(trials, -1)
        v = np.take_along_axis(values, b, axis=1).ravel()
        q = rescale_top_label(p, np.where(np.isnan(v), top, v))
        m = s.y_test.shape[1]
        conf_t = q.max(axis=1).reshape(trials, m)
        corr_t = (np.argmax(q, axis=1) == s.y_test.ravel()).astype(np.float64).reshape(trials, m)
        return grouped_ece(conf_t, corr_t, n_bins), np.full(trials, np.nan)
    else:
        plan = search_plan(spec.objective, epsilon, iterations, spec.t_range, spec.search)
        t = _private_temperature(spec.objective, plan, s, noise, n_bins, nll_bound)
    conf = top_confidence(_scaled(s.z_test, t), 1.0).reshape(trials, -1)
    return grouped_ece(conf, s.correct_test, n_bins), t


def _private_temperature(
    objective: str,
    plan: SearchPlan,
    s: _Setting,
    noise: NoiseSource,
    n_bins: int,
    nll_bound: float,
) -> np.ndarray:
    trials, d, n, _ = s.z_val.shape
    budgets = iter(plan.epsilons)
    corr = s.correct_val.reshape(trials, d, n)

    def gap(t: np.ndarray) -> np.ndarray:
        eps = next(budgets)
        conf = top_confidence(_scaled(s.z_val, t), 1.0).reshape(trials, d, n)
        exact = (corr - conf).sum(axis=2)
        return np.asarray((exact + noise.laplace(1.0 / eps, size=(trials, d))).sum(axis=1))

    def nll(t: np.ndarray) -> np.ndarray:
        eps = next(budgets)
        terms = nll_terms(_scaled(s.z_val, t), s.y_val.ravel(), 1.0)
        exact = np.minimum(terms, nll_bound).reshape(trials, d, n).sum(axis=2)
        return np.asarray((exact + noise.laplace(nll_bound / eps, size=(trials, d))).sum(axis=1))

    def ece(t: np.ndarray) -> np.ndarray:
        eps = next(budgets)
        conf = top_confidence(_scaled(s.z_val, t), 1.0)
        group = np.repeat(np.arange(trials * d), n) * n_bins + bin_indices(conf, n_bins)
        gaps = np.bincount(group, weights=corr.ravel() - conf, minlength=trials * d * n_bins)
        gaps = gaps.reshape(trials, d, n_bins) + noise.laplace(1.0 / eps, size=(trials, d, n_bins))
        return np.asarray(np.abs(gaps.sum(axis=1)).sum(axis=1))

    if plan.search == "curve" and objective == "nll":
        return _private_nll_curve(plan, s, noise, nll_bound)
    if plan.search == "curve":
        return _private_curve(plan, s, noise)
    if plan.locate:
        lo, hi = plan.ranges(gap(np.full(trials, AUTO_SPLIT)))
    else:
        assert plan.t_range is not None
        lo, hi = np.full(trials, plan.t_range[0]), np.full(trials, plan.t_range[1])
    if plan.search == "bisect":
        return bisect_sign_batch(gap, lo, hi, plan.evaluations)
    # "golden" and seed 000's "golden-section": the same search
    f = {"acc": lambda t: np.abs(gap(t)), "nll": nll, "ece": ece}[objective]
    return golden_section_batch(f, lo, hi, plan.evaluations)


def _private_curve(plan: SearchPlan, s: _Setting, noise: NoiseSource) -> np.ndarray:
    """Acc-T's curve search for all trials: one ``accuracy_gap_curve`` release per source.

    The exact per-source curves come from the shared ``accuracy_gap_terms`` at every grid
    temperature; the released vector (:func:`~privcal.private.queries.curve_release`) gets one
    ``(trials, d, k)`` Laplace array of scale ``2 / epsilon``, as the DataSource draws it.
    """
    trials, d, n, c = s.z_val.shape
    grid = np.asarray(plan.grid)
    terms = accuracy_gap_terms(s.z_val.reshape(-1, c), s.y_val.ravel(), grid)
    exact = terms.reshape(grid.size, trials, d, n).sum(axis=3).transpose(1, 2, 0)
    released = curve_release(exact, plan.anchor)
    released = released + noise.laplace(2.0 / plan.epsilons[0], size=released.shape)
    return np.asarray(monotone_root(curve_from_release(released, plan.anchor).sum(axis=1), grid))


def _private_nll_curve(
    plan: SearchPlan, s: _Setting, noise: NoiseSource, nll_bound: float
) -> np.ndarray:
    """NLL-T's curve search for all trials: one ``clipped_nll_increments`` release per source.

    The exact per-source clipped NLL sums come from the shared ``nll_terms`` at every grid
    temperature (clipped at ``nll_bound``, as ``clipped_nll_sum`` does); their increments get one
    ``(trials, d, k - 1)`` Laplace array of the query's scale, as the DataSource draws it, and
    :func:`~privcal.calibrators.search.convex_argmin` reads the minimiser of the sum.
    """
    trials, d, n, c = s.z_val.shape
    grid = np.asarray(plan.grid)
    terms = np.minimum(nll_terms(s.z_val.reshape(-1, c), s.y_val.ravel(), grid), nll_bound)
    exact = np.diff(terms.reshape(grid.size, trials, d, n).sum(axis=3).transpose(1, 2, 0), axis=2)
    scale = nll_curve_sensitivity(nll_bound, c) / plan.epsilons[0]
    released = exact + noise.laplace(scale, size=exact.shape)
    return np.asarray(convex_argmin(released.sum(axis=1), grid))


def noise_pooled_ece(
    z: Any,
    y: Any,
    methods: Sequence[MethodSpec],
    *,
    n_sources: int = 100,
    n_samples: int = 20,
    epsilon: float = 1.0,
    splits: int = 40,
    draws: int = 5,
    seed: int = 0,
    iterations: int = 5,
) -> dict[str, np.ndarray]:
    """Test ECE of each method on the same splits under several independent noise draws.

    ``splits`` random splits (seeded by ``seed``) put ``n_sources x n_samples`` examples into the
    sources and the rest into the test split; each method then runs ``draws`` times on those
    splits, draw ``k`` with ``SeededNoise(default_rng([seed, k, method index]))``. Pooling the
    draws measures a method for the noise as drawn, not for one lucky set of noise seeds.

    Returns
    -------
    dict
        Method label -> ``(draws, splits)`` array of test ECE (15 bins).
    """
    z = np.asarray(z, dtype=np.float64)
    s = _split(z, np.asarray(y), splits, n_sources, n_samples, np.random.default_rng(seed))
    out = {}
    for mi, spec in enumerate(methods):
        noises = [SeededNoise(np.random.default_rng([seed, k, mi])) for k in range(draws)]
        eces = [simulate(spec, s, epsilon, noise, iterations=iterations)[0] for noise in noises]
        out[spec.label] = np.stack(eces)
    return out

"""Seed 000's protocol (Luo et al. 2020): private recalibration across many small private sources.

For each shifted data set and each setting (number of sources ``d``, samples per source ``n``,
``epsilon``), ``trials`` random splits put ``d x n`` examples into ``d`` private sources and the
rest into a test split; each method recalibrates from the sources and is scored by the 15-bin
top-label ECE on the test split (App. E.1). Three sweeps, as the three panels of Fig. 1-3:
sources (``n`` and ``epsilon`` fixed), samples per source (``d``, ``epsilon`` fixed) and
``epsilon`` (``d``, ``n`` fixed). The Table 1 analogue is the median and mean, over every
(data set, setting), of the per-setting mean ECE of each method.

Vectorisation
-------------
Nothing loops over trials or sources. For one setting the validation logits of all trials are a
``(trials, d, n, C)`` array; a search evaluation takes one temperature per trial, evaluates the
shared statistics (:func:`~privcal.metrics.statistics.top_confidence`,
:func:`~privcal.metrics.statistics.nll_terms`, :func:`~privcal.metrics.statistics.bin_indices`)
on the logits divided by each trial's temperature (``conf_T(z) = conf_1(z / T)``), sums per
source with a reshape or a grouped ``bincount``, adds ``(trials, d[, M])`` Laplace draws from
:class:`~privcal.privacy.SeededNoise` and sums over sources. :func:`golden_section_batch` and
:func:`bisect_sign_batch` run the searches of :mod:`privcal.calibrators.search` for all trials at
once (same arithmetic; a test checks they return the per-trial results, and another that the
batch protocol reproduces :class:`~privcal.private.PrivateTemperatureScaling` fitted on
:class:`~privcal.private.DataSource` objects given the same noise draws). Acc-T's default curve
search needs no loop at all: the exact curves of every trial and source on the public grid are
one ``accuracy_gap_terms`` call, and :func:`~privcal.calibrators.search.monotone_root` reads all
roots at once; NLL-T's default curve search is one ``nll_terms`` call and
:func:`~privcal.calibrators.search.convex_argmin`.
"""

from __future__ import annotations

import csv
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from privcal._params import check_int, check_real
from privcal.calibrators.binning import rescale_top_label
from privcal.calibrators.search import GOLDEN, convex_argmin, monotone_root
from privcal.metrics.statistics import (
    accuracy_gap_terms,
    bin_indices,
    nll_terms,
    softmax,
    top_confidence,
    top_correct,
)
from privcal.plots import subplots
from privcal.privacy import NoiseSource, SeededNoise
from privcal.private.binning import noisy_bin_values
from privcal.private.queries import curve_from_release, curve_release, nll_curve_sensitivity
from privcal.private.temperature import AUTO_SPLIT, SearchPlan, search_plan

__all__ = [
    "METHODS",
    "GridPoint",
    "Luo2020Result",
    "MethodSpec",
    "bisect_sign_batch",
    "default_grid",
    "golden_section_batch",
    "grouped_ece",
    "load_datasets",
    "noise_pooled_ece",
    "run",
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
    a = np.log(np.asarray(lo, dtype=np.float64))
    b = np.log(np.asarray(hi, dtype=np.float64))
    a, b = np.broadcast_arrays(a, b)
    a, b = a.copy(), b.copy()
    x1 = b - GOLDEN * (b - a)
    x2 = a + GOLDEN * (b - a)
    f1 = np.asarray(f(np.exp(x1)), dtype=np.float64)
    f2 = np.asarray(f(np.exp(x2)), dtype=np.float64)
    for _ in range(evaluations - 2):
        left = f1 <= f2
        b = np.where(left, x2, b)
        a = np.where(left, a, x1)
        nx1 = np.where(left, b - GOLDEN * (b - a), x2)
        nx2 = np.where(left, x1, a + GOLDEN * (b - a))
        fnew = np.asarray(f(np.exp(np.where(left, nx1, nx2))), dtype=np.float64)
        f1, f2 = np.where(left, fnew, f2), np.where(left, f1, fnew)
        x1, x2 = nx1, nx2
    left = f1 <= f2
    b = np.where(left, x2, b)
    a = np.where(left, a, x1)
    return np.exp(0.5 * (a + b))


def bisect_sign_batch(
    g: Callable[[np.ndarray], np.ndarray], lo: Any, hi: Any, evaluations: int
) -> np.ndarray:
    """:func:`~privcal.calibrators.search.bisect_sign` (geometric) for many brackets at once."""
    if evaluations < 1:
        raise ValueError(f"bisect_sign_batch needs at least 1 evaluation; got {evaluations}.")
    a = np.log(np.asarray(lo, dtype=np.float64))
    b = np.log(np.asarray(hi, dtype=np.float64))
    a, b = (x.copy() for x in np.broadcast_arrays(a, b))
    for _ in range(evaluations):
        m = 0.5 * (a + b)
        neg = np.asarray(g(np.exp(m)), dtype=np.float64) < 0.0
        a = np.where(neg, m, a)
        b = np.where(neg, b, m)
    return np.exp(0.5 * (a + b))


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
    return {
        spec.label: np.stack(
            [
                simulate(
                    spec,
                    s,
                    epsilon,
                    SeededNoise(np.random.default_rng([seed, k, mi])),
                    iterations=iterations,
                )[0]
                for k in range(draws)
            ]
        )
        for mi, spec in enumerate(methods)
    }


# ----------------------------------------------------------------------------- the protocol
@dataclass
class Luo2020Result:
    """Output of :func:`run`.

    Attributes
    ----------
    rows : list of dict
        Tidy rows, one per (dataset, setting, method): ``dataset, panel, n_sources, n_samples,
        epsilon, method, ece_mean, ece_median, ece_std, temperature_median, trials``.
    methods : list of str
    seconds : float
        Wall time of the computation (figures and files excluded).
    files : list of Path
    """

    rows: list[dict[str, Any]]
    methods: list[str]
    seconds: float
    files: list[Path] = field(default_factory=list)

    def table(self) -> dict[str, tuple[float, float]]:
        """Table 1 analogue: method -> (median, mean) over settings of the per-setting mean ECE."""
        out = {}
        for m in self.methods:
            v = np.array([r["ece_mean"] for r in self.rows if r["method"] == m])
            out[m] = (float(np.median(v)), float(np.mean(v)))
        return out

    def table_markdown(self, title: str = "") -> str:
        """The Table 1 analogue as a Markdown table (best DP median in bold)."""
        tab = self.table()
        lines = [
            f"| Recalibration method | ECE median / mean{(' (' + title + ')') if title else ''} |"
        ]
        lines.append("|---|---|")
        best = min(tab.values(), key=lambda x: x[0])[0]
        for m, (med, mean) in tab.items():
            cell = f"{med:.4f} / {mean:.4f}"
            lines.append(f"| {m} | {'**' + cell + '**' if med == best else cell} |")
        return "\n".join(lines)

    def figures(self) -> dict[str, Any]:
        """Three-panel figure (sources, samples, epsilon) per dataset, as in seed 000 Fig. 1-3."""

        figs = {}
        for ds in dict.fromkeys(r["dataset"] for r in self.rows):
            fig, axes = subplots(1, 3, figsize=(13, 3.6))
            for ax, (panel, key, xlabel) in zip(
                axes,
                (
                    ("sources", "n_sources", "number of sources"),
                    ("samples", "n_samples", "samples per source"),
                    ("epsilon", "epsilon", "epsilon"),
                ),
                strict=True,
            ):
                rows = [r for r in self.rows if r["dataset"] == ds and r["panel"] == panel]
                if not rows:
                    ax.set_visible(False)
                    continue
                others = iter(
                    [
                        "tab:blue",
                        "tab:orange",
                        "tab:green",
                        "tab:purple",
                        "tab:brown",
                        "tab:gray",
                        "tab:olive",
                        "tab:cyan",
                        "tab:pink",
                    ]
                    * 4
                )
                for m in self.methods:
                    pts = sorted((r[key], r["ece_mean"]) for r in rows if r["method"] == m)
                    style: dict[str, Any] = (
                        {"color": "tab:red", "lw": 2.2}
                        if m.startswith("Acc-T")
                        else {"color": next(others)}
                    )
                    ax.plot(*zip(*pts, strict=True), marker="o", ms=3, label=m, **style)
                fixed = rows[0]
                what = {
                    "sources": f"n={fixed['n_samples']}, eps={fixed['epsilon']:g}",
                    "samples": f"d={fixed['n_sources']}, eps={fixed['epsilon']:g}",
                    "epsilon": f"d={fixed['n_sources']}, n={fixed['n_samples']}",
                }[panel]
                ax.set_title(what, fontsize=9)
                ax.set_xlabel(xlabel)
                ax.set_ylabel("test ECE (15 bins)")
                ax.set_yscale("log")
                ax.grid(alpha=0.3)
            axes[0].legend(fontsize=7)
            fig.suptitle(f"{ds}: mean test ECE over trials")
            fig.tight_layout()
            figs[ds] = fig
        return figs

    def write(self, out: str | Path, figures: bool = True) -> list[Path]:
        """Write ``results.csv``, ``table1.md`` and ``fig_<dataset>.png`` under ``out``."""

        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        files = [out / "results.csv", out / "table1.md"]
        with files[0].open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(self.rows[0]))
            w.writeheader()
            w.writerows(self.rows)
        files[1].write_text(self.table_markdown() + "\n")
        if figures:
            for ds, fig in self.figures().items():
                path = out / f"fig_{ds}.png"
                fig.savefig(path, dpi=110)
                files.append(path)
        self.files = files
        return files


def load_datasets(data: Any = None, severity: int = 5, seed: int = 0) -> dict[str, tuple]:
    """``None``: digits_shift, every corruption at ``severity``; a path: :func:`read_scores`;
    a mapping name -> (logits, labels): used as is."""
    if data is None:
        from privcal.data import digits_shift

        ds = digits_shift(seed=seed, severities=severity)
        return {c: ds.shifted[(c, severity)] for c in ds.corruptions}
    if isinstance(data, Mapping):
        return {str(k): (np.asarray(v[0], float), np.asarray(v[1])) for k, v in data.items()}
    from privcal.data import read_scores

    path = Path(data)
    sc = read_scores(path)
    if sc.logits is None:
        raise ValueError(f"{str(path)!r} holds top-label scores only; luo2020 needs full vectors.")
    return {path.stem: (sc.logits, sc.labels)}


def run(
    data: Any = None,
    *,
    trials: int = 500,
    iterations: int = 5,
    n_bins: int = 15,
    nll_bound: float = 10.0,
    grid: Sequence[GridPoint] | None = None,
    methods: Sequence[MethodSpec] = METHODS,
    seed: int = 0,
    severity: int = 5,
    out: str | Path | None = None,
    progress: bool = True,
    console: Any = None,
    jobs: int = 1,
) -> Luo2020Result:
    """Run seed 000's protocol (see the module docstring).

    Parameters
    ----------
    data : None, path or mapping
        ``None``: digits_shift at ``severity`` (all 15 corruptions); a scores file
        (:func:`~privcal.data.read_scores`); or ``{name: (logits, labels)}``.
    trials : int, default=500
        Random splits per setting.
    iterations : int, default=5
        ``K`` of the private searches.
    grid : sequence of GridPoint, optional
        Default :func:`default_grid` of each data set's size.
    methods : sequence of MethodSpec, default=METHODS
    seed : int
        Seeds the splits (``default_rng([seed, dataset, point])``) and the noise
        (``SeededNoise(default_rng([seed, dataset, point, method]))``).
    out : path, optional
        Write the CSV, the Table 1 Markdown and the figures there.
    progress : bool
        Show a Rich progress bar.
    jobs : int, default=1
        Worker processes (one data set each); results do not depend on it.

    Returns
    -------
    Luo2020Result
    """
    owner = "luo2020.run"
    trials = check_int(trials, "trials", owner, low=1)
    iterations = check_int(iterations, "iterations", owner, low=1)
    n_bins = check_int(n_bins, "n_bins", owner, low=1)
    nll_bound = check_real(nll_bound, "nll_bound", owner, low=0.0, low_open=True)
    datasets = load_datasets(data, severity, seed)
    grids = {
        name: list(grid) if grid is not None else default_grid(len(y))
        for name, (_, y) in datasets.items()
    }
    total = sum(len(g) for g in grids.values())
    jobs = check_int(jobs, "jobs", owner, low=1)
    kwargs: dict[str, Any] = {
        "trials": trials,
        "iterations": iterations,
        "n_bins": n_bins,
        "nll_bound": nll_bound,
        "methods": tuple(methods),
        "seed": seed,
    }
    rows: list[dict[str, Any]] = []
    start = time.perf_counter()
    bar = _progress(progress, console)
    items = list(datasets.items())
    with bar:
        task = bar.add_task("luo2020", total=total)
        if jobs == 1:
            for di, (name, (z, y)) in enumerate(items):
                rows += _run_dataset(
                    di, name, z, y, grids[name], **kwargs, tick=lambda: bar.advance(task)
                )
        else:
            from concurrent.futures import ProcessPoolExecutor, as_completed

            with ProcessPoolExecutor(max_workers=jobs) as pool:
                futures = {
                    pool.submit(_run_dataset, di, name, z, y, grids[name], **kwargs): di
                    for di, (name, (z, y)) in enumerate(items)
                }
                parts: dict[int, list[dict[str, Any]]] = {}
                for fut in as_completed(futures):
                    parts[futures[fut]] = fut.result()
                    bar.advance(task, len(grids[items[futures[fut]][0]]))
            for di in sorted(parts):
                rows += parts[di]
    res = Luo2020Result(rows, [m.label for m in methods], time.perf_counter() - start)
    if out is not None:
        res.write(out)
    return res


def _run_dataset(
    di: int,
    name: str,
    z: Any,
    y: Any,
    grid: Sequence[GridPoint],
    *,
    trials: int,
    iterations: int,
    n_bins: int,
    nll_bound: float,
    methods: Sequence[MethodSpec],
    seed: int,
    tick: Callable[[], None] | None = None,
) -> list[dict[str, Any]]:
    z = np.asarray(z, dtype=np.float64)
    y = np.asarray(y)
    rows = []
    chunk = max(1, int(MAX_ELEMENTS // (z.shape[0] * z.shape[1])))
    for pi, pt in enumerate(grid):
        rng = np.random.default_rng([seed, di, pi])
        parts: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {m: [] for m in range(len(methods))}
        for ci, start in enumerate(range(0, trials, chunk)):
            size = min(chunk, trials - start)
            setting = _split(z, y, size, pt.n_sources, pt.n_samples, rng)
            for mi, spec in enumerate(methods):
                noise = SeededNoise(np.random.default_rng([seed, di, pi, mi, ci]))
                parts[mi].append(
                    simulate(
                        spec,
                        setting,
                        pt.epsilon,
                        noise,
                        iterations=iterations,
                        n_bins=n_bins,
                        nll_bound=nll_bound,
                    )
                )
        for mi, spec in enumerate(methods):
            e = np.concatenate([p[0] for p in parts[mi]])
            t = np.concatenate([p[1] for p in parts[mi]])
            temp = float(np.nanmedian(t)) if np.isfinite(t).any() else float("nan")
            rows.append(
                {
                    "dataset": name,
                    **asdict(pt),
                    "method": spec.label,
                    "ece_mean": float(e.mean()),
                    "ece_median": float(np.median(e)),
                    "ece_std": float(e.std(ddof=1)) if e.size > 1 else 0.0,
                    "temperature_median": temp,
                    "trials": trials,
                }
            )
        if tick is not None:
            tick()
    return rows


class _NoBar:
    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def add_task(self, *a: Any, **k: Any) -> int:
        return 0

    def update(self, *a: Any, **k: Any) -> None:
        return None

    def advance(self, *a: Any, **k: Any) -> None:
        return None


def _progress(enabled: bool, console: Any) -> Any:
    if not enabled:
        return _NoBar()
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )


def run_loop(
    data: Mapping[str, tuple],
    *,
    trials: int,
    grid: Sequence[GridPoint],
    methods: Sequence[MethodSpec] = METHODS,
    iterations: int = 5,
    n_bins: int = 15,
    nll_bound: float = 10.0,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """The straightforward per-trial loop of the same protocol (for ``bench/bench_luo2020.py``).

    For every trial: split, wrap each source in a :class:`~privcal.private.DataSource` with
    ``SeededNoise``, fit the estimators (:class:`~privcal.private.PrivateTemperatureScaling`,
    :class:`~privcal.private.PrivateHistogramBinning`, one-source
    :class:`~privcal.calibrators.TemperatureScaling`) and score them with
    :func:`privcal.metrics.ece`. Returns the same tidy rows as :func:`run`.
    """
    from privcal.calibrators import TemperatureScaling
    from privcal.metrics import ece
    from privcal.private import DataSource, PrivateHistogramBinning, PrivateTemperatureScaling

    rows = []
    for di, (name, (z, y)) in enumerate(data.items()):
        for pi, pt in enumerate(grid):
            rng = np.random.default_rng([seed, di, pi])
            eces: dict[str, list[float]] = {m.label: [] for m in methods}
            for tr in range(trials):
                perm = rng.permutation(len(y))
                k = pt.n_sources * pt.n_samples
                val, test = perm[:k].reshape(pt.n_sources, pt.n_samples), perm[k:]
                for mi, spec in enumerate(methods):
                    noise = SeededNoise(np.random.default_rng([seed, di, pi, mi, tr]))
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        if spec.kind == "none":
                            p = softmax(z[test])
                        elif spec.kind == "one_source":
                            cal = TemperatureScaling("nll", t_range=ONE_SOURCE_RANGE)
                            p = cal.fit(z[val[0]], y[val[0]]).predict_proba(z[test])
                        else:
                            srcs = [
                                DataSource(z[v], y[v], budget=pt.epsilon, noise=noise) for v in val
                            ]
                            est: Any
                            if spec.kind == "hist":
                                est = PrivateHistogramBinning(pt.epsilon, n_bins, fallback="none")
                            else:
                                est = PrivateTemperatureScaling(
                                    spec.objective,
                                    pt.epsilon,
                                    iterations,
                                    spec.t_range,
                                    spec.search,
                                    n_bins,
                                    nll_bound,
                                    fallback="none",  # seed 000 (the batched path's)
                                )
                            p = est.fit(sources=srcs).predict_proba(z[test])
                    eces[spec.label].append(ece(p, y[test], n_bins))
            for m, v in eces.items():
                rows.append(
                    {
                        "dataset": name,
                        **asdict(pt),
                        "method": m,
                        "ece_mean": float(np.mean(v)),
                        "trials": trials,
                    }
                )
    return rows

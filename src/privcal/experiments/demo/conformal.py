"""Demo section: private and non-private prediction sets on the digits distribution shift.

Data: :func:`privcal.data.digits_shift` pooled over the 15 corruptions at severity 5 (13,485
rows, accuracy about 34%). A seeded random 3,000 rows fit a temperature (NLL); the other rows
are split into ``n = 5000`` calibration and test points. At ``alpha = 0.1``:

* split conformal (LAC) on the temperature-scaled probabilities;
* private conformal (LAC, ``epsilon = 1``, ``m*`` and ``gamma*`` automatic,
  ``SeededNoise(ctx.seed)``) on the same probabilities;
* private conformal on the *uncalibrated* softmax, to show why the scaling matters: the network
  is over-confident on the shifted images, so a quarter of the true-label LAC scores ``1 - p_y``
  sit within ``1/m*`` of 1 (more than ``1 - q~``) and Algorithm 5's small ``m*`` (256 at
  ``n = 5000``, ``epsilon = 1``) can only release the last edge, 1: every set is the full set
  (coverage 1, no information). The
  temperature (about 5) spreads the scores over [0, 1] and the private sets become informative.

Coverage and mean set size on one split (the estimators themselves) and their distribution over
``R`` random splits (:class:`~privcal.conformal.simulate.SplitSimulator`, 200 splits, 50 with
``quick``); a figure of the per-example set sizes and of the coverage over splits.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
from rich.table import Table

from privcal.experiments.report import markdown_table

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from privcal.experiments.demo import DemoContext

__all__ = ["ALPHA", "EPSILON", "TITLE", "run"]

TITLE = "Prediction sets"
#: Miscoverage level.
ALPHA = 0.1
#: Privacy loss of the private threshold.
EPSILON = 1.0
#: Rows of the pool used to fit the temperature; calibration points per split.
N_FIT, N_CAL = 3000, 5000


def _figure(sizes: dict[str, np.ndarray], coverage: dict[str, np.ndarray], C: int) -> Figure:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 3.6), layout="constrained")
    ax_size, ax_cov = fig.subplots(1, 2)
    labels = list(sizes)
    width = 0.8 / len(labels)
    for i, name in enumerate(labels):
        freq = np.bincount(sizes[name], minlength=C + 1)[1:] / sizes[name].size
        ax_size.bar(
            np.arange(1, C + 1) + (i - (len(labels) - 1) / 2) * width, freq, width, label=name
        )
    ax_size.set_xticks(np.arange(1, C + 1))
    ax_size.set_xlabel("set size (one split, test points)")
    ax_size.set_ylabel("fraction of test points")
    ax_size.legend(fontsize=8)
    lo = min(float(c.min()) for c in coverage.values())
    hi = max(float(c.max()) for c in coverage.values())
    edges = np.linspace(lo - 1e-3, hi + 1e-3, 31)
    for name, c in coverage.items():
        ax_cov.hist(c, bins=edges, histtype="step", linewidth=1.5, label=name)
    ax_cov.axvline(1 - ALPHA, color="k", linestyle="--", linewidth=1)
    ax_cov.set_xlabel("coverage (random splits)")
    ax_cov.set_ylabel("splits")
    ax_cov.legend(fontsize=8)
    fig.suptitle(f"Prediction sets at alpha = {ALPHA}, digits pooled at severity 5")
    return fig


def run(ctx: DemoContext) -> list[str]:
    """Run the section; return its Markdown lines."""
    from privcal.calibrators import TemperatureScaling
    from privcal.conformal import FullSetWarning, PrivateConformal, SplitConformal, lac_scores
    from privcal.conformal.simulate import SplitSimulator
    from privcal.metrics.statistics import softmax
    from privcal.privacy import SeededNoise

    z, y, _ = ctx.data.pool(5)
    z, y = np.asarray(z), np.asarray(y)
    C = z.shape[1]
    perm = ctx.rng("conformal").permutation(y.size)
    fit, rest = perm[:N_FIT], perm[N_FIT:]
    cal, test = rest[:N_CAL], rest[N_CAL:]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ts = TemperatureScaling("nll").fit(z[fit], y[fit])

    methods: dict[str, Any] = {
        "split (temperature-scaled)": SplitConformal(alpha=ALPHA, calibrator=ts),
        f"private ε={EPSILON:g} (temperature-scaled)": PrivateConformal(
            alpha=ALPHA, epsilon=EPSILON, noise=SeededNoise(ctx.seed), calibrator=ts
        ),
        f"private ε={EPSILON:g} (uncalibrated)": PrivateConformal(
            alpha=ALPHA, epsilon=EPSILON, noise=SeededNoise(ctx.seed)
        ),
    }
    R = 50 if ctx.quick else 200
    probs = {"scaled": ts.predict_proba(z[rest]), "raw": softmax(z[rest])}
    sims = {
        k: SplitSimulator(lac_scores(p), y[rest], n=N_CAL, splits=R, seed=ctx.seed)
        for k, p in probs.items()
    }
    rows = []
    sizes: dict[str, np.ndarray] = {}
    coverage: dict[str, np.ndarray] = {}
    for name, est in methods.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FullSetWarning)
            est.fit(z[cal], y[cal])
        sets = est.predict_set(z[test])
        size = sets.sum(axis=1)
        sim = sims["raw" if "uncalibrated" in name else "scaled"]
        res = (
            sim.split(ALPHA)
            if isinstance(est, SplitConformal)
            else sim.private(ALPHA, EPSILON, noise=SeededNoise(ctx.seed))
        )
        sizes[name], coverage[name] = size, res.coverage
        private = isinstance(est, PrivateConformal)
        rows.append(
            [
                name,
                f"{sets[np.arange(test.size), y[test]].mean():.4f}",
                f"{size.mean():.3f}",
                f"{(size == C).mean():.3f}",
                f"{est.threshold_:.4f}",
                f"m={est.bins_}, q~={est.level_:.4f}" if private else f"k={est.rank_}",
                f"{res.mean_coverage:.4f} ± {res.se_coverage:.4f}",
                f"{res.mean_size:.3f}",
            ]
        )
    header = [
        "Method",
        "Coverage",
        "Mean size",
        "Full sets",
        "Threshold",
        "Level",
        f"Coverage over {R} splits",
        f"Size over {R} splits",
    ]
    table = Table(
        title=f"LAC prediction sets, alpha = {ALPHA}, n = {N_CAL} calibration, "
        f"{test.size} test points",
        title_justify="left",
    )
    for i, col in enumerate(header):
        table.add_column(col, justify="left" if i == 0 else "right")
    for r in rows:
        table.add_row(*r)
    ctx.console.print(table)
    path = ctx.save_figure(_figure(sizes, coverage, C), "conformal_sets")
    T = float(ts.temperature_)
    raw = sims["raw"].sorted_scores
    m_raw = methods[f"private ε={EPSILON:g} (uncalibrated)"].bins_
    last = float((raw > 1 - 1 / m_raw).mean())
    return [
        f"digits_shift pooled over {len(ctx.data.corruptions)} corruptions at severity 5 "
        f"({y.size} rows, accuracy {(z.argmax(1) == y).mean():.1%}). {N_FIT} random rows fit "
        f"a temperature (NLL, T = {T:.2f}); the other rows are split into n = {N_CAL} "
        f"calibration and {test.size} test points. LAC scores, alpha = {ALPHA}; the private "
        f"threshold is epsilon = {EPSILON:g}-DP with m* and gamma* chosen automatically "
        f"(SeededNoise({ctx.seed}), a simulation).",
        "",
        *markdown_table(header, rows),
        "",
        "Without the temperature the network is over-confident on the shifted images: "
        f"{last:.1%} of the true-label scores 1 - p_y lie in the last of Algorithm 5's "
        f"m* = {m_raw} equal-width bins (above 1 - 1/m*), more than 1 - q~, so the mechanism "
        "can only release the edge 1 and every private set is the full label set "
        "(coverage 1, no information). Temperature scaling, fitted on separate rows, spreads the "
        "scores and the private sets cost little more than the non-private ones.",
        "",
        f"![Prediction sets]({path})",
    ]

"""Demo section: private recalibration across simulated private data sources (seed 000).

On every digits_shift corruption at severity 5, 25 simulated sources of 12 examples each answer
the private calibrators' queries at epsilon = 1 per source; the rest of the set is the test split.
The table gives the mean test ECE over random splits (the batched luo2020 protocol), the median
over corruptions, for the private methods and the two baselines. One fit is also shown end to end
on :class:`~privcal.private.DataSource` objects, with its privacy report.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from rich.table import Table

if TYPE_CHECKING:
    from privcal.experiments.demo import DemoContext

__all__ = ["EPSILON", "N_SAMPLES", "N_SOURCES", "TITLE", "run"]

TITLE = "Private recalibration across data sources (epsilon = 1)"
N_SOURCES, N_SAMPLES, EPSILON, SEVERITY = 25, 12, 1.0, 5


def run(ctx: DemoContext) -> list[dict[str, Any]]:
    """Run the section; return its report blocks."""
    from privcal.calibrators.summary import evidence_phrase, release_summary
    from privcal.experiments.luo2020 import GridPoint, Luo2020Config
    from privcal.experiments.luo2020 import run as luo_run
    from privcal.metrics import ece
    from privcal.privacy import SeededNoise
    from privcal.private import DataSource, PrivateTemperatureScaling
    from privcal.report import privacy_block, table, takeaway, text

    data = ctx.data
    sets = {c: data.shifted[(c, SEVERITY)] for c in data.corruptions}
    trials = 10 if ctx.quick else 100
    grid = [GridPoint("sources", N_SOURCES, N_SAMPLES, EPSILON)]
    res = luo_run(Luo2020Config(sets, trials=trials, grid=grid), seed=ctx.seed)
    tab = res.table()

    console_table = Table(
        title=f"Test ECE (%), median over {len(sets)} corruptions (severity {SEVERITY})"
    )
    console_table.add_column("method")
    for col in ("median ECE", "mean ECE"):
        console_table.add_column(col, justify="right")
    for m, (med, mean) in tab.items():
        console_table.add_row(m, f"{100 * med:.2f}", f"{100 * mean:.2f}")
    ctx.console.print(console_table)

    # one end-to-end fit on DataSource objects (seeded noise: simulation only)
    z, y = sets["fog"]
    rng = ctx.rng("private")
    perm = rng.permutation(len(y))
    val = perm[: N_SOURCES * N_SAMPLES].reshape(N_SOURCES, N_SAMPLES)
    test = perm[N_SOURCES * N_SAMPLES :]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sources = [
            DataSource(
                z[v],
                y[v],
                budget=EPSILON,
                noise=SeededNoise(int(rng.integers(1 << 31))),
                name=f"hospital{i:02d}",
            )
            for i, v in enumerate(val)
        ]
    cal = PrivateTemperatureScaling("acc", epsilon=EPSILON).fit(sources=sources)
    rep = cal.privacy_report_
    before = ece(z[test], y[test], 15, input="logits")
    after = ece(cal.predict_proba(z[test]), y[test], 15)
    ctx.console.print(
        f"fog: Acc-T over {N_SOURCES} sources -> {release_summary(cal)['text']}, test ECE "
        f"{100 * before:.2f}% -> {100 * after:.2f}%; {len(rep)} releases, "
        f"epsilon={rep.epsilon:g} per source"
    )
    from privcal.metrics.compare import replicate_interval

    # each private method against no recalibration: paired over corruptions, +- 2 SE
    per = {(r["dataset"], r["method"]): r["ece_mean"] for r in res.rows}
    private_methods = [m for m in tab if m not in ("No recalibration", "One source")]
    versus = {
        m: replicate_interval([per[c, m] - per[c, "No recalibration"] for c in sets])
        for m in private_methods
    }
    none = tab["No recalibration"][0]
    said = "; ".join(
        f"{m} {100 * versus[m]['diff']:+.2f} ± {200 * versus[m]['se']:.2f} pp "
        f"({versus[m]['verdict']})"
        for m in private_methods
    )
    check = cal.release_check_
    fit_line = (
        f"fell back to T = 1 (fitted T = {cal.release_temperature_:.2f}: "
        f"{evidence_phrase(check['z'])}, fewer than 2 in its favour)"
        if check["fell_back"]
        else f"released T = {cal.temperature_:.2f} ({evidence_phrase(check['z'])})"
    )
    ledgers = [
        {"source": src.name, "budget": src.budget, "spent": src.spent, "remaining": src.remaining}
        for src in sources
    ]
    return [
        takeaway(
            f"With {N_SOURCES} sources of {N_SAMPLES} examples each at ε = {EPSILON:g} per "
            f"source (seed 000's protocol, no fallback), test ECE against no recalibration "
            f"({100 * none:.2f}% median), paired over {len(sets)} corruptions ± 2 SE: {said}."
        ),
        text(
            f"{N_SOURCES} simulated sources x {N_SAMPLES} examples per corruption, epsilon = "
            f"{EPSILON:g} per source (pure DP, Laplace; seeded simulation noise), {trials} random "
            f"splits; per-corruption mean test ECE, then median / mean over the "
            f"{len(sets)} corruptions at severity {SEVERITY}."
        ),
        table(
            "Test ECE of private recalibration",
            [
                ("method", "Method"),
                ("median", "Median ECE", "percent"),
                ("mean", "Mean ECE", "percent"),
            ],
            [{"method": m, "median": med, "mean": mean} for m, (med, mean) in tab.items()],
        ),
        text(
            f"End to end on `DataSource` objects (fog, the default fallback rule): Acc-T "
            f"{fit_line}; test ECE {100 * before:.2f}% -> {100 * after:.2f}%."
        ),
        privacy_block(
            rep,
            title="Privacy of the end-to-end fit",
            trust="each source keeps its rows and its budget (a privacy odometer) and adds the "
            "noise to its own answers; the party fitting the calibrator sees only noisy answers, "
            "so no one is trusted with another source's data.",
            ledgers=ledgers,
        ),
    ]

"""Demo section: federated calibration over 100 Dirichlet clients (seed 003), simulated.

The digits_shift severity-5 pool is dealt to 100 clients with label skew beta = 0.1; each
client keeps half its rows for calibration and half for test. FedTemp and FedBBQ (weighted and
unweighted) run T = 12 rounds with client sampling p = 0.1, without DP and with user-level
(epsilon = 1, delta = 1e-5) DP, over :data:`DRAWS` independent draws of the partition and the
split (3 with ``--quick``). The table starts with the uncalibrated model on the same held-out
rows and gives the mean over draws of classwise ECE (the objective of seed 003), ECE and
accuracy, and the paired difference to the uncalibrated model with its SE over draws.

The headline never names a winner within the noise: each DP row is compared with the
uncalibrated model by its paired difference of classwise ECE +- 2 SE over draws
(:func:`privcal.metrics.compare.replicate_interval`), and said to be "no better than
uncalibrated" when that interval covers 0 (FedTemp's fallback to T = 1 gives differences of
exactly 0); the draws in which FedTemp fell back are counted.

The worse-than-doing-nothing mark is the scoreboard's paired test (on classwise ECE and the
error rate, through :func:`~privcal.experiments.scoreboard.calibration_row`), so the demo's
two sections never disagree. Temperature scaling cannot change the argmax; the binning
methods map each class's score on its own, so the top class can change.
Needs NumPy and SciPy only (Flower is not used for the simulation).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from privcal.experiments.demo import DemoContext

__all__ = ["DRAWS", "METHODS", "TITLE", "run"]

TITLE = "Federated calibration with user-level DP (simulated, 100 clients)"
#: Independent draws of the partition and the calibration/test split.
DRAWS = 5
#: Row label -> federated method name.
METHODS = {
    "FedTemp": "fedtemp",
    "FedBBQ (all weight)": "fedbbq-all",
    "FedBBQ (unweighted)": "fedbbq",
}
_DELTA = 1e-5


def run(ctx: DemoContext) -> list[dict[str, Any]]:
    """Run FedTemp / FedBBQ with and without DP over several draws; return the report blocks."""
    from privcal.experiments.scoreboard import calibration_metrics, calibration_row
    from privcal.federated import dirichlet_partition, simulate, split_clients
    from privcal.metrics.compare import BETTER, replicate_interval
    from privcal.metrics.statistics import softmax
    from privcal.privacy import SeededNoise
    from privcal.report import column, table, takeaway, text
    from privcal.report.scoreboard_tables import mark_worse

    z, y = ctx.data.pool(5)[:2]
    rounds = 6 if ctx.quick else 12
    draws = 3 if ctx.quick else DRAWS
    values: defaultdict[tuple[str, float], list[tuple[float, float, float]]] = defaultdict(list)
    fell_back: Counter[tuple[str, float]] = Counter()
    for d in range(draws):
        seed = ctx.seed + d
        parts = dirichlet_partition(y, 100, 0.1, seed=seed)
        cal_p, test_p = split_clients(parts, 0.5, seed=seed)
        test = np.concatenate(test_p)
        values[("uncalibrated", np.inf)].append(calibration_metrics(softmax(z[test]), y[test]))
        # seed 003: client sampling, the server adds the noise (seeded: a reproducible demo)
        run: dict[str, Any] = {"seed": seed, "aggregation": "trusted", "sample_rate": 0.1}
        for label, method in METHODS.items():
            for eps in (np.inf, 1.0):
                dp: dict[str, Any] = {} if eps == np.inf else {"epsilon": eps, "delta": _DELTA}
                cal, _ = simulate(
                    method, z, y, cal_p, rounds, noise=SeededNoise(seed + 1), **run, **dp
                )
                values[(label, eps)].append(
                    calibration_metrics(cal.predict_proba(z[test]), y[test])
                )
                check = getattr(cal, "release_check_", None)  # FedTemp under DP
                if check is not None:
                    fell_back[label, eps] += check["fell_back"]
    base = np.array(values[("uncalibrated", np.inf)])
    rows: list[dict[str, Any]] = []
    for (label, eps), v in values.items():
        r = calibration_row(
            "federated", "digits_shift", label, eps, label, np.array(v), base, key=1
        )
        r["dp"] = "none" if eps == np.inf else f"({eps:g}, {_DELTA:g})"
        r["accuracy_change"] = r["accuracy"] - float(base[:, 2].mean())
        r["versus"] = replicate_interval(np.array(v)[:, 1] - base[:, 1])["verdict"]
        r["fell_back"] = fell_back.get((label, eps))
        rows += mark_worse([r])
        ctx.console.print(
            f"{label:22s} DP={r['dp']:12s} cwECE {100 * r['cwece']:.2f}%  accuracy "
            f"{100 * r['accuracy']:.2f}% ({100 * r['accuracy_change']:+.2f} pp)"
            + (f"  WORSE ({r['why']})" if r["worse"] else "")
        )
    uncal = rows[0]
    worse = [f"{r['method']} with DP {r['dp']}" for r in rows if r["worse"]]
    private = [r for r in rows if r["dp"] != "none"]
    better = [r["method"] for r in private if r["versus"] == BETTER]

    def said(r: dict[str, Any]) -> str:
        fb = f"; fell back to T = 1 in {r['fell_back']} of {draws} draws" if r["fell_back"] else ""
        return (
            f"{r['method']} {100 * r['diff']:+.2f} ± {2 * 100 * r['diff_se']:.2f} pp, "
            f"{r['versus']}{fb}"
        )

    blocks = [
        takeaway(
            f"Federated over 100 clients with user-level (1, {_DELTA:g})-DP, classwise ECE "
            f"against the uncalibrated model's {100 * uncal['cwece']:.2f}% (paired difference "
            f"± 2 SE over {draws} draws): "
            + "; ".join(said(r) for r in private)
            + ". "
            + (
                f"Better than doing nothing beyond the noise: {', '.join(better)}. "
                if better
                else "No DP method is better than doing nothing beyond the noise. "
            )
            + (
                f"{len(worse)} row(s) worse than doing nothing: {', '.join(worse)}."
                if worse
                else "No row is worse than doing nothing (paired test over draws)."
            )
        ),
        text(
            f"digits_shift (severity 5, {z.shape[0]} rows) over 100 clients, Dirichlet beta = "
            f"0.1, p = 0.1, T = {rounds} rounds, under DP a trusted server adding the Gaussian "
            f"noise (seed 003); {draws} draws of the partition and of each "
            "client's calibration/test halves. Means over draws on the clients' held-out rows; "
            "'vs none' is the paired difference of classwise ECE to the uncalibrated model "
            "± its SE over draws. **WORSE** marks a mean difference above 2 SE (classwise ECE, "
            "or the error rate 1 - accuracy), the scoreboard's test."
        ),
        table(
            f"Federated calibration on digits_shift, mean over {draws} draws",
            [
                column("method", "Method"),
                column("dp", "User-level DP (ε, δ)"),
                column("cwece", "Classwise ECE", "percent"),
                column("diff", "vs none, classwise ECE", "pp", se="diff_se"),
                column("ece", "ECE", "percent"),
                column("accuracy", "Accuracy", "percent"),
                column("accuracy_change", "Accuracy change", "pp"),
            ],
            rows,
        ),
    ]
    if worse:
        blocks.append(text(f"Marked worse than doing nothing: {', '.join(worse)}."))
    return blocks

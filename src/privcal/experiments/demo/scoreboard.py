"""Demo section: a compact scoreboard on the demo's own data (digits_shift, severity 5 pooled).

The rows come from :mod:`privcal.experiments.scoreboard` (the functions behind
``privcal bench scoreboard`` and its tests): each calibrator with its defaults beside the
uncalibrated model and its non-private twin, at epsilon = 1, with the worse-than-nothing mark;
split vs private conformal sets; and, outside ``--quick``, the federated methods.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from rich.table import Table

from privcal.experiments.report import markdown_table

if TYPE_CHECKING:
    from privcal.experiments.demo import DemoContext

__all__ = ["EPSILONS", "TITLE", "run"]

TITLE = "Scoreboard: every method against doing nothing"
#: Budgets scored in the demo (``inf``: the non-private twin).
EPSILONS = (1.0, math.inf)


def _fmt(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.2f}"


def _calibration_lines(rows: list[dict[str, Any]], ctx: DemoContext) -> list[str]:
    table = Table(title="Calibration on digits_shift (test halves; ECE in %)")
    for col in ("method", "eps", "ECE", "cwECE", "acc", "vs none", "ratio", "mark"):
        table.add_column(col, justify="left" if col == "method" else "right")
    body = []
    for r in rows:
        eps = "inf" if r["epsilon"] == math.inf else f"{r['epsilon']:g}"
        cells = [
            r["method"],
            eps,
            f"{100 * r['ece']:.2f}",
            f"{100 * r['cwece']:.2f}",
            f"{100 * r['accuracy']:.2f}",
            f"{100 * r['diff']:+.2f}",
            _fmt(r["ratio"]),
            "WORSE" if r["worse"] else "",
        ]
        table.add_row(*cells)
        body.append([*cells[:-1], "**WORSE**" if r["worse"] else ""])
    ctx.console.print(table)
    head = ["method", "eps", "ECE %", "cwECE %", "acc %", "vs none (pp)", "ratio to twin", "mark"]
    return markdown_table(head, body)


def run(ctx: DemoContext) -> list[str]:
    """Run the section; return its Markdown lines."""
    from privcal.experiments import scoreboard as sb

    z, y, _ = ctx.data.pool(5)
    data = sb.Dataset(sb.DIGITS, y, logits=z)
    splits = 2 if ctx.quick else 5
    rows = sb.calibration_rows(data, EPSILONS, splits=splits, seed=ctx.seed)
    conf = sb.conformal_rows(data, EPSILONS, splits=5 if ctx.quick else 20, seed=ctx.seed)
    lines = [
        f"Each method with its default arguments, fitted on one half of {splits} random "
        f"halvings of the {y.shape[0]} pooled severity-5 digits_shift examples and scored on the "
        f"other half ({sb.SIMULATION_NOTE}). 'vs none' is the paired ECE difference to the "
        "uncalibrated model; **WORSE** marks a mean difference above 2 SE over splits; 'ratio "
        "to twin' is private ECE / non-private ECE.",
        "",
        *_calibration_lines(rows, ctx),
        "",
        "Conformal prediction (alpha = 0.1, n = 5000):",
        "",
        *markdown_table(
            ["method", "eps", "coverage", "mean size", "size ratio", "mark"],
            [
                [
                    r["method"],
                    "inf" if r["epsilon"] == math.inf else f"{r['epsilon']:g}",
                    f"{r['coverage']:.4f}",
                    f"{r['size']:.3f}",
                    _fmt(r["ratio"]),
                    f"**WORSE** ({r['why']})" if r["worse"] else "",
                ]
                for r in conf
            ],
        ),
    ]
    if not ctx.quick:
        fed = sb.federated_rows(data, EPSILONS, draws=1, seed=ctx.seed)
        lines += ["", "Federated (Dirichlet 0.1 over 100 clients, 12 rounds; cwECE in %):", ""]
        lines += _calibration_lines(fed, ctx)
    worse = [r for r in rows + conf if r["worse"]]
    lines += [
        "",
        f"{len(worse)} row(s) worse than doing nothing"
        + (
            ": " + ", ".join(f"{r['method']} (eps {r['epsilon']:g})" for r in worse)
            if worse
            else "."
        )
        + " The full table over every shared data set is `privcal bench scoreboard`.",
    ]
    return lines

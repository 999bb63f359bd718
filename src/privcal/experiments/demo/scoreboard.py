"""Demo section: a compact scoreboard on the demo's own data (digits_shift, severity 5 pooled).

The rows come from :mod:`privcal.experiments.scoreboard` (the functions behind
``privcal bench scoreboard`` and its tests): each calibrator with its defaults beside the
uncalibrated model and its non-private twin, at epsilon = 1, with the worse-than-nothing mark;
split vs private conformal sets; and, outside ``--quick``, the federated methods (whose paired
test compares classwise ECE, their objective). The summary counts the marks of every table.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from rich.table import Table

if TYPE_CHECKING:
    from privcal.experiments.demo import DemoContext

__all__ = ["EPSILONS", "TITLE", "run"]

TITLE = "Scoreboard: every method against doing nothing"
#: Budgets scored in the demo (``inf``: the non-private twin).
EPSILONS = (1.0, math.inf)


def _calibration_table(
    title: str, rows: list[dict[str, Any]], ctx: DemoContext, *, key: str = "ece"
) -> dict[str, Any]:
    """A scoreboard calibration table, printed and as a block; ``key`` is the error the paired
    test compares."""
    from privcal.report import format_value
    from privcal.report.scoreboard_tables import calibration_table

    name = {"ece": "ECE", "cwece": "classwise ECE"}[key]
    console = Table(title=f"{title} (errors in %)", title_justify="left")
    for col in ("method", "eps", "ECE", "cwECE", "acc", f"vs none ({name})", "ratio", "mark"):
        console.add_column(col, justify="left" if col == "method" else "right")
    for r in rows:
        console.add_row(
            r["method"],
            format_value(r["epsilon"], "epsilon"),
            *(format_value(r[k], "percent") for k in ("ece", "cwece", "accuracy")),
            format_value(r["diff"], "pp"),
            format_value(r["ratio"], "ratio"),
            r.get("_mark", ""),
        )
    ctx.console.print(console)
    return calibration_table(title, rows, error=name, data_set=False)


def run(ctx: DemoContext) -> list[dict[str, Any]]:
    """Run the section; return its report blocks."""
    from privcal.experiments import scoreboard as sb
    from privcal.report import takeaway, text
    from privcal.report.scoreboard_tables import conformal_table, mark_worse

    z, y, _ = ctx.data.pool(5)
    data = sb.Dataset(sb.DIGITS, y, logits=z)
    splits = 2 if ctx.quick else 5
    rows = mark_worse(sb.calibration_rows(data, EPSILONS, splits=splits, seed=ctx.seed))
    conf = mark_worse(
        sb.conformal_rows(data, EPSILONS, splits=5 if ctx.quick else 20, seed=ctx.seed)
    )
    blocks: list[dict[str, Any]] = [
        text(
            f"Each method with its default arguments, fitted on one half of {splits} random "
            f"halvings of the {y.shape[0]} pooled severity-5 digits_shift examples and scored on "
            f"the other half ({sb.SIMULATION_NOTE}). 'vs none' is the paired difference to the "
            "uncalibrated model ± its SE over splits; **WORSE** marks a mean difference above "
            "2 SE (of the error named in the column, or of the error rate 1 - accuracy); "
            "'ratio to twin' is private / non-private."
        ),
        _calibration_table(f"Calibration on {sb.DIGITS}", rows, ctx),
        conformal_table(
            f"Conformal prediction on {sb.DIGITS} (alpha = {sb.ALPHA}, n = 5000)",
            conf,
            data_set=False,
            note="Marked when coverage is below 1 - alpha by more than 3 SE, or sets are within "
            "1% of the full label set.",
        ),
    ]
    fed: list[dict[str, Any]] = []
    if not ctx.quick:
        fed = mark_worse(sb.federated_rows(data, EPSILONS, draws=1, seed=ctx.seed))
        block = _calibration_table(
            f"Federated calibration on {sb.DIGITS} (Dirichlet {sb.FED_BETA} over "
            f"{sb.FED_CLIENTS} clients, {sb.FED_ROUNDS} rounds)",
            fed,
            ctx,
            key="cwece",
        )
        block["note"] = (
            "Federated methods target classwise ECE, so 'vs none' and the mark compare classwise "
            "ECE; central methods (nll-t, vector, ...) are the federated methods' twins fitted "
            "on the union of the clients' data. One draw: there is no spread over draws, so the "
            "paired test marks nothing here (the federated section above tests over several "
            "draws)."
        )
        blocks.append(block)
    worse = [r for r in rows + conf + fed if r["worse"]]
    found = ", ".join(
        f"{r['task']} {r['method']} (eps {r['epsilon']:g}: {r['why']})" for r in worse
    )
    from privcal.metrics.compare import BETTER, verdict

    private = [r for r in rows if r["epsilon"] != math.inf]
    # never a winner within the noise: each private row against doing nothing, diff +- 2 SE
    better = [
        r["method"]
        for r in private
        if verdict(r["diff"] - 2 * r["diff_se"], r["diff"] + 2 * r["diff_se"]) == BETTER
    ]
    blocks.insert(
        0,
        takeaway(
            f"Scoreboard on {sb.DIGITS}: {len(worse)} of {len(rows) + len(conf) + len(fed)} "
            "rows are worse than doing nothing"
            + (f" ({found})" if worse else "")
            + f"; private calibrators at ε = 1 better than uncalibrated beyond 2 SE over "
            f"splits: {', '.join(better) or 'none'} (of {len(private)}); the others are no "
            "better than uncalibrated."
        ),
    )
    blocks.append(
        text(
            f"{len(worse)} row(s) worse than doing nothing"
            + (f": {found}." if worse else ".")
            + " The full table over every shared data set is `privcal bench scoreboard`."
        )
    )
    return blocks

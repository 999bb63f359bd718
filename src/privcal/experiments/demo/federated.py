"""Demo section: federated calibration over 100 Dirichlet clients (seed 003), simulated.

The digits_shift severity-5 pool is dealt to 100 clients with label skew beta = 0.1; each
client keeps half its rows for calibration. FedTemp and weighted FedBBQ run T = 12 rounds with
client sampling p = 0.1, without DP and with user-level (epsilon = 1, delta = 1e-5) DP.
Needs NumPy and SciPy only (Flower is not used for the simulation).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from privcal.experiments.demo import DemoContext

__all__ = ["TITLE", "run"]

TITLE = "Federated calibration with user-level DP (simulated, 100 clients)"


def run(ctx: DemoContext) -> list[str]:
    """Run FedTemp / FedBBQ with and without DP; return a Markdown table."""
    from privcal.experiments.report import markdown_table
    from privcal.federated import dirichlet_partition, simulate, split_clients
    from privcal.privacy import SeededNoise

    z, y = ctx.data.pool(5)[:2]
    parts = dirichlet_partition(y, 100, 0.1, seed=ctx.seed)
    cal_p, test_p = split_clients(parts, 0.5, seed=ctx.seed)
    test = np.concatenate(test_p)
    rounds = 6 if ctx.quick else 12
    rows = []
    base = None
    for label, method in (
        ("FedTemp", "fedtemp"),
        ("FedBBQ (all weight)", "fedbbq-all"),
        ("FedBBQ (unweighted)", "fedbbq"),
    ):
        for eps in (None, 1.0):
            _, hist = simulate(
                method,
                z,
                y,
                cal_p,
                rounds=rounds,
                epsilon=eps,
                delta=None if eps is None else 1e-5,
                seed=ctx.seed,
                noise=None if eps is None else SeededNoise(ctx.seed + 1),  # reproducible demo
                sample_rate=0.1,
                eval_logits=z[test],
                eval_labels=y[test],
                eval_every=rounds,
            )
            base = hist[0]
            h = hist[-1]
            rows.append(
                [
                    label,
                    "none" if eps is None else f"({eps:g}, 1e-5)",
                    f"{100 * h['cwece']:.2f}",
                    f"{100 * h['accuracy']:.1f}",
                ]
            )
            ctx.console.print(
                f"{label:22s} DP={rows[-1][1]:12s} cwECE {rows[-1][2]}%  accuracy {rows[-1][3]}%"
            )
    assert base is not None
    lines = [
        f"digits_shift (severity 5, {z.shape[0]} rows) over 100 clients, Dirichlet beta = 0.1, "
        f"p = 0.1, T = {rounds}; uncalibrated cwECE {100 * base['cwece']:.2f}%, accuracy "
        f"{100 * base['accuracy']:.1f}%.",
        "",
        *markdown_table(["method", "user-level DP", "cwECE (%)", "accuracy (%)"], rows),
    ]
    return lines

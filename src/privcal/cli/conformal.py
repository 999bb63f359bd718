"""``privcal conformal``: prediction sets (private or not) from calibration and test scores.

The lead wires it with ``register(app, bench_app)`` from ``privcal.cli.main``.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

__all__ = ["conformal", "register"]


def conformal(
    cal: Annotated[Path, typer.Option(help="Calibration scores (npz logits+labels, netcal).")],
    test: Annotated[Path, typer.Option(help="Test scores (labels optional, for coverage).")],
    out: Annotated[Path, typer.Option(help="Output Parquet file of prediction sets.")],
    alpha: Annotated[float, typer.Option(help="Miscoverage level in (0, 1).")] = 0.1,
    epsilon: Annotated[
        float | None, typer.Option(help="Privacy budget; omit for non-private split conformal.")
    ] = None,
    score: Annotated[str, typer.Option(help="lac, aps or aps-randomized.")] = "lac",
    bins: Annotated[str, typer.Option(help="Number of bins m, or 'auto' (private only).")] = "auto",
    seed: Annotated[
        int | None, typer.Option(help="SeededNoise seed (simulation only; default SecureNoise).")
    ] = None,
) -> None:
    """Fit conformal prediction sets on CAL and write the sets of TEST to OUT."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from privcal.conformal import PrivateConformal, SplitConformal
    from privcal.data import read_scores
    from privcal.privacy import SeededNoise

    c = read_scores(cal)
    t = read_scores(test)
    if c.logits is None or t.logits is None:
        raise typer.BadParameter("conformal sets need full probability vectors, not top-label.")
    est: Any
    if epsilon is None:
        est = SplitConformal(score=score, alpha=alpha)
    else:
        b: Any = bins if bins == "auto" else int(bins)
        noise = None if seed is None else SeededNoise(seed)
        est = PrivateConformal(score=score, alpha=alpha, epsilon=epsilon, bins=b, noise=noise)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(c.logits, c.labels)
    for w in caught:
        typer.echo(f"warning: {w.message}", err=True)
    sets = est.predict_set(t.logits)
    cols: dict[str, Any] = {
        "index": np.arange(sets.shape[0]),
        "set": [np.flatnonzero(row).tolist() for row in sets],
        "size": sets.sum(1),
    }
    summary: dict[str, Any] = {
        "threshold": float(est.threshold_),
        "mean_size": float(sets.sum(1).mean()),
    }
    if t.labels is not None:
        covered = sets[np.arange(sets.shape[0]), t.labels]
        cols["label"] = t.labels
        cols["covered"] = covered
        summary["coverage"] = float(covered.mean())
    if epsilon is not None:
        summary.update(
            epsilon=est.privacy_report_.epsilon, level=est.level_, bins=est.bins_, gamma=est.gamma_
        )
    pq.write_table(pa.table(cols), out)
    typer.echo(json.dumps(summary))


def register(app: typer.Typer, bench_app: typer.Typer | None = None) -> None:
    """Add ``conformal`` to ``app`` (``bench angelopoulos2022`` is not wired yet)."""
    app.command("conformal")(conformal)

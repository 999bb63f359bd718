"""``privcal conformal``: prediction sets (private or not) from calibration and test scores.

* ``privcal conformal --alpha 0.1 [--epsilon 1] --cal cal.npz --test test.npz --out sets.parquet``
* ``privcal bench angelopoulos2022 [--data FILE ...] [--splits 1000] [--out DIR] [--quick]``
  (:func:`privcal.experiments.angelopoulos2022.run`).

The lead wires it with ``register(app, bench_app)`` from ``privcal.cli.main``.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

__all__ = ["bench_angelopoulos2022", "conformal", "register"]


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
    """Fit conformal prediction sets on CAL and write the sets of TEST to OUT.

    With --epsilon the threshold is epsilon-DP for substituting one calibration example, with the
    number of calibration examples n public (level, bins and gamma are computed from n); the
    summary line states the relation, the public quantities and the status ("not private: seeded
    noise" with --seed).
    """
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
        summary.update(_privacy_summary(est))
    pq.write_table(pa.table(cols), out)
    typer.echo(json.dumps(summary))


def _privacy_summary(est: Any) -> dict[str, Any]:
    """The guarantee as the report states it; level, bins and gamma are functions of public n."""
    rep = est.privacy_report_
    return {
        "epsilon": rep.epsilon,
        "relation": f"{rep.relation} one calibration {rep.unit}; n public",
        "public": list(rep.public),
        "status": rep.status,
        "n": est.n_,
        "level": est.level_,
        "bins": est.bins_,
        "gamma": est.gamma_,
    }


def bench_angelopoulos2022(
    data: Annotated[
        list[Path] | None,
        typer.Option(
            "--data",
            help="Scores file (read_scores; repeat for several). Default: the shared CIFAR "
            "files and digits_shift pooled at severity 5.",
        ),
    ] = None,
    splits: Annotated[int, typer.Option("--splits", help="Random calibration/test splits.")] = 1000,
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder.")] = Path(
        "angelopoulos2022-out"
    ),
    alpha: Annotated[
        list[float] | None, typer.Option("--alpha", help="Miscoverage level (repeatable).")
    ] = None,
    n_cal: Annotated[int, typer.Option("--n-cal", help="Calibration points per split.")] = 5000,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    quick: Annotated[
        bool, typer.Option("--quick", help="Smoke run: <= 50 splits, 3 bin counts.")
    ] = False,
) -> None:
    """Seed 002's protocol: coverage and set-size histograms, private vs split conformal."""
    from privcal.cli._common import console, err_console, user_errors
    from privcal.experiments import angelopoulos2022

    with user_errors():
        res = angelopoulos2022.run(
            data or None,
            R=splits,
            alphas=tuple(alpha) if alpha else (0.1,),
            n_cal=n_cal,
            out_dir=out,
            seed=seed,
            quick=quick,
            console=err_console,
        )
    console.print(res.table_markdown(), markup=False, highlight=False)
    console.print(f"{res.n_rows} rows in {res.seconds:.1f} s -> {out}", markup=False)


def register(app: typer.Typer, bench_app: typer.Typer | None = None) -> None:
    """Add ``conformal`` to ``app`` and ``angelopoulos2022`` to ``bench_app`` (if given)."""
    app.command("conformal")(conformal)
    if bench_app is not None:
        bench_app.command("angelopoulos2022")(bench_angelopoulos2022)

"""``privcal source init|status``, ``privcal bench luo2020`` and the private ``fit`` hook.

* ``privcal source init --data val.npz --budget 1.0 --ledger src.sqlite [--name NAME]`` creates a
  data source's SQLite ledger (budget, data path and its SHA-256). The data stay where they are.
* ``privcal source status --ledger src.sqlite`` prints the budget, what was spent and every
  release.
* ``privcal fit --method acc-t --epsilon 1 --sources a.sqlite --sources b.sqlite -o cal.json``
  is served by :func:`private_fit`, installed as ``privcal.cli.calibrate``'s private fitting hook
  by :func:`register`. ``--method dp-ts|dp-ps --epsilon 8 [--delta 1e-5] --input val.npz`` fits
  seed 001's DP-SGD-trained temperature / Platt (vector) scaling on one held-out split (needs
  the torch extra).
* ``privcal bench luo2020 [--data FILE] [--trials 500] [--out DIR]`` runs seed 000's protocol
  (:func:`privcal.experiments.luo2020.run`).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.table import Table

from privcal.cli._common import console, err_console, fail, user_errors

__all__ = ["PRIVATE_METHODS", "private_fit", "register"]

#: ``--method`` names served by :func:`private_fit` -> estimator factory keyword arguments.
PRIVATE_METHODS: dict[str, dict[str, Any]] = {
    "acc-t": {"kind": "temperature", "objective": "acc"},
    "nll-t": {"kind": "temperature", "objective": "nll"},
    "temperature": {"kind": "temperature", "objective": "nll"},
    "ece-t": {"kind": "temperature", "objective": "ece"},
    "histogram": {"kind": "histogram"},
    "dp-ts": {"kind": "dp-sgd", "class": "DPTemperatureScaling"},
    "dp-ps": {"kind": "dp-sgd", "class": "DPPlattScaling"},
}
#: Printed when ``--seed`` replaces secure noise.
SEEDED_NOISE_WARNING = "[yellow]--seed: seeded noise (simulation only, not safe for real releases)"


def private_fit(request: Any) -> Any:
    """The hook behind ``privcal fit --epsilon/--sources`` (a ``PrivateFitRequest`` -> estimator).

    Sources are ledger paths made by ``privcal source init``; each pays ``--epsilon`` from its
    own budget. With ``--input`` and no ``--sources`` the input file is one private data set with
    budget ``--epsilon`` (in memory, no ledger). ``--seed`` switches to seeded (simulation) noise.
    """
    from privcal.privacy import SeededNoise
    from privcal.private import DataSource, PrivateHistogramBinning, PrivateTemperatureScaling

    method = request.method
    if method not in PRIVATE_METHODS:
        fail(
            f"The '--method' parameter of privcal fit with --epsilon/--sources must be one of "
            f"{', '.join(repr(m) for m in PRIVATE_METHODS)}. Got {method!r} instead."
        )
    if request.epsilon is None:
        fail("privcal fit --sources needs --epsilon: the budget each source spends on the fit.")
    if request.sources and request.scores is not None:
        fail("privcal fit takes either --input (one private data set) or --sources, not both.")
    spec = PRIVATE_METHODS[method]
    if spec["kind"] == "dp-sgd":
        return _fit_dp_sgd_calibrator(request, spec["class"])
    if request.delta is not None:
        fail(
            f"'{method}' is pure epsilon-DP (Laplace / exponential mechanisms): drop --delta. "
            f"--delta applies to dp-ts and dp-ps."
        )
    est: Any
    if spec["kind"] == "histogram":
        est = PrivateHistogramBinning(epsilon=request.epsilon, n_bins=request.n_bins)
    else:
        est = PrivateTemperatureScaling(
            objective=spec["objective"], epsilon=request.epsilon, n_bins=request.n_bins
        )
    seed = request.seed
    with warnings.catch_warnings():
        if seed is not None:
            warnings.simplefilter("ignore")  # the user asked for simulation noise explicitly
            request.console.print(SEEDED_NOISE_WARNING)
        if request.sources:
            srcs = [
                DataSource.open(
                    Path(p),
                    noise=None if seed is None else SeededNoise(np.random.default_rng([seed, i])),
                )
                for i, p in enumerate(request.sources)
            ]
            est.fit(sources=srcs)
        else:
            if request.scores is None or request.scores.logits is None:
                fail("privcal fit --epsilon needs --input (full score vectors) or --sources.")
            if seed is not None:
                est.set_params(noise=SeededNoise(seed))
            est.fit(request.scores.logits, request.scores.labels)
    rep = est.privacy_report_
    request.console.print(
        f"Privacy: {len(rep)} releases; epsilon={rep.epsilon:g} per source "
        f"({len(rep.per_source())} source(s), parallel composition); {rep.unit}-level "
        f"{rep.relation}, n private; {rep.status}"
    )
    return est


def _fit_dp_sgd_calibrator(request: Any, class_name: str) -> Any:
    """Seed 001's DP-TS / DP-PS (DP-SGD on the held-out split ``--input``), torch extra."""
    from privcal.privacy import InsecureNoiseWarning, SeededNoise
    from privcal.training import require_torch

    if request.sources:
        fail(
            f"--method {request.method} fits on one held-out split (--input), not on --sources; "
            f"use acc-t, nll-t, ece-t or histogram with --sources."
        )
    if request.scores is None or request.scores.logits is None:
        fail(f"privcal fit --method {request.method} needs --input (full score vectors).")
    try:
        require_torch(f"privcal fit --method {request.method}")
    except ImportError as exc:
        fail(str(exc))
    import privcal.training as training

    est = getattr(training, class_name)(epsilon=request.epsilon)
    if request.delta is not None:  # else the estimator's own default delta (1e-5)
        est.set_params(delta=request.delta)
    if request.seed is not None:
        request.console.print(SEEDED_NOISE_WARNING)
        est.set_params(noise=SeededNoise(request.seed), seed=request.seed)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Optimal order is the")
        if request.seed is not None:  # the line above already said it, once
            warnings.simplefilter("ignore", InsecureNoiseWarning)
        est.fit(request.scores.logits, request.scores.labels)
    rep = est.privacy_report_
    request.console.print(
        f"Privacy: DP-SGD ({est.steps_} steps, sigma={est.noise_multiplier_:.4g}); "
        f"epsilon={rep.epsilon:.6g}, delta={rep.delta:g} (Opacus {est.accountant} accountant); "
        f"{rep.unit}-level {rep.relation}; {rep.status}"
    )
    return est


def source_init(
    data: Annotated[Path, typer.Option("--data", help="Validation scores of this source.")],
    ledger: Annotated[Path, typer.Option("--ledger", help="SQLite ledger to create.")],
    budget: Annotated[float, typer.Option("--budget", help="Epsilon budget of the source.")] = 1.0,
    name: Annotated[str, typer.Option("--name", help="Public name of the source.")] = "",
) -> None:
    """Create a private data source: a ledger holding its budget and where its data live."""
    from privcal.private import DataSource

    with user_errors():
        src = DataSource.init_ledger(data, ledger, budget=budget, name=name or ledger.stem)
    console.print(
        f"Source [bold]{src.name}[/bold]: {src.n_classes} classes, budget epsilon={src.budget:g}, "
        f"spent {src.spent:g} -> {ledger}"
    )


def source_status(
    ledger: Annotated[Path, typer.Option("--ledger", help="Ledger from 'privcal source init'.")],
) -> None:
    """Print a source's budget, what it has spent and every release."""
    from privcal.private import DataSource

    with user_errors():
        src = DataSource.open(ledger)
        releases = src.odometer.releases
    table = Table(title=f"Source {src.name!r} ({ledger})")
    for col in ("#", "query", "mechanism", "sensitivity", "epsilon"):
        table.add_column(col)
    for i, r in enumerate(releases, 1):
        table.add_row(str(i), r.query, r.mechanism, f"{r.sensitivity:g}", f"{r.epsilon:.6g}")
    console.print(table)
    console.print(
        f"budget epsilon={src.budget:g}  spent={src.spent:.6g}  remaining={src.remaining:.6g}  "
        f"classes={src.n_classes}"
    )


def bench_luo2020(
    data: Annotated[
        Path | None,
        typer.Option("--data", help="Scores file (read_scores); default digits_shift."),
    ] = None,
    trials: Annotated[int, typer.Option("--trials", help="Random splits per setting.")] = 500,
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder.")] = Path("luo2020-out"),
    seed: Annotated[int, typer.Option("--seed")] = 0,
    iterations: Annotated[int, typer.Option("--iterations", help="K of the searches.")] = 5,
    severity: Annotated[int, typer.Option("--severity", help="digits_shift severity.")] = 5,
    jobs: Annotated[int, typer.Option("--jobs", help="Worker processes.")] = 2,
) -> None:
    """Seed 000's protocol: CSV, Table 1 analogue (Markdown) and Fig. 1-3 panels (PNG)."""
    from privcal.experiments import luo2020

    with user_errors():
        res = luo2020.run(
            data,
            trials=trials,
            iterations=iterations,
            seed=seed,
            severity=severity,
            out=out,
            jobs=jobs,
            console=err_console,
        )
    console.print(res.table_markdown())
    console.print(f"{len(res.rows)} rows in {res.seconds:.1f} s -> {out}")


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Add ``source init|status`` and ``bench luo2020``; install the private ``fit`` hook."""
    source_app = typer.Typer(
        help="Private data sources: budgets and ledgers.", no_args_is_help=True
    )
    source_app.command("init")(source_init)
    source_app.command("status")(source_status)
    app.add_typer(source_app, name="source")
    bench_app.command("luo2020")(bench_luo2020)
    try:
        from privcal.cli.calibrate import set_private_fit_hook
    except ImportError:  # pragma: no cover - the calibrate verbs are not installed
        return
    set_private_fit_hook(private_fit)

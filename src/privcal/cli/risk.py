"""``privcal risk``: conformal risk control (:class:`~privcal.conformal.RiskControl`, or
:class:`~privcal.conformal.PrivateRiskControl` with ``--epsilon``) from ``.npz`` files holding
``probs`` (``(n, K)``; per label for ``fnr``) and ``labels`` (a boolean ``(n, K)`` matrix for
``fnr``, integer classes for ``miscoverage``; optional for ``--test``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.table import Table

from privcal.cli._common import (
    ForceOption,
    check_output_path,
    collect_warnings,
    console,
    fail,
    refuse_overwrite,
    user_errors,
)

__all__ = ["register", "risk"]

#: ``--loss`` values.
LOSSES = ("fnr", "miscoverage")


def _read(path: Path, option: str, need_labels: bool) -> tuple[np.ndarray, Any]:
    """``probs`` and ``labels`` (``None`` when absent and not needed) of an ``.npz``."""
    if path.suffix.lower() != ".npz" or not path.is_file():
        fail(f"{option} {str(path)!r} must be an existing .npz file with 'probs' (and 'labels').")
    with np.load(path, allow_pickle=False) as npz:
        if "probs" not in npz:
            fail(
                f"{option} {str(path)!r} has no array 'probs' (arrays: {', '.join(npz)}): risk "
                "control reads probabilities; 'privcal apply -c CALIBRATOR -i FILE -o OUT.npz' "
                "writes them from logits."
            )
        labels = npz["labels"] if "labels" in npz else None
        probs = npz["probs"]
    if need_labels and labels is None:
        fail(f"{option} {str(path)!r} has no array 'labels': calibration needs them.")
    return probs, labels


def _estimator(loss: str, alpha: float, epsilon: float | None, seed: int | None) -> Any:
    from privcal._params import EPSILON, check_probability
    from privcal.conformal import PrivateRiskControl, RiskControl
    from privcal.privacy import SeededNoise

    if loss not in LOSSES:
        fail(f"The '--loss' parameter of privcal risk must be one of {', '.join(LOSSES)}.")
    check_probability(alpha, "--alpha", "privcal risk")  # named as the option, before any read
    if epsilon is None:
        if seed is not None:
            fail("--seed applies to private risk control: add --epsilon, or drop it.")
        return RiskControl(loss, alpha)
    EPSILON.check(epsilon, "--epsilon", "privcal risk")
    noise = None if seed is None else SeededNoise(seed)
    return PrivateRiskControl(loss, alpha, epsilon, noise=noise)


def risk(
    cal: Annotated[Path, typer.Option(help="Calibration .npz: 'probs' and 'labels'.")],
    test: Annotated[Path, typer.Option(help="Test .npz: 'probs', and 'labels' for the risk.")],
    loss: Annotated[str, typer.Option(help="fnr (multilabel) or miscoverage.")] = "fnr",
    alpha: Annotated[float, typer.Option(help="Risk level: E[loss] <= alpha.")] = 0.1,
    epsilon: Annotated[
        float | None, typer.Option(help="Privacy loss of lambda (omit: non-private).")
    ] = None,
    seed: Annotated[
        int | None, typer.Option(help="Seeded noise (simulation only: not private).")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", help="Write the sets and lambda (.npz) and a summary for privcal report."
        ),
    ] = None,
    force: ForceOption = False,
) -> None:
    """Conformal risk control (Angelopoulos et al. 2024): sets with E[loss] <= alpha."""
    with user_errors():
        from privcal.conformal import risk_curve
        from privcal.report import risk_summary_data, summary_path, write_summary

        if out is not None:
            check_output_path(out, "--out", "privcal risk", (".npz",))
            refuse_overwrite((out, summary_path(out)), "--out", "privcal risk", force)

        est = _estimator(loss, alpha, epsilon, seed)
        p_cal, y_cal = _read(cal, "--cal", True)
        p_test, y_test = _read(test, "--test", False)
        with collect_warnings():
            est.fit(p_cal, y_cal)
        sets = est.predict_set(p_test)
        table = Table(show_header=False)
        table.add_column(style="bold")
        table.add_column()
        table.add_row("lambda", f"{est.lambda_:g}")
        table.add_row("mean set size", f"{sets.sum(1).mean():.3f}")
        curve = None
        if y_test is not None:
            curve = risk_curve(est.loss_, p_test, y_test, est.lambdas_)
            test_risk = curve[est.lambda_index_]
            table.add_row(f"test {loss}", f"{test_risk:.4f} (guarantee: <= {alpha:g})")
        rep = getattr(est, "privacy_report_", None)
        if rep is not None:
            table.add_row("privacy", f"epsilon={rep.epsilon:g}, {rep.releases[0].mechanism}")
            table.add_row("relation", f"{rep.relation} one calibration {rep.unit}")
            table.add_row("status", rep.status)
        kind = "Private risk control" if rep is not None else "Risk control"
        console.print(
            f"{kind} ({loss}, alpha={alpha:g}): {p_cal.shape[0]} calibration, "
            f"{sets.shape[0]} test rows",
            highlight=False,
        )
        console.print(table)
        if out is not None:
            arrays: dict[str, Any] = {"sets": sets, "lambda": np.array(est.lambda_)}
            np.savez(out, **arrays)
            data = risk_summary_data(
                est, sets, curve, alpha=alpha, loss=loss, sets_file=out.name,
                cal_file=cal.name, test_file=test.name,
            )  # fmt: skip
            write_summary(summary_path(out), "risk", data)
            console.print(
                f"Sets -> {out} (summary for 'privcal report': {out.stem}.summary.json)",
                highlight=False,
            )


def register(app: typer.Typer, bench_app: typer.Typer | None = None) -> None:
    """Add ``risk`` to ``app``."""
    app.command("risk")(risk)

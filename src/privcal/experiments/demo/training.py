"""Demo section: DP-SGD makes a 2-D logistic regression over-confident; DP-TS fixes it.

Seed 001 Fig. 1 / Alg. 1 on :func:`privcal.data.gaussian_2d`: DP-SGD (epsilon 8, clipping 0.1)
on 90% of the data, DP temperature scaling (epsilon 8) on the other 10%; the joint guarantee is
their parallel composition. Needs the ``torch`` extra; without it the section says how to
install it and adds nothing else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from privcal.experiments.demo import DemoContext

__all__ = ["TITLE", "run"]

TITLE = "DP training miscalibrates; DP temperature scaling fixes it"


def run(ctx: DemoContext) -> list[str]:
    """Train SGD / DP-SGD / DP-SGD + DP-TS; save the figure; return Markdown lines."""
    try:
        from privcal.training import require_torch

        require_torch("the training demo")
    except ImportError as exc:
        ctx.console.print(f"[yellow]Skipped:[/yellow] {exc}")
        return [f"Skipped: {exc}"]
    import warnings

    import torch

    from privcal.data import gaussian_2d
    from privcal.metrics import accuracy, ece
    from privcal.plots import ReliabilityDisplay, subplots
    from privcal.privacy import SeededNoise
    from privcal.training import DPRecalibration, DPSGDTrainer, DPTemperatureScaling, SGDTrainer

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message="Optimal order is the")
    n = 4000 if ctx.quick else 10_000
    X, y = gaussian_2d(n, 1.5, ctx.seed)
    Xt, yt = gaussian_2d(10_000, 1.5, ctx.seed + 10_000)
    hp = {
        "epochs": 20 if ctx.quick else 50,
        "lr": 2.0,
        "batch_size": int(0.4 * n),
        "seed": ctx.seed,
    }
    p_sgd = SGDTrainer("logistic", **hp).fit(X, y).predict_proba(Xt)
    pipe = DPRecalibration(
        DPSGDTrainer("logistic", epsilon=8.0, delta=1e-5, max_grad_norm=0.1, **hp),
        DPTemperatureScaling(
            8.0, 1e-5, epochs=50 if ctx.quick else 100, noise=SeededNoise(ctx.seed), seed=ctx.seed
        ),
        validation_ratio=0.1,
        seed=ctx.seed,
    ).fit(X, y)
    z = pipe.predict_logits(Xt)
    from privcal.metrics.statistics import softmax

    p_dp, p_ts = softmax(z), pipe.predict_proba(Xt)
    fig, axes = subplots(
        2, 3, figsize=(11, 5.5), sharex=True, gridspec_kw={"height_ratios": [3, 1]}
    )
    names = ("SGD (non-private)", "DP-SGD, eps 8, C 0.1", "DP-SGD + DP-TS, eps 8")
    for j, (p, name) in enumerate(zip((p_sgd, p_dp, p_ts), names, strict=True)):
        ReliabilityDisplay.from_predictions(p, yt, name=name, ax=(axes[0, j], axes[1, j]))
    fig.tight_layout()
    rel = ctx.save_figure(fig, "training_dpsgd_dpts")
    rows = [
        (name, accuracy(p, yt), ece(p, yt))
        for p, name in zip((p_sgd, p_dp, p_ts), names, strict=True)
    ]
    report = pipe.privacy_report_
    assert report is not None
    for name, a, e in rows:
        ctx.console.print(f"{name:28s} accuracy {a:.4f}  ECE {e:.4f}")
    ctx.console.print(f"privacy: {report!r} (parallel composition over the 90/10 split)")
    lines = [
        "| model | accuracy | ECE |",
        "|---|---|---|",
        *[f"| {name} | {a:.4f} | {e:.4f} |" for name, a, e in rows],
        "",
        f"DP-TS temperature: {pipe.calibrator_.temperature_:.3f}. Joint guarantee "
        f"(parallel composition, seed 001 Prop. A.1): epsilon = {report.epsilon:.3f}, "
        f"delta = {report.delta:g}.",
        "",
        f"![reliability]({rel})",
    ]
    return lines

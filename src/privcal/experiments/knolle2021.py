"""Seed 004 (Knolle et al. 2021): SGD vs DP-SGD vs DP-SGLD at equal epsilon.

Tasks: scikit-learn's digits with the small CNN (the MNIST analogue) and breast cancer with an
MLP (a small binary medical task, the pneumonia analogue). Metrics: accuracy, AUC (one-vs-rest,
macro, for digits), ECE (15 bins). DP-SGD and DP-SGLD are both at ``epsilon`` (Opacus RDP,
``delta = 1e-5``). DP-SGLD is ``DPSGLDTrainer.from_preset("knolle2021-mnist")`` -- seed 004's
pre-noise 0.046, decay 0.028 and clipping norm 1 -- with three overrides stated here: the budget
(``epsilon`` above, as DP-SGD's), ``lr`` (the shared 0.5) and ``temperature="auto"`` (the budget
is spent in the same number of epochs as DP-SGD; Knolle's quoted ``tau = 6.08, lr = 0.005`` give
a noise multiplier of 0.25, whose first step alone exceeds any useful budget on these data sizes).
Outputs: ``knolle2021.csv`` (tidy), ``knolle2021_calibration.png``, ``knolle2021.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from privcal.experiments._legacy import path_form
from privcal.experiments._progress import Progress, report
from privcal.experiments.bu2023 import _torch_setup, load_task
from privcal.metrics import accuracy, ece
from privcal.report.formatting import write_csv, write_lines

__all__ = [
    "FULL",
    "QUICK",
    "Knolle2021Config",
    "Knolle2021Result",
    "compare_defaults",
    "run",
    "run_rows",
]

DELTA = 1e-5


def _auc(p: np.ndarray, y: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    if p.shape[1] == 2:
        return float(roc_auc_score(y, p[:, 1]))
    return float(roc_auc_score(y, p, multi_class="ovr"))


def run_rows(
    seeds: tuple[int, ...] = (0, 1, 2),
    epsilon: float = 3.0,
    epochs: int = 30,
    progress: Callable[[str], None] | None = None,
) -> tuple[list[dict[str, Any]], dict[tuple[str, str], Any]]:
    """One row per (task, method, seed); also the seed-0 test probabilities for the figure."""
    from privcal.training import DPSGDTrainer, DPSGLDTrainer, SGDTrainer

    _torch_setup()
    rows: list[dict[str, Any]] = []
    probs: dict[tuple[str, str], Any] = {}
    for seed in seeds:
        for name in ("digits", "breast_cancer"):
            report(progress, f"knolle2021: {name}, seed {seed}")
            t = load_task(name, seed)
            X, y, Xt, yt = t.X_train, t.y_train, t.X_test, t.y_test
            model = "cnn" if name == "digits" else "mlp"
            hp = {"epochs": epochs, "lr": 0.5, "batch_size": 64, "seed": seed}
            dp = {"epsilon": epsilon, "delta": DELTA, **hp}
            fitted = {
                "SGD": SGDTrainer(model, **hp),
                "DP-SGD": DPSGDTrainer(model, **dp),
                "DP-SGLD": DPSGLDTrainer.from_preset(
                    "knolle2021-mnist", model, temperature="auto", **dp
                ),
            }
            for method, tr in fitted.items():
                p = tr.fit(X, y).predict_proba(Xt)
                eps = float("inf") if method == "SGD" else float(tr.epsilon_)
                scores = dict(accuracy=accuracy(p, yt), auc=_auc(p, yt), ece=ece(p, yt))
                rows.append(dict(task=name, method=method, epsilon=eps, seed=seed, **scores))
                if seed == seeds[0]:
                    probs[(name, method)] = (p, yt)
    return rows, probs


def compare_defaults(
    epsilons: tuple[float, ...] = (1.0, 8.0),
    seeds: tuple[int, ...] = (0, 1, 2),
    model: str = "mlp",
) -> list[dict[str, Any]]:
    """DP-SGLD's defaults against DP-SGD's on digits: one row per (trainer, epsilon, seed).

    ``DPSGDTrainer(model, epsilon=e, seed=s)`` and ``DPSGLDTrainer(model, epsilon=e, seed=s)``
    (nothing else set) train on the 70% split of :func:`privcal.experiments.bu2023.load_task`
    ``("digits", s)`` and are scored on its 30%: accuracy, ECE (15 bins), the accountant's
    epsilon and the fit's CPU seconds (``time.process_time``: stable on a shared machine; the
    trainers run torch on the calling thread). The seeds make the runs reproducible (each warns
    :class:`~privcal.privacy.InsecureNoiseWarning`): a measurement, not a release.
    """
    import time

    from privcal.training import DPSGDTrainer, DPSGLDTrainer

    rows: list[dict[str, Any]] = []
    for seed in seeds:
        t = load_task("digits", seed)
        for eps in epsilons:
            for cls in (DPSGDTrainer, DPSGLDTrainer):
                start = time.process_time()
                tr = cls(model, epsilon=eps, seed=seed).fit(t.X_train, t.y_train)
                seconds = time.process_time() - start
                p = tr.predict_proba(t.X_test)
                scores = dict(accuracy=accuracy(p, t.y_test), ece=ece(p, t.y_test))
                spent = dict(epsilon_spent=float(tr.epsilon_), cpu_seconds=seconds)
                rows.append(dict(trainer=cls.__name__, epsilon=eps, seed=seed, **scores, **spent))
    return rows


@dataclass(frozen=True)
class Knolle2021Config:
    """Settings of seed 004's comparison: ``trials`` seeds (``seed, seed + 1, ...``) of
    ``epochs`` epochs each at ``epsilon``; ``name`` is ``"quick"`` for the smoke run."""

    trials: int = 3
    epochs: int = 30
    epsilon: float = 3.0
    name: str = "full"


#: The comparison of the docs (three seeds, 30 epochs).
FULL = Knolle2021Config()
#: The smoke run (``privcal bench knolle2021 --quick``): one seed, 10 epochs.
QUICK = Knolle2021Config(trials=1, epochs=10, name="quick")


@dataclass
class Knolle2021Result:
    """What :func:`run` returns: one row per (task, method, seed) and the first seed's test
    probabilities per (task, method) for the reliability figure."""

    rows: list[dict[str, Any]]
    probs: dict[tuple[str, str], Any]
    config: Knolle2021Config = FULL
    seed: int = 0

    def write(self, out_dir: str | Path) -> Path:
        """Write ``knolle2021.csv``, ``knolle2021_calibration.png`` and ``knolle2021.md`` under
        ``out_dir``; return the Markdown path."""
        from privcal.plots import ReliabilityDisplay, save_figure, subplots

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        rows = self.rows
        write_csv(out / "knolle2021.csv", rows)
        fig, axes = subplots(2, 6, figsize=(18, 5), gridspec_kw={"height_ratios": [3, 1]})
        for j, (key, (p, y)) in enumerate(self.probs.items()):
            ReliabilityDisplay.from_predictions(
                p, y, name=f"{key[0]}: {key[1]}", ax=(axes[0, j], axes[1, j])
            )
        fig.tight_layout()
        save_figure(fig, out / "knolle2021_calibration.png")
        quick = " --quick" if self.config.name == "quick" else ""
        md = [
            f"# knolle2021 (seed 004) results\n\nCommand: `privcal bench knolle2021 --out {out} "
            f"--seed {self.seed}{quick}`\n",
            "| task | method | epsilon | accuracy | AUC | ECE |",
            "|---|---|---|---|---|---|",
        ]
        keys = ("epsilon", "accuracy", "auc", "ece")
        lower = []
        for task in ("digits", "breast_cancer"):
            means = {}
            for method in ("SGD", "DP-SGD", "DP-SGLD"):
                sel = [r for r in rows if r["task"] == task and r["method"] == method]
                m = {k: float(np.mean([r[k] for r in sel])) for k in keys}
                means[method] = m
                md.append(
                    f"| {task} | {method} | {m['epsilon']:.3g} | {m['accuracy']:.4f} | "
                    f"{m['auc']:.4f} | {m['ece']:.4f} |"
                )
            lower.append(means["DP-SGLD"]["ece"] < means["DP-SGD"]["ece"])
        md.append(
            f"\nDP-SGLD has lower ECE than DP-SGD on {sum(lower)} of {len(lower)} tasks "
            f"(seed 004's claim). Figure: `knolle2021_calibration.png`."
        )
        return write_lines(out / "knolle2021.md", md)


@path_form(FULL, QUICK)
def run(
    config: Knolle2021Config = FULL,
    *,
    seed: int = 0,
    progress: Progress | None = None,
) -> Knolle2021Result:
    """Run the comparison (see the module docstring); :meth:`Knolle2021Result.write` writes
    the CSV, the figure and the Markdown (the deprecated ``run(out_dir, quick=...)``:
    :func:`~privcal.experiments._legacy.path_form`)."""
    seeds = tuple(seed + i for i in range(config.trials))
    rows, probs = run_rows(seeds, config.epsilon, config.epochs, progress=progress)
    return Knolle2021Result(rows, probs, config, seed)

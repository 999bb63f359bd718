"""Seed 003 (Maddock, Cormode & Maple): private federated multiclass post-hoc calibration.

Protocol (analogue of Fig. 2-3 and Tables 2-3)
----------------------------------------------
Each data set (classifier outputs: ``log p`` of the netcal LeNet-5 CIFAR-10 / CIFAR-100 test
probabilities, the closest to the paper's "simple CNN"; and the digits_shift severity-5 pool) is
partitioned over ``K = 100`` clients by Dirichlet label skew (``beta``), and every client splits
its rows 50/50 into calibration and test parts (the logits come from held-out data already).
Federated calibrators are fitted on the calibration parts with client sampling ``p = 0.1`` and
evaluated on the union of the test parts (global cwECE, ECE, accuracy; seed 003 Sec. 3).

FedTemp is run both ways: the paper's parameter averaging ("FedTemp", "FedTemp (1 Newton
step)": ``fedtemp-averaging``) and privcal's default federated Newton on summed statistics
("FedTemp (Newton)"). Under the DP setting the Newton rows use their own clip rule
(``client_rows = 200``), not ``C``.

Settings: (a) no DP, ``beta = 0.1``, the curve over ``T = 1..30`` (one run of 30 rounds, the
calibrator evaluated after every round); (b) no DP, ``T = 12``, ``beta`` in
{0.1, 0.3, 0.5, 1}; FedCal (an MLP with ~17k parameters for 100 classes) is skipped on
CIFAR-100;
(c) DP, ``T = 12``, ``beta = 0.1``, ``delta = 1e-5``, ``epsilon`` in {1, 3, 10}, ``C = 0.5``,
``[C+, C-] = [10, 50]`` (seed 003 Sec. 5). Repeats use seeds ``seed + r`` for the partition,
the sampling and the (simulated) noise. A result whose accuracy is more than 1 point below the
uncalibrated model's is flagged (as the paper's tables do).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from privcal.experiments._legacy import path_form
from privcal.experiments._progress import Progress, report
from privcal.federated import dirichlet_partition, simulate, split_clients
from privcal.plots import subplots
from privcal.privacy import SeededNoise
from privcal.report.formatting import write_csv, write_lines

__all__ = [
    "FULL",
    "METHODS",
    "QUICK",
    "Maddock2025Config",
    "Maddock2025Result",
    "against_central",
    "load_datasets",
    "load_network",
    "run",
]

#: label -> (simulate method name, extra parameters): FedTemp both ways (module docstring); the
#: FedBBQ rows use the paper's calibrators (``prior="midpoint"``: seed 003's bin values without
#: DP), not privcal's default shrinkage toward the model.
METHODS: dict[str, tuple[str, dict[str, Any]]] = {
    "FedTemp": ("fedtemp-averaging", {}),
    "FedTemp (1 Newton step)": ("fedtemp-averaging", {"local_iters": 1}),
    "FedTemp (Newton)": ("fedtemp", {}),
    "FedOPVector": ("fedopvector", {"local_iters": 20}),
    "FedCal": ("fedcal", {"local_iters": 10}),
    "FedBBQ": ("fedbbq", {"prior": "midpoint"}),
    "FedBBQ (all weight)": ("fedbbq-all", {"prior": "midpoint"}),
    "FedBBQ (changed weight)": ("fedbbq-changed", {"prior": "midpoint"}),
}

#: Seed 003's federated setting: client sampling p = 0.1, the server adds the noise (Sec. 5's
#: clip bounds ``C = 0.5`` and ``[C+, C-] = [10, 50]``).
_SEED003: dict[str, Any] = dict(
    aggregation="trusted", sample_rate=0.1, clip=0.5, clip_pos=10.0, clip_neg=50.0
)

NETCAL = {
    "CIFAR-10 (LeNet-5)": "lenet-5-cifar-10.npz",
    "CIFAR-100 (LeNet-5)": "lenet-5-cifar-100.npz",
}


def load_network(fname: str) -> tuple[np.ndarray, np.ndarray] | None:
    """``(log p, labels)`` of a netcal-cifar network in the shared data, or ``None`` if absent."""
    from privcal.data import shared_data_dir

    path = Path(str(shared_data_dir())) / "netcal-cifar" / fname
    if not path.exists():
        return None
    with np.load(path) as d:
        p = np.clip(d["predictions"].astype(np.float64), np.finfo(float).tiny, None)
        return np.log(p), np.asarray(d["ground_truth"])


#: Central fits of the federated scaling methods.
CENTRAL = {
    "fedtemp": "TemperatureScaling",
    "fedvector": "VectorScaling",
    "fedmatrix": "MatrixScaling",
}


def against_central(
    z: np.ndarray,
    y: np.ndarray,
    method: str = "fedtemp",
    *,
    n_clients: int = 100,
    beta: float = 0.1,
    rounds: int = 12,
    epsilon: float = 1.0,
    delta: float = 1e-5,
    draws: int = 10,
    seed: int = 0,
    **method_params: Any,
) -> dict[str, float]:
    """A federated scaling method against its central fit on the union of the clients' data.

    Protocol (issue 13's acceptance check): calibrate on a random half of ``(z, y)`` (seeded),
    evaluate on the other half; the calibration half is split over ``n_clients`` clients by
    Dirichlet(``beta``) label skew; every client takes part in every round (``p = 1``). The
    federated fit runs without DP once and with user-level ``(epsilon, delta)``-DP ``draws``
    times (``SeededNoise(seed + 1000 + r)``: a simulation, not a release).

    Returns
    -------
    dict
        ``uncal_*``, ``central_*``, ``fed_*`` (no DP) and ``dp_*`` (mean over the draws) of
        ``cwece``, ``ece`` and ``accuracy``; ``dp_cwece_sd``; for FedTemp also ``central_t``,
        ``fed_t`` and ``dp_t`` (mean).
    """
    import warnings

    from privcal import calibrators
    from privcal.federated import evaluate
    from privcal.privacy import InsecureNoiseWarning

    perm = np.random.default_rng(seed).permutation(y.size)
    cal, ev = perm[: y.size // 2], perm[y.size // 2 :]
    zc, yc, ze, ye = z[cal], y[cal], z[ev], y[ev]
    parts = dirichlet_partition(yc, n_clients, beta, seed=seed)
    central = getattr(calibrators, CENTRAL[method])().fit(zc, yc)
    out = {f"uncal_{k}": v for k, v in evaluate(None, ze, ye).items()}
    out.update({f"central_{k}": v for k, v in evaluate(central, ze, ye).items()})
    fed, _ = simulate(method, zc, yc, parts, rounds=rounds, seed=seed, **method_params)
    out.update({f"fed_{k}": v for k, v in evaluate(fed, ze, ye).items()})
    dp_rows, dp_t = [], []
    # seed 003's trusted aggregation: the server adds the noise (every client, every round)
    dp: dict[str, Any] = dict(
        rounds=rounds, epsilon=epsilon, delta=delta, seed=seed, aggregation="trusted"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InsecureNoiseWarning)
        for r in range(draws):
            noise = SeededNoise(seed + 1000 + r)
            cal_dp, _ = simulate(method, zc, yc, parts, **dp, noise=noise, **method_params)
            dp_rows.append(evaluate(cal_dp, ze, ye))
            dp_t.append(getattr(cal_dp, "temperature_", np.nan))
    for k in ("cwece", "ece", "accuracy"):
        out[f"dp_{k}"] = float(np.mean([row[k] for row in dp_rows]))
    out["dp_cwece_sd"] = float(np.std([row["cwece"] for row in dp_rows]))
    if method == "fedtemp":
        out["central_t"] = float(central.temperature_)
        out["fed_t"] = float(fed.temperature_)
        out["dp_t"] = float(np.mean(dp_t))
    return out


def load_datasets(seed: int = 0, names: tuple[str, ...] | None = None) -> dict[str, tuple]:
    """``{name: (logits, labels)}``: netcal LeNet-5 CIFAR-10/100 (if present) and digits_shift."""
    out: dict[str, tuple] = {}
    for name, fname in NETCAL.items():
        net = load_network(fname)
        if net is not None:
            out[name] = net
    digits = "digits_shift (severity 5)"
    if names is None or digits in names:
        from privcal.data import digits_shift

        out[digits] = digits_shift(seed).pool(5)[:2]
    if names is not None:
        out = {k: v for k, v in out.items() if k in names}
    return out


def _one(
    z: np.ndarray,
    y: np.ndarray,
    method: str,
    params: dict[str, Any],
    seed: int,
    beta: float,
    rounds: int,
    epsilon: float | None,
    eval_every: int,
) -> list[dict[str, Any]]:
    """The evaluated rounds of one federated run (client sampling, seed 003's clip bounds)."""
    parts = dirichlet_partition(y, 100, beta, seed=seed)
    cal_p, test_p = split_clients(parts, 0.5, seed=seed)
    test = np.concatenate(test_p)
    dp: dict[str, Any] = {}
    if epsilon is not None:  # simulated, reproducible noise
        dp = {"epsilon": epsilon, "delta": 1e-5, "noise": SeededNoise(seed + 1)}
    evaluate = dict(eval_logits=z[test], eval_labels=y[test], eval_every=eval_every)
    _, hist = simulate(
        method, z, y, cal_p, rounds, seed=seed, **_SEED003, **dp, **evaluate, **params
    )
    base = hist[0]
    return [
        {k: h[k] for k in ("round", "cwece", "ece", "accuracy")}
        | {"base_cwece": base["cwece"], "base_accuracy": base["accuracy"]}
        | {"accuracy_drop": base["accuracy"] - h["accuracy"]}
        for h in hist[1:]
        if "cwece" in h
    ]


@dataclass(frozen=True)
class Maddock2025Config:
    """Settings of seed 003's protocol.

    ``trials`` repeats (seeds ``seed + r``) on ``datasets`` (``None``: every one
    :func:`load_datasets` finds); the rounds curve runs ``curve_rounds`` rounds at
    ``beta = 0.1``, the beta sweep ``betas`` and the DP sweep ``epsilons`` at ``T = 12``;
    ``fedcal`` includes FedCal (skipped on 100 classes anyway); ``name`` is ``"quick"`` for the
    smoke run.
    """

    trials: int = 3
    datasets: tuple[str, ...] | None = None
    curve_rounds: int = 30
    betas: tuple[float, ...] = (0.3, 0.5, 1.0)
    epsilons: tuple[float, ...] = (1.0, 3.0, 10.0)
    fedcal: bool = True
    name: str = "full"


#: The protocol of the docs (three repeats).
FULL = Maddock2025Config()
#: The smoke run (``privcal bench maddock2025 --quick``): one repeat, fewer settings, no FedCal.
QUICK = Maddock2025Config(
    trials=1, curve_rounds=12, betas=(1.0,), epsilons=(1.0,), fedcal=False, name="quick"
)


@dataclass
class Maddock2025Result:
    """What :func:`run` returns: one row per (data set, method, repeat, setting, round)."""

    rows: list[dict[str, Any]]
    seconds: float
    config: Maddock2025Config = FULL
    seed: int = 0

    def write(self, out_dir: str | Path) -> Path:
        """Write ``results.csv``, the figures and ``maddock2025.md`` under ``out_dir``; return
        the Markdown path."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        write_csv(out / "results.csv", self.rows)
        figs = _figures(self.rows, out)
        quick = self.config.name == "quick"
        md = _markdown(self.rows, figs, self.config.trials, self.seconds, quick, self.seed)
        return write_lines(out / "maddock2025.md", md)


@path_form(FULL, QUICK, {"repeats": "trials"})
def run(
    config: Maddock2025Config = FULL,
    *,
    seed: int = 0,
    progress: Progress | None = None,
) -> Maddock2025Result:
    """Run the protocol; :meth:`Maddock2025Result.write` writes ``results.csv``, figures and
    ``maddock2025.md`` (the deprecated ``run(out_dir, quick=..., repeats=..., datasets=...)``,
    ``repeats`` now the config's ``trials``: :func:`~privcal.experiments._legacy.path_form`)."""
    data = load_datasets(seed, config.datasets)
    # the rounds curve (evaluated every round), the beta sweep (0.1: the curve's) and the DP sweep
    runs: list[tuple[str, float, float | None, int, int]] = [
        ("rounds", 0.1, None, config.curve_rounds, 1)
    ]
    runs += [("beta", beta, None, 12, 12) for beta in config.betas]
    runs += [("epsilon", 0.1, eps, 12, 12) for eps in config.epsilons]
    rows: list[dict[str, Any]] = []
    t_start = time.perf_counter()
    for dname, (z, y) in data.items():
        for label, (m, params) in METHODS.items():
            if label == "FedCal" and (not config.fedcal or z.shape[1] > 50):
                continue  # on 100 classes a 17k-parameter MLP: too slow for the bench budget
            for r in range(config.trials):
                t0 = time.perf_counter()
                for setting, beta, eps, rounds, every in runs:
                    head = {"dataset": dname, "method": label, "repeat": r, "setting": setting}
                    head |= {"beta": beta, "epsilon": "inf" if eps is None else eps}
                    found = _one(z, y, m, params, seed + r, beta, rounds, eps, every)
                    rows += [head | row for row in found]
                seconds = time.perf_counter() - t0
                report(progress, f"{dname} / {label} / repeat {r}: {seconds:.1f} s")
    return Maddock2025Result(rows, time.perf_counter() - t_start, config, seed)


def _agg(rows: list[dict[str, Any]], **where: Any) -> dict[str, tuple[float, float, float]]:
    """method -> (mean cwECE, sd cwECE, mean accuracy drop) over repeats."""
    out: dict[str, tuple[float, float, float]] = {}
    sel = [r for r in rows if all(r[k] == v for k, v in where.items())]
    for m in dict.fromkeys(r["method"] for r in sel):
        cw = np.array([r["cwece"] for r in sel if r["method"] == m])
        dr = np.array([r["accuracy_drop"] for r in sel if r["method"] == m])
        out[m] = (float(cw.mean()), float(cw.std()), float(dr.mean()))
    return out


def _figures(rows: list[dict[str, Any]], out: Path) -> list[str]:
    (out / "figures").mkdir(exist_ok=True)
    paths = []
    for dname in dict.fromkeys(r["dataset"] for r in rows):
        fig, axes = subplots(1, 4, figsize=(17, 3.6))
        for m in dict.fromkeys(r["method"] for r in rows if r["dataset"] == dname):
            sel = [r for r in rows if r["dataset"] == dname and r["method"] == m]
            cur = [r for r in sel if r["setting"] == "rounds"]
            b = [
                r
                for r in sel
                if r["setting"] == "beta" or (r["setting"] == "rounds" and r["round"] == 12)
            ]
            e = [r for r in sel if r["setting"] == "epsilon"]
            for ax, part, x, y, marker in (
                (axes[0], cur, "round", "cwece", None),
                (axes[1], cur, "round", "accuracy", None),
                (axes[2], b, "beta", "cwece", "o"),
                (axes[3], e, "epsilon", "cwece", "o"),
            ):
                xs = sorted({r[x] for r in part})
                means = [100 * np.mean([r[y] for r in part if r[x] == v]) for v in xs]
                ax.plot(xs, means, **({"marker": marker} if marker else {}), label=m)
        base = next(r for r in rows if r["dataset"] == dname)
        for ax, key in zip(axes, ("cwece", "accuracy", "cwece", "cwece"), strict=True):
            ax.axhline(100 * base[f"base_{key}"], color="k", ls=":", lw=1, label="base")
        axes[0].set(xlabel="rounds T (no DP)", ylabel="cwECE (%)", title=dname)
        axes[1].set(xlabel="rounds T (no DP)", ylabel="test accuracy (%)")
        axes[2].set(xlabel="beta (T=12, no DP)", ylabel="cwECE (%)", xscale="log")
        axes[3].set(
            xlabel="epsilon (T=12, delta=1e-5)", ylabel="cwECE (%)", xscale="log", yscale="log"
        )
        axes[3].legend(fontsize=7)
        fig.tight_layout()
        name = "figures/" + "".join(ch if ch.isalnum() else "_" for ch in dname) + ".png"
        fig.savefig(out / name, dpi=110)
        paths.append(name)
    return paths


def _markdown(
    rows: list[dict[str, Any]], figs: list[str], reps: int, seconds: float, quick: bool, seed: int
) -> list[str]:
    md = [
        "# Seed 003 (Maddock et al.): federated calibration with user-level DP",
        "",
        f"`privcal bench maddock2025{' --quick' if quick else ''} --seed {seed}`: K = 100 "
        f"Dirichlet clients, p = 0.1, {reps} repeat(s), {seconds:.0f} s. cwECE in %; mean (sd) "
        "over repeats; `*` marks a mean accuracy drop > 1 point against the uncalibrated model.",
        "",
    ]
    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    for title, where in (
        ("Table 2 analogue: no DP, beta = 0.1, T = 12", {"setting": "rounds", "round": 12}),
        (
            "Table 3 analogue: epsilon = 1, delta = 1e-5, beta = 0.1, T = 12",
            {"setting": "epsilon", "epsilon": 1.0},
        ),
        ("No DP, beta = 0.1, T = 30", {"setting": "rounds", "round": 30}),
    ):
        md += [f"## {title}", ""]
        methods = list(dict.fromkeys(r["method"] for r in rows))
        md += [
            "| data set | base | " + " | ".join(methods) + " |",
            "|---" * (len(methods) + 2) + "|",
        ]
        for d in datasets:
            agg = _agg(rows, dataset=d, **where)
            base = next(r["base_cwece"] for r in rows if r["dataset"] == d)
            cells = []
            for m in methods:
                if m in agg:
                    mu, sd, drop = agg[m]
                    cells.append(f"{100 * mu:.3f} ({100 * sd:.3f}){' *' if drop > 0.01 else ''}")
                else:
                    cells.append("-")
            md.append(f"| {d} | {100 * base:.3f} | " + " | ".join(cells) + " |")
        md.append("")
    md += ["## Findings of the paper, checked here", ""]
    md += _findings(rows)
    md += ["", "## Figures", ""] + [f"![{f}]({f})" for f in figs]
    md += [
        "",
        "Tidy results: `results.csv` (one row per data set, method, setting, repeat and "
        "evaluated round).",
    ]
    return md


def _findings(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    d = "CIFAR-10 (LeNet-5)"
    if not any(r["dataset"] == d for r in rows):
        return ["netcal CIFAR-10 logits not found: findings not checked."]
    a30 = _agg(rows, dataset=d, setting="rounds", round=30)
    if "FedBBQ (all weight)" in a30 and "FedTemp" in a30:
        ok = a30["FedBBQ (all weight)"][0] < a30["FedTemp"][0]
        out.append(
            f"1. No DP, T = 30, beta = 0.1, CIFAR-10: weighted FedBBQ cwECE "
            f"{100 * a30['FedBBQ (all weight)'][0]:.3f} vs FedTemp "
            f"{100 * a30['FedTemp'][0]:.3f}: **{'holds' if ok else 'does not hold'}**."
        )
        one = "FedTemp (1 Newton step)"
        if one in a30:
            ok1 = a30["FedBBQ (all weight)"][0] < a30[one][0]
            out.append(
                f"1b. Against {one} ({100 * a30[one][0]:.3f}): "
                f"**{'holds' if ok1 else 'does not hold'}**."
            )
    for ds in dict.fromkeys(r["dataset"] for r in rows):
        e1 = _agg(rows, dataset=ds, setting="epsilon", epsilon=1.0)
        clean = {m: v for m, v in e1.items() if v[2] <= 0.01}
        if clean:
            best = min(clean, key=lambda m: clean[m][0])
            ok = best.startswith("FedTemp")  # either FedTemp variant
            out.append(
                f"2. epsilon = 1, {ds}: best cwECE without accuracy drop is **{best}** "
                f"({100 * clean[best][0]:.3f}); FedTemp {100 * e1['FedTemp'][0]:.3f}: "
                f"**{'holds' if ok else 'does not hold'}**."
            )
        for setting, where in (
            ("T = 12 no DP", {"setting": "rounds", "round": 12}),
            ("epsilon = 1", {"setting": "epsilon", "epsilon": 1.0}),
        ):
            a = _agg(rows, dataset=ds, **where)
            if "FedBBQ" in a and "FedBBQ (all weight)" in a:
                out.append(
                    f"3. {setting}, {ds}: accuracy drop unweighted FedBBQ "
                    f"{100 * a['FedBBQ'][2]:.2f} pts, weighted "
                    f"{100 * a['FedBBQ (all weight)'][2]:.2f} pts."
                )
    return out

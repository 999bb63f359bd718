"""Temperature scaling fit (NLL): privcal vs netcal; matrix scaling vs scikit-learn.

Run alone with ``python -m bench.bench_temperature [--n 50000] [--classes 1000] [--repeats 5]
[--only temperature|matrix]``. Same process, same data, side by side.
Data: seeded synthetic logits (Gaussian noise, the true class boosted, everything scaled by 2.5;
about 60 % top-1 accuracy); the NLL-optimal temperature (about 0.7) lies well inside (0.05, 20).
privcal is timed on the float64 logits and on their float32 copy (what PyTorch gives), which it
fits without a float64 copy of the whole matrix; the float32 row's ratio is the one the goal
"float32 at least as fast as float64" reads.

netcal's :class:`netcal.scaling.TemperatureScaling` takes softmax probabilities, not logits; its
default ``method="mle"`` (SciPy L-BFGS-B on the cross-entropy, numerical gradient) is also its
fastest (``"momentum"`` is detection-only; ``"variational"`` and ``"mcmc"`` run 1000 epochs or
MCMC chains). The probabilities are computed once outside the timed region, which favours netcal.
netcal's learned parameter is a multiplier of the log-probabilities, so its temperature is
``1 / weights``.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from bench._harness import best_of, markdown_table

__all__ = ["make_logits", "run", "run_matrix"]


def make_logits(n: int, c: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Seeded ``n x c`` float64 logits and labels (about 60 % top-1 accuracy at c = 1000)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, c, size=n)
    z = rng.normal(size=(n, c))
    z[np.arange(n), labels] += 3.5
    z *= 2.5
    return z, labels


def run(n: int = 50_000, c: int = 1000, repeats: int = 5) -> str:
    """Time both temperature fits; return a Markdown section."""
    from privcal.calibrators import TemperatureScaling
    from privcal.metrics.statistics import nll_terms, softmax

    z, y = make_logits(n, c)
    acc = float((z.argmax(axis=1) == y).mean())

    def mean_nll(t: float) -> float:
        return float(nll_terms(z, y, t).mean())

    t_priv, cal = best_of(lambda: TemperatureScaling("nll").fit(z, y), repeats)
    temp_priv = float(cal.temperature_)
    z32 = z.astype(np.float32)
    t32, cal32 = best_of(lambda: TemperatureScaling("nll").fit(z32, y), repeats)
    temp32 = float(cal32.temperature_)
    rows: list[list[object]] = [
        [
            'privcal `TemperatureScaling("nll").fit(logits, labels)`, float64',
            t_priv,
            1.0,
            f"{temp_priv:.6f}",
            f"{mean_nll(temp_priv):.8f}",
            "0",
        ],
        [
            "privcal, the same logits as float32",
            t32,
            t32 / t_priv,
            f"{temp32:.6f}",
            f"{mean_nll(temp32):.8f}",
            f"{mean_nll(temp32) - mean_nll(temp_priv):+.1e}",
        ],
    ]
    t_exp, _ = best_of(lambda: np.exp(z), repeats)
    rows.append(["one `np.exp(logits)` pass (the memory-speed yardstick)", t_exp, t_exp / t_priv])
    rows[-1] += ["", "", ""]
    try:
        from netcal.scaling import TemperatureScaling as NetcalTS
    except ImportError:
        rows.append(["netcal", "not installed", "", "", "", ""])
    else:
        probs = softmax(z)  # netcal's input; not timed

        def fit_netcal() -> float:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ts = NetcalTS(method="mle", detection=False, use_cuda=False)
                ts.fit(probs, y, tensorboard=False)
            return 1.0 / float(np.asarray(ts.temperature).ravel()[0])

        t, temp = best_of(fit_netcal, repeats)
        d_nll = mean_nll(temp) - mean_nll(temp_priv)
        rows.append(
            [
                'netcal `TemperatureScaling(method="mle").fit(probs, labels)`',
                t,
                t / t_priv,
                f"{temp:.6f}",
                f"{mean_nll(temp):.8f}",
                f"{d_nll:+.1e}",
            ]
        )
    table = markdown_table(
        [
            "implementation",
            "best time (s)",
            "time / privcal",
            "T",
            "mean NLL at T",
            "NLL - privcal's",
        ],
        rows,
    )
    ratios = (
        f"fit / one np.exp pass: float64 {t_priv / t_exp:.2f}, float32 {t32 / t_exp:.2f}; "
        f"float32 / float64 {t32 / t_priv:.2f}"
    )
    if isinstance(rows[-1][1], float) and rows[-1][0].startswith("netcal"):
        t_net, temp_net = rows[-1][1], float(rows[-1][3])
        ratios += (
            f"; netcal / privcal {t_net / t_priv:.1f}; |T - T_netcal| / T_netcal "
            f"{abs(temp_priv - temp_net) / temp_net:.1e}"
        )
    return (
        f"### Temperature scaling (NLL), {n:,} x {c} float64 logits, top-1 accuracy {acc:.3f} "
        f"(best of {repeats})\n\n{table}\n\n{ratios}\n"
    )


def run_matrix(repeats: int = 3, data: str | None = None) -> str:
    """Matrix scaling on the shared WRN-16-4 CIFAR-100 network (first 5000 rows fit, last 5000
    held out) against scikit-learn's multinomial ``LogisticRegression`` (lbfgs, its defaults)
    on the same logits in the same process; returns a Markdown section."""
    from sklearn.linear_model import LogisticRegression

    from privcal.calibrators import MatrixScaling
    from privcal.data import shared_data_dir
    from privcal.metrics import nll

    root = shared_data_dir() if data is None else Path(data)
    if root is None:
        return "### Matrix scaling: shared data not found (set $PRIVCAL_SHARED_DATA)\n"
    raw = np.load(root / "netcal-cifar" / "wideresnet-16-4-cifar-100.npz")
    z = np.log(np.maximum(raw["predictions"].astype(np.float64), np.finfo(np.float64).tiny))
    y = raw["ground_truth"].astype(np.int64)
    fit_z, fit_y, test_z, test_y = z[:5000], y[:5000], z[5000:], y[5000:]

    def ours(check: bool) -> Any:
        cal = MatrixScaling()
        if not check:  # the fit alone, without the 2-fold cross-fit diagnostic of fit()
            cal._cross_fit_diagnostic = False  # type: ignore[misc]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return cal.fit(fit_z, fit_y)

    def sk() -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return LogisticRegression().fit(fit_z, fit_y)

    t_full, cal = best_of(lambda: ours(True), repeats)
    t_core, _ = best_of(lambda: ours(False), repeats)
    t_sk, lr = best_of(sk, repeats)
    held = nll(cal.predict_proba(test_z), test_y)
    held_sk = nll(lr.predict_proba(test_z), test_y)
    rows = [
        ["privcal `MatrixScaling().fit` (with its cross-fit diagnostic: 3 fits)", t_full,
         t_full / t_sk, f"{held:.6f}"],
        ["privcal, the fit alone", t_core, t_core / t_sk, f"{held:.6f}"],
        ["scikit-learn `LogisticRegression()` (lbfgs, multinomial)", t_sk, 1.0, f"{held_sk:.6f}"],
    ]  # fmt: skip
    table = markdown_table(
        ["implementation", "best time (s)", "time / sklearn", "held-out NLL"], rows
    )
    return (
        f"### Matrix scaling, WRN-16-4 CIFAR-100 (5000 fit / 5000 held out; best of {repeats})"
        f"\n\n{table}\n"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=50_000)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument(
        "--only", choices=["temperature", "matrix"], default=None, help="run one of the two"
    )
    args = ap.parse_args()
    if args.only != "matrix":
        print(run(args.n, args.classes, args.repeats))
    if args.only != "temperature":
        print(run_matrix(args.repeats))


if __name__ == "__main__":
    main()

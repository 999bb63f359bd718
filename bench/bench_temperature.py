"""Temperature scaling fit (NLL): privcal vs netcal, same process, same data.

Run alone with ``python -m bench.bench_temperature [--n 50000] [--classes 1000] [--repeats 5]``.
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

import numpy as np

from bench._harness import best_of, markdown_table

__all__ = ["make_logits", "run"]


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
    return (
        f"### Temperature scaling (NLL), {n:,} x {c} float64 logits, top-1 accuracy {acc:.3f} "
        f"(best of {repeats})\n\n{table}\n"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=50_000)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    print(run(args.n, args.classes, args.repeats))


if __name__ == "__main__":
    main()

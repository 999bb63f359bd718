"""ECE on N x C probabilities: privcal vs netcal vs torchmetrics (CPU), same process, same data.

Run alone with ``python -m bench.bench_metrics [--n 100000 1000000 10000000] [--classes 10]
[--repeats 5]``: one table per row count (from 2^16 rows privcal uses its compiled kernel).
Data: seeded synthetic float64 probabilities, rows drawn from a Dirichlet(0.3, ..., 0.3) with
the label drawn from the row itself (so the model is calibrated up to sampling noise).
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np

from bench._harness import best_of, markdown_table

__all__ = ["make_probs", "run"]


def make_probs(n: int, c: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n x c`` float64 Dirichlet(0.3) rows and labels drawn from each row (chunked, seeded)."""
    rng = np.random.default_rng(seed)
    probs = np.empty((n, c))
    labels = np.empty(n, dtype=np.int64)
    step = 1_000_000
    for a in range(0, n, step):
        b = min(a + step, n)
        g = rng.gamma(0.3, size=(b - a, c))
        g /= g.sum(axis=1, keepdims=True)
        probs[a:b] = g
        u = rng.random(b - a)[:, None]
        labels[a:b] = np.minimum((np.cumsum(g, axis=1) < u).sum(axis=1), c - 1)
    return probs, labels


def run(n: int = 10_000_000, c: int = 10, repeats: int = 5, n_bins: int = 15) -> str:
    """Time the three ECE implementations; return a Markdown section."""
    from privcal.metrics import ece

    probs, labels = make_probs(n, c)
    rows: list[list[object]] = []
    t_priv, v_priv = best_of(lambda: ece(probs, labels, n_bins=n_bins), repeats)
    rows.append(["privcal `ece(probs, labels, n_bins=15)`", t_priv, 1.0, f"{v_priv:.12f}", "0"])
    p32 = probs.astype(np.float32)
    t32, v32 = best_of(lambda: ece(p32, labels, n_bins=n_bins), repeats)
    rows.append(["privcal, the same probabilities as float32", t32, t32 / t_priv, f"{v32:.12f}",
                 f"{v32 - v_priv:+.1e}"])  # fmt: skip
    t_sum, _ = best_of(lambda: probs.sum(), repeats)
    t_sum32, _ = best_of(lambda: p32.sum(), repeats)
    rows.append(["one read: `probs.sum()`, float64", t_sum, t_sum / t_priv, "", ""])
    rows.append(["one read: `probs.sum()`, float32", t_sum32, t_sum32 / t_priv, "", ""])
    reads = (
        f"ECE / one read of the same array: float64 {t_priv / t_sum:.2f}, "
        f"float32 {t32 / t_sum32:.2f}"
    )

    try:
        from netcal.metrics import ECE
    except ImportError:
        rows.append(["netcal", "not installed", "", "", ""])
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t, v = best_of(lambda: float(ECE(n_bins).measure(probs, labels)), repeats)
        rows.append(["netcal `ECE(15).measure`", t, t / t_priv, f"{v:.12f}", f"{v - v_priv:+.1e}"])

    try:
        import torch
        from torchmetrics.functional.classification import multiclass_calibration_error
    except ImportError:
        rows.append(["torchmetrics", "not installed", "", "", ""])
    else:
        torch.set_num_threads(2)
        p_t, y_t = torch.from_numpy(probs), torch.from_numpy(labels)  # zero-copy, not timed

        def tm() -> float:
            return float(
                multiclass_calibration_error(p_t, y_t, num_classes=c, n_bins=n_bins, norm="l1")
            )

        t, v = best_of(tm, repeats)
        rows.append(
            [
                "torchmetrics `multiclass_calibration_error` (CPU, 2 threads)",
                t,
                t / t_priv,
                f"{v:.12f}",
                f"{v - v_priv:+.1e}",
            ]
        )
    table = markdown_table(
        ["implementation", "best time (s)", "time / privcal", "ECE", "ECE - privcal"], rows
    )
    return (
        f"### ECE, {n:,} x {c} float64 probabilities, {n_bins} bins (best of {repeats})\n\n"
        f"{table}\n\n{reads}\n"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    for n in args.n:
        print(run(n, args.classes, args.repeats))


if __name__ == "__main__":
    main()

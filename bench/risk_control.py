"""Private conformal risk control against its non-private twin (issue 34's "Must hold").

``multilabel`` data (privcal makes it: ``privcal.data.synthetic.multilabel``), ``loss="fnr"``,
``alpha = 0.1``, ``n = 5000`` calibration rows, the rest test rows, 20 random splits;
``PrivateRiskControl(epsilon=1)`` with ``SecureNoise`` against ``RiskControl`` on the same split.
Prints the mean test FNR +- its standard error over splits and the mean set size of each.

    PYTHONPATH=src python bench/risk_control.py [--splits 20] [--n 5000] [--epsilon 1]
"""

from __future__ import annotations

import argparse

import numpy as np

from privcal.conformal import PrivateRiskControl, RiskControl
from privcal.data.synthetic import multilabel


def fnr(sets: np.ndarray, labels: np.ndarray) -> float:
    """Mean over rows of the fraction of true labels missed (0 for a row with none)."""
    missed = (~sets & labels).sum(axis=1) / np.maximum(labels.sum(axis=1), 1)
    return float(missed.mean())


def run(splits: int, n: int, epsilon: float, alpha: float, total: int, seed: int) -> dict:
    """Per split: test FNR and mean set size of the private and the non-private fit."""
    probs, labels = multilabel(total, seed=seed)
    rng = np.random.default_rng(seed)
    out: dict[str, list[float]] = {k: [] for k in ("fnr", "size", "fnr_np", "size_np")}
    for _ in range(splits):
        perm = rng.permutation(total)
        cal, test = perm[:n], perm[n:]
        for suffix, est in (
            ("", PrivateRiskControl("fnr", alpha=alpha, epsilon=epsilon)),
            ("_np", RiskControl("fnr", alpha=alpha)),
        ):
            est.fit(probs[cal], labels[cal])
            sets = est.predict_set(probs[test])
            out["fnr" + suffix].append(fnr(sets, labels[test]))
            out["size" + suffix].append(float(sets.sum(axis=1).mean()))
    return {k: np.array(v) for k, v in out.items()}


def table(r: dict, alpha: float) -> str:
    k = r["fnr"].size
    se = lambda x: x.std(ddof=1) / np.sqrt(k)  # noqa: E731
    rows = [
        "| fit | mean FNR +- SE | mean set size |",
        "|---|---|---|",
        f"| RiskControl | {r['fnr_np'].mean():.4f} +- {se(r['fnr_np']):.4f} | "
        f"{r['size_np'].mean():.3f} |",
        f"| PrivateRiskControl | {r['fnr'].mean():.4f} +- {se(r['fnr']):.4f} | "
        f"{r['size'].mean():.3f} |",
    ]
    ratio = r["size"].mean() / r["size_np"].mean()
    ok_fnr = r["fnr"].mean() <= alpha + 3 * se(r["fnr"])
    rows.append("")
    rows.append(
        f"private FNR <= alpha + 3 SE: {ok_fnr}; set size private / non-private = "
        f"{ratio:.3f} (within 10%: {abs(ratio - 1) <= 0.10})"
    )
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--splits", type=int, default=20)
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--alpha", type=float, default=0.1)
    ap.add_argument("--total", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    r = run(a.splits, a.n, a.epsilon, a.alpha, a.total, a.seed)
    print(
        f"multilabel(total={a.total}, seed={a.seed}), loss='fnr', alpha={a.alpha}, "
        f"n={a.n}, epsilon={a.epsilon}, {a.splits} splits"
    )
    print(table(r, a.alpha))


if __name__ == "__main__":
    main()

"""The documented federations, 20 runs each: do they calibrate, as ``privcal federate plan`` says?

Run from the repository root::

    .venv/bin/python bench/federate_documented.py            # 20 runs per block
    .venv/bin/python bench/federate_documented.py --runs 40

For each block of docs/cli.md's ``privcal federate`` section that runs with DP (five sites with
ledgers, plain and SecAgg+), the netcal LeNet-5 CIFAR-10 outputs (../shared/data) are split 50/50
by ``default_rng(0).permutation``; each run deals ``K = 5`` sites of 1000 rows drawn from the
first half (a fresh draw per run) and runs FedTemp with the block's settings through
:func:`privcal.federated.simulate` (the client and server steps the Flower apps call; the
distributed block's noise is the clients' discrete Gaussian shares, as over SecAgg+), with the
default secure noise. A run *calibrates* when its release is not the fallback ``T = 1`` and its
held-out ECE (second half) is below the uncalibrated model's. Also prints ``plan_run``'s verdict
for the block and for two sites at epsilon 1 (the example of what not to run).
"""

from __future__ import annotations

import argparse
import re
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def blocks() -> list[dict[str, object]]:
    """The DP blocks of docs/cli.md's federate section: K, rounds, epsilon, delta, secagg."""
    text = (ROOT / "docs" / "cli.md").read_text()
    start = text.index("## `privcal federate`")
    section = text[start : text.index("\n## ", start + 5)]
    out = []
    for block in re.findall(r"```bash\n(.*?)```", section, flags=re.S):
        if "--epsilon" not in block or "--method fedtemp" not in block:
            continue
        out.append(
            {
                "k": int(re.findall(r"--num-nodes (\d+)", block)[0]),
                "rounds": int(re.findall(r"--rounds (\d+)", block)[0]),
                "epsilon": float(re.findall(r"--epsilon (\S+)", block)[0]),
                "delta": float(re.findall(r"--delta (\S+)", block)[0]),
                "secagg": "--secagg" in block,
            }
        )
    return out


def main() -> None:
    from privcal.data import shared_data_dir
    from privcal.federated import simulate
    from privcal.federated.plan import plan_run
    from privcal.metrics import ece
    from privcal.metrics.statistics import softmax

    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    d = np.load(shared_data_dir() / "netcal-cifar" / "lenet-5-cifar-10.npz")
    z, y = np.log(d["predictions"].astype(float)), d["ground_truth"]
    perm = np.random.default_rng(0).permutation(y.size)
    pool, held = perm[: y.size // 2], perm[y.size // 2 :]
    base = ece(softmax(z[held]), y[held])
    print(f"LeNet-5 CIFAR-10, held-out ECE uncalibrated {base:.4f}\n")
    print(
        "| block | plan | calibrated runs | fell back | held-out ECE (median, range) | T (median) |"
    )
    print("|---|---|---|---|---|---|")
    rng = np.random.default_rng(1)
    for b in blocks():
        agg = "distributed" if b["secagg"] else "trusted"
        k, rounds, eps, dlt = int(b["k"]), int(b["rounds"]), float(b["epsilon"]), float(b["delta"])
        plan = plan_run(n_clients=k, rounds=rounds, epsilon=eps, delta=dlt, aggregation=agg)
        good = fell = 0
        eces, temps = [], []
        for _ in range(args.runs):
            parts = [rng.choice(pool, 1000, replace=False) for _ in range(k)]
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                cal, _ = simulate("fedtemp", z, y, parts, rounds, eps, dlt, aggregation=agg)
            e = ece(cal.predict_proba(z[held]), y[held])
            back = bool(cal.fit_warnings_)
            fell += back
            good += (not back) and e < base
            eces.append(e)
            temps.append(cal.temperature_)
            del seen
        name = f"K={k}, T={rounds}, epsilon {eps:g}" + (", SecAgg+" if b["secagg"] else "")
        print(
            f"| {name} | {plan.expected} (Z_max {plan.z_max:.2f}) | {good} of {args.runs} | "
            f"{fell} | {np.median(eces):.4f} ({min(eces):.4f}-{max(eces):.4f}) | "
            f"{np.median(temps):.3f} |"
        )
    two = plan_run(n_clients=2, rounds=3, epsilon=1.0)
    print(f"\nTwo sites at epsilon 1: {two.summary()}")


if __name__ == "__main__":
    sys.exit(main())

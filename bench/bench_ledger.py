"""A ledger's spends and SecureNoise's share draws, side by side with the way they were done.

Part 1, an in-memory ``PrivacyOdometer`` charged ``N`` spends (a data source answering ``N``
queries, as a privacy audit does): the odometer, which keeps the record's composed terms
(``filter.SpendRecord``), against the same admission rule recomposing every earlier spend on each
new one (``compose_spends(rule, [*rows, row])``, what the odometer did before), with the same
decisions.

Part 2, ``SecureNoise.discrete_gaussian`` for one integer share: a fresh ``secrets`` key on every
draw either way; privcal re-keys its thread's ChaCha20 generator in place, the peer builds a new
generator for each draw (what it did before).

    python -m bench.bench_ledger [--spends 1000 4000] [--draws 20000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import secrets

import numpy as np

from bench._harness import best_of, machine, markdown_table
from privcal.privacy import PrivacyOdometer, SecureNoise
from privcal.privacy.filter import FilterRule, Spend, compose_spends
from privcal.privacy.noise import _discrete_gaussian


def _odometer(n: int) -> float:
    odo = PrivacyOdometer(float(n), delta_budget=1e-5, renyi_delta=5e-6)
    for i in range(n):
        odo.spend(f"q{i}", 0.5)
    return odo.spent


def _recompose(n: int) -> float:
    rule = FilterRule(float(n), 1e-5, 5e-6)
    rows: list[Spend] = []
    for _ in range(n):
        row = Spend(0.5, 0.0, None, "add/remove")
        assert rule.admits(compose_spends(rule, [*rows, row]))
        rows.append(row)
    return compose_spends(rule, rows).basic_epsilon


def _new_generator_per_draw(draws: int, sigma: float) -> int:
    from randomgen import ChaCha

    total = 0
    for _ in range(draws):
        rng = np.random.Generator(ChaCha(key=secrets.randbits(256), rounds=20))
        total += int(_discrete_gaussian(rng, sigma, 1)[0])
    return total


def _secure_noise(draws: int, sigma: float) -> int:
    noise = SecureNoise()
    return sum(int(noise.discrete_gaussian(sigma)) for _ in range(draws))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spends", type=int, nargs="+", default=[1000, 4000])
    ap.add_argument("--draws", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    print(machine())
    rows = []
    for n in args.spends:
        t_new, spent = best_of(lambda n=n: _odometer(n), args.repeats)
        t_old, spent_old = best_of(lambda n=n: _recompose(n), args.repeats)
        assert spent == spent_old
        rows.append(
            [f"ledger, {n} spends", f"{t_new:.3f}", f"{t_old:.3f}", f"{t_old / t_new:.1f}x"]
        )
    t_new, _ = best_of(lambda: _secure_noise(args.draws, 20.0), args.repeats)
    t_old, _ = best_of(lambda: _new_generator_per_draw(args.draws, 20.0), args.repeats)
    rows.append(
        [
            f"{args.draws} share draws (discrete Gaussian, sigma 20)",
            f"{t_new:.3f}",
            f"{t_old:.3f}",
            f"{t_old / t_new:.1f}x",
        ]
    )
    print(markdown_table(["workload", "privcal (s)", "peer (s)", "ratio"], rows))


if __name__ == "__main__":
    main()

"""Side-by-side: the batched luo2020 protocol vs a straightforward per-trial loop (same process).

The loop (:func:`privcal.experiments.luo2020.run_loop`) does for every trial what a user would
write: split, wrap each source in a ``DataSource`` (``SeededNoise``), fit
``PrivateTemperatureScaling`` / ``PrivateHistogramBinning`` / the one-source
``TemperatureScaling``, and score with ``privcal.metrics.ece``. The batched protocol
(:func:`privcal.experiments.luo2020.run`) computes the same thing for all trials at once (a test
shows it returns the estimators' temperatures given the same noise draws).

Usage::

    .venv/bin/python -m bench.bench_luo2020 [--trials 40] [--repeats 3] [--full]

Reports wall and CPU time (``time.process_time``), best of ``--repeats``; ``--full`` also times
the whole digits_shift Table 1 (500 trials, 15 corruptions, 30 settings each, ``--jobs 2``).
"""

from __future__ import annotations

import argparse
import os
import resource
import time
import warnings

from privcal.experiments import luo2020 as L


def _timed(fn):  # type: ignore[no-untyped-def]
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w0, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--full", action="store_true")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    data = L.load_datasets()
    one = {"fog": data["fog"]}
    full_grid = L.default_grid(899)
    grid = [full_grid[4], full_grid[14], full_grid[24]]  # one setting per panel
    print(f"load average: {os.getloadavg()}")
    print(f"settings: {[(p.panel, p.n_sources, p.n_samples, p.epsilon) for p in grid]}")
    print(f"trials per setting: {args.trials}; methods: {[m.label for m in L.METHODS]}")
    best_v = best_l = (float("inf"), float("inf"))
    for _ in range(args.repeats):
        _, wv, cv = _timed(lambda: L.run(one, trials=args.trials, grid=grid))
        _, wl, cl = _timed(lambda: L.run_loop(one, trials=args.trials, grid=grid))
        best_v = min(best_v, (wv, cv))
        best_l = min(best_l, (wl, cl))
        print(f"  batched {wv:7.2f} s wall {cv:7.2f} s cpu | loop {wl:7.2f} s wall {cl:7.2f} s cpu")
    print(f"best batched: {best_v[0]:.2f} s wall, {best_v[1]:.2f} s cpu")
    print(f"best loop:    {best_l[0]:.2f} s wall, {best_l[1]:.2f} s cpu")
    print(f"speed-up: {best_l[0] / best_v[0]:.0f}x wall, {best_l[1] / best_v[1]:.0f}x cpu")
    if args.full:
        res, w, c = _timed(lambda: L.run(trials=500, jobs=2))
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = c + kids.ru_utime + kids.ru_stime
        print(
            f"full digits_shift Table 1 (500 trials, jobs=2): {w:.0f} s wall, {cpu:.0f} s cpu "
            f"(cpu / 2 cores = {cpu / 2:.0f} s)"
        )
        print(res.table_markdown("digits_shift severity 5"))


if __name__ == "__main__":
    main()

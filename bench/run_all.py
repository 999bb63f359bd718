"""Run every benchmark and print (or write) the Markdown results.

``python -m bench.run_all [--repeats 5] [--output bench/RESULTS.md]`` from the repository root
(``make bench``). Timings are best-of-``repeats`` wall times in one process; other jobs on the
machine only make them slower, so the minimum is the fairest single number.
"""

from __future__ import annotations

import argparse
import sys

from bench import bench_metrics, bench_temperature
from bench._harness import machine


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--output", default=None, help="also write the report to this file")
    args = ap.parse_args()
    cmd = "python -m bench.run_all " + " ".join(sys.argv[1:])
    parts = [
        "# privcal benchmarks (issue 2)\n",
        f"- Machine: {machine()}",
        f"- Command: `{cmd.strip()}` (from the repository root; `make bench` runs it)",
        f"- Best of {args.repeats} repeats per implementation, `time.perf_counter`, all in one "
        "process on the same seeded data; torch limited to 2 threads. Other jobs may have been "
        "loading the machine while this ran: the minimum is reported for that reason.\n",
        bench_metrics.run(repeats=args.repeats),
        bench_temperature.run(repeats=args.repeats),
    ]
    report = "\n".join(parts)
    print(report)
    if args.output:
        with open(args.output, "w") as f:
            f.write(report)


if __name__ == "__main__":
    main()

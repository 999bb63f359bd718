"""The straightforward per-trial loop of seed 000's protocol, the reference the batched
:func:`privcal.experiments.luo2020.run` is checked and timed against."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from privcal.experiments.luo2020.simulation import METHODS, ONE_SOURCE_RANGE, GridPoint, MethodSpec
from privcal.metrics.statistics import softmax
from privcal.privacy import SeededNoise

__all__ = ["run_loop"]


def run_loop(
    data: Mapping[str, tuple],
    *,
    trials: int,
    grid: Sequence[GridPoint],
    methods: Sequence[MethodSpec] = METHODS,
    iterations: int = 5,
    n_bins: int = 15,
    nll_bound: float = 10.0,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """The straightforward per-trial loop of the same protocol (for ``bench/bench_luo2020.py``).

    For every trial: split, wrap each source in a :class:`~privcal.private.DataSource` with
    ``SeededNoise``, fit the estimators (:class:`~privcal.private.PrivateTemperatureScaling`,
    :class:`~privcal.private.PrivateHistogramBinning`, one-source
    :class:`~privcal.calibrators.TemperatureScaling`) and score them with
    :func:`privcal.metrics.ece`. Returns the same tidy rows as :func:`run`.
    """
    from privcal.calibrators import TemperatureScaling
    from privcal.metrics import ece
    from privcal.private import DataSource, PrivateHistogramBinning, PrivateTemperatureScaling

    rows = []
    for di, (name, (z, y)) in enumerate(data.items()):
        for pi, pt in enumerate(grid):
            rng = np.random.default_rng([seed, di, pi])
            eces: dict[str, list[float]] = {m.label: [] for m in methods}
            for tr in range(trials):
                perm = rng.permutation(len(y))
                k = pt.n_sources * pt.n_samples
                val, test = perm[:k].reshape(pt.n_sources, pt.n_samples), perm[k:]
                for mi, spec in enumerate(methods):
                    noise = SeededNoise(np.random.default_rng([seed, di, pi, mi, tr]))
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        if spec.kind == "none":
                            p = softmax(z[test])
                        elif spec.kind == "one_source":
                            cal = TemperatureScaling("nll", t_range=ONE_SOURCE_RANGE)
                            p = cal.fit(z[val[0]], y[val[0]]).predict_proba(z[test])
                        else:
                            srcs = [
                                DataSource(z[v], y[v], budget=pt.epsilon, noise=noise) for v in val
                            ]
                            est: Any
                            if spec.kind == "hist":
                                est = PrivateHistogramBinning(pt.epsilon, n_bins, fallback="none")
                            else:
                                est = PrivateTemperatureScaling(
                                    spec.objective,
                                    pt.epsilon,
                                    iterations,
                                    spec.t_range,
                                    spec.search,
                                    n_bins,
                                    nll_bound,
                                    fallback="none",  # seed 000 (the batched path's)
                                )
                            p = est.fit(sources=srcs).predict_proba(z[test])
                    eces[spec.label].append(ece(p, y[test], n_bins))
            for m, v in eces.items():
                row = {"dataset": name, **asdict(pt), "method": m, "ece_mean": float(np.mean(v))}
                rows.append(row | {"trials": trials})
    return rows

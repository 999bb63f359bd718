"""Seed 000's protocol run: its settings (:class:`Luo2020Config`), the data sets and
:func:`run` (see :mod:`privcal.experiments.luo2020`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from privcal._params import POSITIVE, check_int
from privcal.experiments._legacy import resolve
from privcal.experiments._progress import Progress, map_jobs, report
from privcal.experiments.luo2020.result import Luo2020Result
from privcal.experiments.luo2020.simulation import (
    MAX_ELEMENTS,
    METHODS,
    GridPoint,
    MethodSpec,
    _split,
    default_grid,
    simulate,
)
from privcal.privacy import SeededNoise

__all__ = ["Luo2020Config", "load_datasets", "run"]


def load_datasets(data: Any = None, severity: int = 5, seed: int = 0) -> dict[str, tuple]:
    """``None``: digits_shift, every corruption at ``severity``; a path: :func:`read_scores`;
    a mapping name -> (logits, labels): used as is."""
    if data is None:
        from privcal.data import digits_shift

        ds = digits_shift(seed=seed, severities=severity)
        return {c: ds.shifted[(c, severity)] for c in ds.corruptions}
    if isinstance(data, Mapping):
        return {str(k): (np.asarray(v[0], float), np.asarray(v[1])) for k, v in data.items()}
    from privcal.data import read_scores

    path = Path(data)
    sc = read_scores(path)
    if sc.logits is None:
        raise ValueError(f"{str(path)!r} holds top-label scores only; luo2020 needs full vectors.")
    return {path.stem: (sc.logits, sc.labels)}


@dataclass(frozen=True)
class Luo2020Config:
    """Settings of seed 000's protocol.

    Attributes
    ----------
    data : None, path or mapping
        ``None``: digits_shift at ``severity`` (all 15 corruptions); a scores file
        (:func:`~privcal.data.read_scores`); or ``{name: (logits, labels)}``.
    trials : int, default=500
        Random splits per setting.
    iterations : int, default=5
        ``K`` of the private searches.
    n_bins : int, default=15
    nll_bound : float, default=10
    grid : sequence of GridPoint, optional
        Default :func:`default_grid` of each data set's size.
    methods : sequence of MethodSpec, default=METHODS
    severity : int, default=5
    jobs : int, default=1
        Worker processes (one data set each); results do not depend on it.
    """

    data: Any = None
    trials: int = 500
    iterations: int = 5
    n_bins: int = 15
    nll_bound: float = 10.0
    grid: Sequence[GridPoint] | None = None
    methods: Sequence[MethodSpec] = METHODS
    severity: int = 5
    jobs: int = 1


def run(
    config: Luo2020Config | Any = None,
    *,
    seed: int = 0,
    progress: Progress | None = None,
    **settings: Any,
) -> Luo2020Result:
    """Run seed 000's protocol (see the package docstring).

    Parameters
    ----------
    config : Luo2020Config, optional
        The settings (defaults: the paper's). Keywords naming its fields override it; the old
        form ``run(data, trials=..., out=...)`` still works (``out`` deprecated: use
        ``run(...).write(out_dir)``).
    seed : int
        Seeds the splits (``default_rng([seed, dataset, point])``) and the noise
        (``SeededNoise(default_rng([seed, dataset, point, method]))``).
    progress : callable, optional
        ``progress(description, completed, total)`` after each setting.
    """
    owner = "luo2020.run"
    config, progress, out = resolve(Luo2020Config, config, settings, owner, progress, first="data")
    checked = replace(
        config,
        data=None,  # the workers get the arrays of their own data set only
        trials=check_int(config.trials, "trials", owner, low=1),
        iterations=check_int(config.iterations, "iterations", owner, low=1),
        n_bins=check_int(config.n_bins, "n_bins", owner, low=1),
        nll_bound=POSITIVE.check(config.nll_bound, "nll_bound", owner),
        methods=tuple(config.methods),
    )
    datasets = load_datasets(config.data, config.severity, seed)
    tasks = [
        (di, name, z, y, list(config.grid) if config.grid is not None else default_grid(len(y)))
        for di, (name, (z, y)) in enumerate(datasets.items())
    ]
    total = sum(len(task[4]) for task in tasks)
    jobs = check_int(config.jobs, "jobs", owner, low=1)
    start = time.perf_counter()
    done = [0]

    def tick(steps: int = 1) -> None:
        done[0] += steps
        report(progress, "luo2020", done[0], total)

    report(progress, "luo2020", 0, total)
    serial = jobs == 1  # a tick per setting; a worker's data set ticks once it is done
    fn = partial(_run_dataset, config=checked, seed=seed, tick=tick if serial else None)
    parts = map_jobs(fn, tasks, jobs, lambda i: None if serial else tick(len(tasks[i][4])))
    rows = [row for part in parts for row in part]
    res = Luo2020Result(rows, [m.label for m in checked.methods], time.perf_counter() - start)
    if out is not None:
        res.write(out)
    return res


def _run_dataset(
    di: int,
    name: str,
    z: Any,
    y: Any,
    grid: Sequence[GridPoint],
    *,
    config: Luo2020Config,
    seed: int,
    tick: Callable[[], None] | None = None,
) -> list[dict[str, Any]]:
    z = np.asarray(z, dtype=np.float64)
    y = np.asarray(y)
    trials, methods = config.trials, config.methods
    search: dict[str, Any] = dict(
        iterations=config.iterations, n_bins=config.n_bins, nll_bound=config.nll_bound
    )
    rows = []
    chunk = max(1, int(MAX_ELEMENTS // (z.shape[0] * z.shape[1])))
    for pi, pt in enumerate(grid):
        rng = np.random.default_rng([seed, di, pi])
        parts: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {m: [] for m in range(len(methods))}
        for ci, start in enumerate(range(0, trials, chunk)):
            size = min(chunk, trials - start)
            setting = _split(z, y, size, pt.n_sources, pt.n_samples, rng)
            for mi, spec in enumerate(methods):
                noise = SeededNoise(np.random.default_rng([seed, di, pi, mi, ci]))
                parts[mi].append(simulate(spec, setting, pt.epsilon, noise, **search))
        for mi, spec in enumerate(methods):
            e = np.concatenate([p[0] for p in parts[mi]])
            t = np.concatenate([p[1] for p in parts[mi]])
            temp = float(np.nanmedian(t)) if np.isfinite(t).any() else float("nan")
            row = {"dataset": name, **asdict(pt), "method": spec.label, "ece_mean": float(e.mean())}
            std = float(e.std(ddof=1)) if e.size > 1 else 0.0
            row |= dict(ece_median=float(np.median(e)), ece_std=std, temperature_median=temp)
            rows.append(row | {"trials": trials})
        if tick is not None:
            tick()
    return rows

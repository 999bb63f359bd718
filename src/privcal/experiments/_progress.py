"""The progress callback every experiment's ``run`` takes (the CLI passes one; experiments
print nothing themselves), :func:`map_jobs` (an experiment's independent tasks, optionally in
worker processes) and :func:`derived_seed` (independent seeded streams).

A callback is called as ``progress(description)`` for a message, or
``progress(description, completed, total)`` when the run counts steps (``completed`` of
``total`` done). :func:`privcal.cli._common.progress_callback` turns it into a Rich bar.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["Progress", "derived_seed", "map_jobs", "report"]

#: ``progress(description, completed=None, total=None)``.
Progress = Callable[..., None]


def report(
    progress: Progress | None,
    description: str,
    completed: int | None = None,
    total: int | None = None,
) -> None:
    """Call ``progress`` (if any) with a message, or with ``completed`` of ``total`` steps."""
    if progress is None:
        return
    if total is None:
        progress(description)
    else:
        progress(description, completed, total)


def map_jobs(
    fn: Callable[..., Any], tasks: Sequence[tuple], jobs: int, done: Callable[[int], None]
) -> list[Any]:
    """``[fn(*task) for task in tasks]``, in ``jobs`` worker processes when ``jobs > 1`` (the
    results do not depend on it); ``done(i)`` is called as task ``i`` finishes."""
    if jobs == 1:
        out = []
        for i, task in enumerate(tasks):
            out.append(fn(*task))
            done(i)
        return out
    from concurrent.futures import ProcessPoolExecutor, as_completed

    results: dict[int, Any] = {}
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(fn, *task): i for i, task in enumerate(tasks)}
        for fut in as_completed(futures):
            results[futures[fut]] = fut.result()
            done(futures[fut])
    return [results[i] for i in range(len(tasks))]


def derived_seed(*keys: int) -> int:
    """An integer seed derived from ``keys`` (independent streams per split and method)."""
    return int(np.random.SeedSequence(list(keys)).generate_state(1)[0])

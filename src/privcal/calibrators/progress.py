"""Progress of long fits, for whoever asks: silent unless a caller installs a reporter.

Iterative fits (vector, matrix and Platt scaling's trust-region Newton) call :func:`report` once
per iteration. With no reporter installed that is a no-op, so the library prints nothing; the
CLI's ``privcal fit`` installs one (:func:`fit_progress`) that draws a Rich status line once a
fit has run for a few seconds. A reporter is a context-local setting (:mod:`contextvars`), so
concurrent fits in other threads or tasks are unaffected.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

__all__ = ["FitProgress", "fit_progress", "report"]


@dataclass(frozen=True)
class FitProgress:
    """One iteration of a fit: what is fitted, the iteration (from 1, counted across the
    majorise-minimise rounds of one fit), the objective there and the seconds since the fit
    began."""

    fit: str
    iteration: int
    objective: float
    elapsed: float


_REPORTER: ContextVar[Callable[[FitProgress], None] | None] = ContextVar(
    "privcal_fit_progress", default=None
)


@contextmanager
def fit_progress(callback: Callable[[FitProgress], None]) -> Iterator[None]:
    """Call ``callback(FitProgress(...))`` at each iteration of the iterative fits made inside
    the block (in this thread or task).

    Examples
    --------
    >>> import numpy as np
    >>> from privcal.calibrators import VectorScaling
    >>> seen = []
    >>> z = np.random.default_rng(0).normal(size=(200, 3)); y = z.argmax(1)
    >>> with fit_progress(seen.append):
    ...     _ = VectorScaling().fit(z, y)
    >>> seen[0].fit, seen[0].iteration
    ('vector scaling', 1)
    """
    token = _REPORTER.set(callback)
    try:
        yield
    finally:
        _REPORTER.reset(token)


class Reporter:
    """Counts the iterations of one fit and passes them to the installed callback, if any."""

    def __init__(self, fit: str) -> None:
        self.fit = fit
        self.iteration = 0
        self.start = time.perf_counter()
        self.callback = _REPORTER.get()

    def __call__(self, objective: float) -> None:
        self.iteration += 1
        if self.callback is not None:
            elapsed = time.perf_counter() - self.start
            self.callback(FitProgress(self.fit, self.iteration, float(objective), elapsed))


def report(fit: str) -> Reporter:
    """A :class:`Reporter` for one fit called ``fit`` (a no-op without :func:`fit_progress`)."""
    return Reporter(fit)

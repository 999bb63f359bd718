"""One-dimensional searches shared by the non-private and the private temperature fits.

Both work on a bracket ``[lo, hi]`` and make exactly ``evaluations`` calls of the objective, so a
private caller that adds noise to every call knows the exact number of releases it must pay for.
The searches run in ``log T`` (``geometric=True``): a temperature range such as [0.05, 20] spans
two and a half decades and a ratio, not a difference, is the natural resolution.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["GOLDEN", "bisect_sign", "golden_section"]

#: 1 / golden ratio: each golden-section step keeps this fraction of the bracket.
GOLDEN = (np.sqrt(5.0) - 1.0) / 2.0


def _to(x: float, geometric: bool) -> float:
    return float(np.log(x)) if geometric else x


def _from(u: float, geometric: bool) -> float:
    return float(np.exp(u)) if geometric else u


def golden_section(
    f: Callable[[float], float],
    lo: float,
    hi: float,
    evaluations: int,
    *,
    geometric: bool = True,
) -> tuple[float, tuple[float, float]]:
    """Golden-section minimisation of a unimodal ``f`` with exactly ``evaluations`` calls.

    The first two calls place the interior points; each further call shrinks the bracket by the
    factor :data:`GOLDEN`. After ``E >= 2`` calls the bracket has width
    ``GOLDEN ** (E - 1)`` of the original (in log space when ``geometric``). Returns the midpoint
    of the final bracket (no extra evaluation) and the bracket.
    """
    if evaluations < 2:
        raise ValueError(f"golden_section needs at least 2 evaluations; got {evaluations}.")
    a, b = _to(lo, geometric), _to(hi, geometric)
    x1 = b - GOLDEN * (b - a)
    x2 = a + GOLDEN * (b - a)
    f1, f2 = f(_from(x1, geometric)), f(_from(x2, geometric))
    for _ in range(evaluations - 2):
        if f1 <= f2:  # minimum in [a, x2]
            b, x2, f2 = x2, x1, f1
            x1 = b - GOLDEN * (b - a)
            f1 = f(_from(x1, geometric))
        else:  # minimum in [x1, b]
            a, x1, f1 = x1, x2, f2
            x2 = a + GOLDEN * (b - a)
            f2 = f(_from(x2, geometric))
    if f1 <= f2:
        b = x2
    else:
        a = x1
    return _from(0.5 * (a + b), geometric), (_from(a, geometric), _from(b, geometric))


def bisect_sign(
    g: Callable[[float], float],
    lo: float,
    hi: float,
    evaluations: int,
    *,
    geometric: bool = True,
) -> tuple[float, tuple[float, float]]:
    """Bisection for the root of an increasing ``g`` with exactly ``evaluations`` calls.

    Each call evaluates ``g`` at the bracket midpoint and keeps the half whose ends differ in
    sign, halving the bracket. Only the sign of ``g`` is used, so a noisy ``g`` still narrows the
    bracket correctly whenever the noise does not flip the sign. Returns the midpoint of the final
    bracket and the bracket.
    """
    if evaluations < 1:
        raise ValueError(f"bisect_sign needs at least 1 evaluation; got {evaluations}.")
    a, b = _to(lo, geometric), _to(hi, geometric)
    for _ in range(evaluations):
        m = 0.5 * (a + b)
        if g(_from(m, geometric)) < 0.0:
            a = m
        else:
            b = m
    return _from(0.5 * (a + b), geometric), (_from(a, geometric), _from(b, geometric))

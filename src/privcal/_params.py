"""Parameter checks shared by every public function and estimator.

Every error follows one template (scikit-learn's): it names the parameter, its owner, what is
allowed and what was received, e.g.::

    The 'n_bins' parameter of ece must be an int >= 1. Got 0 instead.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable
from typing import Any

import numpy as np

__all__ = [
    "check_int",
    "check_option",
    "check_probability",
    "check_range",
    "check_real",
]


def _fail(name: str, owner: str, allowed: str, value: Any) -> ValueError:
    return ValueError(
        f"The {name!r} parameter of {owner} must be {allowed}. Got {value!r} instead."
    )


def check_int(value: Any, name: str, owner: str, *, low: int | None = None) -> int:
    """Return ``value`` as an int, or raise naming ``name`` if it is not an integer >= ``low``."""
    allowed = "an int" + (f" >= {low}" if low is not None else "")
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise _fail(name, owner, allowed, value)
    if low is not None and value < low:
        raise _fail(name, owner, allowed, value)
    return int(value)


def check_real(
    value: Any,
    name: str,
    owner: str,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """Return ``value`` as a finite float inside the interval, or raise naming ``name``.

    The interval is written in the message in the usual notation, e.g. ``(0, inf)`` for epsilon.
    """
    lo_s = "-inf" if low is None else f"{low:g}"
    hi_s = "inf" if high is None else f"{high:g}"
    interval = ("(" if low_open or low is None else "[") + f"{lo_s}, {hi_s}"
    interval += ")" if high_open or high is None else "]"
    allowed = f"a finite real number in {interval}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _fail(name, owner, allowed, value)
    v = float(value)
    if not np.isfinite(v):
        raise _fail(name, owner, allowed, value)
    if low is not None and (v < low or (low_open and v == low)):
        raise _fail(name, owner, allowed, value)
    if high is not None and (v > high or (high_open and v == high)):
        raise _fail(name, owner, allowed, value)
    return v


def check_probability(value: Any, name: str, owner: str) -> float:
    """A level such as alpha or delta: a float strictly inside (0, 1)."""
    return check_real(value, name, owner, low=0.0, high=1.0, low_open=True, high_open=True)


def check_option(value: Any, name: str, owner: str, options: Iterable[Any]) -> Any:
    """Return ``value`` if it is one of ``options``, or raise listing them."""
    opts = tuple(options)
    if value not in opts:
        allowed = "one of " + ", ".join(repr(o) for o in opts)
        raise _fail(name, owner, allowed, value)
    return value


def check_range(value: Any, name: str, owner: str) -> tuple[float, float]:
    """A positive, strictly increasing pair ``(low, high)`` such as a temperature range."""
    allowed = "a pair (low, high) of finite floats with 0 < low < high"
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        raise _fail(name, owner, allowed, value) from None
    if not (np.isfinite(lo) and np.isfinite(hi) and 0.0 < lo < hi):
        raise _fail(name, owner, allowed, value)
    return lo, hi

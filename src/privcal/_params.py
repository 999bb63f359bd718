"""Parameter checks shared by every public function and estimator.

Every error follows one template (scikit-learn's): it names the parameter, its owner, what is
allowed and what was received, e.g.::

    The 'n_bins' parameter of ece must be an int >= 1. Got 0 instead.

Estimators declare their rules once, as scikit-learn does (``_parameter_constraints``, a
:class:`Constraints`), and :func:`validate_params` checks them; functions use the shared rules
(``EPSILON.check(epsilon, "epsilon", owner)``).
"""

from __future__ import annotations

import functools
import numbers
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import numpy as np

__all__ = [
    "EPSILON",
    "FRACTION",
    "NON_NEGATIVE",
    "POSITIVE",
    "PROBABILITY",
    "SEED",
    "Constraint",
    "Constraints",
    "Int",
    "Options",
    "Range",
    "Real",
    "ValidatedParams",
    "check_int",
    "check_option",
    "check_probability",
    "check_range",
    "check_real",
    "renamed",
    "renamed_aliases",
    "renamed_attribute",
    "renamed_params",
    "validate_params",
    "warn_renamed",
]

_F = TypeVar("_F", bound=Callable[..., Any])


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
    below = low is not None and (v < low or (low_open and v == low))
    above = high is not None and (v > high or (high_open and v == high))
    if not np.isfinite(v) or below or above:
        raise _fail(name, owner, allowed, value)
    return v


def check_probability(value: Any, name: str, owner: str) -> float:
    """A level such as alpha or delta: a float strictly inside (0, 1) (:data:`PROBABILITY`)."""
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


class Constraint:
    """A rule for one parameter: :meth:`check` returns the value (an int as ``int``, a real as
    ``float``) or raises the message above."""

    def check(self, value: Any, name: str, owner: str) -> Any:
        raise NotImplementedError


@dataclass(frozen=True)
class Int(Constraint):
    """An integer (not a bool) ``>= low`` (:func:`check_int`)."""

    low: int | None = None

    def check(self, value: Any, name: str, owner: str) -> int:
        return check_int(value, name, owner, **vars(self))


@dataclass(frozen=True)
class Real(Constraint):
    """A finite real from ``low`` to ``high``, ends closed unless ``*_open``: :func:`check_real`."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def check(self, value: Any, name: str, owner: str) -> float:
        return check_real(value, name, owner, **vars(self))


class Options(Constraint):
    """One of ``options`` (:func:`check_option`)."""

    def __init__(self, *options: Any) -> None:
        self.options = options

    def check(self, value: Any, name: str, owner: str) -> Any:
        return check_option(value, name, owner, self.options)


class Range(Constraint):
    """A pair ``(low, high)`` with ``0 < low < high`` (:func:`check_range`)."""

    def check(self, value: Any, name: str, owner: str) -> tuple[float, float]:
        return check_range(value, name, owner)


#: A real ``> 0``: a scale, a bound, a rate.
POSITIVE = Real(0.0, low_open=True)
#: A real ``>= 0``: a strength, a decay, a spent budget.
NON_NEGATIVE = Real(0.0)
#: A privacy budget epsilon: a real ``> 0``.
EPSILON = POSITIVE
#: A fraction such as a sampling rate: a real in ``(0, 1]``.
FRACTION = Real(0.0, 1.0, low_open=True)
#: A level such as alpha or delta: a real strictly inside ``(0, 1)``.
PROBABILITY = Real(0.0, 1.0, low_open=True, high_open=True)
#: A seed: an int ``>= 0``.
SEED = Int(0)


class Constraints(dict[str, Constraint | list[Any]]):
    """An estimator's ``_parameter_constraints``: each parameter's rule, in the order checked,
    e.g. ``Constraints(n_bins=Int(1), nll_bound=[POSITIVE, None])``. A rule is a
    :class:`Constraint`, or a list ``[constraint, *values]`` whose ``values`` pass as they are.
    A subclass extends its base's: ``Constraints(Base._parameter_constraints, mode=...)``."""


def validate_params(obj: Any, constraints: Constraints, owner: str) -> dict[str, Any]:
    """Check the attributes of ``obj`` named in ``constraints``, in order; the checked values."""
    checked = {}
    for name, rule in constraints.items():
        value = getattr(obj, name)
        constraint, *passes = rule if isinstance(rule, list) else [rule]
        if any(value is p or (isinstance(value, str) and value == p) for p in passes):
            checked[name] = value
        else:
            checked[name] = constraint.check(value, name, owner)
    return checked


class ValidatedParams:
    """Base of the estimators (calibrators, conformal, trainers): :meth:`_validate_params` checks
    the class's ``_parameter_constraints``, naming its ``_owner`` (else the class) in messages.
    A rule across parameters is added by an override, after or before ``super()``."""

    _parameter_constraints: ClassVar[Constraints] = Constraints()

    def _validate_params(self) -> dict[str, Any]:
        owner = getattr(self, "_owner", type(self).__name__)
        return validate_params(self, self._parameter_constraints, owner)


def warn_renamed(kind: str, old: str, new: str, owner: str, stacklevel: int) -> None:
    warnings.warn(
        f"The {old!r} {kind} of {owner} is deprecated and will be removed in the next release; "
        f"use {new!r} instead.",
        DeprecationWarning,
        stacklevel=stacklevel + 1,
    )


def renamed(*, old: str, new: str, owner: str) -> Callable[[_F], _F]:
    """Decorate ``owner`` so that the keyword ``old`` still works as ``new``, for one release.

    ``f(old=v)`` calls ``f(new=v)`` and emits a ``DeprecationWarning`` naming ``new``; both
    together raise ``TypeError``. Positions are unchanged (the parameter keeps its place), so
    positional calls need nothing. Decorators stack, one per renamed parameter; the wrapper
    keeps ``f``'s signature (``inspect.signature`` follows ``__wrapped__``), which is what
    scikit-learn's ``get_params`` reads on ``__init__``. The renames are recorded in
    ``__renamed__`` (``{old: new}``) for :func:`renamed_params`.
    """

    def decorate(func: _F) -> _F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if old in kwargs:
                kwargs = renamed_params(kwargs, {old: new}, owner)
            return func(*args, **kwargs)

        renames = dict(getattr(func, "__renamed__", {}))
        renames[old] = new
        wrapper.__renamed__ = renames  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate


def renamed_aliases(module: str, aliases: dict[str, tuple[str, Any]]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that still serves each deprecated name of ``aliases``
    (``{old: (new, object)}``) for one release, with a ``DeprecationWarning`` naming the new one."""

    def __getattr__(name: str) -> Any:
        if name in aliases:
            new, obj = aliases[name]
            warn_renamed("name", name, new, module, 2)
            return obj
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__


def renamed_params(params: dict[str, Any], renames: dict[str, str], owner: str) -> dict[str, Any]:
    """``params`` with each deprecated key of ``renames`` (``{old: new}``) moved to its new name.

    Warns ``DeprecationWarning`` once per old key found; raises ``TypeError`` if the old and the
    new name are both given.
    """
    out = dict(params)
    for old, new in renames.items():
        if old not in out:
            continue
        if new in out:
            raise TypeError(
                f"{owner} got both {old!r} and its new name {new!r}; pass only {new!r}."
            )
        warn_renamed("parameter", old, new, owner, stacklevel=3)
        out[new] = out.pop(old)
    return out


class renamed_attribute:
    """Class attribute: the deprecated attribute name ``old`` reads and writes ``new``.

    ``obj.old`` returns ``obj.new`` and ``obj.old = v`` sets ``obj.new``, each with a
    ``DeprecationWarning`` naming ``new`` (for one release), e.g. ``bins = renamed_attribute(
    "n_bins")`` in a class body. A missing ``new`` raises ``AttributeError`` as usual.
    """

    def __init__(self, new: str) -> None:
        self.new = new
        self.old = new

    def __set_name__(self, owner: type, name: str) -> None:
        self.old = name

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        if obj is None:
            return self
        warn_renamed("attribute", self.old, self.new, type(obj).__name__, stacklevel=2)
        return getattr(obj, self.new)

    def __set__(self, obj: Any, value: Any) -> None:
        warn_renamed("attribute", self.old, self.new, type(obj).__name__, stacklevel=2)
        setattr(obj, self.new, value)

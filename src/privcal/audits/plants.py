"""Planted defects: realistic bugs put into the real code path, which an audit must catch.

A :class:`Plant` is registered with its audit (``register(..., plants=...)``). Its ``patch`` is a
context manager factory that replaces one or a few attributes of the library's own modules
(a function, a method, a property: :func:`patched`) for the duration of the ``with`` block and
restores every one of them on exit, error or not, so the audit then calls the very entry point a
user calls, with the defect inside it. ``privcal audit NAME --plant DEFECT`` and the test suite
(``tests/audits/test_audit_plants.py``) run every registered plant; a passing audit means
something only because the same audit fails with its plants in.

The plants shared by several areas live here: a seed reused by every run, and the defects of the
distributed share law (:mod:`privcal.privacy.distributed`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import weakref
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "Plant",
    "first_party_skips_share",
    "patched",
    "reused_seed",
    "share_std_over_t",
    "shares_sized_for_k",
]


@dataclass(frozen=True)
class Plant:
    """A defect planted into an audited entry point.

    Attributes
    ----------
    summary : str
        One line: the bug, as it would appear in the code.
    patch : callable
        ``patch()`` returns a context manager inside which the defect is in the real code path
        (and out again after it).
    runs : int or None
        Runs per neighbour that suffice for the audit to catch it (the test suite runs the plant
        at this size; ``None``: the audit's default). Where it is below the default, the reason
        it suffices is stated where the plant is defined.
    """

    summary: str
    patch: Callable[[], AbstractContextManager[Any]]
    runs: int | None = None


_INHERITED = object()


@contextlib.contextmanager
def patched(
    *changes: tuple[Any, str, Any], clear: Callable[[], None] | None = None
) -> Iterator[None]:
    """Set ``setattr(target, name, value)`` for each ``(target, name, value)``; restore on exit.

    ``clear`` (e.g. a cache's ``cache_clear``) is called after patching and again after
    restoring, so nothing computed with the defect in outlives the block (and nothing computed
    before it is reused inside).
    """
    # a class keeps its own descriptor (a classmethod, a property), restored as it was; one it
    # inherits is shadowed, then the shadow removed
    saved = [
        (
            target,
            name,
            vars(target).get(name, _INHERITED)
            if isinstance(target, type)
            else getattr(target, name),
        )
        for target, name, _ in changes
    ]
    try:
        for target, name, value in changes:
            setattr(target, name, value)
        if clear is not None:
            clear()
        yield
    finally:
        for target, name, value in reversed(saved):
            if value is _INHERITED:
                delattr(target, name)
            else:
                setattr(target, name, value)
        if clear is not None:
            clear()


def reused_seed(*modules: Any, seed: int = 0) -> Callable[[], AbstractContextManager[Any]]:
    """Every ``resolve_noise`` of ``modules`` returns a fresh ``SeededNoise(seed)``: a deployment
    that hard-codes its seed, so each run's noise is the same and the output a function of the
    data alone."""
    from privcal.privacy import SeededNoise

    def resolve(noise: Any, owner: Any, **kwargs: Any) -> Any:
        return SeededNoise(seed)

    return lambda: patched(*((m, "resolve_noise", resolve) for m in modules))


def _plan_cache_clear() -> None:
    from privcal.federated import dp as dp_module

    dp_module._group_plan.cache_clear()  # plans are cached by their public parameters


def share_std_over_t() -> AbstractContextManager[Any]:
    """Each party's share drawn with std ``1/t`` (instead of ``1/sqrt(t)``) of one release's.

    The real ``ShareLaw.sample`` is called with ``t^2`` in place of ``t``: a discrete Gaussian
    share ``N_Z(0, sigma^2 / t^2)``, a discrete Laplace share ``NB(1/t^2) - NB(1/t^2)``. Any
    ``t`` shares then sum to ``1/t`` of the claimed variance (std ``sqrt(t)`` times too small),
    while the report still claims the full release: invisible at ``t = 1``, where ``t^2 = t``.
    """
    from privcal.privacy.distributed import ShareLaw

    real = ShareLaw.sample

    def sample(self: Any, noise: Any, shape: tuple[int, ...]) -> np.ndarray:
        return real(dataclasses.replace(self, threshold=self.threshold**2), noise, shape)

    return patched((ShareLaw, "sample", sample))


def shares_sized_for_k() -> AbstractContextManager[Any]:
    """The plans' ``ShareLaw`` built with ``n_parties`` where the threshold ``t`` belongs: each
    share ``sqrt(K / t)`` times too small in std once ``S - t`` parties collude."""
    from privcal.privacy.distributed import DistributedPlan

    def for_k(real: Callable[..., Any]) -> classmethod[Any, Any, Any]:
        def build(cls: Any, *args: Any, **kwargs: Any) -> Any:
            plan = real(*args, **kwargs)
            law = dataclasses.replace(plan.law, threshold=plan.n_parties)
            return dataclasses.replace(plan, law=law)

        return classmethod(build)

    return patched(
        (DistributedPlan, "laplace", for_k(DistributedPlan.laplace)),
        (DistributedPlan, "gaussian", for_k(DistributedPlan.gaussian)),
        clear=_plan_cache_clear,
    )


def first_party_skips_share() -> AbstractContextManager[Any]:
    """The first upload to each secure sum (party 0, the audited one) is its encoded value
    without its share, as a loop over parties starting at 1 would draw."""
    from privcal.privacy.distributed import DistributedPlan

    real = DistributedPlan.share
    rings: weakref.WeakSet[Any] = weakref.WeakSet()

    def share(self: Any, value: Any, noise: Any, ring: Any) -> np.ndarray:
        if ring in rings:
            return real(self, value, noise, ring)
        rings.add(ring)
        x = np.asarray(value, dtype=np.float64).reshape(self.shape)
        return ring.to_ring(self.encoding.encode(x, noise))

    return patched((DistributedPlan, "share", share))

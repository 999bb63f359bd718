"""Old call forms of the experiments' ``run`` (kept for one release, with a
:class:`DeprecationWarning` naming the new form).

Every ``run`` now takes ``run(config, *, seed=0, progress=None)`` and returns a result whose
``write(out_dir)`` writes the files. Before, ``run`` took its settings as keywords, wrote its
files itself (``out``/``out_dir``), drew its own Rich bar (``progress=True``, ``console``) and
named the number of replications ``R``/``repeats``/``splits``.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from dataclasses import fields, replace
from os import PathLike
from pathlib import Path
from typing import Any, TypeVar, cast

__all__ = ["path_form", "resolve"]

C = TypeVar("C")
F = TypeVar("F", bound=Callable[..., Any])


def _warn(message: str, stacklevel: int = 4) -> None:
    warnings.warn(message, DeprecationWarning, stacklevel=stacklevel)


def _rename(
    settings: dict[str, Any], renames: dict[str, str] | None, owner: str, level: int
) -> None:
    """Move each old keyword of ``settings`` to its new name (``renames``), with a warning."""
    for old, new in (renames or {}).items():
        if old in settings:
            _warn(f"{owner}({old}=...) is deprecated; use {new}=....", level)
            settings[new] = settings.pop(old)


def resolve(
    cls: type[C],
    config: Any,
    settings: dict[str, Any],
    owner: str,
    progress: Any = None,
    *,
    first: str,
    renames: dict[str, str] | None = None,
) -> tuple[C, Any, Path | None]:
    """Return ``(config, progress, out_dir)`` from a ``run`` call's ``config`` and keywords.

    ``config`` is an instance of ``cls`` (the new form), ``None`` (defaults) or, in the old form,
    the value of the config field ``first`` (e.g. the data). Keywords that name fields of ``cls``
    override the config; ``renames`` maps old keyword names to new ones (deprecated);
    ``out``/``out_dir`` (deprecated: use ``run(...).write(out_dir)``) is returned as ``out_dir``;
    ``console`` (deprecated) is ignored; a boolean ``progress`` (deprecated) means no callback.
    """
    out = None
    for name in ("out", "out_dir"):
        if name in settings:
            out = settings.pop(name)
            _warn(f"{owner}({name}=...) is deprecated; use {owner}(...).write(out_dir).")
    if "console" in settings:
        settings.pop("console")
        _warn(f"{owner}(console=...) is deprecated and ignored; pass progress=callable.")
    if isinstance(progress, bool):
        _warn(f"{owner}(progress=bool) is deprecated; pass a callable or None.")
        progress = None
    _rename(settings, renames, owner, 5)
    known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(settings) - known)
    if unknown:
        raise TypeError(f"{owner}() got unexpected keyword argument(s) {', '.join(unknown)}")
    if isinstance(config, cls):
        config = replace(config, **settings)  # type: ignore[type-var]
    else:
        if config is not None:
            settings[first] = config
        config = cls(**settings)
    return config, progress, None if out is None else Path(out)


def path_form(full: Any, quick: Any, renames: dict[str, str] | None = None) -> Callable[[F], F]:
    """Let an experiment's ``run(config=full, *, seed, progress)`` also take the deprecated
    ``run(out_dir, seed=..., progress=..., quick=..., **changes)``: it runs ``quick`` (if
    ``quick=True``) or ``full`` with ``changes`` (``None`` values skipped; ``renames`` maps old
    keyword names to config fields), writes the files to ``out_dir`` and returns the Markdown
    path, as before."""

    def decorate(run: F) -> F:
        owner = f"{run.__module__.rsplit('.', 1)[-1]}.run"

        @functools.wraps(run)
        def wrapper(config: Any = full, **kwargs: Any) -> Any:
            if not isinstance(config, (str, PathLike)):
                return run(config, **kwargs)
            _warn(
                f"{owner}(out_dir, ...) is deprecated; use "
                f"{owner}(QUICK if quick else FULL, seed=seed).write(out_dir).",
                3,
            )
            preset = quick if kwargs.pop("quick", False) else full
            changes = {k: kwargs.pop(k) for k in list(kwargs) if k not in ("seed", "progress")}
            _rename(changes, renames, owner, 4)
            changes = {k: v for k, v in changes.items() if v is not None}
            return run(replace(preset, **changes), **kwargs).write(Path(config))

        return cast(F, wrapper)

    return decorate

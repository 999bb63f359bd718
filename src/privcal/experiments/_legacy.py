"""Old call forms of the experiments' ``run`` (kept for one release, with a
:class:`DeprecationWarning` naming the new form).

Every ``run`` now takes ``run(config, *, seed=0, progress=None)`` and returns a result whose
``write(out_dir)`` writes the files. Before, ``run`` took its settings as keywords, wrote its
files itself (``out``/``out_dir``), drew its own Rich bar (``progress=True``, ``console``) and
named the number of replications ``R``/``repeats``/``splits``.
"""

from __future__ import annotations

import warnings
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["resolve", "warn_path_form"]

C = TypeVar("C")


def _warn(message: str) -> None:
    warnings.warn(message, DeprecationWarning, stacklevel=4)


def resolve(
    cls: type[C],
    config: Any,
    settings: dict[str, Any],
    owner: str,
    progress: Any = None,
    *,
    first: str | None = None,
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
    for old, new in (renames or {}).items():
        if old in settings:
            _warn(f"{owner}({old}=...) is deprecated; use {new}=....")
            settings[new] = settings.pop(old)
    known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(settings) - known)
    if unknown:
        raise TypeError(f"{owner}() got unexpected keyword argument(s) {', '.join(unknown)}")
    if isinstance(config, cls):
        config = replace(config, **settings)  # type: ignore[type-var]
    else:
        if config is not None:
            if first is None:
                raise TypeError(f"{owner}() takes a {cls.__name__}, got {type(config).__name__}")
            settings[first] = config
        config = cls(**settings)
    return config, progress, None if out is None else Path(out)


def warn_path_form(owner: str) -> None:
    """Warn that ``run(out_dir, seed=..., quick=...)`` (which wrote the files and returned the
    Markdown path) is deprecated."""
    _warn(
        f"{owner}(out_dir, ...) is deprecated; use "
        f"{owner}(QUICK if quick else FULL, seed=seed).write(out_dir)."
    )

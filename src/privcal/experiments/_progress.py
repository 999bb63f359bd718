"""The progress callback every experiment's ``run`` takes (the CLI passes one; experiments
print nothing themselves).

A callback is called as ``progress(description)`` for a message, or
``progress(description, completed, total)`` when the run counts steps (``completed`` of
``total`` done). :func:`privcal.cli._common.progress_callback` turns it into a Rich bar.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Progress", "report"]

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

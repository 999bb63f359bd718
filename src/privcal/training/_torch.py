"""Lazy access to the ``torch`` extra (``torch`` and ``opacus``).

``import privcal`` and ``import privcal.training`` never import torch. Code that needs it calls
:func:`require_torch`, which raises :class:`MissingTorchError` (an :class:`ImportError`) saying
``pip install privcal[torch]`` when torch or Opacus is not installed.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

__all__ = ["INSTALL_HINT", "MissingTorchError", "require_torch"]

INSTALL_HINT = "pip install privcal[torch]"


class MissingTorchError(ImportError):
    """Raised when a ``privcal.training`` feature is used without the ``torch`` extra."""


def _import(name: str) -> ModuleType:
    """Import one module (the single place tests monkeypatch to simulate a missing extra)."""
    return importlib.import_module(name)


def require_torch(feature: str = "privcal.training") -> tuple[Any, Any]:
    """Return ``(torch, opacus)`` or raise :class:`MissingTorchError` naming ``feature``.

    Parameters
    ----------
    feature : str
        What needs torch (used in the message).

    Raises
    ------
    MissingTorchError
        ``"<feature> needs the torch extra (torch and opacus): pip install privcal[torch]"``.
    """
    try:
        torch = _import("torch")
        opacus = _import("opacus")
    except ImportError as exc:
        raise MissingTorchError(
            f"{feature} needs the torch extra (torch and opacus): {INSTALL_HINT}. "
            f"Import failed with: {exc}"
        ) from exc
    return torch, opacus

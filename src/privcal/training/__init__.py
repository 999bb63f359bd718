"""DP training and DP recalibration (the ``torch`` extra: ``pip install privcal[torch]``).

* :class:`SGDTrainer`, :class:`DPSGDTrainer` (Opacus, Poisson sampling, RDP/PRV accountant),
  :class:`DPSGLDTrainer` / :class:`DPSGLDOptimizer` (seed 004), small models;
* :class:`DPTemperatureScaling`, :class:`DPPlattScaling` (seed 001, DP-SGD on validation logits)
  and :class:`DPRecalibration` (seed 001 Alg. 1, parallel composition over the split).

Importing this package never imports torch. The calibrators and the pipeline are defined here
and need torch only in ``fit``; the torch-backed names (trainers, models, the DP-SGLD optimizer)
are loaded on first access, and without the extra they raise :class:`MissingTorchError`
(an ``ImportError``) saying ``pip install privcal[torch]``.
"""

from __future__ import annotations

import importlib
from typing import Any

from privcal.training._torch import INSTALL_HINT, MissingTorchError, require_torch
from privcal.training.dp_sgd import per_sample_grads
from privcal.training.pipeline import DPRecalibration
from privcal.training.recalibration import DPPlattScaling, DPTemperatureScaling

__all__ = [
    "INSTALL_HINT",
    "DPPlattScaling",
    "DPRecalibration",
    "DPSGDTrainer",
    "DPSGLDOptimizer",
    "DPSGLDTrainer",
    "DPTemperatureScaling",
    "MissingTorchError",
    "SGDTrainer",
    "SmallCNN",
    "gdp_mu",
    "make_model",
    "per_sample_grads",
    "require_torch",
]

_LAZY = {
    "SGDTrainer": "trainers",
    "DPSGDTrainer": "trainers",
    "DPSGLDTrainer": "sgld",
    "DPSGLDOptimizer": "sgld",
    "gdp_mu": "sgld",
    "make_model": "models",
    "SmallCNN": "models",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module = importlib.import_module(f"privcal.training.{_LAZY[name]}")
        return getattr(module, name)
    raise AttributeError(f"module 'privcal.training' has no attribute {name!r}")

"""Small torch models for the paper protocols: logistic regression, an MLP and a digits CNN.

All three are made only of layers Opacus computes per-sample gradients for (``Linear``,
``Conv2d``, ``ReLU``, pooling, ``Flatten``); none has batch statistics (no BatchNorm), so each is
accepted by :class:`opacus.validators.ModuleValidator`. Every model maps a float32 batch to
``N x C`` logits.
"""

from __future__ import annotations

from typing import Any

from privcal._params import check_int, check_option
from privcal.training._torch import require_torch

torch, _opacus = require_torch("privcal.training.models")
nn = torch.nn

__all__ = ["MODELS", "SmallCNN", "logistic_regression", "make_model", "mlp"]

#: Names accepted by :func:`make_model`.
MODELS = ("logistic", "mlp", "cnn")


def logistic_regression(n_features: int, n_classes: int) -> Any:
    """Multinomial logistic regression: one ``Linear(n_features, n_classes)`` layer.

    For two classes the softmax of two logits is the logistic model of their difference
    ``sigma((w_1 - w_0)^T x + b_1 - b_0)``.
    """
    d = check_int(n_features, "n_features", "logistic_regression", low=1)
    c = check_int(n_classes, "n_classes", "logistic_regression", low=2)
    return nn.Linear(d, c)


def mlp(n_features: int, n_classes: int, hidden: int = 64) -> Any:
    """``Linear(d, hidden) -> ReLU -> Linear(hidden, C)``."""
    d = check_int(n_features, "n_features", "mlp", low=1)
    c = check_int(n_classes, "n_classes", "mlp", low=2)
    h = check_int(hidden, "hidden", "mlp", low=1)
    return nn.Sequential(nn.Linear(d, h), nn.ReLU(), nn.Linear(h, c))


class SmallCNN(nn.Module):  # type: ignore[name-defined]
    """A CNN for 8 x 8 digits (input ``N x 64`` or ``N x 1 x 8 x 8``, values scaled to [0, 1]).

    ``Conv(1->16, 3x3) -> ReLU -> AvgPool 2 -> Conv(16->32, 3x3) -> ReLU -> AvgPool 2 ->
    Linear(128 -> C)``; 6.4k parameters for 10 classes.
    """

    def __init__(self, n_classes: int = 10) -> None:
        super().__init__()
        c = check_int(n_classes, "n_classes", "SmallCNN", low=2)
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1),
            nn.ReLU(),
            nn.AvgPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.AvgPool2d(2),
            nn.Flatten(),
        )
        self.head = nn.Linear(32 * 2 * 2, c)

    def forward(self, x: Any) -> Any:
        return self.head(self.features(x.reshape(-1, 1, 8, 8)))


def make_model(name: str, n_features: int, n_classes: int, *, seed: int = 0) -> Any:
    """Build a freshly initialised model by name (``"logistic"``, ``"mlp"`` or ``"cnn"``).

    ``seed`` seeds the initialisation (``torch.manual_seed`` inside a forked RNG state, so the
    global torch RNG is left untouched).
    """
    check_option(name, "name", "make_model", MODELS)
    seed = check_int(seed, "seed", "make_model", low=0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if name == "logistic":
            return logistic_regression(n_features, n_classes)
        if name == "mlp":
            return mlp(n_features, n_classes)
        if n_features != 64:
            raise ValueError(
                f"The 'n_features' parameter of make_model must be 64 for the 'cnn' model "
                f"(8 x 8 digits). Got {n_features!r} instead."
            )
        return SmallCNN(n_classes)

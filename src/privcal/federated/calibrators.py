"""Calibrators that only the federated methods produce: weighted binning and the MLP scaler.

* :class:`WeightedBBQ` and :class:`WeightedHistogramBinning` add the heterogeneity weighting of
  seed 003 Sec. 4.1 / App. B.5 to :class:`~privcal.calibrators.BBQ` and classwise
  :class:`~privcal.calibrators.HistogramBinning`: for class ``j``,
  :math:`\\tilde g_j(\\hat p) = \\alpha_j g_j(\\hat p) + (1 - \\alpha_j)\\hat p`, then normalised.
  ``weighting="all"`` applies it to every row; ``"changed"`` only to rows whose top-1 class the
  unweighted calibrator would change.
* :class:`MLPScaling` is the post-hoc FedCal scaler (Peng et al. 2024): an MLP with two hidden
  layers of 64 ReLU units whose outputs :math:`m(z) > 0` scale the sorted logit gaps in the
  order-preserving map of Rahimi et al. (2020) (seed 003 App. B.6), so top-1 never changes.

This module sits *below* :mod:`privcal.federated.methods`: the methods' client and server steps
produce these calibrators and call the MLP's loss (:func:`mlp_nll_and_grad`) and local fit
(:func:`fit_mlp`) defined here; nothing here imports the methods.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Literal

import numpy as np
from scipy.optimize import minimize

from privcal._params import Constraints, Options
from privcal.calibrators.base import Calibrator, register
from privcal.calibrators.binning import (
    BBQ,
    PRIOR_STRENGTH,
    HistogramBinning,
    normalise_one_vs_all,
)
from privcal.calibrators.scaling import nll_and_grad
from privcal.metrics.statistics import softmax

__all__ = [
    "MLPScaling",
    "WeightedBBQ",
    "WeightedHistogramBinning",
    "apply_weighting",
    "fit_mlp",
    "mlp_nll_and_grad",
]

Weighting = Literal["all", "changed"]

HIDDEN = 64

#: The rule of the ``weighting`` parameter both weighted calibrators add to their binning's.
_WEIGHTING = Options("all", "changed")


def apply_weighting(g: np.ndarray, p: np.ndarray, alpha: np.ndarray, weighting: str) -> np.ndarray:
    """Normalised weighted one-vs-all outputs (seed 003 Sec. 4.1); see the module docstring."""
    mixed = alpha[None, :] * g + (1.0 - alpha[None, :]) * p
    out_w = normalise_one_vs_all(mixed, p)
    if weighting == "all":
        return out_w
    out = normalise_one_vs_all(g, p)
    changed = np.argmax(out, axis=1) != np.argmax(p, axis=1)
    out[changed] = out_w[changed]
    return out


class _Weighted(Calibrator):
    """The weighting both weighted calibrators add to their binning (module docstring): sets
    ``alpha_`` (C,) after the binning's fit and mixes in predict_proba (``weighting``: its rule
    is :data:`_WEIGHTING`).
    Listed before the binning class among the bases, so ``super()`` is the binning."""

    weighting: str
    _calibrated: Callable[[np.ndarray], np.ndarray]  # the binning's one-vs-all outputs

    def _fit(self, z: np.ndarray, y: np.ndarray) -> None:
        super()._fit(z, y)
        self.alpha_ = np.ones(z.shape[1])

    def _predict_proba(self, z: np.ndarray) -> np.ndarray:
        p = softmax(z)
        return apply_weighting(self._calibrated(p), p, np.asarray(self.alpha_), self.weighting)


@register
class WeightedBBQ(_Weighted, BBQ):
    """FedBBQ with heterogeneity weighting; ``alpha_`` (C,) in [0, 1] is the class weight.

    ``prior`` and ``prior_strength`` are :class:`~privcal.calibrators.BBQ`'s.
    """

    _fitted_attributes: ClassVar[tuple[str, ...]] = (*BBQ._fitted_attributes, "alpha_")
    _parameter_constraints = Constraints(BBQ._parameter_constraints, weighting=_WEIGHTING)

    def __init__(
        self,
        n_levels: int = 7,
        weighting: Weighting = "all",
        prior: Literal["model"] | None = None,
        prior_strength: float = PRIOR_STRENGTH,
    ) -> None:
        super().__init__(n_levels=n_levels, prior=prior, prior_strength=prior_strength)
        self.weighting = weighting


@register
class WeightedHistogramBinning(_Weighted, HistogramBinning):
    """Classwise FedBin with heterogeneity weighting (``alpha_`` (C,) in [0, 1]).

    ``prior`` and ``prior_strength`` are :class:`~privcal.calibrators.HistogramBinning`'s.
    """

    _fitted_attributes: ClassVar[tuple[str, ...]] = (
        *HistogramBinning._fitted_attributes,
        "alpha_",
    )
    _parameter_constraints = Constraints(
        HistogramBinning._parameter_constraints, weighting=_WEIGHTING
    )

    def __init__(
        self,
        n_bins: int = 15,
        weighting: Weighting = "all",
        prior: Literal["model"] | None = None,
        prior_strength: float = PRIOR_STRENGTH,
    ) -> None:
        super().__init__(
            mode="classwise", n_bins=n_bins, prior=prior, prior_strength=prior_strength
        )
        self.weighting = weighting


# ------------------------------------------------------------------------------------ MLP
def mlp_sizes(c: int) -> list[tuple[int, ...]]:
    """Shapes of (W1, b1, W2, b2, W3, b3) for ``c`` classes."""
    return [(HIDDEN, c), (HIDDEN,), (HIDDEN, HIDDEN), (HIDDEN,), (c - 1, HIDDEN), (c - 1,)]


def mlp_unpack(x: np.ndarray, c: int) -> list[np.ndarray]:
    out, start = [], 0
    for shape in mlp_sizes(c):
        size = int(np.prod(shape))
        out.append(x[start : start + size].reshape(shape))
        start += size
    return out


def mlp_init(c: int, seed: int = 0) -> np.ndarray:
    """He-initialised hidden layers and a zero output layer (the identity map at start)."""
    rng = np.random.default_rng(seed)
    parts = []
    for shape in mlp_sizes(c):
        if len(shape) == 2 and shape[0] != c - 1:
            parts.append(rng.normal(0.0, np.sqrt(2.0 / shape[1]), size=shape).ravel())
        else:
            parts.append(np.zeros(int(np.prod(shape))))
    return np.concatenate(parts)


def mlp_logits(x: np.ndarray, z: np.ndarray, grad_out: np.ndarray | None = None) -> Any:
    """Order-preserving MLP logits; with ``grad_out`` (dL/du) also return dL/dx.

    Inputs are the sorted logits shifted so the top one is 0; outputs
    :math:`m = e^{\\mathrm{clip}(o, -10, 10)}` scale the gaps,
    :math:`u_{(k+1)} = u_{(k)} - m_k \\delta_k`.
    """
    c = z.shape[1]
    w1, b1, w2, b2, w3, b3 = mlp_unpack(x, c)
    order = np.argsort(-z, axis=1, kind="stable")
    ys = np.take_along_axis(z, order, axis=1)
    gaps = ys[:, :-1] - ys[:, 1:]
    inp = ys - ys[:, :1]
    a1 = inp @ w1.T + b1
    h1 = np.maximum(a1, 0.0)
    a2 = h1 @ w2.T + b2
    h2 = np.maximum(a2, 0.0)
    o = h2 @ w3.T + b3
    oc = np.clip(o, -10.0, 10.0)
    m = np.exp(oc)
    w = m * gaps
    u_sorted = np.concatenate([np.zeros((z.shape[0], 1)), -np.cumsum(w, axis=1)], axis=1)
    u = np.empty_like(u_sorted)
    np.put_along_axis(u, order, u_sorted, axis=1)
    if grad_out is None:
        return u
    g_sorted = np.take_along_axis(grad_out, order, axis=1)
    tail = np.cumsum(g_sorted[:, ::-1], axis=1)[:, ::-1][:, 1:]
    d_o = -tail * gaps * m * ((o > -10.0) & (o < 10.0))
    g_w3 = d_o.T @ h2
    g_b3 = d_o.sum(axis=0)
    d_h2 = d_o @ w3
    d_a2 = d_h2 * (a2 > 0)
    g_w2 = d_a2.T @ h1
    g_b2 = d_a2.sum(axis=0)
    d_a1 = (d_a2 @ w2) * (a1 > 0)
    g_w1 = d_a1.T @ inp
    g_b1 = d_a1.sum(axis=0)
    grad = np.concatenate([a.ravel() for a in (g_w1, g_b1, g_w2, g_b2, g_w3, g_b3)])
    return u, grad


def mlp_nll_and_grad(x: np.ndarray, z: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean NLL of the MLP scaler with parameters ``x`` on ``(z, y)`` and its gradient in ``x``."""
    val, g = nll_and_grad(mlp_logits(x, z), y)
    _, grad = mlp_logits(x, z, grad_out=g)
    return val, grad


def fit_mlp(x0: np.ndarray, z: np.ndarray, y: np.ndarray, max_iter: int) -> np.ndarray:
    """``max_iter`` L-BFGS steps on :func:`mlp_nll_and_grad` from ``x0`` (FedCal's local fit)."""
    return lbfgs(lambda x: mlp_nll_and_grad(x, z, y), x0, max_iter)


def lbfgs(loss: Callable[[np.ndarray], Any], x0: np.ndarray, max_iter: int) -> np.ndarray:
    """``max_iter`` L-BFGS steps on ``loss`` (value and gradient) from ``x0``: a local fit."""
    opts = {"maxiter": max_iter, "gtol": 1e-6}
    res = minimize(loss, x0, jac=True, method="L-BFGS-B", options=opts)
    return np.asarray(res.x, dtype=np.float64)


@register
class MLPScaling(Calibrator):
    """Order-preserving MLP scaler (FedCal, post-hoc); fitted only by federated training.

    Attributes
    ----------
    coef_ : ndarray — the flattened MLP parameters (see :func:`mlp_sizes`).
    """

    _fitted_attributes: ClassVar[tuple[str, ...]] = ("coef_",)

    def _fit(self, z: np.ndarray, y: np.ndarray) -> None:
        self.coef_ = fit_mlp(mlp_init(z.shape[1]), z, y, max_iter=20)

    def _predict_proba(self, z: np.ndarray) -> np.ndarray:
        return softmax(mlp_logits(np.asarray(self.coef_), z))

    def _jsonable_params(self) -> dict[str, Any]:
        return {}

"""Affine scaling calibrators fitted by minimising the NLL with L-BFGS and exact gradients.

* :class:`PlattScaling` (binary): :math:`\\hat p_1 = \\sigma(a z + b)` on the binary logit.
* :class:`VectorScaling`: :math:`\\mathrm{softmax}(w \\odot z + b)`; with
  ``order_preserving=True`` the order-preserving form of Rahimi et al. (2020) used by seed 003
  (App. B.6), which can never change the top-1 prediction.
* :class:`MatrixScaling`: :math:`\\mathrm{softmax}(W z + b)` with an L2 penalty on the
  off-diagonal entries of W and on b (ODIR, Kull et al., 2019).

For all three, with :math:`G = \\hat P - Y` (softmax output minus one-hot labels), the gradient
of the mean NLL with respect to the transformed logits is :math:`G / N`; the parameter gradients
follow by the chain rule and are written out in each ``_loss`` function.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit, log_expit

from privcal._params import check_int, check_real
from privcal.calibrators.base import (
    Calibrator,
    check_fitted_array,
    check_fitted_scalar,
    register,
)
from privcal.metrics.statistics import softmax

__all__ = [
    "MatrixScaling",
    "PlattScaling",
    "VectorScaling",
    "nll_and_grad",
    "op_from_gaps",
    "order_preserving_logits",
    "sorted_gaps",
]


def _lbfgs(
    loss: Callable[[np.ndarray], tuple[float, np.ndarray]], x0: np.ndarray, max_iter: int
) -> np.ndarray:
    # gtol 1e-5 on the mean NLL: far below what changes a calibration metric, and it stops the
    # long tail of tiny steps that ill-conditioned rank-gap parameters otherwise produce.
    res = minimize(
        loss, x0, jac=True, method="L-BFGS-B", options={"maxiter": max_iter, "gtol": 1e-5}
    )
    return np.asarray(res.x)


def nll_and_grad(u: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean NLL of logits ``u`` and its gradient ``(softmax(u) - onehot) / N``."""
    n = u.shape[0]
    shifted = u - u.max(axis=1, keepdims=True)
    g = np.exp(shifted)
    s = g.sum(axis=1)
    g /= s[:, None]
    val = float((np.log(s) - shifted[np.arange(n), y]).mean())
    g[np.arange(n), y] -= 1.0
    return val, g / n


@register
class PlattScaling(Calibrator):
    """Platt scaling for binary classifiers: :math:`P(y=1) = \\sigma(a z + b)`.

    ``z`` is the binary logit: the single column of ``N`` / ``N x 1`` logits, or ``z_1 - z_0``
    of ``N x 2`` logits. For more than two classes use :class:`VectorScaling` or
    :class:`MatrixScaling`.

    Attributes
    ----------
    coef_, intercept_ : float
        The fitted ``a`` and ``b``.
    """

    _fitted_attributes: ClassVar[tuple[str, ...]] = ("coef_", "intercept_")

    def __init__(self, max_iter: int = 200) -> None:
        self.max_iter = max_iter

    def _validate_params(self) -> None:
        check_int(self.max_iter, "max_iter", type(self).__name__, low=1)

    @staticmethod
    def _binary_logit(z: np.ndarray) -> np.ndarray:
        if z.shape[1] != 2:
            raise ValueError(
                f"PlattScaling is for binary classifiers; 'logits' has {z.shape[1]} classes. Use "
                f"VectorScaling or MatrixScaling for multiclass models."
            )
        return z[:, 1] - z[:, 0]

    def _fit(self, z: np.ndarray, y: np.ndarray) -> None:
        s = self._binary_logit(z)
        t = y.astype(np.float64)

        def loss(x: np.ndarray) -> tuple[float, np.ndarray]:
            u = x[0] * s + x[1]
            # -[t log sigma(u) + (1-t) log sigma(-u)]; d/du = sigma(u) - t
            val = -(t * log_expit(u) + (1 - t) * log_expit(-u)).mean()
            g = (expit(u) - t) / s.size
            return float(val), np.array([g @ s, g.sum()])

        self.coef_, self.intercept_ = (
            float(v) for v in _lbfgs(loss, np.array([1.0, 0.0]), self.max_iter)
        )

    def _predict_proba(self, z: np.ndarray) -> np.ndarray:
        p1 = expit(self.coef_ * self._binary_logit(z) + self.intercept_)
        return np.column_stack([1.0 - p1, p1])

    def _validate_fitted(self) -> None:
        super()._validate_fitted()
        if self.n_classes_ != 2:
            raise ValueError(
                f"The field 'fitted.n_classes_' of a saved PlattScaling must be 2 (Platt scaling "
                f"is binary). Got {self.n_classes_} instead. Fit the calibrator again (privcal "
                f"fit) and use its file."
            )
        check_fitted_scalar(self, "coef_")
        check_fitted_scalar(self, "intercept_")


def sorted_gaps(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Decreasing sort order of each row and the gaps between consecutive sorted logits."""
    order = np.argsort(-z, axis=1, kind="stable")
    ys = np.take_along_axis(z, order, axis=1)
    return order, ys[:, :-1] - ys[:, 1:]


def op_from_gaps(order: np.ndarray, gaps: np.ndarray, log_scales: np.ndarray) -> np.ndarray:
    """Order-preserving logits from a row sort (:func:`sorted_gaps`) and per-rank log scales."""
    w = np.exp(log_scales)[None, :] * gaps
    u_sorted = np.concatenate([np.zeros((gaps.shape[0], 1)), -np.cumsum(w, axis=1)], axis=1)
    u = np.empty_like(u_sorted)
    np.put_along_axis(u, order, u_sorted, axis=1)
    return u


def order_preserving_logits(z: np.ndarray, log_scales: np.ndarray) -> np.ndarray:
    """The order-preserving map of Rahimi et al. (2020) with positive per-rank gap scales.

    Sort each row in decreasing order, :math:`y_1 \\ge \\dots \\ge y_C`, with gaps
    :math:`\\delta_k = y_k - y_{k+1} \\ge 0`. The output in sorted order is
    :math:`u_1 = 0,\\; u_{k+1} = u_k - e^{a_k}\\delta_k`, i.e. :math:`u = -U^\\top w` with
    :math:`w_k = e^{a_k}\\delta_k` — the form :math:`S^{-1} U w` of seed 003 Eq. (1) with
    :math:`w_k = |y_k - y_{k+1}|\\, m_k` and :math:`m_k = e^{a_k} > 0`. Equal logits stay equal
    and a strict order stays strict (up to floating-point underflow of :math:`e^{a_k}\\delta_k`), so
    the ranking — and the top-1 prediction — is unchanged. Returns logits in the original class
    order.
    """
    return op_from_gaps(*sorted_gaps(z), log_scales)


@register
class VectorScaling(Calibrator):
    """Vector scaling :math:`\\mathrm{softmax}(w \\odot z + b)` (Guo et al., 2017).

    Parameters
    ----------
    order_preserving : bool, default=False
        Use the order-preserving parametrisation (see :func:`order_preserving_logits`): one
        positive scale per rank gap, so the top-1 prediction can never change.
    max_iter : int, default=500
        L-BFGS iterations.

    Attributes
    ----------
    coef_ : ndarray of shape (C,) — w (or the C - 1 log gap scales when order-preserving)
    intercept_ : ndarray of shape (C,) — b (zeros when order-preserving)
    """

    _fitted_attributes: ClassVar[tuple[str, ...]] = ("coef_", "intercept_")

    def __init__(self, order_preserving: bool = False, max_iter: int = 500) -> None:
        self.order_preserving = order_preserving
        self.max_iter = max_iter

    def _validate_params(self) -> None:
        check_int(self.max_iter, "max_iter", type(self).__name__, low=1)

    def _fit(self, z: np.ndarray, y: np.ndarray) -> None:
        c = z.shape[1]
        if self.order_preserving:
            order, gaps = sorted_gaps(z)  # independent of the parameters: sort once

            def loss(a: np.ndarray) -> tuple[float, np.ndarray]:
                val, g = nll_and_grad(op_from_gaps(order, gaps, a), y)
                g_sorted = np.take_along_axis(g, order, axis=1)
                # u_sorted[k] = -sum_{i<k} e^{a_i} gaps_i  =>  dL/da_i = -e^{a_i} gaps_i *
                # sum_{k>i} dL/du_sorted[k]  (a tail sum over ranks)
                tail = np.cumsum(g_sorted[:, ::-1], axis=1)[:, ::-1][:, 1:]
                return val, -(np.exp(a)[None, :] * gaps * tail).sum(axis=0)

            self.coef_ = _lbfgs(loss, np.zeros(c - 1), self.max_iter)
            self.intercept_ = np.zeros(c)
            return

        def loss_vs(x: np.ndarray) -> tuple[float, np.ndarray]:
            w, b = x[:c], x[c:]
            val, g = nll_and_grad(z * w + b, y)
            return val, np.concatenate([(g * z).sum(axis=0), g.sum(axis=0)])

        x = _lbfgs(loss_vs, np.concatenate([np.ones(c), np.zeros(c)]), self.max_iter)
        self.coef_, self.intercept_ = x[:c], x[c:]

    def transform_logits(self, z: np.ndarray) -> np.ndarray:
        """The calibrated logits (before softmax)."""
        if self.order_preserving:
            return order_preserving_logits(z, self.coef_)
        return z * self.coef_ + self.intercept_

    def _predict_proba(self, z: np.ndarray) -> np.ndarray:
        return softmax(self.transform_logits(z))

    def _validate_fitted(self) -> None:
        super()._validate_fitted()
        c = self.n_classes_
        check_fitted_array(self, "coef_", (c - 1,) if self.order_preserving else (c,))
        check_fitted_array(self, "intercept_", (c,))


@register
class MatrixScaling(Calibrator):
    """Matrix scaling :math:`\\mathrm{softmax}(W z + b)` with ODIR regularisation.

    The loss is the mean NLL plus
    :math:`\\lambda \\sum_{i \\ne j} W_{ij}^2 + \\mu \\sum_j b_j^2` (the off-diagonal and
    intercept regulariser, ODIR, of Kull et al., 2019, without their 1/(C(C-1)) and 1/C factors, so
    that one default works across class counts): the diagonal is free, so with large penalties
    the fit tends to vector scaling without intercept. With ``C x C`` free parameters on a small
    validation set the penalty is what keeps the fit from over-fitting.

    Parameters
    ----------
    reg_offdiag, reg_intercept : float, default=0.1
        :math:`\\lambda` and :math:`\\mu`.
    max_iter : int, default=500
    """

    _fitted_attributes: ClassVar[tuple[str, ...]] = ("coef_", "intercept_")

    def __init__(
        self, reg_offdiag: float = 0.1, reg_intercept: float = 0.1, max_iter: int = 500
    ) -> None:
        self.reg_offdiag = reg_offdiag
        self.reg_intercept = reg_intercept
        self.max_iter = max_iter

    def _validate_params(self) -> None:
        owner = type(self).__name__
        check_real(self.reg_offdiag, "reg_offdiag", owner, low=0.0)
        check_real(self.reg_intercept, "reg_intercept", owner, low=0.0)
        check_int(self.max_iter, "max_iter", owner, low=1)

    def _fit(self, z: np.ndarray, y: np.ndarray) -> None:
        c = z.shape[1]
        off = 1.0 - np.eye(c)
        lam, mu = self.reg_offdiag, self.reg_intercept

        def loss(x: np.ndarray) -> tuple[float, np.ndarray]:
            w, b = x[: c * c].reshape(c, c), x[c * c :]
            val, g = nll_and_grad(z @ w.T + b, y)
            val += lam * float(((w * off) ** 2).sum()) + mu * float(b @ b)
            gw = g.T @ z + 2.0 * lam * w * off
            gb = g.sum(axis=0) + 2.0 * mu * b
            return val, np.concatenate([gw.ravel(), gb])

        x = _lbfgs(loss, np.concatenate([np.eye(c).ravel(), np.zeros(c)]), self.max_iter)
        self.coef_, self.intercept_ = x[: c * c].reshape(c, c), x[c * c :]

    def _predict_proba(self, z: np.ndarray) -> np.ndarray:
        return softmax(z @ self.coef_.T + self.intercept_)

    def _validate_fitted(self) -> None:
        super()._validate_fitted()
        c = self.n_classes_
        check_fitted_array(self, "coef_", (c, c))
        check_fitted_array(self, "intercept_", (c,))

    def _jsonable_params(self) -> dict[str, Any]:
        return dict(self.get_params(deep=False))

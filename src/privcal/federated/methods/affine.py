"""Affine scaling of the logits: FedVector, FedMatrix (federated Newton by default) and the
order-preserving FedOPVector (parameter averaging).

FedVector and FedMatrix send block-diagonal Gauss-Newton curvatures, one block per class; each
class's Newton step is taken on its floored block (:func:`_floor_eigenvalues`) and shrunk to a
trust region on the change of its calibrated logit (:func:`_limit_logit_change`).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from privcal.calibrators import Calibrator, MatrixScaling, VectorScaling
from privcal.calibrators.scaling import (
    LOGIT_RANGE,
    floor_logits,
    nll_and_grad,
    op_from_gaps,
    sorted_gaps,
)
from privcal.federated.methods.base import State
from privcal.federated.methods.newton import ScalingMethod, within_nll_bound

__all__ = ["FedMatrix", "FedOPVector", "FedVector"]


def _floor_eigenvalues(blocks: np.ndarray, floor: float) -> np.ndarray:
    """Symmetric ``(c, k, k)`` curvature blocks with every eigenvalue raised to ``floor``
    (noise can make a summed block indefinite; ``1e-12`` keeps exact blocks solvable)."""
    vals, vecs = np.linalg.eigh(blocks)
    vals = np.maximum(vals, floor + 1e-12)
    return (vecs * vals[:, None, :]) @ vecs.transpose(0, 2, 1)


def _limit_logit_change(step: np.ndarray, blocks: np.ndarray, bound: float) -> np.ndarray:
    """Shrink each class's step so the ``q``-weighted rms change of its calibrated logit is at
    most ``bound``.

    For class ``j`` the block is :math:`B_j = \\sum_i q_{ij} x_{ij} x_{ij}^\\top`, where
    :math:`x_{ij}` are the features of the logit ``u_ij`` (last feature 1, so the block's last
    diagonal entry is :math:`Q_j = \\sum_i q_{ij}`): the rms is
    :math:`\\sqrt{\\Delta_j^\\top B_j \\Delta_j / Q_j}`.
    """
    q = np.maximum(blocks[:, -1, -1], 1e-300)
    rms = np.sqrt(np.maximum(np.einsum("jk,jkl,jl->j", step, blocks, step), 0.0) / q)
    return step * np.minimum(1.0, bound / np.maximum(rms, 1e-300))[:, None]


def _bounded_residuals(
    z: np.ndarray, y: np.ndarray, u: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows whose NLL at the calibrated logits ``u`` is within the bound
    (:func:`within_nll_bound`): their logits, residuals ``r = softmax(u) - onehot(y)`` and
    Gauss-Newton weights ``q = p (1 - p)`` (no rows: empty arrays, so every sum is 0)."""
    keep = within_nll_bound(u, y)
    z, y, u = z[keep], y[keep], u[keep]
    n = z.shape[0]
    if n == 0:
        return z, np.zeros_like(u), np.zeros_like(u)
    _, r = nll_and_grad(u, y)
    r = r * n  # softmax - onehot of each row
    p = r.copy()
    p[np.arange(n), y] += 1.0
    return z, r, p * (1.0 - p)


class FedVector(ScalingMethod):
    """FedVector: vector scaling ``softmax(w * z + b)`` (may change the top-1).

    ``update="newton"`` (default): the client sends the gradient of its summed NLL in
    ``(w, b)`` and, per class ``j``, the 2 x 2 curvature block
    :math:`\\sum_i q_{ij} (z_{ij}, 1)^\\top (z_{ij}, 1)` with :math:`q = p(1 - p)`
    (``3C`` numbers): a block-diagonal Gauss-Newton curvature that drops the cross-class terms
    :math:`-p_j p_k`. It bounds the Hessian within a factor 2
    (:math:`\\mathrm{Var}_p(a) \\le 2\\sum_j p_j(1-p_j)a_j^2`), so the steps (with the
    coordinatewise trust region) converge to the central fit.

    Parameters
    ----------
    update, local_iters, client_rows, grad_clip, hess_clip, grad_share
        The scaling methods' shared parameters (:class:`~privcal.federated.methods.newton.
        ScalingMethod`).
    """

    name: ClassVar[str] = "fedvector"
    #: Trust region: the largest rms change of a class's calibrated logit in one round.
    max_logit_change: ClassVar[float] = 1.0
    grad_scale: ClassVar[float] = 3.0
    hess_scale: ClassVar[float] = 1.0

    def x0(self, c: int) -> np.ndarray:
        return np.concatenate([np.ones(c), np.zeros(c)])

    def curvature_size(self, c: int) -> int:
        return 3 * c

    def loss(self, x: np.ndarray, z: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        c = z.shape[1]
        w, b = x[:c], x[c:]
        val, g = nll_and_grad(z * w + b, y)
        return val, np.concatenate([(g * z).sum(axis=0), g.sum(axis=0)])

    def stats(self, x: np.ndarray, z: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        c = z.shape[1]
        z, r, q = _bounded_residuals(z, y, z * x[:c] + x[c:])
        g = np.concatenate([(r * z).sum(axis=0), r.sum(axis=0)])
        h = np.concatenate([(q * z * z).sum(axis=0), (q * z).sum(axis=0), q.sum(axis=0)])
        return g, h

    def direction(self, x: np.ndarray, g: np.ndarray, h: np.ndarray, floor: float) -> np.ndarray:
        """Per class, the 2 x 2 Newton step, shrunk so that its ``q``-weighted rms change of the
        class's calibrated logit, :math:`\\sqrt{\\Delta_j^\\top B_j\\Delta_j / Q_j}`, is at most
        ``max_logit_change`` (``Q_j = \\sum_i q_{ij}``, the block's last entry)."""
        c = x.size // 2
        blocks = np.stack([h[:c], h[c : 2 * c], h[c : 2 * c], h[2 * c :]], axis=1).reshape(c, 2, 2)
        blocks = _floor_eigenvalues(blocks, floor)
        grow = np.stack([g[:c], g[c:]], axis=1)
        step = -np.linalg.solve(blocks, grow[:, :, None])[:, :, 0]  # row j: (dw_j, db_j)
        step = _limit_logit_change(step, blocks, self.max_logit_change)
        return np.concatenate([step[:, 0], step[:, 1]])

    def calibrator(self, state: State, c: int) -> Calibrator:
        x = self.fitted_params(state)
        cal = VectorScaling()
        cal.coef_, cal.intercept_, cal.n_classes_ = x[:c].copy(), x[c:].copy(), c
        return cal


class FedOPVector(ScalingMethod):
    """FedOPVector: order-preserving vector scaling (log gap scales, App. B.6); keeps top-1.

    Parameter averaging only (``update="parameter-averaging"``): the log gap scales enter the
    logits through a cumulative sum of exponentials, whose curvature has no compact summed form.
    """

    name: ClassVar[str] = "fedopvector"
    updates: ClassVar[tuple[str, ...]] = ("parameter-averaging",)

    def __init__(self, update: str = "parameter-averaging", local_iters: int = 50) -> None:
        super().__init__(update, local_iters)

    def x0(self, c: int) -> np.ndarray:
        return np.zeros(c - 1)

    def loss(self, x: np.ndarray, z: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        x = np.clip(x, -30.0, 30.0)  # L-BFGS line searches may probe huge scales
        order, gaps = sorted_gaps(z)
        val, g = nll_and_grad(op_from_gaps(order, gaps, x), y)
        g_sorted = np.take_along_axis(g, order, axis=1)
        tail = np.cumsum(g_sorted[:, ::-1], axis=1)[:, ::-1][:, 1:]
        return val, -(np.exp(x)[None, :] * gaps * tail).sum(axis=0)

    def project(self, x: np.ndarray) -> np.ndarray:
        return np.clip(x, -20.0, 20.0)

    def calibrator(self, state: State, c: int) -> Calibrator:
        cal = VectorScaling(order_preserving=True)
        cal.coef_, cal.intercept_ = np.asarray(state["params"]).copy(), np.zeros(c)
        cal.n_classes_ = c
        return cal


class FedMatrix(ScalingMethod):
    """FedMatrix: matrix scaling ``softmax(W z + b)`` with the ODIR penalty of MatrixScaling.

    ``update="newton"`` (default). The central objective is the mean NLL plus
    :math:`\\lambda\\|W_{\\text{off}}\\|^2 + \\mu\\|b\\|^2`; on sums that is the summed NLL plus
    ``N`` times the penalty, and client ``k`` adds ``n_k`` times the penalty's gradient to its
    own, so the summed gradient is the central one without the server knowing ``N``.

    Curvature: the full Hessian has :math:`(C^2+C)^2` entries (10^8 at ``C = 100``), too many
    to send. The client sends its block-diagonal Gauss-Newton approximation instead: for each
    row ``j`` of ``[W, b]`` the block :math:`B_j = \\sum_i q_{ij}\\tilde z_i\\tilde z_i^\\top`
    (:math:`\\tilde z = (z, 1)`, :math:`q = p(1-p)`; upper triangles, ``C (C+1)(C+2)/2``
    numbers: 660 at ``C = 10``, 515k at ``C = 100``) and its row count ``n_k`` (for the
    penalty's curvature :math:`2N\\,\\mathrm{diag}(\\lambda\\,\\text{off}_j, \\mu)`). The
    cross-class terms are dropped; the blocks bound the Hessian within a factor 2. (A
    Kronecker-factored block shared by all classes, ``(C+1)^2`` numbers, stalled far from the
    optimum on CIFAR-10 and is not offered.) Each class's step is shrunk so that the
    ``q``-weighted rms change of its calibrated logit is at most ``max_logit_change``.

    Parameters
    ----------
    update, local_iters, client_rows, grad_clip, hess_clip, grad_share
        The scaling methods' shared parameters (:class:`~privcal.federated.methods.newton.
        ScalingMethod`).
    reg_offdiag, reg_intercept : float, default=0.1
        :math:`\\lambda`, :math:`\\mu` (as :class:`~privcal.calibrators.MatrixScaling`).
    """

    name: ClassVar[str] = "fedmatrix"
    max_logit_change: ClassVar[float] = 1.0
    grad_scale: ClassVar[float] = 20.0
    hess_scale: ClassVar[float] = 40.0

    def __init__(
        self,
        update: str = "newton",
        local_iters: int = 50,
        reg_offdiag: float = 0.1,
        reg_intercept: float = 0.1,
        **dp_rule: Any,
    ) -> None:
        super().__init__(update, local_iters, **dp_rule)
        self.reg_offdiag, self.reg_intercept = reg_offdiag, reg_intercept

    def x0(self, c: int) -> np.ndarray:
        return np.concatenate([np.eye(c).ravel(), np.zeros(c)])

    def curvature_size(self, c: int) -> int:
        return c * (c + 1) * (c + 2) // 2 + 1

    def penalty_grad(self, x: np.ndarray, c: int) -> np.ndarray:
        """Gradient of the ODIR penalty :math:`\\lambda\\|W_{off}\\|^2 + \\mu\\|b\\|^2`."""
        off = 1.0 - np.eye(c)
        w, b = x[: c * c].reshape(c, c), x[c * c :]
        return np.concatenate(
            [(2.0 * self.reg_offdiag * w * off).ravel(), 2.0 * self.reg_intercept * b]
        )

    def loss(self, x: np.ndarray, z: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        c = z.shape[1]
        off = 1.0 - np.eye(c)
        w, b = x[: c * c].reshape(c, c), x[c * c :]
        val, g = nll_and_grad(z @ w.T + b, y)
        val += self.reg_offdiag * float(((w * off) ** 2).sum()) + self.reg_intercept * float(b @ b)
        return val, np.concatenate([(g.T @ z).ravel(), g.sum(axis=0)]) + self.penalty_grad(x, c)

    def stats(self, x: np.ndarray, z: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        c = z.shape[1]
        w, b = x[: c * c].reshape(c, c), x[c * c :]
        z = floor_logits(z, LOGIT_RANGE)[0]  # MatrixScaling's model is on floored logits
        z, r, q = _bounded_residuals(z, y, z @ w.T + b)
        n = z.shape[0]
        g = np.concatenate([(r.T @ z).ravel(), r.sum(axis=0)]) + n * self.penalty_grad(x, c)
        zt = np.hstack([z, np.ones((n, 1))])
        iu = np.triu_indices(c + 1)
        blocks = np.einsum("ij,ik,il->jkl", q, zt, zt, optimize=True)[:, iu[0], iu[1]]
        return g, np.concatenate([blocks.ravel(), [float(n)]])

    def direction(self, x: np.ndarray, g: np.ndarray, h: np.ndarray, floor: float) -> np.ndarray:
        c = round(math.sqrt(x.size + 0.25) - 0.5)
        k = c + 1
        iu = np.triu_indices(k)
        data = np.zeros((c, k, k))
        data[:, iu[0], iu[1]] = h[:-1].reshape(c, -1)
        data = data + np.triu(data, 1).transpose(0, 2, 1)
        data = _floor_eigenvalues(data, floor)
        n = max(float(h[-1]), 0.0)
        pen = np.concatenate(
            [np.full((c, c), self.reg_offdiag), np.full((c, 1), self.reg_intercept)], axis=1
        )
        pen[np.arange(c), np.arange(c)] = 0.0
        blocks = data + 2.0 * n * pen[:, :, None] * np.eye(k)[None]
        grow = np.concatenate([g[: c * c].reshape(c, c), g[c * c :, None]], axis=1)
        step = -np.linalg.solve(blocks, grow[:, :, None])[:, :, 0]  # row j: (dW_j, db_j)
        step = _limit_logit_change(step, data, self.max_logit_change)
        return np.concatenate([step[:, :c].ravel(), step[:, c]])

    def calibrator(self, state: State, c: int) -> Calibrator:
        x = self.fitted_params(state)
        cal = MatrixScaling(reg_offdiag=self.reg_offdiag, reg_intercept=self.reg_intercept)
        cal.coef_, cal.intercept_ = x[: c * c].reshape(c, c).copy(), x[c * c :].copy()
        cal.n_classes_ = c
        return cal

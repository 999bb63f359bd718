"""Affine scaling calibrators fitted by minimising the NLL with trust-region Newton-CG.

* :class:`PlattScaling` (binary): :math:`\\hat p_1 = \\sigma(a z + b)` on the binary logit.
* :class:`VectorScaling`: :math:`\\mathrm{softmax}(w \\odot z + b)`; with
  ``order_preserving=True`` the order-preserving form of Rahimi et al. (2020) used by seed 003
  (App. B.6), which can never change the top-1 prediction.
* :class:`MatrixScaling`: :math:`\\mathrm{softmax}(W z + b)` with an L2 penalty on the
  off-diagonal entries of W and on b (ODIR, Kull et al., 2019).

For all three, the exact gradient and Hessian-vector products of the mean NLL (one subclass per
map of :class:`~privcal.calibrators._newton.Objective`, which derives them) feed SciPy's
``trust-ncg`` (:mod:`privcal.calibrators._newton`), in variables scaled by the curvature's
diagonal, or for matrix scaling by its per-class blocks, re-estimated as the fit moves
(:func:`~privcal.calibrators._newton.trust_newton`, :meth:`_Matrix.preconditioner`), and for
matrix scaling without the directions that change no probability (:class:`_Matrix`): on the
shared WRN CIFAR-100 network matrix scaling (10 100 parameters) converges in 8 Newton iterations
and about 45 Hessian-vector products, where the diagonal scaling needed ~280 and L-BFGS stopped
at its gradient tolerance after hundreds of iterations. The order-preserving map has only
``C - 1`` parameters and its Hessian in closed form (two ``N x C x C`` products), formed once per
Newton iteration instead of products. Each iteration is reported to
:func:`~privcal.calibrators.progress.fit_progress` (``privcal fit`` shows them once a fit has run
a few seconds); the library is silent otherwise.

Platt, vector and matrix scaling bound each example's NLL
--------------------------------------------------------
:class:`PlattScaling`, :class:`VectorScaling` and :class:`MatrixScaling` minimise
:math:`\\frac1N\\sum_i \\min(\\ell_i(\\theta), B)` (plus the ODIR penalty for matrix scaling),
:math:`\\ell_i` the NLL of example ``i``, ``B = nll_bound`` (default
:data:`~privcal.calibrators.temperature.NLL_BOUND` = 20, as for temperature scaling), by
majorise-minimise from the identity map (:func:`~privcal.calibrators._newton.fit_bounded_nll`). An
example whose true class gets probability below :math:`e^{-B}` counts as ``B`` whatever the
parameters. Without the bound such examples dominate the fit: a true-class probability that
underflowed to 0 becomes a logit of -708 (:func:`privcal.data.read_scores`), i.e. an NLL of ~708 at
the identity map and a gradient of ~708 on that class's scale :math:`w_y`
(:math:`\\partial\\ell_i/\\partial w_y = -z_{iy}(1 - p_{iy})`), so an unbounded fit shrinks
:math:`w_y` towards 0 — which lifts the -708 entries of class ``y`` in every other row by hundreds
of nats. On the 20 newsgroups set (61 of 7532 true-class probabilities exactly 0, 74% of all entries
exactly 0) that took held-out accuracy from 92.3% to 59-66%. With the bound, such examples stop
pulling and the fit is that of the other examples (accuracy unchanged, ECE 20% -> ~1%). On data
where no example reaches ``B`` at the identity map or at the plain fit, the result is the plain NLL
fit. A :class:`~privcal.calibrators.temperature.BoundedNLLWarning` (kept in ``fit_warnings_``) says
how many examples counted as ``B``. No example is dropped and no input changed (matrix scaling's
logit floor, :class:`MatrixScaling`, changes its input probabilities by rounding only)."""

from __future__ import annotations

import warnings
from typing import ClassVar

import numpy as np
from scipy.special import expit
from sklearn.base import clone

from privcal._params import NON_NEGATIVE, POSITIVE, Constraints, Int
from privcal.calibrators._newton import (
    BlockScaling,
    DiagonalScaling,
    IterationLimitWarning,
    Objective,
    Scaling,
    fit_bounded_nll,
)
from privcal.calibrators.base import (
    Calibrator,
    check_fitted_array,
    check_fitted_scalar,
    register,
    store_params,
)
from privcal.calibrators.temperature import (
    DEFAULT_T_RANGE,
    NLL_BOUND,
    fit_temperature_nll,
)
from privcal.metrics.statistics import nll_terms, softmax

__all__ = [
    "LOGIT_RANGE",
    "IterationLimitWarning",
    "MatrixScaling",
    "PlattScaling",
    "VectorScaling",
    "floor_logits",
    "nll_and_grad",
    "op_from_gaps",
    "order_preserving_logits",
    "sorted_gaps",
]


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


#: Default ``logit_range`` of :class:`MatrixScaling`: :math:`L = -\\log \\epsilon_{64} = 36.04`. A
#: logit more than ``L`` below its row's maximum has probability below the float64 machine
#: epsilon relative to the top class: its exact value does not show in ``softmax(z)``.
LOGIT_RANGE = float(-np.log(np.finfo(np.float64).eps))

#: The solver's hyperparameters, shared by the three scaling calibrators.
_SOLVER = Constraints(max_iter=Int(1), nll_bound=[POSITIVE, None])


def floor_logits(z: np.ndarray, logit_range: float | None) -> tuple[np.ndarray, int]:
    """:math:`\\max(z_{ic}, \\max_k z_{ik} - L)` and the number of rows it changed.

    At the identity map this changes no probability by more than :math:`(C-1)\\,e^{-L}`
    (:math:`(C-1)\\epsilon_{64}` for :data:`LOGIT_RANGE`): ``softmax`` of the floored logits equals
    ``softmax(z)`` to float64 rounding. ``logit_range=None`` returns ``z`` unchanged.
    """
    if logit_range is None:
        return z, 0
    floor = z.max(axis=1, keepdims=True) - logit_range
    low = z < floor
    if not low.any():
        return z, 0
    return np.maximum(z, floor), int(low.any(axis=1).sum())


class _Platt(Objective):
    """:math:`u = (0, a s + b)`: the binary logit ``s`` scaled and shifted."""

    def __init__(self, s: np.ndarray, y: np.ndarray, weight: float) -> None:
        super().__init__(y, weight)
        self.s = s

    def logits(self, x: np.ndarray) -> np.ndarray:
        return np.column_stack([np.zeros_like(self.s), x[0] * self.s + x[1]])

    def push(self, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        return self.logits(v)  # linear in x

    def pull(self, x: np.ndarray, g: np.ndarray) -> np.ndarray:
        return np.array([g[:, 1] @ self.s, g[:, 1].sum()])

    def gauss_newton_diagonal(self, x: np.ndarray, p: np.ndarray) -> np.ndarray:
        q = p[:, 1] * p[:, 0] * self.scale
        return np.array([q @ (self.s * self.s), q.sum()])


class _Vector(Objective):
    """:math:`u = z \\odot w + b`, ``x = (w, b)``."""

    def __init__(self, z: np.ndarray, y: np.ndarray, weight: float) -> None:
        super().__init__(y, weight)
        self.z = z
        self.c = z.shape[1]

    def logits(self, x: np.ndarray) -> np.ndarray:
        return self.z * x[: self.c] + x[self.c :]

    def push(self, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        return self.logits(v)  # linear in x

    def pull(self, x: np.ndarray, g: np.ndarray) -> np.ndarray:
        return np.concatenate([np.einsum("ij,ij->j", g, self.z), g.sum(axis=0)])

    def gauss_newton_diagonal(self, x: np.ndarray, p: np.ndarray) -> np.ndarray:
        q = p * (1.0 - p) * self.scale
        return np.concatenate([np.einsum("ij,ij->j", q, self.z * self.z), q.sum(axis=0)])


class _Matrix(Objective):
    """:math:`u = z W^\\top + b` plus the ODIR penalty, ``x = (W`` row-major``, b)``.

    Everything is float64: float32 products (~1e-6 rounding each) kept the conjugate gradient
    from its residual test where the curvature is nearly flat (420 000 products in one fit).

    From :attr:`COMPILED_MIN_WORK` on (``N * C * C``, the work of one product),
    :meth:`preconditioner` scales by the curvature's per-class blocks and the curvature image
    and the blocks' triangular solves are compiled (:mod:`privcal.calibrators._kernels`;
    numba compiles them once per machine, in about two seconds, and caches them). Smaller
    fits, which take milliseconds, keep NumPy and the diagonal scaling, as the metrics'
    kernels do (:data:`privcal.metrics.statistics.COMPILED_MIN_ENTRIES`).

    **Shift directions.** Softmax ignores a shift common to all classes, so the NLL does not
    change when one vector :math:`a` is added to every row of ``W`` (each logit gains
    :math:`a^\\top z_i`) and one number :math:`a_0` to every :math:`b_j`. The penalty does
    change, and among these equivalent maps it is smallest at :math:`Px` (:meth:`canonical`):
    the map whose off-diagonal entries of each column, and whose intercepts, have mean zero
    (:math:`a_j = -\\frac{1}{C-1}\\sum_{i \\ne j} W_{ij}` and :math:`a_0 = -\\bar b` minimise
    :math:`\\lambda\\sum_{i \\ne j}(W_{ij} + a_j)^2 + \\mu\\sum_j (b_j + a_0)^2`). This
    objective is :math:`\\mathrm{NLL}(x) + \\mathrm{pen}(Px)`: it equals the ODIR objective on
    the maps with :math:`Px = x`, has the same minimum, and ``P`` takes its minimisers to the
    ODIR objective's (unique: the penalty makes that strictly convex), which is what a solve
    returns. In the ODIR objective itself the ``C + 1`` shift directions have only the
    penalty's curvature, ~1e-3 of the rest after preconditioning, and the conjugate gradient
    spends iterations on them; here they are flat, and neither the gradient nor a product has
    a component along them (on the shared CIFAR-100 networks: DenseNet 447 -> 223 products,
    LeNet 69 -> 35). With ``lam = 0`` (``mu = 0``) no shift of the columns (intercepts) is
    preferred and ``P`` keeps them as they are.
    """

    #: Rows (every k-th) from which :meth:`preconditioner` estimates the curvature blocks.
    PRECONDITIONER_ROWS = 1024
    #: ``N * C * C`` from which the block preconditioner and the compiled kernels are used
    #: (2^24: 5000 x 100 classes is 5e7; 10 000 x 10 classes, 1e6, keeps NumPy).
    COMPILED_MIN_WORK = 1 << 24
    #: Up to this many classes the preconditioner is the per-class blocks; beyond, their
    #: ``C (C+1)^2`` entries and the sampled rows' products (~1 GB at 300 classes, ~20 GB at
    #: 1000) outgrow the fit, and the diagonal scaling is used.
    BLOCK_MAX_CLASSES = 128

    def __init__(
        self,
        z: np.ndarray,
        y: np.ndarray,
        weight: float,
        lam: float,
        mu: float,
    ) -> None:
        super().__init__(y, weight)
        self.z = z
        self.zt = np.ascontiguousarray(z.T)  # for g^T z as (z^T g)^T
        self.c = z.shape[1]
        self.off = 1.0 - np.eye(self.c)
        self.lam, self.mu = lam, mu
        self.pen_diag = np.concatenate([2.0 * lam * self.off.ravel(), np.full(self.c, 2.0 * mu)])
        self.compiled = z.shape[0] * self.c * self.c >= self.COMPILED_MIN_WORK
        self._pairs: tuple[int, np.ndarray] | None = None

    def _split(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        c = self.c
        return x[: c * c].reshape(c, c), x[c * c :]

    def logits(self, x: np.ndarray) -> np.ndarray:
        w, b = self._split(x)
        return self.z @ w.T + b

    def push(self, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        return self.logits(v)  # linear in x

    def pull(self, x: np.ndarray, g: np.ndarray) -> np.ndarray:
        return np.concatenate([(self.zt @ g).T.ravel(), g.sum(axis=0)])

    def curvature_image(self, p: np.ndarray, du: np.ndarray) -> np.ndarray:
        if not self.compiled:
            return super().curvature_image(p, du)
        from privcal.calibrators._kernels import curvature_image

        return curvature_image(p, du, self.scale)  # one pass, in place of du

    def preconditioner(self, x: np.ndarray) -> Scaling:
        """Per-class blocks: class ``c``'s logit depends on row ``c`` of ``W`` and on ``b_c``
        only, so the curvature's block in those ``C + 1`` variables is
        :math:`\\sum_i p_{ic}(1 - p_{ic})\\,\\tilde z_i \\tilde z_i^\\top` (scaled, with
        :math:`\\tilde z_i = (z_i, 1)`) plus the penalty's diagonal. Estimated from every k-th
        row (at most :attr:`PRECONDITIONER_ROWS`; a preconditioner changes the path, not the
        minimiser), floored at 1e-12 of its largest diagonal entry. The cross-class terms
        :math:`-p_{ic}p_{id}` are left to the conjugate gradient. On the shared WRN CIFAR-100
        network the fit needed ~100 Hessian-vector products with these blocks estimated once,
        where the diagonal needed ~280. Below :attr:`COMPILED_MIN_WORK` or above
        :attr:`BLOCK_MAX_CLASSES`, the diagonal.
        """
        if not self.compiled or self.c > self.BLOCK_MAX_CLASSES:
            return super().preconditioner(x)
        c = self.c
        p = self._cached(x).p
        stride, pairs = self._sampled_pairs()
        ps = p[::stride]
        q = ps * (1.0 - ps) * (self.scale * stride)
        low = np.tril_indices(c + 1)  # each block is symmetric: one product for the triangles
        triangles = np.ascontiguousarray(q.T) @ pairs.T
        curvature = np.empty((c, c + 1, c + 1))
        curvature[:, low[0], low[1]] = triangles
        curvature[:, low[1], low[0]] = triangles
        blocks = np.column_stack([np.arange(c * c).reshape(c, c), c * c + np.arange(c)])
        diag = curvature[:, np.arange(c + 1), np.arange(c + 1)]
        diag += self.penalty_diagonal(x)[blocks]
        diag += 1e-12 * max(float(diag.max()), 1e-300)
        curvature[:, np.arange(c + 1), np.arange(c + 1)] = diag
        return BlockScaling(curvature, blocks)

    def _sampled_pairs(self) -> tuple[int, np.ndarray]:
        """The stride of the rows :meth:`preconditioner` samples, and the products
        :math:`\\tilde z_{ij} \\tilde z_{ik}` (:math:`j \\ge k`, in ``np.tril_indices`` order) of
        those rows, one row per pair. They do not depend on the point, so each objective forms
        them once (every preconditioner of its solve reuses them)."""
        if self._pairs is None:
            stride = -(-self.z.shape[0] // self.PRECONDITIONER_ROWS)
            zt = np.vstack([self.z[::stride].T, np.ones(self.z[::stride].shape[0])])
            pairs = np.empty((zt.shape[0] * (zt.shape[0] + 1) // 2, zt.shape[1]))
            start = 0
            for j in range(zt.shape[0]):
                np.multiply(zt[j], zt[: j + 1], out=pairs[start : start + j + 1])
                start += j + 1
            self._pairs = (stride, pairs)
        return self._pairs

    def canonical(self, x: np.ndarray) -> np.ndarray:
        """:math:`Px`: ``x`` shifted to the map of least penalty among those with its
        probabilities (class docstring)."""
        c = self.c
        w, b = self._split(x)
        out = x.copy()
        if self.lam > 0:
            shift = (w.sum(axis=0) - np.diag(w)) / (c - 1)  # off-diagonal column means
            out[: c * c] -= np.tile(shift, c)
        if self.mu > 0:
            out[c * c :] -= b.mean()
        return out

    def _canonical_t(self, g: np.ndarray) -> np.ndarray:
        """:math:`P^\\top g`: a penalty gradient at :math:`Px` pulled back to ``x``."""
        c = self.c
        out = g.copy()
        if self.lam > 0:
            column_sums = g[: c * c].reshape(c, c).sum(axis=0) / (c - 1)
            out[: c * c] -= (self.off * column_sums).ravel()
        if self.mu > 0:
            out[c * c :] -= g[c * c :].sum() / c
        return out

    def penalty(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        """:math:`\\mathrm{pen}(Px)` and its gradient :math:`P^\\top D P x` (``D`` =
        :attr:`pen_diag`)."""
        px = self.canonical(x)
        w, b = self._split(px)
        wo = w * self.off
        val = self.lam * float((wo * wo).sum()) + self.mu * float(b @ b)
        return val, self._canonical_t(self.pen_diag * px)

    def penalty_hessp(self, v: np.ndarray) -> np.ndarray:
        return self._canonical_t(self.pen_diag * self.canonical(v))

    def penalty_diagonal(self, x: np.ndarray) -> np.ndarray:
        """The diagonal of :math:`P^\\top D P`: ``D`` times :math:`(C-2)/(C-1)` on the
        off-diagonal entries of ``W`` (the column mean takes :math:`1/(C-1)` of each) and
        :math:`(C-1)/C` on ``b``."""
        c = self.c
        keep = np.concatenate(
            [
                np.full(c * c, (c - 2) / (c - 1) if self.lam > 0 else 1.0),
                np.full(c, (c - 1) / c if self.mu > 0 else 1.0),
            ]
        )
        return self.pen_diag * keep

    def gauss_newton_diagonal(self, x: np.ndarray, p: np.ndarray) -> np.ndarray:
        q = p * (1.0 - p) * self.scale
        return np.concatenate([(q.T @ (self.z * self.z)).ravel(), q.sum(axis=0)])


class _OrderPreserving(Objective):
    """The order-preserving map in each row's sorted order (the NLL does not depend on the
    order of the columns): :math:`u_1 = 0`, :math:`u_{k+1} = u_k - e^{a_k}\\delta_k`.

    With :math:`w = e^a`: :math:`\\partial u_k / \\partial a_i = -w_i \\delta_i [i < k]`, so
    a direction ``v`` moves the logits by :math:`-\\mathrm{cumsum}(w \\delta v)` and a row
    array ``g`` pulls back to :math:`-w_i \\sum_{rows} \\delta_i \\sum_{k > i} g_k`. The map is
    not affine in ``a``: :math:`\\partial^2 u_k / \\partial a_i^2 = \\partial u_k / \\partial
    a_i` (and no cross terms), so the NLL's own gradient adds :math:`\\mathrm{diag}(\\nabla)`
    to the Hessian (:meth:`second_order`).
    """

    dense_hessian = True

    def __init__(self, gaps: np.ndarray, rank: np.ndarray, weight: float) -> None:
        super().__init__(rank, weight)
        self.gaps = gaps

    def preconditioner(self, x: np.ndarray) -> Scaling:
        """None (the identity): the trust region lies in the log-scales themselves, where a
        unit step multiplies a gap's scale by e. The curvature of deep ranks, whose tail
        probabilities are ~0, is ~0, and the diagonal scaling of the other maps would stretch
        their steps by up to 1e6, to trial scales that overflow."""
        return DiagonalScaling(np.ones_like(x))

    def _cum(self, a: np.ndarray, v: np.ndarray | None = None) -> np.ndarray:
        w = np.exp(a) * (1.0 if v is None else v)
        steps = self.gaps * w[None, :]
        return np.concatenate([np.zeros((steps.shape[0], 1)), -np.cumsum(steps, axis=1)], axis=1)

    def logits(self, x: np.ndarray) -> np.ndarray:
        return self._cum(x)

    def push(self, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        return self._cum(x, v)

    def pull(self, x: np.ndarray, g: np.ndarray) -> np.ndarray:
        tail = np.cumsum(g[:, ::-1], axis=1)[:, ::-1][:, 1:]  # sum over k > i
        return -np.exp(x) * np.einsum("ij,ij->j", self.gaps, tail)

    def second_order(self, x: np.ndarray, grad_nll: np.ndarray, v: np.ndarray) -> np.ndarray:
        return grad_nll * v

    def hessian(self, x: np.ndarray) -> np.ndarray:
        """The ``(C-1) x (C-1)`` Hessian in two ``N x C x C`` products: with the tail
        probabilities :math:`T_i = P(k > i)` of each row, the indicators :math:`[k > i]` have
        covariance :math:`T_{\\max(i,j)} - T_i T_j` under ``p``, so the Gauss-Newton part is
        :math:`w_i w_j \\sum_{rows} \\delta_i \\delta_j (T_{\\max(i,j)} - T_i T_j)` (scaled),
        and :meth:`second_order` adds the NLL gradient on the diagonal."""
        entry = self._cached(x)
        tails = np.cumsum(entry.p[:, ::-1], axis=1)[:, ::-1][:, 1:]
        steps = self.gaps * np.exp(x)  # w_i delta_i: the factor w_i w_j never formed alone
        weighted = steps * tails
        cross = steps.T @ weighted  # [i, j]: sum of w_i delta_i w_j delta_j T_j, j >= i: T_max
        upper = np.triu(cross)
        h = self.scale * (upper + np.triu(cross, 1).T - weighted.T @ weighted)
        h[np.diag_indices_from(h)] += entry.grad
        return h


@register
class PlattScaling(Calibrator):
    """Platt scaling for binary classifiers: :math:`P(y=1) = \\sigma(a z + b)`.

    ``z`` is the binary logit: the single column of ``N`` / ``N x 1`` logits, or ``z_1 - z_0``
    of ``N x 2`` logits. For more than two classes use :class:`VectorScaling` or
    :class:`MatrixScaling`. Fitted on the mean NLL with each example's term bounded by
    ``nll_bound`` (module docstring), so a probability of exactly 0 for the true class (a binary
    logit of +-708) cannot drag the slope ``a`` to 0.

    Parameters
    ----------
    max_iter : int, default=200
        Trust-region Newton iterations (per majorise-minimise round).
    nll_bound : float or None, default=20.0
        Bound ``B`` on each example's NLL, as for :class:`VectorScaling`; ``None`` gives the
        plain NLL.

    Attributes
    ----------
    coef_, intercept_ : float
        The fitted ``a`` and ``b``.
    fit_warnings_ : list of str
        The fit's diagnostics (examples counted at the NLL bound); empty when there were none.
    """

    _fitted_attributes: ClassVar[tuple[str, ...]] = ("coef_", "intercept_")
    _parameter_constraints = _SOLVER

    def __init__(self, max_iter: int = 200, nll_bound: float | None = NLL_BOUND) -> None:
        store_params(self, locals())

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

        def make_loss(rows: np.ndarray, weight: float) -> Objective:
            return _Platt(s[rows], y[rows], weight)

        def nll_of(x: np.ndarray) -> np.ndarray:
            return np.asarray(nll_terms(_Platt(s, y, 1.0).logits(x), y))

        bound = None if self.nll_bound is None else float(self.nll_bound)
        x0 = np.array([1.0, 0.0])
        x = fit_bounded_nll(make_loss, nll_of, x0, s.size, self.max_iter, bound, "Platt scaling")
        self.coef_, self.intercept_ = float(x[0]), float(x[1])

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

    Fitted by minimising the mean NLL with each example's term bounded by ``nll_bound`` (see the
    module docstring): logits of -708 (probabilities that were exactly 0) cannot drag a class's
    scale to 0 and the accuracy with it.

    Parameters
    ----------
    order_preserving : bool, default=False
        Use the order-preserving parametrisation (see :func:`order_preserving_logits`): one
        positive scale per rank gap, so the top-1 prediction can never change.
    max_iter : int, default=500
        Trust-region Newton iterations (per majorise-minimise round).
    nll_bound : float or None, default=20.0
        Bound ``B`` on each example's NLL: an example whose true class gets probability below
        :math:`e^{-B}` (2e-9 for the default) counts as ``B``, with a
        :class:`~privcal.calibrators.temperature.BoundedNLLWarning`. ``None`` gives the plain
        NLL (which on data with exact-zero true-class probabilities loses accuracy).

    Attributes
    ----------
    coef_ : ndarray of shape (C,) — w (or the C - 1 log gap scales when order-preserving)
    intercept_ : ndarray of shape (C,) — b (zeros when order-preserving)
    fit_warnings_ : list of str
        The fit's diagnostics (examples counted at the NLL bound); empty when there were none.
    """

    _fitted_attributes: ClassVar[tuple[str, ...]] = ("coef_", "intercept_")
    _cross_fit_diagnostic: ClassVar[bool] = True
    _parameter_constraints = _SOLVER

    def __init__(
        self,
        order_preserving: bool = False,
        max_iter: int = 500,
        nll_bound: float | None = NLL_BOUND,
    ) -> None:
        store_params(self, locals())

    def _fit(self, z: np.ndarray, y: np.ndarray) -> None:
        n, c = z.shape
        bound = None if self.nll_bound is None else float(self.nll_bound)
        if self.order_preserving:
            order, gaps = sorted_gaps(z)  # independent of the parameters: sort once
            rank = np.argsort(order, axis=1)[np.arange(n), y]  # the label's place in its row

            def make_op(rows: np.ndarray, weight: float) -> Objective:
                return _OrderPreserving(gaps[rows], rank[rows], weight)

            self.coef_ = fit_bounded_nll(
                make_op,
                lambda a: nll_terms(op_from_gaps(order, gaps, a), y),
                np.zeros(c - 1),
                n,
                self.max_iter,
                bound,
                "order-preserving vector scaling",
            )
            self.intercept_ = np.zeros(c)
            return

        def make_vs(rows: np.ndarray, weight: float) -> Objective:
            return _Vector(z[rows], y[rows], weight)

        x = fit_bounded_nll(
            make_vs,
            lambda x: nll_terms(z * x[:c] + x[c:], y),
            np.concatenate([np.ones(c), np.zeros(c)]),
            n,
            self.max_iter,
            bound,
            "vector scaling",
        )
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


def _temperature_start(z: np.ndarray, y: np.ndarray, bound: float | None) -> np.ndarray:
    """Where matrix scaling's first solve starts: the temperature-scaled map ``W = I / T``,
    ``b = 0`` (:func:`~privcal.calibrators.temperature.fit_temperature_nll` with the same NLL
    bound, over :class:`~privcal.calibrators.TemperatureScaling`'s default range), which matrix
    scaling contains. On an overconfident network the identity map's softmax is nearly one-hot,
    its curvature nearly 0, and Newton steps from it are poor (WRN CIFAR-100 with logits times
    30: 500 iterations without converging); the majoriser of the first round has one minimiser,
    so the start changes the path and not the fit
    (:func:`~privcal.calibrators._newton.fit_bounded_nll`). The temperature fit's own
    diagnostics are not the user's and are not shown."""
    c = z.shape[1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = fit_temperature_nll(z, y, DEFAULT_T_RANGE, bound=bound)
    return np.concatenate([(np.eye(c) / t).ravel(), np.zeros(c)])


@register
class MatrixScaling(Calibrator):
    """Matrix scaling :math:`\\mathrm{softmax}(W z + b)` with ODIR regularisation.

    The loss is the mean NLL, each example's term bounded by ``nll_bound`` (see the module
    docstring), plus
    :math:`\\lambda \\sum_{i \\ne j} W_{ij}^2 + \\mu \\sum_j b_j^2` (the off-diagonal and
    intercept regulariser, ODIR, of Kull et al., 2019, without their 1/(C(C-1)) and 1/C factors, so
    that one default works across class counts): the diagonal is free, so with large penalties
    the fit tends to vector scaling without intercept. With ``C x C`` free parameters on a small
    validation set the penalty is what keeps the fit from over-fitting.

    The map is applied to floored logits :math:`\\tilde z_{ic} = \\max(z_{ic}, \\max_k z_{ik} - L)`
    (:func:`floor_logits`; ``L = logit_range``, default :data:`LOGIT_RANGE` = 36.04), at fit and
    at predict time. The penalty bounds :math:`W_{ij}`, but what moves a logit is
    :math:`W_{ij} z_j`: a probability that underflowed to 0 (a logit of -708) lets an
    off-diagonal weight of 0.005, which the penalty hardly sees, move every row's logit by 3.5
    nats. Logits more than ``L`` below the row maximum are numerically zero probabilities
    (below float64 epsilon relative to the top class), so flooring them leaves
    :math:`\\mathrm{softmax}(z)` unchanged to rounding while keeping every :math:`|\\tilde z_j -
    \\max_k \\tilde z_k| \\le L`. On the 20 newsgroups set (74% of entries exactly 0) this
    halves the held-out ECE of the bounded fit (3.2% -> 1.7%). The floor is part of the model's
    definition, not a change of what the model says: the probabilities it starts from are the
    same to rounding, so it raises no warning (``logit_range=None`` fits on the raw logits).

    Parameters
    ----------
    reg_offdiag, reg_intercept : float, default=0.1
        :math:`\\lambda` and :math:`\\mu`.
    max_iter : int, default=500
        Trust-region Newton iterations (per majorise-minimise round).
    nll_bound : float or None, default=20.0
        Bound ``B`` on each example's NLL, as for :class:`VectorScaling`; ``None`` gives the
        plain NLL.
    logit_range : float or None, default=LOGIT_RANGE (36.04)
        ``L`` of the floor above; ``None`` uses the logits as they are.

    Attributes
    ----------
    coef_ : ndarray of shape (C, C) — W
    intercept_ : ndarray of shape (C,) — b
    fit_warnings_ : list of str
        The fit's diagnostics (examples counted at the NLL bound); empty when there were none.
    """

    _fitted_attributes: ClassVar[tuple[str, ...]] = ("coef_", "intercept_")
    _cross_fit_diagnostic: ClassVar[bool] = True
    _parameter_constraints = Constraints(
        reg_offdiag=NON_NEGATIVE,
        reg_intercept=NON_NEGATIVE,
        **_SOLVER,
        logit_range=[POSITIVE, None],
    )

    def __init__(
        self,
        reg_offdiag: float = 0.1,
        reg_intercept: float = 0.1,
        max_iter: int = 500,
        nll_bound: float | None = NLL_BOUND,
        logit_range: float | None = LOGIT_RANGE,
    ) -> None:
        store_params(self, locals())

    def _floored(self, z: np.ndarray) -> np.ndarray:
        lr = self.logit_range
        return floor_logits(z, None if lr is None else float(lr))[0]

    def _fit(self, z: np.ndarray, y: np.ndarray, solver_start: np.ndarray | None = None) -> None:
        z = self._floored(z)
        n, c = z.shape
        lam, mu = float(self.reg_offdiag), float(self.reg_intercept)

        def make_loss(rows: np.ndarray, weight: float) -> Objective:
            return _Matrix(z[rows], y[rows], weight, lam, mu)

        def nll_of(x: np.ndarray) -> np.ndarray:
            return nll_terms(z @ x[: c * c].reshape(c, c).T + x[c * c :], y)

        bound = None if self.nll_bound is None else float(self.nll_bound)
        x0 = np.concatenate([np.eye(c).ravel(), np.zeros(c)])
        if solver_start is None:
            solver_start = _temperature_start(z, y, bound)
        x = fit_bounded_nll(
            make_loss, nll_of, x0, n, self.max_iter, bound, "matrix scaling", solver_start
        )
        self.coef_, self.intercept_ = x[: c * c].reshape(c, c), x[c * c :]

    def _fit_twin(self, z: np.ndarray, y: np.ndarray) -> MatrixScaling:
        """The cross-fit twin's solves start at this fit's parameters, which halves their
        Newton work; its majorise-minimise path still starts at the identity map, so the twin is
        the fit of its half from the identity
        (:func:`~privcal.calibrators._newton.fit_bounded_nll`, ``solver_start``)."""
        twin = clone(self)
        twin._fit(z, y, solver_start=np.concatenate([self.coef_.ravel(), self.intercept_]))
        return twin

    def _predict_proba(self, z: np.ndarray) -> np.ndarray:
        z = self._floored(z)
        return softmax(z @ self.coef_.T + self.intercept_)

    def _validate_fitted(self) -> None:
        super()._validate_fitted()
        c = self.n_classes_
        check_fitted_array(self, "coef_", (c, c))
        check_fitted_array(self, "intercept_", (c,))

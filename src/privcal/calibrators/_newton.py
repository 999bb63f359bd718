"""Trust-region Newton-CG for the affine scaling calibrators, with its preconditioners.

The method: minimise a smooth objective :math:`f(x)` (the mean NLL of logits that are a map of
the parameters ``x``, plus a penalty) with SciPy's ``trust-ncg``: each Newton iteration solves
the second-order model :math:`f(x) + g^\\top s + \\frac12 s^\\top H s` inside a trust region
by Steihaug's truncated conjugate gradient, which needs only the exact gradient ``g`` and exact
Hessian-vector products :math:`Hv`; a step is accepted only if it decreases ``f``, so the
result is never worse than the start. The gradient and products follow by the chain rule
(:class:`Objective`; one subclass per map lives in :mod:`privcal.calibrators.scaling`).

The solve runs in variables :math:`x = A t` (:class:`Scaling`): conjugate gradient on
:math:`A^\\top H A` is CG on ``H`` preconditioned by :math:`A A^\\top`, and the minimiser does
not depend on ``A``. ``A`` is the inverse square root of the curvature's diagonal (Jacobi,
:class:`DiagonalScaling`) or, for matrix scaling, the inverse Cholesky factors of per-class
blocks (:class:`BlockScaling`), re-estimated as the fit moves (:func:`trust_newton`).

:func:`fit_bounded_nll` minimises the mean of each example's NLL bounded by ``B`` by
majorise-minimise over such solves: every round minimises a majoriser that touches the bounded
objective at the current point, so no round increases it.

This module is private: :mod:`privcal.calibrators.scaling` is its only user.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import ClassVar, NamedTuple

import numpy as np
from scipy.optimize import minimize

from privcal.calibrators.base import FitWarning
from privcal.calibrators.progress import Reporter, report
from privcal.calibrators.temperature import warn_bounded_nll

__all__ = [
    "BlockScaling",
    "DiagonalScaling",
    "IterationLimitWarning",
    "Objective",
    "ObjectiveFactory",
    "Scaling",
    "fit_bounded_nll",
    "trust_newton",
]

#: Majorise-minimise rounds of :func:`fit_bounded_nll` (each one trust-region fit, warm-started).
MAX_MM = 20
#: Trust-region Newton stops when the gradient, in the variables scaled by the Hessian's
#: diagonal, has this L2 norm: then the second-order model predicts less than
#: ``GTOL**2 / 2`` (5e-13) of further decrease of the mean NLL.
GTOL = 1e-6
#: Gradient norms, in the solve's scaled variables, at which :func:`trust_newton` re-estimates
#: its change of variables at the point reached: there the second-order model predicts about
#: ``5e-3`` and ``5e-7`` of further decrease. Matrix scaling on the shared CIFAR-100 networks,
#: Hessian-vector products of the fit with its cross-fit (three fits): WRN 185 -> 107,
#: DenseNet 842 -> 512, LeNet 81 -> 60.
RESCALE_AT = (1e-1, 1e-3)


class IterationLimitWarning(FitWarning):
    """A trust-region Newton fit (Platt, vector or matrix scaling) used ``max_iter`` iterations
    before its gradient test: the parameters are the best point found, not the minimum."""


class Point(NamedTuple):
    """An objective's NLL part at ``x``: its value and parameter gradient and the softmax ``p``
    of the logits."""

    x: np.ndarray
    value: float
    grad: np.ndarray
    p: np.ndarray


class Objective:
    """A fitting objective: mean NLL of affine-or-monotone logits (plus a penalty), its exact
    gradient and exact Hessian-vector products.

    Subclasses say how the parameters ``x`` map to logits (:meth:`logits`), push a parameter
    direction forward (:meth:`push`: the logits' directional derivative) and pull a logit-space
    row array back (:meth:`pull`: the transposed Jacobian). With :math:`P` the softmax of the
    logits and :math:`Y` the one-hot labels of the ``n`` rows, scaled by ``weight / n``: the
    gradient in the logits is :math:`G = P - Y` and the Hessian of each row's NLL in its logits
    is :math:`\\mathrm{diag}(p) - p p^\\top`, so a direction :math:`\\delta u` of the logits
    has curvature image :math:`p \\odot \\delta u - p\\,(p^\\top \\delta u)` row by row. The
    gradient is ``pull(G)``; the Hessian-vector product is ``pull(curvature(push(v)))`` plus
    :meth:`second_order` (the term of a map that is not affine in ``x``) plus the penalty's.
    The softmax of the last two points is kept (trust-region steps ask for products at the
    point of the last accepted step after evaluating a trial point).
    """

    #: Whether :meth:`hessian` gives the whole Hessian in closed form (then the conjugate
    #: gradient multiplies by it, formed once per point, instead of asking for products).
    dense_hessian: ClassVar[bool] = False

    def __init__(self, y: np.ndarray, weight: float) -> None:
        self.y = y
        self.rows = np.arange(y.size)
        self.scale = weight / y.size
        self._cache: list[Point] = []

    # -- the map (subclasses) --------------------------------------------------------------
    def logits(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def push(self, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def pull(self, x: np.ndarray, g: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def second_order(self, x: np.ndarray, grad_nll: np.ndarray, v: np.ndarray) -> np.ndarray:
        return np.zeros_like(v)

    def penalty(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        return 0.0, np.zeros_like(x)

    def penalty_hessp(self, v: np.ndarray) -> np.ndarray:
        return np.zeros_like(v)

    def penalty_diagonal(self, x: np.ndarray) -> np.ndarray:
        """The diagonal of the penalty's Hessian (for the preconditioners): a diagonal penalty's
        product with ones."""
        return self.penalty_hessp(np.ones_like(x))

    def canonical(self, x: np.ndarray) -> np.ndarray:
        """The parameters a solve returns for the point ``x`` it reached: ``x`` itself, unless
        the objective identifies equivalent points (matrix scaling's, in
        :mod:`privcal.calibrators.scaling`)."""
        return x

    def gauss_newton_diagonal(self, x: np.ndarray, p: np.ndarray) -> np.ndarray:
        """The diagonal of the curvature of the NLL part (for scaling the variables)."""
        raise NotImplementedError

    # -- shared ----------------------------------------------------------------------------
    def _cached(self, x: np.ndarray) -> Point:
        """The NLL part at ``x``: computed, or kept from one of the last two points asked for
        (a stage of the solve asks for its preconditioner and then its value at one point)."""
        for entry in self._cache:
            if np.array_equal(entry.x, x):
                return entry
        u = self.logits(x)
        u = u - u.max(axis=1, keepdims=True)
        p = np.exp(u)
        s = p.sum(axis=1)
        p /= s[:, None]
        value = self.scale * float((np.log(s) - u[self.rows, self.y]).sum())
        g = p.copy()
        g[self.rows, self.y] -= 1.0
        grad = self.pull(x, g * self.scale)
        entry = Point(x.copy(), value, grad, p)
        self._cache = [*self._cache[-1:], entry]
        return entry

    def value_and_grad(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        entry = self._cached(x)
        pen, pen_grad = self.penalty(x)
        return entry.value + pen, entry.grad + pen_grad

    __call__ = value_and_grad

    def hessp(self, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        """The Hessian-vector product."""
        entry = self._cached(x)
        out = self.pull(x, self.curvature_image(entry.p, self.push(x, v)))
        return out + self.second_order(x, entry.grad, v) + self.penalty_hessp(v)

    def hessian(self, x: np.ndarray) -> np.ndarray:
        """The whole Hessian (where :attr:`dense_hessian`)."""
        raise NotImplementedError

    def curvature_image(self, p: np.ndarray, du: np.ndarray) -> np.ndarray:
        """The scaled curvature image :math:`s\\,(p \\odot \\delta u - p\\,(p^\\top \\delta u))`
        of a logit direction ``du``, row by row (may overwrite ``du``)."""
        pdu = p * du
        curv = pdu - p * pdu.sum(axis=1, keepdims=True)
        return curv * self.scale

    def diagonal(self, x: np.ndarray) -> np.ndarray:
        return self.gauss_newton_diagonal(x, self._cached(x).p) + self.penalty_diagonal(x)

    def preconditioner(self, x: np.ndarray) -> Scaling:
        """The change of variables of the trust-region solve from ``x``: by default the inverse
        square root of the curvature's diagonal (Jacobi), floored at 1e-12 of its largest entry."""
        d = self.diagonal(x)
        return DiagonalScaling(1.0 / np.sqrt(np.maximum(d, 1e-12 * max(float(d.max()), 1e-300))))


class Scaling:
    """A fixed linear change of variables :math:`x = A\\,t` for the trust-region solve.

    The solver sees :math:`f(A t)`, with gradient :math:`A^\\top \\nabla f` and Hessian
    :math:`A^\\top H A`; conjugate gradient on the latter is CG on :math:`H` preconditioned by
    :math:`A A^\\top`. The minimiser :math:`x^\\star = A t^\\star` does not depend on ``A``.
    """

    def to_x(self, t: np.ndarray) -> np.ndarray:
        """:math:`A t`."""
        raise NotImplementedError

    def to_t(self, x: np.ndarray) -> np.ndarray:
        """:math:`A^{-1} x`."""
        raise NotImplementedError

    def pull(self, g: np.ndarray) -> np.ndarray:
        """:math:`A^\\top g` (a gradient or Hessian-vector product in ``x`` to one in ``t``)."""
        raise NotImplementedError


class DiagonalScaling(Scaling):
    """:math:`A = \\mathrm{diag}(s)`."""

    def __init__(self, s: np.ndarray) -> None:
        self.s = s

    def to_x(self, t: np.ndarray) -> np.ndarray:
        return t * self.s

    def to_t(self, x: np.ndarray) -> np.ndarray:
        return x / self.s

    def pull(self, g: np.ndarray) -> np.ndarray:
        return g * self.s


class BlockScaling(Scaling):
    """:math:`A` block diagonal, :math:`A_c = L_c^{-\\top}` with :math:`B_c = L_c L_c^\\top` the
    Cholesky factor of block ``c`` of the curvature; ``blocks[c]`` lists the entries of ``x`` in
    block ``c``. The products are triangular solves (:mod:`privcal.calibrators._kernels`)."""

    def __init__(self, curvature: np.ndarray, blocks: np.ndarray) -> None:
        from privcal.calibrators import _kernels  # numba: imported when first needed

        self.blocks = blocks
        self.factors = np.linalg.cholesky(curvature)
        self._kernels = _kernels

    def _apply(
        self, kernel: Callable[[np.ndarray, np.ndarray], np.ndarray], v: np.ndarray
    ) -> np.ndarray:
        out = np.empty_like(v)
        out[self.blocks] = kernel(self.factors, v[self.blocks])
        return out

    def to_x(self, t: np.ndarray) -> np.ndarray:
        return self._apply(self._kernels.lower_t_solve, t)

    def to_t(self, x: np.ndarray) -> np.ndarray:
        return self._apply(self._kernels.lower_t_product, x)

    def pull(self, g: np.ndarray) -> np.ndarray:
        return self._apply(self._kernels.lower_solve, g)


def trust_newton(objective: Objective, x0: np.ndarray, max_iter: int, step: Reporter) -> np.ndarray:
    """Minimise ``objective`` from ``x0`` by trust-region Newton-CG (SciPy's ``trust-ncg``:
    Steihaug's truncated conjugate gradient on the exact Hessian-vector products), in at most
    ``max_iter`` Newton iterations (an :class:`IterationLimitWarning` if they run out). An
    objective with its whole Hessian in closed form (:attr:`~Objective.dense_hessian`: the
    order-preserving map's ``C - 1`` log-scales) forms it once per point, in one stage; the
    conjugate gradient then multiplies by it. (SciPy's ``trust-exact`` on the same Hessian
    pushed the flat log-scales of deep ranks, which have no gradient, to its trust radius,
    where their scales overflowed; the conjugate gradient never leaves the span of the
    gradient.)

    The solve runs in the variables of the objective's :meth:`~Objective.preconditioner`: the
    curvature's diagonal (Jacobi) by default, per-class blocks for matrix scaling. Logits of
    very different sizes (log-probabilities down to -36) otherwise make the Hessian
    ill-conditioned, and the CG iterations triple on the shared CIFAR-100 network. The curvature
    changes as the fit moves, so the change of variables is estimated at ``x0`` and again where
    the gradient norm, in the variables of the moment, first falls below each of
    :data:`RESCALE_AT` (:func:`scaled_trust_newton` runs each stage). Estimated at the start
    only, it left the last Newton iterations of matrix scaling on the shared DenseNet CIFAR-100
    network 100-130 CG iterations each. The minimiser does not depend on the variables; in them
    the gradient norm is scale-free, and the fit stops at :data:`GTOL`. Trust-region steps
    never increase the objective, so the result is never worse than ``x0``.
    """
    x, used, gnorm, change = x0, 0, np.inf, None
    for gtol in (GTOL,) if objective.dense_hessian else (*RESCALE_AT, GTOL):
        if gnorm <= gtol:  # already there, in the last stage's variables
            continue
        if used >= max_iter:
            break
        change = objective.preconditioner(x) if change is None else change
        x, iterations, gnorm = scaled_trust_newton(
            objective, change, x, gtol, max_iter - used, step
        )
        used += iterations
        if iterations:  # the point moved: the next stage estimates its variables there
            change = None
    if gnorm > GTOL and used >= max_iter:
        warnings.warn(
            f"The {step.fit} fit used the max_iter={max_iter} Newton iterations of a solve "
            f"before its gradient test (norm {gnorm:.2g} in the scaled variables, stopping at "
            f"{GTOL:g}): the parameters are the best point found, not the minimum. Raise "
            f"max_iter; but if the map separates the fitting rows (an unpenalised map with "
            f"many parameters per row: the NLL then falls towards 0 and has no minimum), more "
            f"iterations will not help: fit on more rows or keep the penalty.",
            IterationLimitWarning,
            stacklevel=5,
        )
    return x


def scaled_trust_newton(
    objective: Objective,
    change: Scaling,
    x0: np.ndarray,
    gtol: float,
    max_iter: int,
    step: Reporter,
) -> tuple[np.ndarray, int, float]:
    """One stage of :func:`trust_newton`: ``trust-ncg`` from ``x0`` in the variables of
    ``change`` (the preconditioner at ``x0``) until the gradient norm in them is at most
    ``gtol``, or ``max_iter`` iterations. Returns the point (:meth:`~Objective.canonical`),
    the iterations used and the final gradient norm."""
    last: list[np.ndarray] = [np.empty(0), x0]  # the last point asked for, in t and in x

    def point(t: np.ndarray) -> np.ndarray:
        if not np.array_equal(last[0], t):  # CG asks for many products at one point
            last[:] = [t.copy(), change.to_x(t)]
        return last[1]

    def fun(t: np.ndarray) -> tuple[float, np.ndarray]:
        val, g = objective(point(t))
        return val, change.pull(g)

    dense: list[np.ndarray] = [np.empty(0), np.empty(0)]  # a point in x and its Hessian

    def hessian_product(x: np.ndarray, v: np.ndarray) -> np.ndarray:
        if not objective.dense_hessian:
            return objective.hessp(x, v)
        if not np.array_equal(dense[0], x):  # formed once per point, then matrix products
            dense[:] = [x.copy(), objective.hessian(x)]
        return dense[1] @ v

    def hessp(t: np.ndarray, vt: np.ndarray) -> np.ndarray:
        return change.pull(hessian_product(point(t), change.to_x(vt)))

    res = minimize(
        fun,
        change.to_t(x0),
        jac=True,
        hessp=hessp,
        method="trust-ncg",
        options={"gtol": gtol, "maxiter": max_iter},
        callback=lambda intermediate_result: step(intermediate_result.fun),
    )
    x = objective.canonical(change.to_x(np.asarray(res.x)))
    return x, int(res.nit), float(np.linalg.norm(res.jac))


#: ``make_objective(rows, weight)``: the objective of the ``rows`` (an index array) with their
#: mean NLL scaled by ``weight`` (= |rows| / N, so that the NLL part is their sum divided by all
#: N).
ObjectiveFactory = Callable[[np.ndarray, float], Objective]


def fit_bounded_nll(
    make_objective: ObjectiveFactory,
    nll_of: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray,
    n: int,
    max_iter: int,
    bound: float | None,
    owner: str,
    solver_start: np.ndarray | None = None,
) -> np.ndarray:
    """Minimise :math:`\\frac1N\\sum_i\\min(\\ell_i(x), B)` (+ penalty) from ``x0``.

    ``nll_of(x)`` gives every example's :math:`\\ell_i(x)`. Majorise-minimise, as for
    temperature scaling: with :math:`A` the examples at or below ``B`` at the current ``x``,
    :math:`\\frac1N(\\sum_{i\\in A}\\ell_i + |A^c|B)` (+ penalty) lies above the bounded
    objective and touches it at ``x``; a trust-region Newton fit of it (:func:`trust_newton`)
    warm-started at ``x`` (it never returns a point worse than its start) cannot increase the
    objective. Repeat until ``A`` stops changing (a local minimum; at most :data:`MAX_MM`
    rounds). ``bound=None`` is the plain fit. When every example is at or below ``B`` at ``x0``
    and at the plain fit from ``x0``, the result is that plain fit. Each iteration is reported
    to :func:`privcal.calibrators.progress.fit_progress` (silent by default).

    ``solver_start``, when given, is where the first trust-region solve starts instead of
    ``x0``; the first active set is still that of ``x0``. Only for maps affine in ``x``
    (matrix scaling): then every majoriser is convex with a single minimiser (the penalty
    makes it strictly convex), each solve returns that minimiser wherever it starts (to the
    solver's tolerance), and the rounds, active sets and result are those from ``x0``.
    """
    step = report(owner)
    start = x0 if solver_start is None else solver_start
    if bound is None:
        return trust_newton(make_objective(np.arange(n), 1.0), start, max_iter, step)
    x = x0
    active = nll_of(x) <= bound
    for _ in range(MAX_MM):
        rows = np.flatnonzero(active)
        if rows.size == 0:  # every example at the bound: the NLL part is flat
            break
        x = trust_newton(make_objective(rows, rows.size / n), start, max_iter, step)
        start = x
        now = nll_of(x) <= bound
        if np.array_equal(now, active):
            break
        active = now
    warn_bounded_nll(int(np.count_nonzero(nll_of(x) > bound)), n, bound, owner)
    return x

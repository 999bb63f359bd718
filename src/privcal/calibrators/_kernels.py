"""Compiled kernels of the matrix-scaling fit (:class:`~privcal.calibrators.MatrixScaling`).

* :func:`curvature_image`: the softmax curvature image of a Hessian-vector product, in one
  pass instead of NumPy's four.
* :func:`lower_solve`, :func:`lower_t_solve`, :func:`lower_t_product`: the batched triangular
  products of the preconditioner.

Serial kernels: they run between the multi-threaded BLAS products of a Hessian-vector product,
whose idle threads keep spinning for a while after each product; a parallel kernel there
competes with them (measured: 6 ms per triangular solve in parallel, 0.3-0.5 ms serial).

:class:`~privcal.calibrators._newton.BlockScaling` changes variables block by block with the
Cholesky factors :math:`L_c` (lower triangular, ``C`` blocks of ``k x k``): :math:`x_c =
L_c^{-\\top} t_c`, its transpose :math:`L_c^{-1} g_c` and its inverse :math:`L_c^\\top x_c`,
several times per Newton iteration. NumPy has no batched triangular solve, and a batched product
with explicit inverses reads the full ``C x k x k`` float64 array (8 MB for ``C = 100``) each
time; these kernels read only the triangle, by forward and backward substitution (no inverse is
formed).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["curvature_image", "lower_solve", "lower_t_product", "lower_t_solve"]

#: Re-association (vectorised row sums) and fused multiply-add; nothing else.
_FAST = {"reassoc", "contract"}


@njit(cache=True, fastmath=_FAST)
def curvature_image(p: np.ndarray, du: np.ndarray, scale: float) -> np.ndarray:  # pragma: no cover
    """:math:`s\\,(p \\odot \\delta u - p\\,(p^\\top \\delta u))` row by row, in place of ``du``
    (the product :meth:`~privcal.calibrators._newton.Objective.hessp` computes with NumPy)."""
    n, c = du.shape
    for i in range(n):
        acc = 0.0
        for k in range(c):
            t = p[i, k] * du[i, k]
            du[i, k] = t
            acc += t
        for k in range(c):
            du[i, k] = (du[i, k] - p[i, k] * acc) * scale
    return du


@njit(cache=True, fastmath=_FAST)
def lower_solve(factors: np.ndarray, b: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """:math:`x_c = L_c^{-1} b_c` (forward substitution, row by row of :math:`L_c`)."""
    blocks, k = b.shape
    x = np.empty_like(b)
    for c in range(blocks):
        for j in range(k):
            acc = b[c, j]
            for i in range(j):
                acc -= factors[c, j, i] * x[c, i]
            x[c, j] = acc / factors[c, j, j]
    return x


@njit(cache=True, fastmath=_FAST)
def lower_t_solve(factors: np.ndarray, b: np.ndarray) -> np.ndarray:  # pragma: no cover
    """:math:`x_c = L_c^{-\\top} b_c` (backward substitution reading rows of :math:`L_c`: once
    :math:`x_{c,i}` is known, its multiples :math:`L_{c,ij} x_{c,i}` leave every :math:`b_{c,j}`,
    :math:`j < i`)."""
    blocks, k = b.shape
    x = np.empty_like(b)
    for c in range(blocks):
        rest = b[c].copy()
        for i in range(k - 1, -1, -1):
            xi = rest[i] / factors[c, i, i]
            x[c, i] = xi
            for j in range(i):
                rest[j] -= factors[c, i, j] * xi
    return x


@njit(cache=True, fastmath=_FAST)
def lower_t_product(factors: np.ndarray, v: np.ndarray) -> np.ndarray:  # pragma: no cover
    """:math:`y_c = L_c^\\top v_c` (reading rows of :math:`L_c`)."""
    blocks, k = v.shape
    y = np.zeros_like(v)
    for c in range(blocks):
        for i in range(k):
            vi = v[c, i]
            for j in range(i + 1):
                y[c, j] += factors[c, i, j] * vi
    return y

"""Conformal risk control (non-private): the risk curve on a public grid and ``RiskControl``.

Angelopoulos, Bates, Fisch, Lei & Schuster, "Conformal Risk Control" (ICLR 2024). A loss
``L_i(lambda) = L(C_lambda(x_i), y_i)`` in ``[0, B]`` that does not increase with ``lambda``
(larger ``lambda``, larger sets, fewer errors) is computed for every calibration row on a public,
increasing grid ``lambda_1 < ... < lambda_m``. The one statistic is the empirical risk curve
:func:`risk_curve`, ``R_hat(lambda_j) = (1/n) sum_i L_i(lambda_j)``; the non-private rule is

.. math::

    \\hat\\lambda = \\min\\{\\lambda_j : \\tfrac{n}{n+1} \\hat R(\\lambda_j) + \\tfrac{B}{n+1}
    \\le \\alpha\\}

(``lambda_m`` when no grid point passes). **Theorem 1** of the paper: if the ``n + 1`` loss
functions are exchangeable, non-increasing in ``lambda`` and ``L_{n+1}(lambda_m) <= alpha``,
then ``E[L_{n+1}(lambda_hat)] <= alpha`` (proof sketch: docs/conformal.md#conformal-risk-control).
The rule needs ``B / (n + 1) <= alpha`` to pass at any grid point; below that ``n`` the fit is
refused (:func:`min_risk_rows`).

Losses (:data:`LOSSES`), with the set ``C_lambda(x) = {k : p_k >= 1 - lambda}``:

* ``"fnr"``: multilabel false-negative rate, ``|Y \\ C| / |Y|`` (0 for a row with no true label);
  inputs per-label probabilities ``(n, K)`` and a boolean label matrix ``(n, K)``; ``B = 1``.
* ``"miscoverage"``: multiclass, ``1[y not in C]``; inputs probabilities (or logits, softmaxed)
  ``(n, C)`` and integer labels ``(n,)``; ``B = 1``.
* any :class:`RiskLoss` (or an object with ``bound``, ``check(inputs, labels, input)`` and
  ``losses(inputs, labels, lambdas)``).

See docs/conformal.md#conformal-risk-control.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator

from privcal._params import check_option, check_probability
from privcal.conformal._base import NotFittedError
from privcal.conformal.split import _exact
from privcal.data.validation import check_labels, check_scores
from privcal.metrics.statistics import softmax

__all__ = [
    "DEFAULT_LAMBDAS",
    "LOSSES",
    "FalseNegativeRate",
    "Miscoverage",
    "RiskControl",
    "RiskLoss",
    "check_lambdas",
    "crc_index",
    "get_loss",
    "min_risk_rows",
    "risk_curve",
    "threshold_sets",
]

#: The default public grid: ``lambda`` in ``0, 0.01, ..., 1`` (101 points; the set at
#: ``lambda = 1`` is every label, so the built-in losses are 0 there).
DEFAULT_LAMBDAS = np.linspace(0.0, 1.0, 101)


def threshold_sets(probs: np.ndarray, lam: Any) -> np.ndarray:
    """``C_lambda = {k : p_k >= 1 - lambda}``: ``(n, K)`` for a scalar ``lam``, ``(m, n, K)``
    for a grid (the one set rule of the built-in losses and of ``predict_set``)."""
    lam = np.asarray(lam, dtype=np.float64)
    return probs >= (1.0 - lam)[..., None, None] if lam.ndim else probs >= 1.0 - float(lam)


def _check_probs(probs: Any, name: str, owner: str) -> np.ndarray:
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 2 or p.shape[0] < 1 or p.shape[1] < 1:
        raise ValueError(f"{owner}: {name!r} must be a 2-D (n, K) array; got shape {p.shape}.")
    if not np.all(np.isfinite(p)):
        raise ValueError(f"{owner}: {name!r} holds NaN or infinite values.")
    if p.min() < 0.0 or p.max() > 1.0:
        raise ValueError(
            f"{owner}: {name!r} must hold probabilities in [0, 1]; found values in "
            f"[{p.min():g}, {p.max():g}] (pass input='logits' for logits)."
        )
    return p


class RiskLoss:
    """A bounded loss of the set ``C_lambda`` that does not increase with ``lambda``.

    Subclasses set :attr:`name` and :attr:`bound` (``B``) and implement :meth:`check` (validate
    and convert the inputs) and :meth:`losses` (the ``(n, m)`` matrix ``L_i(lambda_j)``).
    :meth:`sets` is the set rule ``predict_set`` uses (:func:`threshold_sets` by default).
    """

    name = "custom"
    bound = 1.0

    def check(self, inputs: Any, labels: Any, input: str, owner: str) -> tuple[Any, Any]:
        raise NotImplementedError

    def losses(self, inputs: Any, labels: Any, lambdas: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def probs(self, inputs: Any, input: str, owner: str) -> np.ndarray:
        """Test inputs as the probabilities the sets threshold."""
        return _check_probs(inputs, "inputs", owner)

    def sets(self, probs: np.ndarray, lam: float) -> np.ndarray:
        return threshold_sets(probs, lam)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class FalseNegativeRate(RiskLoss):
    """Multilabel FNR ``|Y \\ C_lambda| / |Y|`` (0 when ``Y`` is empty); ``B = 1``.

    ``inputs``: per-label probabilities ``(n, K)`` (or logits, through the sigmoid, with
    ``input="logits"``); ``labels``: a boolean ``(n, K)`` matrix (0/1 integers are accepted).
    """

    name = "fnr"

    def probs(self, inputs: Any, input: str, owner: str) -> np.ndarray:
        check_option(input, "input", owner, ("probs", "logits"))
        if input == "probs":
            return _check_probs(inputs, "inputs", owner)
        z = np.asarray(inputs, dtype=np.float64)
        if z.ndim != 2 or not np.all(np.isfinite(z)):
            raise ValueError(f"{owner}: 'inputs' must be a finite 2-D (n, K) array of logits.")
        return np.asarray(1.0 / (1.0 + np.exp(-z)))

    def check(self, inputs: Any, labels: Any, input: str, owner: str) -> tuple[Any, Any]:
        p = self.probs(inputs, input, owner)
        y = np.asarray(labels)
        if y.shape != p.shape:
            raise ValueError(
                f"{owner}: loss='fnr' needs 'labels' as a boolean (n, K) matrix of the shape of "
                f"'inputs' {p.shape}; got shape {y.shape}."
            )
        if y.dtype != bool:
            if not np.issubdtype(y.dtype, np.number) or not np.all((y == 0) | (y == 1)):
                raise ValueError(
                    f"{owner}: loss='fnr' needs 'labels' as a boolean (n, K) matrix (0/1 "
                    f"allowed); got dtype {y.dtype} with other values."
                )
            y = y.astype(bool)
        return p, y

    def losses(self, inputs: Any, labels: Any, lambdas: np.ndarray) -> np.ndarray:
        # a true label k is missed at lambda iff p_k < 1 - lambda
        missed = ~threshold_sets(inputs, lambdas) & labels  # (m, n, K)
        size = labels.sum(axis=1)
        return (missed.sum(axis=2) / np.maximum(size, 1)).T


class Miscoverage(RiskLoss):
    """Multiclass miscoverage ``1[y not in C_lambda]``; ``B = 1``.

    ``inputs``: probabilities ``(n, C)`` (``input="probs"``, the default) or logits (softmaxed);
    ``labels``: integer classes ``(n,)``.
    """

    name = "miscoverage"

    def probs(self, inputs: Any, input: str, owner: str) -> np.ndarray:
        check_option(input, "input", owner, ("probs", "logits"))
        if input == "probs":
            return _check_probs(inputs, "inputs", owner)
        return softmax(check_scores(inputs, input="logits", name="inputs"))

    def check(self, inputs: Any, labels: Any, input: str, owner: str) -> tuple[Any, Any]:
        p = self.probs(inputs, input, owner)
        return p, check_labels(labels, p.shape[0], p.shape[1])

    def losses(self, inputs: Any, labels: Any, lambdas: np.ndarray) -> np.ndarray:
        p_true = inputs[np.arange(labels.size), labels]
        return (p_true[:, None] < 1.0 - lambdas[None, :]).astype(np.float64)


#: The built-in losses by name.
LOSSES: dict[str, type[RiskLoss]] = {"fnr": FalseNegativeRate, "miscoverage": Miscoverage}


def get_loss(loss: Any, owner: str) -> RiskLoss:
    """A loss name (:data:`LOSSES`) or a :class:`RiskLoss`-like object, checked."""
    if isinstance(loss, str):
        return LOSSES[check_option(loss, "loss", owner, tuple(LOSSES))]()
    if not all(hasattr(loss, a) for a in ("bound", "check", "losses", "probs", "sets")):
        raise ValueError(
            f"The 'loss' parameter of {owner} must be one of {sorted(LOSSES)} or a RiskLoss "
            f"(bound, check, losses, probs, sets). Got {loss!r} instead."
        )
    b = loss.bound
    if not (isinstance(b, int | float) and math.isfinite(b) and b > 0):
        raise ValueError(f"{owner}: the loss's 'bound' B must be finite and > 0; got {b!r}.")
    return loss


def check_lambdas(lambdas: Any, owner: str) -> np.ndarray:
    """The public grid: ``DEFAULT_LAMBDAS`` for ``None``, else finite and strictly increasing."""
    if lambdas is None:
        return DEFAULT_LAMBDAS.copy()
    lam = np.asarray(lambdas, dtype=np.float64).reshape(-1)
    if lam.size < 2 or not np.all(np.isfinite(lam)) or np.any(np.diff(lam) <= 0):
        raise ValueError(
            f"The 'lambdas' parameter of {owner} must be at least 2 finite, strictly increasing "
            f"values. Got {lambdas!r} instead."
        )
    return lam


def risk_curve(
    loss: Any,
    inputs: Any,
    labels: Any,
    lambdas: Any = None,
    *,
    input: str = "probs",
    owner: str = "risk_curve",
) -> np.ndarray:
    """The empirical risk curve ``R_hat(lambda_j) = (1/n) sum_i L_i(lambda_j)`` on the grid.

    The one statistic of :class:`RiskControl` and
    :class:`~privcal.conformal.private.risk.PrivateRiskControl`. Checks the inputs (the loss's
    :meth:`RiskLoss.check`), that every loss lies in ``[0, B]`` and that every row's loss does
    not increase along the grid (a ``ValueError`` names the first row and ``lambda`` where it
    does).

    Parameters
    ----------
    loss : str or RiskLoss
        ``"fnr"``, ``"miscoverage"`` or a loss object.
    inputs, labels : array_like
        As the loss reads them (probabilities ``(n, K)`` and labels).
    lambdas : array_like or None
        The public, strictly increasing grid (``None``: :data:`DEFAULT_LAMBDAS`).
    input : {"probs", "logits"}, default="probs"

    Returns
    -------
    ndarray of shape (m,)

    Examples
    --------
    >>> p = np.array([[0.9, 0.2], [0.6, 0.7]]); y = np.array([[True, True], [False, True]])
    >>> risk_curve("fnr", p, y, [0.0, 0.35, 0.5, 0.85])
    array([1.  , 0.25, 0.25, 0.  ])
    """
    rule = get_loss(loss, owner)
    lam = check_lambdas(lambdas, owner)
    x, y = rule.check(inputs, labels, input, owner)
    L = np.asarray(rule.losses(x, y, lam), dtype=np.float64)
    if L.ndim != 2 or L.shape[1] != lam.size:
        raise ValueError(f"{owner}: the loss returned shape {L.shape}, not (n, {lam.size}).")
    if not np.all(np.isfinite(L)) or L.min() < 0.0 or L.max() > rule.bound:
        raise ValueError(f"{owner}: every loss must lie in [0, B = {rule.bound:g}].")
    rises = np.diff(L, axis=1) > 0
    if rises.any():
        i, j = np.argwhere(rises)[0]
        raise ValueError(
            f"{owner}: the loss increases with lambda (row {i}: {L[i, j]:g} at lambda = "
            f"{lam[j]:g}, {L[i, j + 1]:g} at lambda = {lam[j + 1]:g}); conformal risk control "
            "needs a loss that does not increase with lambda."
        )
    return np.asarray(L.mean(axis=0))


def min_risk_rows(alpha: float, bound: float = 1.0, margin: float = 0.0) -> int:
    """The fewest rows ``n`` with ``(B + margin) / (n + 1) <= alpha``, i.e. whose rule can pass
    at a grid point with zero loss (``margin``: the private noise bound ``t``)."""
    need = (_exact(bound) + _exact(margin)) / _exact(alpha) - 1
    return max(1, math.ceil(need))


def crc_index(curve: Any, n: int, alpha: float, bound: float, margin: float = 0.0) -> Any:
    """The index of ``lambda_hat``: the first ``j`` with ``n R_hat_j + B + margin <= alpha (n+1)``
    (the last index when none passes); vectorised over leading axes of ``curve``."""
    ok = n * np.asarray(curve) + bound + margin <= alpha * (n + 1)
    m = ok.shape[-1]
    return np.where(ok.any(axis=-1), ok.argmax(axis=-1), m - 1)


class RiskControl(BaseEstimator):
    """Conformal risk control: ``E[L(C_lambda_hat(x), y)] <= alpha`` (Theorem 1, module doc).

    Parameters
    ----------
    loss : {"fnr", "miscoverage"} or RiskLoss, default="fnr"
    alpha : float, default=0.1
        The risk level in ``(0, 1)``.
    lambdas : array_like or None, default=None
        The public grid (``None``: :data:`DEFAULT_LAMBDAS`).

    Attributes
    ----------
    lambda_ : float
        ``lambda_hat``.
    lambda_index_ : int
    risk_curve_ : ndarray of shape (m,)
        ``R_hat`` on the grid.
    risk_bound_ : float
        The guaranteed expected loss, ``alpha``.
    bound_ : float
        ``B``.
    n_ : int

    Examples
    --------
    >>> from privcal.data.synthetic import multilabel
    >>> p, y = multilabel(2000, seed=0)
    >>> rc = RiskControl("fnr", alpha=0.1).fit(p, y)
    >>> round(rc.lambda_, 2), rc.predict_set(p[:2]).shape
    (0.85, (2, 10))
    """

    _owner = "RiskControl"

    def __init__(self, loss: Any = "fnr", alpha: float = 0.1, lambdas: Any = None) -> None:
        self.loss = loss
        self.alpha = alpha
        self.lambdas = lambdas

    def _check(self) -> tuple[RiskLoss, float, np.ndarray]:
        rule = get_loss(self.loss, self._owner)
        a = check_probability(self.alpha, "alpha", self._owner)
        return rule, a, check_lambdas(self.lambdas, self._owner)

    def _check_rows(self, n: int, a: float, bound: float, margin: float = 0.0) -> None:
        need = min_risk_rows(a, bound, margin)
        if n < need:
            why = f"(B + t) / (n + 1) with t = {margin:.4g}" if margin else "B / (n + 1)"
            raise ValueError(
                f"{self._owner}: n = {n} calibration rows are too few for alpha = {a:g}: "
                f"{why} exceeds alpha, so no lambda is feasible. Use at least n = {need} rows "
                "(or a larger alpha)."
            )

    def fit(self, inputs: Any, labels: Any, input: str = "probs") -> RiskControl:
        """Compute the risk curve on the calibration rows and ``lambda_hat``."""
        rule, a, lam = self._check()
        curve = risk_curve(rule, inputs, labels, lam, input=input, owner=self._owner)
        n = int(np.shape(inputs)[0])
        self._check_rows(n, a, rule.bound)
        j = int(crc_index(curve, n, a, rule.bound))
        self._set(rule, lam, curve, n, j, a)
        return self

    def _set(
        self, rule: RiskLoss, lam: np.ndarray, curve: Any, n: int | None, j: int, bnd: float
    ) -> None:
        self.loss_, self.bound_, self.lambdas_ = rule, float(rule.bound), lam
        if n is not None:  # None: a private fit, where n is not released
            self.n_ = n
        if curve is not None:
            self.risk_curve_ = curve
        self.lambda_index_, self.lambda_ = j, float(lam[j])
        self.risk_bound_ = bnd

    def predict_set(self, inputs: Any, input: str = "probs") -> np.ndarray:
        """The sets ``C_lambda_(x)`` as a boolean ``(N, K)`` matrix."""
        if not hasattr(self, "lambda_"):
            raise NotFittedError(f"This {self._owner} is not fitted yet: call fit first.")
        return np.asarray(
            self.loss_.sets(self.loss_.probs(inputs, input, self._owner), self.lambda_)
        )

"""Federated calibration methods of seed 003 as pure client and server steps on arrays.

Each method is a small object with

* ``init(c) -> state``: the server's initial state (a dict of arrays);
* ``client_step(state, z, y) -> payload``: what one client computes on its own logits ``z`` and
  labels ``y`` (a float array of shape ``payload_shape(c)``), before clipping;
* ``clip(payload, dp)``: the client-side clipping of user-level DP;
* ``server_step(state, total, n, dp=None, denominator=None) -> state``: the server's update from
  the (secure) *sum* ``total`` of ``n`` accepted payloads; with ``dp`` it adds the Gaussian noise
  of :mod:`privcal.federated.dp` first;
* ``calibrator(state, c) -> Calibrator``: a fitted privcal calibrator.

The same functions run in :func:`privcal.federated.simulate` and in the Flower apps
(:mod:`privcal.federated.flower`), which is what makes their results identical.

Scaling (Alg. 2, DP-FedAvg): the payload is the update ``u_k = w_k - w_t`` of ``local_iters``
L-BFGS (or Newton, for FedTemp) iterations on the local mean NLL started from ``w_t``. Non-DP:
``w_{t+1} = w_t + total / n`` (FedAvg with server rate 1, Alg. 2's mean). DP:
``w_{t+1} = w_t + (total + N(0, (C s)^2)) / (p K)``, dividing by the expected cohort size
``p K`` of the *declared* federation size ``K`` (a public constant,
:func:`privcal.federated.dp.expected_cohort`), never by the observed number of participants
``n``, which is private under add/remove of a client.

Binning (Alg. 1): the payload is the stacked class histograms ``[P; N]`` (``2 x C x B``) of
:func:`privcal.metrics.statistics.class_histograms`. The server accumulates the sums over rounds
and builds FedBin (bin frequencies) or FedBBQ (:func:`privcal.calibrators.binning.bbq_table`),
optionally weighted (Sec. 4.1, App. B.5).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
from scipy.optimize import minimize

from privcal._params import check_int, check_option
from privcal.calibrators import (
    BBQ,
    Calibrator,
    HistogramBinning,
    MatrixScaling,
    TemperatureScaling,
    VectorScaling,
)
from privcal.calibrators.binning import bbq_table, bin_frequencies
from privcal.calibrators.scaling import nll_and_grad, op_from_gaps, sorted_gaps
from privcal.federated.calibrators import (
    MLPScaling,
    WeightedBBQ,
    WeightedHistogramBinning,
    mlp_init,
    mlp_logits,
)
from privcal.federated.dp import DPConfig, clip_l2, clip_rows_l2
from privcal.metrics.statistics import class_histograms, softmax

__all__ = [
    "METHODS",
    "FedBBQ",
    "FedBin",
    "FedCal",
    "FedMatrix",
    "FedMethod",
    "FedOPVector",
    "FedTemp",
    "FedTemperature",
    "FedVector",
    "get_method",
    "temperature_newton",
]

State = dict[str, np.ndarray]


class FedMethod:
    """Base class; see the module docstring for the protocol."""

    name: ClassVar[str] = ""
    kind: ClassVar[str] = "scaling"

    def init(self, c: int) -> State:
        raise NotImplementedError

    def payload_shape(self, c: int) -> tuple[int, ...]:
        raise NotImplementedError

    def client_step(self, state: State, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def clip(self, payload: np.ndarray, dp: DPConfig) -> np.ndarray:
        raise NotImplementedError

    def server_step(
        self,
        state: State,
        total: np.ndarray,
        n: int,
        dp: DPConfig | None = None,
        denominator: float | None = None,
    ) -> State:
        raise NotImplementedError

    def calibrator(self, state: State, c: int) -> Calibrator:
        raise NotImplementedError

    def mechanisms_per_round(self, c: int) -> int:
        return 1

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


# ------------------------------------------------------------------------------- scaling
class _Scaling(FedMethod):
    kind: ClassVar[str] = "scaling"

    def __init__(self, local_iters: int = 50) -> None:
        self.local_iters = check_int(local_iters, "local_iters", type(self).__name__, low=1)

    def x0(self, c: int) -> np.ndarray:
        raise NotImplementedError

    def init(self, c: int) -> State:
        return {"params": self.x0(c)}

    def payload_shape(self, c: int) -> tuple[int, ...]:
        return (self.x0(c).size,)

    def loss(self, x: np.ndarray, z: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        raise NotImplementedError

    def project(self, x: np.ndarray) -> np.ndarray:
        return x

    def local_fit(self, x0: np.ndarray, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        res = minimize(
            lambda x: self.loss(x, z, y),
            x0,
            jac=True,
            method="L-BFGS-B",
            options={"maxiter": self.local_iters, "gtol": 1e-6},
        )
        return np.asarray(res.x, dtype=np.float64)

    def client_step(self, state: State, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        x = np.asarray(state["params"], dtype=np.float64)
        return self.local_fit(x, z, y) - x

    def clip(self, payload: np.ndarray, dp: DPConfig) -> np.ndarray:
        return clip_l2(payload, dp.clip)

    def server_step(
        self,
        state: State,
        total: np.ndarray,
        n: int,
        dp: DPConfig | None = None,
        denominator: float | None = None,
    ) -> State:
        x = np.asarray(state["params"], dtype=np.float64)
        if dp is not None:
            s = dp.multiplier(1)
            noisy = dp.add_noise(np.asarray(total, dtype=np.float64), dp.clip, s)
            dp.accountant.step(sigma=dp.clip * s, sensitivity=dp.clip)
            if denominator is None or denominator <= 0:
                raise ValueError("A DP scaling round needs the public denominator p * K > 0.")
            return {"params": self.project(x + noisy / denominator)}
        if n == 0:
            return {"params": x}
        return {"params": self.project(x + np.asarray(total) / n)}


def temperature_newton(
    z: np.ndarray,
    y: np.ndarray,
    groups: np.ndarray,
    n_groups: int,
    beta0: float,
    iters: int,
    beta_range: tuple[float, float],
) -> np.ndarray:
    """Per-group inverse temperatures minimising each group's mean NLL (vectorised Newton).

    The mean NLL of group ``k`` is convex in :math:`\\beta = 1/T` with derivative
    :math:`\\frac1{n_k}\\sum_{i\\in k}(E_{p_i}[d_i] - d_{iy_i})` and second derivative
    :math:`\\frac1{n_k}\\sum_{i\\in k}\\mathrm{Var}_{p_i}[d_i]` (:math:`d = z - \\max z`), the same
    objective as :func:`privcal.calibrators.temperature.fit_temperature_nll`. ``iters`` Newton
    steps from ``beta0``, safeguarded by bisection inside ``beta_range``; one pass over the rows
    per step for all groups together (``np.bincount``). The simulator calls it for all clients,
    a Flower client for itself (``groups = 0``): the same arithmetic.
    """
    d = z - z.max(axis=1, keepdims=True)
    d_y = d[np.arange(d.shape[0]), y]
    counts = np.maximum(np.bincount(groups, minlength=n_groups), 1).astype(np.float64)
    lo = np.full(n_groups, beta_range[0])
    hi = np.full(n_groups, beta_range[1])
    beta = np.clip(np.full(n_groups, float(beta0)), lo, hi)

    def grad_hess(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        bd = b[groups][:, None] * d
        e = np.exp(bd)
        s = e.sum(axis=1)
        ed = (e * d).sum(axis=1) / s
        ed2 = (e * d * d).sum(axis=1) / s
        g = np.bincount(groups, weights=ed - d_y, minlength=n_groups) / counts
        h = np.bincount(groups, weights=ed2 - ed * ed, minlength=n_groups) / counts
        return g, h

    for _ in range(iters):
        g, h = grad_hess(beta)
        hi = np.where(g > 0, beta, hi)
        lo = np.where(g <= 0, beta, lo)
        with np.errstate(divide="ignore", invalid="ignore"):
            new = np.where(h > 0, beta - g / h, np.nan)
        bad = ~((new > lo) & (new < hi))
        new = np.where(bad, 0.5 * (lo + hi), new)
        if np.all(np.abs(new - beta) <= 1e-12 * beta):
            beta = new
            break
        beta = new
    return beta


class FedTemp(_Scaling):
    """FedTemp: temperature scaling by DP-FedAvg on the inverse temperature ``beta = 1/T``.

    Parameters
    ----------
    local_iters : int, default=50
        Newton iterations of the local fit.
    t_range : (float, float), default=(0.05, 20.0)
        The global and local temperatures stay inside it.
    """

    name: ClassVar[str] = "fedtemp"

    def __init__(self, local_iters: int = 50, t_range: tuple[float, float] = (0.05, 20.0)) -> None:
        super().__init__(local_iters)
        self.t_range = t_range
        self.beta_range = (1.0 / t_range[1], 1.0 / t_range[0])

    def x0(self, c: int) -> np.ndarray:
        return np.ones(1)

    def project(self, x: np.ndarray) -> np.ndarray:
        return np.clip(x, *self.beta_range)

    def local_many(
        self, state: State, z: np.ndarray, y: np.ndarray, groups: np.ndarray, n_groups: int
    ) -> np.ndarray:
        """Updates of ``n_groups`` clients at once (rows of client ``k`` have ``groups == k``)."""
        beta0 = float(np.asarray(state["params"])[0])
        beta = temperature_newton(z, y, groups, n_groups, beta0, self.local_iters, self.beta_range)
        return (beta - beta0)[:, None]

    def client_step(self, state: State, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        return self.local_many(state, z, y, np.zeros(z.shape[0], dtype=np.int64), 1)[0]

    def calibrator(self, state: State, c: int) -> Calibrator:
        cal = TemperatureScaling(objective="nll", t_range=self.t_range)
        cal.temperature_ = float(1.0 / np.asarray(state["params"])[0])
        cal.n_classes_ = c
        return cal


FedTemperature = FedTemp


class FedVector(_Scaling):
    """FedVector: vector scaling ``softmax(w * z + b)`` by FedAvg (may change the top-1)."""

    name: ClassVar[str] = "fedvector"

    def x0(self, c: int) -> np.ndarray:
        return np.concatenate([np.ones(c), np.zeros(c)])

    def loss(self, x: np.ndarray, z: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        c = z.shape[1]
        w, b = x[:c], x[c:]
        val, g = nll_and_grad(z * w + b, y)
        return val, np.concatenate([(g * z).sum(axis=0), g.sum(axis=0)])

    def calibrator(self, state: State, c: int) -> Calibrator:
        x = np.asarray(state["params"])
        cal = VectorScaling()
        cal.coef_, cal.intercept_, cal.n_classes_ = x[:c].copy(), x[c:].copy(), c
        return cal


class FedOPVector(_Scaling):
    """FedOPVector: order-preserving vector scaling (log gap scales, App. B.6); keeps top-1."""

    name: ClassVar[str] = "fedopvector"

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
        cal.coef_, cal.intercept_, cal.n_classes_ = (
            np.asarray(state["params"]).copy(),
            np.zeros(c),
            c,
        )
        return cal


class FedMatrix(_Scaling):
    """FedMatrix: matrix scaling ``softmax(W z + b)`` with the ODIR penalty of MatrixScaling."""

    name: ClassVar[str] = "fedmatrix"

    def __init__(
        self, local_iters: int = 50, reg_offdiag: float = 0.1, reg_intercept: float = 0.1
    ) -> None:
        super().__init__(local_iters)
        self.reg_offdiag, self.reg_intercept = reg_offdiag, reg_intercept

    def x0(self, c: int) -> np.ndarray:
        return np.concatenate([np.eye(c).ravel(), np.zeros(c)])

    def loss(self, x: np.ndarray, z: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        c = z.shape[1]
        off = 1.0 - np.eye(c)
        w, b = x[: c * c].reshape(c, c), x[c * c :]
        val, g = nll_and_grad(z @ w.T + b, y)
        val += self.reg_offdiag * float(((w * off) ** 2).sum()) + self.reg_intercept * float(b @ b)
        gw = g.T @ z + 2.0 * self.reg_offdiag * w * off
        gb = g.sum(axis=0) + 2.0 * self.reg_intercept * b
        return val, np.concatenate([gw.ravel(), gb])

    def calibrator(self, state: State, c: int) -> Calibrator:
        x = np.asarray(state["params"])
        cal = MatrixScaling(reg_offdiag=self.reg_offdiag, reg_intercept=self.reg_intercept)
        cal.coef_, cal.intercept_, cal.n_classes_ = (
            x[: c * c].reshape(c, c).copy(),
            x[c * c :].copy(),
            c,
        )
        return cal


class FedCal(_Scaling):
    """FedCal (Peng et al. 2024, post-hoc): order-preserving MLP scaler, 2 hidden layers of 64."""

    name: ClassVar[str] = "fedcal"

    def __init__(self, local_iters: int = 20) -> None:
        super().__init__(local_iters)

    def x0(self, c: int) -> np.ndarray:
        return mlp_init(c)

    def loss(self, x: np.ndarray, z: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        u = mlp_logits(x, z)
        val, g = nll_and_grad(u, y)
        _, grad = mlp_logits(x, z, grad_out=g)
        return val, grad

    def calibrator(self, state: State, c: int) -> Calibrator:
        cal = MLPScaling()
        cal.coef_, cal.n_classes_ = np.asarray(state["params"]).copy(), c
        return cal


# ------------------------------------------------------------------------------- binning
class _Binning(FedMethod):
    kind: ClassVar[str] = "binning"

    def __init__(self, n_bins: int, weighting: str | None = None) -> None:
        owner = type(self).__name__
        self.n_bins = check_int(n_bins, "n_bins", owner, low=1)
        self.weighting = check_option(weighting, "weighting", owner, (None, "all", "changed"))

    def init(self, c: int) -> State:
        return {
            "hist": np.zeros((2, c, self.n_bins)),
            "rounds": np.zeros(1),
            "class_totals": np.full(c, np.nan),
            "noise_std_pos": np.zeros(1),
        }

    def payload_shape(self, c: int) -> tuple[int, ...]:
        return (2, c, self.n_bins)

    def mechanisms_per_round(self, c: int) -> int:
        return 2 * c

    def client_step(self, state: State, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        pos, neg = class_histograms(softmax(z), y, self.n_bins)
        return np.stack([pos, neg])

    def clip(self, payload: np.ndarray, dp: DPConfig) -> np.ndarray:
        return np.stack(
            [clip_rows_l2(payload[0], dp.clip_pos), clip_rows_l2(payload[1], dp.clip_neg)]
        )

    def server_step(
        self,
        state: State,
        total: np.ndarray,
        n: int,
        dp: DPConfig | None = None,
        denominator: float | None = None,
    ) -> State:
        new = {k: np.array(v, dtype=np.float64, copy=True) for k, v in state.items()}
        total = np.asarray(total, dtype=np.float64)
        if dp is not None:
            c = total.shape[1]
            s = dp.multiplier(self.mechanisms_per_round(c))
            sens = np.array([dp.clip_pos, dp.clip_neg])[:, None, None]
            total = dp.add_noise(total, sens, s)
            dp.accountant.step_rho(self.mechanisms_per_round(c) / (2.0 * s * s))
            new["noise_std_pos"] = np.sqrt(new["noise_std_pos"] ** 2 + (dp.clip_pos * s) ** 2)
        new["hist"] = new["hist"] + total
        new["rounds"] = new["rounds"] + 1
        return new

    def alpha(self, state: State) -> np.ndarray:
        """Class weights of seed 003 Sec. 4.1 (non-DP) or App. B.5 (DP)."""
        pos = np.asarray(state["hist"])[0]
        aggregated = pos.sum(axis=1)
        noise_std = float(np.asarray(state["noise_std_pos"])[0])
        if noise_std > 0:
            denom = math.sqrt(2.0 / math.pi) * noise_std * pos.shape[1]
        else:
            denom = np.asarray(state["class_totals"], dtype=np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            a = np.where(np.asarray(denom) > 0, aggregated / denom, 1.0)
        return np.clip(np.nan_to_num(a, nan=1.0), 0.0, 1.0)

    def counts(self, state: State) -> tuple[np.ndarray, np.ndarray]:
        h = np.maximum(np.asarray(state["hist"]), 0.0)  # post-processing of the noisy sums
        return h[0], h[1]


class FedBin(_Binning):
    """FedBin: classwise histogram binning from summed histograms (Alg. 1)."""

    name: ClassVar[str] = "fedbin"

    def __init__(self, n_bins: int = 15, weighting: str | None = None) -> None:
        super().__init__(n_bins, weighting)

    def calibrator(self, state: State, c: int) -> Calibrator:
        pos, neg = self.counts(state)
        cal: HistogramBinning
        if self.weighting is None:
            cal = HistogramBinning(mode="classwise", n_bins=self.n_bins)
        else:
            cal = WeightedHistogramBinning(n_bins=self.n_bins, weighting=self.weighting)
            cal.alpha_ = self.alpha(state)
        cal.bin_values_ = bin_frequencies(pos, pos + neg)
        cal.n_classes_ = c
        return cal


class FedBBQ(_Binning):
    """FedBBQ: one ``2^M``-bin histogram per class and sign, merged into M binnings (App. B.4).

    Parameters
    ----------
    n_levels : int, default=7
        ``M``.
    weighting : {None, "all", "changed"}, default="all"
        Heterogeneity weighting (Sec. 4.1); ``None`` is the naive FedBBQ.
    """

    name: ClassVar[str] = "fedbbq"

    def __init__(self, n_levels: int = 7, weighting: str | None = "all") -> None:
        self.n_levels = check_int(n_levels, "n_levels", "FedBBQ", low=1)
        super().__init__(2**self.n_levels, weighting)

    def calibrator(self, state: State, c: int) -> Calibrator:
        pos, neg = self.counts(state)
        cal: BBQ
        if self.weighting is None:
            cal = BBQ(n_levels=self.n_levels)
        else:
            cal = WeightedBBQ(n_levels=self.n_levels, weighting=self.weighting)
            cal.alpha_ = self.alpha(state)
        cal.table_, cal.weights_ = bbq_table(pos, neg)
        cal.n_classes_ = c
        return cal


METHODS: dict[str, Any] = {
    "fedtemp": FedTemp,
    "fedvector": FedVector,
    "fedopvector": FedOPVector,
    "fedmatrix": FedMatrix,
    "fedcal": FedCal,
    "fedbin": FedBin,
    "fedbbq": lambda **kw: FedBBQ(**{"weighting": None, **kw}),
    "fedbbq-all": lambda **kw: FedBBQ(**{"weighting": "all", **kw}),
    "fedbbq-changed": lambda **kw: FedBBQ(**{"weighting": "changed", **kw}),
}


def get_method(method: Any, **params: Any) -> FedMethod:
    """A :class:`FedMethod` from a name in :data:`METHODS` (with ``params``) or an instance."""
    if isinstance(method, FedMethod):
        return method
    check_option(method, "method", "simulate", tuple(METHODS))
    return METHODS[method](**params)

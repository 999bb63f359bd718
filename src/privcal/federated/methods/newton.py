"""The scaling methods' shared protocol: federated Newton on summed statistics, or parameter
averaging (:class:`ScalingMethod`; the package docstring states both updates and their privacy).

A scaling method defines its parameters (``x0``, ``project``), its client statistics (``stats``,
``loss``) and its Newton direction (``direction``); the clipping, the noise, the server's steps
and the privacy report are here, once for all of them.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from privcal._params import POSITIVE, check_int, check_option, check_probability
from privcal.calibrators.temperature import NLL_BOUND
from privcal.federated.calibrators import lbfgs
from privcal.federated.dp import DPConfig, NoiseGroup, clip_rows_l2
from privcal.federated.methods.base import FedMethod, State
from privcal.federated.payloads import NEWTON_CURVATURE, NEWTON_GRADIENT, UPDATE
from privcal.metrics.statistics import nll_terms
from privcal.privacy.measurement import Measurement

__all__ = ["UPDATES", "ScalingMethod", "within_nll_bound"]

#: The server updates of the scaling methods.
UPDATES = ("newton", "parameter-averaging")


def within_nll_bound(u: np.ndarray, y: np.ndarray, bound: float = NLL_BOUND) -> np.ndarray:
    """Mask of the rows whose NLL at the calibrated logits ``u`` is at most ``bound``.

    The Newton payload of FedVector and FedMatrix is the gradient and curvature of the NLL
    summed over these rows: the majorise step of the bounded NLL :math:`\\sum_i
    \\min(\\ell_i, B)` that :class:`~privcal.calibrators.VectorScaling` and
    :class:`~privcal.calibrators.MatrixScaling` minimise (``B`` =
    :data:`~privcal.calibrators.temperature.NLL_BOUND`, their default ``nll_bound``;
    :math:`\\ell_i` from the same :func:`~privcal.metrics.statistics.nll_terms`), so a
    true-class probability of exactly 0 (a logit of -708) does not drag a class's scale to 0 in
    the federation either. Each client decides for its own rows at the current global
    parameters; the clip bounds do not depend on it, so the guarantee is unchanged.
    """
    return np.asarray(nll_terms(u, y) <= bound)


class ScalingMethod(FedMethod):
    """Parametric scaling by federated Newton (default) or parameter averaging.

    Parameters (shared by the scaling methods)
    ------------------------------------------
    update : {"newton", "parameter-averaging"}, default="newton"
        The server update (the package docstring). ``"parameter-averaging"`` is seed 003's DP-FedAvg
        on the parameters of ``local_iters`` local iterations, kept to reproduce the paper.
    local_iters : int, default=50
        Local iterations of ``"parameter-averaging"`` (ignored by Newton, which takes one step
        per round on the summed statistics).
    client_rows : int, default=200
        ``m``: a public, declared bound on the rows a typical client holds. Under DP it sets
        the default clip bounds, ``grad_clip = grad_scale * sqrt(m)`` and
        ``hess_clip = hess_scale * m`` (see :meth:`clip_bounds`). No row is dropped: a client
        with more rows is clipped like any other, so the guarantee holds whatever the sizes.
    grad_clip, hess_clip : float or None, default=None
        Explicit L2 clip bounds of a client's summed gradient and curvature (Newton under DP).
    grad_share : float in (0, 1), default=0.8
        Share of each round's zCDP budget spent on the gradient (the rest on the curvature).
    """

    kind: ClassVar[str] = "scaling"
    updates: ClassVar[tuple[str, ...]] = UPDATES
    #: Under DP, add a ridge toward the identity map (``x0``) equal to the curvature floor.
    dp_ridge: ClassVar[bool] = True
    #: Under DP (Newton), keep each round's noisy gradient and the parameters it was taken at
    #: in the state (``trace_g``, ``trace_x``), for the noise-dominance check of the release.
    evidence: ClassVar[bool] = False
    #: Per-example scales of the default clip rule (:meth:`clip_bounds`).
    grad_scale: ClassVar[float] = 2.0
    hess_scale: ClassVar[float] = 1.5

    def __init__(
        self,
        update: str = "newton",
        local_iters: int = 50,
        *,
        client_rows: int = 200,
        grad_clip: float | None = None,
        hess_clip: float | None = None,
        grad_share: float = 0.8,
    ) -> None:
        owner = type(self).__name__
        self.update = check_option(update, "update", owner, self.updates)
        self.local_iters = check_int(local_iters, "local_iters", owner, low=1)
        self.client_rows = check_int(client_rows, "client_rows", owner, low=1)
        self.grad_clip = (
            None if grad_clip is None else POSITIVE.check(grad_clip, "grad_clip", owner)
        )
        self.hess_clip = (
            None if hess_clip is None else POSITIVE.check(hess_clip, "hess_clip", owner)
        )
        self.grad_share = check_probability(grad_share, "grad_share", owner)

    @property
    def newton(self) -> bool:
        return self.update == "newton"

    # --- what every scaling method defines
    def x0(self, c: int) -> np.ndarray:
        raise NotImplementedError

    def project(self, x: np.ndarray) -> np.ndarray:
        return x

    def loss(self, x: np.ndarray, z: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        """Mean NLL and its gradient (the local objective of parameter averaging)."""
        raise NotImplementedError

    def curvature_size(self, c: int) -> int:
        raise NotImplementedError

    def stats(self, x: np.ndarray, z: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Gradient and curvature of the *summed* NLL of ``(z, y)`` at ``x`` (Newton payload)."""
        raise NotImplementedError

    def direction(self, x: np.ndarray, g: np.ndarray, h: np.ndarray, floor: float) -> np.ndarray:
        """The damped Newton step :math:`-H(h)^{-1} g` inside the method's trust region.

        Curvature entries are floored at ``floor`` (under DP: twice the noise level of the
        averaged curvature). The trust region bounds how far the step moves the calibrated
        logits, which a Newton step on the softmax NLL needs far from the optimum.
        """
        raise NotImplementedError

    # --- the protocol
    def clip_bounds(self) -> tuple[float, float]:
        """``(C_g, C_h)``: the L2 clip bounds of a client's gradient and curvature sums.

        Rule (public, fixed before any data is read): with ``m = client_rows``,
        :math:`C_g = a_g \\sqrt m` and :math:`C_h = a_h m` unless given explicitly. The
        curvature is a sum of ``m`` non-negative per-row terms of typical size ``a_h``; the
        gradient near the optimum is a sum of ``m`` roughly centred per-row terms of scale
        ``a_g``, so its size grows like :math:`\\sqrt m`. ``a_g``, ``a_h`` are the class's
        ``grad_scale``, ``hess_scale`` (docs/federated.md has the measurements behind them).
        """
        m = float(self.client_rows)
        cg = self.grad_clip if self.grad_clip is not None else self.grad_scale * math.sqrt(m)
        ch = self.hess_clip if self.hess_clip is not None else self.hess_scale * m
        return cg, ch

    def noise_ratios(self, dp: DPConfig) -> tuple[float, float]:
        """``(s_g, s_h)``: noise-to-sensitivity ratios of the gradient and curvature sums.

        With :math:`s_1` = ``dp.multiplier(1)`` (``T`` single Gaussian mechanisms are
        :math:`\\rho`-zCDP at ratio :math:`s_1`), :math:`s_g = s_1/\\sqrt{f}` and
        :math:`s_h = s_1/\\sqrt{1-f}` for ``f = grad_share``: one round costs
        :math:`f/(2s_1^2) + (1-f)/(2s_1^2) = 1/(2s_1^2)` and ``T`` rounds :math:`\\rho`.
        """
        s1 = dp.multiplier(1)
        return s1 / math.sqrt(self.grad_share), s1 / math.sqrt(1.0 - self.grad_share)

    def init(self, c: int) -> State:
        x = self.x0(c)
        if not self.newton:
            return {"params": x}
        return {"params": x, **_newton_bookkeeping(x.size, self.curvature_size(c))}

    def payload_shape(self, c: int) -> tuple[int, ...]:
        p = self.x0(c).size
        return (p + self.curvature_size(c),) if self.newton else (p,)

    def local_fit(self, x0: np.ndarray, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        return lbfgs(lambda x: self.loss(x, z, y), x0, self.local_iters)

    def client_step(self, state: State, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        x = np.asarray(state["params"], dtype=np.float64)
        if self.newton:
            return np.concatenate(self.stats(x, z, y))
        return self.local_fit(x, z, y) - x

    def clip(self, payload: np.ndarray, dp: DPConfig) -> np.ndarray:
        """Newton: the gradient part to L2 norm ``C_g`` and the curvature part to ``C_h``
        (:meth:`clip_bounds`); averaging: the update to ``dp.clip``. One payload, or a stack of
        them (leading axis), each clipped on its own."""
        payload = np.asarray(payload, dtype=np.float64)
        if not self.newton:
            return clip_rows_l2(payload, dp.clip)
        g, h = self.split(payload)
        cg, ch = self.clip_bounds()
        return np.concatenate([clip_rows_l2(g, cg), clip_rows_l2(h, ch)], axis=-1)

    def split(self, payload: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The gradient and curvature parts of a Newton payload (its length implies ``c``), or of
        each of a stack of payloads (the last axis is split)."""
        payload = np.asarray(payload, dtype=np.float64)
        p = self.x0(self.n_classes_of_payload(payload.shape[-1])).size
        return payload[..., :p], payload[..., p:]

    def mechanisms_per_round(self, c: int) -> int:
        return 2 if self.newton else 1

    def payload_measurements(self) -> tuple[Measurement, ...]:
        return (NEWTON_GRADIENT, NEWTON_CURVATURE) if self.newton else (UPDATE,)

    def payload_bound(self, dp: DPConfig) -> float:
        return max(self.clip_bounds()) if self.newton else dp.clip

    def noise_groups(self, dp: DPConfig, shape: tuple[int, ...]) -> list[NoiseGroup]:
        """Newton: the gradient block (``C_g``, std ``C_g s_g``) and the curvature block
        (``C_h``, ``C_h s_h``); averaging: the whole update (``C``, ``C s_1``)."""
        size = int(np.prod(shape))
        if not self.newton:
            sens = UPDATE.sensitivity_at(clip=dp.clip)
            return [NoiseGroup(np.arange(size), sens, dp.clip * dp.multiplier(1), dp.clip)]
        p = self.x0(self.n_classes_of_payload(size)).size
        cg, ch = self.clip_bounds()
        sg, sh = self.noise_ratios(dp)
        return [
            NoiseGroup(np.arange(p), NEWTON_GRADIENT.sensitivity_at(clip=cg), cg * sg, cg),
            NoiseGroup(np.arange(p, size), NEWTON_CURVATURE.sensitivity_at(clip=ch), ch * sh, ch),
        ]

    def n_classes_of_payload(self, size: int) -> int:
        """The number of classes ``c`` of a Newton payload of ``size`` entries."""
        for c in range(2, size + 2):
            if self.x0(c).size + self.curvature_size(c) == size:
                return c
        raise ValueError(f"A {type(self).__name__} Newton payload cannot have {size} entries.")

    def _update(
        self, state: State, released: np.ndarray, n: int, dp: DPConfig | None, denom: float | None
    ) -> State:
        """A Newton step (``update="newton"``), or parameter averaging: the released sum of
        updates over the public denominator (under DP) or over the ``n`` clients."""
        if self.newton:
            return self._newton_step(state, released, dp)
        x = np.asarray(state["params"], dtype=np.float64)
        if dp is not None:
            if denom is None or denom <= 0:
                raise ValueError("A DP scaling round needs the public denominator p * K > 0.")
            return {"params": self.project(x + released / denom)}
        if n == 0:
            return {"params": x}
        return {"params": self.project(x + released / n)}

    def _newton_step(self, state: State, total: np.ndarray, dp: DPConfig | None) -> State:
        """One damped Newton step from the summed (noisy under DP) gradient and curvature.

        Privacy: the two noisy sums of the clipped pairs (L2 sensitivities ``C_g`` and ``C_h``,
        :meth:`clip`) are the round's two Gaussian mechanisms, together :math:`1/(2s_1^2)`-zCDP
        (:meth:`noise_ratios`; :mod:`privcal.federated.dp`). Everything after them (the running
        curvature mean, its floor, the step, the trust region, the projection and the tail
        average) is post-processing of released values and public constants; no count of
        clients or rows is used, so no denominator needs declaring.
        """
        x = np.asarray(state["params"], dtype=np.float64)
        g, h = total[: x.size], total[x.size :]
        # a state holding only "params" (a caller's own) starts the bookkeeping afresh
        new = _newton_bookkeeping(x.size, h.size)
        new.update({k: np.array(v, dtype=np.float64, copy=True) for k, v in state.items()})
        t = float(new["rounds"][0]) + 1.0
        new["rounds"] = np.array([t])
        if dp is None:
            h_use, floor = h, 0.0
        else:
            cg, ch = self.clip_bounds()
            sg, sh = self.noise_ratios(dp)
            new["curv_sum"] = new["curv_sum"] + h
            h_use = new["curv_sum"] / t  # the curvature changes slowly: average the rounds
            floor = 2.0 * ch * sh / math.sqrt(t)  # twice the noise std of that mean
            if self.evidence:  # released values only: the noisy gradient and where it was
                new["trace_x"] = np.append(new.get("trace_x", np.zeros(0)), x)
                new["trace_g"] = np.append(new.get("trace_g", np.zeros(0)), g)
                new["grad_sd"] = np.array([cg * sg])
                new["dp_rounds"] = np.array([float(dp.rounds)])
            if self.dp_ridge:  # shrink toward the identity map where the noise dominates
                g = g + floor * (x - self.x0(self.n_classes_of_payload(total.size)))
        x_new = self.project(x + self.direction(x, g, h_use, floor))
        new["params"] = x_new
        if dp is not None and t > dp.rounds // 2:  # tail average: the second half's iterates
            new["tail_sum"] = new["tail_sum"] + x_new
            new["tail_n"] = new["tail_n"] + 1.0
        return new

    def fitted_params(self, state: State) -> np.ndarray:
        """The released parameters: the tail average under DP (Newton), else the iterate."""
        tail_n = float(np.asarray(state.get("tail_n", np.zeros(1)))[0])
        if tail_n > 0:
            return np.asarray(state["tail_sum"], dtype=np.float64) / tail_n
        return np.asarray(state["params"], dtype=np.float64)

    def report_terms(self, dp: DPConfig, c: int, cohort: float) -> dict[str, Any]:
        if not self.newton:
            s = dp.multiplier(1)
            return {
                "what": "clipped client updates (parameter averaging)",
                "measurement": UPDATE,
                "clip": dp.clip,
                "mechanism": f"gaussian on the sum (std C s = {dp.clip * s:.6g} per round)",
                "clips": f"clip bound C={dp.clip:g} (L2 norm of a client's update)",
                "cohort": f"expected cohort size p K={cohort:g} (the fixed denominator of the "
                "average)",
            }
        cg, ch = self.clip_bounds()
        sg, sh = self.noise_ratios(dp)
        return {
            "what": "clipped client gradient and curvature sums (federated Newton)",
            "measurement": NEWTON_GRADIENT,
            "clip": cg,
            "mechanism": (
                f"gaussian on the summed gradient (L2 sensitivity C_g={cg:.6g}, std "
                f"{cg * sg:.6g}) and on the summed curvature (L2 sensitivity C_h={ch:.6g}, std "
                f"{ch * sh:.6g}) each round; gradient share {self.grad_share:g} of the budget"
            ),
            "clips": (
                f"clip bounds C_g={cg:.6g}, C_h={ch:.6g} (L2 norms of a client's gradient and "
                f"curvature sums; from client_rows m={self.client_rows})"
            ),
            "cohort": "Newton steps use the two noisy sums only: no denominator, no client count",
        }

    def __repr__(self) -> str:
        return f"{type(self).__name__}(update={self.update!r})"


def _newton_bookkeeping(p: int, q: int) -> State:
    """A Newton run's state besides ``params`` (``p`` of them, ``q`` curvature entries) at its
    start: the curvature sum, the round count and the tail average's sum and count."""
    return {
        "curv_sum": np.zeros(q),
        "rounds": np.zeros(1),
        "tail_sum": np.zeros(p),
        "tail_n": np.zeros(1),
    }

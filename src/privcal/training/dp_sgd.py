"""DP-SGD for the recalibration maps: per-example gradients, the noise, the schedule, the clip.

The pieces :class:`~privcal.training.DPTemperatureScaling` and
:class:`~privcal.training.DPPlattScaling` fit with (the derivation of their guarantee is in
:class:`~privcal.training.DPTemperatureScaling`'s docstring):

* :data:`DP_SGD`, the measurement every DP-SGD run records (also
  :class:`~privcal.training.DPSGDTrainer`'s);
* :func:`per_sample_grads`: closed-form per-example gradients of the NLL of the temperature,
  vector, matrix and Platt maps (:func:`apply_map`, started at the identity:
  :func:`initial_params`), so Opacus needs no hooks on these tiny maps;
* :func:`NoiseSourceDPOptimizer`: Opacus's ``DPOptimizer`` (clipping, accounting hook) with its
  Gaussian noise drawn from a privcal :class:`~privcal.privacy.NoiseSource`;
* the plan read from the Laplace count ``n_tilde`` (post-processing, never ``n``):
  :func:`step_schedule`, :func:`full_batch`, :func:`averaging_start` and the default clipping
  norm :func:`auto_clip`; Opacus's noise multiplier for a target (:func:`noise_multiplier`) and
  the epsilon of a run's accountant history (:func:`accounted_epsilon`), cached on their public
  inputs.

Nothing here imports torch or Opacus at import time.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from privcal._params import EPSILON, check_probability
from privcal.metrics.statistics import softmax
from privcal.privacy import NoiseSource
from privcal.privacy.measurement import Measurement, register_measurement
from privcal.training._torch import require_torch

__all__ = [
    "AUTO_CLIP_KAPPA",
    "AUTO_CLIP_RANGE",
    "DP_SGD",
    "NoiseSourceDPOptimizer",
    "accounted_epsilon",
    "apply_map",
    "auto_clip",
    "averaging_start",
    "full_batch",
    "initial_params",
    "noise_multiplier",
    "per_sample_grads",
    "step_schedule",
]

#: DP-SGD (Opacus, and :class:`NoiseSourceDPOptimizer`): every step releases the sum of
#: per-example gradients clipped to L2 norm ``C`` plus Gaussian noise, on a Poisson sample; the
#: steps are composed by the accountant. Derived in :class:`DPTemperatureScaling`'s docstring.
DP_SGD = register_measurement(
    Measurement(
        name="training.dp_sgd",
        statistic="at each step, the sum of per-example gradients clipped to L2 norm C on a "
        "Poisson sample of rate q; the steps composed by Opacus's RDP or PRV accountant",
        mechanism="subsampled gaussian",
        norm="L2",
        sensitivity=lambda max_grad_norm: max_grad_norm,
        formula="C",
        proof="privcal.training.recalibration.DPTemperatureScaling",
    )
)


def per_sample_grads(
    kind: str, params: dict[str, np.ndarray], z: np.ndarray, y: np.ndarray
) -> dict[str, np.ndarray]:
    """Closed-form per-example gradients of ``NLL(softmax(g(z)), y)`` for the recalibrators.

    With ``s = g(z)``, ``p = softmax(s)`` and ``e = p - onehot(y)`` (``d NLL / d s = e``):

    * ``"temperature"``, ``g(z) = z / T``, ``T = exp(u)``: ``d/du = -(e . z) / T``;
    * ``"vector"``, ``g(z) = w * z + b``: ``d/dw = e * z``, ``d/db = e``;
    * ``"matrix"``, ``g(z) = z W^T + b``: ``d/dW = e z^T`` (``C x C``), ``d/db = e``;
    * ``"platt"`` (binary), ``m = z_1 - z_0``, ``g = (0, a m + b)``: ``d/da = e_1 m``,
      ``d/db = e_1``.

    Returns arrays of shape ``(n, *param.shape)``.
    """
    onehot = np.zeros_like(z)
    onehot[np.arange(z.shape[0]), y] = 1.0
    e = softmax(apply_map(kind, params, z)) - onehot
    if kind == "temperature":
        return {"u": (-np.sum(e * z, axis=1) / math.exp(float(params["u"][0])))[:, None]}
    if kind == "vector":
        return {"w": e * z, "b": e}
    if kind == "matrix":
        return {"W": e[:, :, None] * z[:, None, :], "b": e}
    e1 = e[:, 1]
    return {"a": (e1 * (z[:, 1] - z[:, 0]))[:, None], "b": e1[:, None]}


def apply_map(kind: str, params: dict[str, np.ndarray], z: np.ndarray) -> np.ndarray:
    """The recalibrated logits ``g(z)`` of the map ``kind`` (:func:`per_sample_grads`'s maps)."""
    if kind == "temperature":
        return z / math.exp(float(params["u"][0]))
    if kind == "vector":
        return params["w"] * z + params["b"]
    if kind == "matrix":
        return z @ params["W"].T + params["b"]
    m = z[:, 1] - z[:, 0]
    return np.stack([np.zeros(len(m)), params["a"][0] * m + params["b"][0]], axis=1)


def initial_params(kind: str, c: int) -> dict[str, np.ndarray]:
    """The identity map's parameters (``T = 1``, ``w = 1``, ``W = I``, ``a = 1``; ``b = 0``)."""
    if kind == "temperature":
        return {"u": np.zeros(1)}
    if kind == "vector":
        return {"w": np.ones(c), "b": np.zeros(c)}
    if kind == "matrix":
        return {"W": np.eye(c), "b": np.zeros(c)}
    return {"a": np.ones(1), "b": np.zeros(1)}


def _noise_optimizer_class() -> Any:
    torch, _ = require_torch("privcal.training.NoiseSourceDPOptimizer")
    from opacus.optimizers import DPOptimizer

    class _NoiseSourceDPOptimizer(DPOptimizer):
        """Opacus's ``DPOptimizer`` with the Gaussian noise drawn from a privcal NoiseSource."""

        def __init__(self, optimizer: Any, *, noise: NoiseSource, **kwargs: Any) -> None:
            super().__init__(optimizer, **kwargs)
            self.noise = noise

        def add_noise(self) -> None:
            std = float(self.noise_multiplier * self.max_grad_norm)
            for p in self.params:
                draw = np.asarray(self.noise.gaussian(std, tuple(p.summed_grad.shape)))
                noise = torch.as_tensor(draw, dtype=p.summed_grad.dtype)
                p.grad = (p.summed_grad + noise).view_as(p)
                p.summed_grad._processed = True  # Opacus's "already noised" marker

    return _NoiseSourceDPOptimizer


def NoiseSourceDPOptimizer(optimizer: Any, *, noise: NoiseSource, **kwargs: Any) -> Any:
    """Build Opacus's ``DPOptimizer`` whose Gaussian noise comes from ``noise``.

    ``kwargs`` are ``DPOptimizer``'s (``noise_multiplier``, ``max_grad_norm``,
    ``expected_batch_size``, ...). The released step is
    ``(sum_i clip_C(g_i) + N(0, (noise_multiplier C)^2 I)) / expected_batch_size``.
    """
    return _noise_optimizer_class()(optimizer, noise=noise, **kwargs)


#: :func:`auto_clip`'s constants: ``C = clip(AUTO_CLIP_KAPPA n / sigma_1, *AUTO_CLIP_RANGE)``.
AUTO_CLIP_KAPPA = 0.03
AUTO_CLIP_RANGE = (1.0, 10.0)


def auto_clip(n_estimate: float, epsilon: float, delta: float) -> float:
    """Default clipping norm: ``C = clip(kappa n_tilde / sigma_1(epsilon, delta), 1, 10)``.

    ``sigma_1`` is the noise multiplier of one full-batch Gaussian release at ``(epsilon,
    delta)`` (Opacus's RDP ``get_noise_multiplier`` with ``q = 1``, one step); ``kappa =``
    :data:`AUTO_CLIP_KAPPA`. Rationale: with averaged iterates, full-batch DP-SGD on ``log T``
    ends at the root of the clipped mean gradient plus noise of standard deviation about
    ``sigma_1 C / (n H)`` (``H`` the curvature, 0.2-1.3 on the digits MLPs and the CIFAR / IMDB
    networks of ``shared/data``), while clipping biases ``T`` down: misclassified confident rows
    have gradients ``|g_i| ~ margin / T`` up to 5-20. The rule keeps the noise term near
    ``kappa / H`` and lets ``C`` reach the paper's 10 once ``n epsilon`` is large (e.g. 2000
    rows at epsilon >= 3). Post-processing of the count ``n_tilde``: public.
    """
    eps = EPSILON.check(epsilon, "epsilon", "auto_clip")
    dlt = check_probability(delta, "delta", "auto_clip")
    sigma_1 = noise_multiplier(eps, dlt, 1.0, 1, "rdp")
    lo, hi = AUTO_CLIP_RANGE
    return float(min(max(AUTO_CLIP_KAPPA * float(n_estimate) / sigma_1, lo), hi))


def step_schedule(n_estimate: float, batch_size: int, epochs: int) -> tuple[float, int, float]:
    """``(q, steps, expected_batch)`` from the DP count ``n_estimate`` and public parameters.

    ``m = max(n_estimate, batch_size)``; ``q = 1 / ceil(m / batch_size)`` (Poisson rate),
    ``steps = epochs * ceil(m / batch_size)`` and the gradient's denominator ``q m``. Nothing
    here reads the exact ``n``: it is post-processing of the count release.
    """
    m = max(float(n_estimate), float(batch_size))
    per_epoch = math.ceil(m / batch_size)
    q = 1.0 / per_epoch
    return q, epochs * per_epoch, q * m


def full_batch(n_estimate: float) -> int:
    """The default batch ``ceil(max(n_tilde, 1))``: every step sees the whole set (``q = 1``).

    Post-processing of the count. With ``q = 1`` the RDP of ``k`` Gaussian steps at multiplier
    ``sigma_k`` equals that of one at ``sigma_k / sqrt(k)``, so averaging the iterates costs no
    privacy: the averaged gradient noise stays near one full-batch release's ``sigma_1 C / n``
    whatever ``epochs`` is (Poisson batches of 64 measured no better on 80-180 rows).
    """
    return max(math.ceil(float(n_estimate)), 1)


def averaging_start(steps: int, average: float) -> int:
    """First step of the iterate average: the last ``ceil(average steps)`` steps (at least 1)."""
    return steps - max(math.ceil(average * steps), 1)


@functools.lru_cache(maxsize=256)
def noise_multiplier(epsilon: float, delta: float, q: float, steps: int, accountant: str) -> float:
    """Opacus's ``get_noise_multiplier`` (cached: it depends on public quantities only)."""
    from opacus.accountants.utils import get_noise_multiplier

    return float(
        get_noise_multiplier(
            target_epsilon=epsilon,
            target_delta=delta,
            sample_rate=q,
            steps=steps,
            accountant=accountant,
        )
    )


@functools.lru_cache(maxsize=256)
def accounted_epsilon(
    history: tuple[tuple[float, float, int], ...], delta: float, kind: str
) -> float:
    """Epsilon of an Opacus accountant whose ``history`` is ``history`` (cached, public inputs)."""
    from opacus.accountants import create_accountant

    acc = create_accountant(mechanism=kind)
    acc.history = list(history)
    return float(acc.get_epsilon(delta))

"""DP temperature and Platt scaling trained with DP-SGD, and the DP recalibration pipeline.

:class:`DPTemperatureScaling` and :class:`DPPlattScaling` are privcal calibrators
(:class:`~privcal.calibrators.base.Calibrator`) that fit on validation logits alone, by DP-SGD on
the NLL of the recalibrated logits (seed 001 Sec. 3.5; the settings of its text, App. B.2,
temperature initialised at 1, 100 epochs, learning rate 0.1 linearly decayed, clipping norm 10,
are :data:`PAPER_SETTINGS`; the defaults of the authors' code, 20 full-batch epochs, learning
rate 0.1 linearly decayed, clipping norm 1, are :data:`AUTHORS_CODE_SETTINGS`; both are in
:data:`DP_TS_SETTINGS` by source; privcal's defaults are full-batch steps with averaged iterates
and a clipping norm set by :func:`auto_clip`), with ``n`` kept private: a
Laplace count sets the step schedule, and every logit row is bounded. The per-example gradients of
these tiny maps are computed in closed form; clipping, noise and accounting are Opacus's
(:class:`opacus.optimizers.DPOptimizer` with an accountant hook), the noise drawn from a privcal
:class:`~privcal.privacy.NoiseSource`.

:class:`DPRecalibration` is seed 001's Algorithm 1: split the training data by a keyed hash of
each example (``validation_ratio``, default 0.1), train the model with DP-SGD on one part and the
recalibrator with DP-SGD on the other; by parallel composition over the disjoint parts (seed 001
Prop. A.1) the pair is ``(max eps, max delta)``-DP, which its ``privacy_report_`` shows.

None of this imports torch at import time: ``import privcal.training`` works without the torch
extra, and ``fit`` then raises :class:`~privcal.training.MissingTorchError`.
"""

from __future__ import annotations

import functools
import hashlib
import math
import secrets
import warnings
from typing import Any, ClassVar

import numpy as np

from privcal._params import check_int, check_option, check_probability, check_real
from privcal.calibrators.base import Calibrator, ReportsPrivacy, register
from privcal.metrics.statistics import softmax
from privcal.privacy import (
    InsecureNoiseWarning,
    NoiseSource,
    PrivacyReport,
    SeededNoise,
    noise_kind,
    resolve_noise,
)
from privcal.privacy.filter import dpsgd_curve
from privcal.privacy.measurement import Measurement, register_measurement
from privcal.privacy.odometer import as_odometer
from privcal.private.queries import QUERY_MEASUREMENTS
from privcal.training._torch import require_torch

__all__ = [
    "AUTHORS_CODE_SETTINGS",
    "DP_SGD",
    "DP_TS_SETTINGS",
    "PAPER_SETTINGS",
    "DPPlattScaling",
    "DPRecalibration",
    "DPTemperatureScaling",
    "NoiseSourceDPOptimizer",
    "auto_clip",
    "averaging_start",
    "bounded_logits",
    "full_batch",
    "per_sample_grads",
    "recalibration_side",
    "split_key",
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


# ------------------------------------------------------------------------ per-sample grads
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
    n = z.shape[0]
    onehot = np.zeros_like(z)
    onehot[np.arange(n), y] = 1.0
    if kind == "temperature":
        t = math.exp(float(params["u"][0]))
        e = softmax(z / t) - onehot
        return {"u": (-np.sum(e * z, axis=1) / t)[:, None]}
    if kind == "vector":
        e = softmax(params["w"] * z + params["b"]) - onehot
        return {"w": e * z, "b": e}
    if kind == "matrix":
        e = softmax(z @ params["W"].T + params["b"]) - onehot
        return {"W": e[:, :, None] * z[:, None, :], "b": e}
    m = z[:, 1] - z[:, 0]
    s = np.stack([np.zeros(n), params["a"][0] * m + params["b"][0]], axis=1)
    e1 = (softmax(s) - onehot)[:, 1]
    return {"a": (e1 * m)[:, None], "b": e1[:, None]}


def _apply(kind: str, params: dict[str, np.ndarray], z: np.ndarray) -> np.ndarray:
    if kind == "temperature":
        return z / math.exp(float(params["u"][0]))
    if kind == "vector":
        return params["w"] * z + params["b"]
    if kind == "matrix":
        return z @ params["W"].T + params["b"]
    m = z[:, 1] - z[:, 0]
    return np.stack([np.zeros(len(m)), params["a"][0] * m + params["b"][0]], axis=1)


def _init(kind: str, c: int) -> dict[str, np.ndarray]:
    if kind == "temperature":
        return {"u": np.zeros(1)}
    if kind == "vector":
        return {"w": np.ones(c), "b": np.zeros(c)}
    if kind == "matrix":
        return {"W": np.eye(c), "b": np.zeros(c)}
    return {"a": np.ones(1), "b": np.zeros(1)}


# ------------------------------------------------------------------------------ optimizer
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


# ------------------------------------------------------------------------------ calibrators
#: Share of the budget :class:`DPTemperatureScaling` / :class:`DPPlattScaling` spend on a
#: Laplace count of the validation set (the step schedule is derived from that count, never n).
COUNT_SHARE = 0.02
#: Public box every parameter is projected onto after each step (post-processing): ``log T`` in
#: ``[log 1e-2, log 1e2]``, every other parameter in ``[-1e3, 1e3]``.
LOG_TEMPERATURE_RANGE = (math.log(1e-2), math.log(1e2))
PARAMETER_RANGE = (-1e3, 1e3)
#: What the DP-TS / DP-PS guarantee treats as public (``privacy_report_.public``).
PUBLIC_QUANTITIES = (
    "number of classes",
    "hyperparameters (epsilon, delta, epochs, lr, max_grad_norm, batch_size, schedule, average, "
    "logit_bound; the defaults of max_grad_norm and batch_size are functions of the count)",
    "the classifier that produced the logits (trained on other data or released privately)",
)


def bounded_logits(z: np.ndarray, bound: float) -> np.ndarray:
    """``clip(z - max_c z, -bound, 0)`` row-wise: each row's logits in the public box.

    Subtracting the row maximum changes neither softmax nor the temperature-scaled softmax
    (``softmax((z - m) / T) = softmax(z / T)``) nor the binary margin ``z_1 - z_0``; clipping at
    ``-bound`` changes only probabilities below ``exp(-bound / T)``. Every row then has
    ``|z_c| <= bound``, so its per-example gradient is finite and its influence bounded even for
    logits of ``1e6`` or ``1e300`` (the DP-SGD clipping then bounds it by ``C``).
    """
    centred = z - z.max(axis=1, keepdims=True)
    return np.clip(centred, -bound, 0.0)


#: Seed 001's **paper text** (App. B.2) for DP-TS / DP-PS
#: (``DPTemperatureScaling(eps, **PAPER_SETTINGS)``): 100 epochs, lr 0.1 decayed linearly,
#: clipping 10, last iterate. The text gives no batch size for recalibration; 64 is privcal's.
PAPER_SETTINGS: dict[str, Any] = {
    "epochs": 100,
    "lr": 0.1,
    "max_grad_norm": 10.0,
    "batch_size": 64,
    "schedule": "linear",
    "average": 0.0,
}
#: The defaults of seed 001's **authors' code** (``main`` of ``calibration/calibration.py`` in
#: github.com/hlzhang109/dp-calibration): 20 epochs of full-batch steps (their loader's batch is
#: the whole validation set), lr 0.1 decayed linearly to 0 (``get_linear_schedule_with_warmup``,
#: no warm-up), clipping norm 1, plain SGD, last iterate. Not reproduced: their
#: parameterisation (``1/T = softplus(theta)``, privcal's is ``log T``), their
#: ``delta = n^-1.1`` (privcal's ``delta`` is an argument) and their exact ``n`` (privcal spends
#: :data:`COUNT_SHARE` of epsilon on a noisy count).
AUTHORS_CODE_SETTINGS: dict[str, Any] = {
    "epochs": 20,
    "lr": 0.1,
    "max_grad_norm": 1.0,
    "batch_size": None,
    "schedule": "linear",
    "average": 0.0,
}
#: Both, by source: ``DPTemperatureScaling(eps, **DP_TS_SETTINGS["authors-code"])``.
DP_TS_SETTINGS: dict[str, dict[str, Any]] = {
    "paper-text": PAPER_SETTINGS,
    "authors-code": AUTHORS_CODE_SETTINGS,
}
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
    eps = check_real(epsilon, "epsilon", "auto_clip", low=0.0, low_open=True)
    dlt = check_real(delta, "delta", "auto_clip", low=0.0, high=1.0, low_open=True, high_open=True)
    sigma_1 = _noise_multiplier(eps, dlt, 1.0, 1, "rdp")
    lo, hi = AUTO_CLIP_RANGE
    return float(min(max(AUTO_CLIP_KAPPA * float(n_estimate) / sigma_1, lo), hi))


def _project(kind: str, params: Any) -> None:
    """Project the parameter tensors onto the public box, in place (post-processing)."""
    lo, hi = LOG_TEMPERATURE_RANGE if kind == "temperature" else PARAMETER_RANGE
    for p in params.values():
        p.data.clamp_(lo, hi)


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
def _noise_multiplier(epsilon: float, delta: float, q: float, steps: int, accountant: str) -> float:
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
def _accounted_epsilon(
    history: tuple[tuple[float, float, int], ...], delta: float, kind: str
) -> float:
    """Epsilon of an Opacus accountant whose ``history`` is ``history`` (cached, public inputs)."""
    from opacus.accountants import create_accountant

    acc = create_accountant(mechanism=kind)
    acc.history = list(history)
    return float(acc.get_epsilon(delta))


class _DPScaling(ReportsPrivacy, Calibrator):
    """DP-SGD fit of a recalibration map on validation logits (shared by DP-TS and DP-PS)."""

    _kind: ClassVar[str] = "temperature"

    def __init__(
        self,
        epsilon: float = 8.0,
        delta: float = 1e-5,
        *,
        epochs: int = 200,
        lr: float = 0.2,
        max_grad_norm: float | None = None,
        batch_size: int | None = None,
        schedule: str = "constant",
        average: float = 0.5,
        logit_bound: float = 50.0,
        accountant: str = "rdp",
        noise: NoiseSource | None = None,
        seed: int | None = None,
        ledger: Any = None,
    ) -> None:
        self.epsilon = epsilon
        self.delta = delta
        self.epochs = epochs
        self.lr = lr
        self.max_grad_norm = max_grad_norm
        self.batch_size = batch_size
        self.schedule = schedule
        self.average = average
        self.logit_bound = logit_bound
        self.accountant = accountant
        self.noise = noise
        self.seed = seed
        self.ledger = ledger

    def _validate_params(self) -> None:
        o = type(self).__name__
        check_real(self.epsilon, "epsilon", o, low=0.0, low_open=True)
        check_probability(self.delta, "delta", o)
        check_int(self.epochs, "epochs", o, low=1)
        check_real(self.lr, "lr", o, low=0.0, low_open=True)
        if self.max_grad_norm is not None:
            check_real(self.max_grad_norm, "max_grad_norm", o, low=0.0, low_open=True)
        if self.batch_size is not None:
            check_int(self.batch_size, "batch_size", o, low=1)
        check_option(self.schedule, "schedule", o, ("constant", "linear"))
        check_real(self.average, "average", o, low=0.0, high=1.0, high_open=True)
        check_real(self.logit_bound, "logit_bound", o, low=0.0, low_open=True)
        check_option(self.accountant, "accountant", o, ("rdp", "prv"))
        if self.seed is not None:
            check_int(self.seed, "seed", o, low=0)

    def _map_kind(self, c: int) -> str:
        return self._kind

    def _noise(self) -> tuple[NoiseSource, str]:
        """The Gaussian/Laplace source and the report's noise kind (a seed makes it seeded)."""
        owner = type(self).__name__
        noise = resolve_noise(self.noise, owner, stacklevel=5)
        if self.seed is not None:
            warnings.warn(
                f"{owner}(seed={self.seed}) fixes the Poisson sampling: the batches are "
                "reproducible from the seed, so the subsampling claimed by the accountant does "
                "not hold and the release is not private. Leave seed=None (OS entropy).",
                InsecureNoiseWarning,
                stacklevel=5,
            )
            return noise, "seeded"
        return noise, noise_kind(noise)

    def _fit(self, z: np.ndarray, y: np.ndarray) -> None:
        torch, _ = require_torch(type(self).__name__)
        from opacus.accountants import create_accountant

        owner = type(self).__name__
        odometer = as_odometer(self.ledger, owner)
        noise, kind_of_noise = self._noise()
        kind = self._map_kind(z.shape[1])
        zb = bounded_logits(z, float(self.logit_bound))
        eps_count = COUNT_SHARE * float(self.epsilon)
        eps_sgd = float(self.epsilon) - eps_count
        if odometer is not None:
            # the DP-SGD plan (so its RDP curve) is read from the count: check the whole fit by
            # basic composition first, then charge each release before it is drawn
            odometer.check(f"{owner}.fit", float(self.epsilon), float(self.delta))
            odometer.spend(
                f"{owner}.fit: count n",
                eps_count,
                mechanism="laplace",
                sensitivity=QUERY_MEASUREMENTS["count"].sensitivity_at(),
            )
        n_estimate, count_release = QUERY_MEASUREMENTS["count"].release(
            float(z.shape[0]),
            eps_count,
            noise,
            query="count n (sets the step schedule)",
            source="recalibration",
        )
        batch = full_batch(float(n_estimate)) if self.batch_size is None else self.batch_size
        clip = (
            auto_clip(float(n_estimate), eps_sgd, float(self.delta))
            if self.max_grad_norm is None
            else float(self.max_grad_norm)
        )
        q, total, denominator = step_schedule(float(n_estimate), batch, self.epochs)
        sigma = _noise_multiplier(eps_sgd, float(self.delta), q, total, str(self.accountant))
        if odometer is not None:
            odometer.spend(
                f"{owner}.fit: DP-SGD ({total} steps, q={q:.4g})",
                eps_sgd,
                float(self.delta),
                mechanism="subsampled gaussian",
                sensitivity=clip,
                rdp=dpsgd_curve(sigma, q, total, odometer.rule.orders),
            )
        rng = np.random.default_rng(self.seed)  # Poisson sampling: OS entropy when seed is None
        params = _init(kind, z.shape[1])
        tensors = {k: torch.nn.Parameter(torch.from_numpy(v.copy())) for k, v in params.items()}
        sgd = torch.optim.SGD(list(tensors.values()), lr=self.lr)
        opt = NoiseSourceDPOptimizer(
            sgd,
            noise=noise,
            noise_multiplier=sigma,
            max_grad_norm=clip,
            expected_batch_size=denominator,
        )
        acc = create_accountant(mechanism=self.accountant)
        opt.attach_step_hook(acc.get_optimizer_hook_fn(sample_rate=q))
        n = z.shape[0]
        start = averaging_start(total, float(self.average))
        mean = {k: np.zeros_like(v) for k, v in params.items()}
        for t in range(total):
            decay = 1.0 - t / total if self.schedule == "linear" else 1.0  # seed 001 B.2: linear
            for group in sgd.param_groups:
                group["lr"] = self.lr * decay
            idx = np.flatnonzero(rng.random(n) < q)
            cur = {k: v.detach().numpy() for k, v in tensors.items()}
            grads = per_sample_grads(kind, cur, zb[idx], y[idx])
            for k, p in tensors.items():
                p.grad_sample = torch.from_numpy(grads[k])
            opt.step()
            opt.zero_grad()
            _project(kind, tensors)
            if t >= start:
                for k, v in tensors.items():
                    mean[k] += v.detach().numpy() / (total - start)
        self.params_ = mean
        self.max_grad_norm_ = clip
        self.batch_size_ = batch
        self.map_ = kind
        self.n_estimate_ = float(n_estimate)
        self.noise_multiplier_ = sigma
        self.sample_rate_ = q
        self.steps_ = total
        self.accountant_history_ = [tuple(h) for h in acc.history]
        self.privacy_report_ = PrivacyReport(
            [
                count_release,
                DP_SGD.record(
                    f"DP-SGD {type(self).__name__} ({kind}, {total} steps, q={q:.4g})",
                    _accounted_epsilon(
                        tuple(self.accountant_history_), float(self.delta), str(self.accountant)
                    ),
                    source="recalibration",
                    delta=float(self.delta),
                    mechanism=f"subsampled gaussian, opacus {self.accountant}",
                    max_grad_norm=clip,
                ),
            ],
            unit="example",
            relation="add/remove",
            public=PUBLIC_QUANTITIES,
            noise=kind_of_noise,
        )
        self.epsilon_spent_ = float(self.privacy_report_.epsilon)
        self._set_public_params()

    def _set_public_params(self) -> None:
        """Expose the learned map under readable names (overridden)."""

    def _predict_proba(self, z: np.ndarray) -> np.ndarray:
        return softmax(_apply(self.map_, self.params_, bounded_logits(z, float(self.logit_bound))))

    def _jsonable_params(self) -> dict[str, Any]:
        params = dict(self.get_params(deep=False))
        params["noise"] = None  # a noise source is not part of the fitted calibrator
        params.pop("ledger", None)  # nor is the ledger that paid for it
        return params


@register
class DPTemperatureScaling(_DPScaling):
    """Temperature scaling fitted with DP-SGD on validation logits (DP-TS, seed 001 Sec. 3.5).

    Minimises ``mean_i NLL(softmax(z_i / T), y_i)`` over ``T = exp(u)`` by DP-SGD (Poisson
    sampling, clipping at ``max_grad_norm``, Gaussian noise), starting from ``T = 1``, on the
    bounded logits :func:`bounded_logits` (row maximum subtracted, clipped at ``-logit_bound``;
    the same map is applied in ``predict_proba``).

    Defaults (issue 13) differ from seed 001's App. B.2 (:data:`PAPER_SETTINGS`, e.g.
    ``DPTemperatureScaling(8.0, **PAPER_SETTINGS)``) and from the authors' code
    (:data:`AUTHORS_CODE_SETTINGS`: 20 full-batch epochs, ``C = 1``): full-batch steps,
    constant ``lr``, the iterate average over the last half and a clipping norm from
    :func:`auto_clip`. On the
    80-142-row recalibration splits of ``privcal bench bu2023`` (digits MLPs) the median
    ``|log T - log T_nonprivate|`` falls from 0.30 to 0.08 at epsilon 3 and from 0.22 to 0.10 at
    epsilon 8 (5 noise draws per split): with 10 as the clipping norm the noise
    ``sigma C / n`` dominates, below ~2 clipping biases ``T`` down (the confident wrong rows,
    whose gradients ``margin / T`` reach 3-20, are the ones that ask for a larger ``T``).
    On ~100 rows at epsilon 1 no setting tried gets ``T`` within 20% of the non-private fit.

    Parameters
    ----------
    epsilon : float, default=8.0
        Total epsilon, ``> 0``: :data:`COUNT_SHARE` of it for the count, the rest for DP-SGD.
    delta : float, default=1e-5
        Target delta, in ``(0, 1)``.
    epochs : int, default=200
        Passes over the *estimated* data size (see Privacy).
    lr : float, default=0.2
        Learning rate (of ``log T``). Rule: ``lr H epochs / 2 >= 4`` for curvatures ``H >= 0.2``
        (the flattest NLL seen, on the digits MLPs and the ``shared/data`` networks: ``H`` in
        0.2-1.3), so the first half converges from ``T = 1``, and ``lr H < 2`` (stable) up to
        ``H = 10``.
    max_grad_norm : float or None, default=None
        Clipping norm ``C`` of each per-example gradient; ``None``: :func:`auto_clip` of the
        count and the budget, ``clip(0.03 n_tilde / sigma_1(epsilon), 1, 10)`` (1.5-6 on 80-180
        rows at epsilon 3-8, 10 from ~2000 rows). The value used is ``max_grad_norm_``.
    batch_size : int or None, default=None
        Expected Poisson batch size ``b``; ``None``: the full (estimated) set, ``q = 1``
        (:func:`full_batch`). The value used is ``batch_size_``.
    schedule : {"constant", "linear"}, default="constant"
        Learning rate ``lr`` throughout, or ``lr (1 - t / steps)`` (seed 001 App. B.2).
    average : float, default=0.5
        Share of the last steps whose iterates are averaged into the released parameters
        (Polyak-Ruppert; post-processing); ``0``: the last iterate (seed 001).
    logit_bound : float, default=50.0
        Public bound ``L``: each row is shifted to maximum 0 and clipped to ``[-L, 0]``.
    accountant : {"rdp", "prv"}, default="rdp"
        Opacus accountant (noise multiplier for the target and reported epsilon).
    noise : NoiseSource, optional
        Source of the Laplace and Gaussian noise; ``None``: :class:`~privcal.privacy.SecureNoise`
        (OpenDP). A seeded source warns :class:`~privcal.privacy.InsecureNoiseWarning`.
    seed : int, optional
        Seed of the Poisson sampling. ``None`` (default): fresh OS entropy (NumPy's
        ``SeedSequence``, from :mod:`secrets`). A seed makes the batches predictable, so the
        subsampling the accountant credits does not hold: it warns
        :class:`~privcal.privacy.InsecureNoiseWarning` and the report is ``"not private"``.
    ledger : PrivacyOdometer, str, Path or None, default=None
        A pipeline ledger (a path must be an existing ledger file). The whole fit ``(epsilon,
        delta)`` is first checked by basic composition (refused: nothing recorded, nothing
        drawn, the estimator stays unfitted); then the count is charged before it is drawn
        and the DP-SGD run, with its RDP curve (``dp_accounting``, Poisson-subsampled Gaussian
        over its steps), before its first step. Its plan is read from the count, which is why
        it is charged as a second step.

    Attributes
    ----------
    temperature_ : float
    max_grad_norm_ : float
        The clipping norm used (the DP-SGD release's sensitivity).
    batch_size_ : int
        The expected batch size used.
    n_estimate_ : float
        The Laplace count ``n + Lap(1 / (COUNT_SHARE epsilon))`` (a release).
    noise_multiplier_ : float
    sample_rate_ : float
    steps_ : int
        ``noise_multiplier_``, ``sample_rate_`` and ``steps_`` are functions of ``n_estimate_``
        and of public parameters only (:func:`step_schedule`).
    epsilon_spent_ : float
        Count plus Opacus's accountant after the run (``<= epsilon``).
    accountant_history_ : list of (sigma, q, steps)
    privacy_report_ : PrivacyReport
        Two releases (source ``"recalibration"``): the count and the DP-SGD run.

    Privacy
    -------
    Neighbouring relation: add/remove one validation example ``(z, y)``; ``n`` is private. Logits
    are the data; the classifier that produced them is public or was released privately before.

    * **Count**: ``n_tilde = n + Lap(1 / eps_0)``, ``eps_0 = COUNT_SHARE epsilon``; sensitivity
      1, ``eps_0``-DP. The schedule, the default batch (:func:`full_batch`) and the default
      clipping norm (:func:`auto_clip`) are post-processing of it (:func:`step_schedule`): with
      ``m = max(n_tilde, b)``, ``q = 1 / ceil(m / b)``, ``steps = epochs ceil(m / b)``, the
      gradient denominator ``q m`` and ``sigma`` from Opacus's ``get_noise_multiplier(epsilon -
      eps_0, delta, q, steps)``. None reads ``n``, so none of them (nor ``steps_``, ``q``,
      ``sigma`` in the fitted metadata) leaks it beyond the count.
    * **Bounded rows**: each logit row lies in ``[-L, 0]^C`` after :func:`bounded_logits`, so
      every per-example gradient is finite (no NaN/inf from one row, even for logits of 1e6);
      parameters are projected onto a public box after each step (post-processing).
    * **DP-SGD**: each step sums per-example gradients clipped to L2 norm ``C =
      max_grad_norm_`` (sensitivity
      ``C`` under add/remove) and adds ``N(0, (sigma C)^2)`` on a Poisson sample of rate ``q``
      drawn from OS entropy; ``steps`` such steps are composed by Opacus's RDP or PRV
      accountant: ``(eps_sgd, delta)``-DP with ``eps_sgd <= epsilon - eps_0``.

    Basic composition: ``(eps_0 + eps_sgd, delta) = (epsilon_spent_, delta)``-DP,
    ``epsilon_spent_ <= epsilon``. Public: :data:`PUBLIC_QUANTITIES` (``privacy_report_.public``).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> z = 4 * rng.normal(size=(500, 3)); y = z.argmax(1)
    >>> ts = DPTemperatureScaling(8.0, 1e-5).fit(z, y)
    >>> ts.privacy_report_.epsilon <= 8.0, ts.privacy_report_.status
    (True, 'private')
    """

    _kind: ClassVar[str] = "temperature"
    _fitted_attributes: ClassVar[tuple[str, ...]] = (
        "params_",
        "map_",
        "temperature_",
        "n_estimate_",
        "noise_multiplier_",
        "sample_rate_",
        "steps_",
        "epsilon_spent_",
    )

    def _set_public_params(self) -> None:
        self.temperature_ = float(math.exp(float(self.params_["u"][0])))


@register
class DPPlattScaling(_DPScaling):
    """Platt scaling fitted with DP-SGD (DP-PS, seed 001 Sec. 3.5); vector or matrix for C > 2.

    Maps: binary (``mode="auto"`` with 2 classes, or ``"platt"``): ``sigmoid(a m + b)`` on the
    logit margin ``m = z_1 - z_0``; multiclass: vector scaling ``softmax(w * z + b)``
    (``mode="auto"`` or ``"vector"``) or matrix scaling ``softmax(W z + b)`` (``"matrix"``), the
    multiclass extensions of Guo et al. (2017) that seed 001 uses. Initialised at the identity.

    Parameters
    ----------
    mode : {"auto", "platt", "vector", "matrix"}, default="auto"
    epsilon, delta, epochs, lr, max_grad_norm, batch_size, schedule, average, logit_bound
    accountant, noise, seed, ledger
        As :class:`DPTemperatureScaling` (:data:`PAPER_SETTINGS` for seed 001's text,
        :data:`AUTHORS_CODE_SETTINGS` for its code's defaults).

    Attributes
    ----------
    params_ : dict of ndarray
        ``{"a", "b"}``, ``{"w", "b"}`` or ``{"W", "b"}``.
    map_ : str
    n_estimate_, noise_multiplier_, sample_rate_, steps_, epsilon_spent_, accountant_history_
    privacy_report_
        As :class:`DPTemperatureScaling`.

    Privacy
    -------
    As :class:`DPTemperatureScaling` (add/remove, ``n`` private, a Laplace count sets the
    schedule): the clipping bounds each example's gradient over all parameters jointly, so the
    sensitivity is ``max_grad_norm`` whatever the map's dimension. The maps act on the bounded
    logits, so the margin ``m = z_1 - z_0`` lies in ``[-L, L]``.
    """

    _fitted_attributes: ClassVar[tuple[str, ...]] = (
        "params_",
        "map_",
        "n_estimate_",
        "noise_multiplier_",
        "sample_rate_",
        "steps_",
        "epsilon_spent_",
    )

    def __init__(
        self,
        epsilon: float = 8.0,
        delta: float = 1e-5,
        *,
        mode: str = "auto",
        epochs: int = 200,
        lr: float = 0.2,
        max_grad_norm: float | None = None,
        batch_size: int | None = None,
        schedule: str = "constant",
        average: float = 0.5,
        logit_bound: float = 50.0,
        accountant: str = "rdp",
        noise: NoiseSource | None = None,
        seed: int | None = None,
        ledger: Any = None,
    ) -> None:
        super().__init__(
            epsilon,
            delta,
            epochs=epochs,
            lr=lr,
            max_grad_norm=max_grad_norm,
            batch_size=batch_size,
            schedule=schedule,
            average=average,
            logit_bound=logit_bound,
            accountant=accountant,
            noise=noise,
            seed=seed,
            ledger=ledger,
        )
        self.mode = mode

    def _validate_params(self) -> None:
        super()._validate_params()
        check_option(self.mode, "mode", "DPPlattScaling", ("auto", "platt", "vector", "matrix"))

    def _map_kind(self, c: int) -> str:
        if self.mode == "auto":
            return "platt" if c == 2 else "vector"
        if self.mode == "platt" and c != 2:
            raise ValueError(
                f"The 'mode' parameter of DPPlattScaling can be 'platt' only for 2 classes. "
                f"Got 'platt' with {c} classes instead."
            )
        return str(self.mode)


# ------------------------------------------------------------------------------ pipeline
def split_key(seed: int | bytes | None) -> bytes:
    """The split's hash key: 32 bytes from the OS CSPRNG for ``None``, else from ``seed``."""
    if seed is None:
        return secrets.token_bytes(32)
    if isinstance(seed, bytes):
        return seed
    return int(seed).to_bytes(8, "little")


def recalibration_side(X: np.ndarray, y: np.ndarray, key: bytes, ratio: float) -> np.ndarray:
    """``True`` where example ``i`` goes to the recalibration part: a keyed hash of its own row.

    ``h_i = BLAKE2b_key(bytes(X_i) || bytes(y_i))`` read as an integer in ``[0, 2^64)``; the
    example goes to recalibration iff ``h_i < ratio 2^64``. Each example's side depends on the
    key and on that example only: not on ``n``, its position or the other rows.
    """
    Xc = np.ascontiguousarray(X)
    yc = np.ascontiguousarray(y)
    k = key[:64]
    threshold = int(ratio * 2**64)
    side = np.empty(Xc.shape[0], dtype=bool)
    for i in range(Xc.shape[0]):
        h = hashlib.blake2b(Xc[i].tobytes() + yc[i].tobytes(), digest_size=8, key=k)
        side[i] = int.from_bytes(h.digest(), "little") < threshold
    return side


class DPRecalibration:
    """Seed 001 Algorithm 1: DP-SGD on one part, DP recalibration on the other.

    Parameters
    ----------
    trainer : privcal.training.DPSGDTrainer (or DPSGLDTrainer / SGDTrainer)
        Trains the classifier on the training part (it is cloned, not modified).
    calibrator : Calibrator
        Fitted on the classifier's logits on the recalibration part, e.g.
        :class:`DPTemperatureScaling` or :class:`DPPlattScaling`. A non-private calibrator is
        accepted for baselines; the result then has no guarantee (``privacy_report_`` is None).
    validation_ratio : float, default=0.1
        Probability that an example goes to the recalibration part, in ``(0, 1)`` (the part's
        size is ``Binomial(n, validation_ratio)``, not a fixed share).
    seed : int, bytes or None, default=None
        Key of the per-example hash that splits the data (:func:`recalibration_side`); ``None``
        draws 32 bytes from the OS CSPRNG. An int or bytes key makes the split reproducible;
        it may be public (the guarantee below does not need it secret).

    Attributes
    ----------
    trainer_, calibrator_ : the fitted trainer and calibrator
    train_index_, recal_index_ : ndarray
        The disjoint parts.
    privacy_report_ : PrivacyReport or None
        Releases of both stages, sources ``"train"`` and ``"recalibration"``; its epsilon is
        their parallel composition ``max(eps_train, eps_recal)``.

    Privacy
    -------
    Add/remove one example of the training data. Example ``x`` goes to recalibration iff
    ``hash_key(x) < ratio 2^64``, a function of the key and of ``x`` alone, with the key drawn
    independently of the data. So for ``D' = D + {x}`` every other example keeps its side, and
    the two parts of ``D'`` are those of ``D`` with ``x`` added to exactly one of them: the
    training parts are add/remove neighbours and the recalibration parts equal, or the other way
    round. The classifier is ``(eps_1, delta_1)``-DP in the training part and the recalibrator,
    given the released classifier, ``(eps_2, delta_2)``-DP in the recalibration part, so the pair
    is ``(max eps, max delta)``-DP (seed 001 Prop. A.1; McSherry 2009, Thm. 4), not the sum. A
    split by a seeded permutation of ``range(n)`` has no such property: adding one example
    reshuffles every other example's side. Both stages must claim add/remove; a stage claiming
    another relation raises ``ValueError``.
    """

    def __init__(
        self,
        trainer: Any,
        calibrator: Calibrator,
        *,
        validation_ratio: float = 0.1,
        seed: int | bytes | None = None,
    ) -> None:
        self.trainer = trainer
        self.calibrator = calibrator
        self.validation_ratio = validation_ratio
        self.seed = seed

    def _split(self, Xa: np.ndarray, ya: np.ndarray, ratio: float) -> None:
        if self.seed is not None and not isinstance(self.seed, bytes):
            check_int(self.seed, "seed", "DPRecalibration", low=0)
        side = recalibration_side(Xa, ya, split_key(self.seed), ratio)
        self.recal_index_ = np.flatnonzero(side)
        self.train_index_ = np.flatnonzero(~side)
        if self.recal_index_.size == 0 or self.train_index_.size == 0:
            raise ValueError(
                f"DPRecalibration: the split with validation_ratio={ratio!r} left "
                f"{self.recal_index_.size} of {side.size} examples for recalibration; both parts "
                "must be non-empty (use more data or a ratio nearer 0.5)."
            )

    def fit(self, X: Any, y: Any) -> DPRecalibration:
        """Split, train, recalibrate; returns ``self``."""
        import copy

        ratio = check_probability(self.validation_ratio, "validation_ratio", "DPRecalibration")
        if not isinstance(self.calibrator, Calibrator):
            raise ValueError(
                "The 'calibrator' parameter of DPRecalibration must be a privcal Calibrator. "
                f"Got {self.calibrator!r} instead."
            )
        Xa = np.asarray(X)
        ya = np.asarray(y)
        self._split(Xa, ya, ratio)
        trainer = copy.deepcopy(self.trainer)
        n_classes = int(ya.max()) + 1
        if getattr(trainer, "n_classes", 0) is None:
            trainer.n_classes = n_classes
        trainer.fit(Xa[self.train_index_], ya[self.train_index_])
        logits = trainer.predict_logits(Xa[self.recal_index_])
        calibrator = copy.deepcopy(self.calibrator)
        calibrator.fit(logits, ya[self.recal_index_])
        self.trainer_ = trainer
        self.calibrator_ = calibrator
        reports = [
            r
            for r in (
                getattr(trainer, "privacy_report_", None),
                getattr(calibrator, "privacy_report_", None),
            )
            if isinstance(r, PrivacyReport)
        ]
        self.privacy_report_: PrivacyReport | None = None
        if len(reports) == 2:
            self.privacy_report_ = _parallel_report(reports)
        return self

    def predict_logits(self, X: Any) -> np.ndarray:
        """The classifier's (uncalibrated) logits."""
        return np.asarray(self.trainer_.predict_logits(X))

    def predict_proba(self, X: Any) -> np.ndarray:
        """Recalibrated probabilities ``g_phi(h_theta(X))``."""
        return np.asarray(self.calibrator_.predict_proba(self.predict_logits(X)))


def _parallel_report(reports: list[PrivacyReport]) -> PrivacyReport:
    """One report over both stages: parallel composition by source, add/remove only."""
    for r in reports:
        if r.relation != "add/remove":
            raise ValueError(
                f"DPRecalibration composes stages over its hash split under add/remove; a stage "
                f"claims {r.relation!r}. Use a trainer and calibrator whose privacy reports "
                "claim add/remove (e.g. DPSGDTrainer and DPTemperatureScaling)."
            )
    public = dict.fromkeys(p for r in reports for p in r.public)
    public["split rule: keyed hash of each example (key independent of the data)"] = None
    return PrivacyReport(
        [rel for r in reports for rel in r.releases],
        unit="example",
        relation="add/remove",
        public=tuple(public),
        noise="secure" if all(r.private for r in reports) else "seeded",
    )


# keep SeededNoise importable from here for examples and experiments
_ = SeededNoise

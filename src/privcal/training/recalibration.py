"""DP temperature and Platt scaling trained with DP-SGD, and the DP recalibration pipeline.

:class:`DPTemperatureScaling` and :class:`DPPlattScaling` are privcal calibrators
(:class:`~privcal.calibrators.base.Calibrator`) that fit on validation logits alone, by DP-SGD on
the NLL of the recalibrated logits (seed 001 Sec. 3.5, App. B.2: temperature initialised at 1,
100 epochs, learning rate 0.1 linearly decayed, clipping norm 10). The per-example gradients of
these tiny maps are computed in closed form; clipping, noise and accounting are Opacus's
(:class:`opacus.optimizers.DPOptimizer` with an accountant hook), the noise drawn from a privcal
:class:`~privcal.privacy.NoiseSource`.

:class:`DPRecalibration` is seed 001's Algorithm 1: split the training data at random
(``validation_ratio``, default 0.1), train the model with DP-SGD on one part and the
recalibrator with DP-SGD on the other; by parallel composition over the disjoint parts (seed 001
Prop. A.1) the pair is ``(max eps, max delta)``-DP, which its ``privacy_report_`` shows.

None of this imports torch at import time: ``import privcal.training`` works without the torch
extra, and ``fit`` then raises :class:`~privcal.training.MissingTorchError`.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from privcal._params import check_int, check_option, check_probability, check_real
from privcal.calibrators.base import Calibrator, ReportsPrivacy, register
from privcal.metrics.statistics import softmax
from privcal.privacy import NoiseSource, PrivacyReport, Release, SecureNoise, SeededNoise
from privcal.training._torch import require_torch

__all__ = [
    "DPPlattScaling",
    "DPRecalibration",
    "DPTemperatureScaling",
    "NoiseSourceDPOptimizer",
    "per_sample_grads",
]


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
class _DPScaling(ReportsPrivacy, Calibrator):
    """DP-SGD fit of a recalibration map on validation logits (shared by DP-TS and DP-PS)."""

    _kind: ClassVar[str] = "temperature"

    def __init__(
        self,
        epsilon: float = 8.0,
        delta: float = 1e-5,
        *,
        epochs: int = 100,
        lr: float = 0.1,
        max_grad_norm: float = 10.0,
        batch_size: int = 64,
        accountant: str = "rdp",
        noise: NoiseSource | None = None,
        seed: int | None = None,
    ) -> None:
        self.epsilon = epsilon
        self.delta = delta
        self.epochs = epochs
        self.lr = lr
        self.max_grad_norm = max_grad_norm
        self.batch_size = batch_size
        self.accountant = accountant
        self.noise = noise
        self.seed = seed

    def _validate_params(self) -> None:
        o = type(self).__name__
        check_real(self.epsilon, "epsilon", o, low=0.0, low_open=True)
        check_probability(self.delta, "delta", o)
        check_int(self.epochs, "epochs", o, low=1)
        check_real(self.lr, "lr", o, low=0.0, low_open=True)
        check_real(self.max_grad_norm, "max_grad_norm", o, low=0.0, low_open=True)
        check_int(self.batch_size, "batch_size", o, low=1)
        check_option(self.accountant, "accountant", o, ("rdp", "prv"))
        if self.noise is not None and not isinstance(self.noise, NoiseSource):
            raise ValueError(
                f"The 'noise' parameter of {o} must be a privcal NoiseSource or None. Got "
                f"{self.noise!r} instead."
            )
        if self.seed is not None:
            check_int(self.seed, "seed", o, low=0)

    def _map_kind(self, c: int) -> str:
        return self._kind

    def _fit(self, z: np.ndarray, y: np.ndarray) -> None:
        torch, _ = require_torch(type(self).__name__)
        from opacus.accountants import create_accountant
        from opacus.accountants.utils import get_noise_multiplier

        kind = self._map_kind(z.shape[1])
        n = z.shape[0]
        per_epoch = math.ceil(n / self.batch_size)
        q = 1.0 / per_epoch
        total = self.epochs * per_epoch
        sigma = float(
            get_noise_multiplier(
                target_epsilon=self.epsilon,
                target_delta=self.delta,
                sample_rate=q,
                steps=total,
                accountant=self.accountant,
            )
        )
        noise = self.noise if self.noise is not None else SecureNoise()
        rng = np.random.default_rng(self.seed)  # Poisson sampling (OS entropy when None)
        params = _init(kind, z.shape[1])
        tensors = {k: torch.nn.Parameter(torch.from_numpy(v.copy())) for k, v in params.items()}
        sgd = torch.optim.SGD(list(tensors.values()), lr=self.lr)
        opt = NoiseSourceDPOptimizer(
            sgd,
            noise=noise,
            noise_multiplier=sigma,
            max_grad_norm=self.max_grad_norm,
            expected_batch_size=max(int(n * q), 1),
        )
        acc = create_accountant(mechanism=self.accountant)
        opt.attach_step_hook(acc.get_optimizer_hook_fn(sample_rate=q))
        for t in range(total):
            for group in sgd.param_groups:
                group["lr"] = self.lr * (1.0 - t / total)  # linear decay (seed 001 B.2)
            idx = np.flatnonzero(rng.random(n) < q)
            cur = {k: v.detach().numpy() for k, v in tensors.items()}
            grads = per_sample_grads(kind, cur, z[idx], y[idx])
            for k, p in tensors.items():
                p.grad_sample = torch.from_numpy(grads[k])
            opt.step()
            opt.zero_grad()
        self.params_ = {k: v.detach().numpy().copy() for k, v in tensors.items()}
        self.map_ = kind
        self.noise_multiplier_ = sigma
        self.sample_rate_ = q
        self.steps_ = total
        self.accountant_history_ = [tuple(h) for h in acc.history]
        self.epsilon_spent_ = float(acc.get_epsilon(self.delta))
        self.privacy_report_ = PrivacyReport(
            [
                Release(
                    query=f"DP-SGD {type(self).__name__} ({kind}, {total} steps, q={q:.4g})",
                    mechanism=f"subsampled gaussian, opacus {self.accountant}",
                    sensitivity=float(self.max_grad_norm),
                    epsilon=self.epsilon_spent_,
                    delta=float(self.delta),
                    source="recalibration",
                )
            ]
        )
        self._set_public_params()

    def _set_public_params(self) -> None:
        """Expose the learned map under readable names (overridden)."""

    def _predict_proba(self, z: np.ndarray) -> np.ndarray:
        return softmax(_apply(self.map_, self.params_, z))

    def _jsonable_params(self) -> dict[str, Any]:
        params = dict(self.get_params(deep=False))
        params["noise"] = None  # a noise source is not part of the fitted calibrator
        return params


@register
class DPTemperatureScaling(_DPScaling):
    """Temperature scaling fitted with DP-SGD on validation logits (DP-TS, seed 001 Sec. 3.5).

    Minimises ``mean_i NLL(softmax(z_i / T), y_i)`` over ``T = exp(u)`` by DP-SGD (Poisson
    sampling, clipping at ``max_grad_norm``, Gaussian noise), starting from ``T = 1``.

    Parameters
    ----------
    epsilon : float, default=8.0
        Target epsilon, ``> 0``.
    delta : float, default=1e-5
        Target delta, in ``(0, 1)``.
    epochs : int, default=100
    lr : float, default=0.1
        Initial learning rate, decayed linearly to 0.
    max_grad_norm : float, default=10.0
        Clipping norm ``C`` of each per-example gradient.
    batch_size : int, default=64
        Expected Poisson batch size; ``q = 1 / ceil(n / batch_size)``.
    accountant : {"rdp", "prv"}, default="rdp"
        Opacus accountant (noise multiplier for the target and reported epsilon).
    noise : NoiseSource, optional
        Source of the Gaussian noise; default :class:`~privcal.privacy.SecureNoise`.
    seed : int, optional
        Seed of the Poisson sampling (default: fresh OS entropy).

    Attributes
    ----------
    temperature_ : float
    noise_multiplier_ : float
    sample_rate_ : float
    steps_ : int
    epsilon_spent_ : float
        Opacus's accountant after the run (``<= epsilon``).
    accountant_history_ : list of (sigma, q, steps)
    privacy_report_ : PrivacyReport
        One release (source ``"recalibration"``).

    Privacy
    -------
    Neighbouring relation: add/remove one validation example (logits are the data; the
    classifier that produced them is public or was released privately before). Each step sums
    per-example gradients clipped to L2 norm ``C`` (sensitivity ``C``) and adds
    ``N(0, (sigma C)^2)`` noise on a Poisson sample of rate ``q``; ``epochs / q`` such steps are
    composed by Opacus's RDP or PRV accountant, with ``sigma`` from Opacus's
    ``get_noise_multiplier`` for the target: ``(epsilon_spent_, delta)``-DP.

    Examples
    --------
    >>> import numpy as np
    >>> from privcal.privacy import SeededNoise
    >>> rng = np.random.default_rng(0)
    >>> z = 4 * rng.normal(size=(500, 3)); y = z.argmax(1)
    >>> ts = DPTemperatureScaling(8.0, 1e-5, noise=SeededNoise(0), seed=0).fit(z, y)
    >>> ts.privacy_report_.epsilon <= 8.0
    True
    """

    _kind: ClassVar[str] = "temperature"
    _fitted_attributes: ClassVar[tuple[str, ...]] = (
        "params_",
        "map_",
        "temperature_",
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
    epsilon, delta, epochs, lr, max_grad_norm, batch_size, accountant, noise, seed
        As :class:`DPTemperatureScaling`.

    Attributes
    ----------
    params_ : dict of ndarray
        ``{"a", "b"}``, ``{"w", "b"}`` or ``{"W", "b"}``.
    map_ : str
    noise_multiplier_, sample_rate_, steps_, epsilon_spent_, accountant_history_, privacy_report_
        As :class:`DPTemperatureScaling`.

    Privacy
    -------
    As :class:`DPTemperatureScaling`: the clipping bounds each example's gradient over all
    parameters jointly, so the sensitivity is ``max_grad_norm`` whatever the map's dimension.
    """

    _fitted_attributes: ClassVar[tuple[str, ...]] = (
        "params_",
        "map_",
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
        epochs: int = 100,
        lr: float = 0.1,
        max_grad_norm: float = 10.0,
        batch_size: int = 64,
        accountant: str = "rdp",
        noise: NoiseSource | None = None,
        seed: int | None = None,
    ) -> None:
        super().__init__(
            epsilon,
            delta,
            epochs=epochs,
            lr=lr,
            max_grad_norm=max_grad_norm,
            batch_size=batch_size,
            accountant=accountant,
            noise=noise,
            seed=seed,
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
class DPRecalibration:
    """Seed 001 Algorithm 1: DP-SGD on one random split, DP recalibration on the other.

    Parameters
    ----------
    trainer : privcal.training.DPSGDTrainer (or DPSGLDTrainer / SGDTrainer)
        Trains the classifier on the training part (it is cloned, not modified).
    calibrator : Calibrator
        Fitted on the classifier's logits on the recalibration part, e.g.
        :class:`DPTemperatureScaling` or :class:`DPPlattScaling`. A non-private calibrator is
        accepted for baselines; the result then has no guarantee (``privacy_report_`` is None).
    validation_ratio : float, default=0.1
        Fraction of the data held out for recalibration, in ``(0, 1)``.
    seed : int, default=0
        Seeds the random split (independent of the data, as Prop. A.1 requires).

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
    Add/remove one example of the training data. The split is drawn independently of the data,
    so each example lies in exactly one part; the classifier is ``(eps_1, delta_1)``-DP in the
    training part and the recalibrator, given the released classifier, ``(eps_2, delta_2)``-DP
    in the recalibration part, so the pair is ``(max eps, max delta)``-DP (seed 001 Prop. A.1;
    McSherry 2009, Thm. 4) -- not the sum.
    """

    def __init__(
        self,
        trainer: Any,
        calibrator: Calibrator,
        *,
        validation_ratio: float = 0.1,
        seed: int = 0,
    ) -> None:
        self.trainer = trainer
        self.calibrator = calibrator
        self.validation_ratio = validation_ratio
        self.seed = seed

    def fit(self, X: Any, y: Any) -> DPRecalibration:
        """Split, train, recalibrate; returns ``self``."""
        import copy

        ratio = check_probability(self.validation_ratio, "validation_ratio", "DPRecalibration")
        seed = check_int(self.seed, "seed", "DPRecalibration", low=0)
        if not isinstance(self.calibrator, Calibrator):
            raise ValueError(
                "The 'calibrator' parameter of DPRecalibration must be a privcal Calibrator. "
                f"Got {self.calibrator!r} instead."
            )
        Xa = np.asarray(X)
        ya = np.asarray(y)
        n = Xa.shape[0]
        n_recal = round(ratio * n)
        if n_recal < 1 or n_recal >= n:
            raise ValueError(
                f"DPRecalibration: validation_ratio={ratio!r} leaves {n_recal} of {n} examples "
                f"for recalibration; both parts must be non-empty."
            )
        perm = np.random.default_rng(seed).permutation(n)
        self.recal_index_ = np.sort(perm[:n_recal])
        self.train_index_ = np.sort(perm[n_recal:])
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
        rep_train = getattr(trainer, "privacy_report_", None)
        rep_recal = getattr(calibrator, "privacy_report_", None)
        self.privacy_report_: PrivacyReport | None = None
        if rep_train is not None and rep_recal is not None:
            self.privacy_report_ = PrivacyReport([*rep_train.releases, *rep_recal.releases])
        return self

    def predict_logits(self, X: Any) -> np.ndarray:
        """The classifier's (uncalibrated) logits."""
        return np.asarray(self.trainer_.predict_logits(X))

    def predict_proba(self, X: Any) -> np.ndarray:
        """Recalibrated probabilities ``g_phi(h_theta(X))``."""
        return np.asarray(self.calibrator_.predict_proba(self.predict_logits(X)))


# keep SeededNoise importable from here for examples and experiments
_ = SeededNoise

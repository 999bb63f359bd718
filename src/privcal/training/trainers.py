"""A plain SGD trainer and a DP-SGD trainer (Opacus) with the same interface.

Both take hyperparameters in ``__init__``, learn in ``fit(X, y)`` and expose ``model_``,
``predict_logits(X)`` and ``predict_proba(X)``. :class:`DPSGDTrainer` calls Opacus's
:meth:`~opacus.PrivacyEngine.make_private` with Poisson sampling and the noise multiplier
Opacus's ``get_noise_multiplier`` (accountant ``"rdp"`` or ``"prv"``) finds for the target
``(epsilon, delta)`` after the ``epochs x len(loader)`` steps it runs, and the accountant
reports the epsilon spent.

DP-SGD step (Abadi et al. 2016; seed 001 Eq. 1), for a Poisson batch ``B_t`` (each example in
it independently with probability ``q = 1 / ceil(n / batch_size)``)::

    theta <- theta - lr_t * ( sum_{i in B_t} clip_C(grad_i) + N(0, sigma^2 C^2 I) ) / batch_size

The denominator is the public ``batch_size``, not the expected batch ``q n`` (Opacus's
``int(n q)``), which would release ``n`` beyond the declared steps per epoch.
"""

from __future__ import annotations

import copy
import math
import secrets
import warnings
from typing import Any

import numpy as np

from privcal._params import (
    EPSILON,
    NON_NEGATIVE,
    POSITIVE,
    PROBABILITY,
    SEED,
    Constraints,
    Int,
    Options,
    Real,
    ValidatedParams,
    check_int,
)
from privcal.calibrators.base import store_params
from privcal.metrics.statistics import softmax
from privcal.privacy import Guarantee, InsecureNoiseWarning, PrivacyReport
from privcal.privacy.filter import dpsgd_curve
from privcal.privacy.odometer import as_odometer
from privcal.training._torch import require_torch
from privcal.training.dp_sgd import DP_SGD, noise_multiplier

torch, opacus = require_torch("privcal.training.trainers")
from opacus.validators import ModuleValidator  # noqa: E402

from privcal.training.models import make_model  # noqa: E402

__all__ = [
    "ACCOUNTANTS",
    "LR_SCHEDULES",
    "PUBLIC_QUANTITIES",
    "DPSGDTrainer",
    "SGDTrainer",
    "check_device",
    "check_dp_compatible",
    "classes_public",
    "noise_generator",
    "os_seed",
    "poisson_loader",
]

#: Opacus accountants a DP trainer accepts.
ACCOUNTANTS = ("rdp", "prv")
#: What a DP trainer's guarantee treats as public (besides the steps per epoch).
PUBLIC_QUANTITIES = (
    "model architecture and initialisation",
    "hyperparameters (epsilon, delta, epochs, lr, batch_size, max_grad_norm, schedule)",
    "number of classes and features",
)


def classes_public(c: int, declared: bool) -> str:
    """The public line of a model's number of classes: declared (``n_classes``) or read from
    the labels as ``max + 1``, which is public only where every class is known to occur (a
    class whose one example is removed would otherwise change the model's width)."""
    if declared:
        return f"n_classes = {c}"
    return (
        f"n_classes = {c}, read from the labels (max + 1): public only where every class is "
        "known to occur; pass n_classes to declare it"
    )


#: Learning-rate schedules: ``lr_t = lr``, ``lr (1 - t/T)``, ``lr exp(-decay e)`` (``e`` = epoch).
LR_SCHEDULES = ("constant", "linear", "exponential")


class _TensorBatches(torch.utils.data.TensorDataset):  # type: ignore[name-defined]
    """A ``TensorDataset`` that fetches a whole batch with one indexing operation."""

    def __getitems__(self, indices: list[int]) -> tuple[Any, ...]:
        idx = torch.as_tensor(indices, dtype=torch.long)
        return tuple(t[idx] for t in self.tensors)


def _as_batch(batch: Any) -> Any:
    return batch


def poisson_loader(X: Any, y: Any, batch_size: int, generator: Any = None) -> Any:
    """Opacus's ``DPDataLoader`` (Poisson sampling, ``q = 1/ceil(n / batch_size)``) over tensors.

    Batches are fetched with one tensor indexing operation (``__getitems__``), not one
    ``__getitem__`` per example; the sampler is Opacus's ``UniformWithReplacementSampler``.
    """
    from opacus.data_loader import DPDataLoader

    base = torch.utils.data.DataLoader(
        _TensorBatches(X, y), batch_size=batch_size, collate_fn=_as_batch
    )
    return DPDataLoader.from_data_loader(base, generator=generator)


def check_device(device: Any, owner: str) -> Any:
    """``torch.device(device)``, or ``ValueError`` if it is malformed or not available here."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(
            f"The 'device' parameter of {owner} must be a torch device such as 'cpu' or "
            f"'cuda'. Got {device!r} instead."
        ) from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"The 'device' parameter of {owner} is {device!r}, but this torch build sees no "
            f"CUDA device; use device='cpu'."
        )
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(
            f"The 'device' parameter of {owner} must be 'cpu' or 'cuda'. Got {device!r} instead."
        )
    return dev


def os_seed() -> int:
    """A 63-bit seed drawn from the operating system's CSPRNG (:func:`secrets.randbits`)."""
    return secrets.randbits(63)


def noise_generator(seed: int | None, device: Any) -> Any:
    """A ``torch.Generator`` on ``device`` (the DP noise's source), seeded with ``seed``.

    ``seed=None`` seeds it from the OS CSPRNG (:func:`os_seed`): nobody, the caller included,
    can reproduce the noise.
    """
    return torch.Generator(device=device).manual_seed(os_seed() if seed is None else seed)


def check_dp_compatible(model: Any, owner: str) -> None:
    """Raise ``ValueError`` if Opacus cannot compute per-sample gradients of ``model``.

    Opacus refuses, e.g., ``BatchNorm`` (its batch statistics mix examples, so one example's
    gradient is not separable) and unsupported layers; the message lists Opacus's reasons and
    the usual fix.
    """
    errors = ModuleValidator.validate(model, strict=False)
    if errors:
        reasons = "; ".join(str(e) for e in errors)
        raise ValueError(
            f"The 'model' parameter of {owner} must be a module Opacus can train with DP-SGD "
            f"(per-sample gradients, no batch statistics). Got {type(model).__name__}, which "
            f"Opacus rejects: {reasons}. Replace BatchNorm with GroupNorm/LayerNorm, e.g. "
            f"with opacus.validators.ModuleValidator.fix(model)."
        )


def _lr_at(lr: float, schedule: str, decay: float, t: int, total: int, per_epoch: int) -> float:
    if schedule == "linear":
        return lr * (1.0 - t / max(total, 1))
    if schedule == "exponential":
        return lr * math.exp(-decay * (t // per_epoch))
    return lr


class SGDTrainer(ValidatedParams):
    """Non-private mini-batch SGD on cross-entropy, the baseline for :class:`DPSGDTrainer`.

    Parameters
    ----------
    model : {"logistic", "mlp", "cnn"} or torch.nn.Module, default="logistic"
        A model name (built by :func:`~privcal.training.models.make_model` with ``seed``) or a
        module, which ``fit`` deep-copies (the argument is never trained in place).
    epochs : int, default=20
    lr : float, default=0.1
        Base learning rate of ``torch.optim.SGD``.
    batch_size : int, default=64
        Batch size (shuffled fixed-size batches; :class:`DPSGDTrainer` uses it as the expected
        Poisson batch size).
    momentum : float, default=0.0
    lr_schedule : {"constant", "linear", "exponential"}, default="constant"
    decay : float, default=0.0
        Rate of the exponential schedule, per epoch.
    n_classes : int, optional
        Number of classes; default ``max(y) + 1``.
    seed : int or None, default=0
        Seeds the initialisation and the batches (``None``: fresh OS entropy). The DP trainers
        default to ``None``; see :class:`DPSGDTrainer`.
    device : str or torch.device, default="cpu"
        Where the model, the data and the noise live (``"cuda"`` for a GPU). The Poisson
        sampler and the batch order always draw on the CPU, so a seed selects the same batches
        on every device; the model's noise is drawn on ``device``.

    Attributes
    ----------
    model_ : torch.nn.Module
        The trained model (plain module, unwrapped).
    steps_ : int
    n_classes_ : int
    """

    _owner = "SGDTrainer"
    _parameter_constraints = Constraints(
        epochs=Int(1),
        lr=POSITIVE,
        batch_size=Int(1),
        momentum=Real(0.0, 1.0, high_open=True),
        lr_schedule=Options(*LR_SCHEDULES),
        decay=NON_NEGATIVE,
        seed=[SEED, None],
    )
    model: Any
    epochs: int
    lr: float
    batch_size: int
    momentum: float
    lr_schedule: str
    decay: float
    n_classes: int | None
    seed: int | None
    device: Any

    def __init__(
        self,
        model: Any = "logistic",
        *,
        epochs: int = 20,
        lr: float = 0.1,
        batch_size: int = 64,
        momentum: float = 0.0,
        lr_schedule: str = "constant",
        decay: float = 0.0,
        n_classes: int | None = None,
        seed: int | None = 0,
        device: Any = "cpu",
    ) -> None:
        store_params(self, locals())

    # ------------------------------------------------------------------------------ checks
    def _validate(self) -> None:
        self._validate_params()
        self._device = check_device(self.device, self._owner)
        self._seed = os_seed() if self.seed is None else int(self.seed)

    def _data(self, X: Any, y: Any) -> tuple[Any, Any, int]:
        Xa = np.asarray(X, dtype=np.float32)
        if Xa.ndim == 1:
            Xa = Xa[:, None]
        if Xa.ndim != 2 or not np.all(np.isfinite(Xa)):
            raise ValueError(
                f"The 'X' parameter of {self._owner}.fit must be a finite 2-D array. Got shape "
                f"{Xa.shape} instead."
            )
        ya = np.asarray(y)
        if ya.shape != (Xa.shape[0],) or ya.dtype.kind not in "iu" or ya.min(initial=0) < 0:
            raise ValueError(
                f"The 'y' parameter of {self._owner}.fit must be {Xa.shape[0]} non-negative "
                f"integer labels. Got {ya.dtype} array of shape {ya.shape} instead."
            )
        c = int(ya.max()) + 1 if self.n_classes is None else self.n_classes
        c = check_int(max(c, 2), "n_classes", self._owner, low=2)
        dev = self._device
        return torch.from_numpy(Xa).to(dev), torch.from_numpy(ya.astype(np.int64)).to(dev), c

    def _build_model(self, n_features: int, n_classes: int) -> Any:
        if isinstance(self.model, str):
            return make_model(self.model, n_features, n_classes, seed=self._seed).to(self._device)
        if isinstance(self.model, torch.nn.Module):
            return copy.deepcopy(self.model).to(self._device)
        raise ValueError(
            f"The 'model' parameter of {self._owner} must be 'logistic', 'mlp', 'cnn' or a "
            f"torch.nn.Module. Got {self.model!r} instead."
        )

    # ------------------------------------------------------------------------------ fit
    def fit(self, X: Any, y: Any) -> SGDTrainer:
        """Train on features ``X`` (``n x d``) and integer labels ``y``; returns ``self``."""
        self._validate()
        Xt, yt, c = self._data(X, y)
        model = self._build_model(Xt.shape[1], c)
        gen = torch.Generator().manual_seed(self._seed)
        n = Xt.shape[0]
        per_epoch = math.ceil(n / self.batch_size)
        opt = torch.optim.SGD(model.parameters(), lr=self.lr, momentum=self.momentum)
        total = self.epochs * per_epoch

        def batches() -> Any:
            for _ in range(self.epochs):
                perm = torch.randperm(n, generator=gen)
                for k in range(per_epoch):
                    idx = perm[k * self.batch_size : (k + 1) * self.batch_size]
                    yield Xt[idx], yt[idx]

        self.steps_ = _train_loop(model, opt, batches(), self, total, per_epoch, self.lr)
        self.model_ = model
        self.n_classes_ = c
        return self

    # ------------------------------------------------------------------------------ predict
    def predict_logits(self, X: Any) -> np.ndarray:
        """Logits ``n x C`` (float64) of the trained model."""
        if not hasattr(self, "model_"):
            from sklearn.exceptions import NotFittedError

            raise NotFittedError(f"This {self._owner} is not fitted yet. Call 'fit' first.")
        Xa = np.asarray(X, dtype=np.float32)
        if Xa.ndim == 1:
            Xa = Xa[:, None]
        self.model_.eval()
        device = next(self.model_.parameters()).device
        with torch.no_grad():
            out = self.model_(torch.from_numpy(Xa).to(device))
        return out.double().cpu().numpy()

    def predict_proba(self, X: Any) -> np.ndarray:
        """``softmax(predict_logits(X))``."""
        return softmax(self.predict_logits(X))


def _train_loop(
    model: Any, opt: Any, batches: Any, trainer: SGDTrainer, total: int, per_epoch: int, lr: float
) -> int:
    """Cross-entropy SGD over ``batches`` from ``lr``, following ``trainer.lr_schedule``."""
    loss_fn = torch.nn.CrossEntropyLoss()
    model.train()
    t = 0
    # one filter for the whole loop: entering catch_warnings per step resets the warnings cache
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Full backward hook is firing")
        for xb, yb in batches:
            lr_t = _lr_at(lr, trainer.lr_schedule, trainer.decay, t, total, per_epoch)
            for group in opt.param_groups:
                group["lr"] = lr_t
            opt.zero_grad()
            if len(yb) > 0:
                loss_fn(model(xb), yb).backward()
            else:  # an empty Poisson batch: zero per-sample gradients, the step still adds noise
                (model(xb).sum() * 0.0).backward()
            opt.step()
            t += 1
    return t


class DPSGDTrainer(SGDTrainer):
    """DP-SGD on Opacus: noise for the target epsilon, Poisson sampling, flat clipping at ``C``.

    Parameters
    ----------
    model, epochs, lr, batch_size, momentum, lr_schedule, decay, n_classes, device
        As :class:`SGDTrainer`; ``batch_size`` is the expected Poisson batch size.
    seed : int or None, default=None
        ``None`` (the default): the initialisation, the Poisson sampler and the noise generator
        are each seeded from the OS CSPRNG (:func:`os_seed`), and the noise is drawn with
        Opacus's secure sampling (see Privacy). An explicit seed makes all three reproducible:
        it warns :class:`~privcal.privacy.InsecureNoiseWarning` and the report says
        ``"not private: seeded noise"`` (for experiments and tests only).
    epsilon : float, default=8.0
        Target epsilon, ``> 0``.
    delta : float, default=1e-5
        Target delta, in ``(0, 1)``.
    max_grad_norm : float, default=1.0
        Clipping norm ``C`` of each per-example gradient.
    accountant : {"rdp", "prv"}, default="rdp"
        Opacus accountant used both to find the noise multiplier and to report epsilon.
    ledger : PrivacyOdometer, str, Path or None, default=None
        A pipeline ledger (a path must be an existing ledger file), charged ``(epsilon,
        delta)`` with the run's RDP curve (``dp_accounting``: the Poisson-subsampled Gaussian
        over its steps) once the plan is set and before the first step; a refused run raises
        :class:`~privcal.privacy.BudgetExceededError` untrained, with nothing recorded.

    Attributes
    ----------
    model_ : torch.nn.Module
        The trained model (Opacus's wrapper removed).
    noise_multiplier_ : float
        ``sigma`` from Opacus's ``get_noise_multiplier`` (noise std = ``sigma * C``).
    sample_rate_ : float
        Poisson rate ``q = 1 / ceil(n / batch_size)``.
    steps_ : int
    accountant_ : opacus.accountants.IAccountant
        The accountant, whose ``history`` lists ``(sigma, q, steps)``.
    epsilon_ : float
        ``accountant_.get_epsilon(delta)`` after training (``<= epsilon``).
    privacy_report_ : privcal.privacy.PrivacyReport
        One release (source ``"train"``): the trained weights.

    Privacy
    -------
    Neighbouring relation: add/remove one training example. Each step releases the sum of
    per-example gradients clipped to L2 norm ``C`` (sensitivity ``C``) plus ``N(0, sigma^2 C^2)``
    noise, on a Poisson sample of rate ``q``: the subsampled Gaussian mechanism. ``steps``
    compositions are accounted by Opacus's RDP (Mironov et al. 2019) or PRV (Gopi et al. 2021)
    accountant; the output measure is ``(epsilon_, delta)``-DP (:data:`PUBLIC_QUANTITIES` lists
    what the guarantee treats as public; the report's ``public`` says it).

    The steps per epoch ``ceil(n / batch_size)`` set ``q``, the step count and ``sigma``, which
    are released as metadata; under add/remove they are a function of the private ``n``, so the
    guarantee holds for a run whose steps per epoch are declared public up front (the report
    lists them); it does not cover what crossing a multiple of ``batch_size`` reveals. Nothing
    else reads ``n``: each step's noisy sum is divided by the public ``batch_size``.

    Noise: Opacus's ``PrivacyEngine(secure_mode=True)`` needs ``torchcsprng``, which has no
    build for current torch; so by default the generator is a ``torch.Generator`` seeded from the
    OS CSPRNG and the noise is drawn by Opacus's secure sampling (``DPOptimizer.secure_mode``: a
    sum of four Gaussians, Holohan & Braghin 2021, against floating-point attacks). The
    Poisson sampler is seeded from the OS CSPRNG too: subsampling amplification needs batches
    nobody can predict. The torch generator itself is not a CSPRNG (Mersenne Twister / Philox),
    which privcal states rather than hides.
    """

    _owner = "DPSGDTrainer"
    _parameter_constraints = Constraints(
        SGDTrainer._parameter_constraints,
        epsilon=EPSILON,
        delta=PROBABILITY,
        max_grad_norm=POSITIVE,
        accountant=Options(*ACCOUNTANTS),
    )
    epsilon: float
    delta: float
    max_grad_norm: float
    accountant: str
    ledger: Any

    def __init__(
        self,
        model: Any = "logistic",
        *,
        epsilon: float = 8.0,
        delta: float = 1e-5,
        max_grad_norm: float = 1.0,
        accountant: str = "rdp",
        epochs: int = 20,
        lr: float = 0.1,
        batch_size: int = 64,
        momentum: float = 0.0,
        lr_schedule: str = "constant",
        decay: float = 0.0,
        n_classes: int | None = None,
        seed: int | None = None,
        device: Any = "cpu",
        ledger: Any = None,
    ) -> None:
        store_params(self, locals())

    def _validate(self) -> None:
        super()._validate()
        as_odometer(self.ledger, self._owner)

    def _seeded_noise_warning(self) -> None:
        if self.seed is not None:
            warnings.warn(
                f"{self._owner}(seed={self.seed}) draws its DP noise and Poisson batches from a "
                "seeded generator: the run is reproducible and not private. Leave seed=None "
                "(OS CSPRNG) to release a model.",
                InsecureNoiseWarning,
                stacklevel=4,
            )

    def _noise_seed(self) -> int | None:
        """Seed of the DP noise generator: ``seed + 1`` when seeded, else OS entropy."""
        return None if self.seed is None else self._seed + 1

    def _private_setup(self, X: Any, y: Any) -> tuple[Any, Any, Any, int]:
        """A fresh model, an Opacus engine and the Poisson loader of the validated data, and
        the number of classes (shared with DP-SGLD)."""
        self._validate()
        self._seeded_noise_warning()
        Xt, yt, c = self._data(X, y)
        model = self._build_model(Xt.shape[1], c)
        check_dp_compatible(model, self._owner)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Secure RNG turned off")
            engine = opacus.PrivacyEngine(accountant=self.accountant)
        gen = torch.Generator().manual_seed(self._seed)
        return model, engine, poisson_loader(Xt, yt, self.batch_size, generator=gen), c

    def fit(self, X: Any, y: Any) -> DPSGDTrainer:
        """Train with DP-SGD until ``epochs`` epochs of Poisson steps are done."""
        model, engine, loader, c = self._private_setup(X, y)
        opt = torch.optim.SGD(model.parameters(), lr=self.lr, momentum=self.momentum)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=UserWarning, module="opacus")
            gsm, dp_opt, dp_loader = engine.make_private(
                module=model,
                optimizer=opt,
                data_loader=loader,
                noise_multiplier=1.0,  # set below, for the steps and rate accounted
                max_grad_norm=self.max_grad_norm,
                poisson_sampling=True,
                noise_generator=noise_generator(self._noise_seed(), self._device),
            )
        dp_opt.secure_mode = self.seed is None  # Opacus's secure sampling (see Privacy)
        dp_opt.expected_batch_size = self.batch_size  # public; Opacus's int(n q) reads n
        per_epoch = len(dp_loader)
        # the noise for the epochs x per_epoch steps run (make_private_with_epsilon sizes it
        # for int(epochs / q), one step short where that float quotient falls below an integer)
        steps = self.epochs * per_epoch
        dp_opt.noise_multiplier = noise_multiplier(
            float(self.epsilon), float(self.delta), 1.0 / per_epoch, steps, str(self.accountant)
        )
        self._charge_ledger([(float(dp_opt.noise_multiplier), steps)], per_epoch)

        def batches() -> Any:
            for _ in range(self.epochs):
                yield from dp_loader

        self.steps_ = _train_loop(gsm, dp_opt, batches(), self, steps, per_epoch, self.lr)
        self._finish("DP-SGD weights", gsm, model, c, dp_opt, engine, per_epoch)
        return self

    def _charge_ledger(self, sigmas: list[tuple[float, int]], per_epoch: int) -> None:
        """Charge ``ledger`` with the run: ``(noise multiplier, steps)`` blocks at ``q``."""
        odometer = as_odometer(self.ledger, self._owner)
        if odometer is None:
            return
        q = 1.0 / per_epoch
        curve = sum(dpsgd_curve(s, q, k, odometer.rule.orders) for s, k in sigmas if k > 0)
        steps = sum(k for _, k in sigmas)
        odometer.spend(
            f"{self._owner}.fit ({steps} steps, q={q:.4g})",
            float(self.epsilon),
            float(self.delta),
            mechanism="subsampled gaussian",
            sensitivity=float(self.max_grad_norm),
            rdp=curve,
            noise="secure" if self.seed is None else "seeded",
        )

    def _finish(
        self, query: str, gsm: Any, model: Any, c: int, opt: Any, engine: Any, per_epoch: int
    ) -> None:
        """Close Opacus's wrapper ``gsm``; keep the trained ``model``, the run's figures (the
        last step's noise multiplier, ``q``, the accountant) and its privacy report (the
        release: ``query``)."""
        gsm._close()
        self.model_, self.n_classes_ = model, c
        self.noise_multiplier_ = float(opt.noise_multiplier)
        self.sample_rate_ = 1.0 / per_epoch
        self.steps_per_epoch_ = per_epoch
        self.accountant_ = engine.accountant
        self.epsilon_ = float(self.accountant_.get_epsilon(self.delta))
        self.privacy_report_ = PrivacyReport(
            [
                DP_SGD.record(
                    f"{query} ({self.steps_} steps, q={self.sample_rate_:.4g})",
                    self.epsilon_,
                    source="train",
                    delta=float(self.delta),
                    mechanism=f"subsampled gaussian, opacus {self.accountant}",
                    max_grad_norm=float(self.max_grad_norm),
                )
            ],
            unit="example",
            relation="add/remove",
            public=(
                *PUBLIC_QUANTITIES,
                f"steps per epoch ceil(n / batch_size) = {self.steps_per_epoch_}",
                classes_public(self.n_classes_, declared=self.n_classes is not None),
            ),
            noise="secure" if self.seed is None else "seeded",
        )

    @property
    def guarantee_(self) -> Guarantee:
        """``(epsilon_, delta)`` as a :class:`~privcal.privacy.Guarantee`."""
        return self.privacy_report_.guarantee

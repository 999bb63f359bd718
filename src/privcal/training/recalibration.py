"""DP temperature and Platt scaling trained with DP-SGD on validation logits.

:class:`DPTemperatureScaling` and :class:`DPPlattScaling` are privcal calibrators
(:class:`~privcal.calibrators.base.Calibrator`) that fit on validation logits alone, by DP-SGD on
the NLL of the recalibrated logits (seed 001 Sec. 3.5; its settings by source are
:data:`DP_TS_SETTINGS`), with ``n`` kept private: a Laplace count sets the step schedule, and
every logit row is bounded. The per-example gradients of these tiny maps are computed in closed
form; clipping, noise and accounting are Opacus's (:class:`opacus.optimizers.DPOptimizer` with an
accountant hook), the noise drawn from a privcal :class:`~privcal.privacy.NoiseSource`
(:mod:`privcal.training.dp_sgd`).

:class:`~privcal.training.DPRecalibration` (seed 001's Algorithm 1, the model and this
recalibrator on two parts of a hash split) is in :mod:`privcal.training.pipeline`.

None of this imports torch at import time: ``import privcal.training`` works without the torch
extra, and ``fit`` then raises :class:`~privcal.training.MissingTorchError`.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, ClassVar

import numpy as np

from privcal._params import EPSILON, POSITIVE, PROBABILITY, SEED, Constraints, Int, Options, Real
from privcal.calibrators.base import Calibrator, ReportsPrivacy, register, store_params
from privcal.metrics.statistics import softmax
from privcal.privacy import (
    InsecureNoiseWarning,
    NoiseSource,
    PrivacyReport,
    noise_kind,
    resolve_noise,
)
from privcal.privacy.filter import dpsgd_curve
from privcal.privacy.odometer import LedgerClone, as_odometer
from privcal.private.queries import QUERY_MEASUREMENTS
from privcal.training._torch import require_torch
from privcal.training.dp_sgd import (
    DP_SGD,
    NoiseSourceDPOptimizer,
    accounted_epsilon,
    apply_map,
    auto_clip,
    averaging_start,
    full_batch,
    initial_params,
    noise_multiplier,
    per_sample_grads,
    step_schedule,
)

__all__ = [
    "AUTHORS_CODE_SETTINGS",
    "COUNT_SHARE",
    "DP_TS_SETTINGS",
    "PAPER_SETTINGS",
    "PUBLIC_QUANTITIES",
    "DPPlattScaling",
    "DPTemperatureScaling",
    "bounded_logits",
]

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


def _project(kind: str, params: Any) -> None:
    """Project the parameter tensors onto the public box, in place (post-processing)."""
    lo, hi = LOG_TEMPERATURE_RANGE if kind == "temperature" else PARAMETER_RANGE
    for p in params.values():
        p.data.clamp_(lo, hi)


class _DPScaling(LedgerClone, ReportsPrivacy, Calibrator):
    """DP-SGD fit of a recalibration map on validation logits (shared by DP-TS and DP-PS)."""

    _kind: ClassVar[str] = "temperature"
    _parameter_constraints = Constraints(
        epsilon=EPSILON,
        delta=PROBABILITY,
        epochs=Int(1),
        lr=POSITIVE,
        max_grad_norm=[POSITIVE, None],
        batch_size=[Int(1), None],
        schedule=Options("constant", "linear"),
        average=Real(0.0, 1.0, high_open=True),
        logit_bound=POSITIVE,
        accountant=Options("rdp", "prv"),
        seed=[SEED, None],
    )

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
        store_params(self, locals())

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

        self._warn_refit(stacklevel=5)
        owner = type(self).__name__
        odometer = as_odometer(self.ledger, owner)
        noise, kind_of_noise = self._noise()
        kind = self._map_kind(z.shape[1])
        zb = bounded_logits(z, float(self.logit_bound))
        eps_count = COUNT_SHARE * float(self.epsilon)
        eps_sgd = float(self.epsilon) - eps_count
        if self.batch_size is None:  # full batch: q = 1, steps = epochs, public, so checked now
            try:
                noise_multiplier(eps_sgd, float(self.delta), 1.0, int(self.epochs), self.accountant)
            except ValueError as err:
                raise ValueError(
                    f"{owner}(epsilon={float(self.epsilon):g}, delta={float(self.delta):g}, "
                    f"epochs={self.epochs}): no noise multiplier reaches the DP-SGD share of "
                    f"epsilon ({eps_sgd:g}) (Opacus: {err}). Nothing was released or charged. "
                    "Use a larger epsilon or delta, or fewer epochs."
                ) from None
        if odometer is not None:
            # the DP-SGD plan (so its RDP curve) is read from the count: check the whole fit by
            # basic composition first, then charge each release before it is drawn
            odometer.check(f"{owner}.fit", float(self.epsilon), float(self.delta))
            odometer.spend(
                f"{owner}.fit: count n",
                eps_count,
                mechanism="laplace",
                sensitivity=QUERY_MEASUREMENTS["count"].sensitivity_at(),
                noise=noise_kind(noise),
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
        sigma = noise_multiplier(eps_sgd, float(self.delta), q, total, str(self.accountant))
        if odometer is not None:
            odometer.spend(
                f"{owner}.fit: DP-SGD ({total} steps, q={q:.4g})",
                eps_sgd,
                float(self.delta),
                mechanism="subsampled gaussian",
                sensitivity=clip,
                rdp=dpsgd_curve(sigma, q, total, odometer.rule.orders),
                noise=kind_of_noise,
            )
        rng = np.random.default_rng(self.seed)  # Poisson sampling: OS entropy when seed is None
        params = initial_params(kind, z.shape[1])
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
                    accounted_epsilon(
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
        zb = bounded_logits(z, float(self.logit_bound))
        return softmax(apply_map(self.map_, self.params_, zb))

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

    _parameter_constraints = Constraints(
        _DPScaling._parameter_constraints, mode=Options("auto", "platt", "vector", "matrix")
    )
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
        store_params(self, locals())

    def _map_kind(self, c: int) -> str:
        if self.mode == "auto":
            return "platt" if c == 2 else "vector"
        if self.mode == "platt" and c != 2:
            raise ValueError(
                f"The 'mode' parameter of DPPlattScaling can be 'platt' only for 2 classes. "
                f"Got 'platt' with {c} classes instead."
            )
        return str(self.mode)

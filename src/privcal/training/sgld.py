"""DP-SGLD (seed 004, Knolle et al. 2021, Alg. 1) as an Opacus ``DPOptimizer`` subclass.

One step at learning rate ``lr_t`` on a Poisson batch ``B_t`` (rate ``q``)::

    g_hat_i = grad_i + N(0, rho^2 I)                      (pre-noise; rho = "pre-noise scale")
    g_bar_i = g_hat_i / max(1, ||g_hat_i||_2 / C)         (clip at C)
    g_t     = ( sum_i g_bar_i + N(0, (sqrt(2 lr_t tau) C)^2 I) ) / batch_size   (public)
    theta  <- theta - lr_t g_t

so the step is a DP-SGD step whose noise multiplier is ``sigma_t = sqrt(2 lr_t tau)``
(seed 004 Sec. 4.1). :class:`DPSGLDOptimizer` sets ``noise_multiplier = sigma_t`` before adding
noise, so Opacus's accountant hook (which reads ``optimizer.noise_multiplier``) records the
per-step ``(sigma_t, q)`` and Opacus's RDP or PRV accountant accounts the varying noise.

The learning rate decays exponentially per epoch, ``lr_e = lr exp(-decay e)`` (seed 001 App. B.2
uses Knolle's "exponential learning rate decay with learning rate 0.005 and decay factor 0.028"),
so ``sigma`` is constant within an epoch and Opacus keeps one history segment per epoch.
As the paper does, training runs until the budget is spent (:class:`DPSGLDTrainer`: the plan,
:func:`plan_sgld_temperature` or :func:`plan_sgld_steps`, is made before training and re-checked
after).
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from privcal._params import FRACTION, NON_NEGATIVE, POSITIVE, Constraints, Int, check_option
from privcal.calibrators.base import store_params
from privcal.training._torch import require_torch

torch, opacus = require_torch("privcal.training.sgld")
from opacus.accountants.analysis import rdp as rdp_analysis  # noqa: E402
from opacus.optimizers import DPOptimizer  # noqa: E402

from privcal.training.trainers import (  # noqa: E402
    DPSGDTrainer,
    _train_loop,
    noise_generator,
)

__all__ = [
    "AUTO_LR_DISTANCE",
    "AUTO_LR_MIN_STEPS",
    "PLAN_ORDERS",
    "PRESETS",
    "DPSGLDOptimizer",
    "DPSGLDTrainer",
    "auto_lr",
    "gdp_epsilon_pld",
    "gdp_mu",
    "plan_sgld_steps",
    "plan_sgld_temperature",
    "sgld_noise_multiplier",
]

#: RDP orders of the plan: integer orders (cheap closed form) spread over Opacus's default range.
#: A subset of Opacus's default orders, so an epsilon computed with them is ``>=`` the one
#: Opacus's accountant reports (safe for planning); 19 orders instead of 62 make the plan ~20x
#: faster and changed the planned epsilon by < 0.1% at q = 1/20 and 1/938 (digits, MNIST).
PLAN_ORDERS: tuple[float, ...] = (2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 10.0, 12.0, 14.0, 16.0)
PLAN_ORDERS += (20.0, 24.0, 28.0, 32.0, 40.0, 48.0, 56.0, 63.0)
#: ``lr="auto"``: ``lr = AUTO_LR_DISTANCE / (C sqrt(max(T, AUTO_LR_MIN_STEPS)))`` for ``T`` steps.
AUTO_LR_DISTANCE = 10.0
AUTO_LR_MIN_STEPS = 400
# Beyond this temperature the plan gives up (noise multipliers ~1e6 still over budget).
_MAX_TEMPERATURE = 1e12


def sgld_noise_multiplier(lr: float, temperature: float) -> float:
    """``sigma = sqrt(2 lr tau)``: DP-SGD noise multiplier of a DP-SGLD step (seed 004 Eq. 8)."""
    return math.sqrt(2.0 * lr * temperature)


class DPSGLDOptimizer(DPOptimizer):
    """Opacus ``DPOptimizer`` doing one DP-SGLD step (seed 004 Alg. 1) per ``step()``.

    Parameters
    ----------
    optimizer : torch.optim.Optimizer
        The wrapped optimizer (plain SGD); its ``lr`` is ``alpha_t``.
    temperature : float
        ``tau > 0``; the noise multiplier of each step is ``sqrt(2 lr_t tau)``.
    max_grad_norm : float
        Clipping norm ``C``.
    expected_batch_size : int
        The denominator of the averaged gradient (:class:`DPSGLDTrainer`: the public
        ``batch_size``, not ``q n``, which would release ``n``).
    prenoise : float, default=0.0
        Standard deviation ``rho`` of the Gaussian noise added to every per-example gradient
        coordinate *before* clipping.
    generator : torch.Generator, optional
        Source of both noises.

    Privacy
    -------
    Neighbouring relation: add/remove one example. After clipping, one example changes the
    clipped sum by at most ``C`` in L2 whatever was added before clipping, so each step is the
    subsampled Gaussian mechanism with noise multiplier ``sigma_t = sqrt(2 lr_t tau)``; the
    hook passes ``sigma_t`` to Opacus's accountant. **The pre-noise adds no privacy cost and
    privcal claims no privacy from it**: it is noise on the inputs to clipping, which bounds the
    sensitivity regardless (it only reduces the bias of clipping, Chen et al. 2020).
    """

    def __init__(
        self,
        optimizer: Any,
        *,
        temperature: float,
        max_grad_norm: float,
        expected_batch_size: int,
        prenoise: float = 0.0,
        generator: Any = None,
        loss_reduction: str = "mean",
    ) -> None:
        self.temperature = POSITIVE.check(temperature, "temperature", "DPSGLDOptimizer")
        self.prenoise = NON_NEGATIVE.check(prenoise, "prenoise", "DPSGLDOptimizer")
        lr = float(optimizer.param_groups[0]["lr"])
        super().__init__(
            optimizer,
            noise_multiplier=sgld_noise_multiplier(lr, self.temperature),
            max_grad_norm=max_grad_norm,
            expected_batch_size=expected_batch_size,
            loss_reduction=loss_reduction,
            generator=generator,
        )

    def current_noise_multiplier(self) -> float:
        """``sqrt(2 lr tau)`` at the wrapped optimizer's current learning rate."""
        return sgld_noise_multiplier(float(self.param_groups[0]["lr"]), self.temperature)

    def clip_and_accumulate(self) -> None:
        """Pre-noise each per-example gradient with ``N(0, rho^2)``, then Opacus's clipping."""
        if self.prenoise > 0.0:
            # one draw for all parameters (one kernel on a GPU), added in place per parameter
            samples = self.grad_samples
            sizes = [g.numel() for g in samples]
            noise = torch.randn(
                sum(sizes),
                dtype=samples[0].dtype,
                device=samples[0].device,
                generator=self.generator,
            )
            for p, g, z in zip(self.params, samples, noise.split(sizes), strict=True):
                p.grad_sample = g.add_(z.view_as(g), alpha=self.prenoise)
        super().clip_and_accumulate()

    def add_noise(self) -> None:
        """Set ``noise_multiplier = sqrt(2 lr_t tau)`` (read by the accountant hook), add noise."""
        self.noise_multiplier = self.current_noise_multiplier()
        super().add_noise()


# ------------------------------------------------------------------------------------ plan
def _epoch_sigmas(lr: float, decay: float, temperature: float, epochs: int) -> np.ndarray:
    e = np.arange(epochs, dtype=np.float64)
    return np.sqrt(2.0 * lr * np.exp(-decay * e) * temperature)


def auto_lr(steps: int, max_grad_norm: float) -> float:
    """``D / (C sqrt(max(T, T_0)))``: SGD's step size for ``T`` steps of gradients bounded by ``C``.

    Projected SGD on a convex loss with gradients of norm ``<= G`` and a solution at distance
    ``D`` reaches error ``O(D G / sqrt(T))`` with the constant step ``D / (G sqrt(T))``; clipping
    makes ``G = C``. ``D =`` :data:`AUTO_LR_DISTANCE` and the floor ``T_0 =``
    :data:`AUTO_LR_MIN_STEPS` (a cap of ``0.5 / C``) are set on digits, where 400 steps give
    ``lr = 0.5``; at 20 000 rows (6260 steps) it gives 0.126, where 0.5 over-fits (ECE 0.039 against
    0.014 at 0.1).
    """
    return AUTO_LR_DISTANCE / (float(max_grad_norm) * math.sqrt(max(steps, AUTO_LR_MIN_STEPS)))


def _step_rdp(sigma: float, sample_rate: float, orders: Sequence[float]) -> np.ndarray:
    """RDP of one Poisson-subsampled Gaussian step at ``orders`` (Opacus's ``compute_rdp``)."""
    return np.asarray(
        rdp_analysis.compute_rdp(
            q=sample_rate, noise_multiplier=float(sigma), steps=1, orders=list(orders)
        )
    )


def _rdp_epsilon(rdp: np.ndarray, delta: float, orders: Sequence[float]) -> float:
    return float(rdp_analysis.get_privacy_spent(orders=list(orders), rdp=rdp, delta=delta)[0])


def plan_sgld_steps(
    sigmas: Sequence[float] | np.ndarray,
    steps_per_epoch: int,
    sample_rate: float,
    epsilon: float,
    delta: float,
    orders: Sequence[float] = PLAN_ORDERS,
) -> int:
    """Largest number of steps ``T`` whose RDP epsilon stays ``<= epsilon``.

    Epoch ``e`` runs ``steps_per_epoch`` steps at noise multiplier ``sigmas[e]``; RDP of the
    subsampled Gaussian (Opacus's ``compute_rdp``) is additive over steps, so the epsilon after
    ``k`` steps of epoch ``e`` is computed from the RDP of epochs ``< e`` plus ``k`` single steps.
    ``orders`` defaults to :data:`PLAN_ORDERS`, a subset of Opacus's default orders, so the
    planned epsilon is ``>=`` what Opacus's accountant later reports.
    """
    total = np.zeros(len(orders))
    done = 0
    for sigma in sigmas:
        one = _step_rdp(float(sigma), sample_rate, orders)
        if _rdp_epsilon(total + steps_per_epoch * one, delta, orders) <= epsilon:
            total = total + steps_per_epoch * one
            done += steps_per_epoch
            continue
        lo, hi = 0, steps_per_epoch  # eps(lo) <= epsilon < eps(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if _rdp_epsilon(total + mid * one, delta, orders) <= epsilon:
                lo = mid
            else:
                hi = mid
        return done + lo
    return done


@functools.lru_cache(maxsize=64)
def plan_sgld_temperature(
    lr: float,
    decay: float,
    epochs: int,
    steps_per_epoch: int,
    sample_rate: float,
    epsilon: float,
    delta: float,
    *,
    rtol: float = 1e-2,
    orders: tuple[float, ...] = PLAN_ORDERS,
) -> float:
    """Smallest temperature ``tau`` (within ``rtol``) whose schedule spends ``<= epsilon``.

    The schedule is ``epochs`` epochs of ``steps_per_epoch`` Poisson steps (rate
    ``sample_rate``), epoch ``e`` at noise multiplier
    ``sigma_e(tau) = sqrt(2 lr exp(-decay e) tau)``. Its RDP, ``sum_e steps_per_epoch
    rdp(sigma_e)``, decreases in ``tau``, so bisection on ``log tau`` finds the ``tau`` at which
    the schedule spends the budget, and the value returned spends at most ``epsilon`` (by the
    RDP of ``orders``, ``>=`` Opacus's). This is the same budget, step count and Poisson rate as
    :class:`~privcal.training.DPSGDTrainer` with the same ``epochs`` and ``batch_size``: only the
    constant ``sigma`` becomes one that decays with the learning rate (``sigma_e`` brackets
    DP-SGD's ``sigma``). Cached: it reads public quantities only.
    """
    base = _epoch_sigmas(lr, decay, 1.0, epochs)  # sigma_e(tau) = sqrt(tau) * base_e

    def spends(tau: float) -> bool:
        rdp = sum(
            steps_per_epoch * _step_rdp(math.sqrt(tau) * b, sample_rate, orders) for b in base
        )
        return _rdp_epsilon(np.asarray(rdp), delta, orders) <= epsilon

    lo = hi = 1.0  # invariant once bracketed: spends(hi) and not spends(lo)
    while not spends(hi):
        if hi > _MAX_TEMPERATURE:
            raise ValueError(
                f"No temperature spends at most epsilon={epsilon!r} at delta={delta!r}: even "
                f"noise multiplier {math.sqrt(2.0 * lr * hi):.3g} exceeds it (RDP orders up to "
                f"{max(orders):g}). Raise 'epsilon' or 'delta'."
            )
        lo, hi = hi, hi * 4.0
    while spends(lo):
        lo, hi = lo / 4.0, lo
    while hi / lo > 1.0 + rtol:
        mid = math.sqrt(lo * hi)
        if spends(mid):
            hi = mid
        else:
            lo = mid
    return hi


def gdp_mu(noise_multipliers: Sequence[float] | np.ndarray, sample_rate: float) -> float:
    """Gaussian-DP parameter of the composition, ``mu = sqrt(sum_t mu_t^2)`` (seed 004 Sec. 4.1.1).

    Full batch (``q = 1``): ``mu_t = 1 / sigma_t`` exactly (Dong, Roth & Su 2022, Cor. 3.3).
    Poisson subsampling (``q < 1``): ``mu_t^2 = q^2 (exp(1/sigma_t^2) - 1)``, the central-limit
    approximation of Bu et al. (2020), which Opacus's ``gdp`` accountant also uses; it is an
    approximation, not a certified bound (the RDP/PRV epsilon is the certified one).
    """
    s = np.asarray(noise_multipliers, dtype=np.float64)
    q = FRACTION.check(sample_rate, "sample_rate", "gdp_mu")
    if q == 1.0:
        return float(math.sqrt(np.sum(1.0 / s**2)))
    with np.errstate(over="ignore"):
        terms = q * q * np.expm1(1.0 / s**2)
    return float(math.sqrt(np.sum(terms)))


def gdp_epsilon_pld(mu: float, delta: float) -> float:
    """Epsilon of ``mu``-GDP at ``delta`` by dp-accounting's PLD accountant.

    ``mu``-GDP is exactly the Gaussian mechanism with sensitivity 1 and noise ``1/mu``, so the
    PLD of ``GaussianDpEvent(1/mu)`` gives its ``(epsilon, delta)`` curve.
    """
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant

    m = POSITIVE.check(mu, "mu", "gdp_epsilon_pld")
    if not math.isfinite(1.0 / m) or m > 50:
        return math.inf
    acc = pld_privacy_accountant.PLDAccountant()
    acc.compose(dp_accounting.GaussianDpEvent(1.0 / m))
    return float(acc.get_epsilon(delta))


# ------------------------------------------------------------------------------- trainer
#: Named hyperparameter sets for :meth:`DPSGLDTrainer.from_preset`.
#:
#: ``"knolle2021-mnist"``: seed 004's MNIST settings as seed 001 App. B.2 quotes them (temperature
#: 6.08, learning rate 0.005 with exponential decay 0.028 per epoch, pre-noise 0.046) at seed
#: 004's budget (epsilon 0.5, delta 1e-5, Table 1), clipping norm 1. Accounted as the paper
#: says, its noise multiplier ``sqrt(2 * 0.005 * 6.08) = 0.247`` spends more than epsilon 8 in
#: one step on any data size, so ``fit`` refuses it as is; the reproduction
#: (:mod:`privcal.experiments.knolle2021`) keeps the paper's pre-noise, decay and clipping and
#: overrides the temperature (``"auto"``), the learning rate and the budget, and says so.
PRESETS: dict[str, dict[str, Any]] = {
    "knolle2021-mnist": {
        "temperature": 6.08,
        "lr": 0.005,
        "decay": 0.028,
        "prenoise": 0.046,
        "max_grad_norm": 1.0,
        "epsilon": 0.5,
        "delta": 1e-5,
    },
}


class DPSGLDTrainer(DPSGDTrainer):
    """DP-SGLD training (seed 004 Alg. 1) with Opacus accounting; trains until the budget is spent.

    With the defaults (``temperature="auto"``, ``lr="auto"``), the trainer plans the run DP-SGD
    would make with the same ``epsilon``, ``delta``, ``epochs`` and ``batch_size`` -- same
    Poisson rate, same step count ``T``, same budget --, takes SGD's step size for ``T`` steps
    (:func:`auto_lr`) and picks the temperature ``tau`` that spends exactly that budget
    (:func:`plan_sgld_temperature`); the noise multiplier ``sqrt(2 lr_e tau)`` then decays with
    the learning rate around DP-SGD's constant one. This learns on any data size; seed 004's
    quoted settings are :data:`PRESETS` ``["knolle2021-mnist"]`` (:meth:`from_preset`).

    Parameters
    ----------
    model, batch_size, n_classes, seed, device, epsilon, delta, max_grad_norm, accountant, ledger
        As :class:`~privcal.training.DPSGDTrainer` (``seed=None`` by default: OS-CSPRNG-seeded
        initialisation, sampler and noise, Opacus's secure noise sampling; an explicit seed
        warns :class:`~privcal.privacy.InsecureNoiseWarning` and marks the report seeded).
    temperature : float or "auto", default="auto"
        ``tau``. ``"auto"`` picks the smallest ``tau`` (to 1%) that spends at most the budget
        in exactly ``epochs`` epochs. A number fixes ``tau`` and trains until the budget is
        spent (seed 004's quoted 6.08 needs ``lr`` near 1 or more to be affordable).
    prenoise : float, default=0.0
        Pre-noise standard deviation ``rho`` per gradient coordinate; no privacy is claimed from
        it. Default 0: its norm ``rho sqrt(d)`` grows with the parameter count ``d`` (Knolle's
        0.046 is 3.2 for the 4.8k-parameter digits MLP, above ``C = 1``), so clipping would shrink
        every gradient's signal by that factor; seed 004 leaves its effect open (Sec. 6).
    lr : float or "auto", default="auto"
        Initial learning rate ``alpha_0`` (the update is ``lr`` times the noisy clipped mean).
        ``"auto"``: :func:`auto_lr` of DP-SGD's step count ``epochs x steps per epoch``
        (``0.5`` on digits at the default batch, smaller for more steps).
    decay : float, default=0.028
        Exponential decay per epoch, ``alpha_e = alpha_0 exp(-decay e)`` (seed 004's 0.028).
    epochs : int, default=20
        With ``temperature="auto"``: the epochs over which the budget is spread (as
        DP-SGD's ``epochs``). With a fixed ``tau``: ignored.
    max_epochs : int, default=1000
        Safety cap on the number of epochs with a fixed ``tau``.

    Attributes
    ----------
    temperature_ : float
    lr_ : float
        The initial learning rate used (:func:`auto_lr` with ``lr="auto"``).
    noise_multipliers_ : ndarray
        ``sigma_t`` of every step taken.
    epsilon_ : float
        Opacus's accountant after training (``<= epsilon``).
    gdp_mu_ : float
        :func:`gdp_mu` of the steps taken (seed 004's report).
    gdp_epsilon_ : float
        :func:`gdp_epsilon_pld` of ``gdp_mu_`` at ``delta`` (a CLT approximation for ``q < 1``).
    privacy_report_ : PrivacyReport
        One release (source ``"train"``) with the accountant's epsilon.

    Privacy
    -------
    As :class:`~privcal.training.DPSGDTrainer` with a per-step noise multiplier
    ``sqrt(2 lr_t tau)`` (see :class:`DPSGLDOptimizer`); the guarantee is Opacus's RDP or PRV
    composition of the heterogeneous steps (add/remove; the steps per epoch are declared public
    as for DP-SGD, and the report lists them). ``tau`` and the number of steps depend only on
    public hyperparameters and the steps per epoch (they are planned from the schedule, not from
    the data). The plan uses RDP at :data:`PLAN_ORDERS`; with ``accountant="prv"`` the reported
    PRV epsilon is at most the planned RDP one in practice and is always what ``epsilon_`` shows.

    Examples
    --------
    >>> DPSGLDTrainer("mlp", epsilon=1.0)  # doctest: +SKIP
    >>> DPSGLDTrainer.from_preset("knolle2021-mnist", "cnn", temperature="auto")  # doctest: +SKIP
    """

    _owner = "DPSGLDTrainer"
    _parameter_constraints = Constraints(
        DPSGDTrainer._parameter_constraints,
        lr=[POSITIVE, "auto"],
        temperature=[POSITIVE, "auto"],
        prenoise=NON_NEGATIVE,
        max_epochs=Int(1),
    )
    lr: float | str  # type: ignore[assignment]  # "auto" is DP-SGLD's own (_parameter_constraints)
    temperature: float | str
    prenoise: float
    max_epochs: int

    def __init__(
        self,
        model: Any = "logistic",
        *,
        epsilon: float = 8.0,
        delta: float = 1e-5,
        max_grad_norm: float = 1.0,
        accountant: str = "rdp",
        temperature: float | str = "auto",
        prenoise: float = 0.0,
        epochs: int = 20,
        max_epochs: int = 1000,
        lr: float | str = "auto",
        decay: float = 0.028,
        batch_size: int = 64,
        n_classes: int | None = None,
        seed: int | None = None,
        device: Any = "cpu",
        ledger: Any = None,
    ) -> None:
        # DP-SGLD's schedule is exponential and it has no momentum (Alg. 1)
        store_params(self, {**locals(), "lr_schedule": "exponential", "momentum": 0.0})

    @classmethod
    def from_preset(cls, name: str, model: Any = "logistic", **overrides: Any) -> DPSGLDTrainer:
        """A trainer with the hyperparameters of :data:`PRESETS` ``[name]``, then ``overrides``.

        ``DPSGLDTrainer.from_preset("knolle2021-mnist", "cnn", temperature="auto", lr=0.5)``
        keeps seed 004's pre-noise, decay, clipping and budget and replaces the rest.
        """
        check_option(name, "name", "DPSGLDTrainer.from_preset", tuple(PRESETS))
        return cls(model, **{**PRESETS[name], **overrides})

    def _plan(self, per_epoch: int, q: float) -> tuple[float, float, int]:
        """``(lr, tau, steps)`` from public quantities: the schedule, the budget, ``per_epoch``."""
        eps, dlt = float(self.epsilon), float(self.delta)
        lr = (
            auto_lr(self.epochs * per_epoch, self.max_grad_norm)
            if self.lr == "auto"
            else float(self.lr)
        )
        if self.temperature == "auto":
            tau = plan_sgld_temperature(lr, self.decay, self.epochs, per_epoch, q, eps, dlt)
            return lr, tau, self.epochs * per_epoch
        tau = float(self.temperature)
        sig = _epoch_sigmas(lr, self.decay, tau, self.max_epochs)
        return lr, tau, plan_sgld_steps(sig, per_epoch, q, eps, dlt)

    def fit(self, X: Any, y: Any) -> DPSGLDTrainer:
        """Run DP-SGLD until the planned budget-exhausting number of steps is done."""
        model, engine, loader, c = self._private_setup(X, y)
        per_epoch = len(loader)
        q = 1.0 / per_epoch
        lr, tau, total = self._plan(per_epoch, q)
        if total == 0:
            raise ValueError(
                f"DPSGLDTrainer: the first step at temperature={tau:g}, lr={lr:g} (noise "
                f"multiplier sqrt(2 lr tau) = {sgld_noise_multiplier(lr, tau):.3g}) already "
                f"spends more than epsilon={self.epsilon!r}. Use temperature='auto' (the "
                "default), which picks the temperature for the budget, or raise 'temperature'."
            )
        opt = torch.optim.SGD(model.parameters(), lr=lr)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=UserWarning, module="opacus")
            gsm, dp_opt, dp_loader = engine.make_private(
                module=model,
                optimizer=opt,
                data_loader=loader,
                noise_multiplier=sgld_noise_multiplier(lr, tau),
                max_grad_norm=self.max_grad_norm,
                poisson_sampling=True,
            )
        sgld_opt = DPSGLDOptimizer(
            dp_opt.original_optimizer,
            temperature=tau,
            max_grad_norm=self.max_grad_norm,
            expected_batch_size=self.batch_size,  # public; Opacus's int(n q) reads n
            prenoise=self.prenoise,
            generator=noise_generator(self._noise_seed(), self._device),
        )
        sgld_opt.secure_mode = self.seed is None  # Opacus's secure sampling of the DP noise
        sig = _epoch_sigmas(lr, self.decay, tau, -(-total // per_epoch))
        self._charge_ledger(
            [(float(s), min(per_epoch, total - e * per_epoch)) for e, s in enumerate(sig)],
            per_epoch,
        )
        sgld_opt.attach_step_hook(engine.accountant.get_optimizer_hook_fn(sample_rate=q))

        def batches() -> Any:
            t = 0
            while True:
                for b in dp_loader:
                    if t == total:
                        return
                    yield b
                    t += 1

        self.steps_ = _train_loop(gsm, sgld_opt, batches(), self, total, per_epoch, lr)
        self._finish("DP-SGLD weights", gsm, model, c, sgld_opt, engine, per_epoch)
        self.temperature_ = tau
        self.lr_ = lr
        self.noise_multipliers_ = np.concatenate(
            [np.full(k, s) for s, _, k in self.accountant_.history]
        )
        self.gdp_mu_ = gdp_mu(self.noise_multipliers_, q)
        self.gdp_epsilon_ = gdp_epsilon_pld(self.gdp_mu_, float(self.delta))
        if self.epsilon_ > float(self.epsilon) * (1.0 + 1e-9):  # pragma: no cover - plan is safe
            raise RuntimeError(
                f"DPSGLDTrainer spent epsilon={self.epsilon_!r} > target {self.epsilon!r}."
            )
        return self

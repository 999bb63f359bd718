"""DP-SGLD (seed 004, Knolle et al. 2021, Alg. 1) as an Opacus ``DPOptimizer`` subclass.

One step at learning rate ``lr_t`` on a Poisson batch ``B_t`` (rate ``q``)::

    g_hat_i = grad_i + N(0, rho^2 I)                      (pre-noise; rho = "pre-noise scale")
    g_bar_i = g_hat_i / max(1, ||g_hat_i||_2 / C)         (clip at C)
    g_t     = ( sum_i g_bar_i + N(0, (sqrt(2 lr_t tau) C)^2 I) ) / (q n)
    theta  <- theta - lr_t g_t

so the step is a DP-SGD step whose noise multiplier is ``sigma_t = sqrt(2 lr_t tau)``
(seed 004 Sec. 4.1). :class:`DPSGLDOptimizer` sets ``noise_multiplier = sigma_t`` before adding
noise, so Opacus's accountant hook (which reads ``optimizer.noise_multiplier``) records the
per-step ``(sigma_t, q)`` and Opacus's RDP or PRV accountant accounts the varying noise.

The learning rate decays exponentially per epoch, ``lr_e = lr exp(-decay e)`` (seed 001 App. B.2
uses Knolle's "exponential learning rate decay with learning rate 0.005 and decay factor 0.028"),
so ``sigma`` is constant within an epoch and Opacus keeps one history segment per epoch.
As the paper does, training runs until the budget is spent: the number of steps is the largest
``T`` whose accounted epsilon is ``<= epsilon`` (planned before training, re-checked after).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from privcal._params import check_int, check_real
from privcal.training._torch import require_torch

torch, opacus = require_torch("privcal.training.sgld")
from opacus.accountants.analysis import rdp as rdp_analysis  # noqa: E402
from opacus.accountants.rdp import RDPAccountant  # noqa: E402
from opacus.optimizers import DPOptimizer  # noqa: E402

from privcal.training.trainers import (  # noqa: E402
    DPSGDTrainer,
    _train_loop,
    noise_generator,
    poisson_loader,
)

__all__ = [
    "DPSGLDOptimizer",
    "DPSGLDTrainer",
    "gdp_epsilon_pld",
    "gdp_mu",
    "plan_sgld_steps",
    "sgld_noise_multiplier",
]

# Integer RDP orders: cheap closed form; a subset of Opacus's default orders, so an epsilon
# computed with them is >= the one Opacus's accountant reports (safe for planning).
_PLAN_ORDERS = [float(a) for a in RDPAccountant.DEFAULT_ALPHAS if float(a).is_integer()]


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
        ``q n``, the denominator of the averaged gradient.
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
        self.temperature = check_real(
            temperature, "temperature", "DPSGLDOptimizer", low=0.0, low_open=True
        )
        self.prenoise = check_real(prenoise, "prenoise", "DPSGLDOptimizer", low=0.0)
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


def plan_sgld_steps(
    sigmas: Sequence[float] | np.ndarray,
    steps_per_epoch: int,
    sample_rate: float,
    epsilon: float,
    delta: float,
    orders: Sequence[float] | None = None,
) -> int:
    """Largest number of steps ``T`` whose RDP epsilon stays ``<= epsilon``.

    Epoch ``e`` runs ``steps_per_epoch`` steps at noise multiplier ``sigmas[e]``; RDP of the
    subsampled Gaussian (Opacus's ``compute_rdp``) is additive over steps, so the epsilon after
    ``k`` steps of epoch ``e`` is computed from the RDP of epochs ``< e`` plus ``k`` single steps.
    ``orders`` defaults to the integer orders of Opacus's default set, so the planned epsilon
    is ``>=`` what Opacus's accountant later reports.
    """
    orders = list(_PLAN_ORDERS if orders is None else orders)
    total = np.zeros(len(orders))
    done = 0

    def eps_of(rdp: np.ndarray) -> float:
        return float(rdp_analysis.get_privacy_spent(orders=orders, rdp=rdp, delta=delta)[0])

    for sigma in sigmas:
        one = np.asarray(
            rdp_analysis.compute_rdp(
                q=sample_rate, noise_multiplier=float(sigma), steps=1, orders=orders
            )
        )
        if eps_of(total + steps_per_epoch * one) <= epsilon:
            total = total + steps_per_epoch * one
            done += steps_per_epoch
            continue
        lo, hi = 0, steps_per_epoch  # eps(lo) <= epsilon < eps(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if eps_of(total + mid * one) <= epsilon:
                lo = mid
            else:
                hi = mid
        return done + lo
    return done


def gdp_mu(noise_multipliers: Sequence[float] | np.ndarray, sample_rate: float) -> float:
    """Gaussian-DP parameter of the composition, ``mu = sqrt(sum_t mu_t^2)`` (seed 004 Sec. 4.1.1).

    Full batch (``q = 1``): ``mu_t = 1 / sigma_t`` exactly (Dong, Roth & Su 2022, Cor. 3.3).
    Poisson subsampling (``q < 1``): ``mu_t^2 = q^2 (exp(1/sigma_t^2) - 1)``, the central-limit
    approximation of Bu et al. (2020), which Opacus's ``gdp`` accountant also uses; it is an
    approximation, not a certified bound (the RDP/PRV epsilon is the certified one).
    """
    s = np.asarray(noise_multipliers, dtype=np.float64)
    q = check_real(sample_rate, "sample_rate", "gdp_mu", low=0.0, high=1.0, low_open=True)
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

    m = check_real(mu, "mu", "gdp_epsilon_pld", low=0.0, low_open=True)
    if not math.isfinite(1.0 / m) or m > 50:
        return math.inf
    acc = pld_privacy_accountant.PLDAccountant()
    acc.compose(dp_accounting.GaussianDpEvent(1.0 / m))
    return float(acc.get_epsilon(delta))


# ------------------------------------------------------------------------------- trainer
class DPSGLDTrainer(DPSGDTrainer):
    """DP-SGLD training (seed 004 Alg. 1) with Opacus accounting; trains until the budget is spent.

    Parameters
    ----------
    model, batch_size, n_classes, seed, device, epsilon, delta, max_grad_norm, accountant
        As :class:`~privcal.training.DPSGDTrainer` (``seed=None`` by default: OS-CSPRNG-seeded
        initialisation, sampler and noise, Opacus's secure noise sampling; an explicit seed
        warns :class:`~privcal.privacy.InsecureNoiseWarning` and marks the report seeded).
    temperature : float or "auto", default=6.08
        ``tau`` (seed 001 App. B.2 quotes Knolle's 6.08). ``"auto"`` picks the ``tau`` that
        spends the budget in exactly ``epochs`` epochs (bisection on ``log tau``).
    prenoise : float, default=0.046
        Pre-noise standard deviation ``rho`` (Knolle's 0.046); no privacy is claimed from it.
    lr : float, default=0.005
        Initial learning rate ``alpha_0``.
    decay : float, default=0.028
        Exponential decay per epoch, ``alpha_e = alpha_0 exp(-decay e)``.
    epochs : int, default=20
        With ``temperature="auto"``: the epochs over which the budget is spread. With a fixed
        ``tau``: ignored except as a cap ``max_epochs`` if given.
    max_epochs : int, default=1000
        Safety cap on the number of epochs with a fixed ``tau``.

    Attributes
    ----------
    temperature_ : float
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
    as for DP-SGD, and the report lists them). The number of steps depends only on public
    hyperparameters (it is planned from the schedule, not from the data). The plan uses RDP; with
    ``accountant="prv"`` the reported PRV epsilon is at most the planned RDP one in practice and
    is always what ``epsilon_`` shows.
    """

    _owner = "DPSGLDTrainer"

    def __init__(
        self,
        model: Any = "logistic",
        *,
        epsilon: float = 8.0,
        delta: float = 1e-5,
        max_grad_norm: float = 1.0,
        accountant: str = "rdp",
        temperature: float | str = 6.08,
        prenoise: float = 0.046,
        epochs: int = 20,
        max_epochs: int = 1000,
        lr: float = 0.005,
        decay: float = 0.028,
        batch_size: int = 64,
        n_classes: int | None = None,
        seed: int | None = None,
        device: Any = "cpu",
    ) -> None:
        super().__init__(
            model,
            epsilon=epsilon,
            delta=delta,
            max_grad_norm=max_grad_norm,
            accountant=accountant,
            epochs=epochs,
            lr=lr,
            batch_size=batch_size,
            lr_schedule="exponential",
            decay=decay,
            n_classes=n_classes,
            seed=seed,
            device=device,
        )
        self.temperature = temperature
        self.prenoise = prenoise
        self.max_epochs = max_epochs

    def _validate(self) -> None:
        super()._validate()
        o = self._owner
        if self.temperature != "auto":
            check_real(self.temperature, "temperature", o, low=0.0, low_open=True)
        check_real(self.prenoise, "prenoise", o, low=0.0)
        check_int(self.max_epochs, "max_epochs", o, low=1)

    def _plan(self, per_epoch: int, q: float) -> tuple[float, int]:
        eps, dlt = float(self.epsilon), float(self.delta)
        if self.temperature != "auto":
            tau = float(self.temperature)
            sig = _epoch_sigmas(self.lr, self.decay, tau, self.max_epochs)
            return tau, plan_sgld_steps(sig, per_epoch, q, eps, dlt)
        target = self.epochs * per_epoch
        sig = _epoch_sigmas(self.lr, self.decay, 1.0, self.epochs)  # sigma(tau) = sqrt(tau) sig

        def steps(tau: float) -> int:
            return plan_sgld_steps(np.sqrt(tau) * sig, per_epoch, q, eps, dlt)

        lo, hi = 1e-3, 1.0
        while steps(hi) < target:
            lo, hi = hi, hi * 4.0
        while hi / lo > 1.0 + 1e-3:
            mid = math.sqrt(lo * hi)
            if steps(mid) >= target:
                hi = mid
            else:
                lo = mid
        return hi, target

    def fit(self, X: Any, y: Any) -> DPSGLDTrainer:
        """Run DP-SGLD until the planned budget-exhausting number of steps is done."""
        Xt, yt, model, engine, c = self._private_setup(X, y)
        gen = torch.Generator().manual_seed(self._seed)
        loader = poisson_loader(Xt, yt, self.batch_size, generator=gen)
        per_epoch = len(loader)
        q = 1.0 / per_epoch
        tau, total = self._plan(per_epoch, q)
        if total == 0:
            raise ValueError(
                f"DPSGLDTrainer: the first step at tau={tau:g}, lr={self.lr:g} already exceeds "
                f"epsilon={self.epsilon!r}; raise 'temperature' or lower 'lr'."
            )
        opt = torch.optim.SGD(model.parameters(), lr=self.lr)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=UserWarning, module="opacus")
            gsm, dp_opt, dp_loader = engine.make_private(
                module=model,
                optimizer=opt,
                data_loader=loader,
                noise_multiplier=sgld_noise_multiplier(self.lr, tau),
                max_grad_norm=self.max_grad_norm,
                poisson_sampling=True,
            )
        sgld_opt = DPSGLDOptimizer(
            dp_opt.original_optimizer,
            temperature=tau,
            max_grad_norm=self.max_grad_norm,
            expected_batch_size=dp_opt.expected_batch_size,
            prenoise=self.prenoise,
            generator=noise_generator(self._noise_seed(), self._device),
        )
        sgld_opt.secure_mode = self.seed is None  # Opacus's secure sampling of the DP noise
        sgld_opt.attach_step_hook(engine.accountant.get_optimizer_hook_fn(sample_rate=q))

        def batches() -> Any:
            t = 0
            while True:
                for b in dp_loader:
                    if t == total:
                        return
                    yield b
                    t += 1

        self.steps_ = _train_loop(gsm, sgld_opt, batches(), self, total, per_epoch)
        gsm._close()
        self.model_ = model
        self.n_classes_ = c
        self.temperature_ = tau
        self.sample_rate_ = q
        self.steps_per_epoch_ = per_epoch
        self.accountant_ = engine.accountant
        self.noise_multiplier_ = float(sgld_opt.noise_multiplier)  # the last step's
        self.noise_multipliers_ = np.concatenate(
            [np.full(k, s) for s, _, k in self.accountant_.history]
        )
        self.gdp_mu_ = gdp_mu(self.noise_multipliers_, q)
        self.gdp_epsilon_ = gdp_epsilon_pld(self.gdp_mu_, float(self.delta))
        self._finish_privacy("DP-SGLD weights")
        if self.epsilon_ > float(self.epsilon) * (1.0 + 1e-9):  # pragma: no cover - plan is safe
            raise RuntimeError(
                f"DPSGLDTrainer spent epsilon={self.epsilon_!r} > target {self.epsilon!r}."
            )
        return self

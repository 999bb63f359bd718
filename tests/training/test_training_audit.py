"""Privacy audits of the DP-SGD steps privcal runs: DP-SGLD's and DP-TS / DP-PS's optimizers.

One optimizer step releases ``sum_i clip_C(g_i) + N(0, (sigma C)^2)`` (before the division by
the expected batch size). On a full batch (``q = 1``; Poisson subsampling only amplifies, and
is the accountant's part) it is the Gaussian mechanism with sensitivity ``C`` under add/remove
one example. The claim audited is the epsilon that Opacus's RDP accountant reports after the
step, fed by the optimizer's own step hook, so the audit covers the chain privcal relies on:
clipping (after DP-SGLD's pre-noise), the noise scale the optimizer really draws, and the
``sigma_t`` it hands the accountant.

Neighbouring data: ``D`` holds three small per-example gradients; ``D'`` adds one of 5.0, which
clipping must cut to ``C = 1``. ``RUNS`` releases on each, events are the tails ``x > t`` and
``x < t``, Clopper-Pearson bounds at familywise error ``ALPHA`` (``privcal.privacy.audit``).
A broken step whose noise is 4x too small for its claim must fail (the audit has power).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("opacus")

from opacus.accountants import RDPAccountant  # noqa: E402

from privcal.privacy import SeededNoise  # noqa: E402
from privcal.privacy.audit import audit_dp  # noqa: E402
from privcal.training.dp_sgd import NoiseSourceDPOptimizer  # noqa: E402
from privcal.training.sgld import DPSGLDOptimizer, sgld_noise_multiplier  # noqa: E402

pytestmark = [pytest.mark.statistical, pytest.mark.slow]

RUNS = 60_000
ALPHA = 1e-6
DELTA = 1e-3
C = 1.0
LR = 0.5
TAU = 1.0  # sigma = sqrt(2 lr tau) = 1
GRADS_D = [-0.3, 0.2, 0.1]
GRADS_D_PRIME = [*GRADS_D, 5.0]
THRESHOLDS = np.arange(-2.0, 4.01, 0.5)


def _sgld(param: object, temperature: float, seed: int) -> object:
    return DPSGLDOptimizer(
        torch.optim.SGD([param], lr=LR),
        temperature=temperature,
        max_grad_norm=C,
        expected_batch_size=4,
        prenoise=0.046,  # seed 004's rho
        generator=torch.Generator().manual_seed(seed),
    )


def _dpts(param: object, sigma: float, seed: int) -> object:
    return NoiseSourceDPOptimizer(
        torch.optim.SGD([param], lr=LR),
        noise=SeededNoise(seed),
        noise_multiplier=sigma,
        max_grad_norm=C,
        expected_batch_size=4,
    )


def _releases(make: object, noise_arg: float, grads: list[float], seed: int) -> np.ndarray:
    """``RUNS`` one-step releases of a fresh optimizer (its noise stream seeded once)."""
    w = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))
    opt = make(w, noise_arg, seed)  # type: ignore[operator]
    g = torch.tensor(grads, dtype=torch.float64)[:, None]
    out = np.empty(RUNS)
    for r in range(RUNS):
        w.grad_sample = g.clone()
        opt.clip_and_accumulate()
        opt.add_noise()
        out[r] = float(w.grad)
        w.summed_grad = None
        w.grad = None
        del w.grad_sample
    return out


def _claimed_epsilon(make: object, noise_arg: float) -> float:
    """Epsilon of one full-batch step, as the optimizer's hook reports it to Opacus's RDP."""
    w = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))
    opt = make(w, noise_arg, 0)  # type: ignore[operator]
    acc = RDPAccountant()
    opt.attach_step_hook(acc.get_optimizer_hook_fn(sample_rate=1.0))
    w.grad_sample = torch.zeros(1, 1, dtype=torch.float64)
    opt.step()
    assert acc.history == [(pytest.approx(1.0), 1.0, 1)]  # sigma handed over is sigma_t = 1
    return float(acc.get_epsilon(DELTA))


def _events() -> list:
    return [lambda x, t=t: x > t for t in THRESHOLDS] + [lambda x, t=t: x < t for t in THRESHOLDS]


@pytest.mark.parametrize(("make", "noise_arg"), [(_sgld, TAU), (_dpts, 1.0)], ids=["sgld", "dpts"])
def test_dp_sgd_step_passes_audit(make: object, noise_arg: float) -> None:
    assert sgld_noise_multiplier(LR, TAU) == pytest.approx(1.0)
    eps = _claimed_epsilon(make, noise_arg)
    x = _releases(make, noise_arg, GRADS_D, seed=11)
    y = _releases(make, noise_arg, GRADS_D_PRIME, seed=12)
    res = audit_dp(x, y, _events(), eps, DELTA, alpha=ALPHA)
    assert res.passed, str(res)
    # the audit sees real privacy loss: clipping let through a shift of C, not of 5
    assert res.epsilon_lower > 0.3, str(res)


@pytest.mark.parametrize(
    ("make", "claimed", "actual"),
    [(_sgld, TAU, TAU / 16.0), (_dpts, 1.0, 0.25)],
    ids=["sgld", "dpts"],
)
def test_too_little_noise_fails_audit(make: object, claimed: float, actual: float) -> None:
    """Noise 4x smaller than claimed (tau / 16 for DP-SGLD, sigma / 4 for DP-TS) is caught."""
    eps = _claimed_epsilon(make, claimed)
    x = _releases(make, actual, GRADS_D, seed=21)
    y = _releases(make, actual, GRADS_D_PRIME, seed=22)
    res = audit_dp(x, y, _events(), eps, DELTA, alpha=ALPHA)
    assert not res.passed, str(res)

"""One clipped-and-noised DP-TS optimizer step releases noise of std noise_multiplier x C (KS)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

torch = pytest.importorskip("torch")
pytest.importorskip("opacus")

from privcal.privacy import SeededNoise  # noqa: E402
from privcal.training.recalibration import NoiseSourceDPOptimizer  # noqa: E402


@pytest.mark.parametrize("sigma", [0.7, 2.5])
def test_dpts_step_noise_std(sigma: float) -> None:
    torch.set_num_threads(1)
    C, B, reps = 10.0, 8, 4000
    u = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))
    opt = NoiseSourceDPOptimizer(
        torch.optim.SGD([u], lr=1.0),
        noise=SeededNoise(123),
        noise_multiplier=sigma,
        max_grad_norm=C,
        expected_batch_size=B,
    )
    g = np.array([[30.0], [-4.0], [2.0], [15.0]])  # clipped to 10, -4, 2, 10: sum 18
    released = np.empty(reps)
    for r in range(reps):
        u.grad_sample = torch.from_numpy(g.copy())
        opt.pre_step()  # clip, add N(0, (sigma C)^2), divide by B
        released[r] = float(u.grad) * B - 18.0
        opt.zero_grad()
    # KS against N(0, (sigma C)^2): alpha = 1e-3 (fixed seed, so the test is deterministic)
    assert stats.kstest(released / (sigma * C), "norm").pvalue > 1e-3
    # and it can fail: the wrong std is rejected
    assert stats.kstest(released / (1.2 * sigma * C), "norm").pvalue < 1e-3

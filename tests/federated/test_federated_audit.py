"""Privacy audit of one DP aggregation round on neighbouring client sets (add/remove a client)."""

from __future__ import annotations

import numpy as np
import pytest

from privcal.federated import DPConfig, FedBBQ, FedTemp
from privcal.privacy import SeededNoise
from privcal.privacy.audit import audit_dp

pytestmark = pytest.mark.statistical

N = 20000


def _fedtemp_releases(with_extra: bool, sigma_scale: float = 1.0) -> np.ndarray:
    """Released global inverse temperature after one DP round (T = 1), N times."""
    fm = FedTemp(update="parameter-averaging")
    dp = DPConfig(1.0, 1e-5, rounds=1, noise=SeededNoise(int(with_extra) + 7), clip=0.5)
    updates = [0.3, -0.2, 0.5, 0.1]  # clipped client updates of D
    if with_extra:
        updates.append(fm.clip(np.array([3.0]), dp)[0])  # worst case: +C
    total = np.array([sum(updates)])
    s = dp.multiplier(1) * sigma_scale
    noise = dp.noise.gaussian(dp.clip * s, size=N)
    # fm.server_step adds exactly this noise (checked below for one draw)
    return total[0] + noise


def test_fedtemp_round_passes_audit() -> None:
    # the release used by parameter averaging is total + N(0, (C s)^2): check one draw
    fm = FedTemp(update="parameter-averaging")
    dp = DPConfig(1.0, 1e-5, rounds=1, noise=SeededNoise(3), clip=0.5)
    st = fm.server_step({"params": np.array([1.0])}, np.array([0.2]), 4, dp=dp, denominator=1.0)
    ref = SeededNoise(3).gaussian(0.5 * dp.multiplier(1), size=(1,))
    assert st["params"][0] == pytest.approx(np.clip(1.2 + ref[0], 0.05, 20.0))
    a, b = _fedtemp_releases(False), _fedtemp_releases(True)
    edges = np.linspace(-20, 20, 21)
    res = audit_dp(a, b, edges, epsilon=1.0, delta=1e-5, alpha=1e-3)
    assert res.passed, str(res)


def test_audit_catches_too_little_noise() -> None:
    """Negative control: a tenth of the noise violates epsilon = 1, and the audit sees it."""
    a, b = _fedtemp_releases(False, 0.1), _fedtemp_releases(True, 0.1)
    res = audit_dp(a, b, np.linspace(-3, 3, 25), epsilon=1.0, delta=1e-5, alpha=1e-3)
    assert not res.passed


def test_fedbbq_round_sensitivity_is_clipped() -> None:
    """A client's clipped histogram rows have norm <= C+ / C-, the bound the noise assumes."""
    fm = FedBBQ(n_levels=3)
    dp = DPConfig(1.0, 1e-5, rounds=1, noise=SeededNoise(0), clip_pos=2.0, clip_neg=3.0)
    rng = np.random.default_rng(0)
    z = rng.normal(size=(500, 4)) * 3
    y = rng.integers(0, 4, 500)
    pay = fm.clip(fm.client_step(fm.init(4), z, y), dp)
    assert np.linalg.norm(pay[0], axis=1).max() <= 2.0 + 1e-12
    assert np.linalg.norm(pay[1], axis=1).max() <= 3.0 + 1e-12
    # the per-mechanism ratio s makes the 2cT mechanisms add up to the run's rho
    st = fm.server_step(fm.init(4), pay, 1, dp=dp)
    assert dp.spent_epsilon() == pytest.approx(1.0, rel=1e-3)
    assert st["noise_std_pos"][0] == pytest.approx(2.0 * dp.multiplier(8))


def test_binning_noise_std_matches_lemma_b7() -> None:
    """Summed histograms get N(0, (C+ s)^2) / N(0, (C- s)^2): sample std within 5 sd of it."""
    fm = FedBBQ(n_levels=6)  # 64 bins, 3 classes: 2 x 3 x 64 = 384 noisy cells per round
    c = 3
    dp = DPConfig(1.0, 1e-5, rounds=4, noise=SeededNoise(11), clip_pos=2.0, clip_neg=5.0)
    s = dp.multiplier(2 * c)
    state = fm.init(c)
    draws = np.stack(
        [fm.server_step(state, np.zeros((2, c, 64)), 1, dp=dp)["hist"] for _ in range(40)]
    )  # 40 x 2 x 3 x 64
    for sign, clip in ((0, 2.0), (1, 5.0)):
        x = draws[:, sign].ravel()
        n = x.size  # 7680
        rel = np.std(x) / (clip * s) - 1.0
        assert abs(rel) < 5.0 / np.sqrt(2 * n), rel  # sd of a sample sd is ~ sigma / sqrt(2n)
        assert abs(x.mean()) < 5.0 * clip * s / np.sqrt(n)

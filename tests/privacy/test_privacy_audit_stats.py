"""The audit's statistics on hand-made samples."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privcal.privacy.audit import audit_dp, audit_pure_dp, clopper_pearson


def test_clopper_pearson_closed_forms() -> None:
    n, level = 100, 0.01
    lo, hi = clopper_pearson([0, n], n, level)
    assert lo[0] == 0.0 and hi[1] == 1.0
    assert hi[0] == pytest.approx(1 - level ** (1 / n), rel=1e-9)  # P(k=0 | p) = (1-p)^n
    assert lo[1] == pytest.approx(level ** (1 / n), rel=1e-9)  # P(k=n | p) = p^n
    lo, hi = clopper_pearson([50], n, level)
    assert lo[0] < 0.5 < hi[0]


def test_identical_samples_pass_with_zero_lower_bound() -> None:
    x = np.repeat(np.arange(4.0), 1000)
    res = audit_pure_dp(x, x.copy(), [0.5, 1.5, 2.5], 0.0)
    assert res.passed and res.epsilon_lower == 0.0 and res.worst_event == -1
    assert res.counts.tolist() == [1000] * 4 and res.n == res.n_prime == 4000


def test_disjoint_supports_fail_any_epsilon_and_delta_rescues_small_mass() -> None:
    x = np.zeros(10_000)
    y = np.ones(10_000)
    res = audit_pure_dp(x, y, [0.5], 5.0)
    assert not res.passed and set(res.violations) == {0, 1}
    assert res.epsilon_lower > 5.0
    assert "FAILED" in str(res)
    # 1 % of the mass moved: consistent with (0, 0.05)-DP, not with (0, 0.001)-DP
    x2 = np.concatenate([np.zeros(9_900), np.ones(100)])
    y2 = np.zeros(10_000)
    assert audit_dp(x2, y2, [0.5], 0.0, 0.05).passed
    assert not audit_dp(x2, y2, [0.5], 0.0, 0.001).passed


def test_callable_events_and_hand_lower_bound() -> None:
    x = np.array([1] * 600 + [0] * 400)
    y = np.array([1] * 300 + [0] * 700)
    res = audit_pure_dp(x, y, [lambda s: s == 1], 2.0, alpha=0.01)
    assert res.passed and res.counts.tolist() == [600] and res.counts_prime.tolist() == [300]
    lo, _ = clopper_pearson([600], 1000, 0.01 / 4)
    _, hi = clopper_pearson([300], 1000, 0.01 / 4)
    assert res.epsilon_lower == pytest.approx(math.log(lo[0] / hi[0]))
    assert 0 < res.epsilon_lower < math.log(2)


@pytest.mark.parametrize("events", [[], [2.0, 1.0], [[0.0, 1.0]], lambda s: s > 0])
def test_bad_events(events) -> None:
    with pytest.raises(ValueError, match="'events' parameter of audit_dp"):
        audit_pure_dp(np.zeros(5), np.zeros(5), events, 1.0)


def test_bad_parameters() -> None:
    with pytest.raises(ValueError, match="'alpha' parameter of audit_dp"):
        audit_pure_dp(np.zeros(5), np.zeros(5), [0.5], 1.0, alpha=0.0)
    with pytest.raises(ValueError, match="'epsilon' parameter of audit_dp"):
        audit_pure_dp(np.zeros(5), np.zeros(5), [0.5], -1.0)
    with pytest.raises(ValueError, match="boolean array of shape"):
        audit_pure_dp(np.zeros(5), np.zeros(5), [lambda s: s[:2] > 0], 1.0)
    with pytest.raises(ValueError, match="non-empty"):
        audit_pure_dp(np.zeros(0), np.zeros(5), [0.5], 1.0)

"""Deprecated parameter names of the conformal API (issue 33: one name per idea).

Each old name (``random_state`` -> ``seed``, ``bins`` -> ``n_bins``, and ``private_quantile``'s
``return_report`` flag) still works for one release: it warns ``DeprecationWarning`` naming the
new one and gives the same result as the new name.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from sklearn.base import clone

from privcal._params import renamed
from privcal.conformal import (
    PrivateConformal,
    SplitConformal,
    adjusted_level,
    bounded_range_level,
    coverage_upper_bound,
    min_calibration_size,
    optimal_gamma,
    private_quantile,
    private_quantile_report,
    rank_target,
)
from privcal.conformal.private import conformal_plan
from privcal.conformal.quantile import bin_edges
from privcal.conformal.simulate import SplitSimulator
from privcal.privacy import SeededNoise


def _data(n: int = 600, c: int = 4) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    z = 2 * rng.normal(size=(n, c))
    return z, z.argmax(1)


def _old(old: str, new: str) -> Any:
    return pytest.warns(DeprecationWarning, match=f"'{old}'.*use '{new}' instead")


@pytest.mark.filterwarnings("ignore::privcal.privacy.InsecureNoiseWarning")
def test_estimator_keywords_warn_and_match() -> None:
    z, y = _data()
    with _old("random_state", "seed"):
        a = SplitConformal("aps-randomized", random_state=3).fit(z, y)
    b = SplitConformal("aps-randomized", seed=3).fit(z, y)
    assert a.seed == 3 and a.threshold_ == b.threshold_
    with _old("bins", "n_bins"), _old("random_state", "seed"):
        p = PrivateConformal(bins=50, random_state=1, noise=SeededNoise(0)).fit(z, y)
    q = PrivateConformal(n_bins=50, seed=1, noise=SeededNoise(0)).fit(z, y)
    assert (
        (p.n_bins, p.seed, p.threshold_)
        == (q.n_bins, q.seed, q.threshold_)
        == (50, 1, q.threshold_)
    )
    assert "bins" not in q.get_params() and "random_state" not in q.get_params()
    with pytest.raises(TypeError, match="both 'bins' and its new name 'n_bins'"):
        PrivateConformal(bins=50, n_bins=50)


def test_estimator_attributes_and_set_params() -> None:
    z, y = _data()
    est = PrivateConformal(n_bins=40, noise=SeededNoise(0))
    with _old("bins", "n_bins"):
        assert est.bins == 40
    with _old("bins", "n_bins"):
        est.set_params(bins=30)
    with _old("random_state", "seed"):
        est.set_params(random_state=5)
    assert est.n_bins == 30 and est.seed == 5
    c = clone(est)
    assert (c.n_bins, c.seed) == (30, 5)
    with pytest.warns(Warning):
        est.fit(z, y)
    with _old("bins_", "n_bins_"):
        assert est.bins_ == est.n_bins_ == 30
    with _old("random_state", "seed"):
        assert SplitConformal(seed=7).random_state == 7
    assert not hasattr(PrivateConformal(), "n_bins_")


def test_functions_keep_positions_and_old_keywords() -> None:
    n, a, e = 3000, 0.1, 1.0
    pairs = [
        (min_calibration_size, (a, e), {"method": "angelopoulos2022"}, 100),
        (rank_target, (n, a, e), {}, 200),
        (adjusted_level, (n, a, e), {"gamma": 0.1}, 100),
        (optimal_gamma, (n, a, e), {}, 100),
        (bounded_range_level, (n, a, e), {}, 200),
        (coverage_upper_bound, (n, a, e), {"gamma": 0.1, "p_max": 0.99}, 100),
    ]
    for func, args, kw, m in pairs:
        with _old("bins", "n_bins"):
            old = func(*args, bins=m, **kw)
        assert old == func(*args, n_bins=m, **kw)
    with _old("bins", "n_bins"):
        old_plan = conformal_plan(n, a, e, "rank", bins=200)
    assert old_plan.n_bins == conformal_plan(n, a, e, "rank", n_bins=200).n_bins
    with _old("bins", "n_bins"):
        assert old_plan.bins == old_plan.n_bins == 199  # logit grid: 199 distinct bins
    with _old("bins", "n_bins"):
        np.testing.assert_array_equal(bin_edges(bins=10), bin_edges(10))


def test_private_quantile_one_return_type() -> None:
    s = np.random.default_rng(1).random(500)
    kw: dict[str, Any] = {"relation": "add/remove"}
    with pytest.warns(Warning):
        value = private_quantile(s, 0.9, 2.0, 50, SeededNoise(4), **kw)  # positional n_bins
    assert isinstance(value, float)
    with pytest.warns(Warning) as caught:
        old = private_quantile(s, 0.9, 2.0, bins=50, noise=SeededNoise(4), **kw)
    assert old == value and any("use 'n_bins'" in str(w.message) for w in caught)
    with pytest.warns(Warning) as caught:
        flagged = private_quantile(s, 0.9, 2.0, 50, SeededNoise(4), return_report=True)
    assert any(
        w.category is DeprecationWarning and "private_quantile_report" in str(w.message)
        for w in caught
    )
    with pytest.warns(Warning):
        value2, report = private_quantile_report(s, 0.9, 2.0, 50, SeededNoise(4))
    assert flagged[0] == value2 == value
    assert flagged[1].releases == report.releases and report.epsilon == 2.0


@pytest.mark.filterwarnings("ignore::privcal.privacy.InsecureNoiseWarning")
def test_simulator_old_keyword() -> None:
    rng = np.random.default_rng(2)
    S = rng.random((400, 3))
    y = rng.integers(0, 3, 400)
    sim = SplitSimulator(S, y, n=200, splits=5, seed=0)
    new = sim.private(0.1, 2.0, n_bins=100, noise=SeededNoise(0), localize=None)
    with _old("bins", "n_bins"):
        old = sim.private(0.1, 2.0, bins=100, noise=SeededNoise(0), localize=None)
    np.testing.assert_array_equal(old.threshold, new.threshold)
    with _old("bins", "n_bins"):
        assert old.bins == new.n_bins


def test_renamed_keeps_signature() -> None:
    import inspect

    @renamed(old="b", new="c", owner="f")
    def f(a: int, c: int = 1) -> int:
        return a + c

    assert list(inspect.signature(f).parameters) == ["a", "c"]
    assert f.__renamed__ == {"b": "c"}  # type: ignore[attr-defined]
    assert f(1, 2) == 3
    with _old("b", "c"):
        assert f(1, b=5) == 6

"""Temperature scaling: each objective recovers a known temperature, boundary warnings, the
bounded NLL on saturated rows, float32 inputs and the compiled path."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import pytest

from privcal.calibrators import (
    BoundaryWarning,
    FitWarning,
    TemperatureScaling,
)
from privcal.metrics import ece, nll
from privcal.metrics.statistics import softmax, top_confidence

# -- temperature scaling ------------------------------------------------------------------------
T0 = 2.0
N_TEMP = 20_000


@pytest.fixture(scope="module")
def calibrated_at_t0(sample_labels: Callable[..., np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    g = np.random.default_rng(99)
    z = 3.0 * g.normal(size=(N_TEMP, 5))
    return z, sample_labels(z, T0, g)


def test_nll_objective_recovers_temperature(calibrated_at_t0: Any) -> None:
    """MLE of beta = 1/T: SE = 1/sqrt(N I), I = mean_i Var_{softmax(beta0 z_i)}[z_i] (Fisher
    information of the tempered softmax); SE(T) = T0^2 SE(beta). Tolerance 4 SE."""
    z, y = calibrated_at_t0
    t = TemperatureScaling("nll").fit(z, y).temperature_
    p = softmax(z, T0)
    fisher = ((p * z**2).sum(1) - (p * z).sum(1) ** 2).mean()
    se = T0**2 / np.sqrt(N_TEMP * fisher)
    assert abs(t - T0) < 4 * se, f"T={t:.4f}, T0={T0}, SE={se:.4f}"


def _acc_se(z: np.ndarray) -> float:
    """SE of the Acc-T root: correctness_i ~ Bernoulli(conf_T0(i)) under the model, so
    SE(acc) = sqrt(sum c(1-c)) / N; the delta method divides by d mean conf / dT at T0."""
    c = top_confidence(z, T0)
    h = 1e-4
    slope = (top_confidence(z, T0 + h).mean() - top_confidence(z, T0 - h).mean()) / (2 * h)
    return float(np.sqrt((c * (1 - c)).sum()) / z.shape[0] / abs(slope))


def test_acc_objective_recovers_temperature(calibrated_at_t0: Any) -> None:
    z, y = calibrated_at_t0
    t = TemperatureScaling("acc").fit(z, y).temperature_
    se = _acc_se(z)
    assert abs(t - T0) < 4 * se, f"T={t:.4f}, T0={T0}, SE={se:.4f}"


def test_ece_objective_recovers_temperature(calibrated_at_t0: Any) -> None:
    """ECE-T solves a binned, non-smooth version of the Acc-T equation; its spread is larger
    (1.3x Acc-T's over 20 seeds at this N), so the tolerance is 6 Acc-T standard errors."""
    z, y = calibrated_at_t0
    t = TemperatureScaling("ece").fit(z, y).temperature_
    se = _acc_se(z)
    assert abs(t - T0) < 6 * se, f"T={t:.4f}, T0={T0}, SE(acc-T)={se:.4f}"


def test_nll_objective_is_a_minimum(overconfident: Any) -> None:
    z, y = overconfident
    t = TemperatureScaling("nll").fit(z, y).temperature_
    f = [nll(z / (t * r), y, input="logits") for r in (1 - 1e-3, 1.0, 1 + 1e-3)]
    assert f[1] <= f[0] and f[1] <= f[2]


def test_ece_objective_minimises_training_ece(overconfident: Any) -> None:
    z, y = overconfident
    t_ece = TemperatureScaling("ece").fit(z, y).temperature_
    best = ece(z / t_ece, y, input="logits")
    for t in (*np.geomspace(0.5, 5.0, 23), TemperatureScaling("nll").fit(z, y).temperature_):
        assert best <= ece(z / t, y, input="logits") + 1e-12


def test_acc_objective_matches_confidence_to_accuracy(overconfident: Any) -> None:
    z, y = overconfident
    cal = TemperatureScaling("acc").fit(z, y)
    p = cal.predict_proba(z)
    acc = (np.argmax(z, axis=1) == y).mean()
    assert abs(p.max(axis=1).mean() - acc) < 1e-6
    assert cal.temperature_ > 1.0  # the logits are over-confident


@pytest.mark.parametrize("objective", ["nll", "acc", "ece"])
def test_temperature_near_two_on_overconfident(overconfident: Any, objective: str) -> None:
    # N = 600 only: a loose check that every objective softens (T0 = 2)
    t = TemperatureScaling(objective).fit(*overconfident).temperature_
    assert 1.3 < t < 3.0


@pytest.mark.parametrize(
    "objective",
    [
        "nll",
        "acc",
        "ece",
    ],
)
@pytest.mark.parametrize(("t_range", "end"), [((0.05, 1.0), 1.0), ((5.0, 20.0), 5.0)])
def test_boundary_warning(
    overconfident: Any, objective: str, t_range: tuple[float, float], end: float
) -> None:
    with pytest.warns(BoundaryWarning, match="Widen the 't_range' parameter"):
        cal = TemperatureScaling(objective, t_range=t_range).fit(*overconfident)
    assert cal.temperature_ == pytest.approx(end, rel=0.05)
    assert len(cal.fit_warnings_) == 1 and "t_range" in cal.fit_warnings_[0]


def test_no_boundary_warning_inside_range(overconfident: Any) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", BoundaryWarning)
        for objective in ("nll", "acc", "ece"):
            TemperatureScaling(objective).fit(*overconfident)


@pytest.mark.parametrize("objective", ["nll", "acc", "ece"])
def test_temperature_keeps_argmax(overconfident: Any, objective: str) -> None:
    z, y = overconfident
    cal = TemperatureScaling(objective).fit(z, y)
    np.testing.assert_array_equal(cal.predict(z), np.argmax(z, axis=1))
    np.testing.assert_allclose(cal.predict_proba(z), softmax(z / cal.temperature_), rtol=1e-12)


# -- saturated and float32 inputs ------------------------------------------------------------


def test_bounded_nll_ignores_saturated_examples(saturated: Any) -> None:
    """A few true-class probabilities of 0 drive the plain NLL fit to the end of t_range; the
    default bounded NLL stays at the clean fit and says how many examples it bounded."""
    z, z_sat, y = saturated
    clean = TemperatureScaling(nll_bound=None).fit(z, y).temperature_
    with pytest.warns(BoundaryWarning):
        plain = TemperatureScaling(nll_bound=None).fit(z_sat, y)
    assert plain.temperature_ == 20.0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        robust = TemperatureScaling().fit(z_sat, y)
    assert not any(issubclass(w.category, BoundaryWarning) for w in caught)
    assert any("nll_bound=20" in m for m in robust.fit_warnings_)
    # the bounded rows are 1% of the data: the fit moves by a fraction of a percent, not x20
    assert robust.temperature_ == pytest.approx(clean, rel=0.05)


def test_bounded_nll_is_the_plain_fit_on_clean_data(overconfident: Any) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bounded = TemperatureScaling().fit(*overconfident)
    assert bounded.fit_warnings_ == []
    plain = TemperatureScaling(nll_bound=None).fit(*overconfident)
    # the same Newton minimum; the bounded path may take one more step inside the 1e-12 tolerance
    assert bounded.temperature_ == pytest.approx(plain.temperature_, rel=1e-10)


@pytest.mark.parametrize("objective", ["nll", "acc", "ece"])
def test_float32_logits_fit_like_float64(overconfident: Any, objective: str) -> None:
    """float32 logits are fitted in float64 block by block: the same temperature as the float64
    copy of the same values, to the tolerance of the search (1e-12 relative for Newton)."""
    z, y = overconfident
    z32 = z.astype(np.float32)
    t32 = TemperatureScaling(objective).fit(z32, y).temperature_
    t64 = TemperatureScaling(objective).fit(z32.astype(np.float64), y).temperature_
    assert t32 == pytest.approx(t64, rel=1e-9)


@pytest.mark.compiled
@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_temperature_terms_are_the_shared_nll_statistic(
    overconfident: Any, dtype: type, compiled: bool, monkeypatch: Any
) -> None:
    """The Newton pass (NumPy blocks or the compiled kernel) gives the per-example NLL of
    :func:`nll_terms` (one statistic, one function), the bounded sum of
    :func:`clipped_nll_sum`, and derivatives in beta that match central differences of them."""
    from privcal.metrics import statistics
    from privcal.metrics.statistics import clipped_nll_sum, nll_terms, temperature_terms

    monkeypatch.setattr(statistics, "COMPILED_MIN_ENTRIES", 1 if compiled else 1 << 62)
    z, y = overconfident
    z = z.astype(dtype)
    z64 = z.astype(np.float64)
    rows = np.arange(y.size) % 3 > 0
    h = 1e-6
    for beta in (0.3, 1.0, 2.5):
        t = temperature_terms(z, y, beta, active=rows, bound=3.0)
        np.testing.assert_allclose(t.nll, nll_terms(z64, y, 1.0 / beta), rtol=1e-12, atol=1e-12)
        assert t.bounded_sum == pytest.approx(clipped_nll_sum(z64, y, 1.0 / beta, 3.0), 1e-12)
        slope = (
            nll_terms(z64, y, 1.0 / (beta + h))[rows] - nll_terms(z64, y, 1.0 / (beta - h))[rows]
        ).sum() / (2 * h)
        assert t.grad == pytest.approx(slope, rel=1e-6, abs=1e-5)
        up = temperature_terms(z, y, beta + h, active=rows)
        down = temperature_terms(z, y, beta - h, active=rows)
        assert t.curv == pytest.approx((up.grad - down.grad) / (2 * h), rel=1e-5)


def _shared_logits(shared_data: Any, name: str) -> tuple[np.ndarray, np.ndarray]:
    if name == "synthetic":  # the benchmark's kind of data, smaller: T about 0.7
        g = np.random.default_rng(1)
        y = g.integers(0, 200, size=6000)
        z = g.normal(size=(6000, 200))
        z[np.arange(6000), y] += 3.5
        return 2.5 * z, y
    if name == "20news":
        p = np.load(shared_data / "cleanlab-heldout" / "20news_probs.npy")
        y = np.load(shared_data / "cleanlab-heldout" / "20news_labels.npy").astype(np.int64)
    else:
        d = np.load(shared_data / "netcal-cifar" / f"{name}.npz")
        p, y = d["predictions"].astype(np.float64), d["ground_truth"]
    return np.log(np.maximum(p, np.finfo(np.float64).tiny)), y  # 20news holds exact zeros


def _nll_at_beta(z: np.ndarray, y: np.ndarray, beta: float) -> float:
    from privcal.metrics.statistics import clipped_nll_sum

    return float(clipped_nll_sum(z, y, 1.0 / beta, None))


@pytest.mark.compiled
@pytest.mark.parametrize("name", ["wideresnet-16-4-cifar-100", "20news", "synthetic"])
def test_compiled_temperature_fit_is_the_numpy_fit(
    shared_data: Any, name: str, monkeypatch: Any
) -> None:
    """The compiled fit (kernel passes, subsample start, float32 rows in float32 for the first
    steps) finds the temperature of the NumPy fit to 1e-6 relative on shared networks and on
    synthetic logits, float64 and float32, bounded and plain; and that temperature minimises
    the shared statistic (scipy's bounded scalar search on clipped_nll_sum)."""
    from scipy.optimize import minimize_scalar

    from privcal.calibrators import temperature
    from privcal.metrics import statistics

    z, y = _shared_logits(shared_data, name)
    for dtype in (np.float64, np.float32):
        zd = z.astype(dtype)
        for bound in (20.0, None):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FitWarning)
                monkeypatch.setattr(statistics, "COMPILED_MIN_ENTRIES", 1 << 62)
                ref = TemperatureScaling(nll_bound=bound).fit(zd, y).temperature_
                monkeypatch.setattr(statistics, "COMPILED_MIN_ENTRIES", 1)
                monkeypatch.setattr(temperature, "_SUBSAMPLE_ENTRIES", zd.size // 16)
                got = TemperatureScaling(nll_bound=bound).fit(zd, y).temperature_
            assert got == pytest.approx(ref, rel=1e-6), (dtype, bound)
            if bound is None and ref < 20.0:  # convex: the global minimum in beta = 1 / T
                z64 = zd.astype(np.float64)
                res = minimize_scalar(
                    partial(_nll_at_beta, z64, y),
                    bounds=(0.98 / ref, 1.02 / ref),
                    method="bounded",
                    options={"xatol": 1e-12},
                )
                assert 1.0 / res.x == pytest.approx(got, rel=1e-6)

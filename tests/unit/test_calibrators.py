"""Non-private calibrators (privcal.calibrators): scikit-learn conventions, serialisation and
the behaviour each method promises."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import pytest
import sklearn.exceptions
from sklearn.base import clone
from sklearn.utils.validation import check_is_fitted

from privcal.calibrators import (
    BBQ,
    METHODS,
    BoundaryWarning,
    Calibrator,
    FitWarning,
    HistogramBinning,
    IsotonicCalibration,
    MatrixScaling,
    PlattScaling,
    TemperatureScaling,
    VectorScaling,
    calibrator_from_dict,
)
from privcal.calibrators.base import CrossFitWarning
from privcal.calibrators.scaling import LOGIT_RANGE, floor_logits, order_preserving_logits
from privcal.calibrators.temperature import BoundedNLLWarning
from privcal.metrics import ece, nll
from privcal.metrics.statistics import softmax, top_confidence

MULTICLASS = sorted(m for m in METHODS if m != "platt")
ALL = [*MULTICLASS, "platt"]


def make(name: str) -> Calibrator:
    return METHODS[name]()


@pytest.fixture(scope="module")
def binary_data() -> tuple[np.ndarray, np.ndarray]:
    g = np.random.default_rng(7)
    s = 2.0 * g.normal(size=400)
    y = (g.random(400) < 1.0 / (1.0 + np.exp(-0.5 * s))).astype(np.int64)
    z = np.column_stack([np.zeros_like(s), s])
    z.setflags(write=False)
    y.setflags(write=False)
    return z, y


@pytest.fixture
def data(request: pytest.FixtureRequest, binary_data: Any, overconfident: Any) -> Any:
    return binary_data if request.param == "platt" else overconfident


def fitted(name: str, data: tuple[np.ndarray, np.ndarray]) -> Calibrator:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BoundaryWarning)
        return make(name).fit(*data)


# -- scikit-learn conventions -------------------------------------------------------------------
def test_methods_registry() -> None:
    assert set(METHODS) == {
        "temperature",
        "nll-t",
        "ece-t",
        "acc-t",
        "platt",
        "vector",
        "op-vector",
        "matrix",
        "histogram",
        "histogram-classwise",
        "bbq",
        "isotonic",
    }
    assert all(isinstance(make(m), Calibrator) for m in METHODS)


@pytest.mark.parametrize("name", ALL)
def test_clone_and_params_round_trip(name: str) -> None:
    cal = make(name)
    params = cal.get_params()
    twin = clone(cal)
    assert type(twin) is type(cal) and twin is not cal
    assert twin.get_params() == params
    twin.set_params(**params)
    assert twin.get_params() == params
    for value in params.values():  # hyperparameters only: nothing learned in __init__
        assert not isinstance(value, np.ndarray)
    assert not [k for k in vars(cal) if k.endswith("_")]


def test_set_params_changes_hyperparameters() -> None:
    cal = TemperatureScaling().set_params(objective="acc", t_range=(0.5, 3.0))
    assert cal.get_params() == {
        "objective": "acc",
        "t_range": (0.5, 3.0),
        "n_bins": 15,
        "nll_bound": 20.0,
    }
    with pytest.raises(ValueError):
        cal.set_params(not_a_parameter=1)


@pytest.mark.parametrize(("name", "data"), [(m, m) for m in ALL], indirect=["data"])
def test_fitted_attributes_end_with_underscore(name: str, data: Any) -> None:
    cal = make(name)
    before = set(vars(cal))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BoundaryWarning)
        assert cal.fit(*data) is cal
    learned = set(vars(cal)) - before
    assert learned, "fit learned nothing"
    assert all(k.endswith("_") for k in learned), learned
    assert {*type(cal)._fitted_attributes, "n_classes_"} <= learned
    check_is_fitted(cal)
    assert cal.n_classes_ == data[0].shape[1]


@pytest.mark.parametrize("name", ALL)
def test_not_fitted_errors(name: str) -> None:
    cal = make(name)
    z = np.zeros((3, 2 if name == "platt" else 4))
    with pytest.raises(sklearn.exceptions.NotFittedError, match="not fitted yet"):
        cal.predict_proba(z)
    with pytest.raises(sklearn.exceptions.NotFittedError):
        cal.predict(z)
    with pytest.raises(sklearn.exceptions.NotFittedError):
        cal.to_dict()
    with pytest.raises(sklearn.exceptions.NotFittedError):
        check_is_fitted(cal)


@pytest.mark.parametrize(
    ("name", "data"),
    [(m, m) for m in ALL],
    indirect=["data"],
)
def test_predict_proba_does_not_change_state(name: str, data: Any) -> None:
    cal = fitted(name, data)
    before = dict(vars(cal))
    cal.predict_proba(data[0])
    assert set(vars(cal)) == set(before)


# -- predictions --------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "data"), [(m, m) for m in ALL], indirect=["data"])
def test_predict_proba_is_a_distribution(name: str, data: Any) -> None:
    cal = fitted(name, data)
    g = np.random.default_rng(1)
    z_new = 5.0 * g.normal(size=(300, data[0].shape[1]))
    for z in (data[0], z_new):
        p = cal.predict_proba(z)
        assert p.shape == z.shape and p.dtype == np.float64
        assert np.all(p >= 0.0) and np.all(p <= 1.0)
        np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=0, atol=1e-12)
        np.testing.assert_array_equal(cal.predict(z), np.argmax(p, axis=1))


@pytest.mark.parametrize(("name", "data"), [(m, m) for m in ALL], indirect=["data"])
def test_json_round_trip_reproduces_predictions(name: str, data: Any) -> None:
    cal = fitted(name, data)
    text = json.dumps(cal.to_dict())
    back = calibrator_from_dict(json.loads(text))
    assert type(back) is type(cal)
    assert back.get_params() == cal.get_params()
    g = np.random.default_rng(2)
    z = np.vstack([data[0], 6.0 * g.normal(size=(100, data[0].shape[1]))])
    np.testing.assert_array_equal(back.predict_proba(z), cal.predict_proba(z))
    np.testing.assert_array_equal(
        type(cal).from_dict(json.loads(text)).predict_proba(z), cal.predict_proba(z)
    )


def test_histogram_round_trip_keeps_empty_bins_nan(overconfident: Any) -> None:
    cal = HistogramBinning(n_bins=50).fit(*overconfident)
    assert np.isnan(cal.bin_values_).any()
    back = calibrator_from_dict(json.loads(json.dumps(cal.to_dict())))
    np.testing.assert_array_equal(np.isnan(back.bin_values_), np.isnan(cal.bin_values_))


def test_from_dict_errors(overconfident: Any) -> None:
    d = TemperatureScaling().fit(*overconfident).to_dict()
    with pytest.raises(ValueError, match="not a VectorScaling"):
        VectorScaling.from_dict(d)
    with pytest.raises(ValueError, match="Unknown calibrator 'Nope'"):
        calibrator_from_dict({**d, "class": "Nope"})


@pytest.mark.parametrize(("name", "data"), [(m, m) for m in ALL], indirect=["data"])
def test_wrong_class_count_at_predict(name: str, data: Any) -> None:
    cal = fitted(name, data)
    c = data[0].shape[1]
    with pytest.raises(
        ValueError, match=rf"fitted on {c} classes but 'logits' has {c + 1} columns"
    ):
        cal.predict_proba(np.zeros((2, c + 1)))


@pytest.mark.parametrize(("name", "data"), [(m, m) for m in ALL], indirect=["data"])
def test_fit_on_probs_equals_fit_on_log_probs(name: str, data: Any) -> None:
    z, y = data
    p = softmax(z)
    a = fitted(name, (np.log(p), y))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BoundaryWarning)
        b = make(name).fit(p, y, input="probs")
    np.testing.assert_array_equal(a.predict_proba(z), b.predict_proba(z))


@pytest.mark.parametrize("name", MULTICLASS)
def test_fit_validates_inputs(name: str, overconfident: Any) -> None:
    z, y = overconfident
    with pytest.raises(ValueError, match="'labels' has 599 entries"):
        make(name).fit(z, y[:-1])
    with pytest.raises(ValueError, match="'logits' contains 1 non-finite"):
        make(name).fit(np.where(np.arange(z.size).reshape(z.shape) == 5, np.nan, z), y)


# -- Platt scaling ------------------------------------------------------------------------------
def test_platt_rejects_multiclass(overconfident: Any) -> None:
    with pytest.raises(ValueError, match=r"4 classes.*Use VectorScaling"):
        PlattScaling().fit(*overconfident)


def test_platt_one_column_equals_two_columns(binary_data: Any) -> None:
    z, y = binary_data
    a = PlattScaling().fit(z, y)
    b = PlattScaling().fit(z[:, 1], y)
    np.testing.assert_allclose([a.coef_, a.intercept_], [b.coef_, b.intercept_], rtol=1e-12)
    np.testing.assert_allclose(a.predict_proba(z), b.predict_proba(z[:, 1]), rtol=1e-12)
    # sigmoid(a s + b) of the binary logit s = z1 - z0
    p1 = 1.0 / (1.0 + np.exp(-(a.coef_ * (z[:, 1] - z[:, 0]) + a.intercept_)))
    np.testing.assert_allclose(a.predict_proba(z)[:, 1], p1, rtol=1e-12)


def test_platt_recovers_known_parameters() -> None:
    """y ~ Bernoulli(sigmoid(a0 s + b0)): the MLE lies within 4 standard errors (Fisher)."""
    a0, b0, n = 2.0, -0.5, 20_000
    g = np.random.default_rng(11)
    s = g.normal(size=n)
    p = 1.0 / (1.0 + np.exp(-(a0 * s + b0)))
    y = (g.random(n) < p).astype(int)
    cal = PlattScaling().fit(s, y)
    x = np.column_stack([s, np.ones(n)])
    cov = np.linalg.inv((x * (p * (1 - p))[:, None]).T @ x)
    se = np.sqrt(np.diag(cov))
    assert abs(cal.coef_ - a0) < 4 * se[0], (cal.coef_, se[0])
    assert abs(cal.intercept_ - b0) < 4 * se[1], (cal.intercept_, se[1])


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


# -- vector / matrix scaling --------------------------------------------------------------------
def test_order_preserving_keeps_full_ranking(overconfident: Any) -> None:
    z, y = overconfident
    cal = VectorScaling(order_preserving=True).fit(z, y)
    assert cal.coef_.shape == (z.shape[1] - 1,)
    np.testing.assert_array_equal(cal.intercept_, 0.0)
    g = np.random.default_rng(3)
    for zz in (z, 4.0 * g.normal(size=(500, z.shape[1]))):
        u = cal.transform_logits(zz)
        np.testing.assert_array_equal(np.argsort(-u, axis=1), np.argsort(-zz, axis=1))
        np.testing.assert_array_equal(cal.predict(zz), np.argmax(zz, axis=1))


def test_order_preserving_keeps_ties_equal() -> None:
    from privcal.calibrators.scaling import order_preserving_logits

    z = np.array([[1.0, 3.0, 1.0, 0.0], [2.0, 2.0, 2.0, 2.0]])
    u = order_preserving_logits(z, np.array([0.3, -0.7, 1.1]))
    assert u[0, 0] == u[0, 2] and u[0, 1] == 0.0
    np.testing.assert_array_equal(u[1], 0.0)


def test_order_preserving_changes_more_than_temperature(overconfident: Any) -> None:
    """The per-rank scales are free: the fit is not forced to one common scale."""
    z, y = overconfident
    cal = VectorScaling(order_preserving=True).fit(z, y)
    assert np.ptp(cal.coef_) > 1e-3
    assert (
        nll(cal.predict_proba(z), y)
        <= nll(TemperatureScaling().fit(z, y).predict_proba(z), y) + 1e-3
    )


def test_vector_scaling_form(overconfident: Any) -> None:
    z, y = overconfident
    cal = VectorScaling().fit(z, y)
    np.testing.assert_allclose(
        cal.predict_proba(z), softmax(z * cal.coef_ + cal.intercept_), rtol=1e-12
    )
    # on logits over-confident by a factor 2 the fitted scales are about 1/2
    assert np.all((cal.coef_ > 0.3) & (cal.coef_ < 0.8)), cal.coef_


def test_matrix_scaling_form_and_regularisation(overconfident: Any) -> None:
    z, y = overconfident
    cal = MatrixScaling().fit(z, y)
    np.testing.assert_allclose(
        cal.predict_proba(z), softmax(z @ cal.coef_.T + cal.intercept_), rtol=1e-12
    )
    strong = MatrixScaling(reg_offdiag=1e4, reg_intercept=1e4).fit(z, y)
    off = strong.coef_ - np.diag(np.diag(strong.coef_))
    assert np.abs(off).max() < 1e-3 and np.abs(strong.intercept_).max() < 1e-3
    assert np.abs(cal.coef_ - np.diag(np.diag(cal.coef_))).max() > np.abs(off).max()


@pytest.mark.parametrize("name", ["vector", "matrix", "op-vector", "temperature"])
def test_scaling_improves_training_nll(overconfident: Any, name: str) -> None:
    z, y = overconfident
    cal = make(name).fit(z, y)
    assert nll(cal.predict_proba(z), y) < nll(z, y, input="logits") - 0.05


# -- binning calibrators ------------------------------------------------------------------------
def test_histogram_top_hand() -> None:
    # top confidences 0.9 (right), 0.9 (wrong), 0.6 (right); 4 bins of width 0.25:
    # (0.5, 0.75] -> 1/1, (0.75, 1] -> 1/2, the two lower bins are empty (NaN)
    p = np.array([[0.9, 0.1], [0.9, 0.1], [0.6, 0.4]])
    cal = HistogramBinning(n_bins=4).fit(p, [0, 1, 0], input="probs")
    np.testing.assert_allclose(cal.bin_values_, [np.nan, np.nan, 1.0, 0.5])
    out = cal.predict_proba(np.array([[0.8, 0.2], [0.3, 0.7]]), input="probs")
    np.testing.assert_allclose(out, [[0.5, 0.5], [0.0, 1.0]], atol=1e-15)


def test_histogram_top_keeps_other_classes_proportional() -> None:
    p = np.array([[0.6, 0.3, 0.1], [0.6, 0.1, 0.3], [0.9, 0.05, 0.05]])
    cal = HistogramBinning(n_bins=2).fit(p, [0, 1, 0], input="probs")
    np.testing.assert_allclose(cal.bin_values_, [np.nan, 2 / 3])
    out = cal.predict_proba(np.array([[0.7, 0.2, 0.1]]), input="probs")
    np.testing.assert_allclose(out, [[2 / 3, 2 / 9, 1 / 9]], rtol=1e-12)
    # a top confidence of 0.45 falls in the empty bin [0, 0.5]: the row is kept unchanged
    low = np.array([[0.45, 0.35, 0.2]])
    np.testing.assert_allclose(cal.predict_proba(low, input="probs"), low, rtol=1e-12)


def test_histogram_top_keeps_the_prediction_when_it_lowers_the_top() -> None:
    # confidence 0.6 recalibrated to 0.4 (2 of 5 right): class 1's share would reach 0.4 and tie
    # with the top; it is held just below it, so argmax stays on class 2 (it was class 1 by index)
    p = np.tile([0.05, 0.35, 0.6], (5, 1))
    cal = HistogramBinning(n_bins=2).fit(p, [2, 2, 0, 1, 1], input="probs")
    out = cal.predict_proba(p[:1], input="probs")
    assert out[0, 2] == pytest.approx(0.4) and out.sum() == pytest.approx(1.0)
    assert out[0, 1] < out[0, 2] and out[0, 1] == pytest.approx(0.4, rel=1e-8)
    assert cal.predict(p[:1], input="probs")[0] == 2


def test_cross_fit_warns_when_held_out_accuracy_falls() -> None:
    # 20 classes, 30 rows each: one-vs-all bins reorder classes and lose accuracy held out
    # (McNemar beyond 2 SD); top-label binning keeps every prediction and stays quiet
    g = np.random.default_rng(0)
    n, c = 600, 20
    y = g.integers(c, size=n)
    z = g.normal(size=(n, c))
    z[np.arange(n), y] += 2.5
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        classwise = HistogramBinning(mode="classwise").fit(z, y)
        top = HistogramBinning().fit(z, y)
    assert any("McNemar" in w and "correctly classified" in w for w in classwise.fit_warnings_)
    assert not any("McNemar" in w for w in top.fit_warnings_)


def test_histogram_classwise_values(overconfident: Any) -> None:
    z, y = overconfident
    cal = HistogramBinning(mode="classwise", n_bins=5).fit(z, y)
    p = softmax(z)
    idx = np.minimum(np.ceil(p * 5).astype(int) - 1, 4).clip(0)
    for j in range(z.shape[1]):
        for b in range(5):
            members = idx[:, j] == b
            expected = (y[members] == j).mean() if members.any() else np.nan
            np.testing.assert_allclose(cal.bin_values_[j, b], expected, rtol=1e-12)


def test_bbq_table_shape_and_weights(overconfident: Any) -> None:
    z, y = overconfident
    cal = BBQ(n_levels=4).fit(z, y)
    assert cal.table_.shape == (4, 16) and cal.weights_.shape == (4, 4)
    np.testing.assert_allclose(cal.weights_.sum(axis=1), 1.0, rtol=1e-12)
    assert np.all((cal.table_ > 0) & (cal.table_ < 1))


def test_isotonic_step_functions_monotone(overconfident: Any) -> None:
    cal = IsotonicCalibration().fit(*overconfident)
    for x, v in zip(cal.x_thresholds_, cal.y_thresholds_, strict=True):
        assert np.all(np.diff(x) >= 0) and np.all(np.diff(v) >= 0)
        assert v.min() >= 0 and v.max() <= 1


@pytest.mark.parametrize("name", ["histogram", "histogram-classwise", "bbq", "isotonic"])
def test_binning_reduces_training_ece(overconfident: Any, name: str) -> None:
    z, y = overconfident
    cal = make(name).fit(z, y)
    assert ece(cal.predict_proba(z), y) < ece(z, y, input="logits")


# -- restoring is validated ------------------------------------------------------------------


def _saved(name: str, data: Any) -> dict[str, Any]:
    return json.loads(json.dumps(fitted(name, data).to_dict()))


def _nan(d: dict[str, Any], field: str) -> None:
    d["fitted"][field]["__ndarray__"][0] = None


TAMPERED: list[tuple[str, str, Callable[[dict[str, Any]], Any], str]] = [
    ("temperature", "negative T", lambda d: d["fitted"].update(temperature_=-1.0), "temperature_"),
    ("temperature", "zero T", lambda d: d["fitted"].update(temperature_=0), "temperature_"),
    ("temperature", "T as text", lambda d: d["fitted"].update(temperature_="2"), "temperature_"),
    ("temperature", "no version", lambda d: d.pop("privcal_version"), "privcal_version"),
    ("temperature", "odd version", lambda d: d.update(privcal_version="x"), "privcal_version"),
    ("temperature", "future major", lambda d: d.update(privcal_version="9.0.0"), "major"),
    ("temperature", "unknown class", lambda d: d.update({"class": "Nope"}), "Nope"),
    ("temperature", "class not text", lambda d: d.update({"class": 3}), "'class'"),
    ("temperature", "missing T", lambda d: d["fitted"].pop("temperature_"), "temperature_"),
    ("temperature", "extra fitted", lambda d: d["fitted"].update(coef_=1.0), "coef_"),
    ("temperature", "bad param", lambda d: d["params"].update(objective="mse"), "objective"),
    ("temperature", "unknown param", lambda d: d["params"].update(alpha=1), "params.alpha"),
    ("temperature", "one class", lambda d: d["fitted"].update(n_classes_=1), "n_classes_"),
    ("temperature", "fitted not a dict", lambda d: d.update(fitted=[]), "'fitted'"),
    ("temperature", "bad warnings", lambda d: d["fitted"].update(fit_warnings_=[1]), "warnings"),
    ("vector", "NaN weight", lambda d: _nan(d, "coef_"), "coef_"),
    ("vector", "short weights", lambda d: d["fitted"]["coef_"]["__ndarray__"].pop(), "coef_"),
    ("matrix", "flat W", lambda d: d["fitted"]["coef_"].update(__ndarray__=[1.0]), "coef_"),
    ("matrix", "NaN intercept", lambda d: _nan(d, "intercept_"), "intercept_"),
    (
        "histogram",
        "value > 1",
        lambda d: d["fitted"]["bin_values_"]["__ndarray__"].__setitem__(-1, 2.0),
        "bin_values_",
    ),
    (
        "bbq",
        "NaN table",
        lambda d: d["fitted"]["table_"]["__ndarray__"][0].__setitem__(0, None),
        "table_",
    ),
    (
        "isotonic",
        "unsorted x",
        lambda d: d["fitted"]["x_thresholds_"][0]["__ndarray__"].reverse(),
        "x_thresholds_",
    ),
    ("isotonic", "missing class", lambda d: d["fitted"]["y_thresholds_"].pop(), "y_thresholds_"),
    ("platt", "NaN slope", lambda d: d["fitted"].update(coef_=None), "coef_"),
    ("platt", "three classes", lambda d: d["fitted"].update(n_classes_=3), "n_classes_"),
]


@pytest.mark.parametrize(
    ("name", "data", "tamper", "field"),
    [(m, m, t, f) for m, _, t, f in TAMPERED],
    indirect=["data"],
    ids=[f"{m}-{what}" for m, what, _, _ in TAMPERED],
)
def test_tampered_calibrator_is_refused(
    name: str, data: Any, tamper: Callable[[dict[str, Any]], Any], field: str
) -> None:
    """A damaged or edited calibrator file raises a ValueError naming the field; never applied."""
    d = _saved(name, data)
    tamper(d)
    with pytest.raises(ValueError, match=field) as err:
        calibrator_from_dict(d)
    message = str(err.value).lower()
    assert "fit the calibrator again" in message or "fit it again" in message


def test_restored_calibrator_keeps_its_fit_warnings(overconfident: Any) -> None:
    with pytest.warns(BoundaryWarning):
        cal = TemperatureScaling(t_range=(5.0, 20.0)).fit(*overconfident)
    back = calibrator_from_dict(json.loads(json.dumps(cal.to_dict())))
    assert back.fit_warnings_ == cal.fit_warnings_ and len(cal.fit_warnings_) == 1


# -- saturated and float32 inputs ------------------------------------------------------------


@pytest.fixture(scope="module")
def saturated(overconfident: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``overconfident`` with 1% of rows whose true class has log-probability -708 (p = 0)."""
    z, y = overconfident
    z = z - z.max(axis=1, keepdims=True)
    bad = np.random.default_rng(3).choice(y.size, size=max(1, y.size // 100), replace=False)
    z_sat = z.copy()
    z_sat[bad, y[bad]] = np.log(np.finfo(float).tiny)
    return z, z_sat, y


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


# -- vector and matrix scaling on saturated inputs --------------------------------------------


def _zeroed_probs(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Log-probabilities like the 20 newsgroups set's: 60% of the non-top entries are exact
    zeros read as log(tiny) = -708, among them the true class of ~6% of the rows."""
    g = np.random.default_rng(seed)
    n, c = 4000, 10
    y = g.integers(c, size=n)
    z = g.normal(size=(n, c))
    z[np.arange(n), y] += 3.0
    z -= np.log(np.exp(z).sum(axis=1, keepdims=True))
    zero = g.random((n, c)) < 0.6
    zero[np.arange(n), z.argmax(axis=1)] = False
    z[zero] = np.log(np.finfo(np.float64).tiny)
    return z, y


@pytest.mark.parametrize(
    ("cls", "param", "value"),
    [
        (PlattScaling, "nll_bound", 0.0),
        (VectorScaling, "nll_bound", 0.0),
        (VectorScaling, "nll_bound", float("nan")),
        (MatrixScaling, "nll_bound", -1.0),
        (MatrixScaling, "logit_range", 0.0),
        (MatrixScaling, "logit_range", float("inf")),
    ],
)
def test_bounded_scaling_rejects_bad_bounds(cls: Any, param: str, value: float) -> None:
    z, y = _zeroed_probs(0)
    with pytest.raises(ValueError, match=f"'{param}'"):
        cls(**{param: value}).fit(z, y)


def test_platt_bound_keeps_the_slope_on_exact_zero_probabilities() -> None:
    """2% of binary logits at +-708 against their label (true class probability exactly 0):
    the plain NLL takes the slope to 0 (every probability 0.5, accuracy 0.5); the bounded fit
    keeps a slope near the data's, says so, and keeps the accuracy."""
    g = np.random.default_rng(1)
    n = 2000
    y = g.integers(2, size=n)
    s = g.normal(size=n) + (2 * y - 1) * 1.5
    bad = g.random(n) < 0.02
    s[bad] = -(2 * y[bad] - 1) * 708.0
    z = np.column_stack([np.zeros(n), s])
    before = float(np.mean((s > 0) == y))
    plain = PlattScaling(nll_bound=None).fit(z, y)
    assert abs(plain.coef_) < 0.05
    with pytest.warns(BoundedNLLWarning):
        cal = PlattScaling().fit(z, y)
    assert cal.coef_ > 2.0
    assert np.mean(cal.predict(z) == y) == pytest.approx(before)
    assert any("Platt scaling" in w for w in cal.fit_warnings_)


@pytest.mark.parametrize(
    ("robust", "plain"),
    [
        (VectorScaling, lambda: VectorScaling(nll_bound=None)),
        (MatrixScaling, lambda: MatrixScaling(nll_bound=None, logit_range=None)),
    ],
)
def test_scaling_keeps_accuracy_on_exact_zero_probabilities(robust: Any, plain: Any) -> None:
    """Logits of -708 once dragged class scales to 0 (plain NLL: accuracy 0.90 -> 0.26-0.28);
    the bounded NLL (and for matrix scaling the floor at max - 36) keeps the accuracy and says
    that examples were counted at the bound."""
    (z, y), (zt, yt) = _zeroed_probs(0), _zeroed_probs(1)
    before = float(np.mean(zt.argmax(axis=1) == yt))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        old = plain().fit(z, y)
    assert np.mean(old.predict(zt) == yt) < before - 0.3  # the failure this guards against
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cal = robust().fit(z, y)
    kinds = {w.category for w in caught}
    # matrix scaling reorders classes: its cross-fit check may say so (CrossFitWarning)
    assert BoundedNLLWarning in kinds and kinds <= {BoundedNLLWarning, CrossFitWarning}
    assert np.mean(cal.predict(zt) == yt) > before - 0.01
    assert any("nll_bound=20" in m for m in cal.fit_warnings_)
    back = calibrator_from_dict(json.loads(json.dumps(cal.to_dict())))
    np.testing.assert_allclose(back.predict_proba(zt), cal.predict_proba(zt))


@pytest.mark.parametrize("name", ["vector", "op-vector", "matrix"])
def test_scaling_bound_is_the_plain_fit_on_clean_data(overconfident: Any, name: str) -> None:
    """No example reaches the bound and no logit the floor: the fit is the plain NLL fit, with
    no diagnostics."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cal = make(name).fit(*overconfident)
    assert cal.fit_warnings_ == []
    params = {"nll_bound": None} | ({"logit_range": None} if name == "matrix" else {})
    plain = clone(make(name)).set_params(**params).fit(*overconfident)
    np.testing.assert_allclose(cal.coef_, plain.coef_, rtol=1e-10, atol=1e-12)


def test_matrix_floor_changes_probabilities_by_rounding_only() -> None:
    z, _ = _zeroed_probs(2)
    floored, rows = floor_logits(z, LOGIT_RANGE)
    assert rows > 0.9 * z.shape[0]
    assert (floored >= z.max(axis=1, keepdims=True) - LOGIT_RANGE).all()
    np.testing.assert_allclose(softmax(floored), softmax(z), rtol=0, atol=1e-14)


@pytest.mark.parametrize("name", ["vector", "op-vector", "matrix"])
def test_scaling_on_20news_keeps_accuracy_and_improves_ece(shared_data: Any, name: str) -> None:
    """20 newsgroups: 61 true-class probabilities of exactly 0 and 74% zero entries once took
    vector / matrix scaling from 92% to 59-67% accuracy; now accuracy stays and ECE drops."""
    from privcal.data import read_scores

    path = shared_data / "cleanlab-heldout" / "20news_probs.npy"
    if not path.is_file():
        pytest.skip(f"{path} not found")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # exact zeros clipped to log(tiny) by the reader
        sc = read_scores(path)
    z, y = sc.logits, sc.labels
    assert z is not None
    perm = np.random.default_rng(0).permutation(y.size)
    fit, test = perm[: y.size // 2], perm[y.size // 2 :]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cal = make(name).fit(z[fit], y[fit])
    p = cal.predict_proba(z[test])
    acc_before = float(np.mean(z[test].argmax(axis=1) == y[test]))
    acc_after = float(np.mean(p.argmax(axis=1) == y[test]))
    before, after = ece(z[test], y[test], input="logits"), ece(p, y[test])
    msg = f"20news {name}: acc {acc_before:.4f} -> {acc_after:.4f}, ECE {before:.4f} -> {after:.4f}"
    # matrix scaling over-fits its 420 parameters a little (train 93.7%): 2.5 points of slack
    assert acc_after > acc_before - (0.025 if name == "matrix" else 0.005), msg
    assert after < before - 0.1 and after < 0.03, msg  # ECE ~0.20 uncalibrated
    assert any("nll_bound" in w for w in cal.fit_warnings_), msg


# -- trust-region Newton fits of vector, matrix and Platt scaling ----------------------------


def _compiled(obj: Any) -> Any:
    """A small matrix-scaling objective on the path of large ones (block preconditioner,
    compiled kernels), which ``COMPILED_MIN_WORK`` keeps for N * C * C >= 2^24."""
    obj.compiled = True
    return obj


def _objectives(seed: int) -> dict[str, tuple[Any, np.ndarray]]:
    from privcal.calibrators import scaling as sc

    rng = np.random.default_rng(seed)
    n, c = 300, 5
    z = 3.0 * rng.normal(size=(n, c))
    y = rng.integers(0, c, n)
    order, gaps = sc.sorted_gaps(z)
    rank = np.argsort(order, axis=1)[np.arange(n), y]
    objectives = {
        "platt": (sc._Platt(z[:, 1] - z[:, 0], y % 2, 0.7), rng.normal(size=2)),
        "vector": (sc._Vector(z, y, 0.7), rng.normal(size=2 * c)),
        "matrix": (sc._Matrix(z, y, 0.7, 0.1, 0.2), rng.normal(size=c * c + c)),
        "op-vector": (sc._OrderPreserving(gaps, rank, 0.7), 0.3 * rng.normal(size=c - 1)),
    }
    compiled = _compiled(sc._Matrix(z, y, 0.7, 0.1, 0.2))
    objectives["matrix-compiled"] = (compiled, objectives["matrix"][1])
    return objectives


@pytest.mark.parametrize("name", ["platt", "vector", "matrix", "matrix-compiled", "op-vector"])
def test_scaling_objectives_have_exact_gradients_and_hessian_products(name: str) -> None:
    """Gradients and Hessian-vector products of the fitting objectives equal central
    differences of the objective and of the gradient (the Newton fits rely on them)."""
    obj, x = _objectives(4)[name]
    rng = np.random.default_rng(5)
    h = 1e-6
    for _ in range(3):
        v = rng.normal(size=x.size)
        _, grad = obj(x)
        slope = (obj(x + h * v)[0] - obj(x - h * v)[0]) / (2 * h)
        bend = (obj(x + h * v)[1] - obj(x - h * v)[1]) / (2 * h)
        assert grad @ v == pytest.approx(slope, rel=1e-7, abs=1e-9)
        np.testing.assert_allclose(obj.hessp(x, v), bend, rtol=1e-6, atol=1e-7 * np.abs(bend).max())


@pytest.mark.parametrize("name", ["vector", "matrix", "matrix-compiled"])
def test_preconditioners_are_invertible_changes_of_variables(name: str) -> None:
    """x = A t: to_t inverts to_x and pull is its transpose (<A t, g> = <t, A^T g>), so the
    solver's gradient and Hessian products in t are those of the same objective."""
    obj, x = _objectives(7)[name]
    change = obj.preconditioner(x)
    rng = np.random.default_rng(8)
    t, g = rng.normal(size=x.size), rng.normal(size=x.size)
    np.testing.assert_allclose(change.to_t(change.to_x(t)), t, rtol=1e-9, atol=1e-9)
    assert change.to_x(t) @ g == pytest.approx(t @ change.pull(g), rel=1e-10)


def test_matrix_block_preconditioner_factors_the_per_class_curvature() -> None:
    """With every row sampled, block c of the block preconditioner is the curvature of class
    c's variables (row c of W and b_c): sum_i s p_ic (1 - p_ic) (z_i, 1)(z_i, 1)^T plus the
    penalty's diagonal; the factors are its Cholesky factors."""
    from privcal.calibrators import scaling as sc

    rng = np.random.default_rng(10)
    n, c = 200, 4
    z, y = rng.normal(size=(n, c)), rng.integers(0, c, n)
    obj = _compiled(sc._Matrix(z, y, 0.7, 0.1, 0.2))
    x = rng.normal(size=c * c + c)
    change = obj.preconditioner(x)
    p = softmax(z @ x[: c * c].reshape(c, c).T + x[c * c :])
    zt = np.column_stack([z, np.ones(n)])
    for k in range(c):
        block = (zt * (0.7 / n * p[:, k] * (1 - p[:, k]))[:, None]).T @ zt
        block[np.diag_indices(c + 1)] += obj.penalty_diagonal(x)[change.blocks[k]]
        factor = change.factors[k]
        np.testing.assert_allclose(factor @ factor.T, block, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize(("lam", "mu"), [(0.1, 0.2), (0.0, 0.2), (0.1, 0.0)])
def test_matrix_objective_shifts_to_the_least_penalty_map(lam: float, mu: float) -> None:
    """``canonical`` (P) is a projection that keeps every probability, and P x has the least
    ODIR penalty among the maps that differ from x by a shift common to all classes (a
    vector added to every row of W, a number to every b_j); with lam = 0 (mu = 0) it leaves
    the columns (intercepts) as they are. The objective's penalty is the ODIR penalty at P x,
    and penalty_diagonal is the diagonal of its Hessian."""
    from privcal.calibrators import scaling as sc

    rng = np.random.default_rng(9)
    n, c = 40, 4
    z, y = rng.normal(size=(n, c)), rng.integers(0, c, n)
    obj = sc._Matrix(z, y, 1.0, lam, mu)
    x = rng.normal(size=c * c + c)
    px = obj.canonical(x)
    np.testing.assert_allclose(obj.canonical(px), px, atol=1e-14)

    def probs(v: np.ndarray) -> np.ndarray:
        return softmax(z @ v[: c * c].reshape(c, c).T + v[c * c :])

    def odir(v: np.ndarray) -> float:
        w, b = v[: c * c].reshape(c, c), v[c * c :]
        return lam * float(((w * (1 - np.eye(c))) ** 2).sum()) + mu * float(b @ b)

    np.testing.assert_allclose(probs(px), probs(x), atol=1e-12)
    assert obj.penalty(x)[0] == pytest.approx(odir(px), rel=1e-12)
    for _ in range(20):
        a, a0 = rng.normal(size=c), rng.normal()
        shifted = px + np.concatenate([np.tile(a, c), np.full(c, a0)])
        assert odir(shifted) >= odir(px) - 1e-12
    moved = px - x
    assert np.allclose(moved[: c * c], 0.0) == (lam == 0)
    assert np.allclose(moved[c * c :], 0.0) == (mu == 0)
    hessian = np.column_stack([obj.penalty_hessp(e) for e in np.eye(x.size)])
    np.testing.assert_allclose(obj.penalty_diagonal(x), np.diag(hessian), atol=1e-12)


@pytest.mark.parametrize("data", ["clean", "saturated"])
def test_matrix_cross_fit_twin_is_the_fit_from_the_identity(saturated: Any, data: str) -> None:
    """The cross-fit twin's solver starts at the full fit's parameters (``_fit_twin``), yet it
    is the fit of its half from the identity: the same parameters and probabilities to the
    solver's tolerance, with (saturated: 1% of rows beyond the NLL bound, so several
    majorise-minimise rounds) and without the bound at work."""
    z_clean, z_sat, y = saturated
    z = z_sat if data == "saturated" else z_clean
    half = np.random.default_rng(0).permutation(y.size)[: y.size // 2]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FitWarning)
        full = MatrixScaling().fit(z, y)
        twin = full._fit_twin(z[half], y[half])
        fresh = clone(full)
        fresh._fit(z[half], y[half])
    np.testing.assert_allclose(twin.coef_, fresh.coef_, atol=1e-4)
    np.testing.assert_allclose(twin.intercept_, fresh.intercept_, atol=1e-4)
    np.testing.assert_allclose(twin._predict_proba(z), fresh._predict_proba(z), atol=1e-5)
    assert not np.allclose(full.coef_, fresh.coef_, atol=1e-3)  # the start was elsewhere


def _reference_fit(cal: Any, z: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The same objective minimised by an independent path: SciPy's BFGS with finite-difference
    gradients on the shared NLL statistic (nll_terms) of the calibrator's own map."""
    from scipy.optimize import minimize

    from privcal.metrics.statistics import nll_terms

    c = z.shape[1]
    if isinstance(cal, MatrixScaling):
        off = 1.0 - np.eye(c)

        def f(x: np.ndarray) -> float:
            w, b = x[: c * c].reshape(c, c), x[c * c :]
            pen = 0.1 * ((w * off) ** 2).sum() + 0.1 * b @ b
            return float(nll_terms(z @ w.T + b, y).mean() + pen)

        x0 = np.concatenate([np.eye(c).ravel(), np.zeros(c)])
    elif cal.order_preserving:

        def f(x: np.ndarray) -> float:
            return float(nll_terms(order_preserving_logits(z, x), y).mean())

        x0 = np.zeros(c - 1)
    else:

        def f(x: np.ndarray) -> float:
            return float(nll_terms(z * x[:c] + x[c:], y).mean())

        x0 = np.concatenate([np.ones(c), np.zeros(c)])
    return np.asarray(minimize(f, x0, method="BFGS", options={"gtol": 1e-9}).x)


@pytest.mark.parametrize(
    ("cal", "compiled"),
    [
        (VectorScaling(), False),
        (VectorScaling(order_preserving=True), False),
        (MatrixScaling(), False),
        (MatrixScaling(), True),
    ],
)
def test_newton_scaling_fit_is_the_minimum_of_its_objective(
    overconfident: Any, cal: Any, compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trust-region Newton fit reaches the minimum an independent BFGS fit of the same
    objective (shared NLL statistic, finite-difference gradients) finds: the same parameters
    and calibrated probabilities to optimisation accuracy (matrix scaling on both its paths:
    ``compiled`` is the one of N * C * C >= 2^24)."""
    from privcal.calibrators import scaling as sc

    if compiled:
        monkeypatch.setattr(sc._Matrix, "COMPILED_MIN_WORK", 0)
    z, y = overconfident
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FitWarning)
        fitted = clone(cal).fit(z, y)
    ref = _reference_fit(cal, z, y)
    c = z.shape[1]
    got = (
        fitted.coef_
        if getattr(fitted, "order_preserving", False)
        else np.concatenate([np.ravel(fitted.coef_), fitted.intercept_])
    )
    if isinstance(fitted, VectorScaling) and not fitted.order_preserving:
        # softmax ignores a common shift of the intercepts: compare them centred
        got[c:] -= got[c:].mean()
        ref[c:] -= ref[c:].mean()
    np.testing.assert_allclose(got, ref, atol=2e-4)
    if isinstance(fitted, MatrixScaling):
        ref_p = softmax(z @ ref[: c * c].reshape(c, c).T + ref[c * c :])
    elif fitted.order_preserving:
        ref_p = softmax(order_preserving_logits(z, ref))
    else:
        ref_p = softmax(z * ref[:c] + ref[c:])
    np.testing.assert_allclose(fitted.predict_proba(z), ref_p, atol=1e-5)


def test_fit_progress_reports_each_iteration_only_when_asked(overconfident: Any) -> None:
    from privcal.calibrators import fit_progress

    seen: list[Any] = []
    with fit_progress(seen.append):
        MatrixScaling().fit(*overconfident)
    steps = [s for s in seen if s.fit == "matrix scaling"]
    assert steps and steps[0].iteration == 1
    assert all(s.elapsed >= 0 and np.isfinite(s.objective) for s in steps)
    before = len(seen)
    MatrixScaling().fit(*overconfident)  # outside the block: nothing more is reported
    assert len(seen) == before


def test_top_label_binning_fits_from_confidences_alone() -> None:
    """``fit_top_label`` on (confidence, correct) gives the map ``fit`` learns from logits, and
    ``predict_confidence`` is the top entry of ``predict_proba``."""
    from scipy.special import softmax

    from privcal.calibrators import HistogramBinning

    gen = np.random.default_rng(5)
    z = 2.0 * gen.normal(size=(400, 5))
    y = (z + gen.normal(size=z.shape)).argmax(axis=1)
    p = softmax(z, axis=1)
    conf, correct = p.max(axis=1), p.argmax(axis=1) == y
    full = HistogramBinning(n_bins=8).fit(z, y)
    top = HistogramBinning(n_bins=8).fit_top_label(conf, correct, n_classes=5)
    np.testing.assert_allclose(top.bin_values_, full.bin_values_, equal_nan=True)
    np.testing.assert_allclose(top.predict_confidence(conf), full.predict_proba(z).max(axis=1))
    assert HistogramBinning.from_dict(top.to_dict()).n_classes_ == 5
    with pytest.raises(ValueError, match="mode='top'"):
        HistogramBinning(mode="classwise").fit_top_label(conf, correct, 5)
    with pytest.raises(ValueError, match="'correct'"):
        HistogramBinning().fit_top_label(conf, correct[:-1], 5)


@pytest.mark.parametrize("cal", [PlattScaling(max_iter=1), MatrixScaling(max_iter=2)])
def test_newton_fit_out_of_iterations_warns(overconfident: Any, cal: Any) -> None:
    """A trust-region fit stopped by max_iter before its gradient test says so (the suite turns
    any privcal warning into an error, so the default fits of the other tests converge)."""
    from privcal.calibrators import IterationLimitWarning

    z, y = overconfident
    if isinstance(cal, PlattScaling):
        z = z[:, :2]
    with pytest.warns(IterationLimitWarning, match="max_iter"):
        fitted = clone(cal).fit(z, y % z.shape[1])
    assert any("Raise max_iter" in w for w in fitted.fit_warnings_)


@pytest.mark.parametrize("case", ["one-class labels", "logits x30"])
def test_matrix_scaling_converges_where_the_softmax_saturates(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Saturated softmaxes leave the curvature nearly flat: labels of a single class (every
    row's fit pushes one class towards probability 1) and a 30x overconfident network (the
    identity map's softmax is nearly one-hot). On the path of large fits, matrix scaling still
    reaches its gradient test (the suite turns an IterationLimitWarning into an error) in a
    bounded number of products; float32 products once ran 420 000 of them on the first case,
    and the start at the identity needs 2.5 times the products of the temperature start on the
    second (500 Newton iterations without converging on the shared WRN network)."""
    from privcal.calibrators import scaling as sc

    monkeypatch.setattr(sc._Matrix, "COMPILED_MIN_WORK", 0)
    rng = np.random.default_rng(13)
    n, c = 2000, 20
    y = rng.integers(0, c, n)
    z = rng.normal(size=(n, c))
    z[np.arange(n), y] += 2.0
    if case == "one-class labels":
        y = np.zeros(n, dtype=int)
    else:
        z = 30.0 * np.log(softmax(z))
    products = [0]
    hessp = sc._Matrix.hessp

    def counted(self: Any, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        products[0] += 1
        return hessp(self, x, v)

    monkeypatch.setattr(sc._Matrix, "hessp", counted)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BoundedNLLWarning)  # the cases' subject is convergence,
        warnings.simplefilter("ignore", CrossFitWarning)  # not these diagnostics
        cal = MatrixScaling().fit(z, y)
    assert np.isfinite(cal.coef_).all()
    # measured, with the cross-fit's two twins: 174 products for the overconfident case (256
    # from the identity map) and 32 for one-class labels
    assert products[0] < (200 if case == "logits x30" else 100), products[0]

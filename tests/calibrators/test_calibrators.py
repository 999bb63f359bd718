"""Non-private calibrators (privcal.calibrators): scikit-learn conventions, predictions,
serialisation and restoring, Platt scaling."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import sklearn.exceptions
from sklearn.base import clone
from sklearn.utils.validation import check_is_fitted

from privcal.calibrators import (
    METHODS,
    BoundaryWarning,
    Calibrator,
    HistogramBinning,
    PlattScaling,
    TemperatureScaling,
    VectorScaling,
    calibrator_from_dict,
)
from privcal.metrics.statistics import softmax

MULTICLASS = sorted(m for m in METHODS if m != "platt")
ALL = [*MULTICLASS, "platt"]


def make(name: str) -> Calibrator:
    return METHODS[name]()


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
    if c > 2:  # one example passed as a 1-D row is read as binary logits: the error says so
        with pytest.raises(ValueError, match=r"reshape\(1, -1\)"):
            cal.predict_proba(data[0][0])


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

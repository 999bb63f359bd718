"""Parameter checks (privcal._params) and their use by metrics and calibrators.

Every message must follow "The 'x' parameter of Owner must be ... Got ... instead."
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from privcal._params import (
    EPSILON,
    FRACTION,
    POSITIVE,
    PROBABILITY,
    SEED,
    Constraints,
    Int,
    Options,
    check_int,
    check_option,
    check_probability,
    check_range,
    check_real,
    validate_params,
)
from privcal.calibrators import (
    BBQ,
    HistogramBinning,
    MatrixScaling,
    PlattScaling,
    TemperatureScaling,
    VectorScaling,
)
from privcal.metrics import adaptive_ece, classwise_ece, ece, mce, reliability
from privcal.metrics.statistics import calibration_bins


def template(name: str, owner: str, value: Any) -> str:
    """Regex of the shared message template."""
    return (
        rf"^The '{name}' parameter of {owner} must be .+\. Got {re.escape(repr(value))} instead\.$"
    )


# -- the checkers themselves --------------------------------------------------------------------
@pytest.mark.parametrize(
    ("rule", "value", "allowed"),
    [
        (EPSILON, 0.0, r"a finite real number in \(0, inf\)"),
        (PROBABILITY, 1.0, r"a finite real number in \(0, 1\)"),
        (FRACTION, 0.0, r"a finite real number in \(0, 1\]"),
        (SEED, -1, r"an int >= 0"),
        (Options("a", None), "b", r"one of 'a', None"),
    ],
)
def test_shared_rules_give_the_checkers_messages(rule: Any, value: Any, allowed: str) -> None:
    with pytest.raises(ValueError, match=template("x", "f", value)) as err:
        rule.check(value, "x", "f")
    assert re.search(f"must be {allowed}\\.", str(err.value))


def test_validate_params_in_order_with_passing_values() -> None:
    base = Constraints(n=Int(1), lr=POSITIVE, bound=[POSITIVE, None])
    rules = Constraints(base, lr=[POSITIVE, "auto"], seed=SEED)
    assert list(rules) == ["n", "lr", "bound", "seed"]  # an override keeps its place

    class Est:
        n, lr, bound, seed = np.int64(3), "auto", None, 0

    assert validate_params(Est(), rules, "Est") == {"n": 3, "lr": "auto", "bound": None, "seed": 0}
    Est.lr, Est.bound = "fast", 0.0  # both wrong: the first in order is named
    with pytest.raises(ValueError, match=template("lr", "Est", "fast")):
        validate_params(Est(), rules, "Est")


@pytest.mark.parametrize("value", [3, np.int64(3), np.uint8(3)])
def test_check_int_accepts_integers(value: Any) -> None:
    out = check_int(value, "k", "f", low=1)
    assert out == 3 and type(out) is int


@pytest.mark.parametrize("value", [0, -2, 2.0, 2.5, True, "3", None, np.float64(3.0)])
def test_check_int_rejects(value: Any) -> None:
    with pytest.raises(ValueError, match=template("n_bins", "ece", value)):
        check_int(value, "n_bins", "ece", low=1)


def test_check_int_message_states_bound() -> None:
    with pytest.raises(ValueError, match=r"must be an int >= 1\. Got 0 instead"):
        check_int(0, "n_bins", "ece", low=1)
    with pytest.raises(ValueError, match=r"must be an int\. Got 1\.5 instead"):
        check_int(1.5, "k", "f")


def test_check_real_accepts() -> None:
    assert check_real(2, "eps", "f", low=0.0, low_open=True) == 2.0
    assert check_real(0.0, "lam", "f", low=0.0) == 0.0
    assert check_real(1.0, "q", "f", low=0.0, high=1.0) == 1.0


@pytest.mark.parametrize(
    ("value", "kwargs", "interval"),
    [
        (0.0, {"low": 0.0, "low_open": True}, r"\(0, inf\)"),
        (-1.0, {"low": 0.0}, r"\[0, inf\)"),
        (1.0, {"low": 0.0, "high": 1.0, "high_open": True}, r"\[0, 1\)"),
        (2.0, {"low": 0.0, "high": 1.0}, r"\[0, 1\]"),
        (float("nan"), {}, r"\(-inf, inf\)"),
        (float("inf"), {"low": 0.0}, r"\[0, inf\)"),
        ("1", {}, r"\(-inf, inf\)"),
        (True, {}, r"\(-inf, inf\)"),
    ],
)
def test_check_real_rejects(value: Any, kwargs: dict[str, Any], interval: str) -> None:
    with pytest.raises(ValueError, match=template("epsilon", "laplace", value)) as err:
        check_real(value, "epsilon", "laplace", **kwargs)
    assert re.search(rf"must be a finite real number in {interval}\.", str(err.value))


@pytest.mark.parametrize("value", [0.0, 1.0, -0.1, 1.5])
def test_check_probability_open_interval(value: float) -> None:
    with pytest.raises(ValueError, match=template("alpha", "f", value)):
        check_probability(value, "alpha", "f")
    assert check_probability(0.1, "alpha", "f") == 0.1


def test_check_option() -> None:
    assert check_option("mass", "binning", "ece", ("width", "mass")) == "mass"
    with pytest.raises(ValueError, match=template("binning", "ece", "quantile")) as err:
        check_option("quantile", "binning", "ece", ("width", "mass"))
    assert "must be one of 'width', 'mass'." in str(err.value)


@pytest.mark.parametrize("value", [(0.5, 3.0), [0.5, 3], np.array([0.5, 3.0])])
def test_check_range_accepts(value: Any) -> None:
    assert check_range(value, "t_range", "f") == (0.5, 3.0)


@pytest.mark.parametrize(
    "value",
    [
        (2.0, 1.0),
        (1.0, 1.0),
        (0.0, 1.0),
        (-1.0, 2.0),
        (1.0, np.inf),
        5,
        (1.0,),
        (1, 2, 3),
        ("a", "b"),
    ],
)
def test_check_range_rejects(value: Any) -> None:
    with pytest.raises(
        ValueError,
        match=r"^The 't_range' parameter of TemperatureScaling must be "
        r"a pair \(low, high\) of finite floats with 0 < low < high\. Got .* instead",
    ):
        check_range(value, "t_range", "TemperatureScaling")


# -- used by every metric -----------------------------------------------------------------------
P = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]])
Y = np.array([0, 0, 1])

METRICS_WITH_BINS: list[tuple[str, Callable[..., Any]]] = [
    ("ece", lambda n: ece(P, Y, n_bins=n)),
    ("mce", lambda n: mce(P, Y, n_bins=n)),
    ("classwise_ece", lambda n: classwise_ece(P, Y, n_bins=n)),
    ("reliability", lambda n: reliability(P, Y, n_bins=n)),
    ("calibration_bins", lambda n: calibration_bins(P.max(1), Y == P.argmax(1), n_bins=n)),
]


@pytest.mark.parametrize(
    ("owner", "call"), METRICS_WITH_BINS, ids=[m[0] for m in METRICS_WITH_BINS]
)
@pytest.mark.parametrize("n_bins", [0, -1, 2.0])
def test_n_bins_checked_by_every_metric(owner: str, call: Callable[..., Any], n_bins: Any) -> None:
    with pytest.raises(ValueError, match=template("n_bins", owner, n_bins)):
        call(n_bins)


def test_adaptive_ece_n_bins_checked() -> None:
    with pytest.raises(ValueError, match=r"'n_bins' parameter of \w+ must be an int >= 1"):
        adaptive_ece(P, Y, n_bins=0)


def test_adaptive_ece_names_itself() -> None:
    with pytest.raises(ValueError, match=template("n_bins", "adaptive_ece", 0)):
        adaptive_ece(P, Y, n_bins=0)


@pytest.mark.parametrize("owner", ["ece", "mce"])
def test_binning_option_checked(owner: str) -> None:
    f = {"ece": ece, "mce": mce}[owner]
    with pytest.raises(ValueError, match=template("binning", owner, "quantile")):
        f(P, Y, binning="quantile")


@pytest.mark.parametrize("owner", ["ece", "mce", "classwise_ece", "brier", "nll", "accuracy"])
def test_metric_input_option_checked(owner: str) -> None:
    import privcal.metrics as m

    with pytest.raises(ValueError, match=template("input", owner, "proba")):
        getattr(m, owner)(P, Y, input="proba")


# -- used by every calibrator (checked at fit time, stored verbatim in __init__) ----------------
Z = np.array([[2.0, 0.0, -1.0], [0.0, 1.0, 0.5], [-1.0, 0.0, 3.0], [1.0, 1.5, 0.0]])
YZ = np.array([0, 1, 2, 0])


@pytest.mark.parametrize(
    "t_range", [(2.0, 1.0), (0.0, 5.0), (-1.0, 5.0), (1.0, 1.0), (1.0, np.inf), 3.0, (1.0,)]
)
def test_temperature_t_range(t_range: Any) -> None:
    cal = TemperatureScaling(t_range=t_range)
    assert cal.t_range is t_range  # stored verbatim, not checked in __init__
    with pytest.raises(
        ValueError, match=r"^The 't_range' parameter of TemperatureScaling must be "
    ):
        cal.fit(Z, YZ)


def test_temperature_objective() -> None:
    with pytest.raises(ValueError, match=template("objective", "TemperatureScaling", "mse")):
        TemperatureScaling(objective="mse").fit(Z, YZ)


def test_temperature_n_bins() -> None:
    with pytest.raises(ValueError, match=template("n_bins", "TemperatureScaling", 0)):
        TemperatureScaling(objective="ece", n_bins=0).fit(Z, YZ)


@pytest.mark.parametrize("mode", ["toplabel", "Top", None])
def test_histogram_mode(mode: Any) -> None:
    with pytest.raises(ValueError, match=template("mode", "HistogramBinning", mode)):
        HistogramBinning(mode=mode).fit(Z, YZ)


@pytest.mark.parametrize(
    ("cal", "name", "value"),
    [
        (HistogramBinning(n_bins=0), "n_bins", 0),
        (BBQ(n_levels=0), "n_levels", 0),
        (VectorScaling(max_iter=0), "max_iter", 0),
        (MatrixScaling(max_iter=1.5), "max_iter", 1.5),
        (MatrixScaling(reg_offdiag=-1.0), "reg_offdiag", -1.0),
        (MatrixScaling(reg_intercept=np.nan), "reg_intercept", np.nan),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_calibrator_params(cal: Any, name: str, value: Any) -> None:
    with pytest.raises(ValueError, match=template(name, type(cal).__name__, value)):
        cal.fit(Z, YZ)


def test_platt_max_iter() -> None:
    with pytest.raises(ValueError, match=template("max_iter", "PlattScaling", 0)):
        PlattScaling(max_iter=0).fit(np.array([0.5, -1.0]), [1, 0])


def test_every_declared_rule_accepts_the_defaults() -> None:
    """Each estimator's ``_parameter_constraints`` names its attributes; its defaults pass."""
    from privcal.conformal import PrivateConformal, SplitConformal
    from privcal.federated.calibrators import WeightedBBQ, WeightedHistogramBinning
    from privcal.private import PrivateHistogramBinning, PrivateTemperatureScaling

    classes = [BBQ, HistogramBinning, MatrixScaling, PlattScaling, TemperatureScaling]
    classes += [VectorScaling, WeightedBBQ, WeightedHistogramBinning, PrivateConformal]
    classes += [PrivateHistogramBinning, PrivateTemperatureScaling, SplitConformal]
    for cls in classes:
        est = cls()
        assert cls._parameter_constraints, cls
        validate_params(est, cls._parameter_constraints, cls.__name__)

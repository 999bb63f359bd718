"""An analyst with scikit-learn's machinery against the private estimators and the wrappers.

The analyst controls the arguments (clone, set_params, refits, model selection) but not the
data. Every path must either state what it released in ``privacy_report_`` / the ledger, or say
that it cannot (a warning or a refusal); no fitted attribute may release more than the report.
"""

from __future__ import annotations

import copy
import pickle
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, cross_val_score

from privcal.calibrators import TemperatureScaling
from privcal.conformal import PrivateConformal, PrivateRiskControl, SplitConformal
from privcal.data.synthetic import multilabel
from privcal.exceptions import PrivcalWarning
from privcal.privacy import BudgetExceededError, PrivacyOdometer, UnaccountedFitWarning
from privcal.private import PrivateHistogramBinning, PrivateTemperatureScaling
from privcal.report.summaries import risk_summary_data
from privcal.sklearn import CalibratedClassifier, ConformalClassifier, RiskControlClassifier
from privcal.training import DPPlattScaling, DPTemperatureScaling

# sparse bins and weak temperature fits fall back (NoiseDominatedWarning): not the subject here
pytestmark = pytest.mark.filterwarnings("ignore::privcal.private.NoiseDominatedWarning")


@pytest.fixture(scope="module")
def digits() -> tuple[Any, np.ndarray, np.ndarray]:
    X, y = load_digits(return_X_y=True)
    model = LogisticRegression(max_iter=2000).fit(X[:600], y[:600])
    return model, X[600:1400], y[600:1400]


def test_a_private_risk_fit_does_not_release_the_row_count() -> None:
    """PrivateRiskControl is epsilon-DP under add/remove with only ``n >= n_min`` public, yet its
    fitted ``n_`` (and the ``privacy risk`` summary's ``n_cal``) held the exact row count: two
    neighbouring calibration sets were told apart with certainty (epsilon infinite where the
    report says 1)."""
    p, y = multilabel(3000, seed=0)
    fits = [
        PrivateRiskControl("fnr", alpha=0.1, epsilon=1.0).fit(p[:m], y[:m]) for m in (3000, 2999)
    ]
    for est in fits:
        assert not hasattr(est, "n_")
        summary = risk_summary_data(
            est,
            est.predict_set(p),
            None,
            alpha=0.1,
            loss="fnr",
            sets_file="s",
            cal_file="c",
            test_file="t",
        )
        assert "n_cal" not in summary and summary["privacy_report"]["relation"] == "add/remove"
    rc = RiskControlClassifier(_FixedProbs(), PrivateRiskControl("fnr", epsilon=1.0)).fit(p, y)
    assert not hasattr(rc.method_, "n_")


class _FixedProbs:
    """A 'classifier' whose predict_proba is its input (the rows are probabilities)."""

    def predict_proba(self, X: Any) -> np.ndarray:
        return np.asarray(X, dtype=np.float64)


PRIVATE = [
    PrivateTemperatureScaling,
    PrivateHistogramBinning,
    PrivateConformal,
    PrivateRiskControl,
    DPTemperatureScaling,
    DPPlattScaling,
]


def test_a_grid_search_without_a_ledger_warns_that_its_fits_compose(digits: Any) -> None:
    """2 candidates x 3 folds + the refit: every calibration row is in 2 * 2 + 1 = 5 private
    fits (epsilon 5 by basic composition), and best_estimator_.privacy_report_ says 1. Before
    the fix nothing said so; now each clone without a ledger warns."""
    model, X, y = digits
    grid = {"calibrator__objective": ["acc", "nll"]}
    search = GridSearchCV(
        CalibratedClassifier(model, PrivateTemperatureScaling(epsilon=1.0)),
        grid,
        cv=3,
        scoring="neg_log_loss",
    )
    with pytest.warns(UnaccountedFitWarning, match=r"\(k - 1\) c \+ 1 times epsilon"):
        search.fit(X, y)
    assert search.best_estimator_.privacy_report_.epsilon == pytest.approx(1.0)


def test_a_grid_search_with_a_ledger_charges_every_fit(digits: Any) -> None:
    """The clones share the ledger: 2 x 3 folds and the refit charge 7, and nothing warns."""
    model, X, y = digits
    ledger = PrivacyOdometer(budget=100.0)
    cal = PrivateTemperatureScaling(epsilon=1.0, ledger=ledger)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnaccountedFitWarning)
        GridSearchCV(
            CalibratedClassifier(model, cal),
            {"calibrator__objective": ["acc", "nll"]},
            cv=3,
            scoring="neg_log_loss",
        ).fit(X, y)
    assert ledger.spent == pytest.approx(7.0)
    small = PrivateTemperatureScaling(epsilon=1.0, ledger=PrivacyOdometer(budget=2.5))
    with pytest.raises(BudgetExceededError):  # the third fold is refused
        cross_val_score(CalibratedClassifier(model, small), X, y, cv=3, error_score="raise")


@pytest.mark.parametrize("estimator", PRIVATE, ids=lambda e: e.__name__)
def test_cloning_a_private_estimator_without_a_ledger_warns(estimator: type) -> None:
    with pytest.warns(UnaccountedFitWarning, match=f"{estimator.__name__}.*cloned"):
        clone(estimator())
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnaccountedFitWarning)
        assert clone(estimator(ledger=PrivacyOdometer(budget=1.0))).ledger is not None


def test_cross_val_score_of_a_bare_private_calibrator_warns(digits: Any) -> None:
    model, X, y = digits
    z = model.decision_function(X)
    with pytest.warns(UnaccountedFitWarning):
        cross_val_score(PrivateTemperatureScaling(), z, y, cv=3, scoring="neg_log_loss")


def test_fitting_again_without_a_ledger_warns_and_with_one_charges(digits: Any) -> None:
    """A second fit replaces privacy_report_ (epsilon 1) after two releases (epsilon 2)."""
    model, X, y = digits
    z = model.decision_function(X)
    p, labels = multilabel(3000, seed=0)
    fits: list[tuple[Any, tuple[Any, ...]]] = [
        (PrivateTemperatureScaling(), (z, y)),
        (PrivateHistogramBinning(), (z, y)),
        (PrivateConformal(epsilon=5.0), (z, y)),
        (PrivateRiskControl(), (p, labels)),
        (CalibratedClassifier(model, PrivateTemperatureScaling()), (X, y)),
        (ConformalClassifier(model, PrivateConformal(epsilon=5.0)), (X, y)),
        (RiskControlClassifier(_FixedProbs(), PrivateRiskControl()), (p, labels)),
    ]
    for est, data in fits:
        est.fit(*data)  # the first fit: no warning (the suite turns it into an error)
        with pytest.warns(UnaccountedFitWarning, match="fitted again"):
            est.fit(*data)
    ledger = PrivacyOdometer(budget=10.0)
    est = PrivateTemperatureScaling(ledger=ledger)
    est.fit(z, y)
    est.fit(z, y)
    assert ledger.spent == pytest.approx(2.0)


def test_a_conformal_method_keeps_its_fitted_calibrator_through_clone(digits: Any) -> None:
    """ConformalClassifier (and PrivateConformal's per-group fits) clone the method; the clone
    used to hold an unfitted copy of the fitted calibrator, so every such fit raised."""
    model, X, y = digits
    ts = TemperatureScaling().fit(model.decision_function(X[:300]), y[:300])
    for method in (SplitConformal(calibrator=ts), PrivateConformal(calibrator=ts, epsilon=5.0)):
        cc = ConformalClassifier(model, method).fit(X[300:], y[300:])
        assert cc.method_.calibrator is ts
    z = model.decision_function(X[300:])
    pc = PrivateConformal(calibrator=ts, epsilon=5.0).fit(z, y[300:], groups=y[300:] % 2)
    assert pc.predict_set(z, groups=y[300:] % 2).shape == z.shape


class _LogProbs:
    """A 'classifier' whose inputs are its log-probabilities (some -inf, some far below the
    log of the smallest float), whose predict_proba underflows those to exactly 0."""

    classes_ = np.arange(3)

    def predict_log_proba(self, X: Any) -> np.ndarray:
        return np.asarray(X, dtype=np.float64)

    def predict_proba(self, X: Any) -> np.ndarray:
        return np.exp(self.predict_log_proba(X))


class _Spy:
    """A calibrator that keeps the logits it was fitted on."""

    def fit(self, z: np.ndarray, y: np.ndarray) -> _Spy:
        self.z_ = np.array(z)
        return self

    def predict_proba(self, z: np.ndarray) -> np.ndarray:
        return np.full(np.shape(z), 1.0 / np.shape(z)[1])


def test_one_rows_minus_infinity_does_not_change_the_other_rows_logits() -> None:
    """A calibration row whose predict_log_proba holds -inf switched how **every** row was read
    (log of predict_proba, zeros at log(tiny) = -744 instead of the true -800): adding one row
    moved all the others' logits, so a private calibrator's sensitivity (one row changes one
    row's logits) did not hold. Now only that row is read from predict_proba."""
    rows = np.array([[0.0, -800.0, -800.0], [-900.0, 0.0, -900.0], [0.0, -np.inf, -800.0]])
    y = np.array([0, 1, 0])
    seen = []
    for n in (2, 3):
        cc = CalibratedClassifier(_LogProbs(), _Spy(), response_method="predict_log_proba")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PrivcalWarning)  # zeros read at log(tiny)
            seen.append(cc.fit(rows[:n], y[:n]).calibrator_.z_)
    np.testing.assert_array_equal(seen[1][:2], seen[0])
    assert seen[1][2, 1] == pytest.approx(np.log(np.finfo(float).tiny))


def test_a_ledger_crosses_processes_only_as_its_file(digits: Any, tmp_path: Path) -> None:
    """cross_val_score(..., n_jobs=2) pickles the estimator, ledger included: an in-memory
    ledger refuses with a message that says why (it failed on a lock before), and a file ledger
    is the same file in every worker, so each fold is charged there."""
    with pytest.raises(TypeError, match="second budget"):
        pickle.dumps(PrivacyOdometer(budget=1.0))
    model, X, y = digits
    ledger = PrivacyOdometer(budget=10.0, ledger=tmp_path / "l.sqlite")
    cal = PrivateTemperatureScaling(epsilon=1.0, ledger=ledger)
    cross_val_score(CalibratedClassifier(model, cal), X, y, cv=3, n_jobs=2)
    assert ledger.spent == pytest.approx(3.0)
    assert copy.copy(ledger) is ledger and copy.deepcopy(ledger) is ledger  # shared in process
    twin = pickle.loads(pickle.dumps(ledger))
    twin.spend("x", 1.0)
    assert ledger.spent == pytest.approx(4.0) and twin.budget == ledger.budget


def test_a_wrappers_report_states_the_base_estimator_as_public(digits: Any) -> None:
    """The wrappers treat the base estimator (and its training data) as public; the private
    calibrators' reports on arrays did not say so."""
    model, X, y = digits
    for cal in (PrivateTemperatureScaling(), PrivateHistogramBinning()):
        rep = CalibratedClassifier(model, cal).fit(X, y).privacy_report_
        assert rep.public[-1].startswith("the base estimator (LogisticRegression, fitted before")
        assert rep.public[-1].endswith("its decision_function")


def test_a_dp_sgd_fit_that_cannot_be_planned_charges_nothing() -> None:
    """DPTemperatureScaling charged and drew its count (2% of epsilon) and only then found that
    no noise multiplier reaches the rest ('The privacy budget is too low.'): budget spent on a
    fit that released nothing. With the default full batch the plan is public: checked first."""
    pytest.importorskip("opacus")
    rng = np.random.default_rng(0)
    z = 3 * rng.normal(size=(300, 3))
    ledger = PrivacyOdometer(budget=1.0, delta_budget=1e-3)
    with pytest.raises(ValueError, match="Nothing was released or charged"):
        DPTemperatureScaling(epsilon=1e-3, ledger=ledger).fit(z, z.argmax(1))
    assert ledger.spent == 0.0 and ledger.releases == []

"""privcal.sklearn: CalibratedClassifier and ConformalClassifier around frozen, fitted models.

Data: scikit-learn's bundled digits (1797 images, 10 classes), split once (seeded, stratified)
into train / calibration / test. The base models are fitted on the training part only and are
never refitted: every test that fits a wrapper makes the base classes' ``fit`` raise, and checks
the pickled base is byte-for-byte what it was.
"""

from __future__ import annotations

import pickle
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import load_digits
from sklearn.exceptions import NotFittedError
from sklearn.frozen import FrozenEstimator
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.naive_bayes import GaussianNB
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC
from sklearn.tree import DecisionTreeClassifier
from sklearn.utils.estimator_checks import check_estimator

from privcal.calibrators import BoundedNLLWarning, HistogramBinning, TemperatureScaling
from privcal.conformal import PrivateConformal, SplitConformal
from privcal.data.validation import ZeroProbabilityWarning, check_scores
from privcal.metrics import accuracy, coverage, ece, set_size
from privcal.privacy import SecureNoise, UnaccountedFitWarning
from privcal.private import (
    NoiseDominatedWarning,
    PrivateHistogramBinning,
    PrivateTemperatureScaling,
)
from privcal.sklearn import NOT_APPLICABLE_CHECKS, CalibratedClassifier, ConformalClassifier

Split = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


@pytest.fixture(scope="module")
def digits() -> Split:
    X, y = load_digits(return_X_y=True)
    X_tr, X_rest, y_tr, y_rest = train_test_split(X, y, test_size=0.6, random_state=0, stratify=y)
    X_cal, X_te, y_cal, y_te = train_test_split(
        X_rest, y_rest, test_size=0.5, random_state=0, stratify=y_rest
    )
    return X_tr, y_tr, X_cal, y_cal, X_te, y_te


def _nb(d: Split) -> Any:
    return GaussianNB().fit(d[0], d[1])


def _lr_pipeline(d: Split) -> Any:
    return make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000)).fit(d[0], d[1])


BASES = {"gaussian_nb": _nb, "scaler_logreg": _lr_pipeline}
_FIT_CLASSES = (GaussianNB, LogisticRegression, StandardScaler, Pipeline)


@pytest.fixture(scope="module", params=sorted(BASES))
def base(request: pytest.FixtureRequest, digits: Split) -> Any:
    return BASES[request.param](digits)


@pytest.fixture
def frozen(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Any call of a base class's fit / partial_fit / fit_transform fails the test."""

    def refit(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"{type(self).__name__} was refitted")

    for cls in _FIT_CLASSES:
        for name in ("fit", "partial_fit", "fit_transform"):
            if hasattr(cls, name):
                monkeypatch.setattr(cls, name, refit)
    yield


def _proba_ece(p: np.ndarray, y: np.ndarray) -> float:
    return ece(p, y, n_bins=15)


# -- the must-holds on digits ---------------------------------------------------------------------
def test_temperature_lowers_heldout_ece_keeps_accuracy_never_refits(
    base: Any, digits: Split, frozen: None
) -> None:
    _, _, X_cal, y_cal, X_te, y_te = digits
    before = pickle.dumps(base)
    bare = base.predict_proba(X_te)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # GaussianNB: examples at the NLL bound (FitWarning)
        cc = CalibratedClassifier(base, calibrator=TemperatureScaling()).fit(X_cal, y_cal)
    calibrated = cc.predict_proba(X_te)
    assert _proba_ece(calibrated, y_te) < _proba_ece(bare, y_te)
    assert accuracy(calibrated, y_te) == accuracy(bare, y_te)
    np.testing.assert_array_equal(cc.predict(X_te), base.predict(X_te))
    assert cc.estimator is base and pickle.dumps(base) == before  # frozen, not even modified
    np.testing.assert_array_equal(cc.classes_, base.classes_)
    assert cc.calibrator_.temperature_ > 0 and cc.calibrator is not cc.calibrator_
    assert not hasattr(cc, "privacy_report_")


def test_response_methods(digits: Split) -> None:
    X_tr, y_tr, X_cal, y_cal, X_te, _ = digits
    lr = _lr_pipeline(digits)
    cc = CalibratedClassifier(lr).fit(X_cal, y_cal)  # default: TemperatureScaling()
    assert isinstance(cc.calibrator_, TemperatureScaling)
    assert cc.response_method_ == "decision_function"
    # multinomial logistic regression: softmax(decision_function) is predict_proba, so T = 1
    # would give the base's probabilities back exactly
    z = lr.decision_function(X_te)
    np.testing.assert_allclose(
        cc.predict_proba(X_te), cc.calibrator_.predict_proba(z), rtol=0, atol=0
    )
    nb = _nb(digits)
    with pytest.warns(BoundedNLLWarning):  # GaussianNB puts 19 true classes below e^-20
        assert CalibratedClassifier(nb).fit(X_cal, y_cal).response_method_ == "predict_log_proba"
    # an estimator whose predict_log_proba is log(predict_proba) with exact zeros falls back to
    # predict_proba through the probs path: loud, never silent
    tree = DecisionTreeClassifier(max_depth=8, random_state=0).fit(X_tr, y_tr)
    with pytest.warns(ZeroProbabilityWarning):
        ck = CalibratedClassifier(tree, HistogramBinning()).fit(X_cal, y_cal)
    assert ck.response_method_ == "predict_log_proba"
    with pytest.warns(ZeroProbabilityWarning):
        got = ck.predict_proba(X_te)
    with pytest.warns(ZeroProbabilityWarning):
        expected = ck.calibrator_.predict_proba(
            check_scores(tree.predict_proba(X_te), input="probs")
        )
    np.testing.assert_array_equal(got, expected)
    forced = CalibratedClassifier(lr, response_method="predict_proba").fit(X_cal, y_cal)
    assert forced.response_method_ == "predict_proba"


def test_binary_margin_and_string_labels(digits: Split) -> None:
    X_tr, y_tr, X_cal, y_cal, X_te, y_te = digits
    names = np.array(["even", "odd"])
    lr = make_pipeline(StandardScaler(), LogisticRegression()).fit(X_tr, names[y_tr % 2])
    cc = CalibratedClassifier(lr).fit(X_cal, names[y_cal % 2])
    assert lr.decision_function(X_te).ndim == 1  # (n,) margins of classes_[1]
    p = cc.predict_proba(X_te)
    assert p.shape == (X_te.shape[0], 2)
    np.testing.assert_array_equal(cc.classes_, ["even", "odd"])
    np.testing.assert_array_equal(cc.predict(X_te), lr.predict(X_te))
    # column 1 is "odd": sigmoid(margin / T)
    t = cc.calibrator_.temperature_
    np.testing.assert_allclose(p[:, 1], 1 / (1 + np.exp(-lr.decision_function(X_te) / t)))
    np.testing.assert_array_equal(cc.encode(["odd", "even"]), [1, 0])
    assert ece(p, cc.encode(names[y_te % 2])) >= 0.0


def test_pickle_and_clone_round_trips(base: Any, digits: Split, frozen: None) -> None:
    _, _, X_cal, y_cal, X_te, _ = digits
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cc = CalibratedClassifier(base, HistogramBinning(mode="classwise")).fit(X_cal, y_cal)
        twin = clone(cc)
        assert twin.estimator is base and twin.get_params(deep=False).keys() == {
            "estimator",
            "calibrator",
            "response_method",
        }
        assert not hasattr(twin, "calibrator_")  # clone is unfitted
        twin.fit(X_cal, y_cal)
    np.testing.assert_array_equal(twin.predict_proba(X_te), cc.predict_proba(X_te))
    restored = pickle.loads(pickle.dumps(cc))
    np.testing.assert_array_equal(restored.predict_proba(X_te), cc.predict_proba(X_te))
    np.testing.assert_array_equal(restored.classes_, cc.classes_)
    assert repr(restored) == repr(cc)


def test_inside_a_pipeline(digits: Split) -> None:
    X_tr, y_tr, X_cal, y_cal, X_te, y_te = digits
    scaler = StandardScaler().fit(X_tr)
    lr = LogisticRegression(max_iter=2000).fit(scaler.transform(X_tr), y_tr)
    pipe = make_pipeline(FrozenEstimator(scaler), CalibratedClassifier(lr))
    pipe.fit(X_cal, y_cal)
    direct = CalibratedClassifier(lr).fit(scaler.transform(X_cal), y_cal)
    np.testing.assert_array_equal(
        pipe.predict_proba(X_te), direct.predict_proba(scaler.transform(X_te))
    )
    assert pipe.score(X_te, y_te) == lr.score(scaler.transform(X_te), y_te)


@pytest.fixture(scope="module")
def fitted_lr(digits: Split) -> Any:
    return _lr_pipeline(digits)


def test_grid_search(fitted_lr: Any, digits: Split, frozen: None) -> None:
    _, _, X_cal, y_cal, X_te, _ = digits
    before = pickle.dumps(fitted_lr)
    search = GridSearchCV(
        CalibratedClassifier(fitted_lr, HistogramBinning()),
        {"calibrator__n_bins": [5, 10, 20], "calibrator__mode": ["top", "classwise"]},
        scoring="neg_log_loss",
        cv=3,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # cross-fit diagnostics of small folds
        search.fit(X_cal, y_cal)
    assert len(search.cv_results_["params"]) == 6
    best = search.best_estimator_
    assert best.estimator is fitted_lr and pickle.dumps(fitted_lr) == before
    assert best.calibrator_.n_bins == search.best_params_["calibrator__n_bins"]
    assert best.predict_proba(X_te).shape == (X_te.shape[0], 10)
    # the calibrator itself can be a grid dimension
    search2 = GridSearchCV(
        CalibratedClassifier(fitted_lr),
        {"calibrator": [TemperatureScaling(), HistogramBinning()]},
        scoring="neg_log_loss",
        cv=2,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        search2.fit(X_cal, y_cal)
    assert type(search2.best_estimator_.calibrator_).__name__ in {
        "TemperatureScaling",
        "HistogramBinning",
    }


# the binning fits' sparse bins fall back to the input (NoiseDominatedWarning): not the subject
@pytest.mark.filterwarnings("ignore::privcal.private.NoiseDominatedWarning")
def test_private_form_carries_privacy_report(fitted_lr: Any, digits: Split, frozen: None) -> None:
    _, _, X_cal, y_cal, X_te, _ = digits
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NoiseDominatedWarning)  # secure noise: may or may not
        cc = CalibratedClassifier(fitted_lr, PrivateTemperatureScaling(epsilon=1.0))
        cc.fit(X_cal, y_cal)
    rep = cc.privacy_report_
    assert rep is cc.calibrator_.privacy_report_
    assert rep.epsilon == pytest.approx(1.0) and rep.noise == "secure" and rep.status == "private"
    np.testing.assert_array_equal(cc.predict(X_te), fitted_lr.predict(X_te))
    hb = CalibratedClassifier(fitted_lr, PrivateHistogramBinning(epsilon=2.0)).fit(X_cal, y_cal)
    assert hb.privacy_report_.epsilon == pytest.approx(2.0)
    restored = pickle.loads(pickle.dumps(hb))
    assert restored.privacy_report_.epsilon == pytest.approx(2.0)
    # an explicit SecureNoise() survives clone and pickle (a fresh secure source each time)
    explicit = CalibratedClassifier(fitted_lr, PrivateHistogramBinning(noise=SecureNoise()))
    explicit.fit(X_cal, y_cal)
    with pytest.warns(UnaccountedFitWarning):  # the twin refits the same rows, no ledger
        twin = pickle.loads(pickle.dumps(clone(explicit)))
    assert isinstance(twin.calibrator.noise, SecureNoise)
    assert twin.fit(X_cal, y_cal).privacy_report_.noise == "secure"
    # refitting with a non-private calibrator drops the stale report
    hb.set_params(calibrator=TemperatureScaling()).fit(X_cal, y_cal)
    assert not hasattr(hb, "privacy_report_")


def test_conformal_classifier(fitted_lr: Any, digits: Split, frozen: None) -> None:
    _, _, X_cal, y_cal, X_te, y_te = digits
    cc = ConformalClassifier(fitted_lr).fit(X_cal, y_cal)  # default: SplitConformal(alpha=0.1)
    assert isinstance(cc.method_, SplitConformal)
    sets = cc.predict_set(X_te)
    assert sets.dtype == bool and sets.shape == (X_te.shape[0], 10)
    # split conformal: P(cover) >= 0.9; 540 test rows, binomial SD 0.013: 0.85 is ~4 SD below
    assert coverage(sets, cc.encode(y_te)) >= 0.85
    np.testing.assert_array_equal(cc.predict(X_te), fitted_lr.predict(X_te))
    with pytest.raises(ValueError, match=r"'method__alpha'.*while 'method' is None"):
        clone(cc).set_params(method__alpha=0.01)
    wide = ConformalClassifier(fitted_lr, SplitConformal()).set_params(method__alpha=0.01)
    wide.fit(X_cal, y_cal)
    assert set_size(wide.predict_set(X_te)) >= set_size(sets)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pc = ConformalClassifier(fitted_lr, PrivateConformal(epsilon=1.0)).fit(X_cal, y_cal)
    assert pc.privacy_report_.relation == "substitute" and pc.privacy_report_.noise == "secure"
    assert pc.predict_set(X_te).shape == sets.shape
    restored = pickle.loads(pickle.dumps(cc))
    np.testing.assert_array_equal(restored.predict_set(X_te), sets)


def test_check_estimator_where_it_applies(digits: Split) -> None:
    """Every check_estimator check passes except the listed ones, which need a learnable base."""
    nb = _nb(digits)
    for wrapper in (CalibratedClassifier(nb), ConformalClassifier(nb)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            results = check_estimator(wrapper, on_fail=None)
        failed = {r["check_name"] for r in results if r["status"] == "failed"}
        passed = {r["check_name"] for r in results if r["status"] == "passed"}
        assert failed == set(NOT_APPLICABLE_CHECKS)
        assert {
            "check_estimator_cloneable",
            "check_no_attributes_set_in_init",
            "check_get_params_invariance",
            "check_set_params",
            "check_parameters_default_constructible",
            "check_estimators_unfitted",
            "check_estimator_repr",
        } <= passed


# -- bad input ------------------------------------------------------------------------------------
class _NoOutputs:
    classes_ = np.arange(3)

    def predict(self, X: Any) -> np.ndarray:
        return np.zeros(len(X), int)


def test_bad_input(fitted_lr: Any, digits: Split) -> None:
    X_tr, y_tr, X_cal, y_cal, X_te, _ = digits
    with pytest.raises(NotFittedError, match=r"'estimator' parameter of CalibratedClassifier.*not"):
        CalibratedClassifier(GaussianNB()).fit(X_cal, y_cal)
    with pytest.raises(NotFittedError, match="ConformalClassifier"):
        ConformalClassifier(make_pipeline(StandardScaler(), GaussianNB())).fit(X_cal, y_cal)
    with pytest.raises(ValueError, match=r"'estimator' parameter.*predict_proba or decision"):
        CalibratedClassifier(_NoOutputs()).fit(X_cal, y_cal)
    with pytest.raises(ValueError, match="expecting 64 features"):  # the base's own check
        CalibratedClassifier(fitted_lr).fit(X_cal[:, :10], y_cal)
    with pytest.raises(ValueError, match=r"'y' parameter.*100 labels but 'X' has"):
        CalibratedClassifier(fitted_lr).fit(X_cal, y_cal[:100])
    with pytest.raises(ValueError, match=r"'y' parameter of CalibratedClassifier.fit.*1-D"):
        CalibratedClassifier(fitted_lr).fit(X_cal, np.c_[y_cal, y_cal])
    with pytest.raises(ValueError, match=r"never saw \(10, 11\)"):
        unseen = np.where(y_cal == 3, 10, np.where(y_cal == 4, 11, y_cal))
        CalibratedClassifier(fitted_lr).fit(X_cal, unseen)
    with pytest.raises(ValueError, match="never saw"):
        CalibratedClassifier(fitted_lr).fit(X_cal, y_cal.astype(str))
    with pytest.raises(ValueError, match="continuous"):
        CalibratedClassifier(fitted_lr).fit(X_cal, y_cal + 0.5)
    with pytest.raises(ValueError, match="target y is None"):
        CalibratedClassifier(fitted_lr).fit(X_cal, None)
    with pytest.raises(ValueError, match=r"'calibrator' parameter.*ConformalClassifier"):
        CalibratedClassifier(fitted_lr, SplitConformal()).fit(X_cal, y_cal)
    with pytest.raises(ValueError, match="'calibrator' parameter of CalibratedClassifier"):
        CalibratedClassifier(fitted_lr, "temperature").fit(X_cal, y_cal)
    with pytest.raises(ValueError, match="'method' parameter of ConformalClassifier"):
        ConformalClassifier(fitted_lr, TemperatureScaling()).fit(X_cal, y_cal)
    with pytest.raises(ValueError, match=r"'response_method' parameter.*one of"):
        CalibratedClassifier(fitted_lr, response_method="proba").fit(X_cal, y_cal)
    with pytest.raises(ValueError, match=r"'response_method'.*has none called"):
        CalibratedClassifier(_nb(digits), response_method="decision_function").fit(X_cal, y_cal)
    with pytest.raises(ValueError, match=r"'estimator__C' parameter.*frozen"):
        CalibratedClassifier(fitted_lr).set_params(estimator__C=2.0)
    with pytest.raises(NotFittedError):
        CalibratedClassifier(fitted_lr).predict_proba(X_te)
    with pytest.raises(NotFittedError):
        ConformalClassifier(fitted_lr).predict_set(X_te)
    ovo = SVC(decision_function_shape="ovo").fit(X_tr[:400], y_tr[:400])
    with pytest.raises(ValueError, match=r"45 columns.*10 classes.*'predict_proba'"):
        CalibratedClassifier(ovo).fit(X_cal, y_cal)
    cc = CalibratedClassifier(fitted_lr).fit(X_cal, y_cal)
    with pytest.raises(ValueError, match="expecting 64 features"):
        cc.predict_proba(X_te[:, :5])
    with pytest.raises(ValueError, match=r"'y' parameter of CalibratedClassifier.encode"):
        cc.encode([42])

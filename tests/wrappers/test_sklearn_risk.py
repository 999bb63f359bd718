"""RiskControlClassifier: conformal risk control through the scikit-learn way in."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import make_classification, make_multilabel_classification
from sklearn.linear_model import LogisticRegression
from sklearn.multiclass import OneVsRestClassifier
from sklearn.multioutput import MultiOutputClassifier

from privcal.conformal import PrivateRiskControl, RiskControl, SplitConformal
from privcal.privacy import SeededNoise
from privcal.sklearn import RiskControlClassifier

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def multilabel() -> tuple[np.ndarray, np.ndarray]:
    X, Y = make_multilabel_classification(12000, n_classes=6, n_labels=2, random_state=0)
    return X, Y.astype(bool)


@pytest.fixture(scope="module")
def ovr(multilabel: tuple[np.ndarray, np.ndarray]) -> Any:
    X, Y = multilabel
    return OneVsRestClassifier(LogisticRegression(max_iter=1000)).fit(X[:2000], Y[:2000])


def _fnr(sets: np.ndarray, Y: np.ndarray) -> np.ndarray:
    return (Y & ~sets).sum(axis=1) / np.maximum(Y.sum(axis=1), 1)


def test_fnr_sets_are_risk_controls_on_the_base_probabilities(
    ovr: Any, multilabel: tuple[np.ndarray, np.ndarray]
) -> None:
    X, Y = multilabel
    rc = RiskControlClassifier(ovr, RiskControl("fnr", alpha=0.1)).fit(X[2000:4000], Y[2000:4000])
    direct = RiskControl("fnr", alpha=0.1).fit(ovr.predict_proba(X[2000:4000]), Y[2000:4000])
    assert rc.method_.lambda_ == direct.lambda_
    sets = rc.predict_set(X[4000:])
    np.testing.assert_array_equal(sets, direct.predict_set(ovr.predict_proba(X[4000:])))
    # held-out FNR at most alpha within 3 SE of the 8000 test rows' mean
    fnr = _fnr(sets, Y[4000:])
    assert fnr.mean() <= 0.1 + 3 * fnr.std(ddof=1) / np.sqrt(fnr.size)
    restored = pickle.loads(pickle.dumps(rc))
    np.testing.assert_array_equal(restored.predict_set(X[4000:4100]), sets[:100])


def test_a_per_label_list_of_probabilities_is_read_as_the_present_column(
    multilabel: tuple[np.ndarray, np.ndarray],
) -> None:
    X, Y = multilabel
    mo = MultiOutputClassifier(LogisticRegression(max_iter=1000)).fit(X[:2000], Y[:2000])
    stacked = np.column_stack([p[:, 1] for p in mo.predict_proba(X[2000:4000])])
    rc = RiskControlClassifier(mo).fit(X[2000:4000], Y[2000:4000])  # default RiskControl()
    assert rc.method_.lambda_ == RiskControl().fit(stacked, Y[2000:4000]).lambda_
    assert rc.predict_set(X[4000:4010]).shape == (10, 6)


def test_miscoverage_encodes_the_base_classes() -> None:
    X, y = make_classification(4000, n_classes=3, n_informative=4, random_state=1)
    names = np.array(["a", "b", "c"])[y]
    base = LogisticRegression(max_iter=500).fit(X[:1000], names[:1000])
    rc = RiskControlClassifier(base, RiskControl("miscoverage", alpha=0.1))
    rc.fit(X[1000:3000], names[1000:3000])
    np.testing.assert_array_equal(rc.classes_, ["a", "b", "c"])
    direct = RiskControl("miscoverage", alpha=0.1)
    direct.fit(base.predict_proba(X[1000:3000]), y[1000:3000])
    assert rc.method_.lambda_ == direct.lambda_
    sets = rc.predict_set(X[3000:])
    hit = sets[np.arange(1000), y[3000:]]
    assert 1 - hit.mean() <= 0.1 + 3 * np.sqrt(0.1 * 0.9 / 1000)


@pytest.mark.filterwarnings("ignore::privcal.privacy.InsecureNoiseWarning")
def test_private_method_carries_its_privacy_report(
    ovr: Any, multilabel: tuple[np.ndarray, np.ndarray]
) -> None:
    X, Y = multilabel
    method = PrivateRiskControl("fnr", alpha=0.1, epsilon=1.0, noise=SeededNoise(0))
    rc = RiskControlClassifier(ovr, method).fit(X[2000:7000], Y[2000:7000])
    assert rc.privacy_report_ is rc.method_.privacy_report_
    assert rc.privacy_report_.epsilon == 1.0
    assert not hasattr(method, "lambda_")  # the template is cloned, never fitted


def test_clone_keeps_the_frozen_base(ovr: Any) -> None:
    rc = RiskControlClassifier(ovr)
    assert clone(rc).estimator is ovr
    with pytest.raises(ValueError, match="base estimator is fitted and frozen"):
        rc.set_params(estimator__n_jobs=2)
    with pytest.raises(ValueError, match="while 'method' is None"):
        rc.set_params(method__alpha=0.2)


def test_bad_input(ovr: Any, multilabel: tuple[np.ndarray, np.ndarray]) -> None:
    X, Y = multilabel
    with pytest.raises(ValueError, match="'method' parameter of RiskControlClassifier"):
        RiskControlClassifier(ovr, SplitConformal()).fit(X[:100], Y[:100])
    with pytest.raises(ValueError, match="shape"):
        RiskControlClassifier(ovr).fit(X[:2000], Y[:2000, :3])
    constant = Y[:2000].copy()
    constant[:, 2] = False
    mo = MultiOutputClassifier(_OneValue()).fit(X[:2000], constant)
    with pytest.raises(ValueError, match="label 0 does not have two columns"):
        RiskControlClassifier(mo).fit(X[:2000], Y[:2000])


class _OneValue(LogisticRegression):
    """A per-label classifier that saw one value: predict_proba has one column."""

    def fit(self, X: Any, y: Any) -> _OneValue:
        self.classes_ = np.array([False])
        return self

    def predict_proba(self, X: Any) -> np.ndarray:
        return np.ones((len(X), 1))

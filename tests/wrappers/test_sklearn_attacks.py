"""An analyst with scikit-learn's machinery against the private estimators and the wrappers.

The analyst controls the arguments (clone, set_params, refits, model selection) but not the
data. Every path must either state what it released in ``privacy_report_`` / the ledger, or say
that it cannot (a warning or a refusal); no fitted attribute may release more than the report.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression

from privcal.conformal import PrivateRiskControl
from privcal.data.synthetic import multilabel
from privcal.report.summaries import risk_summary_data
from privcal.sklearn import RiskControlClassifier


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

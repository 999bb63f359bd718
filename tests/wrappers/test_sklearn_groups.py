"""ConformalClassifier with groups (Mondrian sets through the scikit-learn way in)."""

from __future__ import annotations

import pytest
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression

from privcal.conformal import PrivateConformal, SplitConformal
from privcal.privacy import SeededNoise
from privcal.sklearn import ConformalClassifier


@pytest.mark.filterwarnings("ignore::privcal.privacy.InsecureNoiseWarning")
@pytest.mark.parametrize("method", [SplitConformal(), PrivateConformal(noise=SeededNoise(0))])
def test_conformal_classifier_passes_groups_through(method: object) -> None:
    X, y = make_classification(6000, n_classes=3, n_informative=4, random_state=0)
    base = LogisticRegression(max_iter=500).fit(X[:2000], y[:2000])
    g = (X[:, 0] > 0).astype(int)
    cc = ConformalClassifier(base, method=method).fit(X[2000:5000], y[2000:5000], g[2000:5000])
    assert set(cc.method_.thresholds_) == {0, 1}
    sets = cc.predict_set(X[5000:], groups=g[5000:])
    assert sets.shape == (1000, 3)
    with pytest.raises(ValueError, match="needs groups"):
        cc.predict_set(X[5000:])

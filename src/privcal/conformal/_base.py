"""What :class:`SplitConformal` and :class:`PrivateConformal` share: inputs, scores, sets."""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, clone

from privcal._params import (
    PROBABILITY,
    Constraints,
    Options,
    ValidatedParams,
    renamed_attribute,
    renamed_params,
)
from privcal.conformal.groups import test_groups
from privcal.conformal.scores import SCORES, conformity
from privcal.data.validation import check_labels, check_scores
from privcal.exceptions import PrivcalWarning
from privcal.metrics.statistics import softmax

__all__ = ["ConformalBase", "FullSetWarning", "NotFittedError"]


class FullSetWarning(PrivcalWarning):
    """The calibration set is too small for the requested level: every set is the full set."""


class NotFittedError(RuntimeError):
    """``predict_set`` was called before ``fit``."""


class ConformalBase(ValidatedParams, BaseEstimator):
    """Shared machinery (not public): probabilities, score matrices and ``predict_set``.

    A scikit-learn ``BaseEstimator`` (parameters stored verbatim in ``__init__``), so
    ``get_params`` / ``set_params`` / ``clone`` work and
    :class:`privcal.sklearn.ConformalClassifier` can search over ``method__alpha``.

    Deprecated parameter names (``__init__.__renamed__``, from :func:`privcal._params.renamed`)
    still work for one release in ``__init__``, ``set_params`` and as attributes
    (:class:`~privcal._params.renamed_attribute`), with a ``DeprecationWarning`` naming the new
    one.
    """

    _owner = "ConformalBase"
    _parameter_constraints = Constraints(score=Options(*SCORES), alpha=PROBABILITY)
    random_state = renamed_attribute("seed")
    score: str
    calibrator: Any
    seed: int | None
    threshold_: float
    thresholds_: dict[Any, float] | None
    n_classes_: int

    def __sklearn_clone__(self) -> Any:
        """An unfitted copy that keeps the **same** ``calibrator``: it was fitted on other data
        before calibration (a clone of it would be unfitted), as ``FrozenEstimator`` keeps one."""
        params = self.get_params(deep=False)
        kept = {k: v if k == "calibrator" else clone(v, safe=False) for k, v in params.items()}
        return type(self)(**kept)

    def set_params(self, **params: Any) -> Any:
        """scikit-learn's ``set_params``; a deprecated name warns and sets the new one."""
        renames = getattr(type(self).__init__, "__renamed__", {})
        return super().set_params(**renamed_params(params, renames, self._owner))

    def _probs(self, logits: Any, input: str, name: str) -> np.ndarray:
        z = check_scores(logits, input=input, name=name)  # type: ignore[arg-type]
        if self.calibrator is None:
            return softmax(z)
        if not hasattr(self.calibrator, "predict_proba"):
            raise ValueError(
                f"The 'calibrator' parameter of {self._owner} must be a fitted calibrator with "
                f"predict_proba, or None. Got {self.calibrator!r} instead."
            )
        return np.asarray(self.calibrator.predict_proba(z), dtype=np.float64)

    def _u(self, n: int) -> np.ndarray | None:
        if self.score != "aps-randomized":
            return None
        return self._rng_.random(n)

    def _calibration_scores(self, logits: Any, labels: Any, input: str) -> np.ndarray:
        """``S(x_i, y_i)`` for the calibration set (validated inputs)."""
        p = self._probs(logits, input, "logits")
        y = check_labels(labels, p.shape[0], p.shape[1])
        self.n_classes_ = int(p.shape[1])
        self._rng_ = np.random.default_rng(self.seed)
        s = conformity(self.score, p, self._u(p.shape[0]))
        return np.asarray(s[np.arange(p.shape[0]), y])

    def score_matrix(self, logits: Any, input: str = "logits") -> np.ndarray:
        """Scores ``S(x, y)`` of every label (``N x C``); randomised APS draws fresh ``u``."""
        if not hasattr(self, "threshold_"):
            raise NotFittedError(f"This {self._owner} is not fitted yet: call fit first.")
        p = self._probs(logits, input, "logits")
        if p.shape[1] != self.n_classes_:
            raise ValueError(
                f"'logits' has {p.shape[1]} classes but {self._owner} was fitted with "
                f"{self.n_classes_}."
            )
        return conformity(self.score, p, self._u(p.shape[0]))

    def predict_set(self, logits: Any, input: str = "logits", groups: Any = None) -> np.ndarray:
        """Prediction sets ``{y : S(x, y) <= threshold_}`` as a boolean ``N x C`` matrix.

        Parameters
        ----------
        logits : array_like of shape (N, C)
            Test outputs (logits, or probabilities with ``input="probs"``).
        input : {"logits", "probs"}, default="logits"
        groups : array_like of shape (N,), optional
            Each test row's group, whose threshold (``thresholds_``) makes its set; needed
            exactly when the fit had groups (a fit over sources by predicted class finds them).

        Returns
        -------
        ndarray of bool, shape (N, C)
            Row ``i`` marks the labels in the set of example ``i``.
        """
        scores = self.score_matrix(logits, input)
        known = getattr(self, "thresholds_", None)
        if groups is None and getattr(self, "group_by_", None) == "predicted":
            groups = self._probs(logits, input, "logits").argmax(1)
        if known is None:
            if groups is not None:
                raise ValueError(
                    f"{self._owner}.predict_set got groups, but the fit had none: fit with "
                    "groups=... for one threshold per group."
                )
            return scores <= self.threshold_
        if groups is None:
            raise ValueError(
                f"{self._owner} was fitted per group: predict_set needs groups=... (one label "
                "a row)."
            )
        labels = test_groups(groups, scores.shape[0], known, self._owner)
        return scores <= np.array([known[g] for g in labels])[:, None]

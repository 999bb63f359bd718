"""scikit-learn way in: calibrate, conformalise or risk-control an already fitted classifier.

:class:`CalibratedClassifier` and :class:`ConformalClassifier` wrap a **fitted** scikit-learn
classifier (or any object with ``predict_proba`` or ``decision_function``), leave it frozen, and
fit a privcal calibrator or conformal method on its outputs for a calibration set: ``fit(X_cal,
y_cal)``, then ``predict_proba(X)`` / ``predict(X)`` / ``predict_set(X)``;
:class:`RiskControlClassifier` does the same for conformal risk control on ``predict_proba``
(multilabel sets at a false-negative rate, or multiclass miscoverage). They follow
scikit-learn's developer conventions, so they work inside a ``Pipeline`` and a ``GridSearchCV``
over ``calibrator__...`` (or ``method__...``) parameters.

* *Logits* (``response_method="auto"``, the first the estimator has; ``response_method_`` says
  which): ``decision_function`` margins as they are (a binary ``(n,)`` margin ``m`` becomes
  ``[0, m]``, so :math:`\\sigma(m)` is the probability of ``classes_[1]``); else
  ``predict_log_proba`` (a row holding ``-inf`` is read from ``predict_proba``, that row
  only); else ``log`` of ``predict_proba`` (:func:`privcal.data.validation.check_scores`: an
  exact zero warns).
* *Labels*: the base's ``classes_`` (``0, ..., C-1`` when it has none) map to ``0, ..., C-1`` and
  back; a calibration label the base never saw raises a ``ValueError`` naming it.
* *Frozen base*: ``fit`` never calls the base's ``fit``; ``clone`` keeps the same fitted base
  (as ``FrozenEstimator`` does); ``set_params(estimator__...)`` is refused.
* ``check_estimator``: the checks that cannot apply to a frozen, prefitted base are
  :data:`NOT_APPLICABLE_CHECKS`, each with its reason; the others pass.

Details: docs/integrations.md (scikit-learn).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, MetaEstimatorMixin, clone
from sklearn.exceptions import NotFittedError
from sklearn.utils.multiclass import type_of_target
from sklearn.utils.validation import check_is_fitted

from privcal._params import check_option
from privcal.calibrators import TemperatureScaling
from privcal.calibrators.base import store_params
from privcal.conformal import RiskControl, SplitConformal
from privcal.conformal.risk import get_loss
from privcal.data.validation import check_scores
from privcal.metrics.statistics import softmax
from privcal.privacy.odometer import UnaccountedFitWarning, warn_unaccounted

__all__ = [
    "NOT_APPLICABLE_CHECKS",
    "RESPONSE_METHODS",
    "CalibratedClassifier",
    "ConformalClassifier",
    "RiskControlClassifier",
]

#: Values of ``response_method``: ``"auto"`` tries the others in this order.
RESPONSE_METHODS = ("auto", "decision_function", "predict_log_proba", "predict_proba")

_DATA = (
    "fits or predicts on check_estimator's own random data (1 to 10 features, its own labels), "
    "which a frozen base estimator trained on other features cannot score"
)

#: scikit-learn ``check_estimator`` checks that do not apply to a wrapper of a frozen, prefitted
#: estimator, with the reason (see the module docstring). Every other check applies and passes.
NOT_APPLICABLE_CHECKS: dict[str, str] = {
    "check_classifier_data_not_an_array": _DATA,
    "check_classifiers_classes": _DATA,
    "check_classifiers_one_label": _DATA,
    "check_classifiers_train": _DATA,
    "check_dict_unchanged": _DATA,
    "check_dont_overwrite_parameters": _DATA,
    "check_dtype_object": _DATA,
    "check_estimators_dtypes": _DATA,
    "check_estimators_fit_returns_self": _DATA,
    "check_estimators_nan_inf": _DATA,
    "check_estimators_overwrite_params": _DATA,
    "check_estimators_pickle": _DATA,
    "check_f_contiguous_array_estimator": _DATA,
    "check_fit2d_1feature": _DATA,
    "check_fit2d_1sample": _DATA,
    "check_fit2d_predict1d": _DATA,
    "check_fit_check_is_fitted": _DATA,
    "check_fit_idempotent": _DATA,
    "check_fit_score_takes_y": _DATA,
    "check_methods_sample_order_invariance": _DATA,
    "check_methods_subset_invariance": _DATA,
    "check_n_features_in": _DATA,
    "check_n_features_in_after_fitting": _DATA,
    "check_pipeline_consistency": _DATA,
    "check_positive_only_tag_during_fit": _DATA,
    "check_readonly_memmap_input": _DATA,
    "check_supervised_y_2d": _DATA,
}


def _fail(owner: str, name: str, allowed: str, got: Any) -> ValueError:
    shown = repr(got)
    shown = shown if len(shown) <= 120 else shown[:117] + "..."
    return ValueError(f"The {name!r} parameter of {owner} must be {allowed}. Got {shown} instead.")


def _check_base(estimator: Any, owner: str) -> None:
    """The base estimator has an output method and is fitted; raise naming 'estimator' if not."""
    if not any(callable(getattr(estimator, m, None)) for m in RESPONSE_METHODS[1:]):
        raise _fail(
            owner,
            "estimator",
            "an already fitted classifier with predict_proba or decision_function",
            estimator,
        )
    try:
        check_is_fitted(estimator)
    except NotFittedError:
        raise NotFittedError(
            f"The 'estimator' parameter of {owner} must be an already fitted classifier; this "
            f"{type(estimator).__name__} is not fitted. Fit it on training data first: {owner} "
            f"never fits it, it calibrates the fitted model's outputs on a calibration set."
        ) from None
    except TypeError:  # not a scikit-learn estimator (no fit method): nothing to check
        pass


def _response_method(estimator: Any, requested: Any, owner: str) -> str:
    """The method that gives the logits: ``requested``, or the first available for ``"auto"``."""
    check_option(requested, "response_method", owner, RESPONSE_METHODS)
    if requested != "auto":
        if not callable(getattr(estimator, requested, None)):
            raise _fail(
                owner,
                "response_method",
                f"a method the estimator has (a {type(estimator).__name__} has none called "
                f"{requested!r}); use 'auto'",
                requested,
            )
        return str(requested)
    # _check_base ran first: the estimator has one of them
    return next(m for m in RESPONSE_METHODS[1:] if callable(getattr(estimator, m, None)))


def _logits(estimator: Any, method: str, X: Any, owner: str) -> np.ndarray:
    """The base estimator's outputs on ``X`` as float ``N x C`` logits (see module docstring)."""
    name = f"{owner}: estimator.{method}(X)"
    if method == "predict_log_proba":
        with np.errstate(divide="ignore"):  # log(0) inside estimators that log predict_proba
            out = np.asarray(estimator.predict_log_proba(X))
        bad = np.isneginf(out).any(axis=-1)
        if not bad.any():
            return check_scores(out, input="logits", name=name)
        # only the rows holding -inf are read from predict_proba: a row's logits never depend
        # on whether another row has -inf (the calibration rows enter one row each)
        probs = np.asarray(estimator.predict_proba(X))[bad]
        out = np.array(out, dtype=np.float64)
        out[bad] = check_scores(probs, input="probs", name=f"{owner}: estimator.predict_proba(X)")
        return check_scores(out, input="logits", name=name)
    if method == "predict_proba":
        return check_scores(estimator.predict_proba(X), input="probs", name=name)
    return check_scores(estimator.decision_function(X), input="logits", name=name)


def _encode(classes: np.ndarray, y: Any, owner: str, where: str = "fit") -> np.ndarray:
    """Indices of ``y`` in ``classes``; a label not in ``classes`` raises naming it."""
    arr = np.asarray(y)
    if arr.ndim == 2 and 1 in arr.shape:
        arr = arr.reshape(-1)
    if arr.ndim != 1:
        raise _fail(
            f"{owner}.{where}", "y", "a 1-D array of class labels", f"an array of shape {arr.shape}"
        )
    try:
        sorter = np.argsort(classes, kind="stable")
        pos = np.clip(np.searchsorted(classes, arr, sorter=sorter), 0, classes.size - 1)
        idx = sorter[pos]
        known = np.asarray(classes[idx] == arr, dtype=bool)
    except TypeError:  # labels not comparable with the classes (e.g. str against int)
        idx, known = np.zeros(arr.size, np.int64), np.zeros(arr.size, bool)
    if not known.all():
        unseen = list(dict.fromkeys(arr[~known].tolist()))
        shown = ", ".join(repr(u) for u in unseen[:5]) + (", ..." if len(unseen) > 5 else "")
        raise ValueError(
            f"The 'y' parameter of {owner}.{where} must hold labels the fitted estimator knows "
            f"(its classes_: {_short(classes)}). Got {int((~known).sum())} rows with labels it "
            f"never saw ({shown}) instead. Calibrate on data whose labels the estimator was "
            f"trained on, or retrain the estimator with every class."
        )
    return idx.astype(np.int64)


def _fit_template(wrapper: Any, template: Any) -> Any:
    """A clone of ``template`` for one fit of ``wrapper``: that fit is one release, but a
    wrapper fitted before with a private template and no ledger warns
    (:func:`~privcal.privacy.odometer.warn_unaccounted`)."""
    if hasattr(wrapper, "privacy_report_"):
        warn_unaccounted(template, f"is fitted again by {wrapper._owner}.fit", stacklevel=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnaccountedFitWarning)
        return clone(template, safe=False)


def _short(values: np.ndarray) -> str:
    items = values.tolist()
    if len(items) <= 8:
        return repr(items)
    return "[" + ", ".join(repr(v) for v in items[:4]) + ", ..., " + repr(items[-1]) + "]"


class _Frozen(MetaEstimatorMixin, BaseEstimator):
    """What every wrapper shares: a frozen, fitted base that clones keep and ``set_params``
    refuses to reach into."""

    _owner: ClassVar[str] = "_Frozen"
    #: What a parameter left at None stands for (named in error messages).
    _defaults: ClassVar[dict[str, str]] = {}
    estimator: Any

    def __sklearn_clone__(self) -> Any:
        """A new unfitted wrapper with the **same** fitted base and clones of the rest."""
        params = self.get_params(deep=False)
        kept = {k: v if k == "estimator" else clone(v, safe=False) for k, v in params.items()}
        return type(self)(**kept)

    def set_params(self, **params: Any) -> Any:
        """Set parameters; ``estimator__...`` is refused (the base estimator is frozen)."""
        nested = sorted(k for k in params if k.startswith("estimator__"))
        if nested:
            raise ValueError(
                f"The {nested[0]!r} parameter of {self._owner} cannot be set: the base estimator "
                f"is fitted and frozen, and is shared by every clone of the wrapper. Set its "
                f"parameters and fit it before wrapping it, or pass another fitted estimator as "
                f"'estimator'."
            )
        for key in sorted(params):
            head, _, _ = key.partition("__")
            if key != head and getattr(self, head, None) is None and head not in params:
                raise ValueError(
                    f"The {key!r} parameter of {self._owner} cannot be set while {head!r} is "
                    f"None (its default, {self._defaults[head]}). Pass {head}="
                    f"{self._defaults[head]} (or another) first, e.g. "
                    f"set_params({head}={self._defaults[head]})."
                )
        return super().set_params(**params)

    def _adopt_features(self) -> None:
        """The base estimator's ``n_features_in_`` / ``feature_names_in_``, when it has them."""
        for attr in ("n_features_in_", "feature_names_in_"):
            if hasattr(self.estimator, attr):
                setattr(self, attr, getattr(self.estimator, attr))

    def _adopt_report(self, fitted: Any) -> None:
        """``fitted``'s privacy report, if any, becomes the wrapper's (an earlier one goes),
        stating the base estimator it treats as public."""
        self.__dict__.pop("privacy_report_", None)
        report = getattr(fitted, "privacy_report_", None)
        if report is not None:
            method = getattr(self, "response_method_", "predict_proba")
            report.public = (
                *report.public,
                f"the base estimator ({type(self.estimator).__name__}, fitted before "
                f"calibration; its training data is not protected here) and its {method}",
            )
            self.privacy_report_ = report


class _FrozenBaseMeta(ClassifierMixin, _Frozen):
    """What the classifier wrappers share: the base's logits and the encoded labels."""

    response_method: Any
    predict_proba: Callable[[Any], np.ndarray]

    def _prepare(self, X: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
        """Check the base, pick the response method, read logits and encoded labels of ``X, y``."""
        if y is None:
            raise ValueError(
                f"{self._owner} requires y to be passed, but the target y is None: fit takes the "
                f"calibration inputs X and their labels y."
            )
        if type_of_target(y) == "continuous":
            raise _fail(
                f"{self._owner}.fit",
                "y",
                "class labels (values of the estimator's classes_)",
                "a continuous target",
            )
        _check_base(self.estimator, self._owner)
        method = _response_method(self.estimator, self.response_method, self._owner)
        z = _logits(self.estimator, method, X, self._owner)
        classes = getattr(self.estimator, "classes_", None)
        classes = np.arange(z.shape[1]) if classes is None else np.asarray(classes)
        if classes.ndim != 1 or classes.size < 2:
            raise _fail(
                self._owner,
                "estimator",
                "a classifier of at least two classes (classes_ a 1-D array)",
                classes,
            )
        self._check_columns(z, classes.size, method)
        y_enc = _encode(classes, y, self._owner)
        if y_enc.size != z.shape[0]:
            raise ValueError(
                f"The 'y' parameter of {self._owner}.fit has {y_enc.size} labels but 'X' has "
                f"{z.shape[0]} rows; they must match."
            )
        self.classes_ = classes
        self.response_method_ = method
        self._adopt_features()
        return z, y_enc

    def _check_columns(self, z: np.ndarray, n_classes: int, method: str) -> None:
        if z.shape[1] != n_classes:
            raise ValueError(
                f"The base estimator's {method} has {z.shape[1]} columns but the estimator has "
                f"{n_classes} classes (classes_); {self._owner} needs one column per class. For "
                f"a one-vs-one decision_function pass response_method='predict_proba'."
            )

    def _test_logits(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        z = _logits(self.estimator, self.response_method_, X, self._owner)
        self._check_columns(z, self.classes_.size, self.response_method_)
        return z

    def predict(self, X: Any) -> np.ndarray:
        """The class of highest (calibrated) probability (values of ``classes_``)."""
        proba = self.predict_proba(X)  # first: NotFittedError before classes_ is read
        return np.asarray(self.classes_[np.argmax(proba, axis=1)])

    def encode(self, y: Any) -> np.ndarray:
        """Column indices ``0..C-1`` of the labels ``y`` (values of ``classes_``)."""
        check_is_fitted(self)
        return _encode(self.classes_, y, self._owner, "encode")

    def _fit_clone(self, template: Any, default: type, X: Any, y: Any, **fit_params: Any) -> Any:
        """A clone of ``template`` (``default()`` for None) fitted on the logits of ``X`` and the
        labels ``y`` (and ``fit_params``); its privacy report, if any, becomes the wrapper's."""
        z, y_enc = self._prepare(X, y)
        fitted = default() if template is None else _fit_template(self, template)
        fitted.fit(z, y_enc, **fit_params)
        self._adopt_report(fitted)
        return fitted


class CalibratedClassifier(_FrozenBaseMeta):
    """A fitted classifier whose probabilities a privcal calibrator recalibrates.

    ``fit(X_cal, y_cal)`` reads the base estimator's logits on the calibration set (module
    docstring: ``decision_function``, ``predict_log_proba`` or ``log(predict_proba)``) and fits a
    clone of ``calibrator`` on them; ``predict_proba(X)`` is
    ``calibrator_.predict_proba(logits(X))``. The base estimator is never fitted or modified.

    Parameters
    ----------
    estimator : fitted classifier
        Any object with ``predict_proba`` or ``decision_function``, already fitted (a
        scikit-learn classifier or ``Pipeline``, or any model exposing those methods). Kept by
        reference and frozen.
    calibrator : privcal calibrator or None, default=None
        Any calibrator of :mod:`privcal.calibrators` (``TemperatureScaling``, ``VectorScaling``,
        ``MatrixScaling``, ``PlattScaling``, ``HistogramBinning``, ``BBQ``,
        ``IsotonicCalibration``) or a private one fitted on arrays
        (:class:`~privcal.private.PrivateTemperatureScaling`,
        :class:`~privcal.private.PrivateHistogramBinning`); in general any object with
        ``fit(logits, labels)`` and ``predict_proba(logits)``. ``None`` means
        ``TemperatureScaling()`` (NLL objective), which never changes a prediction.
    response_method : {"auto", "decision_function", "predict_log_proba", "predict_proba"},
        default="auto"
        Which output of the base estimator gives the logits (module docstring).

    Attributes
    ----------
    calibrator_ : calibrator
        The fitted clone of ``calibrator``.
    classes_ : ndarray of shape (C,)
        The base estimator's classes; column ``j`` of ``predict_proba`` is ``classes_[j]``.
    response_method_ : str
        The base estimator's method that was used.
    privacy_report_ : PrivacyReport
        Only with a private calibrator: its report (every release, the guarantee, what is
        public). Fitting on arrays puts them in one private data source whose budget is the
        calibrator's ``epsilon``; its noise is ``SecureNoise()`` unless the calibrator says
        otherwise.
    n_features_in_, feature_names_in_
        The base estimator's, when it has them.

    Privacy
    -------
    With a private calibrator the guarantee is the calibrator's, for the calibration set
    ``(X_cal, y_cal)``: each calibration row enters only through its logits and label, one row
    per example, so the neighbouring relation (add/remove one calibration example) carries
    over. The base estimator and its training data are public to this release (they are fixed
    before calibration); nothing here protects the training data.

    Examples
    --------
    >>> from sklearn.datasets import load_digits
    >>> from sklearn.linear_model import LogisticRegression
    >>> from sklearn.pipeline import make_pipeline
    >>> from sklearn.preprocessing import StandardScaler
    >>> from privcal.calibrators import TemperatureScaling
    >>> X, y = load_digits(return_X_y=True)
    >>> model = make_pipeline(StandardScaler(), LogisticRegression()).fit(X[:800], y[:800])
    >>> cc = CalibratedClassifier(model, TemperatureScaling()).fit(X[800:1300], y[800:1300])
    >>> cc.predict_proba(X[1300:]).shape, cc.response_method_
    ((497, 10), 'decision_function')
    >>> bool((cc.predict(X[1300:]) == model.predict(X[1300:])).all())  # T keeps predictions
    True
    """

    _owner: ClassVar[str] = "CalibratedClassifier"
    _defaults: ClassVar[dict[str, str]] = {"calibrator": "TemperatureScaling()"}

    def __init__(
        self, estimator: Any, calibrator: Any = None, response_method: str = "auto"
    ) -> None:
        store_params(self, locals())

    def fit(self, X: Any, y: Any) -> CalibratedClassifier:
        """Fit the calibrator on the base estimator's logits for ``X`` and the labels ``y``.

        Parameters
        ----------
        X : array-like
            Calibration inputs, in whatever form the base estimator takes.
        y : array-like of shape (n_samples,)
            Their labels, values of the base estimator's ``classes_``.
        """
        cal = self.calibrator
        if cal is not None and (
            not callable(getattr(cal, "fit", None))
            or not callable(getattr(cal, "predict_proba", None))
            or callable(getattr(cal, "predict_set", None))
        ):
            hint = (
                " (for prediction sets use ConformalClassifier)"
                if hasattr(cal, "predict_set")
                else ""
            )
            raise _fail(
                self._owner,
                "calibrator",
                f"a privcal calibrator with fit(logits, labels) and predict_proba(logits), or "
                f"None{hint}",
                cal,
            )
        self.calibrator_ = self._fit_clone(cal, TemperatureScaling, X, y)
        return self

    def predict_proba(self, X: Any) -> np.ndarray:
        """Calibrated probabilities, ``N x C`` (columns in the order of ``classes_``)."""
        z = self._test_logits(X)  # first: raises NotFittedError before calibrator_ is read
        return np.asarray(self.calibrator_.predict_proba(z))


class ConformalClassifier(_FrozenBaseMeta):
    """A fitted classifier with conformal prediction sets from privcal.

    ``fit(X_cal, y_cal)`` fits a clone of ``method`` on the base estimator's logits for the
    calibration set; ``predict_set(X)`` returns the sets as a boolean ``N x C`` matrix (column
    ``j`` is ``classes_[j]``) that contain the true label with probability at least
    ``1 - alpha`` (for exchangeable data; the method's own guarantee).

    Parameters
    ----------
    estimator : fitted classifier
        As in :class:`CalibratedClassifier`.
    method : conformal method or None, default=None
        :class:`~privcal.conformal.SplitConformal` or :class:`~privcal.conformal.PrivateConformal`
        (any object with ``fit(logits, labels)`` and ``predict_set(logits)``). ``None`` means
        ``SplitConformal()`` (LAC score, ``alpha=0.1``).
    response_method : {"auto", "decision_function", "predict_log_proba", "predict_proba"},
        default="auto"
        As in :class:`CalibratedClassifier`.

    Attributes
    ----------
    method_ : conformal method
        The fitted clone of ``method``.
    classes_ : ndarray of shape (C,)
    response_method_ : str
    privacy_report_ : PrivacyReport
        Only with a private method (:class:`~privcal.conformal.PrivateConformal`): its report.
    n_features_in_, feature_names_in_
        The base estimator's, when it has them.

    Notes
    -----
    ``predict_proba`` / ``predict`` use the probabilities the conformal score uses (the method's
    ``calibrator`` if it has one, else ``softmax`` of the logits); ``score`` is scikit-learn's
    accuracy. To compare sets, use :func:`privcal.metrics.coverage` and
    :func:`privcal.metrics.set_size` on ``predict_set`` with :meth:`encode` of the labels.

    Examples
    --------
    >>> from sklearn.datasets import load_digits
    >>> from sklearn.naive_bayes import GaussianNB
    >>> from privcal.conformal import SplitConformal
    >>> from privcal.metrics import coverage
    >>> X, y = load_digits(return_X_y=True)
    >>> nb = GaussianNB().fit(X[:800], y[:800])
    >>> cc = ConformalClassifier(nb, SplitConformal(alpha=0.1)).fit(X[800:1300], y[800:1300])
    >>> sets = cc.predict_set(X[1300:])
    >>> sets.shape, coverage(sets, cc.encode(y[1300:])) >= 0.85
    ((497, 10), True)
    """

    _owner: ClassVar[str] = "ConformalClassifier"
    _defaults: ClassVar[dict[str, str]] = {"method": "SplitConformal()"}

    def __init__(self, estimator: Any, method: Any = None, response_method: str = "auto") -> None:
        store_params(self, locals())

    def fit(self, X: Any, y: Any, groups: Any = None) -> ConformalClassifier:
        """Fit the conformal method on the base estimator's logits for ``X`` and labels ``y``.

        ``groups`` (one label per row) fits one threshold per group (Mondrian sets; pass the
        test rows' groups to :meth:`predict_set`).
        """
        m = self.method
        if m is not None and (
            not callable(getattr(m, "fit", None)) or not callable(getattr(m, "predict_set", None))
        ):
            raise _fail(
                self._owner,
                "method",
                "a privcal conformal method (SplitConformal, PrivateConformal) with "
                "fit(logits, labels) and predict_set(logits), or None (for calibrated "
                "probabilities use CalibratedClassifier)",
                m,
            )
        fit_params = {} if groups is None else {"groups": groups}
        self.method_ = self._fit_clone(m, SplitConformal, X, y, **fit_params)
        return self

    def predict_set(self, X: Any, groups: Any = None) -> np.ndarray:
        """Prediction sets, a boolean ``N x C`` matrix (column ``j`` is ``classes_[j]``);
        ``groups``: the rows' groups when the fit had groups."""
        z = self._test_logits(X)
        return np.asarray(self.method_.predict_set(z, groups=groups), dtype=bool)

    def predict_proba(self, X: Any) -> np.ndarray:
        """The probabilities the conformal score uses (the method's calibrator, or softmax)."""
        z = self._test_logits(X)
        calibrator = getattr(self.method_, "calibrator", None)
        if calibrator is None:
            return softmax(z)
        return np.asarray(calibrator.predict_proba(z), dtype=np.float64)


def _label_probs(estimator: Any, X: Any, owner: str) -> np.ndarray:
    """The base's ``predict_proba`` as an ``(n, K)`` array: as it is (``OneVsRestClassifier``,
    ``MLPClassifier``, any multiclass classifier), or column 1 of each of the ``K`` ``(n, 2)``
    arrays of a per-label list (``MultiOutputClassifier``, forests, k-NN on a label matrix)."""
    if not callable(getattr(estimator, "predict_proba", None)):
        raise _fail(owner, "estimator", "a fitted classifier with predict_proba", estimator)
    p = estimator.predict_proba(X)
    if isinstance(p, list):
        one = [k for k, q in enumerate(p) if np.ndim(q) != 2 or np.shape(q)[1] != 2]
        if one:
            raise ValueError(
                f"{owner}: the base estimator's predict_proba for label {one[0]} does not have "
                "two columns (the label took one value in its training data, so it has no "
                "probability of being present); fit the base on data where every label occurs."
            )
        p = np.column_stack([np.asarray(q)[:, 1] for q in p])
    return np.asarray(p, dtype=np.float64)


class RiskControlClassifier(_Frozen):
    """A fitted classifier with conformal risk control sets from privcal.

    ``fit(X_cal, Y_cal)`` fits a clone of ``method`` (:class:`~privcal.conformal.RiskControl` or
    :class:`~privcal.conformal.PrivateRiskControl`) on the base estimator's probabilities for
    the calibration set; ``predict_set(X)`` returns ``C_lambda(x) = {k : p_k >= 1 - lambda_}``
    as a boolean ``N x K`` matrix whose expected loss is at most the method's ``alpha``
    (``risk_bound_``; Theorem 1 of Conformal Risk Control for exchangeable data, and the private
    method's inflated bound).

    * ``loss="fnr"`` (multilabel): ``Y_cal`` is a boolean ``(n, K)`` label matrix; the base's
      ``predict_proba`` gives per-label probabilities, an ``(n, K)`` array or a list of ``K``
      ``(n, 2)`` arrays (column 1: the label is present).
    * ``loss="miscoverage"`` (multiclass): ``y_cal`` holds values of the base's ``classes_``;
      ``predict_proba`` is ``(n, C)``; column ``j`` of a set is ``classes_[j]``.

    Parameters
    ----------
    estimator : fitted classifier
        Frozen as in :class:`CalibratedClassifier`; it needs ``predict_proba``.
    method : RiskControl or PrivateRiskControl or None, default=None
        ``None`` means ``RiskControl()`` (``loss="fnr"``, ``alpha=0.1``).

    Attributes
    ----------
    method_ : RiskControl
        The fitted clone of ``method`` (``lambda_``, ``risk_bound_``, ``risk_curve_``).
    classes_ : ndarray of shape (C,)
        Only for ``loss="miscoverage"``.
    privacy_report_ : PrivacyReport
        Only with :class:`~privcal.conformal.PrivateRiskControl`: its report.

    Examples
    --------
    >>> from sklearn.datasets import make_multilabel_classification
    >>> from sklearn.linear_model import LogisticRegression
    >>> from sklearn.multiclass import OneVsRestClassifier
    >>> X, Y = make_multilabel_classification(3000, n_classes=5, random_state=0)
    >>> base = OneVsRestClassifier(LogisticRegression(max_iter=500)).fit(X[:1000], Y[:1000])
    >>> rc = RiskControlClassifier(base, RiskControl("fnr", alpha=0.1))
    >>> rc = rc.fit(X[1000:2000], Y[1000:2000])
    >>> rc.predict_set(X[2000:]).shape
    (1000, 5)
    """

    _owner: ClassVar[str] = "RiskControlClassifier"
    _defaults: ClassVar[dict[str, str]] = {"method": "RiskControl()"}

    def __init__(self, estimator: Any, method: Any = None) -> None:
        store_params(self, locals())

    def fit(self, X: Any, y: Any) -> RiskControlClassifier:
        """Fit the risk control method on the base estimator's probabilities for ``X`` and the
        labels ``y`` (a boolean label matrix for ``fnr``, classes for ``miscoverage``).
        """
        if self.method is not None and not isinstance(self.method, RiskControl):
            raise _fail(
                self._owner, "method", "a RiskControl or PrivateRiskControl, or None", self.method
            )
        _check_base(self.estimator, self._owner)
        method = RiskControl() if self.method is None else _fit_template(self, self.method)
        p = _label_probs(self.estimator, X, self._owner)
        if get_loss(method.loss, self._owner).name == "miscoverage":
            classes = getattr(self.estimator, "classes_", None)
            self.classes_ = np.arange(p.shape[1]) if classes is None else np.asarray(classes)
            y = _encode(self.classes_, y, self._owner)
        self.method_ = method.fit(p, y)
        self._adopt_report(method)
        self._adopt_features()
        return self

    def predict_set(self, X: Any) -> np.ndarray:
        """The sets ``C_lambda_(x)``, a boolean ``N x K`` matrix."""
        check_is_fitted(self, "method_")
        return np.asarray(self.method_.predict_set(_label_probs(self.estimator, X, self._owner)))

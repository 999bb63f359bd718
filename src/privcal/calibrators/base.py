"""Base class of every calibrator: scikit-learn conventions plus JSON (de)serialisation.

A calibrator stores its hyperparameters verbatim in ``__init__``, learns in ``fit`` (fitted
attributes end in ``_``), maps logits to calibrated probabilities in ``predict_proba``, and can be
saved with :meth:`Calibrator.to_dict` and restored with :func:`calibrator_from_dict` so that a
fitted calibrator can be shipped and applied by the CLI.

Fit diagnostics
---------------
A fit that succeeds but should be read with care (an optimum on the end of a search range,
examples ignored by a bounded loss) raises a :class:`FitWarning` and appends its message to
``fit_warnings_`` (empty when there were none), which ``to_dict`` saves.

Restoring is validated
----------------------
A calibrator file is data from outside: :func:`calibrator_from_dict` checks its schema (the keys
``class``, ``privcal_version``, ``params``, ``fitted``), the version, the hyperparameters (the
checks ``fit`` makes) and the fitted state (types, shapes, ranges:
:meth:`Calibrator._validate_fitted`) before anything is applied, and raises a ``ValueError``
naming the field and the fix.
"""

from __future__ import annotations

import importlib
import numbers
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar, Literal, TypeVar

import numpy as np
from sklearn.base import BaseEstimator, clone
from sklearn.exceptions import NotFittedError

from privcal import __version__
from privcal._params import ValidatedParams
from privcal.data.validation import check_labels, check_scores
from privcal.exceptions import PrivcalWarning
from privcal.metrics.statistics import softmax, top_label_bins
from privcal.privacy import PrivacyReport

__all__ = [
    "Calibrator",
    "CrossFitWarning",
    "FitWarning",
    "NotFittedError",
    "ReportsPrivacy",
    "calibrator_from_dict",
    "check_fitted_array",
    "check_fitted_scalar",
    "fitted_field_error",
    "register",
    "store_params",
]

Input = Literal["logits", "probs"]
C = TypeVar("C", bound="Calibrator")

_REGISTRY: dict[str, type[Calibrator]] = {}

#: Modules of higher layers that register calibrators of their own (private, DP-trained and
#: federated ones). :func:`calibrator_from_dict` imports them on demand when it meets a name it
#: does not know yet, so restoring never depends on what the caller happened to import; imports
#: still point down at module load time.
_REGISTERING_MODULES = (
    "privcal.private",
    "privcal.federated.calibrators",
    "privcal.training.recalibration",
)


def store_params(obj: Any, params: dict[str, Any]) -> None:
    """Store an ``__init__``'s arguments (its ``locals()``, taken first) as attributes of the
    same names, unchanged: scikit-learn's convention, which ``get_params`` reads."""
    for name, value in params.items():
        if name not in ("self", "__class__"):
            setattr(obj, name, value)


class FitWarning(PrivcalWarning):
    """A fit diagnostic: the fit succeeded, and the message says how to read or improve it."""


class CrossFitWarning(FitWarning):
    """Cross-fitted, the calibrator's ECE is higher than the uncalibrated model's."""


#: Bins of the cross-fitted ECE comparison (the default of :func:`privcal.metrics.ece`).
CROSS_FIT_BINS = 15
#: Each half of the cross-fit needs at least this many rows; smaller fits are not checked.
CROSS_FIT_MIN_ROWS = 100


def register(cls: type[C]) -> type[C]:
    """Class decorator: make ``cls`` restorable by :func:`calibrator_from_dict`."""
    _REGISTRY[cls.__name__] = cls
    return cls


def _to_jsonable(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        data = value
        if value.dtype.kind == "f":  # JSON has no NaN: empty bins are stored as null
            data = value.astype(object)
            data[np.isnan(value)] = None
        return {"__ndarray__": data.tolist(), "dtype": str(value.dtype)}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, list):
        return [_to_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _to_jsonable(v) for k, v in value.items()}
    return value


def _from_jsonable(value: Any) -> Any:
    if isinstance(value, dict) and "__ndarray__" in value:
        data = value["__ndarray__"]
        dtype = np.dtype(value["dtype"])
        if dtype.kind == "f":
            return np.array(data, dtype=object).astype(dtype) if data else np.array([], dtype)
        return np.array(data, dtype=dtype)
    if isinstance(value, list):
        return [_from_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _from_jsonable(v) for k, v in value.items()}
    return value


class Calibrator(ValidatedParams, BaseEstimator):
    """Abstract calibrator: ``fit(logits, labels) -> self``, ``predict_proba(logits) -> N x C``.

    Subclasses implement ``_fit(z, y)`` and ``_predict_proba(z)`` on validated float64 logits,
    list their learned attributes in ``_fitted_attributes`` and their hyperparameters' rules in
    ``_parameter_constraints`` (checked at fit time and on restore, never in ``__init__``).
    """

    _fitted_attributes: ClassVar[tuple[str, ...]] = ()
    #: Fitted attributes in which NaN is a meaningful value (an empty bin), not damage.
    _nan_fitted: ClassVar[tuple[str, ...]] = ("bin_values_",)
    #: Whether ``_fit`` takes float32 logits as they are (instead of a float64 copy).
    _accepts_float32: ClassVar[bool] = False
    #: Whether ``fit`` checks the method against the uncalibrated model by cross-fitting
    #: (:meth:`_cross_fit_check`); on for the non-parametric maps, which can over-fit.
    _cross_fit_diagnostic: ClassVar[bool] = False

    # -- public API ------------------------------------------------------------------------
    def fit(self: C, logits: object, labels: object, *, input: Input = "logits") -> C:
        """Fit on validation logits (or probabilities with ``input="probs"``) and labels.

        :class:`FitWarning` diagnostics raised while fitting are also kept in ``fit_warnings_``.
        """
        z = check_scores(logits, input=input, keep_float32=self._accepts_float32)
        y = check_labels(labels, z.shape[0], z.shape[1])
        self._validate_params()
        with self._recording_fit_warnings():
            self._fit(z, y)
            if self._checks_by_cross_fit():
                self._cross_fit_check(z, y)
        self.n_classes_ = z.shape[1]
        return self

    def predict_proba(self, logits: object, *, input: Input = "logits") -> np.ndarray:
        """Calibrated probabilities, an ``N x C`` array whose rows sum to 1."""
        self._check_fitted()
        z = check_scores(logits, input=input)
        if z.shape[1] != self.n_classes_:
            one_d = np.asarray(logits).ndim == 1  # read as N binary logits (check_scores)
            raise ValueError(
                f"{type(self).__name__} was fitted on {self.n_classes_} classes but 'logits' has "
                f"{z.shape[1]} columns"
                + (
                    ": a 1-D array is read as binary logits, one per example; pass one example "
                    "of C classes as logits.reshape(1, -1)."
                    if one_d
                    else "."
                )
            )
        return self._predict_proba(z)

    def predict(self, logits: object, *, input: Input = "logits") -> np.ndarray:
        """Predicted class (argmax of :meth:`predict_proba`)."""
        return np.argmax(self.predict_proba(logits, input=input), axis=1)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable description: class, hyperparameters and fitted state."""
        self._check_fitted()
        fitted = {a: _to_jsonable(getattr(self, a)) for a in (*self._fitted_names(), "n_classes_")}
        fitted["fit_warnings_"] = list(getattr(self, "fit_warnings_", []))
        return {
            "class": type(self).__name__,
            "privcal_version": __version__,
            "params": _to_jsonable(self._jsonable_params()),
            "fitted": fitted,
        }

    @classmethod
    def from_dict(cls: type[C], data: dict[str, Any]) -> C:
        """Restore a calibrator saved with :meth:`to_dict`."""
        obj = calibrator_from_dict(data)
        if not isinstance(obj, cls):
            raise ValueError(
                f"The dictionary describes a {data.get('class')}, not a {cls.__name__}."
            )
        return obj

    # -- hooks -----------------------------------------------------------------------------
    def _validate_fitted(self) -> None:
        """Check the fitted state of a restored calibrator; raise ``ValueError`` naming the field.

        The default checks what holds for every calibrator: ``n_classes_`` is an integer >= 2,
        and every fitted number is finite (NaN only in the attributes of ``_nan_fitted``);
        a fitted ``temperature_`` is positive. Subclasses add shapes and ranges and call
        ``super()._validate_fitted()`` first.
        """
        n_classes = getattr(self, "n_classes_", None)
        if isinstance(n_classes, bool) or not isinstance(n_classes, numbers.Integral):
            raise fitted_field_error(self, "n_classes_", "an integer >= 2", n_classes)
        if n_classes < 2:
            raise fitted_field_error(self, "n_classes_", "an integer >= 2", n_classes)
        self.n_classes_ = int(n_classes)
        for name in self._fitted_names():
            _check_finite(self, name, getattr(self, name), name in self._nan_fitted)
        if "temperature_" in self._fitted_attributes:
            check_fitted_scalar(self, "temperature_", positive=True)

    def _fitted_names(self) -> tuple[str, ...]:
        """The fitted attributes this instance saves and restores: ``_fitted_attributes``.

        Overridden where a hyperparameter adds state (binning with ``prior="model"`` keeps its
        counts), so files of the other settings keep their format.
        """
        return self._fitted_attributes

    def _checks_by_cross_fit(self) -> bool:
        """Whether ``fit`` runs :meth:`_cross_fit_check`; the class's ``_cross_fit_diagnostic``.

        Overridden where it depends on a hyperparameter (the objective of temperature scaling).
        """
        return self._cross_fit_diagnostic

    def _cross_fit_check(self, z: np.ndarray, y: np.ndarray) -> None:
        """Warn when the method, cross-fitted, is worse than the uncalibrated model.

        The rows are split in two halves by a fixed-seed permutation; a copy of the calibrator
        is fitted on each half and predicts the other, so every row gets a held-out calibrated
        probability. If the pooled top-label ECE (:data:`CROSS_FIT_BINS` bins) of those
        predictions exceeds that of :math:`\\mathrm{softmax}(z)` on the same rows, the map
        over-fits data of this size (e.g. one-vs-all maps on ~50 examples per class) and a
        :class:`CrossFitWarning` says so. A second :class:`CrossFitWarning` says when the
        held-out top-1 predictions lose accuracy beyond chance (McNemar): with ``a`` rows turned
        from right to wrong and ``b`` from wrong to right, when :math:`a - b > 2\\sqrt{a + b}`
        (one-vs-all maps reorder classes; a map that keeps the argmax never warns).
        Deterministic; costs about one more fit.
        """
        n = z.shape[0]
        if n < 2 * CROSS_FIT_MIN_ROWS:
            return
        halves = np.array_split(np.random.default_rng(0).permutation(n), 2)
        held_out = np.empty((n, z.shape[1]))
        for fit_rows, test_rows in ((halves[0], halves[1]), (halves[1], halves[0])):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the twins' own diagnostics are not the user's
                twin = self._fit_twin(z[fit_rows], y[fit_rows])
                held_out[test_rows] = twin._predict_proba(z[test_rows])
        calibrated = top_label_bins(held_out, y, CROSS_FIT_BINS).ece()
        uncalibrated = top_label_bins(softmax(z), y, CROSS_FIT_BINS).ece()
        if calibrated > uncalibrated:
            warnings.warn(
                f"Cross-fitted on two halves of the {n} fitting rows, {type(self).__name__} has a "
                f"top-label ECE of {calibrated:.4f} against {uncalibrated:.4f} uncalibrated: it "
                f"over-fits data of this size ({z.shape[1]} classes, about "
                f"{n // z.shape[1]} rows per class). Prefer temperature scaling, or fit on more "
                f"data.",
                CrossFitWarning,
                stacklevel=4,
            )
        before = np.argmax(z, axis=1) == y
        after = np.argmax(held_out, axis=1) == y
        lost, gained = int(np.sum(before & ~after)), int(np.sum(after & ~before))
        if lost - gained > 2.0 * np.sqrt(lost + gained):
            warnings.warn(
                f"Cross-fitted on two halves of the {n} fitting rows, {type(self).__name__} "
                f"changes the top-1 prediction of {lost} correctly classified rows to a wrong "
                f"class and of {gained} wrong ones to the right class: accuracy falls by "
                f"{100 * (lost - gained) / n:.2f} points, beyond chance (McNemar, 2 SD). It "
                f"reorders classes; temperature scaling or top-label binning keep the "
                f"predictions.",
                CrossFitWarning,
                stacklevel=4,
            )

    def _fit_twin(self: C, z: np.ndarray, y: np.ndarray) -> C:
        """A copy of this calibrator fitted on one half of the cross-fit (:meth:`_cross_fit_check`).

        The default fits a clone afresh. A subclass may pass its own fit's result to the twin's
        solver as a starting point where the result provably does not depend on it.
        """
        twin = clone(self)
        twin._fit(z, y)
        return twin

    @contextmanager
    def _recording_fit_warnings(self) -> Iterator[None]:
        """Collect the :class:`FitWarning` messages of a fit into ``fit_warnings_``.

        Every warning raised inside is re-raised, unchanged, when the block ends, so the
        caller's warning filters decide what is shown (or turned into an error).
        """
        self.fit_warnings_: list[str] = []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield
        for w in caught:
            if issubclass(w.category, FitWarning):
                self.fit_warnings_.append(str(w.message))
        for w in caught:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)

    def _fit(self, z: np.ndarray, y: np.ndarray) -> None:
        raise NotImplementedError

    def _predict_proba(self, z: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _jsonable_params(self) -> dict[str, Any]:
        return dict(self.get_params(deep=False))

    def _check_fitted(self) -> None:
        if not hasattr(self, "n_classes_"):
            raise NotFittedError(
                f"This {type(self).__name__} instance is not fitted yet. Call 'fit' with "
                f"validation logits and labels before using this method."
            )


class ReportsPrivacy:
    """Mixin of calibrators whose fit is a private release.

    Restoring checks the saved report the way :meth:`PrivacyReport.from_dict` reads it.

    ``privacy_report_`` (a :class:`~privcal.privacy.PrivacyReport`) is saved by ``to_dict`` and
    comes back as a ``PrivacyReport`` from :func:`calibrator_from_dict`, so a shipped calibrator
    carries the guarantee it was fitted under. List it before :class:`Calibrator` in the bases.
    """

    @property
    def privacy_report_(self) -> PrivacyReport:
        rep = self.__dict__.get("_privacy_report")
        if rep is None:  # NotFittedError is an AttributeError: hasattr stays False
            raise NotFittedError(
                f"This {type(self).__name__} has no privacy_report_ yet: fit sets it (the "
                "report of that fit's release), and calibrator_from_dict restores it."
            )
        return rep

    @privacy_report_.setter
    def privacy_report_(self, value: PrivacyReport | dict[str, Any]) -> None:
        if isinstance(value, dict):
            value = PrivacyReport.from_dict(value)
        self.__dict__["_privacy_report"] = value

    def to_dict(self) -> dict[str, Any]:
        """:meth:`Calibrator.to_dict` plus ``fitted["privacy_report_"]``."""
        out: dict[str, Any] = super().to_dict()  # type: ignore[misc]
        out["fitted"]["privacy_report_"] = self.privacy_report_.to_dict()
        return out


_KEYS = ("class", "privcal_version", "params", "fitted")
#: Fitted keys any calibrator file may hold besides ``_fitted_attributes`` and ``n_classes_``.
_OPTIONAL_FITTED = ("fit_warnings_", "privacy_report_")
_REFIT = (
    "The file is damaged or was edited: fit the calibrator again (privcal fit) and use its file."
)


def fitted_field_error(obj: object, field: str, allowed: str, value: Any) -> ValueError:
    """The ``ValueError`` of a restored calibrator whose fitted ``field`` is not ``allowed``."""
    shown = repr(value)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    return ValueError(
        f"The field 'fitted.{field}' of a saved {type(obj).__name__} must be {allowed}. "
        f"Got {shown} instead. {_REFIT}"
    )


def _check_finite(obj: object, field: str, value: Any, nan_ok: bool) -> None:
    """Every number inside ``value`` (nested lists, dicts, arrays) is finite; NaN if ``nan_ok``.

    Strings, booleans and ``None`` are not numbers to check here; subclasses check their meaning.
    """
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        for v in value:
            _check_finite(obj, field, v, nan_ok)
        return
    if isinstance(value, (str, bool, np.bool_)) or value is None:
        return
    arr = np.asarray(value) if isinstance(value, (np.ndarray, numbers.Number)) else None
    if arr is None or arr.dtype.kind not in "biuf":
        raise fitted_field_error(obj, field, "a number or an array of numbers", value)
    if arr.dtype.kind != "f":
        return
    bad = np.isinf(arr) if nan_ok else ~np.isfinite(arr)
    if bad.any():
        allowed = "finite (NaN only for empty bins)" if nan_ok else "finite (no NaN or inf)"
        raise fitted_field_error(obj, field, allowed, value)


def check_fitted_scalar(obj: object, field: str, *, positive: bool = False) -> float:
    """The fitted number ``field`` of ``obj`` as a finite float (> 0 with ``positive``).

    Raises ``ValueError`` naming the field otherwise; stores the float back on ``obj``.
    """
    allowed = "a positive finite number" if positive else "a finite number"
    value = getattr(obj, field)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise fitted_field_error(obj, field, allowed, value)
    v = float(value)
    if not np.isfinite(v) or (positive and v <= 0.0):
        raise fitted_field_error(obj, field, allowed, value)
    setattr(obj, field, v)
    return v


def check_fitted_array(
    obj: object,
    field: str,
    shape: tuple[int, ...],
    *,
    low: float | None = None,
    high: float | None = None,
    nan_ok: bool = False,
) -> np.ndarray:
    """The fitted array ``field`` of ``obj`` with exactly ``shape``, values in [low, high].

    NaN passes only with ``nan_ok`` (empty bins); every other value must be finite.
    """
    value = getattr(obj, field)
    arr = np.asarray(value, dtype=np.float64) if isinstance(value, np.ndarray) else None
    if arr is None or arr.shape != shape:
        got = f"shape {arr.shape}" if arr is not None else value
        raise fitted_field_error(obj, field, f"an array of shape {shape}", got)
    _check_finite(obj, field, arr, nan_ok)
    inside = arr[~np.isnan(arr)]
    if (low is not None and (inside < low).any()) or (high is not None and (inside > high).any()):
        lo_s = "-inf" if low is None else f"{low:g}"
        hi_s = "inf" if high is None else f"{high:g}"
        raise fitted_field_error(obj, field, f"an array with values in [{lo_s}, {hi_s}]", value)
    setattr(obj, field, arr)
    return arr


def _schema_error(field: str, problem: str) -> ValueError:
    return ValueError(
        f"The calibrator description's field {field!r} {problem}. A calibrator file is the JSON "
        f"written by 'privcal fit' (Calibrator.to_dict) with keys {', '.join(_KEYS)}. {_REFIT}"
    )


def _check_version(version: Any) -> None:
    if version is None:
        raise _schema_error("privcal_version", "is missing")
    parts = str(version).split(".")
    if not isinstance(version, str) or len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
        raise _schema_error(
            "privcal_version", f"must be a version such as '0.1.0'; got {version!r}"
        )
    if parts[0] != __version__.split(".")[0]:
        raise ValueError(
            f"The calibrator was saved by privcal {version}, whose file format this privcal "
            f"{__version__} does not read (the major versions differ). Fit it again with this "
            f"version, or apply it with privcal {parts[0]}.x."
        )


def _registered(name: Any) -> type[Calibrator]:
    if not isinstance(name, str):
        raise _schema_error("class", f"must name a calibrator class; got {name!r}")
    for module in _REGISTERING_MODULES:
        if name in _REGISTRY:
            break
        try:
            importlib.import_module(module)
        except ImportError:  # an optional extra (torch) that is not installed
            continue
    if name not in _REGISTRY:
        raise ValueError(
            f"Unknown calibrator {name!r} in the field 'class'; known: "
            f"{', '.join(sorted(_REGISTRY))}. {_REFIT}"
        )
    return _REGISTRY[name]


def _restore_params(cls: type[Calibrator], params: Any) -> Calibrator:
    if not isinstance(params, dict):
        raise _schema_error("params", f"must be an object of hyperparameters; got {params!r}")
    known = set(cls._get_param_names())
    unknown = sorted(set(params) - known)
    if unknown:
        raise _schema_error(
            f"params.{unknown[0]}",
            f"is not a parameter of {cls.__name__} (its parameters: {', '.join(sorted(known))})",
        )
    values = _from_jsonable(params)
    obj = cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})
    try:
        obj._validate_params()
    except (ValueError, TypeError) as err:
        raise ValueError(
            f"The field 'params' of a saved {cls.__name__} is invalid: {err} {_REFIT}"
        ) from None
    return obj


def _restore_fitted(obj: Calibrator, fitted: Any) -> None:
    if not isinstance(fitted, dict):
        raise _schema_error("fitted", f"must be an object of fitted attributes; got {fitted!r}")
    required = (*obj._fitted_names(), "n_classes_")
    missing = [k for k in required if k not in fitted]
    if missing:
        raise _schema_error(f"fitted.{missing[0]}", f"is missing for a {type(obj).__name__}")
    extra = sorted(set(fitted) - set(required) - set(_OPTIONAL_FITTED))
    if "privacy_report_" in fitted and not isinstance(obj, ReportsPrivacy):
        extra.append("privacy_report_")
    if extra:
        raise _schema_error(
            f"fitted.{extra[0]}", f"is not a fitted attribute of {type(obj).__name__}"
        )
    if isinstance(obj, ReportsPrivacy) and "privacy_report_" not in fitted:
        raise _schema_error("fitted.privacy_report_", f"is missing for a {type(obj).__name__}")
    warned = fitted.get("fit_warnings_", [])
    if not isinstance(warned, list) or not all(isinstance(w, str) for w in warned):
        raise fitted_field_error(obj, "fit_warnings_", "a list of strings", warned)
    for name, value in fitted.items():
        try:
            setattr(obj, name, _from_jsonable(value))
        except (ValueError, TypeError, KeyError) as err:
            raise fitted_field_error(obj, name, f"readable ({err})", value) from None


def calibrator_from_dict(data: dict[str, Any]) -> Calibrator:
    """Rebuild any registered calibrator from :meth:`Calibrator.to_dict` output, validated.

    Checks, in order, and raises ``ValueError`` naming the field: the schema (an object with
    ``class``, ``privcal_version``, ``params``, ``fitted``), the class name, the version (same
    major version as this privcal), the hyperparameters (the checks ``fit`` makes), the set of
    fitted attributes, and their values (:meth:`Calibrator._validate_fitted`: types, shapes,
    finiteness, ranges). Nothing is applied before every check passed.
    """
    if not isinstance(data, dict):
        raise ValueError(
            f"A calibrator description must be a JSON object with keys {', '.join(_KEYS)}; got "
            f"{type(data).__name__}. {_REFIT}"
        )
    cls = _registered(data.get("class"))
    _check_version(data.get("privcal_version"))
    obj = _restore_params(cls, data.get("params", {}))
    _restore_fitted(obj, data.get("fitted"))
    obj._validate_fitted()
    return obj

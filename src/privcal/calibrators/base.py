"""Base class of every calibrator: scikit-learn conventions plus JSON (de)serialisation.

A calibrator stores its hyperparameters verbatim in ``__init__``, learns in ``fit`` (fitted
attributes end in ``_``), maps logits to calibrated probabilities in ``predict_proba``, and can be
saved with :meth:`Calibrator.to_dict` and restored with :func:`calibrator_from_dict` so that a
fitted calibrator can be shipped and applied by the CLI.
"""

from __future__ import annotations

import importlib
from typing import Any, ClassVar, Literal, TypeVar

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError

from privcal import __version__
from privcal.data.validation import check_labels, check_scores
from privcal.privacy import PrivacyReport

__all__ = ["Calibrator", "NotFittedError", "ReportsPrivacy", "calibrator_from_dict", "register"]

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


def register(cls: type[C]) -> type[C]:
    """Class decorator: make ``cls`` restorable by :func:`calibrator_from_dict`."""
    _REGISTRY[cls.__name__] = cls
    return cls


def _to_jsonable(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        data = value.tolist()
        if value.dtype.kind == "f":  # JSON has no NaN: empty bins are stored as null
            obj = value.astype(object)
            obj[np.isnan(value)] = None
            data = obj.tolist()
        return {"__ndarray__": data, "dtype": str(value.dtype)}
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


class Calibrator(BaseEstimator):
    """Abstract calibrator: ``fit(logits, labels) -> self``, ``predict_proba(logits) -> N x C``.

    Subclasses implement ``_fit(z, y)`` and ``_predict_proba(z)`` on validated float64 logits and
    list their learned attributes in ``_fitted_attributes``.
    """

    _fitted_attributes: ClassVar[tuple[str, ...]] = ()

    # -- public API ------------------------------------------------------------------------
    def fit(self: C, logits: object, labels: object, *, input: Input = "logits") -> C:
        """Fit on validation logits (or probabilities with ``input="probs"``) and labels."""
        z = check_scores(logits, input=input)
        y = check_labels(labels, z.shape[0], z.shape[1])
        self._validate_params()
        self._fit(z, y)
        self.n_classes_ = z.shape[1]
        return self

    def predict_proba(self, logits: object, *, input: Input = "logits") -> np.ndarray:
        """Calibrated probabilities, an ``N x C`` array whose rows sum to 1."""
        self._check_fitted()
        z = check_scores(logits, input=input)
        if z.shape[1] != self.n_classes_:
            raise ValueError(
                f"{type(self).__name__} was fitted on {self.n_classes_} classes but 'logits' has "
                f"{z.shape[1]} columns."
            )
        return self._predict_proba(z)

    def predict(self, logits: object, *, input: Input = "logits") -> np.ndarray:
        """Predicted class (argmax of :meth:`predict_proba`)."""
        return np.argmax(self.predict_proba(logits, input=input), axis=1)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable description: class, hyperparameters and fitted state."""
        self._check_fitted()
        fitted = {
            a: _to_jsonable(getattr(self, a)) for a in (*self._fitted_attributes, "n_classes_")
        }
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
    def _validate_params(self) -> None:
        """Check hyperparameters (called at fit time, never in ``__init__``)."""

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

    ``privacy_report_`` (a :class:`~privcal.privacy.PrivacyReport`) is saved by ``to_dict`` and
    comes back as a ``PrivacyReport`` from :func:`calibrator_from_dict`, so a shipped calibrator
    carries the guarantee it was fitted under. List it before :class:`Calibrator` in the bases.
    """

    @property
    def privacy_report_(self) -> PrivacyReport:
        rep = self.__dict__.get("_privacy_report")
        if rep is None:
            raise AttributeError("privacy_report_")
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


def calibrator_from_dict(data: dict[str, Any]) -> Calibrator:
    """Rebuild any registered calibrator from :meth:`Calibrator.to_dict` output."""
    name = data.get("class")
    for module in _REGISTERING_MODULES:
        if name in _REGISTRY:
            break
        try:
            importlib.import_module(module)
        except ImportError:  # an optional extra (torch) that is not installed
            continue
    try:
        cls = _REGISTRY[data["class"]]
    except KeyError:
        raise ValueError(
            f"Unknown calibrator {data.get('class')!r}; known: {', '.join(sorted(_REGISTRY))}."
        ) from None
    params = _from_jsonable(data.get("params", {}))
    obj = cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in params.items()})
    for name, value in data["fitted"].items():
        setattr(obj, name, _from_jsonable(value))
    return obj

"""What a fitted calibrator releases, in a few numbers: for consoles, reports and
``privacy_report.json``.

:func:`release_summary` states the released parameters (the temperature, or for vector, matrix
and binning maps each array's shape and range; for prediction sets their threshold, grid bin and
noise margin) and, for the private fits that have a fallback
rule (:func:`privcal.private.release_check`, FedTemp's
:func:`~privcal.federated.methods.noise_dominance`), whether the release fell back to ``T = 1``
and why. :func:`release_line` says the same in one line. Both read only the calibrator's own
fitted state, which is the release itself: nothing here touches the data it was fitted on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["FALLBACK_KEYS", "evidence_phrase", "release_line", "release_summary"]

#: The keys of a fallback decision that reports keep (a ``release_check_`` may hold more).
FALLBACK_KEYS = (
    "rule",
    "z",
    "threshold",
    "compared",
    "release_temperature",
    "temperature",
    "fell_back",
    "noise_dominated",
)


def _array_summary(value: Any) -> dict[str, Any]:
    """Shape and range of an array; a ragged list (isotonic thresholds per class) gives its
    length as the shape and the range of every value in it."""
    try:
        a = np.asarray(value, dtype=np.float64)
        shape = list(a.shape)
    except ValueError:
        a = np.concatenate([np.asarray(v, dtype=np.float64).ravel() for v in value])
        shape = [len(value)]
    finite = a[np.isfinite(a)]
    out: dict[str, Any] = {"shape": shape}
    if finite.size:
        out.update(
            min=float(finite.min()), median=float(np.median(finite)), max=float(finite.max())
        )
    if finite.size < a.size:
        out["empty"] = int(a.size - finite.size)  # NaN: the input kept (empty, fallen back)
    return out


def _summarise(params: dict[str, Any], key: str, value: Any) -> None:
    """``params[key]``: a number as it is, a pair of numbers as a list, an array's summary; a
    mapping (DP-SGD's ``params_``) one entry per item, ``key.item``."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            _summarise(params, f"{key}.{k}", v)
    elif isinstance(value, str):
        params[key] = value
    elif isinstance(value, (bool, np.bool_)):
        params[key] = bool(value)
    elif isinstance(value, (int, float, np.integer, np.floating)):
        params[key] = value.item() if isinstance(value, np.generic) else value
    elif isinstance(value, tuple) and all(isinstance(v, (int, float)) for v in value):
        params[key] = [float(v) for v in value]
    else:
        try:
            params[key] = _array_summary(value)
        except (TypeError, ValueError):  # not numbers (names, mixed records): their kind only
            params[key] = {"kind": type(value).__name__}


def release_summary(cal: Any) -> dict[str, Any]:
    """The released parameters of a fitted calibrator (or of fitted prediction sets with
    ``_fitted_names``: the federated conformal sets) and, where it has one, its fallback.

    Returns
    -------
    dict
        ``class``; ``parameters``: each fitted attribute without its trailing underscore, a
        number as it is (``temperature``), an array as ``{shape, min, median, max[, empty]}``;
        ``fallback`` (only for a fit with a fallback rule): :data:`FALLBACK_KEYS` of its
        ``release_check_``; ``text``: :func:`release_line`.
    """
    params: dict[str, Any] = {}
    for name in (*cal._fitted_names(), "n_classes_"):
        if hasattr(cal, name):
            _summarise(params, name.rstrip("_"), getattr(cal, name))
    out: dict[str, Any] = {"class": type(cal).__name__, "parameters": params}
    check = getattr(cal, "release_check_", None)
    if isinstance(check, Mapping):
        out["fallback"] = {k: check.get(k) for k in FALLBACK_KEYS}
    out["text"] = release_line(out)
    return out


def _parameters_text(params: Mapping[str, Any]) -> str:
    if "temperature" in params:
        return f"T = {float(params['temperature']):.4g}"
    if "threshold" in params and "bin" in params:  # prediction sets {y : S(x, y) <= threshold}
        full = (
            " (every label: the full set; the released counts leave no bin whose tail, plus the "
            "noise margin, fits within alpha of the total: more clients, rows a client (up to "
            "the row cap), a larger epsilon or a larger alpha give smaller sets)"
            if float(params["threshold"]) >= 1.0
            else ""
        )
        return (
            f"sets {{y : S(x, y) <= {float(params['threshold']):.4g}}}{full}, bin "
            f"{params['bin']}, noise margin {float(params.get('margin', 0.0)):.3g}"
        )
    parts = []
    for k, v in params.items():
        if isinstance(v, Mapping) and "min" in v:
            shape = "x".join(str(s) for s in v["shape"])
            empty = f", {v['empty']} not calibrated (input kept)" if v.get("empty") else ""
            parts.append(f"{k} ({shape}) in [{v['min']:.3g}, {v['max']:.3g}]{empty}")
        elif isinstance(v, Mapping):
            parts.append(f"{k} ({'x'.join(str(s) for s in v['shape'])}, empty)")
    return "; ".join(parts) or "no fitted parameters"


def evidence_phrase(z: float | None) -> str:
    """How far a release favours its fitted temperature over ``T = 1``, in words.

    Examples
    --------
    >>> evidence_phrase(3.14159), evidence_phrase(-0.5)
    ('its release favours it over T = 1 by 3.14 noise SDs', 'its release favours T = 1 over it by 0.50 noise SDs')
    """  # noqa: E501
    if z is None:
        return "its release holds no value next to T = 1 to compare with"
    if z >= 0:
        return f"its release favours it over T = 1 by {z:.2f} noise SDs"
    return f"its release favours T = 1 over it by {-z:.2f} noise SDs"


def release_line(summary: Mapping[str, Any]) -> str:
    """One line: the released parameters and, for a fit with a fallback rule, what it decided.

    Examples
    --------
    >>> release_line({"class": "TemperatureScaling", "parameters": {"temperature": 1.21}})
    'T = 1.21'
    >>> release_line({"class": "PrivateTemperatureScaling", "parameters": {"temperature": 1.0},
    ...               "fallback": {"fell_back": True, "release_temperature": 0.25, "z": -0.82,
    ...                            "threshold": 2.0, "rule": "identity"}})
    'T = 1 (fell back to the uncalibrated model from the fitted T = 0.25: its release favours T = 1 over it by 0.82 noise SDs, and keeping it needs 2 in its favour)'
    """  # noqa: E501
    text = _parameters_text(summary.get("parameters", {}))
    fb = summary.get("fallback")
    if not fb:
        return text
    z, t, need = fb.get("z"), fb.get("release_temperature"), fb.get("threshold")
    said = evidence_phrase(z)
    if fb.get("fell_back"):
        return (
            f"{text} (fell back to the uncalibrated model from the fitted T = {t:.4g}: {said}, "
            f"and keeping it needs {need:g} in its favour)"
        )
    if fb.get("noise_dominated"):
        return (
            f"{text} (kept with fallback='{fb.get('rule')}': {said}, short of the {need:g} in "
            "its favour the rule needs; it may calibrate worse than no calibration)"
        )
    if z is None:
        return text
    return f"{text} ({said}; the rule needs {need:g})"

"""Measurements: a release's statistic, mechanism, sensitivity and privacy map as one object.

OpenDP's idea of a measurement (a function and its privacy map built side by side) applied to
privcal's releases. A :class:`Measurement` names

* the **statistic** it releases (a sentence) and the **mechanism** that adds the noise;
* the **sensitivity** of that statistic under its neighbouring **relation** and **unit**: a
  number, or a function of the public parameters (the clip bound ``B``, the class count ``C``,
  a client clip ``C_g`` ...), with its **formula** as text;
* where the sensitivity is **derived** (``proof``: the dotted name of the function whose
  docstring's *Privacy* section states ``sensitivity <formula>``; a test reads it).

Every :class:`~privcal.privacy.Release` a private computation records is made by a measurement,
in one place (:meth:`Measurement.release` for a noise draw made here, :meth:`Measurement.record`
for noise drawn elsewhere: a secure sum's shares, Opacus, the federated server), through
:meth:`Release.from_guarantee <privcal.privacy.Release.from_guarantee>`; nothing else builds a
``Release`` except the ledger reading its own rows back. The measurements of the library are
registered by name (:func:`register_measurement`); ``privcal audit --list`` and the sensitivity
tables of ``docs/private.md`` and ``docs/privacy.md`` (``tools/gen_privacy_docs.py``) are read
from them, so the sensitivity a release records, the one its audit names and the one the docs
state are the same object.

The modules that register measurements are imported on demand by :func:`available_measurements`
(the layers above ``privacy``, as :func:`~privcal.calibrators.calibrator_from_dict` does), so
module-level imports still only point down.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from privcal._params import POSITIVE, check_option
from privcal.privacy.guarantee import RELATIONS, UNITS, Guarantee, Release
from privcal.privacy.mechanisms import gaussian, laplace
from privcal.privacy.noise import NoiseSource

__all__ = [
    "MEASUREMENT_MODULES",
    "NORMS",
    "Measurement",
    "available_measurements",
    "get_measurement",
    "register_measurement",
]

#: How the sensitivity is measured: the L1 / L2 norm of the change of the released vector, the
#: largest change of one utility (exponential mechanism), or the range of the utilities'
#: change (bounded-range exponential mechanism).
NORMS = ("L1", "L2", "utility", "range")

#: The modules that register the library's measurements (imported by
#: :func:`available_measurements`).
MEASUREMENT_MODULES = (
    "privcal.private.queries",
    "privcal.conformal.quantile",
    "privcal.conformal.private.risk",
    "privcal.federated.payloads",
    "privcal.training.dp_sgd",
)

#: Mechanisms :meth:`Measurement.release` draws itself (the others are recorded).
_DRAWN = ("laplace", "gaussian")


@dataclass(frozen=True)
class Measurement:
    """One kind of private release: statistic, mechanism, sensitivity and privacy map.

    Parameters
    ----------
    name : str
        Registry key (``"datasource.accuracy_gap_sum"``).
    statistic : str
        What is released, in words (the exact statistic before noise).
    mechanism : str
        The mechanism as a report records it (``"laplace"``, ``"gaussian"``, ``"exponential"``
        ...). ``"laplace"`` and ``"gaussian"`` are drawn by :meth:`release`.
    norm : {"L1", "L2", "utility", "range"}
        How :attr:`sensitivity` measures the change of the statistic.
    sensitivity : float or callable
        The sensitivity under :attr:`relation` of one :attr:`unit`: a number, or a function of
        the public parameters (keyword arguments; :attr:`parameters` names them).
    formula : str
        The sensitivity as the docs and the proof write it (``"1"``, ``"B + min(B, log C)"``).
    proof : str
        Dotted name of the function whose docstring derives the sensitivity (its *Privacy*
        section says ``sensitivity <formula>``).
    unit : {"example", "user"}, default="example"
    relation : {"add/remove", "substitute"}, default="add/remove"

    Notes
    -----
    The privacy map of a pure mechanism is ``epsilon -> Guarantee(epsilon)``, of the Gaussian
    mechanism ``(epsilon, delta) -> Guarantee(epsilon, delta)``; the mechanism's own docstring
    (:mod:`privcal.privacy.mechanisms`) proves it for any statistic whose sensitivity is at
    most :meth:`sensitivity_at`. A measurement is only as right as its sensitivity: the
    statistic's proof and the empirical neighbour checks of ``tests/privacy/test_measurements.py``
    hold it to its formula.

    Examples
    --------
    >>> from privcal.privacy import SeededNoise
    >>> m = Measurement("demo.sum", "a sum of terms in [0, B]", "laplace", "L1",
    ...                 lambda bound: bound, "B", "demo")
    >>> y, r = m.release(3.0, 0.5, SeededNoise(0), query="sum(B=2)", source="a", bound=2.0)
    >>> (r.query, r.mechanism, r.sensitivity, r.epsilon, r.source)
    ('sum(B=2)', 'laplace', 2.0, 0.5, 'a')
    """

    name: str
    statistic: str
    mechanism: str
    norm: str
    sensitivity: float | Callable[..., float]
    formula: str
    proof: str
    unit: str = "example"
    relation: str = "add/remove"

    def __post_init__(self) -> None:
        owner = "Measurement"
        check_option(self.norm, "norm", owner, NORMS)
        check_option(self.unit, "unit", owner, UNITS)
        check_option(self.relation, "relation", owner, RELATIONS)
        if not callable(self.sensitivity):
            POSITIVE.check(self.sensitivity, "sensitivity", owner)

    @functools.cached_property
    def parameters(self) -> tuple[str, ...]:
        """The public parameters the sensitivity reads (none for a constant one)."""
        if not callable(self.sensitivity):
            return ()
        return tuple(inspect.signature(self.sensitivity).parameters)

    def sensitivity_at(self, **params: Any) -> float:
        """The sensitivity at the public parameters ``params`` (none for a constant one)."""
        if not callable(self.sensitivity):
            if params:
                raise ValueError(
                    f"The sensitivity of measurement {self.name!r} is the constant "
                    f"{self.formula}; it takes no parameters. Got {sorted(params)} instead."
                )
            return float(self.sensitivity)
        wanted = set(self.parameters)
        if set(params) != wanted:
            raise ValueError(
                f"The sensitivity {self.formula} of measurement {self.name!r} reads the public "
                f"parameters {sorted(wanted)}. Got {sorted(params)} instead."
            )
        return float(self.sensitivity(**params))

    def privacy_map(self, epsilon: float, delta: float = 0.0) -> Guarantee:
        """The guarantee of one release at budget ``(epsilon, delta)``, for :attr:`unit` and
        :attr:`relation`."""
        return Guarantee(epsilon, delta, self.unit, self.relation)

    def record(
        self,
        query: str,
        epsilon: float,
        *,
        source: str = "",
        delta: float = 0.0,
        mechanism: str | None = None,
        **params: Any,
    ) -> Release:
        """The :class:`Release` of one answer whose noise is drawn elsewhere.

        For a secure sum's distributed shares, Opacus's noisy gradients or the federated
        server's Gaussian noise: the measurement states the sensitivity at ``params`` and the
        privacy map; ``mechanism`` replaces :attr:`mechanism` in the record when the release
        says more (the share law, the accountant).
        """
        how = self.mechanism if mechanism is None else mechanism
        sensitivity = self.sensitivity_at(**params)
        return Release.from_guarantee(
            query, how, sensitivity, self.privacy_map(epsilon, delta), source
        )

    def release(
        self,
        value: Any,
        epsilon: float,
        noise: NoiseSource | None = None,
        *,
        query: str,
        source: str = "",
        delta: float = 0.0,
        charge: Callable[[Release], Any] | None = None,
        **params: Any,
    ) -> tuple[Any, Release]:
        """Release ``value`` with the measurement's mechanism; returns ``(noisy, Release)``.

        ``charge(release)`` (e.g. :meth:`PrivacyOdometer.spend_release
        <privcal.privacy.PrivacyOdometer.spend_release>`) is called with the record **before**
        any noise is drawn, so a refused spend releases nothing. The record's guarantee is the
        mechanism's own (``laplace`` / ``gaussian`` return it); the two are checked equal.
        """
        if self.mechanism not in _DRAWN:
            raise ValueError(
                f"Measurement {self.name!r} uses the {self.mechanism} mechanism, which "
                "Measurement.release does not draw; record its release with "
                "Measurement.record where the noise is drawn."
            )
        planned = self.record(query, epsilon, source=source, delta=delta, **params)
        if charge is not None:
            charge(planned)
        if self.mechanism == "laplace":
            noisy, guarantee = laplace(value, planned.sensitivity, epsilon, noise, unit=self.unit)
        else:
            noisy, guarantee = gaussian(
                value, planned.sensitivity, epsilon, delta, noise, unit=self.unit
            )
        if (guarantee.epsilon, guarantee.delta) != (planned.epsilon, planned.delta):
            raise RuntimeError(
                f"Measurement {self.name!r}: the mechanism returned {guarantee}, the record "
                f"charged (epsilon={planned.epsilon}, delta={planned.delta})."
            )
        return noisy, planned

    def row(self) -> dict[str, str]:
        """The measurement as one row of a table (``privcal audit --list``, the docs)."""
        return {
            "name": self.name,
            "statistic": self.statistic,
            "mechanism": self.mechanism,
            "sensitivity": f"{self.norm} {self.formula}",
            "relation": f"{self.relation} one {self.unit}",
            "parameters": ", ".join(self.parameters) or "-",
            "proof": self.proof,
        }


_MEASUREMENTS: dict[str, Measurement] = {}


def register_measurement(measurement: Measurement) -> Measurement:
    """Register ``measurement`` under its name and return it (a name is registered once)."""
    if not isinstance(measurement, Measurement):
        raise TypeError(f"register_measurement takes a Measurement. Got {measurement!r} instead.")
    if measurement.name in _MEASUREMENTS:
        raise ValueError(f"A measurement named {measurement.name!r} is already registered.")
    _MEASUREMENTS[measurement.name] = measurement
    return measurement


def available_measurements() -> dict[str, Measurement]:
    """Every registered measurement, by name (imports :data:`MEASUREMENT_MODULES` first)."""
    for module in MEASUREMENT_MODULES:
        importlib.import_module(module)
    return dict(sorted(_MEASUREMENTS.items()))


def get_measurement(name: str) -> Measurement:
    """The measurement registered under ``name``; a ``ValueError`` lists the names otherwise."""
    known = available_measurements()
    if name not in known:
        raise ValueError(f"Unknown measurement {name!r}. Registered: {', '.join(known)}.")
    return known[name]

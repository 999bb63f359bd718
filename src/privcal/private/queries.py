"""The measurements of the :class:`~privcal.private.DataSource` query vocabulary.

One :class:`~privcal.privacy.measurement.Measurement` per query: the statistic, the Laplace
mechanism, the L1 sensitivity under add/remove one example (a number, or a function of the clip
bound ``B`` and the public class count ``C``), and the query method whose docstring derives it.
:data:`QUERIES`, :func:`query_sensitivity`, every statistic a source computes
(:class:`privcal.private.source._Statistic`), the ledger rows, ``privcal audit --list`` and the
table of ``docs/private.md`` all read these objects.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from privcal._params import check_int, check_real
from privcal.privacy.measurement import Measurement, register_measurement

__all__ = [
    "DISTRIBUTED_LAPLACE",
    "QUERIES",
    "QUERY_MEASUREMENTS",
    "clip_bound_sensitivity",
    "nll_curve_sensitivity",
    "query_measurement",
    "query_sensitivity",
]

#: The mechanism a source's answer to a secure sum records (its discrete Laplace share).
DISTRIBUTED_LAPLACE = "distributed discrete laplace"


def clip_bound_sensitivity(bound: float) -> float:
    """L1 sensitivity ``B`` of :meth:`DataSource.clipped_nll_sum` (one clipped term in
    ``[0, B]``)."""
    return check_real(bound, "bound", "clip_bound_sensitivity", low=0.0, low_open=True)


def nll_curve_sensitivity(bound: float, n_classes: int) -> float:
    """L1 sensitivity ``B + min(B, log C)`` of :meth:`DataSource.clipped_nll_increments`.

    Derived in that method's docstring (add/remove one example; ``C`` public).
    """
    b = check_real(bound, "bound", "nll_curve_sensitivity", low=0.0, low_open=True)
    c = check_int(n_classes, "n_classes", "nll_curve_sensitivity", low=2)
    return b + min(b, math.log(c))


def _query(
    query: str, statistic: str, sensitivity: float | Callable[..., float], formula: str
) -> tuple[str, Measurement]:
    return query, register_measurement(
        Measurement(
            name=f"datasource.{query}",
            statistic=statistic,
            mechanism="laplace",
            norm="L1",
            sensitivity=sensitivity,
            formula=formula,
            proof=f"privcal.private.source.DataSource.{query}",
        )
    )


#: query name -> its measurement (the source looks the measurement up here at every answer).
QUERY_MEASUREMENTS: dict[str, Measurement] = dict(
    [
        _query(
            "accuracy_gap_sum",
            "sum_i 1[c_i] - conf_T(i) (accuracy_gap_sum)",
            1.0,
            "1",
        ),
        _query(
            "accuracy_gap_curve",
            "the accuracy-gap sum at the anchor of an increasing public grid and its increments "
            "(accuracy_gap_sum at each T)",
            2.0,
            "2",
        ),
        _query(
            "clipped_nll_sum",
            "sum_i min(NLL_T(i), B) (clipped_nll_sum)",
            clip_bound_sensitivity,
            "B",
        ),
        _query(
            "clipped_nll_increments",
            "the increments of the clipped NLL sum along an increasing public grid "
            "(clipped_nll_sum at each T)",
            nll_curve_sensitivity,
            "B + min(B, log C)",
        ),
        _query(
            "bin_gaps",
            "per-bin sums of 1[c] - conf_T over equal-width bins (calibration_bins(...).gaps())",
            1.0,
            "1",
        ),
        _query(
            "bin_counts",
            "per-bin (correct, incorrect) counts (calibration_bins), returned as (correct, total)",
            1.0,
            "1",
        ),
        _query("count", "the number of rows n", 1.0, "1"),
    ]
)

#: The closed vocabulary: query name -> L1 sensitivity under add/remove one example, as text
#: (``B`` is the clip bound, passed with the query; ``C`` the public number of classes).
QUERIES: dict[str, str] = {q: m.formula for q, m in QUERY_MEASUREMENTS.items()}


def query_measurement(query: str) -> Measurement:
    """The measurement of the vocabulary query ``query``."""
    if query not in QUERY_MEASUREMENTS:
        raise ValueError(
            f"Unknown DataSource query {query!r}; the vocabulary is {', '.join(QUERIES)}."
        )
    return QUERY_MEASUREMENTS[query]


def query_sensitivity(
    query: str, bound: float | None = None, n_classes: int | None = None
) -> float:
    """L1 sensitivity of a vocabulary query under add/remove one example (its measurement)."""
    m = query_measurement(query)
    params: dict[str, float | int] = {}
    if "bound" in m.parameters:
        if bound is None:
            raise ValueError(f"{query} needs its clip bound B: the sensitivity depends on B.")
        params["bound"] = bound
    if "n_classes" in m.parameters:
        if n_classes is None:
            raise ValueError(
                f"{query} needs the number of classes C: its sensitivity is {m.formula}."
            )
        params["n_classes"] = n_classes
    return m.sensitivity_at(**params)

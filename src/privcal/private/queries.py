"""The :class:`~privcal.private.DataSource` query vocabulary: measurements and statistics.

One :class:`~privcal.privacy.measurement.Measurement` per query: the statistic, the Laplace
mechanism, the L1 sensitivity under add/remove one example (a number, or a function of the clip
bound ``B`` and the public class count ``C``), and the query method whose docstring derives it.
:data:`QUERIES`, :func:`query_sensitivity`, the ledger rows, ``privcal audit --list`` and the
table of ``docs/private.md`` all read these objects. A query's exact answer travels as a
:class:`Statistic`; a secure sum of it is decoded with the public :func:`share_plan`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privcal._params import POSITIVE, check_int
from privcal.privacy.distributed import DistributedPlan
from privcal.privacy.guarantee import Release
from privcal.privacy.measurement import Measurement, register_measurement

__all__ = [
    "DISTRIBUTED_LAPLACE",
    "MAX_ROWS",
    "QUERIES",
    "QUERY_MEASUREMENTS",
    "BinCounts",
    "RowPart",
    "Share",
    "Statistic",
    "check_edges",
    "check_grid",
    "check_part",
    "clip_bound_sensitivity",
    "curve_from_release",
    "curve_release",
    "distributed_laplace",
    "nll_curve_sensitivity",
    "query_measurement",
    "query_sensitivity",
    "share_plan",
    "to_scalar",
]

#: The mechanism a source's answer to a secure sum records (its discrete Laplace share).
DISTRIBUTED_LAPLACE = "distributed discrete laplace"


def distributed_laplace(threshold: int, n_parties: int) -> str:
    """The mechanism of one source's share, with what its epsilon rests on: ``t`` honest
    shares of ``K`` in the sum (one share alone carries ``1 / t`` of the noise)."""
    return (
        f"{DISTRIBUTED_LAPLACE} (shares for t={int(threshold)} of K={int(n_parties)}: the "
        "epsilon holds while t honest shares reach the sum; none is claimed for one alone)"
    )


def clip_bound_sensitivity(bound: float) -> float:
    """L1 sensitivity ``B`` of :meth:`DataSource.clipped_nll_sum` (one clipped term in
    ``[0, B]``)."""
    return POSITIVE.check(bound, "bound", "clip_bound_sensitivity")


def nll_curve_sensitivity(bound: float, n_classes: int) -> float:
    """L1 sensitivity ``B + min(B, log C)`` of :meth:`DataSource.clipped_nll_increments`.

    Derived in that method's docstring (add/remove one example; ``C`` public).
    """
    b = POSITIVE.check(bound, "bound", "nll_curve_sensitivity")
    c = check_int(n_classes, "n_classes", "nll_curve_sensitivity", low=2)
    return b + min(b, math.log(c))


def _query(
    query: str, statistic: str, sensitivity: float | Callable[..., float], formula: str
) -> tuple[str, Measurement]:
    proof = f"privcal.private.source.DataSource.{query}"
    m = Measurement(f"datasource.{query}", statistic, "laplace", "L1", sensitivity, formula, proof)
    return query, register_measurement(m)


#: query name -> its measurement (the source looks the measurement up here at every answer).
QUERY_MEASUREMENTS: dict[str, Measurement] = dict(
    [
        _query("accuracy_gap_sum", "sum_i 1[c_i] - conf_T(i) (accuracy_gap_sum)", 1.0, "1"),
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
        _query(
            "score_histogram",
            "counts of the conformity scores S(x_i, y_i) in the public bins (score_histogram)",
            1.0,
            "1",
        ),
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


def _increasing(values: Any, minimum: int) -> tuple[np.ndarray, bool]:
    """``values`` as floats, and whether they are a finite, strictly increasing 1-D array of at
    least ``minimum`` entries (the shape of every public grid)."""
    v = np.asarray(values, dtype=np.float64)
    ok = v.ndim == 1 and v.size >= minimum and np.all(np.isfinite(v)) and np.all(np.diff(v) > 0)
    return v, bool(ok)


def check_grid(temperatures: Any, owner: str) -> np.ndarray:
    """The public grid of a curve query as floats: non-empty, positive, finite, increasing."""
    t, ok = _increasing(temperatures, 1)
    if not ok or t[0] <= 0:
        raise ValueError(
            f"The 'temperatures' parameter of {owner} must be a non-empty 1-D array of positive, "
            f"finite, strictly increasing temperatures. Got {temperatures!r} instead."
        )
    return t


def check_edges(edges: Any, owner: str) -> np.ndarray:
    """The public bin edges of a score histogram: finite, strictly increasing, from 0 to 1."""
    e, ok = _increasing(edges, 2)
    if not ok or e[0] != 0.0 or e[-1] != 1.0:
        raise ValueError(
            f"The 'edges' parameter of {owner} must be a 1-D array of strictly increasing bin "
            f"edges from 0 to 1 (the public grid of the scores). Got {edges!r} instead."
        )
    return e


def curve_release(curve: np.ndarray, anchor: int) -> np.ndarray:
    """What :meth:`~privcal.private.DataSource.accuracy_gap_curve` releases: ``(G[a], diff(G))``.

    Works on the last axis, so ``curve`` may hold many curves (shape ``(..., k)``).
    """
    return np.concatenate([curve[..., anchor : anchor + 1], np.diff(curve, axis=-1)], axis=-1)


def curve_from_release(released: np.ndarray, anchor: int) -> np.ndarray:
    """Invert :func:`curve_release` (last axis): cumulative sums outward from the anchor."""
    base, inc = released[..., :1], released[..., 1:]
    right = base + np.cumsum(inc[..., anchor:], axis=-1)
    left = base - np.cumsum(inc[..., :anchor][..., ::-1], axis=-1)[..., ::-1]
    return np.concatenate([left, base, right], axis=-1)


#: Public bound on the rows of one source answering a secure sum (it sizes the modulus).
MAX_ROWS = 2**24


def to_scalar(released: Any) -> float:
    """The released value of a one-number query as a float (its post-processing)."""
    return float(np.asarray(released, dtype=np.float64).reshape(()))


@dataclass(frozen=True)
class RowPart:
    """One side of a split of a source's rows by a public random key (``split_rows``).

    Releases on the two sides of one key read disjoint rows, so they compose in parallel: the
    source charges the largest side's total, not the sum (:meth:`DataSource._charge`).
    """

    key: int
    fraction: float
    side: int

    def label(self, name: str) -> str:
        """The release's source label: the source's name and the side it read."""
        return f"{name} [split {self.key:016x} side {self.side}]"


def check_part(part: Any, owner: str) -> RowPart:
    """``part=(key, fraction, side)``: an int key, ``0 < fraction < 1``, side 0 or 1."""
    ok = isinstance(part, tuple | list) and len(part) == 3
    if ok:
        key, fraction, side = part
        ok = (
            isinstance(key, int | np.integer)
            and isinstance(fraction, float | int)
            and 0.0 < float(fraction) < 1.0
            and side in (0, 1)
        )
    if not ok:
        raise ValueError(
            f"The 'part' parameter of {owner} must be (key, fraction, side): an int key, a "
            f"fraction in (0, 1) and side 0 or 1. Got {part!r} instead."
        )
    return RowPart(int(key), float(fraction), int(side))


@dataclass(frozen=True)
class Statistic:
    """One query's exact answer and what its release needs to know.

    ``value`` is the vector released (before noise); ``measurement`` is the query's
    (:data:`~privcal.private.queries.QUERY_MEASUREMENTS`, read when the statistic is computed)
    and ``params`` the public parameters its sensitivity reads; ``moved`` the most coordinates
    one example can move; ``row_bound`` the most one example adds to a coordinate's absolute
    value; ``finish`` the post-processing from the released vector to what the query returns.
    """

    label: str
    value: float | np.ndarray
    measurement: Measurement
    moved: int
    row_bound: float
    finish: Callable[[Any], Any]
    params: dict[str, Any] = field(default_factory=dict)
    part: RowPart | None = None

    @property
    def sensitivity(self) -> float:
        """The L1 sensitivity under add/remove one example, read from the measurement."""
        return self.measurement.sensitivity_at(**self.params)

    def record(self, epsilon: float, source: str, mechanism: str | None = None) -> Release:
        """The release of this statistic at ``epsilon`` whose noise is drawn elsewhere."""
        return self.measurement.record(
            self.label, epsilon, source=source, mechanism=mechanism, **self.params
        )


@dataclass(frozen=True)
class Share:
    """A source's upload to a secure sum and the public plan that decodes the sum.

    Attributes
    ----------
    upload : ndarray of uint64
        Residues of the ring (what the secure sum receives from this source).
    plan : DistributedPlan
        Public: encoding, share law, threshold, bounds.
    finish : callable
        The query's post-processing of the decoded sum (e.g. the curve from its increments).
    label : str
        The query as recorded in the report.
    """

    upload: np.ndarray
    plan: DistributedPlan
    finish: Callable[[Any], Any]
    label: str


def share_plan(
    stat: Statistic, epsilon: float, n_parties: int, threshold: int, bits: int, max_rows: int
) -> DistributedPlan:
    """The public plan of one query's secure sum: the discrete Laplace shares of
    :meth:`~privcal.private.DataSource.share` for ``stat``'s sensitivity, the coordinates one
    example moves, and ``max_rows`` times its row bound as each party's value bound. Reads only
    ``stat``'s public fields (never its value beyond its shape), so the aggregator builds the same
    plan from :func:`~privcal.private.parallel.public_statistic`."""
    return DistributedPlan.laplace(
        stat.sensitivity,
        epsilon,
        stat.moved,
        n_parties=n_parties,
        threshold=threshold,
        value_bound=max_rows * stat.row_bound,
        shape=np.shape(stat.value),
        bits=bits,
    )


@dataclass(frozen=True)
class BinCounts:
    """Noisy per-bin counts returned by :meth:`~privcal.private.DataSource.bin_counts`.

    Attributes
    ----------
    correct : ndarray of shape (M,)
        Noisy number of correctly classified examples per bin.
    incorrect : ndarray of shape (M,)
        Noisy number of misclassified examples per bin (released independently).
    """

    correct: np.ndarray
    incorrect: np.ndarray

    @property
    def total(self) -> np.ndarray:
        """``correct + incorrect``: the noisy number of examples per bin (post-processing)."""
        return self.correct + self.incorrect

    def __add__(self, other: Any) -> BinCounts:
        """Sum of two sources' counts (``0`` is the neutral start of a sum)."""
        if isinstance(other, BinCounts):
            return BinCounts(self.correct + other.correct, self.incorrect + other.incorrect)
        if isinstance(other, (int, float)) and other == 0:
            return self
        return NotImplemented

    __radd__ = __add__

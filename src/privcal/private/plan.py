"""The search plan of a private temperature fit: how its budget is spent, from public
quantities only.

:func:`search_plan` validates the search parameters of
:class:`~privcal.private.PrivateTemperatureScaling` (and luo2020's batched protocol) and lays out
the queries: the curve's public grid and anchor, or the iterative searches' evaluations and their
budgets (``epsilon`` split exactly, :func:`~privcal.private.parallel.split_budget`). The defaults
were chosen by measurement (``docs/private.md``). :class:`TooFewRowsError` is the refusal of a
fit on arrays too small for its release to inform, before any release.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from privcal._params import EPSILON, check_int, check_option, check_range
from privcal.calibrators.search import geometric_grid
from privcal.private.parallel import split_budget

__all__ = [
    "AUTO_HIGH",
    "AUTO_LOW",
    "AUTO_SEARCH",
    "AUTO_SPLIT",
    "CURVE_ANCHOR",
    "CURVE_HIGH",
    "CURVE_LOW",
    "CURVE_RATIO",
    "PAPER_RANGE",
    "SEARCHES",
    "SearchPlan",
    "TooFewRowsError",
    "search_plan",
    "size_term",
]


#: ``t_range="auto"``: bisection searches ``[AUTO_LOW, AUTO_HIGH]``; golden section first spends
#: one query on the sign of the accuracy gap at ``AUTO_SPLIT`` and then searches
#: ``[AUTO_LOW, AUTO_SPLIT]`` or ``[AUTO_SPLIT, AUTO_HIGH]``. Chosen by measurement
#: (``docs/private.md``).
AUTO_LOW, AUTO_SPLIT, AUTO_HIGH = 0.5, 3.0, 30.0
#: ``search="curve"`` with ``t_range="auto"``: the grid spans ``[CURVE_LOW, CURVE_HIGH]``
#: (under-confident models need T < 1; shifted data reach T of 7 to 28 in ``docs/private.md``)
#: in steps of a factor ``CURVE_RATIO`` (17 points), anchored at the point nearest
#: ``CURVE_ANCHOR`` (where the curve's noise is smallest). Chosen by measurement.
CURVE_LOW, CURVE_HIGH, CURVE_RATIO, CURVE_ANCHOR = 0.25, 64.0, float(np.sqrt(2.0)), 2.0
#: Seed 000's search range, the ``t_range="auto"`` of ``search="golden-section"``.
PAPER_RANGE = (0.5, 3.0)
#: The search names; the objectives each search serves (the others take every objective).
SEARCHES = ("auto", "curve", "bisect", "golden", "golden-section")
_OBJECTIVES_OF = {"curve": ("acc", "nll"), "bisect": ("acc",)}
#: ``search="auto"``: the search of each objective, chosen by measurement (``docs/private.md``).
AUTO_SEARCH = {"acc": "curve", "nll": "curve", "ece": "golden"}
_WHY = {
    "curve": "needs a release whose sensitivity does not grow with the grid: the monotone "
    "accuracy gap or the clipped NLL's increments",
    "bisect": "needs the accuracy gap, which is monotone in T",
}


def size_term(rows: float) -> str:
    """The public term of a fit that refuses fewer than ``rows`` rows (the bit it reads)."""
    return f"n >= {int(np.ceil(rows))} (the one bit a fit on arrays reads: fewer rows are refused)"


class TooFewRowsError(ValueError):
    """A private fit on arrays refused before any release: too few rows for its release to
    show anything (:meth:`PrivateTemperatureScaling.informative_rows`).

    ``rows`` is what was given, ``needed`` the fewest rows that could inform the fit at its
    epsilon, ``epsilon_needed`` the smallest epsilon that could on ``rows`` rows.
    """

    def __init__(self, rows: int, needed: int, epsilon_needed: float, message: str) -> None:
        super().__init__(message)
        self.rows, self.needed, self.epsilon_needed = rows, needed, epsilon_needed


@dataclass(frozen=True)
class SearchPlan:
    """How a private temperature fit spends its budget (shared by the estimator and luo2020).

    Attributes
    ----------
    search : {"curve", "bisect", "golden", "golden-section"}
    t_range : (float, float) or None
        The search range; ``None`` when a locating query chooses it.
    locate : bool
        Whether the first query is the accuracy-gap sign at :data:`AUTO_SPLIT`.
    evaluations : int
        Number of search evaluations (each one query per source; 1 for the curve).
    epsilons : tuple of float
        Per-query budgets in query order (locating query first); ``fsum == epsilon``.
    grid : tuple of float
        The public temperatures of the curve query (empty for the other searches).
    anchor : int
        Index into ``grid`` of the value Acc-T's curve query releases directly (NLL-T's
        increments have no anchor).
    """

    search: str
    t_range: tuple[float, float] | None
    locate: bool
    evaluations: int
    epsilons: tuple[float, ...]
    grid: tuple[float, ...] = ()
    anchor: int = 0

    def ranges(self, gap_at_split: Any) -> Any:
        """The ranges picked by the locating answers (vectorised): ``(low, high)`` arrays."""
        g = np.asarray(gap_at_split, dtype=np.float64)
        low = np.where(g < 0.0, AUTO_SPLIT, AUTO_LOW)
        high = np.where(g < 0.0, AUTO_HIGH, AUTO_SPLIT)
        return low, high


def search_plan(
    objective: str,
    epsilon: float,
    iterations: int,
    t_range: Any = "auto",
    search: str = "auto",
    owner: str = "PrivateTemperatureScaling",
) -> SearchPlan:
    """Validate the parameters and lay out the queries of a private temperature fit."""
    check_option(objective, "objective", owner, ("nll", "ece", "acc"))
    eps = EPSILON.check(epsilon, "epsilon", owner)
    k = check_int(iterations, "iterations", owner, low=1)
    check_option(search, "search", owner, SEARCHES)
    if search == "auto":
        search = AUTO_SEARCH[objective]
    allowed = _OBJECTIVES_OF.get(search)
    if allowed is not None and objective not in allowed:
        names = " or ".join(f"objective={o!r}" for o in allowed)
        raise ValueError(
            f"The 'search' parameter of {owner} can be {search!r} only with {names} (it "
            f"{_WHY[search]}). Got search={search!r} with objective={objective!r} instead."
        )
    if isinstance(t_range, str):
        check_option(t_range, "t_range", owner, ("auto",))
        auto: dict[str, tuple[float, float] | None] = {
            "curve": (CURVE_LOW, CURVE_HIGH),
            "bisect": (AUTO_LOW, AUTO_HIGH),
            "golden": None,
            "golden-section": PAPER_RANGE,
        }
        rng = auto[search]
    else:
        rng = check_range(t_range, "t_range", owner)
    if search == "curve":
        assert rng is not None
        grid = geometric_grid(rng[0], rng[1], CURVE_RATIO)
        anchor = int(np.argmin(np.abs(np.log(grid / CURVE_ANCHOR))))
        return SearchPlan(search, rng, False, 1, (eps,), tuple(map(float, grid)), anchor)
    locate = rng is None
    evaluations = k + 1
    queries = evaluations + int(locate)
    return SearchPlan(search, rng, locate, evaluations, tuple(split_budget(eps, queries)))

"""Deployed-path audits of prediction sets across parties: over sources and per group.

``private-conformal-sources`` (and ``-distributed``): ``PrivateConformal().fit(sources=[a, b,
c])`` with the defaults (two stages on a random row split, secure noise), read where the
aggregator reads it. Every row of every source has LAC score exactly 0, so it lies in the first
bin of **any** grid, the stage-2 grid included (a function of the stage-1 release); the neighbours
are source ``a``'s rows and the same plus one such row (add/remove, the report's relation). The
added row falls on one side of the split, so it adds 1 to the first count of exactly one stage:
the audit reads the sum of the two stages' first counts, of ``a``'s own answers for ``"local"``
(what the aggregator receives from ``a``) and of the decoded secure sums for ``"distributed"``
(the aggregator's view, post-processed). Plant: the histogram (or its share) sized for the
normalised histogram's sensitivity ``1/n``. A side filter dropped while the sides are charged in
parallel (the row then counted in both stages) doubles the loss, which no affordable run count
resolves (``epsilon_lower`` 0.25 at 300 runs); the sides' disjointness is checked exactly instead
(``tests/conformal/test_conformal_attacks.py``).

``private-conformal-groups``: ``PrivateConformal().fit(logits, labels, groups=g)`` with two
groups; the audited group holds the substitute neighbours of ``private-conformal``, the other a
copy of its ``D``; the audit reads the sum of both groups' thresholds. Plant: every group's fit
draws from one hard-coded seed. A group's rows counted in two groups (the releases would then
compose by basic composition, not in parallel) costs at most a factor 2 that no affordable run
count resolves on thresholds; the partition is checked directly instead
(``tests/conformal/test_conformal_sources.py``).
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from typing import Any

import numpy as np

import privcal.conformal.private.estimator as estimator_module
from privcal.audits._registry import AuditReport, audit_release, draws, register, tail_events
from privcal.audits.conformal import CONFORMAL_N, _seeded, conformal_neighbours
from privcal.audits.plants import Plant, patched
from privcal.conformal.quantile import RANK_QUANTILE
from privcal.private.queries import QUERY_MEASUREMENTS
from privcal.private.source import DataSource

__all__ = ["SOURCES_AUDITS", "SOURCE_ROWS", "audit_conformal_groups", "audit_conformal_sources"]

#: Rows of each source in the sources audits (all with LAC score 0); ``D'`` adds one to ``a``.
SOURCE_ROWS = 40


def _zero_score_rows(n: int, source: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` distinct five-class rows of ``source`` whose label has probability exactly 1 (LAC
    score 0)."""
    z = np.zeros((n, 5))
    z[:, 0] = 800.0
    z[:, 1] = -(np.arange(n) + 1000.0 * source)  # distinct rows (sources hold disjoint data)
    return z, np.zeros(n, dtype=np.int64)


class _Seen(DataSource):
    """The audited source: the library's own answers, kept as the aggregator receives them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.answers: list[np.ndarray] = []

    def score_histogram(self, *args: Any, **kwargs: Any) -> np.ndarray:
        answer = super().score_histogram(*args, **kwargs)
        self.answers.append(np.asarray(answer))
        return answer


def audit_conformal_sources(
    runs: int, alpha: float, aggregation: str = "local", groups: str | None = None
) -> AuditReport:
    """Audit ``PrivateConformal(aggregation=...).fit(sources=[a, b])`` (module docstring)."""
    from privcal.conformal import FullSetWarning, PrivateConformal

    data = (_zero_score_rows(SOURCE_ROWS), _zero_score_rows(SOURCE_ROWS + 1))

    def fit(side: int) -> tuple[Any, _Seen]:
        audited = _Seen(*data[side], name="a")
        others = [DataSource(*_zero_score_rows(SOURCE_ROWS, 1), name="b")]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FullSetWarning)
            est = PrivateConformal(aggregation=aggregation).fit(
                sources=[audited, *others], groups=groups
            )
        return est, audited

    def read(side: int) -> float:
        est, audited = fit(side)
        if aggregation == "local":
            return float(sum(answer[0] for answer in audited.answers))
        return float(sum(counts[0] for counts in est.stage_counts_))

    draw = draws(read)

    name = "private-conformal-sources" + ("-distributed" if aggregation == "distributed" else "")
    name += "-groups" if groups else ""
    seen = "a's answers" if aggregation == "local" else "the decoded secure sums"
    return audit_release(
        name,
        f'PrivateConformal(aggregation="{aggregation}").fit(sources=[a, b]'
        + (', groups="predicted"' if groups else "")
        + f"): the first count of both stages in {seen}",
        f"a: {SOURCE_ROWS} rows of LAC score 0; D' adds one more (b fixed: other rows of score 0)",
        draw,
        fit(0)[0].privacy_report_,
        runs=runs,
        alpha=alpha,
        events=tail_events(draw, runs),
    )


def _normalised_sensitivity() -> Any:
    """The score histogram's sensitivity taken as that of the normalised histogram (``1/n``,
    ``n = SOURCE_ROWS``) while the counts are released: noise ``n`` times too small."""
    real = DataSource._score_histogram

    def normalised(self: Any, *args: Any, **kwargs: Any) -> Any:
        stat = real(self, *args, **kwargs)
        wrong = dataclasses.replace(stat.measurement, sensitivity=1.0 / SOURCE_ROWS)
        return dataclasses.replace(stat, measurement=wrong)

    return patched((DataSource, "_score_histogram", normalised))


_NORMALISED = Plant(
    "the histogram (or its share) sized for the normalised histogram's sensitivity 1/n",
    _normalised_sensitivity,
    150,
)
#: The sources audits: name -> (summary, aggregation, groups); one plant for all three.
SOURCES_AUDITS = {
    "private-conformal-sources": (
        "PrivateConformal().fit(sources=[a, b]) (defaults: local noise, two stages), a's "
        "answers as the aggregator receives them",
        "local",
        None,
    ),
    "private-conformal-sources-distributed": (
        "PrivateConformal(aggregation='distributed').fit(sources=[a, b]): the decoded secure "
        "sums (t = K = 2, discrete Laplace shares)",
        "distributed",
        None,
    ),
    "private-conformal-sources-groups": (
        "PrivateConformal().fit(sources=[a, b], groups='predicted'): one histogram per "
        "predicted class, a's answers (the rows of score 0 are class 0's: its first count)",
        "local",
        "predicted",
    ),
}
for _name, (_summary, _aggregation, _groups) in SOURCES_AUDITS.items():
    register(
        _name,
        summary=_summary,
        runs=150,
        slow=True,
        measurements=[QUERY_MEASUREMENTS["score_histogram"]],
        plants={"normalised-sensitivity": _NORMALISED},
    )(functools.partial(audit_conformal_sources, aggregation=_aggregation, groups=_groups))


# ------------------------------------------------------------------ per group
#: Groups in the groups audit: the audited one and ``GROUPS - 1`` copies of its ``D``.
GROUPS = 2


def _groups_data(side: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Group 0: the substitute neighbours of ``private-conformal``; the other groups: copies of
    ``D`` (rows made distinct)."""
    d, d2, _ = conformal_neighbours("substitute")
    z0, y0 = (d, d2)[side]
    copies = [d[0] + np.array([0.0, 1e-9 * (k + 1)]) for k in range(GROUPS - 1)]
    z = np.vstack([z0, *copies])
    y = np.concatenate([y0, *([d[1]] * (GROUPS - 1))])
    return z, y, np.repeat(np.arange(GROUPS), CONFORMAL_N)


def audit_conformal_groups(runs: int, alpha: float) -> AuditReport:
    """Audit ``PrivateConformal().fit(logits, labels, groups=g)``: the sum of the groups'
    thresholds (full sets read as 2)."""
    from privcal.conformal import PrivateConformal

    def fit(side: int) -> Any:
        z, y, g = _groups_data(side)
        return PrivateConformal().fit(z, y, groups=g)

    def read(side: int) -> float:
        t = fit(side).thresholds_
        return float(sum(2.0 if np.isinf(v) else v for v in t.values()))

    draw = draws(read)

    return audit_release(
        "private-conformal-groups",
        f"PrivateConformal().fit(logits, labels, groups=g).thresholds_ ({GROUPS} groups, summed)",
        f"group 0: {CONFORMAL_N} LAC scores, one moved from 0 to 1 (substitute within the "
        "group); the other group fixed",
        draw,
        fit(0).privacy_report_,
        runs=runs,
        alpha=alpha,
        events=tail_events(draw, runs),
    )


register(
    "private-conformal-groups",
    summary=f"PrivateConformal().fit(logits, labels, groups=g) with {GROUPS} groups, the sum of "
    "their thresholds",
    runs=150,
    slow=True,
    measurements=[RANK_QUANTILE],
    plants={"reused-seed": _seeded(estimator_module, 1, "every group's fit")},
)(audit_conformal_groups)

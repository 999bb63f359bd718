"""Several private data sources in one fit: the rounds that ask them all, and the checks that
make their guarantees compose in parallel.

A fit over ``K`` sources states each source's guarantee for its own examples (parallel
composition, the ``max`` over sources), which holds only when no example lies in two sources:
:func:`check_sources` refuses any list that could break it. Before any budget is spent,
:func:`check_budgets` and :func:`check_share_rows` refuse a fit some source cannot pay for or
cannot join by secure sum.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from privcal.privacy import BudgetExceededError, PrivacyReport, Release
from privcal.privacy.distributed import AggregatorView, DistributedPlan
from privcal.private.queries import MAX_ROWS, Statistic, query_measurement
from privcal.private.source import SOURCE_PUBLIC, DataSource

__all__ = [
    "answer_all",
    "check_budgets",
    "check_disjoint",
    "check_share_rows",
    "check_sources",
    "public_statistic",
    "share_all",
    "sources_report",
    "split_budget",
]


def share_all(
    sources: Sequence[DataSource], method: str, epsilon: float, threshold: int, **kwargs: Any
) -> tuple[AggregatorView, DistributedPlan, Callable[[Any], Any]]:
    """One query answered by every source through a secure sum: the aggregator's view, the
    public plan and the query's post-processing. Sources of one kind answer together
    (:meth:`DataSource.share_together`: an in-process :class:`SecureSum`, or one SecAgg+ round
    over Flower); each source charges its own ledger before it uploads."""
    return _kind(sources).share_together(list(sources), method, epsilon, threshold, **kwargs)


def _kind(sources: Sequence[DataSource]) -> type[DataSource]:
    """The sources' one class (its transport answers them together), or :class:`DataSource`."""
    kinds = {type(src) for src in sources}
    return kinds.pop() if len(kinds) == 1 else DataSource


def answer_all(sources: Sequence[DataSource], method: str, **kwargs: Any) -> list[Any]:
    """Every source's answer to one query: sources of one kind answer together
    (:meth:`DataSource.answer_together`, e.g. one message round over Flower), mixed kinds one
    after the other. The answers and the ledgers' records are those of single calls."""
    return _kind(sources).answer_together(list(sources), method, **kwargs)


def check_sources(sources: Any, owner: str) -> list[DataSource]:
    """Validate a non-empty list of distinct DataSources with one class count."""
    try:
        srcs = list(sources)
    except TypeError:
        srcs = None
    if not srcs:
        raise ValueError(
            f"The 'sources' parameter of {owner} must be a non-empty list of DataSource. "
            f"Got {sources!r} instead."
        )
    for s in srcs:
        if not isinstance(s, DataSource):
            raise ValueError(
                f"The 'sources' parameter of {owner} must be a non-empty list of DataSource. "
                f"Got an element {s!r} instead."
            )
    if len({id(s) for s in srcs}) != len(srcs):
        raise ValueError(
            f"The 'sources' parameter of {owner} lists the same DataSource twice; sources must "
            "hold disjoint data (their guarantees compose in parallel)."
        )
    check_disjoint(srcs, owner)
    classes = sorted({s.n_classes for s in srcs})
    if len(classes) > 1:
        raise ValueError(
            f"The sources given to {owner} disagree on the number of classes: {classes}. All "
            "sources must score the same classifier."
        )
    return srcs


def _same_data_error(
    owner: str, a: DataSource, b: DataSource, what: str, hint: str = ""
) -> ValueError:
    return ValueError(
        f"The 'sources' parameter of {owner}: sources {a.name!r} and {b.name!r} {what}. Their "
        "guarantees compose in parallel only over disjoint data: list the data once (merge the "
        "two into one DataSource, or remove the shared rows from one of them)." + hint
    )


def check_disjoint(sources: list[DataSource], owner: str) -> None:
    """Refuse sources that share a ledger file, hold the same data or share any row.

    Parallel composition (``max`` over sources) is valid only when each example lies in at most one
    source; two sources over the same rows would each pay ``epsilon`` while those rows lose the sum.
    Row identity is the 64-bit :func:`~privcal.private.rows.row_digests` (equal logits and label).
    """
    ledgers: dict[Path, DataSource] = {}
    prints: dict[str, DataSource] = {}
    for s in sources:
        if s.odometer.ledger is not None:
            key = s.odometer.ledger.resolve()
            if key in ledgers:
                raise _same_data_error(owner, ledgers[key], s, f"share the ledger {str(key)!r}")
            ledgers[key] = s
        if s.fingerprint in prints:
            raise _same_data_error(owner, prints[s.fingerprint], s, "hold the same data")
        prints[s.fingerprint] = s
    digests = np.concatenate([s._digests for s in sources])
    owners = np.repeat(np.arange(len(sources)), [s._digests.size for s in sources])
    order = np.argsort(digests, kind="stable")
    d, o = digests[order], owners[order]
    clash = np.flatnonzero((d[1:] == d[:-1]) & (o[1:] != o[:-1]))
    if clash.size:
        i, j = int(o[clash[0]]), int(o[clash[0] + 1])
        shared = np.intersect1d(sources[i]._digests, sources[j]._digests).size
        raise _same_data_error(
            owner,
            sources[i],
            sources[j],
            f"share {shared} identical rows (logits and label)",
            " Rows of different examples whose scores coincide (rounded exports, saturated "
            "probabilities) look the same: give unrounded logits.",
        )


def sources_report(
    releases: list[Release],
    sources: list[DataSource],
    public: tuple[str, ...] = (),
    threat: tuple[str, ...] = (),
) -> PrivacyReport:
    """The report of a fit over ``sources``: add/remove one example of one source.

    Public: :data:`SOURCE_PUBLIC`, the number of sources, and the fit's own ``public`` items (plus
    :data:`~privcal.private.queries.MAX_ROWS` when the answers went through a secure sum). The noise
    is ``"seeded"`` (not private) as soon as one source drew seeded noise. ``threat`` is the threat
    model (:func:`privacy.distributed.threat_model`).
    """
    shared = any("distributed" in r.mechanism for r in releases)
    bound = max(s.max_rows for s in sources)
    rows = (f"each source holds at most {bound} rows (sizes the secure sum)",) if shared else ()
    declared = (*SOURCE_PUBLIC, f"the number of sources ({len(sources)})", *public, *rows)
    noise = "seeded" if any(not s.noise.secure for s in sources) else "secure"
    return PrivacyReport(
        releases, "example", "add/remove", public=declared, noise=noise, threat=threat
    )


def check_share_rows(sources: list[DataSource], owner: str) -> None:
    """Refuse, before any budget is spent, a source that cannot upload shares to an in-process
    secure sum (one answered over a transport, such as Flower's ``RemoteSource``, adds its own
    noise: mixing it into a distributed fit would release its answer with a share's noise
    only), or one too large for the secure sum's bound."""
    for s in sources:
        if not s.uploads_shares:
            raise ValueError(
                f"The 'sources' parameter of {owner}: source {s.name!r} ({type(s).__name__}) "
                "answers with its own noise and cannot upload shares to a secure sum; fit "
                "with aggregation='local', or give only in-process DataSources."
            )
        rows = getattr(s, "_z", None)  # a source held by a node checks its rows itself
        if rows is not None and rows.shape[0] > MAX_ROWS:
            raise ValueError(
                f"The 'sources' parameter of {owner}: source {s.name!r} holds more than "
                f"MAX_ROWS={MAX_ROWS} rows, the public bound a secure sum is sized for; split it "
                "into several sources."
            )


def check_budgets(sources: list[DataSource], epsilon: float) -> None:
    """Refuse to start when a source cannot pay ``epsilon`` (nothing is spent anywhere)."""
    for s, ok in zip(sources, answer_all(sources, "can_spend", epsilon=epsilon), strict=True):
        if not ok:
            raise BudgetExceededError(s.name, "fit", s.budget, s.spent, epsilon)


def split_budget(epsilon: float, parts: int) -> list[float]:
    """``parts`` per-query budgets that sum (by :func:`math.fsum`) to ``epsilon`` exactly.

    The first ``parts - 1`` are ``epsilon / parts``; the last is ``epsilon - fsum(first)``, which
    is exact (Sterbenz) and differs from ``epsilon / parts`` by at most an ulp, so the composed
    guarantee is exactly ``epsilon`` rather than ``epsilon`` plus rounding.
    """
    if parts == 1:
        return [epsilon]
    share = epsilon / parts
    head = [share] * (parts - 1)
    last = epsilon - math.fsum(head)  # exact by Sterbenz's lemma
    # fsum rounds the exact sum of head once; nudge the last share by ulps until the composed
    # total is epsilon itself (a few steps at most: ulp(last) < ulp(epsilon)).
    for _ in range(64):
        total = math.fsum([*head, last])
        if total == epsilon:
            break
        last = math.nextafter(last, -math.inf if total > epsilon else math.inf)
    else:  # pragma: no cover - cannot happen for finite positive epsilon
        raise RuntimeError(f"cannot split epsilon={epsilon!r} into {parts} exact parts")
    return [*head, last]


def public_statistic(query: str, n_classes: int, **params: Any) -> Statistic:
    """``query``'s statistic on a public one-row placeholder of ``n_classes`` classes.

    A statistic's label, sensitivity, moved coordinates, row bound, shape and post-processing
    depend on the query's parameters and the class count only, never on the rows (they are the
    add/remove bounds of the query's docstring); only its value does, and the value here is the
    placeholder's. An aggregator that holds no data builds the public plan of a secure sum from it
    (:func:`~privcal.private.queries.share_plan`), the same plan the sources build from their own
    rows.
    """
    query_measurement(query)  # a name of the vocabulary
    placeholder = DataSource(np.zeros((1, int(n_classes))), np.zeros(1, dtype=np.int64))
    stat: Statistic = getattr(placeholder, f"_{query}")(**params)
    return stat

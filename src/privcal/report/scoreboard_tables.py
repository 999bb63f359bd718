"""Blocks of scoreboard rows: the tables of ``privcal bench scoreboard``'s output (read back by
``privcal report``) and of the demo's scoreboard section, one layout for both.

A row is a dict of :func:`privcal.experiments.scoreboard.calibration_row` (or a conformal row):
raw values, errors as fractions, ``worse`` and ``why`` from the paired worse-than-nothing test.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from privcal.report.blocks import column, table

__all__ = ["calibration_table", "conformal_table", "mark_worse"]


def mark_worse(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows``, each one marked worse than doing nothing given the mark ``WORSE (why)``."""
    for r in rows:
        if r.get("worse"):
            r["_mark"] = f"WORSE ({r['why']})" if r.get("why") else "WORSE"
    return list(rows)


def calibration_table(
    title: str,
    rows: Sequence[dict[str, Any]],
    *,
    error: str = "ECE",
    data_set: bool = True,
    source: str | None = None,
) -> dict[str, Any]:
    """A table of calibration rows: errors in percent, the paired difference to doing nothing
    (of ``error``, the error the worse-than-nothing test compares) ± its SE in percentage points,
    and the ratio to the non-private twin; ``data_set`` adds the data set column."""
    return table(
        title,
        [
            *([column("dataset", "Data set")] if data_set else []),
            column("method", "Method"),
            column("epsilon", "ε", "epsilon"),
            column("ece", "ECE", "percent"),
            column("cwece", "Classwise ECE", "percent"),
            column("accuracy", "Accuracy", "percent"),
            column("diff", f"vs none, {error}", "pp", se="diff_se"),
            column("ratio", "Ratio to twin", "ratio"),
        ],
        rows,
        source=source,
    )


def conformal_table(
    title: str,
    rows: Sequence[dict[str, Any]],
    *,
    data_set: bool = True,
    note: str | None = None,
    source: str | None = None,
) -> dict[str, Any]:
    """A table of conformal rows: coverage ± its SE, mean set size and its ratio to split
    conformal's; ``data_set`` adds the data set column."""
    return table(
        title,
        [
            *([column("dataset", "Data set")] if data_set else []),
            column("method", "Method"),
            column("epsilon", "ε", "epsilon"),
            column("coverage", "Coverage", "percent", se="coverage_se"),
            column("size", "Mean size", "number"),
            column("ratio", "Size ratio to split", "ratio"),
        ],
        rows,
        note=note,
        source=source,
    )

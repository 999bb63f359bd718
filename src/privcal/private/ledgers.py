"""A source over a scores file and its ledger: create it (``privcal source init``) and reopen it.

The ledger (a SQLite file, :mod:`privcal.privacy.store`) keeps the source's budget and spends
and a ``source`` row naming the scores file and its SHA-256, so a reopened source continues the
record of exactly the data it was spent on. :meth:`DataSource.init_ledger
<privcal.private.DataSource.init_ledger>` and :meth:`DataSource.open
<privcal.private.DataSource.open>` are the public way in.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from privcal.data.io import read_scores
from privcal.privacy import NoiseSource, store
from privcal.private.rows import file_sha256

if TYPE_CHECKING:
    from privcal.private.source import DataSource

__all__ = ["init_source_ledger", "open_source_ledger"]

_S = TypeVar("_S", bound="DataSource")


def init_source_ledger(
    cls: type[_S],
    data: str | Path,
    ledger: str | Path,
    budget: float,
    name: str,
    input: str,
    allow_seeded_noise: bool = False,
) -> _S:
    """:meth:`DataSource.init_ledger`: the source over ``data`` with a new ledger bound to it
    (``allow_seeded_noise`` takes effect only when this call creates the ledger file)."""
    if not isinstance(allow_seeded_noise, bool):
        raise ValueError(
            "The 'allow_seeded_noise' parameter of DataSource.init_ledger must be True or "
            f"False. Got {allow_seeded_noise!r} instead."
        )
    data_path = Path(data).resolve()
    scores = read_scores(data_path, input=input)  # type: ignore[arg-type]
    if scores.logits is None:
        raise ValueError(
            f"{str(data_path)!r} holds top-label scores only; a DataSource needs full "
            "logit or probability vectors."
        )
    ledger = Path(ledger)
    existed = ledger.exists()  # the owner's choice of noise is made when the ledger is created
    src = cls(scores.logits, scores.labels, budget=budget, ledger=ledger, name=name)
    digest = file_sha256(data_path)
    record = {"data": str(data_path), "sha256": digest, "n_classes": src.n_classes}
    seeded = allow_seeded_noise and not existed
    record.update(input=input, created=time.time(), seeded_noise=int(seeded))
    row = store.claim_row(ledger, "source", record, ("data", "sha256"))
    if row is None and allow_seeded_noise and not seeded:
        raise ValueError(
            f"The ledger {str(ledger)!r} existed before: whether a source takes seeded noise is "
            "its owner's choice, made when the ledger is created, so it accepts secure noise "
            "only. Create a new ledger with --allow-seeded-noise for a simulation."
        )
    if row is not None and (row[0] != str(data_path) or row[1] != digest):
        raise ValueError(
            f"The ledger {str(ledger)!r} already belongs to the data {row[0]!r} "
            f"(sha256 {row[1][:12]}...); a ledger keeps the budget of one data set."
        )
    return src


def open_source_ledger(
    cls: type[_S], ledger: str | Path, noise: NoiseSource | None, name: str | None
) -> _S:
    """:meth:`DataSource.open`: the source of an existing ledger, its data checked unchanged."""
    path = Path(ledger)
    if not path.is_file():
        raise ValueError(f"No source ledger at {str(path)!r}; create one with 'source init'.")
    src_row, bud_row = store.single_rows(
        path, {"source": ("data", "sha256", "input"), "budget": ("epsilon", "name")}
    )
    if src_row is None or bud_row is None:
        raise ValueError(
            f"{str(path)!r} is not a privcal source ledger (no 'source' and 'budget' rows); "
            "create one with 'privcal source init'."
        )
    data, digest, kind = src_row
    data_path = Path(data)
    if not data_path.is_file():
        raise ValueError(f"The data {data!r} of the source ledger {str(path)!r} is missing.")
    if file_sha256(data_path) != digest:
        raise ValueError(
            f"The data {data!r} changed since the source ledger {str(path)!r} was created; "
            "its privacy record no longer describes it."
        )
    if noise is not None and not getattr(noise, "secure", True):
        (seeded,) = store.single_rows(path, {"source": ("seeded_noise",)})
        if seeded is None or not seeded[0]:  # a ledger written before the column: secure only
            raise ValueError(
                f"The source ledger {str(path)!r} accepts secure noise only: seeded noise "
                f"({noise!r}, --seed) is reproducible by whoever holds the seed, so its releases "
                "would not be private while the ledger records them as spent. Its owner opts in "
                "when creating it ('privcal source init --allow-seeded-noise', for tests and "
                "simulations); drop --seed to answer with secure noise."
            )
    scores = read_scores(data_path, input=kind)
    return cls(
        scores.logits,
        scores.labels,
        budget=float(bud_row[0]),
        ledger=path,
        noise=noise,
        name=str(bud_row[1]) if name is None else name,
    )

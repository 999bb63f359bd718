"""A Flower node answers every DataSource query a private estimator sends to a RemoteSource."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")

from privcal.federated.flower.sources import QUERIES, RemoteSource, answer_source_query
from privcal.private.queries import QUERIES as SOURCE_QUERIES
from privcal.private.source import DataSource

#: Queries RemoteSource refuses by design (it says so with NotImplementedError).
NOT_FORWARDED = {"bin_counts"}


def test_every_source_query_is_forwarded() -> None:
    """A query missing here would fall through to DataSource's local method on the server."""
    for query in set(SOURCE_QUERIES) - NOT_FORWARDED:
        assert query in QUERIES, query
        assert getattr(RemoteSource, query) is not getattr(DataSource, query), query
        # the forwarded signature is the local one
        remote = inspect.signature(getattr(RemoteSource, query))
        local = inspect.signature(getattr(DataSource, query))
        assert list(remote.parameters) == list(local.parameters), query


def test_node_answers_clipped_nll_increments(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    z = rng.normal(size=(50, 4))
    y = rng.integers(0, 4, size=50)
    node = {"ledger": str(tmp_path / "ledger.sqlite"), "budget": 1.0, "name": "n0"}
    kwargs = {"temperatures": [0.5, 1.0, 2.0, 4.0], "epsilon": 0.25, "bound": 10.0}
    cfg = {"query": "clipped_nll_increments", "kwargs": json.dumps(kwargs)}
    reply = answer_source_query(z, y, node, cfg)
    assert "refused" not in reply, reply
    assert len(json.loads(reply["value"])) == 3  # k - 1 increments
    (release,) = json.loads(reply["releases"])
    assert release[0].startswith("clipped_nll_increments(")
    assert release[3] == pytest.approx(0.25)


def test_a_distributed_fit_refuses_remote_sources_before_asking_anything() -> None:
    """A RemoteSource answers with its own noise: mixing it into a distributed fit is refused
    before any message (no budget check, no query) reaches a node."""
    from privcal.federated.flower.sources import RemoteSource
    from privcal.private import PrivateTemperatureScaling

    class NoGrid:
        def push_messages(self, messages):  # type: ignore[no-untyped-def]
            raise AssertionError("a message was sent")

    sources = [RemoteSource(NoGrid(), node, 4, name=f"n{node}") for node in (2, 3)]
    with pytest.raises(ValueError, match=r"cannot upload shares.*aggregation='local'"):
        PrivateTemperatureScaling(aggregation="distributed").fit(sources=sources)


def test_a_source_bounds_what_one_run_costs_it_by_its_own_policy(tmp_path: Path) -> None:
    """A node with ``max-epsilon`` 0.5 answers queries of one run up to 0.5 in all, refuses the
    next (nothing recorded, its data not needed), and answers the next run again."""
    from privcal.federated.flower.sources import source_refusal
    from privcal.privacy import PrivacyOdometer

    rng = np.random.default_rng(0)
    z, y = rng.normal(size=(50, 4)), rng.integers(0, 4, size=50)
    node = {"ledger": str(tmp_path / "l.sqlite"), "budget": 2.0, "max-epsilon": 0.5}
    cfg = {"query": "count", "kwargs": json.dumps({"epsilon": 0.25})}
    for _ in range(2):
        assert "refused" not in answer_source_query(z, y, node, cfg, run_id=7)
    reason = source_refusal(node, cfg, run_id=7)
    assert reason is not None and "above this source's policy of at most 0.5 per run" in reason
    assert answer_source_query(z, y, node, cfg, run_id=7) == {"refused": reason}
    assert PrivacyOdometer(2.0, ledger=node["ledger"]).spent == pytest.approx(0.5)
    assert "refused" not in answer_source_query(z, y, node, cfg, run_id=8)  # a new run

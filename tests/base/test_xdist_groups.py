"""How ``make test`` spreads the suite over pytest-xdist workers (``--dist loadgroup``)."""

from __future__ import annotations

import pytest


@pytest.mark.compiled
def test_compiled_tests_share_one_worker(request: pytest.FixtureRequest) -> None:
    """Under ``--dist loadgroup`` a test marked ``compiled`` is in xdist's group ``numba``
    (tests/conftest.py), which xdist shows as the suffix ``@numba`` of its node id; pytest 9.2
    made xdist drop the suffix silently (pytest-dev/pytest-xdist#1386), so every group ran on
    both workers (the demo twice, each numba kernel compiled twice). Serial runs have no groups."""
    worker = hasattr(request.config, "workerinput")  # an xdist worker, not the controller
    if worker and getattr(request.config.option, "loadgroup", False):
        assert request.node.nodeid.endswith("@numba"), request.node.nodeid

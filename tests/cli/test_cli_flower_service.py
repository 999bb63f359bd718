"""The work folders of ``privcal federate``: each names its owner, and a folder whose owner was
killed outright is removed by the next command (its SuperNode's own clean-up races the kill)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("flwr")

from privcal.cli._flower import OWNER_FILE, remove_orphaned_work, service


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_folder_whose_owner_is_gone_is_removed_and_no_other(tmp_path: Path) -> None:
    orphan, live, unnamed = (tmp_path / f"privcal-flwr-{n}" for n in ("a", "b", "c"))
    other = tmp_path / "not-privcal"
    for folder in (orphan, live, unnamed, other):
        (folder / "flwr-home").mkdir(parents=True)
    (orphan / OWNER_FILE).write_text(str(_dead_pid()))
    (live / OWNER_FILE).write_text(str(os.getpid()))
    (other / OWNER_FILE).write_text(str(_dead_pid()))
    assert remove_orphaned_work(tmp_path) == [orphan]
    assert not orphan.exists() and live.exists() and unnamed.exists() and other.exists()


def test_service_names_its_owner_and_removes_its_folder() -> None:
    with service() as work:
        assert (work / OWNER_FILE).read_text() == str(os.getpid())
    assert not work.exists()

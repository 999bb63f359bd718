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


def test_a_work_folder_written_into_while_it_is_removed_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child still exiting may write into the work folder while ``rmtree`` runs, which then
    leaves it behind (it stayed once in a CI run after SIGTERM); the removal tries again while
    the folder exists. Here the first ``rmtree`` races such a writer."""
    import shutil

    from privcal.cli import _flower

    work = tmp_path / "privcal-flwr-x"
    work.mkdir()
    real, calls = shutil.rmtree, []

    def racing(path: Path, ignore_errors: bool = False) -> None:
        calls.append(path)
        real(path, ignore_errors=ignore_errors)
        if len(calls) == 1:  # a dying child's last line lands before the folder's own rmdir
            path.mkdir()
            (path / "status.log").write_text("late")

    monkeypatch.setattr(_flower.shutil, "rmtree", racing)
    _flower._remove_work(work)
    assert not work.exists() and len(calls) == 2

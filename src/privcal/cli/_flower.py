"""What the Flower commands share: the extra's check, a stoppable service folder and the
refusal of an option's value (:func:`reject_if`).

``privcal federate server``, ``client`` and ``simulate`` each run Flower processes in a
temporary work folder; :func:`service` removes it and turns SIGINT/SIGTERM into one line and
exit status ``128 + signal`` after the caller's ``finally`` has stopped every child process.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer

from privcal.cli._common import err_console, fail

__all__ = ["OWNER_FILE", "Stopped", "need_flwr", "reject_if", "remove_orphaned_work", "service"]


def reject_if(bad: bool, option: str, rule: str, value: object) -> None:
    """Refuse ``value`` of ``option`` when ``bad``: ``ValueError("OPTION must be RULE. Got
    VALUE.")``, checked before any process starts."""
    if bad:
        raise ValueError(f"{option} must be {rule}. Got {value}.")


def need_flwr() -> None:
    from privcal.federated.flower import no_telemetry_by_default

    no_telemetry_by_default()  # before Flower reads the variable
    try:
        import flwr  # noqa: F401
    except ImportError:
        fail("privcal federate needs the federated extra: pip install 'privcal[federated]'")


#: The file in a work folder that names the process whose folder it is.
OWNER_FILE = "owner.pid"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_orphaned_work(tmp: Path | None = None) -> list[Path]:
    """Remove this user's ``privcal-flwr-*`` work folders whose owner process is gone; return
    them.

    A command killed outright (SIGKILL) cannot remove its folder; its SuperNode removes it on
    the way out, but not always (its exit races the kill). Each folder names its owner
    (:data:`OWNER_FILE`); a folder without one (being created, or left by an older privcal) is
    left alone.
    """
    out, uid = [], os.getuid() if hasattr(os, "getuid") else None
    for work in Path(tmp or tempfile.gettempdir()).glob("privcal-flwr-*"):
        try:
            if uid is not None and work.stat().st_uid != uid:
                continue
            pid = int((work / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue
        if not _alive(pid):
            shutil.rmtree(work, ignore_errors=True)
            out.append(work)
    return out


@contextmanager
def service() -> Iterator[Path]:
    """A temporary work folder, removed on exit, with SIGTERM handled like Ctrl-C.

    Every child process is stopped by the caller's ``finally`` (process groups, see
    :meth:`~privcal.federated.flower.deploy.FlowerProcesses.stop`); SIGINT and SIGTERM end the
    command with one line and exit status 130 / 143. Folders that killed commands left behind
    are removed first (:func:`remove_orphaned_work`).
    """
    import signal

    def raise_interrupt(signum: int, _frame: Any) -> None:
        raise Stopped(signum)

    previous = {s: signal.signal(s, raise_interrupt) for s in (signal.SIGTERM, signal.SIGINT)}
    remove_orphaned_work()
    work = Path(tempfile.mkdtemp(prefix="privcal-flwr-"))
    (work / OWNER_FILE).write_text(str(os.getpid()))
    try:
        yield work
    except Stopped as stop:
        err_console.print(f"Stopped by {signal.Signals(stop.signum).name}; every process ended.")
        raise typer.Exit(128 + stop.signum) from None
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        _remove_work(work)


def _remove_work(work: Path, wait_s: float = 5.0) -> None:
    """Remove the work folder, again while it is still there (at most ``wait_s``): a child
    still exiting (a SuperNode stopped mid-start, a thread's last status line) can write into
    it while ``rmtree`` runs, which then leaves the folder behind."""
    import time

    deadline = time.monotonic() + wait_s
    shutil.rmtree(work, ignore_errors=True)
    while work.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
        shutil.rmtree(work, ignore_errors=True)


class Stopped(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

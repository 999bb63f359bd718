"""What the Flower commands share: the extra's check, a stoppable service folder and the
refusal of an option's value (:func:`reject_if`).

``privcal federate server``, ``client`` and ``simulate`` each run Flower processes in a
temporary work folder; :func:`service` removes it and turns SIGINT/SIGTERM into one line and
exit status ``128 + signal`` after the caller's ``finally`` has stopped every child process.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer

from privcal.cli._common import err_console, fail

__all__ = ["Stopped", "need_flwr", "reject_if", "service"]


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


@contextmanager
def service() -> Iterator[Path]:
    """A temporary work folder, removed on exit, with SIGTERM handled like Ctrl-C.

    Every child process is stopped by the caller's ``finally`` (process groups, see
    :meth:`~privcal.federated.flower.deploy.FlowerProcesses.stop`); SIGINT and SIGTERM end the
    command with one line and exit status 130 / 143.
    """
    import shutil
    import signal

    def raise_interrupt(signum: int, _frame: Any) -> None:
        raise Stopped(signum)

    previous = {s: signal.signal(s, raise_interrupt) for s in (signal.SIGTERM, signal.SIGINT)}
    work = Path(tempfile.mkdtemp(prefix="privcal-flwr-"))
    try:
        yield work
    except Stopped as stop:
        err_console.print(f"Stopped by {signal.Signals(stop.signum).name}; every process ended.")
        raise typer.Exit(128 + stop.signum) from None
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        shutil.rmtree(work, ignore_errors=True)


class Stopped(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

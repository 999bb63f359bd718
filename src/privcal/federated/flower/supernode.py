"""``flower-supernode`` with a shorter idle poll (``python -P .../flower/supernode.py``).

Flower 1.41's SuperNode sleeps 3 s after every poll of the SuperLink that brought no message,
and 0.5 s between checks for its ClientApp's reply; both are fixed in its main loop
(``flwr.supernode.start_client_internal``). For a calibration round, which costs milliseconds of
computation, those waits are the round time. This launcher runs the unchanged SuperNode with
the waits of that one module capped at ``PRIVCAL_SUPERNODE_POLL_S`` seconds (default 0.25): the
SuperNode then polls the SuperLink 4 times a second while idle, a load the SuperLink serves
easily for the tens to a few hundred nodes of a calibration federation. A SuperNode started
before its SuperLink (as the documented blocks start clients, then the server) retries the
connection with Flower's exponential backoff, up to 20 s apart; this launcher caps that wait at
``PRIVCAL_SUPERNODE_RETRY_S`` seconds (default 1), so a node joins within a second of the
SuperLink's start instead of up to 20 s later. Arguments are
``flower-supernode``'s. It imports nothing of privcal: deploy.supernode_command runs this file,
not the module, so no privcal package is imported.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import types


def _patched_time(cap: float) -> types.SimpleNamespace:
    """A stand-in for the ``time`` module whose ``sleep`` waits at most ``cap`` seconds."""
    names = {n: getattr(time, n) for n in dir(time) if not n.startswith("__")}
    return types.SimpleNamespace(**{**names, "sleep": lambda s: time.sleep(min(s, cap))})


def _remove_own_work_if_orphaned(parent: int) -> None:
    """Exit handler: remove this SuperNode's working folder (``privcal-flwr-*``, the client's
    temporary folder) when the client that started it is gone: a client killed outright
    (SIGKILL) cannot remove it, and its SuperNode ends with it (``PR_SET_PDEATHSIG``)."""
    work = os.getcwd()
    if os.getppid() != parent and os.path.basename(work).startswith("privcal-flwr-"):
        import shutil

        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    from flwr.supercore.exit import add_exit_handler
    from flwr.supercore.retry import http_retry
    from flwr.supernode import start_client_internal
    from flwr.supernode.cli import flower_supernode

    cap = float(os.environ.get("PRIVCAL_SUPERNODE_POLL_S", "0.25"))
    start_client_internal.time = _patched_time(cap)  # type: ignore[assignment]
    http_retry.MAX_RETRY_DELAY = int(os.environ.get("PRIVCAL_SUPERNODE_RETRY_S", "1"))
    parent = os.getppid()

    def on_sigterm(signum: int, _frame: object) -> None:  # until Flower's handler replaces it
        _remove_own_work_if_orphaned(parent)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, on_sigterm)
    add_exit_handler(lambda: _remove_own_work_if_orphaned(parent), run_before_force_exit=True)
    sys.argv[0] = "flower-supernode"
    flower_supernode()
    return 0


if __name__ == "__main__":  # pragma: no cover - a process started by deploy.supernode_command
    sys.exit(main())

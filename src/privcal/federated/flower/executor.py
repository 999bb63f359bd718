"""A long-lived ClientApp executor for SuperNodes started with ``--isolation process``.

Flower 1.41 runs a ClientApp by starting a fresh ``flwr-clientapp`` process for every message
(``flower-superexec`` launches one per task; a non-ephemeral ClientApp is an open Flower
feature request, flwrlabs/flower#3670), so each message pays for starting Python and importing
Flower, NumPy and privcal. This executor takes the place of ``flower-superexec``: one process
(or a thread of ``privcal federate client``) that has imported privcal once acquires each task
from the SuperNode's Runtime API and runs it with Flower's own task functions
(``pull_task_input``, ``push_message``, ``push_task_output``) and privcal's ClientApp objects,
in-process, one thread per SuperNode (replies copy their identity from the message they answer,
so tasks of different nodes do not share state). The ClientApp is privcal's
(``client_app.app``, or ``secagg.client`` when the run config says ``secagg``); a run of another
app is failed, not executed.

Run ``python -m privcal.federated.flower.executor ADDRESS [ADDRESS ...]`` (Runtime API
addresses of local SuperNodes, insecure loopback) to serve several nodes from one process.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import httpx
from flwr.app import Error, Message
from flwr.common.constant import ErrorCode, SubStatus
from flwr.proto.runtime_pb2 import AcquireTaskRequest, SendTaskHeartbeatRequest
from flwr.supercore.constant import TaskType
from flwr.supercore.heartbeat import HeartbeatSender
from flwr.supercore.interceptors import RuntimeTokenHttpInterceptor
from flwr.supercore.retry import make_simple_http_retry_invoker
from flwr.supercore.runtime import RuntimeHttpClient
from flwr.supernode.runtime.run_clientapp import (
    pull_task_input,
    push_message,
    push_task_output,
)

__all__ = ["serve", "serve_many"]

#: Seconds between polls for a task right after one (a node's messages often come in bursts:
#: seed 000's queries, SecAgg+'s stages).
POLL_S = 0.05
#: Longest wait between polls while idle: each empty poll doubles the wait up to this. The
#: SuperNode itself fetches messages from the SuperLink every 0.25 s (``supernode.py``), so
#: polling it faster buys little, while every poll is an HTTP request that the SuperNode's
#: Python process serves: 20 nodes polled every 0.05 s are 400 requests a second, most of two
#: cores (bench/RESULTS.md, real-process rounds).
IDLE_POLL_S = 0.25


def _client(address: str, token: str | None = None) -> RuntimeHttpClient:
    interceptors = [] if token is None else [RuntimeTokenHttpInterceptor(token)]
    retry = make_simple_http_retry_invoker()
    retry.max_tries = 3  # a local SuperNode that does not answer is gone: do not back off for long
    flower_giveup = retry.should_giveup
    assert flower_giveup is not None
    retry.should_giveup = lambda e: _unauthorized(e) or flower_giveup(e)
    return RuntimeHttpClient.from_server_address(
        server_address=address,
        insecure=True,
        root_certificates=None,
        interceptors=interceptors,
        retry_invoker=retry,
    )


def _unauthorized(err: Exception) -> bool:
    """A 401 from the SuperNode: the task's token is no longer valid (its run ended or the
    SuperLink was lost). Flower's invoker answers it with SIGINT to its own process, which is
    ``flwr-clientapp`` there but ``privcal federate client`` here: give up on the task instead."""
    return isinstance(err, httpx.HTTPStatusError) and err.response.status_code == 401


def _heartbeat_fn(client: RuntimeHttpClient) -> Any:
    """Flower's task heartbeat (``make_task_heartbeat_fn_http``) without its SIGINT to this
    process when the SuperNode no longer runs the task: the task's next call fails instead, and
    :func:`serve` goes on polling."""
    req = SendTaskHeartbeatRequest()

    def fn() -> bool:
        try:
            client.SendTaskHeartbeat(req)
        except (httpx.TransportError, httpx.HTTPStatusError):
            return False
        return True

    return fn


def _app_for(run_config: dict[str, Any]) -> Any:
    if run_config.get("secagg"):
        from privcal.federated.flower.secagg import client

        return client
    from privcal.federated.flower.client_app import app

    return app


def run_task(address: str, token: str) -> None:
    """Run one acquired ClientApp task in this process (what ``flwr-clientapp`` does)."""
    client = _client(address, token)
    context = None
    status, details = SubStatus.FAILED, "privcal executor: task failed"
    heartbeat = HeartbeatSender(_heartbeat_fn(client))  # as flwr-clientapp does
    heartbeat.start()
    try:
        message, context, run, _fab = pull_task_input(client)
        if not run.fab_id.endswith("privcal-federated"):
            raise RuntimeError(f"this executor runs privcal's ClientApp only, not {run.fab_id!r}")
        try:
            reply = _app_for(dict(context.run_config))(message=message, context=context)
            status, details = SubStatus.COMPLETED, ""
        except Exception as err:
            reason = f"{type(err)}:<'{err}'>"
            reply = Message(Error(ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason), reply_to=message)
            details = reason
        push_message(client, reply, context)
    finally:
        push_task_output(client, context, status, details)
        heartbeat.stop()
        client.close()


def serve(address: str, stop: threading.Event) -> None:
    """Acquire and run the ClientApp tasks of the SuperNode at ``address`` until ``stop``.

    A task whose SuperNode disappears under it (the client was stopped) ends quietly: the
    thread returns once ``stop`` is set, and otherwise goes on polling.
    """
    client = _client(address)
    wait = POLL_S
    try:
        while not stop.is_set():
            try:
                res = client.AcquireTask(
                    AcquireTaskRequest(supported_task_types=[TaskType.CLIENT_APP.value])
                )
            except Exception:  # the SuperNode is not up yet, or gone: try again until stopped
                stop.wait(10 * POLL_S)
                continue
            if res.HasField("task") and res.token:
                try:
                    run_task(address, res.token)
                except Exception:  # the SuperNode went away mid-task (httpx.ConnectError)
                    # Ctrl-C or SIGTERM stops the SuperNode: the task is lost with it, and the
                    # server counts this client as dropped for the round. No traceback.
                    if stop.is_set():
                        return
                    stop.wait(10 * POLL_S)
                wait = POLL_S
                continue
            stop.wait(wait)
            wait = min(2.0 * wait, IDLE_POLL_S)
    finally:
        client.close()


def serve_many(addresses: list[str], stop: threading.Event) -> list[threading.Thread]:
    """One daemon thread per SuperNode address, all in this process."""
    threads = [
        threading.Thread(target=serve, args=(a, stop), daemon=True, name=f"privcal-exec-{a}")
        for a in addresses
    ]
    for t in threads:
        t.start()
    return threads


if __name__ == "__main__":  # pragma: no cover - started as a process by deploy.FlowerProcesses
    _stop = threading.Event()
    for _t in serve_many(sys.argv[1:], _stop):
        _t.join()

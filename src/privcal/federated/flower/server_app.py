"""Flower ServerApp: privcal's federated calibration over the Message API.

Each round the server samples nodes (rate ``sample-rate``, seeded), sends them the global state
(``ArrayRecord``) and the run configuration (``ConfigRecord``) in a ``query`` message, sums the
accepted payloads, and applies the method's server step (:func:`release_round`; with Gaussian
noise from a privcal NoiseSource under DP: ``SecureNoise`` unless ``noise = "seeded"``, which
warns and makes the report "not private: seeded noise"). A reply with an error (a crashed
client), a refusal (a spent budget), a wrong shape or a NaN is dropped with a logged reason and
the round continues. One zCDP accountant covers the whole run.

User-level DP (add/remove one client; :mod:`privcal.federated.dp`): ``num-nodes`` is declared
public before the run. A DP run writes only the round index and the accountant's epsilon per
round to ``history.json`` (no client counts, no timings), does not stop on ``min-clients``
mid-run (the noise does not depend on how many replied), and writes ``privacy_report.json``.
Without DP (no privacy claimed) the history also has ``n_clients``, ``sampled`` and
``seconds``, and a round with fewer than ``min-clients`` accepted updates stops the run. The
participation the SuperLink's operator sees (Flower shows it) is not released.
Outputs (``out-dir``): ``calibrator.json`` (``Calibrator.to_dict``; ``sets.json`` for the
federated conformal methods, whose release is prediction sets), ``history.json``,
``state.json``, ``config.json`` (the run configuration) and, under DP, ``privacy_report.json``;
``privcal report`` reads the folder.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.common.constant import ErrorCode
from flwr.serverapp import Grid, ServerApp

from privcal.calibrators import Calibrator
from privcal.calibrators.summary import release_summary
from privcal.federated.dp import DPConfig, expected_cohort, federated_report, validate_payload
from privcal.federated.flower.messaging import exchange
from privcal.federated.flower.task import (
    DEFAULTS,
    array_of,
    dp_from_config,
    dump_json,
    method_from_config,
    server_noise,
)
from privcal.federated.methods import FedMethod
from privcal.privacy import PrivacyReport

log = logging.getLogger("privcal.federated")
app = ServerApp()


def _wait_nodes(grid: Grid, n: int, wait_s: float) -> list[int]:
    deadline = time.monotonic() + wait_s
    while True:
        ids = sorted(grid.get_node_ids())
        if len(ids) >= n or time.monotonic() > deadline:
            return ids
        time.sleep(0.5)


def _query(
    grid: Grid, nodes: list[int], state: dict[str, np.ndarray], cfg: dict[str, Any], timeout: float
) -> list[Message]:
    """Send ``state`` and ``cfg`` to ``nodes`` in one round; the replies (:func:`_query_nodes`)."""
    return _query_nodes(grid, nodes, state, cfg, timeout)[1]


def _query_nodes(
    grid: Grid, nodes: list[int], state: dict[str, np.ndarray], cfg: dict[str, Any], timeout: float
) -> tuple[dict[str, int], list[Message]]:
    """:func:`_query`, also returning the node each pushed message went to (by message id).

    A reply tells which node it answers through the message it replies to: an error reply
    that the SuperLink makes for a node that went away (Flower's ``NODE_UNAVAILABLE``) comes
    from the SuperLink's own node id, not the client's. The state and config are serialised
    once per round and shared by every node's message (the Grid sends each its own copy;
    thousands of clients would otherwise pay for it per node).
    """
    return _query_groups(grid, [(nodes, cfg)], state, timeout)


def _query_groups(
    grid: Grid,
    groups: list[tuple[list[int], dict[str, Any]]],
    state: dict[str, np.ndarray],
    timeout: float,
) -> tuple[dict[str, int], list[Message]]:
    """:func:`_query_nodes` with its own config for each group ``(nodes, cfg)`` of nodes, each
    serialised once."""
    arrays = ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in state.items()})
    msgs = [
        Message(
            RecordDict({"state": arrays, "config": config}),
            dst_node_id=nid,
            message_type=MessageType.QUERY,
        )
        for nodes, cfg in groups
        for config in [ConfigRecord(cfg)]
        for nid in nodes
    ]
    return exchange(grid, msgs, timeout)


def _accepted(
    replies: list[Message],
    shape: tuple[int, ...],
    rnd: int,
    dst: dict[str, int] | None = None,
) -> tuple[list[np.ndarray], int, list[str]]:
    """The valid payloads of a round, the number dropped, and the clients' refusal reasons.

    ``dst`` maps each pushed message id to its node, so that a reply is counted for the node
    it answers (an error reply of the SuperLink for a node that left carries the SuperLink's
    id).
    """
    out, dropped, refusals = [], 0, []
    for r in replies:
        nid = (dst or {}).get(r.metadata.reply_to_message_id, r.metadata.src_node_id)
        if r.has_error():
            log.warning("Round %d: client %s failed (%s); dropped.", rnd, nid, r.error.reason)
            print(
                f"privcal: round {rnd}: client {nid} failed ({r.error.reason}); dropped", flush=True
            )
            dropped += 1
            continue
        info = dict(r.content["info"]) if "info" in r.content else {}
        if "refused" in info:
            refusals.append(str(info["refused"]))
            print(f"privcal: round {rnd}: client {nid} refused: {refusals[-1]}", flush=True)
            continue
        arr = validate_payload(array_of(r.content["arrays"], "payload"), shape, nid)
        if arr is None:
            print(
                f"privcal: round {rnd}: rejected the update of client {nid} (bad shape or "
                "non-finite values)",
                flush=True,
            )
            dropped += 1
            continue
        out.append(arr)
    return out, dropped, refusals


def release_round(
    fm: FedMethod,
    state: dict[str, np.ndarray],
    replies: list[Message],
    shape: tuple[int, ...],
    rnd: int,
    dp: DPConfig | None,
    cohort: float,
) -> tuple[dict[str, np.ndarray], int]:
    """The server's release of one round: sum the accepted payloads, apply the server step.

    Under DP the server step adds Gaussian noise to the sum of the (client-clipped) payloads;
    parameter averaging divides it by the fixed public ``cohort``
    (:func:`~privcal.federated.dp.expected_cohort` of the declared ``num-nodes``), never by the
    number of replies. Without DP averaging uses the accepted count.

    Returns
    -------
    state : dict
        The new global state (what the next round and the calibrator are built from).
    n_accepted : int
        For the operator's ``min-clients`` check in runs without DP; a DP run never writes it
        out (it depends on who took part).
    """
    payloads, _dropped, _refusals = _accepted(replies, shape, rnd)
    return _release(fm, state, payloads, shape, dp, cohort), len(payloads)


def _release(
    fm: FedMethod,
    state: dict[str, np.ndarray],
    payloads: list[np.ndarray],
    shape: tuple[int, ...],
    dp: DPConfig | None,
    cohort: float,
) -> dict[str, np.ndarray]:
    """The method's server step on the sum of a round's accepted ``payloads``."""
    total = np.sum(payloads, axis=0) if payloads else np.zeros(shape)
    return fm.server_step(state, total, len(payloads), dp=dp, denominator=cohort)


def progress_line(
    t: int,
    rounds: int,
    replied: int,
    dropped: int,
    refused: int,
    eps: float,
    budget: float,
    seconds: float | None = None,
) -> str:
    """The server's per-round progress line (what ``privcal federate server`` shows).

    The counts and the round's duration are what the operator of the SuperLink sees anyway
    (Flower logs every reply): printed on its console only, never in a DP run's
    ``history.json``. ``eps`` is the accountant's loss of rounds ``1..t`` composed, which
    reaches ``budget`` after the last round (a client's ledger is brought up to the same
    figure before each round it answers).
    """
    spent = (
        f"epsilon spent so far {eps:.3g} of {budget:g} ({t} of {rounds} rounds composed)"
        if budget > 0
        else "no DP"
    )
    took = "" if seconds is None else f"; {seconds:.2f} s"
    return (
        f"privcal: round {t}/{rounds}: {replied} replied, {dropped} dropped, "
        f"{refused} refused; {spent}{took}"
    )


def declared_cohort(cfg: dict[str, Any]) -> float:
    """The fixed public denominator of a round: ``sample-rate * num-nodes`` (declared)."""
    return expected_cohort(float(cfg["sample-rate"]), int(cfg["num-nodes"]))


def run_report(
    fm: FedMethod, dp: DPConfig, c: int, cfg: dict[str, Any], survivors: int | None = None
) -> PrivacyReport:
    """The run's privacy report (user-level add/remove; ``num-nodes`` declared public).

    ``survivors``: the fewest clients in any SecAgg+ sum of the run (distributed runs, which
    only SecAgg+ carries here)."""
    k, p = int(cfg["num-nodes"]), float(cfg["sample-rate"])
    transport = "secagg+" if bool(cfg.get("secagg", False)) else "in-process"
    return federated_report(
        fm, dp, c, n_clients=k, sample_rate=p, survivors=survivors, transport=transport
    )


def _class_totals(grid: Grid, nodes: list[int], cfg: dict[str, Any], c: int) -> np.ndarray:
    """Exact class totals ``N_j`` for Sec. 4.1 weighting; asked for in runs without DP only."""
    timeout = float(cfg["round-timeout-s"])
    replies = _query(grid, nodes, {}, {**cfg, "task": "count", "round": 0}, timeout)
    totals = [
        array_of(r.content["arrays"], "payload")
        for r in replies
        if not r.has_error() and "arrays" in r.content
    ]
    return np.sum([t for t in totals if t.size == c], axis=0)


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg: dict[str, Any] = {**DEFAULTS, **dict(context.run_config)}
    with stop_on_signal(grid, cfg):
        if cfg["method"] == "acc-t":
            seed000(grid, cfg)
        else:
            _federate(grid, cfg)


def _federate(grid: Grid, cfg: dict[str, Any]) -> None:
    """A federated method's run: round 0 (:func:`join_run`), ``T`` rounds, the release."""
    fm = method_from_config(cfg)
    rounds = int(cfg["rounds"])
    out_dir = Path(str(cfg["out-dir"])) if cfg["out-dir"] else None
    nodes = join_run(grid, cfg)[1]
    timeout = float(cfg["round-timeout-s"])
    dp = (
        dp_from_config(cfg, server_noise(cfg, "the privcal ServerApp"))
        if float(cfg["epsilon"]) > 0
        else None
    )
    c = int(cfg["n-classes"])
    if c < 2:
        raise RuntimeError(f"privcal: run config 'n-classes' must be >= 2. Got {c}.")
    state = fm.init(c)
    if fm.kind == "binning" and dp is None and getattr(fm, "weighting", None):
        state["class_totals"] = _class_totals(grid, nodes, cfg, c)
    shape = fm.payload_shape(c)
    rng = np.random.default_rng(int(cfg["seed"]))
    p = float(cfg["sample-rate"])
    cohort, budget = declared_cohort(cfg), float(cfg["epsilon"])
    history = []
    for t in range(1, rounds + 1):
        t0 = time.perf_counter()
        live = sorted(set(grid.get_node_ids()) & set(nodes))  # the clients that joined
        sampled = live if p >= 1.0 else [n for n in live if rng.random() < p]
        dst, replies = _query_nodes(grid, sampled, state, {**cfg, "round": t}, timeout)
        # a client counts once: it replied (a payload, a refusal or an error), or it did not
        answered = {
            dst[r.metadata.reply_to_message_id]
            for r in replies
            if r.metadata.reply_to_message_id in dst
        }
        missing = set(sampled) - answered
        for nid in sorted(missing):
            print(
                f"privcal: round {t}: no reply from client {nid} within {timeout:g} s; dropped",
                flush=True,
            )
        payloads, dropped, refusals = _accepted(replies, shape, t, dst)
        state, n_ok = _release(fm, state, payloads, shape, dp, cohort), len(payloads)
        eps = 0.0 if dp is None else dp.spent_epsilon()
        lost, seconds = dropped + len(missing), time.perf_counter() - t0
        print(progress_line(t, rounds, n_ok, lost, len(refusals), eps, budget, seconds), flush=True)
        if sampled and len(refusals) == len(sampled):
            # a refusal depends on the client's budget, not its data: nothing left to learn from
            raise RuntimeError(
                f"privcal: budget: every client refused round {t} ({refusals[0]}); "
                "no client can take part any more."
            )
        if dp is not None:  # only public quantities: the round and the accountant's epsilon
            history.append({"round": t, "epsilon_spent": eps})
        else:
            if n_ok < int(cfg["min-clients"]):
                raise RuntimeError(
                    f"privcal: round {t} has {n_ok} accepted updates out of "
                    f"{len(sampled)} sampled clients; min-clients is {cfg['min-clients']}."
                )
            row = {"round": t, "n_clients": n_ok, "sampled": len(sampled), "seconds": seconds}
            history.append({**row, "epsilon_spent": 0.0})
        if out_dir is not None:
            dump_json(out_dir / "history.json", history)
    cal = finish_run(fm, state, c, dp, cfg, out_dir)
    check_on_server(cal, cfg, out_dir, fm.releases)
    end_run(grid, nodes, cal, cfg, fm.releases)


def finish_run(
    fm: FedMethod,
    state: dict[str, np.ndarray],
    c: int,
    dp: DPConfig | None,
    cfg: dict[str, Any],
    out_dir: Path | None,
    survivors: int | None = None,
) -> Calibrator:
    """Write the release (``calibrator.json``, or ``sets.json`` for a method that releases
    prediction sets: :attr:`FedMethod.releases`), the state and (under DP) the privacy report;
    print the report."""
    report = None if dp is None else run_report(fm, dp, c, cfg, survivors)
    if report is not None:
        print(f"privcal report:\n{report}", flush=True)  # the CLI prints it at the end
    cal = _showing_warnings(fm.calibrator, state, c)  # e.g. FedTemp's noise-dominance check
    released = release_summary(cal)
    print(f"privcal: release: {released['text']}", flush=True)
    if out_dir is None:
        return cal
    dump_json(out_dir / f"{fm.releases}.json", cal.to_dict())
    dump_json(out_dir / "config.json", cfg)
    dump_json(out_dir / "state.json", {k: np.asarray(v).tolist() for k, v in state.items()})
    if report is not None:
        dump_json(out_dir / "privacy_report.json", report_with_release(report, released))
    return cal


def _showing_warnings(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, each warning it raises printed on the operator's console."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = fn(*args, **kwargs)
    for w in seen:
        print(f"privcal: WARNING: {w.message}", flush=True)
    return out


def report_with_release(report: Any, released: dict[str, Any]) -> dict[str, Any]:
    """``privacy_report.json``: the report's keys, plus ``released`` (the released parameters,
    :func:`~privcal.calibrators.summary.release_summary`) and ``fallback`` (whether the release
    fell back to ``T = 1`` and why; ``None`` for a method without a fallback rule)."""
    return {**report.to_dict(), "released": released, "fallback": released.get("fallback")}


def check_on_server(
    cal: Calibrator, cfg: dict[str, Any], out_dir: Path | None, releases: str = "calibrator"
) -> None:
    """Check the release on the server's validation split ``val`` (run config: a labelled score
    file the server holds, public to it) and write ``check.json``: a calibrator against the
    uncalibrated model (:func:`~privcal.metrics.compare.compare_uncalibrated`),
    prediction sets (``releases = "sets"``) for their coverage and mean size
    (:func:`~privcal.metrics.compare.check_sets`). Without ``val`` the server says so
    and leaves the check to the clients (each on its own data, nothing of it sent).
    """
    sets = releases == "sets"
    if not cfg.get("val"):
        what = (
            "the sets' coverage and mean size"
            if sets
            else "the calibrator against the uncalibrated model"
        )
        print(
            "privcal: check: the server holds no validation split (--val); each client checks "
            f"{what} on its own data",
            flush=True,
        )
        return
    from privcal.federated.flower.task import load_client_data
    from privcal.metrics.compare import check_sets, compare_uncalibrated

    z, y = load_client_data(str(cfg["val"]))
    check = check_sets(cal, z, y) if sets else compare_uncalibrated(cal, z, y)
    print(f"privcal: check: {check['summary']}", flush=True)
    if out_dir is not None:
        dump_json(out_dir / "check.json", check)


def end_run(
    grid: Grid,
    clients: list[int],
    cal: Calibrator,
    cfg: dict[str, Any],
    releases: str = "calibrator",
) -> None:
    """Tell every connected node that the run is over, with the release it may check locally
    (under the key ``releases``: ``calibrator``, or ``sets`` for prediction sets), and whether
    the server took it into the run (``in-run``: it is one of ``clients``).

    A node that is not (it connected after the server had chosen the run's clients, its join
    answer came late, or it did not answer as the run asks) learns from this that it took part
    in nothing (:func:`~privcal.federated.flower.client_app.took_part`). Each node is told only
    its own answer: two configs, whatever the number of clients.
    """
    content = {**cfg, "task": "end", "round": 0, releases: json.dumps(cal.to_dict())}
    taken = {int(n) for n in clients}
    nodes = sorted(grid.get_node_ids())
    groups = [
        ([n for n in nodes if n in taken], {**content, "in-run": True}),
        ([n for n in nodes if n not in taken], {**content, "in-run": False}),
    ]
    _query_groups(grid, groups, {}, min(10.0, float(cfg["round-timeout-s"])))


def stop_run(grid: Grid, cfg: dict[str, Any], reason: str, wait_s: float = 3.0) -> bool:
    """Tell every connected node that the server stopped the run before its release; whether
    no node is left waiting for the server (each answered within ``wait_s``, or left).

    Each client shows ``reason`` and exits (:func:`~privcal.federated.flower.client_app.
    end_locally`) instead of waiting ``--retry-s`` for a server that is gone. A client may exit
    before its answer is pushed (the SuperLink then answers for it that the node is
    unavailable: it stopped sending heartbeats); a live client that never took the message
    keeps its heartbeat and is counted as waiting.
    """
    content = {"task": "end", "round": 0, "stopped": reason}
    cfg["clients-stopped"] = True  # once per run (:func:`stop_on_signal`)
    nodes = sorted(grid.get_node_ids())
    replies = _query(grid, nodes, {}, content, wait_s)
    gone = ErrorCode.NODE_UNAVAILABLE
    done = sum(not r.has_error() or r.error.code == gone for r in replies)
    if done < len(nodes):
        waiting = len(nodes) - done
        print(
            f"privcal: {waiting} of {len(nodes)} clients did not take the stop message within "
            f"{wait_s:g} s (each stops when it loses the server)",
            flush=True,
        )
    return done == len(nodes)


def join_run(grid: Grid, cfg: dict[str, Any]) -> tuple[list[int], list[int]]:
    """Round 0: wait for the declared clients, ask each to join; return ``(asked, joined)``,
    the clients asked and those that joined (a client that connects later is in neither).

    Each client answers from its own side (:func:`~privcal.federated.flower.task.join_answer`):
    its policy, its logits' width against ``n-classes``, and whether its ledger can pay the whole
    run. Nothing is charged and no data is sent. Fewer than ``min-clients`` joining ends the
    run here with one line naming the clients' reasons (the clients are told and exit), before
    any budget is spent; so do fewer than the threshold ``t`` of a distributed run, whose sums of
    fewer than ``t`` shares are never released, and more clients connected than the declared
    ``num-nodes`` (the report states K; SecAgg+'s clients refuse a larger sample).
    """
    n_declared, need = int(cfg["num-nodes"]), int(cfg["min-clients"])
    if cfg.get("aggregation") == "distributed" and float(cfg["epsilon"]) > 0:
        from privcal.federated.dp import default_threshold  # fewer than t release nothing

        need = max(need, int(cfg["threshold"]) or default_threshold(n_declared))
    nodes = _wait_nodes(grid, n_declared, float(cfg["wait-nodes-s"]))
    if len(nodes) > n_declared:  # the report, the noise plan and SecAgg+'s setup are for K
        reason = (
            f"{len(nodes)} clients connected, more than the run's declared num-nodes "
            f"K={n_declared}; start K clients (a client restarted less than about a minute "
            "ago may still be listed under its old id: start the run again then)"
        )
        stop_run(grid, cfg, reason)
        raise RuntimeError(f"privcal: too many clients: {reason}.")
    if len(nodes) < need:
        reason = (
            f"only {len(nodes)} of {n_declared} clients connected within "
            f"{float(cfg['wait-nodes-s']):g} s; min-clients is {need}"
        )
        stop_run(grid, cfg, reason)
        raise RuntimeError(f"privcal: too few clients: {reason}.")
    content = {**cfg, "task": "join", "round": 0}
    dst, replies = _query_nodes(grid, nodes, {}, content, float(cfg["round-timeout-s"]))
    joined, reasons = [], []
    for r in replies:
        nid = dst.get(r.metadata.reply_to_message_id, r.metadata.src_node_id)
        info = {} if r.has_error() else dict(r.content["info"]) if "info" in r.content else {}
        if info.get("joined"):
            joined.append(nid)
            continue
        refused = info.get("refused", "no answer to the join request")
        why = str(r.error.reason if r.has_error() else refused)
        reasons.append(why)
        print(f"privcal: client {nid} refused the run: {why}", flush=True)
    if len(joined) < need:
        common = max(set(reasons), key=reasons.count) if reasons else "no reply"
        reason = (
            f"{len(joined)} of {len(nodes)} clients joined; min-clients is {need} "
            f"({len(reasons)} refused, e.g. {common})"
        )
        stop_run(grid, cfg, reason)
        raise RuntimeError(f"privcal: refused: {reason}.")
    print(f"privcal: {len(joined)} of {len(nodes)} clients joined the run", flush=True)
    return sorted(nodes), sorted(joined)


#: How long an interrupted ServerApp waits for the clients to take the stop message: an idle
#: SuperNode polls its SuperLink every 3 s, a busy one after its reply.
STOP_WAIT_S = 5.0


class RunInterrupted(BaseException):
    """SIGTERM or SIGINT reached the ServerApp (a ``BaseException``, like KeyboardInterrupt:
    no ``except Exception`` in a Flower workflow swallows it)."""


@contextlib.contextmanager
def stop_on_signal(grid: Grid, cfg: dict[str, Any]) -> Iterator[None]:
    """Run the body; on SIGTERM/SIGINT tell the clients the run stopped, then fail the run.

    ``privcal federate server`` sends SIGTERM to the ServerApp when it is interrupted, so the
    clients learn at once that the run is over (and exit) instead of retrying a server that is
    gone. A client's ledger keeps what it charged for rounds it answered: a reply that left the
    client is a release whether or not the server summed it (docs/federated.md).

    A signal that arrives while the grid pushes messages takes effect when the push is done: a
    message pushed without its contents would hold every SuperNode that received it (each
    retries pulling the contents, and never takes the stop message behind it).

    A run that fails (an exception) tells the clients too, unless it already did (a refused
    join): each exits with status 1 at once instead of after its ``--retry-s``.
    """
    import signal

    pending: list[str] = []
    pushing = threading.Event()

    def interrupt(signum: int, _frame: Any) -> None:
        pending.append(signal.Signals(signum).name)
        if not pushing.is_set():
            raise RunInterrupted(pending[0])

    def push_whole(messages: Any) -> Any:
        pushing.set()
        try:
            return push(messages)
        finally:
            pushing.clear()
            if pending:
                raise RunInterrupted(pending[0])

    if threading.current_thread() is not threading.main_thread():  # in-process tests
        yield
        return
    _exit_without(int(cfg.get("server-pid", 0)), cfg)
    push = grid.push_messages
    grid.push_messages = push_whole  # type: ignore[method-assign]
    previous = {s: signal.signal(s, interrupt) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    except RunInterrupted as stop:
        for s in previous:
            signal.signal(s, signal.SIG_IGN)  # one stop message, whatever else arrives
        grid.push_messages = push  # type: ignore[method-assign]
        print(f"privcal: interrupted: the server's operator stopped the run ({stop})", flush=True)
        reason = "the server's operator stopped the run before its release"
        told = stop_run(grid, cfg, reason, wait_s=STOP_WAIT_S)
        if cfg.get("out-dir"):
            dump_json(Path(str(cfg["out-dir"])) / "interrupted.json", {"clients_told": told})
        raise RuntimeError("privcal: interrupted: the run was stopped by its operator") from None
    except Exception as err:  # a failed run: the clients stop now, not after their --retry-s
        if not cfg.get("clients-stopped"):
            with contextlib.suppress(Exception):  # the run's own error is the one to report
                stop_run(grid, cfg, f"the run failed: {str(err).removeprefix('privcal: ')}")
        raise
    finally:
        grid.push_messages = push  # type: ignore[method-assign]
        for s, handler in previous.items():
            signal.signal(s, handler)


def _exit_without(pid: int, cfg: dict[str, Any]) -> None:
    """End this ServerApp process when ``privcal federate server`` (process ``pid``) is gone.

    A server killed outright (SIGKILL, a crash) cannot stop its ServerApp, which Flower starts
    in a session of its own and whose calls to the SuperLink retry forever: it would outlive its
    SuperLink and never end. Its ``interrupted.json`` says so (the clients were not told: each
    stops when it loses the server, after its ``--retry-s``); the server's temporary folder
    (``server-work``) goes with it.
    """
    import os
    import shutil
    import sys

    def gone() -> bool:  # no such process, or a zombie that its parent has not yet reaped
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return True
        return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")

    def watch() -> None:
        while not gone():
            time.sleep(0.5)
        print("privcal: interrupted: the privcal federate server process is gone", flush=True)
        if cfg.get("out-dir"):
            info = {"interrupted": True, "clients_told": False, "signal": "server process gone"}
            dump_json(Path(str(cfg["out-dir"])) / "interrupted.json", info)
        if cfg.get("server-work"):  # the server's temporary folder, which it cannot remove now
            shutil.rmtree(str(cfg["server-work"]), ignore_errors=True)
        os._exit(1)

    if pid > 0 and sys.platform.startswith("linux"):
        threading.Thread(target=watch, daemon=True, name="privcal-server-watch").start()


def seed000(
    grid: Grid, cfg: dict[str, Any], make_source: Any = None, aggregation: str = "local"
) -> None:
    """Seed 000's protocol: DP Acc-T over the SuperNodes acting as remote DataSources.

    ``make_source(node_id)`` builds the server's handle of a source node (default
    :class:`~privcal.federated.flower.sources.RemoteSource`: each source adds its own noise,
    ``aggregation = "local"``); over SecAgg+ the handles are
    :class:`~privcal.federated.flower.sources.SecAggSource` and ``aggregation =
    "distributed"`` with the run's threshold (default ``K - max(1, K // 5)``).
    """
    from privcal.federated.dp import default_threshold
    from privcal.federated.flower.sources import RemoteSource
    from privcal.private import PrivateTemperatureScaling

    nodes = _wait_nodes(grid, int(cfg["num-nodes"]), float(cfg["wait-nodes-s"]))
    if len(nodes) < int(cfg["min-clients"]):
        raise RuntimeError(
            f"privcal: only {len(nodes)} SuperNodes connected; min-clients is {cfg['min-clients']}."
        )
    # the nodes that act as data sources (they hold a ledger) answer a status query
    status = {"task": "source", "query": "status", "kwargs": "{}", "round": 0}
    probe = _query(grid, nodes, {}, status, float(cfg["round-timeout-s"]))
    ids = []
    for r in probe:
        info = {} if r.has_error() else dict(r.content["info"])
        if r.has_error() or "refused" in info:
            print(
                f"privcal: node {r.metadata.src_node_id} is not a data source; skipped", flush=True
            )
        else:
            ids.append(r.metadata.src_node_id)
    if len(ids) < int(cfg["min-clients"]):
        raise RuntimeError(
            f"privcal: {len(ids)} nodes act as data sources; min-clients is {cfg['min-clients']}."
        )
    if make_source is None:

        def make_source(nid: int) -> RemoteSource:
            return RemoteSource(
                grid, nid, int(cfg["n-classes"]), timeout=float(cfg["round-timeout-s"])
            )

    sources = [make_source(nid) for nid in sorted(ids)]
    threshold = None
    if aggregation == "distributed":
        threshold = int(cfg["threshold"]) or default_threshold(len(sources))
    eps, iterations = float(cfg["epsilon"]), int(cfg["iterations"])
    est = PrivateTemperatureScaling(
        "acc", eps, iterations, aggregation=aggregation, threshold=threshold
    )
    _showing_warnings(est.fit, sources=sources)  # e.g. the fit's noise-dominance check
    out_dir = Path(str(cfg["out-dir"])) if cfg["out-dir"] else None
    released = release_summary(est)
    print(f"privcal: DP Acc-T over {len(sources)} sources: {released['text']}", flush=True)
    end_run(grid, ids, est, cfg)
    if out_dir is not None:
        dump_json(out_dir / "calibrator.json", est.to_dict())
        report = report_with_release(est.privacy_report_, released)
        dump_json(out_dir / "privacy_report.json", report)
        dump_json(out_dir / "config.json", cfg)
        releases = est.privacy_report_.releases
        history = [{"query": r.query, "epsilon": r.epsilon, "source": r.source} for r in releases]
        dump_json(out_dir / "history.json", history)

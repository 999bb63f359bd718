"""``privcal federate client``: a SuperNode answering privcal rounds from one site's data.

The client holds the site's logits, its privacy ledger and its privacy policy; it refuses a run
that asks for more than the policy allows before the data is read, and it prints the run's
status lines as its ClientApp writes them.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from privcal.cli._common import EXIT_BUDGET, console, err_console, fail, plain_text, user_errors
from privcal.cli._flower import need_flwr, reject_if, service

__all__ = ["client"]


def client(
    data: Annotated[
        Path, typer.Option("--data", help="npz with 'logits' and 'labels'.", exists=True)
    ],
    ledger: Annotated[
        Path | None, typer.Option("--ledger", help="SQLite privacy ledger of this client.")
    ] = None,
    budget: float = typer.Option(1.0, "--budget", help="This client's epsilon budget."),
    delta_budget: float = typer.Option(1e-5, "--delta-budget"),
    superlink: str = typer.Option("127.0.0.1:9092", "--superlink"),
    insecure: bool = typer.Option(False, "--insecure"),
    root_certificates: Annotated[Path | None, typer.Option("--root-certificates")] = None,
    retry_s: float = typer.Option(
        60.0,
        "--retry-s",
        help="Seconds the client keeps trying to reach the server before it gives up.",
    ),
    transcript: Annotated[
        Path | None,
        typer.Option(
            "--transcript",
            help="Append every reply this client sends to the server to FILE (JSON lines, as "
            "the server receives it: after SecAgg+'s masking).",
        ),
    ] = None,
    policy_file: Annotated[
        Path | None,
        typer.Option(
            "--policy",
            help="This client's privacy policy (TOML: max-epsilon, max-delta, min-threshold, "
            "accept, allow-seeded-noise, collusion-margin, allow-minority-threshold). Default: "
            "LEDGER.policy.toml next to --ledger when it exists. The options below override its "
            "keys.",
        ),
    ] = None,
    max_epsilon: float = typer.Option(
        None,
        "--max-epsilon",
        help="The most epsilon one run may cost this client; a run asking more is refused "
        "(default: the policy file's, else --budget).",
    ),
    max_delta: float = typer.Option(
        None, "--max-delta", help="The most delta one run may cost (default: --delta-budget)."
    ),
    min_threshold: int = typer.Option(
        None,
        "--min-threshold",
        help="The smallest threshold t of distributed noise shares this client accepts "
        "(default 2; over SecAgg+ also its reconstruction threshold).",
    ),
    collusion_margin: int = typer.Option(
        None,
        "--collusion-margin",
        help="Colluding clients a sum must withstand (default 0): one of S clients withstands "
        "S - t, over SecAgg+ at most t - 2; a run or SecAgg+ round that withstands fewer is "
        "refused.",
    ),
    allow_minority_threshold: bool = typer.Option(
        False,
        "--allow-minority-threshold",
        help="Join SecAgg+ runs whose threshold t is at most half the clients (a server that "
        "showed clients different unmask requests could then unmask one upload).",
    ),
    accept: str = typer.Option(
        None,
        "--accept",
        help="The runs this client joins, comma-separated: distributed, trusted (DP runs by "
        "how the noise is added), none (runs without DP: exact payloads leave the client). "
        "Default: distributed,trusted.",
    ),
    allow_seeded_noise: bool = typer.Option(
        False,
        "--allow-seeded-noise",
        help="Answer runs that ask for seeded (reproducible, not private) noise: tests only.",
    ),
) -> None:
    """Run a SuperNode that answers privcal rounds from DATA, within its own ledger budget and
    its own privacy policy (a run asking for more epsilon, another aggregation, a smaller
    threshold or seeded noise is refused before the data is read)."""
    with user_errors():
        need_flwr()
        reject_if(budget <= 0, "--budget", "> 0", budget)
        from privcal.federated.flower.task import load_client_data

        load_client_data(data)  # a bad file is an Error line here, not a failed round later
        policy = _client_policy(
            policy_file, ledger, budget, delta_budget,
            {"max-epsilon": max_epsilon, "max-delta": max_delta, "min-threshold": min_threshold,
             "accept": accept, "allow-seeded-noise": allow_seeded_noise or None,
             "collusion-margin": collusion_margin,
             "allow-minority-threshold": allow_minority_threshold or None},
        )  # fmt: skip
        node: dict[str, object] = {"data": str(data.resolve()), **policy.to_node()}
        if transcript is not None:
            from privcal.data.io import check_output_path

            check_output_path(transcript, "--transcript", "privcal federate client", (".jsonl",))
            node["transcript"] = str(transcript.resolve())
        if ledger is not None:
            from privcal.privacy import PrivacyOdometer

            odo = PrivacyOdometer(budget, ledger=ledger, delta_budget=delta_budget)
            if odo.remaining <= 0:  # it still connects: the server learns why in round 0
                err_console.print(
                    f"The ledger {str(ledger)!r} has spent its whole budget ({odo.spent:g} of "
                    f"{budget:g}): this client will refuse every DP run, and tells the server "
                    "so when the run starts.",
                    style="yellow",
                    markup=False,
                    highlight=False,
                )
            node.update(
                {"ledger": str(ledger.resolve()), "budget": budget, "delta-budget": delta_budget}
            )
        if not insecure and not root_certificates:
            fail("Pass --insecure (local tests only) or --root-certificates CA.")
        tls = ["--insecure"] if insecure else ["--root-certificates", str(root_certificates)]
        reject_if(retry_s <= 0, "--retry-s", "> 0", retry_s)
    err_console.print(f"This client's {policy.describe()}", markup=False, highlight=False)
    _run_client(node, superlink, tls, retry_s)


def _client_policy(
    path: Path | None,
    ledger: Path | None,
    budget: float,
    delta_budget: float,
    options: dict[str, Any],
) -> Any:
    """The client's :class:`~privcal.federated.policy.ClientPolicy`: the policy file (``--policy``,
    else ``LEDGER.policy.toml`` when it exists), its keys overridden by the options given; a
    missing epsilon or delta bound is the client's ``--budget`` / ``--delta-budget``."""
    from privcal.federated.policy import ClientPolicy, default_policy_path

    if path is None and ledger is not None and default_policy_path(ledger).exists():
        path = default_policy_path(ledger)
    if path is not None and not path.is_file():
        raise ValueError(f"--policy {str(path)!r} is not a file (a TOML privacy policy).")
    values = {} if path is None else ClientPolicy.from_file(path).to_node()
    values.update({k: v for k, v in options.items() if v is not None})
    values.setdefault("max-epsilon", budget)
    values.setdefault("max-delta", delta_budget)
    where = "This client's policy" + ("" if path is None else f" (--policy {str(path)!r})")
    if ledger is not None:
        values["ledger"] = str(ledger)
    return ClientPolicy.from_node(values, where)


def _run_client(node: dict[str, object], superlink: str, tls: list[str], retry_s: float) -> None:
    """Run the SuperNode, show this client's status lines, end with the run or the server.

    Exit status: 0 when the run this client took part in ended (released, or stopped by the
    server: one line says which), :data:`EXIT_BUDGET` when this client refused the run (its
    policy, its ledger, its data's classes), 1 when the run failed, when it ended without this
    client (the server had chosen the run's clients before it connected or answered), or when
    the server could not be reached or was lost.
    """
    import logging
    import threading

    from privcal.federated.flower.client_app import WITHOUT_THIS_CLIENT
    from privcal.federated.flower.deploy import FlowerProcesses
    from privcal.federated.flower.executor import serve_many

    # Flower's connection retries are the SuperNode's business (its log); the person running
    # the client sees privcal's status lines
    logging.getLogger("flwr").setLevel(logging.CRITICAL)
    stop = threading.Event()
    threads: list[threading.Thread] = []
    work_status: list[str] | None = None
    with service() as work:
        node["status"] = str(work / "status.log")
        fp = FlowerProcesses(work, die_with_parent=True)
        try:
            proc = fp.start_supernode(
                "supernode", node, wait_s=0, retry_s=retry_s, superlink=superlink, tls=tls
            )
            threads = serve_many([fp.runtime["supernode"]], stop)  # the ClientApp runs here
            err_console.print(
                f"Client of {superlink}: waiting for rounds (gives up after {retry_s:g} s "
                "without the server)."
            )
            end = _follow(work / "status.log", work / "supernode.log", proc)
            reached = _reached_server(work / "supernode.log")
            crashed = None if reached else _crash_line(work / "supernode.log")
            status = work / "status.log"
            work_status = status.read_text().splitlines() if status.exists() else []
        finally:
            # the executor threads first (each ends its task, if any, within a poll), then the
            # SuperNode: a thread must not talk to a SuperNode that is gone (a long
            # httpx.ConnectError traceback on Ctrl-C)
            stop.set()
            for t in threads:
                t.join(timeout=5)
            fp.stop()
    if end is None and crashed is not None:
        fail(f"This client's SuperNode stopped before it reached the server: {crashed}", code=1)
    if end is None and not reached:
        fail(
            f"Could not reach the server at {superlink} within {retry_s:g} s (--retry-s): is "
            "`privcal federate server` running there, and are the address and --insecure / "
            "--root-certificates right?",
            code=1,
        )
    if end is None:
        fail(
            f"Lost the server at {superlink}: no connection for {retry_s:g} s (--retry-s); "
            "the client stopped.",
            code=1,
        )
    failed = [ln for ln in (work_status or []) if re.match(r"round \S+: failed \(", ln)]
    refused, stopped = "end: refused the run (", "end: the server stopped the run ("
    if end.startswith(refused):
        fail(f"This client refused the run: {end[len(refused) : -1]}.", EXIT_BUDGET)
    if end.startswith(stopped + "the run failed"):
        fail(f"The server stopped the run ({end[len(stopped) : -1]}).", code=1)
    if end.startswith(stopped):
        console.print(f"The server stopped the run ({end[len(stopped) : -1]}); the client stopped.")
        return
    if failed:
        fail(
            f"This client failed {len(failed)} round(s) of the run ({failed[0]}); the run went on "
            "without its answers.",
            code=1,
        )
    if end == f"end: {WITHOUT_THIS_CLIENT}":
        fail(
            "The run ended without this client: the server did not take it into the run, so it "
            "took part in no round and nothing was charged (it connected after the server had "
            "chosen the run's --num-nodes clients, its join answer came late, or it did not "
            "answer as the run asks, e.g. a node without a ledger in a data-source run). Start "
            "the clients before the server's run begins.",
            code=1,
        )
    console.print("The run is over; the client stopped.")


def _reached_server(log: Path) -> bool:
    """Whether the SuperNode ever registered with the SuperLink (its log names its node id)."""
    return log.exists() and "SuperNode ID" in log.read_text(errors="replace")


def _crash_line(log: Path) -> str | None:
    """The last error line of a SuperNode that stopped on its own (not one that gave up on the
    server after ``--retry-s``); ``None`` when it gave up, or left no error."""
    text = plain_text(log.read_text(errors="replace")) if log.exists() else ""
    if "Giving up reconnection" in text:
        return None
    errors = [ln.strip() for ln in text.splitlines() if "Error" in ln or "ERROR" in ln]
    return errors[-1] if errors else None


def _await_replies(log: Path, wait_s: float = 30.0) -> None:
    """Wait (at most ``wait_s``) until the SuperNode has sent a reply to every message it
    received (its log's ``Sent successfully`` lines catch up with its ``Received successfully``
    lines), the last being its answer to the server's end-of-run message.

    Stopping the SuperNode before its last reply's objects are pushed leaves the SuperLink a
    message whose contents never arrive, and the server's pull of it retries for minutes.
    """
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        if text.count("Sent successfully") >= max(text.count("Received successfully"), 1):
            return
        time.sleep(0.1)


def _follow(status: Path, log: Path, proc: Any) -> str | None:
    """Print new status lines until the run's end (the ``end:`` line), or until the SuperNode
    gives up on the server or exits (None)."""
    seen = 0
    while True:
        lines = status.read_text().splitlines() if status.exists() else []
        for line in lines[seen:]:
            style = "yellow" if "WARNING" in line or "refused" in line else None
            err_console.print(line, style=style, markup=False, highlight=False, soft_wrap=True)
            if line.startswith("end:"):
                # a stopped or refused run may leave a message unanswered (a SecAgg+ stage the
                # server no longer waits for): its reply to the end comes within a poll or two
                _await_replies(log, 30.0 if line == "end: the run is over" else 3.0)
                return line
        seen = len(lines)
        if proc.poll() is not None or "Giving up reconnection" in log.read_text(errors="replace"):
            return None
        time.sleep(0.2)

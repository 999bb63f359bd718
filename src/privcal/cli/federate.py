"""``privcal federate server|client|simulate`` (Flower) and ``privcal bench maddock2025``.

Needs the ``federated`` extra (``pip install privcal[federated]``) for ``federate``.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from privcal.cli._common import (
    EXIT_BUDGET,
    console,
    err_console,
    fail,
    force_option,
    plain_text,
    refuse_overwrite,
    table_width,
    user_errors,
)

__all__ = ["client", "maddock2025", "register", "server", "simulate"]

_SERVER_OUT = Path("federated-out")
_SIM_OUT = Path("federated-sim-out")
_BENCH_OUT = Path("results/maddock2025")

federate_app = typer.Typer(
    help="Federated calibration over Flower: run a server (SuperLink + ServerApp), a client "
    "(SuperNode holding private logits and a privacy ledger), or a whole federation on "
    "Flower's Simulation Engine (simulate).",
    no_args_is_help=True,
)


def _need_flwr() -> None:
    from privcal.federated.flower import no_telemetry_by_default

    no_telemetry_by_default()  # before Flower reads the variable
    try:
        import flwr  # noqa: F401
    except ImportError:
        fail("privcal federate needs the federated extra: pip install 'privcal[federated]'")


def _tls(insecure: bool, certs: str | None) -> tuple[str, str, str] | None:
    if insecure:
        return None
    if not certs:
        fail("Pass --insecure (local tests only) or --tls CA,CERT,KEY.")
    parts = tuple(certs.split(","))
    if len(parts) != 3:
        fail(f"--tls takes three comma-separated paths CA,CERT,KEY. Got {certs!r}.")
    return parts


@federate_app.command("server")
def server(
    method: str = typer.Option(
        "fedtemp",
        "--method",
        help="fedtemp, fedvector, fedopvector, "
        "fedmatrix, fedcal, fedbin, fedbbq, fedbbq-all, fedbbq-changed, or acc-t (seed 000: DP "
        "Acc-T over clients acting as data sources; needs --epsilon and client ledgers; with "
        "--secagg each query's answers are distributed noise shares summed by SecAgg+).",
    ),
    rounds: int = typer.Option(12, "--rounds", help="Rounds T (>= 1)."),
    num_nodes: int = typer.Option(
        2, "--num-nodes", help="Clients in the federation (declared public); waits for them."
    ),
    min_clients: int = typer.Option(
        2,
        "--min-clients",
        help="Fewest connected clients to start; without DP also the fewest accepted updates a "
        "round needs (a DP round never depends on how many replied).",
    ),
    n_classes: int = typer.Option(..., "--n-classes", help="Number of classes C."),
    epsilon: float = typer.Option(
        0.0,
        "--epsilon",
        help="User-level epsilon of the whole run (0 = no DP). --num-nodes is then the declared "
        "(public) federation size: the average divides by sample-rate x num-nodes.",
    ),
    delta: float = typer.Option(1e-5, "--delta"),
    clip: float = typer.Option(0.5, "--clip", help="C for scaling updates."),
    clip_pos: float = typer.Option(10.0, "--clip-pos", help="C+ (positive histograms)."),
    clip_neg: float = typer.Option(50.0, "--clip-neg", help="C- (negative histograms)."),
    sample_rate: float = typer.Option(1.0, "--sample-rate", help="Client sampling rate p."),
    weighting: str = typer.Option("all", "--weighting", help="none, all or changed (binning)."),
    secagg: bool = typer.Option(False, "--secagg", help="Sum payloads with Flower SecAgg+."),
    aggregation: str = typer.Option(
        None,
        "--aggregation",
        help="Who adds the noise of a DP run: 'distributed' (each client adds a discrete "
        "Gaussian share; the server sees only the SecAgg+ sum; the default with --secagg) or "
        "'trusted' (the server adds it to the exact sum; the default without --secagg).",
    ),
    threshold: int = typer.Option(
        None,
        "--threshold",
        help="t of --aggregation distributed, in [2, num-nodes - 1]: the shares are sized so "
        "that any t honest surviving clients make up the noise, and SecAgg+ unmasks no sum of "
        "fewer than t; fewer survivors release nothing (default: num-nodes minus a fifth, at "
        "least one dropout).",
    ),
    host: str = typer.Option("127.0.0.1", "--host"),
    port: int = typer.Option(9092, "--port"),
    insecure: bool = typer.Option(False, "--insecure", help="Plaintext transport (local tests)."),
    tls: str = typer.Option(None, "--tls", help="CA,CERT,KEY paths for TLS."),
    out: Annotated[Path, typer.Option("--out", help="Output folder.")] = _SERVER_OUT,
    timeout: float = typer.Option(3600.0, "--timeout", help="Seconds to wait for the run."),
    force: bool = typer.Option(
        False,
        "--force",
        help="Run even when the plan (privcal federate plan) expects the release to fall back "
        "to the uncalibrated model (every site would spend for nothing), and write over an "
        "--out folder that holds an earlier DP run's release.",
    ),
    wait_clients: float = typer.Option(
        300.0,
        "--wait-clients",
        help="Seconds to wait for --num-nodes clients to connect; then the run goes on with "
        "those connected if at least --min-clients, else ends (nothing is spent).",
    ),
    val: Annotated[
        Path | None,
        typer.Option(
            "--val",
            exists=True,
            help="Labelled validation split the server holds: the result is checked against "
            "the uncalibrated model on it (a warning when worse). Without it each client "
            "checks on its own data.",
        ),
    ] = None,
) -> None:
    """Start a SuperLink, submit the privcal ServerApp with `flwr run`, wait, write the result.

    An --out folder holding an earlier DP run's release is not written over, unless --force."""
    with user_errors():
        from privcal.federated import METHODS

        if method not in (*METHODS, "acc-t"):
            raise ValueError(f"Unknown --method {method!r}; known: {', '.join(METHODS)}.")
        for name, v in (
            ("rounds", rounds),
            ("num-nodes", num_nodes),
            ("min-clients", min_clients),
            ("n-classes", n_classes),
        ):
            if v < 1:
                raise ValueError(f"--{name} must be >= 1. Got {v}.")
        _check_federation(method, num_nodes, min_clients, epsilon, secagg, weighting, timeout)
        if not wait_clients > 0:
            raise ValueError(f"--wait-clients must be > 0. Got {wait_clients}.")
        aggregation = _check_aggregation(aggregation, threshold, secagg, epsilon, num_nodes)
        if method == "acc-t" and secagg and aggregation != "distributed":
            raise ValueError(
                "--method acc-t --secagg sums the data sources' distributed noise shares: drop "
                "--aggregation trusted (or drop --secagg: each source then adds its own noise)."
            )
        if not 0 < sample_rate <= 1:
            raise ValueError(f"--sample-rate must be in (0, 1]. Got {sample_rate}.")
        if secagg and sample_rate < 1:
            raise ValueError("--secagg uses every client in every round: --sample-rate must be 1.")
        for cname, cv in (("clip", clip), ("clip-pos", clip_pos), ("clip-neg", clip_neg)):
            if cv <= 0:
                raise ValueError(f"--{cname} must be > 0. Got {cv}.")
        if epsilon < 0:
            raise ValueError(f"--epsilon must be >= 0 (0 = no DP). Got {epsilon}.")
        if epsilon > 0 and not 0 < delta < 1:
            raise ValueError(f"--delta must be in (0, 1). Got {delta}.")
        if aggregation == "distributed" and method != "acc-t":  # a source's query is checked
            _check_ring(method, n_classes, num_nodes, threshold, rounds, epsilon, delta, clip,
                        clip_pos, clip_neg, weighting)  # fmt: skip
        _need_flwr()  # after the checks that need no Flower: a typo is refused at once
        from privcal.federated.flower.deploy import FlowerProcesses

        if val is not None:
            from privcal.federated.flower.task import load_client_data

            if load_client_data(val)[0].shape[1] != n_classes:
                raise ValueError(f"--val {str(val)!r} does not have --n-classes={n_classes}.")
        certs = _tls(insecure, tls)
        out = out.resolve()
        cfg = {
            "method": method,
            "rounds": rounds,
            "num-nodes": num_nodes,
            "min-clients": min_clients,
            "n-classes": n_classes,
            "epsilon": epsilon,
            "delta": delta,
            "clip": clip,
            "clip-pos": clip_pos,
            "clip-neg": clip_neg,
            "sample-rate": sample_rate,
            "weighting": weighting,
            "secagg": secagg,
            "aggregation": aggregation,
            "threshold": threshold or 0,
            "out-dir": str(out),
            "wait-nodes-s": wait_clients,
            "val": "" if val is None else str(val.resolve()),
        }
        _fresh_out(out, "privcal federate server", force)
        from privcal.cli.federate_plan import server_plan, show_plan

        cfg["plan"], line = server_plan(cfg, force)  # before any process starts or any spend
        out.mkdir(parents=True, exist_ok=True)
        show_plan(line)
        (out / "interrupted.json").unlink(missing_ok=True)
        with _service() as work:
            fp = FlowerProcesses(
                work,
                host=host,
                insecure=certs is None,
                certificates=certs,
                port=port,
                die_with_parent=True,
            )
            try:
                try:
                    fp.start_superlink()
                except RuntimeError:
                    fail(
                        f"The SuperLink did not start on {host}:{port} (is the port in use? "
                        "pass another --port)."
                    )
                err_console.print(
                    f"SuperLink on {fp.address}; waiting for {num_nodes} clients "
                    f"(privcal federate client --superlink {fp.address} ...)"
                )
                with (out / "run.log").open("w") as log:
                    res = fp.run(cfg, timeout_s=timeout, on_line=_server_line(log))
            except _Stopped as stop:
                # the ServerApp tells the clients the run stopped; then every process goes
                marker = out / "interrupted.json"  # the ServerApp writes it once told
                told = fp.stop_serverapp(wait_s=6.0, done=marker.exists) and marker.exists()
                _write_interrupted(out, stop.signum, told)
                raise
            finally:
                fp.stop()
    _server_end(res, out)


def _check_federation(
    method: str,
    num_nodes: int,
    min_clients: int,
    epsilon: float,
    secagg: bool,
    weighting: str,
    timeout: float,
) -> None:
    """Refuse federation settings that cannot run, before any process starts.

    Otherwise the server would start a SuperLink and wait ``--timeout`` (an hour by default)
    for clients that can never be enough, or for a run the ServerApp cannot start.
    """
    if min_clients > num_nodes:
        raise ValueError(
            f"--min-clients ({min_clients}) is larger than --num-nodes ({num_nodes}): the server "
            f"waits for {num_nodes} clients, so the run could never start. Pass --min-clients "
            f"<= {num_nodes}, or declare more clients with --num-nodes."
        )
    if method == "acc-t" and not epsilon > 0:
        raise ValueError(
            "--method acc-t is DP Acc-T (the clients answer as private data sources): it needs "
            "--epsilon > 0, e.g. --epsilon 1."
        )
    if weighting not in ("none", "all", "changed"):
        raise ValueError(f"--weighting must be none, all or changed. Got {weighting!r}.")
    if not timeout > 0:
        raise ValueError(f"--timeout must be > 0. Got {timeout}.")


def _check_aggregation(
    aggregation: str | None, threshold: int | None, secagg: bool, epsilon: float, num_nodes: int
) -> str:
    """``--aggregation`` and ``--threshold``, checked against each other and the transport;
    returns the aggregation the run uses (default: distributed with --secagg, else trusted)."""
    if aggregation is None:
        aggregation = "distributed" if secagg and epsilon > 0 else "trusted"
    if aggregation not in ("distributed", "trusted"):
        raise ValueError(
            f"--aggregation must be 'distributed' or 'trusted'. Got {aggregation!r}. (The data "
            "sources' 'local' aggregation belongs to privcal fit --sources.)"
        )
    if aggregation == "distributed":
        if not secagg:
            raise ValueError(
                "--aggregation distributed needs --secagg: without a secure sum the server "
                "would see each client's upload, which carries only a share of the noise."
            )
        if not epsilon > 0:
            raise ValueError(
                "--aggregation distributed adds noise shares, so it needs a DP run: pass "
                "--epsilon > 0, or drop --aggregation."
            )
    if secagg and num_nodes < 3:
        raise ValueError(
            f"--secagg needs --num-nodes >= 3 (Flower's SecAgg+ splits each key into more than "
            f"two shares). Got {num_nodes}."
        )
    if threshold is not None:
        if aggregation != "distributed":
            raise ValueError(
                "--threshold sizes distributed noise shares: pass it with --aggregation "
                "distributed (and --secagg), or drop it."
            )
        if not 2 <= threshold <= num_nodes - 1:
            raise ValueError(
                f"--threshold must be in [2, --num-nodes - 1 = {num_nodes - 1}]: it is also "
                "SecAgg+'s reconstruction threshold, which needs at least 2 shares and fewer "
                "than the number of clients (at t = num-nodes SecAgg+ would unmask a sum of "
                f"num-nodes - 1 shares, less noise than claimed). Got {threshold}."
            )
    return aggregation


def _check_ring(
    method: str,
    n_classes: int,
    num_nodes: int,
    threshold: int | None,
    rounds: int,
    epsilon: float,
    delta: float,
    clip: float,
    clip_pos: float,
    clip_neg: float,
    weighting: str,
) -> None:
    """Build the run's distributed plans as the ServerApp will: a SecAgg+ ring (2^31) too small
    for the clients' bound and the noise is refused here, before any process starts."""
    from privcal.federated.flower.task import DEFAULTS, dp_from_config, method_from_config
    from privcal.privacy import SecureNoise

    cfg = {**DEFAULTS, "method": method, "n-classes": n_classes, "num-nodes": num_nodes,
           "threshold": threshold or 0, "rounds": rounds, "epsilon": epsilon, "delta": delta,
           "clip": clip, "clip-pos": clip_pos, "clip-neg": clip_neg, "weighting": weighting,
           "secagg": True, "aggregation": "distributed"}  # fmt: skip
    fm = method_from_config(cfg)
    dp = dp_from_config(cfg, SecureNoise())
    assert dp is not None
    for g in fm.noise_groups(dp, fm.payload_shape(n_classes)):
        dp.plan(g)


#: What a run writes to --out (the ServerApp, and run.log here).
_RUN_FILES = (
    "calibrator.json",
    "history.json",
    "state.json",
    "config.json",
    "privacy_report.json",
    "aggregator_view.json",
    "run.log",
)


def _fresh_out(out: Path, owner: str, force: bool) -> None:
    """Refuse an --out folder whose earlier run released privately (unless ``force``), then
    remove the earlier run's files, so that none of them passes for this run's."""
    refuse_overwrite([out / "privacy_report.json", out / "calibrator.json"], "--out", owner, force)
    for name in _RUN_FILES:
        (out / name).unlink(missing_ok=True)


def _write_interrupted(out: Path, signum: int, told: bool) -> None:
    """``interrupted.json`` in the output folder: the run was stopped before its release
    (``privcal report`` reads it); ``history.json`` holds the rounds that were released. The
    ServerApp writes the file first (the rounds done, the clients told), the CLI adds the
    signal."""
    import json
    import signal

    path = out / "interrupted.json"
    info = json.loads(path.read_text()) if path.exists() else {}  # the ServerApp's part
    info.update(
        interrupted=True,
        signal=signal.Signals(signum).name,
        clients_told=told,
        time=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    )
    path.write_text(json.dumps(info, indent=2) + "\n")


def _server_line(log: Any) -> Any:
    """Show the ServerApp's ``privcal:`` lines as they arrive; keep every line in ``log`` as
    plain text (Flower colours its log levels: the escape codes are left out of the file)."""

    def show(line: str) -> None:
        line = plain_text(line)
        log.write(line + "\n")
        log.flush()
        text = line.split("privcal: ", 1)[1] if "privcal: " in line else None
        if text is None or text.startswith(("PrivacyReport", "budget:")):
            return
        style = "yellow" if "WARNING" in text or "dropped" in text else None
        err_console.print(text, style=style, markup=False, highlight=False)

    return show


def _server_end(res: Any, out: Path) -> None:
    """Exit status and summary of a finished run (budget refusals exit 3)."""
    text = res.stdout
    if res.returncode == 124:
        fail(f"The run did not end within --timeout; its log is {out / 'run.log'}.")
    if "privcal: budget:" in text or "BudgetExceededError" in text:
        reason = next(
            (ln.split("privcal: ", 1)[1] for ln in text.splitlines() if "privcal: budget:" in ln),
            "a client's privacy budget is spent",
        )
        fail(f"Refused: {reason}", code=EXIT_BUDGET)
    if res.returncode != 0 or not (out / "calibrator.json").exists():
        reason = [ln.split("privcal: ", 1)[1] for ln in text.splitlines() if "privcal: " in ln]
        last = reason[-1] if reason else "see the log"
        fail(f"The run failed ({last}); its log is {out / 'run.log'}.")
    console.print(f"Wrote {out / 'calibrator.json'} and {out / 'history.json'}")
    _print_report(out / "privacy_report.json")


def _print_report(path: Path) -> None:
    """Print the run's privacy report (DP runs write one; a run without DP is not private)."""
    import json

    from privcal.privacy import PrivacyReport

    if not path.exists():
        console.print("No DP (--epsilon 0): the calibrator is not private.")
        return
    report = PrivacyReport.from_dict(json.loads(path.read_text()))
    console.print(report.format(table_width()), markup=False, highlight=False)
    console.print(f"Wrote {path}")


@contextmanager
def _service() -> Iterator[Path]:
    """A temporary work folder, removed on exit, with SIGTERM handled like Ctrl-C.

    Every child process is stopped by the caller's ``finally`` (process groups, see
    :meth:`~privcal.federated.flower.deploy.FlowerProcesses.stop`); SIGINT and SIGTERM end the
    command with one line and exit status 130 / 143.
    """
    import shutil
    import signal

    def raise_interrupt(signum: int, _frame: Any) -> None:
        raise _Stopped(signum)

    previous = {s: signal.signal(s, raise_interrupt) for s in (signal.SIGTERM, signal.SIGINT)}
    work = Path(tempfile.mkdtemp(prefix="privcal-flwr-"))
    try:
        yield work
    except _Stopped as stop:
        err_console.print(f"Stopped by {signal.Signals(stop.signum).name}; every process ended.")
        raise typer.Exit(128 + stop.signum) from None
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        shutil.rmtree(work, ignore_errors=True)


class _Stopped(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@federate_app.command("client")
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
            "accept, allow-seeded-noise). Default: LEDGER.policy.toml next to --ledger when it "
            "exists. The options below override its keys.",
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
        _need_flwr()
        if budget <= 0:
            raise ValueError(f"--budget must be > 0. Got {budget}.")
        from privcal.federated.flower.task import load_client_data

        load_client_data(data)  # a bad file is an Error line here, not a failed round later
        policy = _client_policy(
            policy_file, ledger, budget, delta_budget,
            {"max-epsilon": max_epsilon, "max-delta": max_delta, "min-threshold": min_threshold,
             "accept": accept, "allow-seeded-noise": allow_seeded_noise or None},
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
        tls = (
            ["--insecure"]
            if insecure
            else (["--root-certificates", str(root_certificates)] if root_certificates else None)
        )
        if tls is None:
            fail("Pass --insecure (local tests only) or --root-certificates CA.")
        if retry_s <= 0:
            raise ValueError(f"--retry-s must be > 0. Got {retry_s}.")
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

    Exit status: 0 when the run ended (released, or stopped by the server: one line says
    which), :data:`EXIT_BUDGET` when this client refused the run (its policy, its ledger, its
    data's classes), 1 when the server could not be reached or was lost.
    """
    import logging
    import threading

    from privcal.federated.flower.deploy import FlowerProcesses
    from privcal.federated.flower.executor import serve_many

    # Flower's connection retries are the SuperNode's business (its log); the person running
    # the client sees privcal's status lines
    logging.getLogger("flwr").setLevel(logging.CRITICAL)
    stop = threading.Event()
    threads: list[threading.Thread] = []
    with _service() as work:
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
        finally:
            # the executor threads first (each ends its task, if any, within a poll), then the
            # SuperNode: a thread must not talk to a SuperNode that is gone (a long
            # httpx.ConnectError traceback on Ctrl-C)
            stop.set()
            for t in threads:
                t.join(timeout=5)
            fp.stop()
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
    refused, stopped = "end: refused the run (", "end: the server stopped the run ("
    if end.startswith(refused):
        fail(f"This client refused the run: {end[len(refused) : -1]}.", EXIT_BUDGET)
    if end.startswith(stopped):
        console.print(f"The server stopped the run ({end[len(stopped) : -1]}); the client stopped.")
        return
    console.print("The run is over; the client stopped.")


def _reached_server(log: Path) -> bool:
    """Whether the SuperNode ever registered with the SuperLink (its log names its node id)."""
    return log.exists() and "SuperNode ID" in log.read_text(errors="replace")


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
            err_console.print(line, style=style, markup=False, highlight=False)
            if line.startswith("end:"):
                # a stopped or refused run may leave a message unanswered (a SecAgg+ stage the
                # server no longer waits for): its reply to the end comes within a poll or two
                _await_replies(log, 30.0 if line == "end: the run is over" else 3.0)
                return line
        seen = len(lines)
        if proc.poll() is not None or "Giving up reconnection" in log.read_text(errors="replace"):
            return None
        time.sleep(0.2)


@federate_app.command("simulate")
def simulate(
    data: Annotated[
        Path,
        typer.Argument(
            help="One score file holding every client's rows (split by "
            "dirichlet_partition(labels, n_clients=N, beta=B, seed=S)), or a folder of N score "
            "files, one per client (name order).",
        ),
    ],
    num_nodes: int = typer.Option(
        ..., "--num-nodes", help="N: simulated clients (the declared, public federation size)."
    ),
    beta: float = typer.Option(0.1, "--beta", help="Dirichlet concentration of the split."),
    seed: int = typer.Option(
        0, "--seed", help="Seed of the split and of the server's client sampling."
    ),
    method: str = typer.Option(
        "fedtemp",
        "--method",
        help="fedtemp, fedvector, fedopvector, fedmatrix, their -averaging forms, fedcal, "
        "fedbin, fedbbq, fedbbq-all or fedbbq-changed.",
    ),
    rounds: int = typer.Option(12, "--rounds", help="Rounds T (>= 1)."),
    epsilon: float = typer.Option(
        0.0, "--epsilon", help="User-level epsilon of the whole run (0 = no DP)."
    ),
    delta: float = typer.Option(1e-5, "--delta"),
    sample_rate: float = typer.Option(1.0, "--sample-rate", help="Client sampling rate p."),
    noise: str = typer.Option(
        "secure",
        "--noise",
        help="secure (OpenDP), or seeded: SeededNoise(seed + 1), reproducible and not private.",
    ),
    ledgers: Annotated[
        Path | None,
        typer.Option(
            "--ledgers",
            help="Folder of the clients' SQLite ledgers (client-K.sqlite): each charges "
            "epsilon / T per round and refuses beyond --budget.",
        ),
    ] = None,
    budget: float = typer.Option(1.0, "--budget", help="Each client's epsilon budget."),
    num_cpus: int = typer.Option(
        None, "--num-cpus", help="CPUs Ray may use here (default: all); one client actor each."
    ),
    ray_address: str = typer.Option(
        None, "--ray-address", help="Run the clients on a Ray cluster (HEAD:6379)."
    ),
    out: Annotated[Path, typer.Option("--out", help="Output folder.")] = _SIM_OUT,
    timeout: float = typer.Option(86400.0, "--timeout", help="Seconds the run may take."),
    force: Annotated[bool, force_option()] = False,
) -> None:
    """Run the privcal ServerApp and ClientApp on Flower's Simulation Engine (Ray), one client per
    partition of DATA; progress per round; writes the calibrator, history and privacy report
    (not over an earlier DP run's, unless --force)."""
    with user_errors():
        _need_flwr()
        from privcal.federated import METHODS
        from privcal.federated.flower.simulation import (
            federation_config,
            run_simulation,
            simulation_config,
        )

        if method not in METHODS:
            raise ValueError(f"Unknown --method {method!r}; known: {', '.join(METHODS)}.")
        for name, v in (("num-nodes", num_nodes), ("rounds", rounds)):
            if v < 1:
                raise ValueError(f"--{name} must be >= 1. Got {v}.")
        if not beta > 0:
            raise ValueError(f"--beta must be > 0. Got {beta}.")
        if seed < 0:
            raise ValueError(f"--seed must be >= 0. Got {seed}.")
        if epsilon < 0:
            raise ValueError(f"--epsilon must be >= 0 (0 = no DP). Got {epsilon}.")
        if epsilon > 0 and not 0 < delta < 1:
            raise ValueError(f"--delta must be in (0, 1). Got {delta}.")
        if not 0 < sample_rate <= 1:
            raise ValueError(f"--sample-rate must be in (0, 1]. Got {sample_rate}.")
        if noise not in ("secure", "seeded"):
            raise ValueError(f"--noise must be secure or seeded. Got {noise!r}.")
        if budget <= 0:
            raise ValueError(f"--budget must be > 0. Got {budget}.")
        if num_cpus is not None and num_cpus < 1:
            raise ValueError(f"--num-cpus must be >= 1. Got {num_cpus}.")
        if num_cpus is not None and ray_address:
            raise ValueError("--num-cpus applies to this machine; a Ray cluster has its own.")
        if timeout <= 0:
            raise ValueError(f"--timeout must be > 0. Got {timeout}.")
        out = out.resolve()
        cfg = simulation_config(
            method,
            data,
            num_nodes,
            rounds,
            epsilon=epsilon if epsilon > 0 else None,
            delta=delta,
            beta=beta,
            seed=seed,
            sample_rate=sample_rate,
            noise=noise,
            ledgers=ledgers,
            budget=budget,
            out_dir=out,
            timeout_s=timeout,
            owner="privcal federate simulate",
        )
        fed = federation_config(num_nodes, num_cpus, ray_address)
        _fresh_out(out, "privcal federate simulate", force)
        out.mkdir(parents=True, exist_ok=True)
        with _service() as work:
            where = f"the Ray cluster at {ray_address}" if ray_address else "this machine"
            err_console.print(
                f"Simulating {num_nodes} clients on Flower's Simulation Engine ({where}); "
                "starting Ray..."
            )
            with (out / "run.log").open("w") as log:
                res = run_simulation(cfg, fed, work, _server_line(log), ray_address)
    _server_end(res, out)


def maddock2025(
    out: Annotated[Path, typer.Option("--out", help="Output folder.")] = _BENCH_OUT,
    seed: int = typer.Option(0, "--seed", help="Seed of partitions, sampling and noise."),
    quick: bool = typer.Option(False, "--quick", help="One repeat, fewer settings (smoke run)."),
    repeats: int = typer.Option(None, "--repeats", help="Repeats (default 3, or 1 with --quick)."),
) -> None:
    """Seed 003 (Maddock et al.): federated calibration with user-level DP (Fig. 2-3, Tab. 2-3)."""
    with user_errors():
        from privcal.experiments import maddock2025 as exp

        path = exp.run(out, seed=seed, quick=quick, repeats=repeats, progress=err_console.print)
        console.print(path.read_text(), markup=False, highlight=False)
        console.print(f"Wrote {path}")


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Add ``federate server|client|simulate|plan`` to ``app``, ``bench maddock2025`` to
    ``bench_app``."""
    from privcal.cli.federate_plan import plan

    federate_app.command("plan")(plan)
    app.add_typer(federate_app, name="federate")
    bench_app.command("maddock2025")(maddock2025)

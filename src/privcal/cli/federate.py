"""``privcal federate server|client|simulate`` (Flower) and ``privcal bench maddock2025``.

Needs the ``federated`` extra (``pip install privcal[federated]``) for ``federate``.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer

from privcal.cli._common import (
    EXIT_BUDGET,
    ForceOption,
    OutDir,
    console,
    err_console,
    fail,
    plain_text,
    print_protocol,
    refuse_overwrite,
    table_width,
    user_errors,
)
from privcal.cli._flower import Stopped, need_flwr, reject_if, service
from privcal.cli.federate_client import client

__all__ = ["client", "maddock2025", "register", "server", "simulate"]

_SERVER_OUT = Path("federated-out")
_SIM_OUT = Path("federated-sim-out")
_BENCH_OUT = Path("results/maddock2025")
_ALPHA, _ROW_CAP = 0.1, 5  # FedConformal's defaults (FED_CONFORMAL_ROWS)
_ALPHA_HELP = "conformal-lac/-aps: the sets' miscoverage level (coverage 1 - alpha)."
_ROW_CAP_HELP = (
    "conformal-lac/-aps: r, the most rows a client uses (public; each client picks its r rows "
    "with a seed of its own, the same rows every round)."
)
#: The server's labelled validation split (``federate server`` and ``simulate``).
ValOption = Annotated[
    Path | None,
    typer.Option(
        "--val",
        exists=True,
        help="Labelled validation split the server holds: a calibrator is checked against the "
        "uncalibrated model on it (a warning when worse), sets for their coverage and mean "
        "size (check.json). Without it each client checks on its own data.",
    ),
]

federate_app = typer.Typer(
    help="Federated calibration over Flower: run a server (SuperLink + ServerApp), a client "
    "(SuperNode holding private logits and a privacy ledger), or a whole federation on "
    "Flower's Simulation Engine (simulate).",
    no_args_is_help=True,
)


def _tls(insecure: bool, certs: str | None) -> tuple[str, str, str] | None:
    if insecure:
        return None
    if not certs:
        fail("Pass --insecure (local tests only) or --tls CA,CERT,KEY.")
    parts = tuple(certs.split(","))
    if len(parts) != 3:
        fail(f"--tls takes three comma-separated paths CA,CERT,KEY. Got {certs!r}.")
    return parts


_ROUND_TIMEOUT_HELP = (
    "Seconds a round (each SecAgg+ stage) waits for its clients' replies; a client that has not "
    "replied by then counts as dropped."
)


@federate_app.command("server")
def server(
    method: str = typer.Option(
        "fedtemp",
        "--method",
        help="fedtemp, fedvector, fedopvector, "
        "fedmatrix, fedcal, fedbin, fedbbq, fedbbq-all, fedbbq-changed, conformal-lac or "
        "conformal-aps (federated conformal prediction sets, written to sets.json), or acc-t "
        "(seed 000: DP Acc-T over clients acting as data sources; needs --epsilon and client "
        "ledgers; with --secagg each query's answers are distributed noise shares summed by "
        "SecAgg+).",
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
    alpha: float = typer.Option(_ALPHA, "--alpha", help=_ALPHA_HELP),
    row_cap: int = typer.Option(_ROW_CAP, "--row-cap", help=_ROW_CAP_HELP),
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
        "least one dropout). Clients refuse a t of at most num-nodes / 2 unless they opt in "
        "(--allow-minority-threshold).",
    ),
    host: str = typer.Option("127.0.0.1", "--host"),
    port: int = typer.Option(9092, "--port"),
    insecure: bool = typer.Option(False, "--insecure", help="Plaintext transport (local tests)."),
    tls: str = typer.Option(None, "--tls", help="CA,CERT,KEY paths for TLS."),
    out: OutDir = _SERVER_OUT,
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
    round_timeout: float = typer.Option(60.0, "--round-timeout", help=_ROUND_TIMEOUT_HELP),
    val: ValOption = None,
) -> None:
    """Start a SuperLink, submit the privcal ServerApp with `flwr run`, wait, write the result.

    An --out folder holding an earlier DP run's release is not written over, unless --force."""
    with user_errors():
        cfg = _server_config(
            {
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
                "threshold": threshold,
                "wait-nodes-s": wait_clients,
                "round-timeout-s": round_timeout,
                "alpha": alpha,
                "row-cap": row_cap,
            },
            timeout,
        )
        need_flwr()  # after the checks that need no Flower: a typo is refused at once
        _check_val(val, n_classes)
        certs = _tls(insecure, tls)
        out = out.resolve()
        cfg.update({"out-dir": str(out), "val": "" if val is None else str(val.resolve())})
        _fresh_out(out, "privcal federate server", force)
        from privcal.cli.federate_plan import server_plan, show_plan

        cfg["plan"], line = server_plan(cfg, force)  # before any process starts or any spend
        out.mkdir(parents=True, exist_ok=True)
        show_plan(line)
        (out / "interrupted.json").unlink(missing_ok=True)
        res = _run_server(cfg, out, host, port, certs, timeout)
    _server_end(res, out, method)


federate_app.command("client")(client)  # between server and simulate in --help


def _server_config(cfg: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Check ``privcal federate server``'s options before Flower is imported and return the
    run configuration the ServerApp reads: ``cfg``, the options by name (``wait-nodes-s`` is
    ``--wait-clients``), with the aggregation the run uses (the caller adds ``out-dir``, ``val``
    and ``plan``). A bad option is a ``ValueError`` naming it."""
    from privcal.federated import METHODS

    method, epsilon, secagg = cfg["method"], cfg["epsilon"], cfg["secagg"]
    _check_method(method, (*METHODS, "acc-t"), METHODS)
    for name in ("rounds", "num-nodes", "min-clients", "n-classes"):
        reject_if(cfg[name] < 1, f"--{name}", ">= 1", cfg[name])
    _check_federation(cfg, timeout)
    reject_if(not cfg["wait-nodes-s"] > 0, "--wait-clients", "> 0", cfg["wait-nodes-s"])
    reject_if(not cfg["round-timeout-s"] > 0, "--round-timeout", "> 0", cfg["round-timeout-s"])
    aggregation = _check_aggregation(cfg)
    if method == "acc-t" and secagg and aggregation != "distributed":
        raise ValueError(
            "--method acc-t --secagg sums the data sources' distributed noise shares: drop "
            "--aggregation trusted (or drop --secagg: each source then adds its own noise)."
        )
    reject_if(not 0 < cfg["sample-rate"] <= 1, "--sample-rate", "in (0, 1]", cfg["sample-rate"])
    if secagg and cfg["sample-rate"] < 1:
        raise ValueError("--secagg uses every client in every round: --sample-rate must be 1.")
    for name in ("clip", "clip-pos", "clip-neg"):
        reject_if(cfg[name] <= 0, f"--{name}", "> 0", cfg[name])
    reject_if(epsilon < 0, "--epsilon", ">= 0 (0 = no DP)", epsilon)
    reject_if(epsilon > 0 and not 0 < cfg["delta"] < 1, "--delta", "in (0, 1)", cfg["delta"])
    _conformal_config(cfg["alpha"], cfg["row-cap"])
    cfg = {**cfg, "aggregation": aggregation, "threshold": cfg["threshold"] or 0}
    if aggregation == "distributed" and method != "acc-t":  # a source's query is checked
        _check_ring(cfg)
    return cfg


def _run_server(
    cfg: dict[str, Any],
    out: Path,
    host: str,
    port: int,
    certs: tuple[str, str, str] | None,
    timeout: float,
) -> Any:
    """Start the SuperLink, run the ServerApp with ``cfg`` and return Flower's result; on
    SIGINT/SIGTERM tell the clients the run stopped, write ``interrupted.json`` and stop every
    process (:func:`~privcal.cli._flower.service`)."""
    from privcal.federated.flower.deploy import FlowerProcesses

    with service() as work:
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
                f"SuperLink on {fp.address}; waiting for {cfg['num-nodes']} clients "
                f"(privcal federate client --superlink {fp.address} ...)"
            )
            with (out / "run.log").open("w") as log:
                # the ServerApp ends itself when this process is killed outright (server-pid)
                run_cfg = {**cfg, "server-pid": os.getpid(), "server-work": str(work)}
                res = fp.run(run_cfg, timeout_s=timeout, on_line=_server_line(log))
        except Stopped as stop:
            # the ServerApp tells the clients the run stopped; then every process goes
            marker = out / "interrupted.json"  # the ServerApp writes it once told
            told = fp.stop_serverapp(wait_s=8.0, done=marker.exists) and marker.exists()
            _write_interrupted(out, stop.signum, told)
            raise
        finally:
            fp.stop()
    return res


def _check_federation(cfg: dict[str, Any], timeout: float) -> None:
    """Refuse federation settings that cannot run, before any process starts.

    Otherwise the server would start a SuperLink and wait ``--timeout`` (an hour by default)
    for clients that can never be enough, or for a run the ServerApp cannot start.
    """
    method, num_nodes, min_clients = cfg["method"], cfg["num-nodes"], cfg["min-clients"]
    if min_clients > num_nodes:
        raise ValueError(
            f"--min-clients ({min_clients}) is larger than --num-nodes ({num_nodes}): the server "
            f"waits for {num_nodes} clients, so the run could never start. Pass --min-clients "
            f"<= {num_nodes}, or declare more clients with --num-nodes."
        )
    if method == "acc-t" and not cfg["epsilon"] > 0:
        raise ValueError(
            "--method acc-t is DP Acc-T (the clients answer as private data sources): it needs "
            "--epsilon > 0, e.g. --epsilon 1."
        )
    if cfg["weighting"] not in ("none", "all", "changed"):
        raise ValueError(f"--weighting must be none, all or changed. Got {cfg['weighting']!r}.")
    reject_if(not timeout > 0, "--timeout", "> 0", timeout)


def _check_aggregation(cfg: dict[str, Any]) -> str:
    """``--aggregation`` and ``--threshold``, checked against each other and the transport;
    returns the aggregation the run uses (default: distributed with --secagg, else trusted)."""
    aggregation, threshold, num_nodes = cfg["aggregation"], cfg["threshold"], cfg["num-nodes"]
    secagg, epsilon = cfg["secagg"], cfg["epsilon"]
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


def _check_ring(cfg: dict[str, Any]) -> None:
    """Build the run's distributed plans as the ServerApp will: a SecAgg+ ring (2^31) too small
    for the clients' bound and the noise is refused here, before any process starts."""
    from privcal.federated.flower.task import DEFAULTS, dp_from_config, method_from_config
    from privcal.privacy import SecureNoise

    fm = method_from_config({**DEFAULTS, **cfg})
    dp = dp_from_config({**DEFAULTS, **cfg}, SecureNoise())
    assert dp is not None
    for g in fm.noise_groups(dp, fm.payload_shape(int(cfg["n-classes"]))):
        dp.plan(g)


#: What a run writes to --out (the ServerApp, and run.log here).
_RUN_FILES = (
    "calibrator.json",
    "sets.json",
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
    released = [out / "privacy_report.json", out / "calibrator.json", out / "sets.json"]
    refuse_overwrite(released, "--out", owner, force)
    for name in _RUN_FILES:
        (out / name).unlink(missing_ok=True)


def _write_interrupted(out: Path, signum: int, told: bool) -> None:
    """``interrupted.json`` in the output folder: the run was stopped before its release
    (``privcal report`` reads it); ``history.json`` holds the rounds that were released. The
    ServerApp writes the file first (the rounds done, whether every client took the stop
    message), the CLI adds the signal."""
    import json
    import signal

    path = out / "interrupted.json"
    info = json.loads(path.read_text()) if path.exists() else {}  # the ServerApp's part
    info.update(
        interrupted=True,
        signal=signal.Signals(signum).name,
        clients_told=told and bool(info.get("clients_told")),
        time=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    )
    path.write_text(json.dumps(info, indent=2) + "\n")


def _server_line(log: Any) -> Any:
    """Show the ServerApp's ``privcal:`` lines as they arrive; keep every line in ``log`` as
    plain text (Flower colours its log levels: the escape codes are left out of the file)."""
    from privcal.federated.flower.deploy import privcal_text

    def show(line: str) -> None:
        line = plain_text(line)
        log.write(line + "\n")
        log.flush()
        text = privcal_text(line)
        if text is None or text.startswith(("PrivacyReport", "budget:")):
            return
        style = "yellow" if "WARNING" in text or "dropped" in text else None
        err_console.print(text, style=style, markup=False, highlight=False)

    return show


def _server_end(res: Any, out: Path, method: str = "fedtemp") -> None:
    """Exit status and summary of a finished run of ``method`` (budget refusals exit 3)."""
    from privcal.federated.flower.deploy import privcal_lines
    from privcal.federated.flower.task import released_file

    release = out / released_file(method)
    text = res.stdout
    if res.returncode == 124:
        fail(f"The run did not end within --timeout; its log is {out / 'run.log'}.", code=1)
    lines = privcal_lines(text)
    if "privcal: budget:" in text or "BudgetExceededError" in text:
        reason = next(
            (ln for ln in lines if ln.startswith("budget:")), "a client's privacy budget is spent"
        )
        fail(f"Refused: {reason}", code=EXIT_BUDGET)
    joins = [ln.removeprefix("refused: ") for ln in lines if ln.startswith("refused: ")]
    if joins:  # too few clients joined: each refused by its own policy or ledger (round 0)
        log = out / "run.log"
        fail(f"The run was refused: {joins[-1].rstrip('.')}. Its log is {log}.", EXIT_BUDGET)
    if res.returncode != 0 or not release.exists():
        last = lines[-1].rstrip(".") if lines else "see the log"
        fail(f"The run failed: {last}. Its log is {out / 'run.log'}.", code=1)
    report = out / "privacy_report.json"  # _print_report names it after the report
    others = sorted(f.name for f in out.iterdir() if f.is_file() and f not in (release, report))
    beside = f"; beside it: {', '.join(others)}" if others else ""
    console.print(f"Wrote {release}{beside}", soft_wrap=True)
    _print_report(out / "privacy_report.json", release.stem)


def _print_report(path: Path, released: str = "calibrator") -> None:
    """Print the run's privacy report (DP runs write one; a run without DP is not private)."""
    import json

    from privcal.privacy import PrivacyReport

    if not path.exists():
        what = "the prediction sets are" if released == "sets" else "the calibrator is"
        console.print(f"No DP (--epsilon 0): {what} not private.")
        return
    report = PrivacyReport.from_dict(json.loads(path.read_text()))
    console.print(report.format(table_width()), markup=False, highlight=False)
    console.print(f"Wrote {path}")


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
        "fedbin, fedbbq, fedbbq-all, fedbbq-changed, conformal-lac or conformal-aps (federated "
        "conformal prediction sets, written to sets.json).",
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
            help="Folder of the clients' SQLite ledgers (client-K.sqlite): each is charged the "
            "run's composed epsilon round by round and refuses beyond --budget.",
        ),
    ] = None,
    budget: float = typer.Option(1.0, "--budget", help="Each client's epsilon budget."),
    alpha: float = typer.Option(_ALPHA, "--alpha", help=_ALPHA_HELP),
    row_cap: int = typer.Option(_ROW_CAP, "--row-cap", help=_ROW_CAP_HELP),
    num_cpus: int = typer.Option(
        None, "--num-cpus", help="CPUs Ray may use here (default: all); one client actor each."
    ),
    ray_address: str = typer.Option(
        None, "--ray-address", help="Run the clients on a Ray cluster (HEAD:6379)."
    ),
    out: OutDir = _SIM_OUT,
    timeout: float = typer.Option(86400.0, "--timeout", help="Seconds the run may take."),
    val: ValOption = None,
    force: ForceOption = False,
) -> None:
    """Run the privcal ServerApp and ClientApp on Flower's Simulation Engine (Ray), one client per
    partition of DATA; progress per round; writes the calibrator (or the conformal methods'
    sets), history and privacy report (not over an earlier DP run's, unless --force)."""
    with user_errors():
        need_flwr()
        from privcal.federated import METHODS
        from privcal.federated.flower.simulation import (
            federation_config,
            run_simulation,
            simulation_config,
        )

        _check_method(method, METHODS, METHODS)
        for name, v in (("num-nodes", num_nodes), ("rounds", rounds)):
            reject_if(v < 1, f"--{name}", ">= 1", v)
        reject_if(not beta > 0, "--beta", "> 0", beta)
        reject_if(seed < 0, "--seed", ">= 0", seed)
        reject_if(epsilon < 0, "--epsilon", ">= 0 (0 = no DP)", epsilon)
        reject_if(epsilon > 0 and not 0 < delta < 1, "--delta", "in (0, 1)", delta)
        reject_if(not 0 < sample_rate <= 1, "--sample-rate", "in (0, 1]", sample_rate)
        reject_if(noise not in ("secure", "seeded"), "--noise", "secure or seeded", repr(noise))
        reject_if(budget <= 0, "--budget", "> 0", budget)
        reject_if(num_cpus is not None and num_cpus < 1, "--num-cpus", ">= 1", num_cpus)
        if num_cpus is not None and ray_address:
            raise ValueError("--num-cpus applies to this machine; a Ray cluster has its own.")
        reject_if(timeout <= 0, "--timeout", "> 0", timeout)
        out = out.resolve()
        cfg = simulation_config(
            method, data, num_nodes, rounds, epsilon=epsilon if epsilon > 0 else None,
            delta=delta, beta=beta, seed=seed, sample_rate=sample_rate, noise=noise,
            ledgers=ledgers, budget=budget, out_dir=out, timeout_s=timeout,
            owner="privcal federate simulate", **_conformal_config(alpha, row_cap),
        )  # fmt: skip
        _check_val(val, int(cfg["n-classes"]))
        cfg["val"] = "" if val is None else str(val.resolve())
        fed = federation_config(num_nodes, num_cpus, ray_address)
        _fresh_out(out, "privcal federate simulate", force)
        out.mkdir(parents=True, exist_ok=True)
        with service() as work:
            where = f"the Ray cluster at {ray_address}" if ray_address else "this machine"
            err_console.print(
                f"Simulating {num_nodes} clients on Flower's Simulation Engine ({where}); "
                "starting Ray..."
            )
            with (out / "run.log").open("w") as log:
                res = run_simulation(cfg, fed, work, _server_line(log), ray_address)
    _server_end(res, out, method)


def maddock2025(
    out: OutDir = _BENCH_OUT,
    seed: int = typer.Option(0, "--seed", help="Seed of partitions, sampling and noise."),
    quick: bool = typer.Option(False, "--quick", help="One repeat, fewer settings (smoke run)."),
    repeats: int = typer.Option(None, "--repeats", help="Repeats (default 3, or 1 with --quick)."),
) -> None:
    """Seed 003 (Maddock et al.): federated calibration with user-level DP (Fig. 2-3, Tab. 2-3)."""
    from privcal.experiments import maddock2025 as exp

    with user_errors():
        config = exp.QUICK if quick else exp.FULL
        if repeats is not None:
            config = replace(config, trials=repeats)
    print_protocol(exp, config, out, seed)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Add ``federate server|client|simulate|plan`` to ``app``, ``bench maddock2025`` to
    ``bench_app``."""
    from privcal.cli.federate_plan import plan

    federate_app.command("plan")(plan)
    app.add_typer(federate_app, name="federate")
    bench_app.command("maddock2025")(maddock2025)


def _check_val(val: Path | None, n_classes: int) -> None:
    """Refuse a --val split of another width than the run's --n-classes (before any process)."""
    if val is not None:
        from privcal.federated.flower.task import load_client_data

        if load_client_data(val)[0].shape[1] != n_classes:
            raise ValueError(f"--val {str(val)!r} does not have --n-classes={n_classes}.")


def _check_method(method: str, allowed: Any, known: Any) -> None:
    """Refuse a method not in ``allowed``, naming ``known``. Every federated method runs over
    Flower, the conformal ones included (their release is prediction sets, ``sets.json``,
    which each client checks for coverage on its own data)."""
    if method not in allowed:
        raise ValueError(f"Unknown --method {method!r}; known: {', '.join(known)}.")


def _conformal_config(alpha: float, row_cap: int) -> dict[str, Any]:
    """The run config keys of the conformal methods (``--alpha``, ``--row-cap``), checked."""
    reject_if(not 0 < alpha < 1, "--alpha", "in (0, 1)", alpha)
    reject_if(row_cap < 1, "--row-cap", ">= 1", row_cap)
    return {"alpha": alpha, "row-cap": row_cap}

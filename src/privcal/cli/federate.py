"""``privcal federate server|client`` (Flower deployment) and ``privcal bench maddock2025``.

Needs the ``federated`` extra (``pip install privcal[federated]``) for ``federate``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated

import typer

from privcal.cli._common import console, err_console, fail, user_errors

__all__ = ["client", "maddock2025", "register", "server"]

_SERVER_OUT = Path("federated-out")
_BENCH_OUT = Path("results/maddock2025")

federate_app = typer.Typer(
    help="Federated calibration over Flower: run a server (SuperLink + ServerApp) or a client "
    "(SuperNode holding private logits and a privacy ledger).",
    no_args_is_help=True,
)


def _need_flwr() -> None:
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
        "Acc-T over clients acting as data sources; needs --epsilon and client ledgers).",
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
    host: str = typer.Option("127.0.0.1", "--host"),
    port: int = typer.Option(9092, "--port"),
    insecure: bool = typer.Option(False, "--insecure", help="Plaintext transport (local tests)."),
    tls: str = typer.Option(None, "--tls", help="CA,CERT,KEY paths for TLS."),
    out: Annotated[Path, typer.Option("--out", help="Output folder.")] = _SERVER_OUT,
    timeout: float = typer.Option(3600.0, "--timeout", help="Seconds to wait for the run."),
) -> None:
    """Start a SuperLink, submit the privcal ServerApp with `flwr run`, wait, write the result."""
    with user_errors():
        _need_flwr()
        from privcal.federated import METHODS
        from privcal.federated.flower.deploy import FlowerProcesses

        if method not in (*METHODS, "acc-t"):
            raise ValueError(f"Unknown --method {method!r}; known: {', '.join(METHODS)}.")
        for name, v in (("rounds", rounds), ("num-nodes", num_nodes), ("n-classes", n_classes)):
            if v < 1:
                raise ValueError(f"--{name} must be >= 1. Got {v}.")
        if not 0 < sample_rate <= 1:
            raise ValueError(f"--sample-rate must be in (0, 1]. Got {sample_rate}.")
        if secagg and sample_rate < 1:
            raise ValueError("--secagg uses every client in every round: --sample-rate must be 1.")
        for cname, cv in (("clip", clip), ("clip-pos", clip_pos), ("clip-neg", clip_neg)):
            if cv <= 0:
                raise ValueError(f"--{cname} must be > 0. Got {cv}.")
        certs = _tls(insecure, tls)
        out = out.resolve()
        work = Path(tempfile.mkdtemp(prefix="privcal-flwr-"))
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
            "out-dir": str(out),
            "wait-nodes-s": timeout,
        }
        with FlowerProcesses(
            work, host=host, insecure=certs is None, certificates=certs, port=port
        ) as fp:
            fp.start_superlink()
            err_console.print(
                f"SuperLink on {fp.address}; waiting for {num_nodes} clients "
                f"(privcal federate client --superlink {fp.address} ...)"
            )
            res = fp.run(cfg, timeout_s=timeout)
        if res.returncode != 0 or not (out / "calibrator.json").exists():
            fail(f"The run failed:\n{res.stdout[-3000:]}\n{res.stderr[-2000:]}")
        console.print(f"Wrote {out / 'calibrator.json'} and {out / 'history.json'}")
        _print_report(out / "privacy_report.json")


def _print_report(path: Path) -> None:
    """Print the run's privacy report (DP runs write one; a run without DP is not private)."""
    import json

    from privcal.privacy import PrivacyReport

    if not path.exists():
        console.print("No DP (--epsilon 0): the calibrator is not private.")
        return
    console.print(str(PrivacyReport.from_dict(json.loads(path.read_text()))), markup=False)
    console.print(f"Wrote {path}")


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
    port: int = typer.Option(0, "--port", help="Local runtime API port (0 = any free port)."),
) -> None:
    """Run a SuperNode that answers privcal rounds from DATA, within its own ledger budget."""
    with user_errors():
        _need_flwr()
        from privcal.federated.flower.deploy import _bin, _toml_value, free_port

        if budget <= 0:
            raise ValueError(f"--budget must be > 0. Got {budget}.")
        node: dict[str, object] = {"data": str(data.resolve())}
        if ledger is not None:
            from privcal.privacy import PrivacyOdometer

            PrivacyOdometer(budget, ledger=ledger, delta_budget=delta_budget)  # create / check
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
        cmd = [
            _bin("flower-supernode"),
            *tls,
            "--superlink",
            superlink,
            "--port",
            str(port or free_port()),
            "--node-config",
            " ".join(f"{k}={_toml_value(v)}" for k, v in node.items()),
        ]
        env = dict(os.environ)
        env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
        proc = subprocess.Popen(cmd, env=env)
        try:
            while proc.poll() is None:
                time.sleep(0.5)
        except KeyboardInterrupt:
            proc.terminate()
            proc.wait(timeout=10)
        raise typer.Exit(proc.returncode or 0)


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
    """Add ``federate server|client`` to ``app`` and ``bench maddock2025`` to ``bench_app``."""
    app.add_typer(federate_app, name="federate")
    bench_app.command("maddock2025")(maddock2025)

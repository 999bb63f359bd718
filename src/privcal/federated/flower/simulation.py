"""privcal's Flower apps on Flower's Simulation Engine (``flwr run``, Ray backend).

:func:`simulate_flower` starts a SuperLink in simulation mode on a free loopback port, submits
privcal's unchanged ServerApp and ClientApp with ``flwr run APP privcal --federation-config
"num_supernodes=N ..."`` and waits for the run. Flower's engine (``flwr-simulation``) simulates
``N`` SuperNodes whose ClientApps run in a pool of Ray actors (one CPU each, so one actor per
core; or on a Ray cluster, ``ray_address``). Simulated node ``k`` is client ``k``: it reads
partition ``k`` of ``data`` (:func:`~privcal.federated.flower.task.partition_data`: a Dirichlet
split privcal draws from one file, or one file per partition), so the clients are those of
``simulate(..., parts=dirichlet_partition(labels, n_clients=N, beta=beta, seed=seed))``.

The apps, their messages and their privacy are the deployed ones (``privcal federate``); only
the transport differs: Flower's in-memory link state and Ray instead of SuperLink / SuperNode
processes. Nothing here is a privacy boundary: every client's data is read on this machine (or
the Ray cluster).

Every process started (SuperLink, ``flwr run``, ``flwr-simulation``, Ray's processes) is
stopped when the run ends, fails or is interrupted
(:meth:`~privcal.federated.flower.deploy.FlowerProcesses.stop`).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from privcal._params import EPSILON, FRACTION, POSITIVE, check_int, check_option, check_probability
from privcal.privacy.noise import InsecureNoiseWarning

__all__ = [
    "check_simulation",
    "federation_config",
    "run_simulation",
    "simulate_flower",
    "simulation_config",
]

_OWNER = "simulate_flower"


def simulation_config(
    method: str,
    data: str | Path,
    num_nodes: int,
    rounds: int,
    *,
    epsilon: float | None = None,
    delta: float = 1e-5,
    beta: float = 0.1,
    seed: int = 0,
    sample_rate: float = 1.0,
    noise: str = "secure",
    ledgers: str | Path | None = None,
    budget: float = 1.0,
    out_dir: str | Path = "",
    timeout_s: float = 86400.0,
    owner: str = _OWNER,
    **run_config: Any,
) -> dict[str, Any]:
    """The validated run configuration of a simulation (what ``flwr run`` is given).

    Checks every argument before any process starts (see :func:`simulate_flower` for their
    meaning; ``owner`` is named in the errors) and reads the data once: a file's labels must
    split into ``num_nodes`` non-empty Dirichlet partitions; a folder must hold ``num_nodes``
    score files.
    """
    from privcal.federated.flower.task import DEFAULTS, PARTITION_SUFFIXES, load_client_data
    from privcal.federated.methods import METHODS

    check_option(method, "method", owner, METHODS)
    k = check_int(num_nodes, "num_nodes", owner, low=1)
    t = check_int(rounds, "rounds", owner, low=1)
    eps = 0.0 if epsilon is None else EPSILON.check(epsilon, "epsilon", owner)
    dlt = check_probability(delta, "delta", owner)
    b = POSITIVE.check(beta, "beta", owner)
    s = check_int(seed, "seed", owner, low=0)
    p = FRACTION.check(sample_rate, "sample_rate", owner)
    check_option(noise, "noise", owner, ("secure", "seeded"))
    if noise == "seeded" and epsilon is not None:  # the ServerApp warns in its own process
        warnings.warn(
            f"{owner} draws the run's noise from SeededNoise(seed + 1): seeded noise is not "
            "private (reproducible from the seed). Use it to simulate only; leave "
            "noise='secure'.",
            InsecureNoiseWarning,
            stacklevel=2,
        )
    bud = POSITIVE.check(budget, "budget", owner)
    limit = POSITIVE.check(timeout_s, "timeout_s", owner)
    unknown = sorted(set(run_config) - set(DEFAULTS))
    if unknown:
        raise ValueError(
            f"{owner} got unknown run config keys {unknown}; allowed: "
            f"{', '.join(sorted(DEFAULTS))}."
        )
    src = Path(data)
    if src.is_dir():
        files = sorted(f for f in src.iterdir() if f.is_file() and f.suffix in PARTITION_SUFFIXES)
        if len(files) != k:
            raise ValueError(
                f"The 'data' folder of {owner} must hold one score file per client "
                f"(num_nodes={k}). Got {len(files)} files ({', '.join(PARTITION_SUFFIXES)}) in "
                f"{str(src)!r} instead."
            )
        c = load_client_data(files[0])[0].shape[1]
    elif src.is_file():
        from privcal.federated.partition import dirichlet_partition

        z, y = load_client_data(src)
        c = z.shape[1]
        try:  # fails here, not in a client
            dirichlet_partition(y, n_clients=k, beta=b, seed=s)
        except ValueError:
            fix = (
                f"a client needs a row: use at most {y.size} clients"
                if k > y.size
                else "no draw gave every client a row: use fewer clients or a larger beta"
            )
            raise ValueError(
                f"The 'num_nodes' parameter of {owner} must split the {y.size} rows of "
                f"{str(src)!r} into {k} non-empty Dirichlet(beta={b:g}) partitions; {fix}."
            ) from None
    else:
        raise ValueError(
            f"The 'data' parameter of {owner} must be a score file or a folder of score files. "
            f"Got {str(src)!r} (no such file or folder) instead."
        )
    cfg: dict[str, Any] = {
        **run_config,
        "method": method,
        "n-classes": int(c),
        "rounds": t,
        "num-nodes": k,
        "min-clients": 1,
        "epsilon": eps,
        "delta": dlt,
        "sample-rate": p,
        "seed": s,
        "noise": noise,
        "partitions": str(src.resolve()),
        "partition-beta": b,
        "partition-seed": s,
        "ledgers": "" if ledgers is None else str(Path(ledgers).resolve()),
        "ledger-budget": bud,
        "out-dir": str(Path(out_dir).resolve()) if out_dir else "",
        # a simulated client never loses its connection: wait as long as the run may take
        "wait-nodes-s": limit,
        "round-timeout-s": limit,
    }
    if cfg["ledgers"]:
        Path(cfg["ledgers"]).mkdir(parents=True, exist_ok=True)
    return cfg


def federation_config(
    num_nodes: int, num_cpus: int | None = None, ray_address: str | None = None
) -> dict[str, Any]:
    """Flower's simulation settings: ``num_nodes`` SuperNodes, one CPU per ClientApp actor.

    Ray starts one actor per CPU it has: all of this machine's cores (or ``num_cpus``), or the
    cluster's when ``ray_address`` is given (Ray refuses a CPU count when it joins a cluster).
    """
    fed: dict[str, Any] = {"num_supernodes": int(num_nodes), "client_resources_num_cpus": 1}
    if num_cpus is not None and ray_address is None:
        fed["init_args_num_cpus"] = check_int(num_cpus, "num_cpus", _OWNER, low=1)
    return fed


def run_simulation(
    config: dict[str, Any],
    federation: dict[str, Any],
    workdir: Path,
    on_line: Callable[[str], None] | None = None,
    ray_address: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Start a simulation SuperLink in ``workdir``, submit the run, stop every process.

    ``config`` is :func:`simulation_config`'s, ``federation`` :func:`federation_config`'s;
    ``on_line`` sees every line of the run's log. Returns ``flwr run``'s completed process (code
    124 when the run passed ``config["round-timeout-s"]``).
    """
    from privcal.federated.flower.deploy import FlowerProcesses

    env = {} if ray_address is None else {"RAY_ADDRESS": str(ray_address)}
    fp = FlowerProcesses(Path(workdir), extra_env=env)
    try:
        fp.start_superlink(simulation=True)
        return fp.run(
            config,
            timeout_s=float(config["round-timeout-s"]),
            on_line=on_line,
            federation_config=federation,
        )
    finally:
        fp.stop()


def check_simulation(res: Any, out: Path, release: str = "calibrator.json") -> None:
    """Raise ``RuntimeError`` with the run's last ``privcal:`` line when it did not finish
    (``release``: the file the run writes its release to)."""
    if res.returncode == 124:
        raise RuntimeError(f"The simulation did not end within timeout_s; its log:\n{_tail(res)}")
    if res.returncode != 0 or not (out / release).exists():
        from privcal.federated.flower.deploy import privcal_lines

        lines = privcal_lines(res.stdout)
        last = lines[-1] if lines else "no privcal output"
        raise RuntimeError(f"The simulation failed ({last}); its log:\n{_tail(res)}")


def _tail(res: Any, n: int = 40) -> str:
    return "\n".join(str(res.stdout).splitlines()[-n:])


def simulate_flower(
    method: str,
    data: str | Path,
    num_nodes: int,
    rounds: int,
    *,
    epsilon: float | None = None,
    delta: float = 1e-5,
    beta: float = 0.1,
    seed: int = 0,
    sample_rate: float = 1.0,
    noise: str = "secure",
    ledgers: str | Path | None = None,
    budget: float = 1.0,
    num_cpus: int | None = None,
    ray_address: str | None = None,
    out_dir: str | Path | None = None,
    timeout_s: float = 86400.0,
    progress: Callable[[str], None] | None = None,
    **run_config: Any,
) -> tuple[Any, list[dict[str, Any]]]:
    """Run privcal's Flower ServerApp and ClientApp on Flower's Simulation Engine.

    Parameters
    ----------
    method : str
        A name of :data:`privcal.federated.METHODS` (``"fedtemp"``, ``"fedbbq-all"`` ...).
    data : path
        One score file (``.npz`` with ``logits`` and ``labels``, or what
        :func:`privcal.data.read_scores` reads) holding every client's rows, split by
        ``dirichlet_partition(labels, n_clients=num_nodes, beta=beta, seed=seed)``; or a
        folder of ``num_nodes`` score files, client ``k`` holding the ``k``-th in name order.
    num_nodes : int
        ``K``, the simulated SuperNodes (clients); the federation's declared, public size.
    rounds : int
        ``T >= 1``.
    epsilon, delta : float
        User-level ``(epsilon, delta)`` of the whole run; ``epsilon=None`` runs without DP.
    beta, seed : float, int
        The Dirichlet split of a single file; ``seed`` also seeds the server's client sampling
        (and, with ``noise="seeded"``, its noise: ``SeededNoise(seed + 1)``).
    sample_rate : float, default=1.0
        Each client joins each round with probability ``p`` (drawn by the server over its node
        ids, so with ``p < 1`` the cohorts differ from :func:`~privcal.federated.simulate`'s).
    noise : {"secure", "seeded"}
        The server's noise under DP: ``SecureNoise`` (OpenDP), or ``SeededNoise(seed + 1)``,
        which makes the run reproducible and its report "not private: seeded noise".
    ledgers : path, optional
        A folder where client ``k`` keeps its SQLite ledger ``client-k.sqlite`` with epsilon
        budget ``budget``, charged before each reply as a deployed client's ``--ledger`` is
        (:func:`~privcal.federated.flower.task.charge_round`).
    num_cpus : int, optional
        CPUs Ray may use on this machine (default: all); one ClientApp actor per CPU.
    ray_address : str, optional
        A running Ray cluster (``HEAD:6379``, as ``RAY_ADDRESS``): the ClientApps run on its
        machines, which must read ``data`` (and ``ledgers``) at the same paths.
    out_dir : path, optional
        Where the ServerApp writes ``calibrator.json`` (``sets.json`` for the conformal
        methods), ``history.json``, ``state.json`` and,
        under DP, ``privacy_report.json`` (default: a temporary folder, removed).
    timeout_s : float
        Seconds the whole run may take; a longer run is stopped (``RuntimeError``).
    progress : callable, optional
        Called with each of the ServerApp's ``privcal:`` lines (one per round) as they arrive.
    **run_config
        Further run configuration keys of the apps
        (:data:`~privcal.federated.flower.task.DEFAULTS`: ``"clip"``, ``"local-iters"``,
        ``"n-bins"``, ``"weighting"``, the conformal methods' ``"alpha"`` and ``"row-cap"`` ...).

    Returns
    -------
    calibrator : Calibrator
        The ServerApp's calibrator (``"conformal-lac"`` / ``"conformal-aps"``: its
        :class:`~privcal.federated.methods.conformal.FederatedConformalSets`); under DP with
        ``privacy_report_`` (the run's report).
    history : list of dict
        The ServerApp's ``history.json``: per round ``round`` and ``epsilon_spent`` (without DP
        also ``n_clients``, ``sampled`` and ``seconds``).

    Privacy
    -------
    That of the deployed apps (``privcal federate``; :func:`~privcal.federated.simulate`'s,
    with ``K = num_nodes``). The rows of ``data`` are read on this machine (or the Ray
    cluster): a simulation is not a privacy boundary between clients.
    """
    from privcal.federated.flower.deploy import privcal_text
    from privcal.federated.flower.task import released_file

    cfg = simulation_config(
        method, data, num_nodes, rounds, epsilon=epsilon, delta=delta, beta=beta, seed=seed,
        sample_rate=sample_rate, noise=noise, ledgers=ledgers, budget=budget,
        timeout_s=timeout_s, **run_config,
    )  # fmt: skip
    fed = federation_config(num_nodes, num_cpus, ray_address)

    def on_line(line: str) -> None:
        text = privcal_text(line)
        if progress is not None and text is not None:
            progress(text)

    with tempfile.TemporaryDirectory(prefix="privcal-flwr-sim-") as tmp:
        work = Path(tmp)
        out = Path(out_dir).resolve() if out_dir is not None else work / "out"
        cfg["out-dir"] = str(out)
        res = run_simulation(cfg, fed, work, on_line=on_line, ray_address=ray_address)
        check_simulation(res, out, released_file(method))
        return _read_release(out, method), json.loads((out / "history.json").read_text())


def _read_release(out: Path, method: str) -> Any:
    """The release a run of ``method`` wrote to ``out``: its calibrator (``calibrator.json``)
    or, for the conformal methods, its :class:`~privcal.federated.methods.conformal.
    FederatedConformalSets` (``sets.json``); with ``privacy_report_`` when the run was DP."""
    from privcal.calibrators import calibrator_from_dict
    from privcal.federated.flower.task import released_file
    from privcal.federated.methods.conformal import FederatedConformalSets
    from privcal.privacy import PrivacyReport

    release = released_file(method)
    saved = json.loads((out / release).read_text())
    cal = (
        FederatedConformalSets.from_dict(saved)
        if release == "sets.json"
        else calibrator_from_dict(saved)
    )
    report = out / "privacy_report.json"
    if report.exists():
        cal.privacy_report_ = PrivacyReport.from_dict(json.loads(report.read_text()))
    return cal

"""Start a SuperLink and SuperNodes on this machine and submit a privcal run with ``flwr run``.

Everything is a real Flower process (``flower-superlink``, ``flower-supernode``, ``flwr run``);
nothing needs the network beyond the addresses given (loopback in tests). ``insecure=True``
uses plaintext gRPC/HTTP for local tests; for TLS pass ``certificates=(ca, cert, key)``
(see ``docs/federated.md``). Flower's runtime dependency installation is disabled: the app has
no dependencies beyond the environment that runs it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from privcal.federated.flower.task import DEFAULTS

__all__ = ["FlowerProcesses", "free_port", "supernode_command", "write_app"]


def _die_with_parent() -> None:
    """``preexec_fn``: ask Linux to send this child SIGTERM when its parent thread ends."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


#: How many ports a SuperNode tries for its Runtime API (:meth:`FlowerProcesses._lost_port`).
PORT_TRIES = 5


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cmdline(pid: int) -> str:
    """The command line of a live process (Linux ``/proc``; empty when gone or elsewhere)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


#: The environment variable that marks every process a :class:`FlowerProcesses` starts (and,
#: inherited, every process those start: Ray's workers included) with the object's own token.
MARK_VARIABLE = "PRIVCAL_FLOWER_MARK"


def _marked(token: str) -> list[int]:
    """PIDs of the live processes whose environment carries ``MARK_VARIABLE=token`` (Linux
    ``/proc``; empty elsewhere). A zombie's environment reads empty: it is not listed."""
    needle = f"{MARK_VARIABLE}={token}".encode()
    found = []
    for env in Path("/proc").glob("[0-9]*/environ"):
        try:
            if needle in env.read_bytes().split(b"\0"):
                found.append(int(env.parent.name))
        except (OSError, ValueError):
            continue
    return [pid for pid in found if pid != os.getpid()]


def privcal_text(line: str) -> str | None:
    """The text of one of the ServerApp's own lines (``privcal: ...``, printed or an error's
    message), or ``None``; a traceback's source line that quotes one (``raise
    RuntimeError(f"privcal: refused: {reason}.")``) is not one."""
    head, sep, text = line.partition("privcal: ")
    return text if sep and not head.endswith(('"', "'")) else None


def privcal_lines(text: str) -> list[str]:
    """:func:`privcal_text` of every line of ``text`` that has one, in order."""
    return [t for t in map(privcal_text, text.splitlines()) if t is not None]


def _bin(name: str) -> str:
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else (shutil.which(name) or name)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def supernode_command(
    superlink: str, node_config: dict[str, Any], tls: Sequence[str], retry_s: float, port: int
) -> list[str]:
    """``flower-supernode`` command line: a bounded reconnect (``--max-wait-time``) and
    ``--isolation process``, its Runtime API on loopback ``port`` for a privcal executor
    (:mod:`privcal.federated.flower.executor`) that keeps the ClientApp alive across messages.
    """
    return [
        sys.executable,
        # flower-supernode with a 0.25 s idle poll, started from its file: ``-m`` would import
        # privcal.federated first (scipy, scikit-learn: about half of a SuperNode's start-up
        # CPU time) for a process that runs only Flower; ``-P`` keeps this folder off sys.path
        "-P",
        str(Path(__file__).with_name("supernode.py")),
        *tls,
        "--superlink",
        superlink,
        "--isolation",
        "process",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-wait-time",
        f"{retry_s:g}",
        "--node-config",
        " ".join(f"{k}={_toml_value(v)}" for k, v in node_config.items()),
    ]


def write_app(app_dir: Path, config: dict[str, Any]) -> Path:
    """Write a Flower app directory whose components are privcal's ServerApp and ClientApp."""
    app_dir.mkdir(parents=True, exist_ok=True)
    cfg = {**DEFAULTS, **config}
    server, client = (
        ("secagg:server", "secagg:client")
        if cfg["secagg"]
        else ("server_app:app", "client_app:app")
    )
    lines = [
        "[build-system]",
        'requires = ["hatchling"]',
        'build-backend = "hatchling.build"',
        "",
        "[project]",
        'name = "privcal-federated"',
        'version = "1.0.0"',
        'description = "privcal federated calibration"',
        'license = "Apache-2.0"',
        "dependencies = []",
        "",
        "[tool.hatch.build.targets.wheel]",
        'packages = ["."]',
        "",
        "[tool.flwr.app]",
        'publisher = "privcal"',
        "",
        "[tool.flwr.app.components]",
        f'serverapp = "privcal.federated.flower.{server}"',
        f'clientapp = "privcal.federated.flower.{client}"',
        "",
        "[tool.flwr.app.config]",
        *(f"{k} = {_toml_value(v)}" for k, v in cfg.items()),
        "",
    ]
    (app_dir / "pyproject.toml").write_text("\n".join(lines))
    (app_dir / "README.md").write_text("privcal federated calibration app (generated).\n")
    return app_dir


@dataclass
class FlowerProcesses:
    """A local SuperLink plus SuperNodes, started and stopped by this object.

    Parameters
    ----------
    workdir : Path
        Holds ``FLWR_HOME`` (Flower's config and apps) and the process logs.
    host : str, default="127.0.0.1"
    insecure : bool, default=True
    certificates : (ca, cert, key) paths, optional
        TLS files for the SuperLink (``--ssl-*``) and ``--root-certificates`` for clients.
    extra_env : dict, optional
        Environment variables set for every process started (e.g. ``RAY_ADDRESS`` for a
        simulation run on a Ray cluster).
    die_with_parent : bool, default=False
        Linux: each process started gets SIGTERM when the thread that started it ends
        (``PR_SET_PDEATHSIG``), so a command killed outright (SIGKILL, a crash) leaves no
        SuperLink or SuperNode behind. Only for objects used from one thread that outlives the
        processes (the CLI's main thread).
    """

    workdir: Path
    host: str = "127.0.0.1"
    insecure: bool = True
    certificates: tuple[str, str, str] | None = None
    port: int = 0
    extra_env: dict[str, str] = field(default_factory=dict)
    die_with_parent: bool = False
    procs: dict[str, subprocess.Popen[Any]] = field(default_factory=dict)
    runtime: dict[str, str] = field(default_factory=dict)
    served: set[str] = field(default_factory=set)
    mark: str = field(default_factory=lambda: uuid.uuid4().hex)

    def __post_init__(self) -> None:
        self.workdir = Path(self.workdir)
        self.home = self.workdir / "flwr-home"
        self.home.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["FLWR_HOME"] = str(self.home)
        env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
        env.setdefault("PYTHONUNBUFFERED", "1")
        # the processes inherit FLWR_TELEMETRY_ENABLED=0 unless the user opted in (set on import
        # of privcal.federated.flower: no_telemetry_by_default)
        # Flower's SuperExec polls its SuperNode for new ClientApp tasks once a second by
        # default; a shorter poll takes up to ~1 s off every message's round trip
        env.setdefault("FLWR_SUPEREXEC_TASK_POLL_INTERVAL", "0.05")
        env.update(self.extra_env)
        env[MARK_VARIABLE] = self.mark  # stop() finds what outlived its parent by it
        return env

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def _tls_args(self, server: bool) -> list[str]:
        if self.insecure or self.certificates is None:
            return ["--insecure"]
        ca, cert, key = self.certificates
        if server:
            return ["--ssl-ca-certfile", ca, "--ssl-certfile", cert, "--ssl-keyfile", key]
        return ["--root-certificates", ca]

    def _spawn(self, name: str, args: Sequence[str], piped: bool = False) -> subprocess.Popen[Any]:
        """Start ``args`` as process ``name``: its output to ``name.log``, or ``piped`` (text)
        to the caller; with ``die_with_parent`` either ends with the thread that started it."""
        out = subprocess.PIPE if piped else open(self.workdir / f"{name}.log", "wb")
        proc = subprocess.Popen(
            list(args),
            stdout=out,
            stderr=subprocess.STDOUT,
            text=piped,
            env=self.env,
            cwd=self.workdir,  # Flower writes its state files into the working directory
            start_new_session=True,
            preexec_fn=_die_with_parent if self.die_with_parent else None,
        )
        self.procs[name] = proc
        return proc

    def start_superlink(self, wait_s: float = 60.0, simulation: bool = False) -> None:
        """Start the SuperLink; ``simulation=True`` starts it in Flower's simulation mode (runs
        go to Flower's Simulation Engine, ``flwr-simulation`` with the Ray backend, and no
        SuperNode connects: the engine simulates them)."""
        self._spawn(
            "superlink",
            [
                _bin("flower-superlink"),
                *self._tls_args(True),
                "--host",
                self.host,
                "--port",
                str(self.port),
                # Flower's in-memory link state. (privcal passed ":flwr-in-memory-state:", a
                # name Flower 1.41 no longer knows: it made an on-disk SQLite file of that name,
                # whose write locks failed messages under 20 polling SuperNodes)
                "--database",
                ":flwr-in-memory:",
                "--disable-runtime-dependency-installation",
                *(["--simulation"] if simulation else []),
            ],
        )
        conf = [
            "[superlink]",
            'default = "privcal"',
            "",
            "[superlink.privcal]",
            f'address = "{self.address}"',
        ]
        conf.append(
            "insecure = true"
            if self.insecure or self.certificates is None
            else f'root-certificates = "{self.certificates[0]}"'
        )
        (self.home / "config.toml").write_text("\n".join(conf) + "\n")
        self._wait_log("superlink", "Uvicorn running", wait_s)

    def start_supernode(
        self,
        name: str,
        node_config: dict[str, Any],
        wait_s: float = 60.0,
        retry_s: float = 60.0,
        superlink: str | None = None,
        tls: Sequence[str] | None = None,
    ) -> subprocess.Popen[Any]:
        """Start a SuperNode; it gives up (exits) after ``retry_s`` seconds without a SuperLink.

        ``superlink`` and ``tls`` default to this object's SuperLink; ``wait_s = 0`` returns once
        its Runtime API serves (about a second: :meth:`_lost_port`) instead of waiting for the
        SuperNode to register.
        """
        tls_args = self._tls_args(False) if tls is None else list(tls)
        for _ in range(PORT_TRIES):
            port = free_port()
            cmd = supernode_command(superlink or self.address, node_config, tls_args, retry_s, port)
            proc = self._spawn(name, cmd)
            if not self._lost_port(name, proc):
                break
        self.runtime[name] = f"127.0.0.1:{port}"
        if wait_s > 0:
            self._wait_log(name, "SuperNode ID", wait_s)
        return proc

    def _lost_port(self, name: str, proc: subprocess.Popen[Any], wait_s: float = 30.0) -> bool:
        """Whether the SuperNode ``name`` exited because another process took its Runtime API
        port first: :func:`free_port` hands out a port that is free *now*, and on a busy machine
        (a Ray cluster starting, other federations) another process may bind it before the
        SuperNode does. Waits (at most ``wait_s``) until its Runtime API serves or it exits."""
        path = self.workdir / f"{name}.log"
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            text = path.read_text(errors="replace")
            if "Uvicorn running on" in text:
                return False
            if proc.poll() is not None:
                return "address already in use" in text
            time.sleep(0.05)
        return False

    def start_executor(self, names: Sequence[str] | None = None) -> None:
        """One executor process that runs the ClientApps of the SuperNodes ``names`` (default:
        all started so far) in-process (:mod:`privcal.federated.flower.executor`)."""
        todo = [n for n in (names or list(self.runtime)) if n not in self.served]
        if not todo:
            return
        self.served.update(todo)
        module = "privcal.federated.flower.executor"
        addresses = [self.runtime[n] for n in todo]
        self._spawn(f"executor{len(self.procs)}", [sys.executable, "-m", module, *addresses])

    def _wait_log(self, name: str, needle: str, wait_s: float) -> None:
        deadline = time.monotonic() + wait_s
        path = self.workdir / f"{name}.log"
        while time.monotonic() < deadline:
            if needle in path.read_text(errors="replace"):
                return
            if self.procs[name].poll() is not None:
                break
            time.sleep(0.2)
        raise RuntimeError(f"{name} did not start; its log:\n{path.read_text(errors='replace')}")

    def run(
        self,
        config: dict[str, Any],
        timeout_s: float = 300.0,
        on_line: Callable[[str], None] | None = None,
        federation_config: dict[str, Any] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Submit a run (``flwr run APP privcal --stream``) and wait for it to end.

        ``on_line`` is called with each line of the run's log as it arrives (the ServerApp's
        ``privcal:`` progress lines among them). A run past ``timeout_s`` is stopped and
        returns code 124. ``federation_config`` (a SuperLink started with ``simulation=True``)
        is passed as ``flwr run --federation-config``: Flower's simulation settings
        (``num_supernodes``, ``client_resources_num_cpus``, ``init_args_num_cpus`` ...).
        """
        self.start_executor()  # SuperNodes started since the last run get their ClientApp
        app_dir = write_app(self.workdir / "app", config)
        cmd = [_bin("flwr"), "run", str(app_dir), "privcal", "--stream"]
        if federation_config:
            cmd += [
                "--federation-config",
                " ".join(f"{k}={_toml_value(v)}" for k, v in federation_config.items()),
            ]
        proc = self._spawn("flwr-run", cmd, piped=True)
        lines: list[str] = []
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            self.stop("flwr-run")

        # a daemon timer, started inside the try: a SIGTERM (raised as an exception by the
        # CLI's handler) that lands while the timer starts must not leave a live non-daemon
        # thread behind, which would hold the process open for timeout_s after its cleanup
        timer = threading.Timer(timeout_s, expire)
        timer.daemon = True
        try:
            timer.start()
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                if on_line is not None:
                    on_line(line.rstrip("\n"))
            code = proc.wait()
        finally:
            timer.cancel()
            self.stop("flwr-run")
        if expired.is_set():
            code = 124
        return subprocess.CompletedProcess(proc.args, code, "".join(lines), "")

    @staticmethod
    def _descendants(pid: int) -> list[int]:
        """PIDs of all live descendants of ``pid`` (Linux ``/proc``; empty elsewhere)."""
        children: dict[int, list[int]] = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
                children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
            except (OSError, IndexError, ValueError):
                continue
        out, todo = [], [pid]
        while todo:
            kids = children.get(todo.pop(), [])
            out += kids
            todo += kids
        return out

    def stop_serverapp(self, wait_s: float = 8.0, done: Callable[[], bool] | None = None) -> bool:
        """SIGTERM to the running ServerApp (``flwr-serverapp``, a descendant of the SuperLink),
        and wait at most ``wait_s`` for it to end or for ``done()``; True when either happened
        (or no ServerApp ran).

        privcal's ServerApp answers SIGTERM by telling every client that the run stopped
        (:func:`~privcal.federated.flower.server_app.stop_on_signal`), so the clients exit at
        once instead of retrying a SuperLink that is about to go.
        """
        link = self.procs.get("superlink")
        if link is None or link.poll() is not None:
            return True
        apps = [pid for pid in self._descendants(link.pid) if "flwr-serverapp" in _cmdline(pid)]
        for pid in apps:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if (done is not None and done()) or not any(_cmdline(pid) for pid in apps):
                return True
            time.sleep(0.1)
        return False

    def stop(self, name: str | None = None) -> None:
        """Stop one process (by name) or all of them: SIGTERM to its group, then SIGKILL; all
        of them also stops what outlived its parent (:meth:`_stop_marked`)."""
        names = [name] if name else list(self.procs)[::-1]
        for n in names:
            proc = self.procs.pop(n, None)
            if proc is None or proc.poll() is not None:
                continue
            # Flower starts some helpers (flwr-serverapp, flwr-clientapp) in their own
            # sessions: collect every descendant before the parent goes away
            stray = self._descendants(proc.pid)
            with_group = (signal.SIGTERM, signal.SIGKILL)
            for sig in with_group:
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=2)
                    break
                except subprocess.TimeoutExpired:
                    continue
            for pid in stray:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        if name is None:
            self._stop_marked()

    def _stop_marked(self, grace_s: float = 2.0, wait_s: float = 2.0) -> None:
        """SIGKILL every process that carries this object's mark (:data:`MARK_VARIABLE`) and is
        still alive ``grace_s`` after the rest stopped, and wait up to ``wait_s`` for it to go.

        Ray's worker processes (``ray::ClientAppActor``) are the raylet's children: once
        ``flwr-simulation`` has returned, the raylet ends them on its own schedule, and under
        load one was still alive after ``privcal federate simulate`` exited. No longer anyone's
        descendant, such a process is found by the mark it inherited.
        """
        deadline = time.monotonic() + grace_s
        while _marked(self.mark) and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in _marked(self.mark):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + wait_s
        while _marked(self.mark) and time.monotonic() < deadline:
            time.sleep(0.1)

    def __enter__(self) -> FlowerProcesses:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

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
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from privcal.federated.flower.task import DEFAULTS

__all__ = ["FlowerProcesses", "free_port", "write_app"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _bin(name: str) -> str:
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else (shutil.which(name) or name)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


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
    """

    workdir: Path
    host: str = "127.0.0.1"
    insecure: bool = True
    certificates: tuple[str, str, str] | None = None
    port: int = 0
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

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

    def _spawn(self, name: str, args: Sequence[str]) -> subprocess.Popen[bytes]:
        log = open(self.workdir / f"{name}.log", "wb")
        proc = subprocess.Popen(
            list(args),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=self.workdir,  # Flower writes its state files into the working directory
            start_new_session=True,
        )
        self.procs[name] = proc
        return proc

    def start_superlink(self, wait_s: float = 60.0) -> None:
        self._spawn(
            "superlink",
            [
                _bin("flower-superlink"),
                *self._tls_args(True),
                "--host",
                self.host,
                "--port",
                str(self.port),
                "--database",
                ":flwr-in-memory-state:",
                "--disable-runtime-dependency-installation",
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

    def start_supernode(self, name: str, node_config: dict[str, Any], wait_s: float = 60.0) -> None:
        cfg = " ".join(f"{k}={_toml_value(v)}" for k, v in node_config.items())
        self._spawn(
            name,
            [
                _bin("flower-supernode"),
                *self._tls_args(False),
                "--superlink",
                self.address,
                "--host",
                self.host,
                "--port",
                str(free_port()),
                "--node-config",
                cfg,
            ],
        )
        self._wait_log(name, "SuperNode ID", wait_s)

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
        self, config: dict[str, Any], timeout_s: float = 300.0
    ) -> subprocess.CompletedProcess[str]:
        """Submit a run (``flwr run APP privcal --stream``) and wait for it to end."""
        app_dir = write_app(self.workdir / "app", config)
        return subprocess.run(
            [_bin("flwr"), "run", str(app_dir), "privcal", "--stream"],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )

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

    def stop(self, name: str | None = None) -> None:
        """Stop one process (by name) or all of them: SIGTERM to its group, then SIGKILL."""
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
                    proc.wait(timeout=5)
                    break
                except subprocess.TimeoutExpired:
                    continue
            for pid in stray:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass

    def __enter__(self) -> FlowerProcesses:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

"""Fixtures shared by the whole test suite.

* ``rng``: a freshly seeded :class:`numpy.random.Generator` per test (never shared state).
* ``shared_data``: the folder of real classifier outputs (``<repo>/../shared/data``), or a clean
  skip when it is absent.
* ``sample_labels``: ``f(logits, T, rng)`` draws one label per row from ``softmax(logits / T)``.
* ``overconfident``: small synthetic over-confident logits and labels (labels drawn from
  ``softmax(z / 2)``, so the logits are over-confident by a factor of about two).
* ``demo_run``: one ``run_demo(..., quick=True)`` per session (``report.md``, ``results.json``,
  ``report.html`` and what the console printed), shared by ``experiments/test_demo.py`` and
  ``report/test_report.py`` so the demo runs once.

Under pytest-xdist (``make test`` runs ``-n 2``) each worker process is made to look like a
serial run (:func:`pytest_configure`): xdist's workers inherit ``COLUMNS=80`` and ``LINES=24``,
which would set the width of the CLI's Rich output, and each worker gets its own ``TMPDIR``, so a
test that checks for temporary folders its run left behind (``privcal-flwr-*``) sees only its
own worker's. A test marked ``exclusive`` (the federations of a dozen processes whose tests time
their rounds and their shutdown) runs with no other test at once (:class:`_RunAlone`); the tests
marked ``compiled`` (numba kernels) run on one worker (:func:`pytest_collection_modifyitems`).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import numpy as np
import pytest

SHARED_DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"


#: An xdist worker's own TMPDIR and the TMPDIR it replaced.
_WORKER_TMP = pytest.StashKey[tuple[str, str | None]]()
#: An xdist worker's :class:`_RunAlone`.
_RUN_ALONE = pytest.StashKey["_RunAlone"]()


class _RunAlone:
    """Across the xdist workers of one run: a test marked ``exclusive`` runs alone.

    Every test holds ``run.lock`` while it runs (setup to teardown): shared, or exclusive when
    marked. Before taking it a worker passes through ``turn.lock``, which an exclusive test
    keeps while it waits for the others' current tests to end, so that tests starting one after
    the other on the other worker cannot keep it waiting. Both files are in the run's base
    temporary folder, shared by its workers (``<basetemp>/popen-gwN`` is each worker's own).
    """

    def __init__(self, folder: str) -> None:
        self.turn: IO[str] = open(os.path.join(folder, "turn.lock"), "a")
        self.run: IO[str] = open(os.path.join(folder, "run.lock"), "a")

    @contextmanager
    def hold(self, alone: bool) -> Iterator[None]:
        fcntl.flock(self.turn, fcntl.LOCK_EX)
        try:
            fcntl.flock(self.run, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(self.turn, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(self.run, fcntl.LOCK_UN)

    def close(self) -> None:
        self.turn.close()
        self.run.close()


def pytest_configure(config: pytest.Config) -> None:
    """In an xdist worker: drop the ``COLUMNS`` / ``LINES`` that xdist sets, give the worker
    a ``TMPDIR`` of its own (inherited by the processes its tests start), removed at its end,
    and open the run's :class:`_RunAlone` locks."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        return
    for name in ("COLUMNS", "LINES"):
        os.environ.pop(name, None)
    # short: Ray puts its Unix sockets under TMPDIR, and their paths must stay under 108 bytes
    folder = tempfile.mkdtemp(prefix=f"pc-{worker}-")
    # like /tmp: tests that run a child process as another user (nobody) reach their folders
    os.chmod(folder, 0o1777)
    config.stash[_WORKER_TMP] = (folder, os.environ.get("TMPDIR"))
    os.environ["TMPDIR"] = folder
    tempfile.tempdir = folder
    config.stash[_RUN_ALONE] = _RunAlone(os.path.dirname(str(config.option.basetemp)))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked ``compiled`` join one xdist group, so one worker compiles each numba kernel
    (a first compilation takes 5 to 20 s; two workers each compiled them); before xdist's own
    hook reads the groups."""
    for item in items:
        if item.get_closest_marker("compiled") is not None:
            item.add_marker(pytest.mark.xdist_group("numba"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    """Under xdist, run the test under :class:`_RunAlone`'s lock (alone when ``exclusive``)."""
    if _RUN_ALONE not in item.config.stash:
        return (yield)
    with item.config.stash[_RUN_ALONE].hold(item.get_closest_marker("exclusive") is not None):
        return (yield)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the worker's ``TMPDIR`` and restore the one it replaced."""
    if _RUN_ALONE in config.stash:
        config.stash[_RUN_ALONE].close()
    if _WORKER_TMP not in config.stash:
        return
    folder, before = config.stash[_WORKER_TMP]
    if before is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = before
    tempfile.tempdir = None
    for _ in range(5):  # a Ray process still ending may write its last logs meanwhile
        shutil.rmtree(folder, ignore_errors=True)
        if not os.path.exists(folder):
            break
        time.sleep(1.0)


def _sample_labels(logits: np.ndarray, temperature: float, rng: np.random.Generator) -> np.ndarray:
    """Draw one label per row from ``softmax(logits / temperature)`` (inverse-CDF, vectorised)."""
    s = logits / temperature
    p = np.exp(s - s.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    u = rng.random((p.shape[0], 1))
    return np.minimum((np.cumsum(p, axis=1) < u).sum(axis=1), p.shape[1] - 1)


@pytest.fixture(scope="session")
def sample_labels() -> Callable[[np.ndarray, float, np.random.Generator], np.ndarray]:
    """``f(logits, temperature, rng)``: one label per row drawn from a tempered softmax."""
    return _sample_labels


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(12345)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``privcal.data.shared_data_dir()`` (honours ``$PRIVCAL_SHARED_DATA``), else
    ``<repo>/../shared/data``; skips the test when neither exists."""
    try:
        from privcal.data import shared_data_dir
    except ImportError:  # pragma: no cover - the data package is optional for these fixtures
        found = None
    else:
        found = shared_data_dir()
        if found is None and os.environ.get("PRIVCAL_SHARED_DATA"):
            pytest.skip(f"$PRIVCAL_SHARED_DATA={os.environ['PRIVCAL_SHARED_DATA']} does not exist")
    path = found if found is not None else SHARED_DATA.resolve()
    if not path.is_dir():
        pytest.skip(f"shared real data not found at {path}")
    return path


@pytest.fixture(scope="session")
def overconfident() -> tuple[np.ndarray, np.ndarray]:
    """600 x 4 logits whose labels follow ``softmax(z / 2)``: the calibrated temperature is 2."""
    gen = np.random.default_rng(2024)
    z = 3.0 * gen.normal(size=(600, 4))
    y = _sample_labels(z, 2.0, gen)
    z.setflags(write=False)
    y.setflags(write=False)
    return z, y


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """``(report.md path, console text)`` of one quick demo run (seed 0)."""
    out = tmp_path_factory.mktemp("demo")
    from rich.console import Console

    from privcal.experiments.demo import run_demo

    console = Console(record=True, width=120)
    report = run_demo(out, seed=0, console=console, quick=True)
    return report, console.export_text()

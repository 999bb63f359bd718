"""The scoreboard run: every task of a :class:`Config`, optionally in worker processes, and its
Markdown page and JSON (drawn by :mod:`privcal.report.scoreboard_page`)."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from privcal.experiments._progress import Progress, map_jobs, report
from privcal.experiments.scoreboard.claims import Claim, claim_rows
from privcal.experiments.scoreboard.config import (
    ALPHA,
    FED_BETA,
    FED_CLIENTS,
    FED_DELTA,
    FED_ROUNDS,
    QUICK,
    SIMULATION_NOTE,
    Config,
    load_dataset,
)
from privcal.experiments.scoreboard.rows import (
    calibration_rows,
    conformal_rows,
    federated_rows,
    skipped_methods,
    toplabel_rows,
)
from privcal.report.scoreboard_page import (
    scoreboard_data,
    scoreboard_markdown,
    write_scoreboard_json,
)


# -------------------------------------------------------------------------------------- run
@dataclass
class Scoreboard:
    """Output of :func:`run`: the rows of every section, the claims, and the run's settings."""

    config: Config
    rows: list[dict[str, Any]] = field(default_factory=list)
    claims: list[Claim] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    def worse(self) -> list[dict[str, Any]]:
        """Rows marked worse than doing nothing."""
        return [r for r in self.rows if r.get("worse")]

    def data(self) -> dict[str, Any]:
        """The scoreboard as plain data (:func:`privcal.report.scoreboard_page.scoreboard_data`:
        what the JSON holds and the Markdown shows)."""
        claims = [asdict(k) for k in self.claims]
        config = asdict(self.config)
        return scoreboard_data(
            config, self.seconds, self.rows, claims, self.skipped, SIMULATION_NOTE
        )

    def write(self, path: str | Path, command: str = "privcal bench scoreboard") -> Path:
        """Write the Markdown page to ``path`` (a ``.md`` file) and the JSON beside it
        (``.json``); return ``path``."""
        path = Path(path)
        path.write_text(render(self, command) + "\n", encoding="utf-8")
        write_json(self, path.with_suffix(".json"), command)
        return path


def _tasks(config: Config) -> list[tuple[str, str]]:
    """The independent units of work: ``("data", name)`` per data set (calibration and
    conformal, or top-label) and ``("federated", name)``."""
    return [("data", n) for n in config.datasets] + [("federated", n) for n in config.federated]


def steps(config: Config) -> int:
    """Number of progress steps :func:`run` reports (one per task, plus the claims)."""
    return len(_tasks(config)) + 1


def _run_task(kind: str, name: str, config: Config) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Rows and skipped methods (with reasons) of one task of :func:`_tasks`."""
    data = load_dataset(name, config.seed)
    if kind == "federated":
        return federated_rows(data, config.epsilons, config.fed_draws, config.seed), {}
    if data.logits is None:
        why = (
            "top-label CSV (confidence only): scaling, private, federated and conformal methods "
            "need the full score vector"
        )
        return toplabel_rows(data, config.splits, config.seed), {name: why}
    rows = calibration_rows(data, config.epsilons, config.splits, config.seed)
    rows += conformal_rows(data, config.epsilons, config.conformal_splits, seed=config.seed)
    skipped = {f"{name} / {m}": why for m, why in skipped_methods(data.n_classes or 0).items()}
    return rows, skipped


def run(
    config: Config = QUICK,
    on_step: Callable[[str], None] | None = None,
    jobs: int = 1,
    *,
    seed: int | None = None,
    progress: Progress | None = None,
) -> Scoreboard:
    """Score every method of ``config`` on every data set; see the package docstring.

    ``progress(description, completed, total)`` is called after each step (:func:`steps` of
    them), for a progress bar (``on_step(description)``: deprecated, use ``progress``).
    ``seed`` (if given) replaces ``config.seed``. ``jobs > 1`` runs the data sets in that many
    worker processes; the results do not depend on it (every split and noise draw is seeded by
    data set, split and method).
    """
    from privcal._params import check_int

    jobs = check_int(jobs, "jobs", "scoreboard.run", low=1)
    if on_step is not None:
        warnings.warn(
            "scoreboard.run(on_step=...) is deprecated; use progress=callable.",
            DeprecationWarning,
            stacklevel=2,
        )
    if seed is not None:
        config = replace(config, seed=seed)
    total = steps(config)
    done = [0]

    def tick(description: str) -> None:
        done[0] += 1
        if on_step is not None:
            on_step(description)
        report(progress, description, done[0], total)

    start = time.perf_counter()
    board = Scoreboard(config)
    tasks = [(kind, name, config) for kind, name in _tasks(config)]
    results = map_jobs(_run_task, tasks, jobs, lambda i: tick(f"{tasks[i][1]}: {tasks[i][0]}"))
    for rows, skipped in results:
        board.rows += rows
        board.skipped.update(skipped)
    board.claims = claim_rows(config, board.rows)
    tick("claims")
    board.seconds = time.perf_counter() - start
    return board


#: The protocol constants the Markdown page states.
PROTOCOL: dict[str, Any] = dict(alpha=ALPHA, fed_beta=FED_BETA, fed_clients=FED_CLIENTS)
PROTOCOL |= dict(fed_rounds=FED_ROUNDS, fed_delta=FED_DELTA, simulation_note=SIMULATION_NOTE)


def render(board: Scoreboard, command: str = "privcal bench scoreboard") -> str:
    """The scoreboard as Markdown (what ``bench/SCOREBOARD.md`` holds;
    :func:`~privcal.report.scoreboard_page.scoreboard_markdown`)."""
    return scoreboard_markdown(board.data(), PROTOCOL, command)


def write_json(board: Scoreboard, path: Any, command: str = "privcal bench scoreboard") -> Any:
    """Write the scoreboard's rows, claims and settings as JSON (what ``privcal report`` reads;
    errors as fractions, ``epsilon`` ``"inf"`` for the non-private twin)."""
    del command  # the JSON records the process's own command line
    return write_scoreboard_json(path, board.data())

"""Helpers shared by the CLI verb modules: consoles, error reporting and file loading.

Every verb wraps its body in :func:`user_errors`, so that a bad input (``ValueError``, a missing
file) prints one red ``Error:`` message on stderr and exits with code 2 instead of a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, NoReturn

import click
import numpy as np
import typer
from rich.console import Console
from rich.markup import escape

from privcal.data import Scores, check_labels, check_scores, read_scores

__all__ = [
    "EXIT_BUDGET",
    "EXIT_USAGE",
    "INPUT_KINDS",
    "console",
    "err_console",
    "fail",
    "input_kind_option",
    "load_calibrator",
    "load_scores",
    "load_unlabelled",
    "user_errors",
    "write_probs",
]

#: Exit status for bad user input (the same as click's usage errors).
EXIT_USAGE = 2
#: Exit status when a data source refuses a query that would exceed its privacy budget.
EXIT_BUDGET = 3
#: Values of ``--input-kind``.
INPUT_KINDS = ("auto", "logits", "probs")
InputKind = Literal["auto", "logits", "probs"]

#: Standard output (tables, results).  Rich resolves ``sys.stdout`` at print time, so
#: ``typer.testing.CliRunner`` captures it.
console = Console()
#: Standard error (errors, warnings, progress).
err_console = Console(stderr=True)


def input_kind_option() -> Any:
    """The ``--input-kind auto|logits|probs`` option (shared by every verb that reads scores)."""
    return typer.Option(
        "--input-kind",
        click_type=click.Choice(INPUT_KINDS),
        help="What the score arrays hold; 'auto' takes it from the file layout.",
        show_default=True,
    )


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Print ``Error: message`` in red on stderr and exit with ``code``."""
    err_console.print(f"[bold red]Error:[/bold red] [red]{escape(message)}[/red]", soft_wrap=True)
    raise typer.Exit(code)


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn input errors into :func:`fail` (a red message and exit code 2), not a traceback.

    ``ValueError`` covers privcal's parameter and data validation (and
    :class:`json.JSONDecodeError`, :class:`sklearn.exceptions.NotFittedError`);
    ``FileNotFoundError`` and other ``OSError`` cover unreadable paths.  A
    :class:`privcal.privacy.BudgetExceededError` exits with :data:`EXIT_BUDGET` (3).
    """
    try:
        yield
    except (ValueError, OSError) as err:
        fail(str(err) or type(err).__name__)
    except RuntimeError as err:
        from privcal.privacy import BudgetExceededError

        if isinstance(err, BudgetExceededError):
            fail(str(err), code=EXIT_BUDGET)
        raise


def load_scores(path: Path, input_kind: InputKind = "auto", *, full: bool = True) -> Scores:
    """Read labelled scores with :func:`privcal.data.read_scores`.

    With ``full=True`` top-label files (confidence and predicted class only) are rejected, since
    calibrators need the whole score vector.
    """
    scores = read_scores(path, input=input_kind)
    if full and scores.logits is None:
        raise ValueError(
            f"{str(path)!r} holds top-label scores only (true_label, pred_label, confidence); "
            "this command needs the full N x C logits or probabilities."
        )
    return scores


def load_unlabelled(
    path: Path, input_kind: InputKind = "auto"
) -> tuple[np.ndarray, np.ndarray | None]:
    """Logits and, when the file has them, labels.

    Besides every layout of :func:`~privcal.data.read_scores`, this accepts an ``.npz`` with a
    ``logits`` (or ``probs``) array and no ``labels``, and a lone ``.npy`` array of logits (or
    probabilities with ``input_kind="probs"``): unlabelled test sets to calibrate.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if path.is_file() and suffix in (".npz", ".npy"):
        if suffix == ".npz":
            with np.load(path, allow_pickle=False) as npz:
                keys = set(npz.files)
                if "labels" not in keys and len(keys & {"logits", "probs"}) == 1:
                    key = "logits" if "logits" in keys else "probs"
                    kind: Literal["logits", "probs"] = (
                        key if input_kind == "auto" else input_kind  # type: ignore[assignment]
                    )
                    return check_scores(npz[key], input=kind, name=key), None
        elif not (path.name.endswith("_probs.npy") or path.name.endswith("_labels.npy")):
            arr = np.load(path, allow_pickle=False)
            lone: Literal["logits", "probs"] = "probs" if input_kind == "probs" else "logits"
            return check_scores(arr, input=lone, name=lone), None
    scores = load_scores(path, input_kind)
    assert scores.logits is not None
    return scores.logits, scores.labels


def load_calibrator(path: Path) -> Any:
    """Restore a calibrator saved by ``privcal fit`` (a :meth:`Calibrator.to_dict` JSON file)."""
    from privcal.calibrators import calibrator_from_dict

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No calibrator file at {str(path)!r}.")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{str(path)!r} is not a calibrator JSON file ({err}).") from None
    if not isinstance(data, dict) or "class" not in data or "fitted" not in data:
        raise ValueError(
            f"{str(path)!r} is not a calibrator file: expected the JSON written by "
            "'privcal fit' (keys 'class', 'params', 'fitted')."
        )
    return calibrator_from_dict(data)


def write_probs(path: Path, probs: np.ndarray, labels: np.ndarray | None) -> Path:
    """Write calibrated probabilities as ``.npz`` (``probs`` and, if known, ``labels``).

    The file is in privcal's ``probs`` + ``labels`` layout, so ``privcal evaluate`` reads it.
    """
    path = Path(path)
    if path.suffix.lower() != ".npz":
        raise ValueError(
            f"The '--out' parameter of privcal apply must be an .npz path. Got {str(path)!r} "
            "instead."
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, np.ndarray] = {"probs": np.asarray(probs, dtype=np.float64)}
    if labels is not None:
        arrays["labels"] = check_labels(labels, probs.shape[0], probs.shape[1])
    with path.open("wb") as fh:  # a handle keeps numpy from appending another suffix
        np.savez(fh, **arrays)  # type: ignore[arg-type]
    return path

"""Helpers shared by the CLI verb modules: consoles, the error rule and file loading.

The error rule (every verb)
---------------------------
* an input or usage error (``ValueError``, an unreadable file, a damaged archive, a click usage
  error) prints **one** ``Error:`` line on stderr that names the argument or file and the fix,
  and exits with :data:`EXIT_USAGE` (2);
* a :class:`privcal.privacy.BudgetExceededError` exits with :data:`EXIT_BUDGET` (3);
* anything else is a bug: one ``Error: internal error ...`` line and exit 1;
* no traceback, unless the global ``--debug`` option is given (then the exception propagates).

The warning rule (every verb)
-----------------------------
A warning from library code (privcal's own, :class:`privcal.exceptions.PrivcalWarning` and its
subclasses, or another package's) prints **one** ``Warning:`` line on stderr per kind, never
Python's ``file:line`` form: :func:`collect_warnings` records the warnings of a block and
groups them by category and message with the numbers left out, so 4,000 fits that each warn
"gap 4.52 within 2 SDs" give one line ending ``(x4000, first shown)``. Deprecation, import and
resource warnings stay hidden, as Python hides them by default.

:class:`PrivcalGroup` (the root app's click group) applies the rule to every verb, so a verb
needs no code for it, and collects the warnings of every verb; :func:`user_errors` applies the
error rule to a block (kept for verbs built on their own Typer app, as the tests do).
"""

from __future__ import annotations

import json
import re
import sqlite3
import warnings
import zipfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, NoReturn

import click
import numpy as np
import typer
from rich.console import Console, ConsoleDimensions
from rich.markup import escape
from typer.core import TyperGroup

from privcal.data import Scores, check_labels, check_scores, read_scores
from privcal.data.io import (
    check_output_path,
    load_npy,
    load_npz,
    refuse_probs_as_logits,
    write_columns,
)

__all__ = [
    "EXIT_BUDGET",
    "EXIT_INTERNAL",
    "EXIT_USAGE",
    "INPUT_KINDS",
    "NON_TTY_WIDTH",
    "ForceOption",
    "InputKindOption",
    "OutDir",
    "OutDirO",
    "PrivcalGroup",
    "check_output_path",
    "collect_warnings",
    "console",
    "err_console",
    "fail",
    "load_calibrator",
    "load_scores",
    "load_unlabelled",
    "open_sources",
    "plain_text",
    "print_protocol",
    "print_warnings",
    "private_release",
    "progress_callback",
    "refuse_overwrite",
    "run_protocol",
    "set_debug",
    "table_width",
    "user_errors",
    "warn",
    "warning_kind",
    "write_part",
    "write_probs",
]

#: Exit status for bad user input (the same as click's usage errors).
EXIT_USAGE = 2
#: Exit status when a data source refuses a query that would exceed its privacy budget.
EXIT_BUDGET = 3
#: Exit status of an unexpected error (a bug in privcal): one line, no traceback.
EXIT_INTERNAL = 1
#: Values of ``--input-kind``.
INPUT_KINDS = ("auto", "logits", "probs")
#: Width of Rich output that does not go to a terminal (a pipe or a file): wide enough that no
#: table is cut; a table only takes the width it needs.
NON_TTY_WIDTH = 200

_STATE = {"debug": False}


def set_debug(flag: bool) -> None:
    """``--debug``: let exceptions propagate with their traceback instead of one line."""
    _STATE["debug"] = bool(flag)


class _Console(Console):
    """A Rich console that, when not writing to a terminal, is :data:`NON_TTY_WIDTH` wide.

    Rich falls back to 80 columns for pipes and files, which cuts tables; an explicit
    ``COLUMNS`` still wins.
    """

    @property
    def size(self) -> ConsoleDimensions:
        size = super().size
        if self.is_terminal or "COLUMNS" in self._environ or self._width is not None:
            return size
        return ConsoleDimensions(max(size.width, NON_TTY_WIDTH), size.height)

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        Console.size.fset(self, new_size)  # type: ignore[attr-defined]


#: Standard output (tables, results).  Rich resolves ``sys.stdout`` at print time, so
#: ``typer.testing.CliRunner`` captures it.
console: Console = _Console()
#: Standard error (errors, warnings, progress).
err_console: Console = _Console(stderr=True)


#: A terminal escape sequence (colours, cursor moves): CSI ``ESC [ ... final byte`` or a
#: two-character ``ESC X``.
_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|[@-Z\\-_])")


def plain_text(text: str) -> str:
    """``text`` without terminal escape sequences: what a log file keeps of a coloured line."""
    return _ESCAPE.sub("", text)


def table_width() -> int:
    """Width of a privacy table on standard output: :data:`privcal._text.TEXT_WIDTH` (100), or
    the terminal's width when it is narrower."""
    from privcal._text import TEXT_WIDTH

    return min(TEXT_WIDTH, console.width)


#: Options shared by several verbs, one declaration each: ``--input-kind auto|logits|probs``
#: (every verb that reads scores), ``--force`` (every verb that writes a private release) and
#: ``--out`` of the verbs that write a folder (``OutDirO`` also takes ``-o``).
InputKindOption = Annotated[
    str,
    typer.Option(
        "--input-kind",
        click_type=click.Choice(INPUT_KINDS),
        help="What the score arrays hold; 'auto' takes it from the file layout.",
        show_default=True,
    ),
]
ForceOption = Annotated[
    bool,
    typer.Option(
        "--force",
        help="Overwrite an output that holds a private release (it cost privacy budget); "
        "without it the command refuses before any work.",
    ),
]
OutDir = Annotated[Path, typer.Option("--out", help="Output folder.")]
OutDirO = Annotated[Path, typer.Option("--out", "-o", help="Output folder.")]


def private_release(path: Path) -> str | None:
    """What private release the file ``path`` holds, or ``None`` (no file, or no release).

    A release is a privacy report with at least one release: a private calibrator's JSON
    (``fitted.privacy_report_``), a summary written beside an output (``privacy_report``) or a
    run's ``privacy_report.json``. A file that is not such JSON holds none.
    """
    if not path.is_file() or path.suffix.lower() != ".json":
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    fitted = data.get("fitted")
    report = fitted.get("privacy_report_") if isinstance(fitted, dict) else None
    report = report or data.get("privacy_report") or data
    if not isinstance(report, dict) or not report.get("releases"):
        return None
    epsilon = report.get("epsilon")
    spent = f" (epsilon={epsilon:g})" if isinstance(epsilon, (int, float)) else ""
    if report.get("status", "private") == "private":
        return f"the release of a private computation{spent}, which cost privacy budget"
    return f"a release drawn with seeded noise{spent}, not private but charged like one"


def refuse_overwrite(paths: Iterable[Path], option: str, owner: str, force: bool) -> None:
    """Unless ``force``, refuse (one ``Error:`` line naming ``--force``) when one of ``paths``
    holds a private release (:func:`private_release`): it cost privacy budget, and writing over
    it would lose it for good. Called before any work."""
    if force:
        return
    for path in paths:
        what = private_release(Path(path))
        if what is not None:
            fail(
                f"{option} of {owner}: {str(path)!r} holds {what}; pass --force to overwrite "
                f"it, or choose another {option}."
            )


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Print ``Error: message`` (one line, red on a terminal) on stderr and exit with ``code``."""
    line = " ".join(str(message).split())
    err_console.print(f"[bold red]Error:[/bold red] [red]{escape(line)}[/red]", soft_wrap=True)
    raise typer.Exit(code)


def warn(message: str) -> None:
    """Print ``Warning: message`` (one line, yellow on a terminal) on stderr; the run goes on."""
    line = " ".join(str(message).split())
    err_console.print(
        f"[bold yellow]Warning:[/bold yellow] {escape(line)}", soft_wrap=True, highlight=False
    )


#: A number in a warning's message (not part of a name such as ``float32`` or ``n_1``).
_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?(?!\w)")
#: Categories Python hides by default; the CLI hides them too.
_HIDDEN = (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning)


def warning_kind(category: type[Warning], message: str) -> tuple[type[Warning], str]:
    """The kind :func:`print_warnings` groups by: the category and the message with its numbers
    replaced by ``#`` (``"gap 4.52 within 2 SDs"`` -> ``"gap # within # SDs"``)."""
    return category, _NUMBER.sub("#", " ".join(str(message).split()))


def print_warnings(
    caught: Iterable[warnings.WarningMessage], hint: Callable[[str], str] | None = None
) -> None:
    """Print recorded warnings as one ``Warning:`` line per kind (:func:`warning_kind`), in the
    order each kind first occurred.

    A kind seen more than once ends in ``(xN)``, or ``(xN, first shown)`` when the messages
    differ (in their numbers); ``hint`` may add a verb's fix to each line's text.
    """
    kinds: dict[tuple[type[Warning], str], list[str]] = {}
    for w in caught:
        text = " ".join(str(w.message).split())
        kinds.setdefault(warning_kind(w.category, text), []).append(text)
    for texts in kinds.values():
        line = hint(texts[0]) if hint is not None else texts[0]
        if len(texts) > 1:
            shown = ", first shown" if len(set(texts)) > 1 else ""
            line += f" (x{len(texts)}{shown})"
        warn(line)


@contextmanager
def collect_warnings(
    hint: Callable[[str], str] | None = None,
) -> Iterator[list[warnings.WarningMessage]]:
    """Record the block's warnings, then print them with :func:`print_warnings` (also when the
    block raises: the warnings come before the ``Error:`` line).

    Yields the list of recorded warnings (for a verb that also saves them). Every occurrence is
    recorded (so the counts are exact), except the categories Python hides by default.
    :class:`PrivcalGroup` wraps every verb in one; a verb nests its own to print a step's
    warnings where they belong (before its results).
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for category in _HIDDEN:
            warnings.simplefilter("ignore", category)
        try:
            yield caught
        finally:
            print_warnings(caught, hint)


def _os_message(err: OSError) -> str:
    where = f" {str(err.filename)!r}" if err.filename else ""
    if isinstance(err, FileNotFoundError) and not err.filename:
        return str(err)  # privcal's own messages name the file already
    reason = err.strerror or str(err) or type(err).__name__
    return f"Cannot use{where}: {reason}. Check the path and its permissions."


def _report(err: BaseException) -> NoReturn:
    """Apply the error rule to ``err`` (see the module docstring)."""
    from privcal.privacy import BudgetExceededError

    if isinstance(err, BudgetExceededError):
        fail(str(err), code=EXIT_BUDGET)
    if isinstance(err, OSError):
        fail(_os_message(err))
    if isinstance(err, sqlite3.Error):
        fail(
            f"The ledger could not be used ({err}); check that it is a privcal ledger and that "
            "its file and folder are writable."
        )
    if isinstance(err, (ValueError, EOFError, zipfile.BadZipFile)):
        fail(str(err) or type(err).__name__)
    fail(
        f"internal error ({type(err).__name__}: {err}); rerun with --debug for the traceback "
        "and report it.",
        code=EXIT_INTERNAL,
    )


def _passes_through(err: BaseException) -> bool:
    """Exits, aborts, help requests and interrupts are not errors of the user's input."""
    return isinstance(
        err, (click.exceptions.Exit, click.exceptions.Abort, click.exceptions.NoArgsIsHelpError)
    ) or not isinstance(err, Exception)


@contextmanager
def user_errors() -> Iterator[None]:
    """Apply the error rule (the module docstring) to the block: one ``Error:`` line and exit 2
    (3 for a budget).

    ``ValueError`` covers privcal's parameter and data validation (and
    :class:`json.JSONDecodeError`, :class:`sklearn.exceptions.NotFittedError`); ``OSError``,
    ``EOFError`` and :class:`zipfile.BadZipFile` cover unreadable or damaged files,
    :class:`sqlite3.Error` unusable ledgers.
    """
    try:
        yield
    except Exception as err:
        if _passes_through(err) or isinstance(err, click.ClickException) or _STATE["debug"]:
            raise
        _report(err)


class PrivcalGroup(TyperGroup):
    """The root click group: applies the error rule and the warning rule to every verb, usage
    errors included.

    A click usage error (a missing option, a value of the wrong type) becomes one line that
    names the option and points at the verb's ``--help``.
    """

    def invoke(self, ctx: click.Context) -> Any:
        try:
            with collect_warnings():
                return super().invoke(ctx)
        except Exception as err:
            if _passes_through(err) or _STATE["debug"]:
                raise
            if isinstance(err, click.UsageError):
                where = err.ctx.command_path if err.ctx is not None else ctx.command_path
                fail(f"{err.format_message()} (see '{where} --help')")
            if isinstance(err, click.ClickException):
                fail(err.format_message())
            _report(err)


def load_scores(path: Path, input_kind: str = "auto", *, full: bool = True) -> Scores:
    """Read labelled scores with :func:`privcal.data.read_scores` (``input_kind``: a value of
    ``--input-kind``).

    With ``full=True`` top-label files (confidence and predicted class only) are rejected, since
    calibrators need the whole score vector.
    """
    scores = read_scores(path, input=input_kind)  # type: ignore[arg-type]
    if full and scores.logits is None:
        raise ValueError(
            f"{str(path)!r} holds top-label scores only (true_label, pred_label, confidence); "
            "this command needs the full N x C logits or probabilities."
        )
    return scores


#: A ``.npy`` file of a ``NAME_probs.npy`` / ``NAME_labels.npy`` pair (:func:`read_scores`).
_PAIRED_NPY = ("_probs.npy", "_labels.npy")


def load_unlabelled(path: Path, input_kind: str = "auto") -> tuple[np.ndarray, np.ndarray | None]:
    """Logits and, when the file has them, labels.

    Besides every layout of :func:`~privcal.data.read_scores`, this accepts an ``.npz`` with a
    ``logits`` (or ``probs``) array and no ``labels``, and a lone ``.npy`` array of logits (or
    probabilities with ``input_kind="probs"``): unlabelled test sets to calibrate.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    source = str(path)
    try:
        array = None
        if path.is_file() and suffix == ".npz":
            npz = load_npz(path)
            keys = set(npz)
            if "labels" not in keys and len(keys & {"logits", "probs"}) == 1:
                key = "logits" if "logits" in keys else "probs"
                array, where = npz[key], "the array 'logits'"
        elif path.is_file() and suffix == ".npy" and not path.name.endswith(_PAIRED_NPY):
            key = "probs" if input_kind == "probs" else "logits"
            array, where = load_npy(path), "the lone .npy array (read as logits)"
        if array is not None:
            if input_kind == "auto" and key == "logits":
                refuse_probs_as_logits(array, source, where)
            kind = key if input_kind == "auto" else input_kind
            return check_scores(array, input=kind, name=key), None  # type: ignore[arg-type]
    except ValueError as err:
        raise ValueError(str(err) if source in str(err) else f"{source!r}: {err}") from None
    scores = load_scores(path, input_kind)
    assert scores.logits is not None
    return scores.logits, scores.labels


def load_calibrator(path: Path) -> Any:
    """Restore a calibrator saved by ``privcal fit`` (a :meth:`Calibrator.to_dict` JSON file).

    Every failure to restore (not JSON, not a calibrator, unknown class, missing or invalid
    fitted state) is a ``ValueError`` naming the file.
    """
    from privcal.calibrators import calibrator_from_dict

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No calibrator file at {str(path)!r}.")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ValueError(
            f"{str(path)!r} is not a calibrator JSON file (it is not text: a scores file?); give "
            "the .json file that 'privcal fit' wrote."
        ) from None
    except json.JSONDecodeError as err:
        raise ValueError(
            f"{str(path)!r} is not a calibrator JSON file ({err}); give the .json file that "
            "'privcal fit' wrote."
        ) from None
    if not isinstance(data, dict) or "class" not in data or "fitted" not in data:
        raise ValueError(
            f"{str(path)!r} is not a calibrator file: expected the JSON written by "
            "'privcal fit' (keys 'class', 'params', 'fitted')."
        )
    try:
        return calibrator_from_dict(data)
    except ValueError as err:  # the calibrators' own validation: it says what is wrong
        raise ValueError(f"Calibrator file {str(path)!r}: {err}") from None
    except (KeyError, TypeError, AttributeError) as err:
        raise ValueError(
            f"{str(path)!r} is not a valid calibrator file ({type(err).__name__}: {err}); "
            "fit it again with 'privcal fit'."
        ) from None


def open_sources(paths: Iterable[str | Path], seed: int | None) -> list[Any]:
    """The source ledgers of ``--sources`` (with ``--seed``: seeded noise, one stream a source)."""
    from privcal.privacy import SeededNoise
    from privcal.private import DataSource

    def noise(i: int) -> Any:
        return None if seed is None else SeededNoise(np.random.default_rng([seed, i]))

    return [DataSource.open(Path(p), noise=noise(i)) for i, p in enumerate(paths)]


def write_part(path: Path, scores: Scores) -> Path:
    """Write ``scores`` as a privcal score file in the layout its suffix names: full vectors
    with :func:`privcal.data.write_scores`, top-label scores as the columns ``true_label,
    pred_label, confidence`` (``privcal evaluate`` reads both back)."""
    from privcal.data import write_scores

    if scores.logits is not None:
        return write_scores(path, scores.logits, scores.labels)
    assert scores.confidence is not None and scores.predicted is not None
    columns = {"true_label": scores.labels, "pred_label": scores.predicted}
    return write_columns(path, {**columns, "confidence": scores.confidence})


def write_probs(path: Path, probs: np.ndarray, labels: np.ndarray | None) -> Path:
    """Write calibrated probabilities in the format named by the suffix of ``path``.

    ``.npz``: arrays ``probs`` (and ``labels``); ``.csv`` / ``.parquet``: columns ``label``,
    ``prob_0 .. prob_{C-1}``; ``.json``: lists ``probs`` (and ``labels``). The ``.npz``, ``.csv``
    and ``.parquet`` files with labels are privcal score files, so ``privcal evaluate`` reads
    them.
    """
    probs = np.asarray(probs, dtype=np.float64)
    y = None if labels is None else check_labels(labels, probs.shape[0], probs.shape[1])
    if Path(path).suffix.lower() in (".csv", ".parquet"):
        columns = {"prob": probs} if y is None else {"label": y, "prob": probs}
    else:
        columns = {"probs": probs} if y is None else {"probs": probs, "labels": y}
    return write_columns(path, columns)


@contextmanager
def progress_callback(
    out: Console | None = None, *, transient: bool = False
) -> Iterator[Callable[..., None]]:
    """The ``progress`` an experiment's ``run`` takes, drawn on ``out`` (stderr by default).

    ``progress(description)`` prints the message; ``progress(description, completed, total)``
    moves the Rich bar (and shows ``description`` on it).
    """
    from privcal.experiments.demo import rich_bar

    target = out if out is not None else err_console
    bar = rich_bar(target, transient=transient)
    tasks: list[Any] = []

    def progress(description: str, completed: int | None = None, total: int | None = None) -> None:
        if total is None:
            target.print(description, markup=False, highlight=False)
            return
        if not tasks:  # the bar starts with the first counted step (a message alone prints)
            bar.start()
            tasks.append(bar.add_task(description, total=total))
        bar.update(tasks[0], completed=completed, total=total, description=description)

    try:
        yield progress
    finally:
        if tasks:
            bar.stop()


def run_protocol(
    run: Callable[..., Any], config: Any, out: Path, *, seed: int, transient: bool = False
) -> tuple[Any, Any]:
    """A protocol's ``run(config, seed=, progress=)`` with a progress bar on stderr, its result
    written to ``out``, under the error rule; returns the result and what ``write`` returned."""
    with user_errors():
        with progress_callback(transient=transient) as progress:
            result = run(config, seed=seed, progress=progress)
        return result, result.write(out)


def print_protocol(exp: Any, config: Any, out: Path, seed: int) -> None:
    """Run the protocol module ``exp`` (:func:`run_protocol`) and print the Markdown report it
    wrote."""
    path = run_protocol(exp.run, config, out, seed=seed)[1]
    console.print(path.read_text(), markup=False, highlight=False)
    console.print(f"Wrote {path}")

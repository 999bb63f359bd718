"""Read and write classifier outputs (scores) with their labels.

:func:`read_scores` recognises these layouts (the first five are the shared real data described
in ``shared/data/README.md``; the rest are privcal's own, written by :func:`write_scores`):

=====================  ===========================================================  ============
layout                 content                                                      scores
=====================  ===========================================================  ============
netcal ``.npz``        arrays ``predictions`` (N x C) and ``ground_truth`` (N)      probs
cleanlab ``.npy``      ``<stem>_probs.npy`` (N x C) + ``<stem>_labels.npy`` (N);     probs
                       ``path`` may name either file or ``<stem>`` itself
top-label ``.csv``     header ``true_label,pred_label,confidence``                  top label
privcal ``.npz``       arrays ``logits`` + ``labels``, or ``probs`` + ``labels``    by key
privcal ``.csv``       header ``label,logit_0,...,logit_{C-1}`` (or ``prob_*``)     by column
privcal ``.parquet``   columns as the privcal CSV (read with pyarrow)               by column
=====================  ===========================================================  ============

Full-vector layouts give ``N x C`` float64 **logits**: probabilities ``p`` become ``log p``
through :func:`privcal.data.validation.check_scores`, which replaces exact zeros by the smallest
positive float and emits a :class:`~privcal.data.validation.ZeroProbabilityWarning`
(``cleanlab-heldout/20news_probs.npy`` has such zeros; the warning is expected there).
Probabilities outside [0, 1] by at most ``PROBS_ATOL`` (float rounding in exported softmax
outputs; ``imdb_probs.npy`` has values up to 1 + 1e-5) are clipped to [0, 1] by ``check_probs``
with a ``RoundedProbabilityWarning``; larger excursions are rejected.
Top-label layouts give only the predicted class and its confidence, so ``n_classes`` is unknown
and :meth:`Scores.probs` is unavailable.  Parquet files with the top-label columns, and ``.npz``
files with arrays ``true_label``, ``pred_label`` and ``confidence`` (what ``privcal apply``
writes for a top-label file), are read as well.
"""

from __future__ import annotations

import json
import os
import re
import warnings
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from scipy.special import softmax as _softmax

from privcal._params import check_option
from privcal.data.validation import (
    PROBS_ATOL,
    ProbabilitiesAsLogitsWarning,
    check_labels,
    check_probs,
    check_scores,
    looks_like_probs,
)

__all__ = [
    "LAYOUTS",
    "OUTPUT_SUFFIXES",
    "Scores",
    "check_output_path",
    "load_npy",
    "load_npz",
    "read_scores",
    "refuse_probs_as_logits",
    "write_columns",
    "write_scores",
]

InputKind = Literal["auto", "logits", "probs"]

#: Human-readable list of the layouts :func:`read_scores` recognises (used in error messages).
LAYOUTS: tuple[str, ...] = (
    "netcal .npz with arrays 'predictions' (N x C probabilities) and 'ground_truth' (N)",
    "cleanlab pair '<stem>_probs.npy' + '<stem>_labels.npy' (path: either file or the stem)",
    "top-label .csv/.parquet with columns 'true_label,pred_label,confidence' (.npz: arrays)",
    "privcal .npz with arrays 'logits' + 'labels' (or 'probs' + 'labels')",
    "privcal .csv/.parquet with columns 'label,logit_0..logit_{C-1}' (or 'prob_0..prob_{C-1}')",
)

_TOPLABEL_COLUMNS = ("true_label", "pred_label", "confidence")
_VECTOR_COLUMN = re.compile(r"^(logit|prob)_(\d+)$")


def _unknown(path: Path, detail: str) -> ValueError:
    listing = "\n".join(f"  - {layout}" for layout in LAYOUTS)
    return ValueError(
        f"Cannot read scores from {str(path)!r}: {detail}. Recognised layouts:\n{listing}"
    )


@dataclass(frozen=True)
class Scores:
    """Classifier outputs on a labelled set, as read by :func:`read_scores`.

    Exactly one of two forms is filled:

    * full vector: ``logits`` is an ``N x C`` float64 array (``C >= 2``);
    * top label: ``confidence`` (N, in [0, 1]) and ``predicted`` (N, int64) only.

    Attributes
    ----------
    labels : ndarray of shape (N,), int64
        True class indices.
    logits : ndarray of shape (N, C) or None
        Logits; for files holding probabilities ``p``, ``log p``.
    confidence : ndarray of shape (N,) or None
        Top-label confidence (top-label files only).
    predicted : ndarray of shape (N,) or None
        Predicted class (top-label files only).
    source : str
        Where the scores came from (a path), for messages and reports.
    """

    labels: np.ndarray
    logits: np.ndarray | None = None
    confidence: np.ndarray | None = None
    predicted: np.ndarray | None = None
    source: str = ""

    def __post_init__(self) -> None:
        full = self.logits is not None
        top = self.confidence is not None and self.predicted is not None
        if full == top or (not full and (self.confidence is None) != (self.predicted is None)):
            raise ValueError(
                "Scores needs either 'logits' (full vector) or both 'confidence' and "
                "'predicted' (top label), not both and not neither."
            )

    @property
    def n_samples(self) -> int:
        """Number of rows ``N``."""
        return int(self.labels.shape[0])

    @property
    def n_classes(self) -> int | None:
        """Number of classes ``C`` (``None`` for top-label scores, where it is unknown)."""
        return None if self.logits is None else int(self.logits.shape[1])

    @property
    def is_top_label(self) -> bool:
        """True when only the top label and its confidence are known."""
        return self.logits is None

    def probs(self) -> np.ndarray:
        """Row-wise :math:`\\mathrm{softmax}(z)` of the logits, ``N x C``.

        For files that held probabilities ``p`` this gives back ``p`` (renormalised, up to
        float rounding and the clipping of exact zeros).  Raises ``ValueError`` for top-label
        scores, which have no probability vector.
        """
        if self.logits is None:
            raise ValueError(
                f"Scores from {self.source or 'this source'!r} are top-label only (confidence "
                "and predicted class); there is no probability vector."
            )
        return np.asarray(_softmax(self.logits, axis=1), dtype=np.float64)


# --------------------------------------------------------------------------------------------
# Reading


def _resolve_kind(
    input: InputKind, layout_kind: Literal["logits", "probs"]
) -> Literal["logits", "probs"]:
    return layout_kind if input == "auto" else input


def _naming(source: str, err: ValueError) -> ValueError:
    """``err`` with the file ``source`` in front (validation messages name only the array)."""
    text = str(err)
    return ValueError(text if not source or source in text else f"{source!r}: {text}")


def _full(
    scores: object,
    labels: object,
    kind: Literal["logits", "probs"],
    source: str,
    *,
    guessed: str | None = None,
) -> Scores:
    """Validated full-vector scores; ``guessed`` names the array or columns when the layout,
    not the caller, said they hold logits (then probabilities there are refused)."""
    try:
        if guessed is not None and kind == "logits":
            refuse_probs_as_logits(scores, source, guessed)
        with warnings.catch_warnings():  # refused above, or the caller said they are logits
            warnings.simplefilter("ignore", ProbabilitiesAsLogitsWarning)
            logits = check_scores(scores, input=kind, name=kind)
        y = check_labels(labels, logits.shape[0], logits.shape[1])
    except ValueError as err:
        raise _naming(source, err) from None
    return Scores(labels=y, logits=logits, source=source)


def refuse_probs_as_logits(scores: object, source: str, where: str) -> None:
    """Refuse ``N x C`` (``C >= 2``) "logits" whose rows are all non-negative and sum to 1.

    Called when only the layout (an array ``logits``, ``logit_*`` columns, a lone ``.npy``)
    says that the scores are logits: probabilities stored there would otherwise be fitted as
    logits without a word. ``input="logits"`` / ``input="probs"`` (``--input-kind``) states the
    kind and skips the check.
    """
    if looks_like_probs(scores):
        raise ValueError(
            f"{source!r}: {where} looks like probabilities, not logits (every row is "
            "non-negative and sums to 1). Store them as probabilities ('probs' array or "
            "prob_* columns), or state the kind: input='probs' (privcal: --input-kind probs) "
            "converts them with log; input='logits' (--input-kind logits) keeps them as logits."
        )


def _top_label(true: object, pred: object, conf: object, input: InputKind, source: str) -> Scores:
    if input == "logits":
        raise ValueError(
            f"{source!r} holds top-label confidences, which are probabilities; pass "
            "input='auto' or input='probs', not input='logits'."
        )
    try:
        conf_arr = np.asarray(conf, dtype=np.float64)
        finite = conf_arr[np.isfinite(conf_arr)]
        if finite.size and (finite.min() < -PROBS_ATOL or finite.max() > 1.0 + PROBS_ATOL):
            raise ValueError(
                f"'confidence' must hold the predicted class's probability, in [0, 1]; found "
                f"values in [{finite.min():.6g}, {finite.max():.6g}]. A top-label file holds "
                "probabilities, not logits: apply the softmax before writing it."
            )
        confidence = check_probs(conf_arr, "confidence")[:, 1]
        n = confidence.shape[0]
        true_arr = _class_indices(true, "true_label")
        pred_arr = _class_indices(pred, "pred_label")
        # The number of classes is unknown; bound the check by the largest index seen so that it
        # still rejects negative, fractional and mis-sized labels.
        hi = 1 + int(max(np.max(true_arr, initial=0), np.max(pred_arr, initial=0)))
        labels = check_labels(true_arr, n, hi, name="true_label")
        predicted = check_labels(pred_arr, n, hi, name="pred_label")
    except ValueError as err:
        raise _naming(source, err) from None
    return Scores(labels=labels, confidence=confidence, predicted=predicted, source=source)


def _class_indices(values: object, name: str) -> np.ndarray:
    """``values`` as an array, refused with a ``ValueError`` naming ``name`` unless numeric
    (:func:`~privcal.data.validation.check_labels` then checks that they are class indices)."""
    arr = np.asarray(values)
    if arr.dtype == bool or np.issubdtype(arr.dtype, np.number):
        return arr
    try:
        return arr.astype(np.float64)
    except (TypeError, ValueError):
        sample = next((v for v in arr.ravel() if not _is_number(v)), None)
        raise ValueError(
            f"The column {name!r} must hold class indices (integers 0 .. C-1); it holds "
            f"non-numeric values such as {sample!r}. Write the classes as their indices."
        ) from None


def _is_number(value: object) -> bool:
    try:
        float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return True


def _from_columns(
    names: Sequence[str], column: Callable[[str], np.ndarray], input: InputKind, path: Path
) -> Scores:
    source = str(path)
    present = set(names)
    if set(_TOPLABEL_COLUMNS) <= present:
        return _top_label(
            column("true_label"), column("pred_label"), column("confidence"), input, source
        )
    vector: dict[str, dict[int, str]] = {"logit": {}, "prob": {}}
    for name in names:
        match = _VECTOR_COLUMN.match(name)
        if match:
            vector[match.group(1)][int(match.group(2))] = name
    kinds = [k for k, cols in vector.items() if cols]
    if "label" not in present and len(kinds) == 1:
        raise no_labels(path, f"columns {kinds[0]}_* only", "add a 'label' column of class indices")
    if "label" not in present or len(kinds) != 1:
        raise _unknown(path, f"columns {list(names)} match no layout")
    prefix = kinds[0]
    cols = vector[prefix]
    n_classes = len(cols)
    if sorted(cols) != list(range(n_classes)):
        raise _unknown(
            path,
            f"the {prefix}_* columns must be numbered 0..{n_classes - 1} without gaps; got "
            f"{sorted(cols)}",
        )
    scores = np.column_stack([column(cols[c]) for c in range(n_classes)])
    layout_kind: Literal["logits", "probs"] = "logits" if prefix == "logit" else "probs"
    guessed = "the logit_* columns" if input == "auto" else None
    return _full(
        scores, column("label"), _resolve_kind(input, layout_kind), source, guessed=guessed
    )


def _read_table(path: Path, input: InputKind, reader: str) -> Scores:
    import pyarrow.csv
    import pyarrow.parquet

    try:
        table = pyarrow.csv.read_csv(path) if reader == "csv" else pyarrow.parquet.read_table(path)
    except Exception as err:  # pyarrow raises several error types for malformed files
        raise _unknown(path, f"it could not be parsed as {reader} ({err})") from err

    def column(name: str) -> np.ndarray:
        return np.asarray(table.column(name).to_numpy())

    return _from_columns(table.column_names, column, input, path)


#: The first bytes of a NumPy ``.npy`` file and of a zip archive (``.npz``).
_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")


def _check_magic(path: Path, magics: tuple[bytes, ...], what: str, writer: str) -> None:
    """Refuse an empty file or one that does not start with ``magics`` (text, another format)."""
    with path.open("rb") as fh:
        head = fh.read(8)
    if not head:
        raise ValueError(f"{str(path)!r} is empty (0 bytes); write it again with {writer}.")
    if not head.startswith(magics):
        raise ValueError(
            f"{str(path)!r} is not a {what} (its first bytes are {head!r}); write it with {writer}."
        )


def _damaged(path: Path, what: str, writer: str, err: BaseException) -> ValueError:
    return ValueError(
        f"{str(path)!r} is a damaged {what} (truncated or corrupt: {err}); write it again "
        f"with {writer}."
    )


def load_npz(path: str | Path) -> dict[str, np.ndarray]:
    """Every array of an ``.npz`` archive, read eagerly and without pickles.

    Raises ``ValueError`` naming the file for an empty, non-zip (e.g. text) or damaged
    (truncated, corrupt) archive, instead of NumPy's ``EOFError`` or its ``allow_pickle``
    message.
    """
    path = Path(path)
    _check_magic(path, _ZIP_MAGIC, "NumPy .npz archive", "numpy.savez")
    try:
        with np.load(path, allow_pickle=False) as npz:
            return {key: npz[key] for key in npz.files}
    except (zipfile.BadZipFile, EOFError, ValueError, OSError) as err:
        raise _damaged(path, ".npz archive", "numpy.savez", err) from err


def load_npy(path: str | Path) -> np.ndarray:
    """The array of an ``.npy`` file, without pickles; ``ValueError`` for damaged files."""
    path = Path(path)
    _check_magic(path, (_NPY_MAGIC,), "NumPy .npy file", "numpy.save")
    try:
        return np.asarray(np.load(path, allow_pickle=False))
    except (EOFError, ValueError, OSError) as err:
        raise _damaged(path, ".npy file", "numpy.save", err) from err


def _read_npz(path: Path, input: InputKind) -> Scores:
    npz = load_npz(path)
    keys = set(npz)
    source = str(path)
    if {"predictions", "ground_truth"} <= keys:
        kind = _resolve_kind(input, "probs")
        return _full(npz["predictions"], npz["ground_truth"], kind, source)
    if {"logits", "labels"} <= keys and "probs" not in keys:
        guessed = "the array 'logits'" if input == "auto" else None
        kind = _resolve_kind(input, "logits")
        return _full(npz["logits"], npz["labels"], kind, source, guessed=guessed)
    if {"probs", "labels"} <= keys and "logits" not in keys:
        return _full(npz["probs"], npz["labels"], _resolve_kind(input, "probs"), source)
    if set(_TOPLABEL_COLUMNS) <= keys:  # what `privcal apply` writes for a top-label file
        return _top_label(npz["true_label"], npz["pred_label"], npz["confidence"], input, source)
    for scores_key, labels_key in (("logits", "labels"), ("probs", "labels")):
        if keys == {scores_key}:
            raise no_labels(path, f"array {scores_key!r} only", f"add an array {labels_key!r}")
    if keys == {"predictions"}:
        raise no_labels(path, "array 'predictions' only", "add an array 'ground_truth'")
    raise _unknown(path, f"arrays {sorted(keys)} match no layout")


def no_labels(path: str | Path, holds: str, fix: str) -> ValueError:
    """``FILE has no labels`` and the one-line fix, for a scores file read where labels are
    needed (``holds``: what the file has; ``fix``: what to do)."""
    return ValueError(f"{str(path)!r} has no labels ({holds}); this needs labelled scores: {fix}.")


def _npy_pair(path: Path) -> tuple[Path, Path] | None:
    """The ``(<stem>_probs.npy, <stem>_labels.npy)`` pair that ``path`` names, if any."""
    name = path.name
    for suffix in ("_probs.npy", "_labels.npy"):
        if name.endswith(suffix):
            stem = name[: -len(suffix)]
            break
    else:
        stem = name[: -len(".npy")] if name.endswith(".npy") else name
    probs = path.with_name(f"{stem}_probs.npy")
    labels = path.with_name(f"{stem}_labels.npy")
    return (probs, labels) if probs.is_file() and labels.is_file() else None


def read_scores(path: str | Path, input: InputKind = "auto") -> Scores:
    """Read classifier scores and labels from a file in one of the recognised layouts.

    Parameters
    ----------
    path : str or pathlib.Path
        The file (see the module docstring for the layouts).  For a cleanlab pair, either file
        or their common stem (``.../cifar10`` for ``cifar10_probs.npy`` + ``cifar10_labels.npy``).
    input : {"auto", "logits", "probs"}
        What the score arrays hold.  ``"auto"`` takes it from the layout (``predictions``,
        ``probs``, ``*_probs.npy`` and ``prob_*`` columns are probabilities; ``logits`` and
        ``logit_*`` are logits); ``"logits"`` or ``"probs"`` overrides that.  Probabilities are
        converted to logits with ``log p`` (exact zeros: see
        :func:`~privcal.data.validation.probs_to_logits`).  Top-label files hold probabilities
        and reject ``input="logits"``.

    Returns
    -------
    Scores
        Validated labels with either ``N x C`` logits or top-label confidence and prediction.

    Raises
    ------
    FileNotFoundError
        If nothing exists at ``path`` (nor a cleanlab pair for it).
    ValueError
        If the layout is not recognised (the message lists the recognised ones), or the
        content fails validation (shape, finiteness, label range, rows not summing to 1).
    """
    check_option(input, "input", "read_scores", ("auto", "logits", "probs"))
    path = Path(path)
    pair = _npy_pair(path) if (path.suffix in ("", ".npy") or not path.exists()) else None
    if pair is not None:
        probs_path, labels_path = pair
        kind = _resolve_kind(input, "probs")
        probs = load_npy(probs_path)
        labels = load_npy(labels_path)
        return _full(probs, labels, kind, str(probs_path.with_name(probs_path.name[:-10])))
    if not path.exists():
        raise FileNotFoundError(f"No scores file at {str(path)!r} (nor a *_probs.npy pair).")
    if path.is_dir():
        raise ValueError(f"{str(path)!r} is a folder; give the scores file inside it.")
    suffix = path.suffix.lower()
    if suffix == ".npz":
        return _read_npz(path, input)
    if suffix in (".csv", ".parquet"):
        return _read_table(path, input, suffix[1:])
    if suffix == ".npy":
        name = path.name
        if name.endswith("_labels.npy"):
            raise ValueError(
                f"{str(path)!r} holds labels only: save the scores beside it as its twin "
                f"'{name[: -len('_labels.npy')]}_probs.npy'."
            )
        if name.endswith("_probs.npy"):
            fix = f"save the labels beside it as its twin '{name[: -len('_probs.npy')]}_labels.npy'"
        else:
            stem = name[: -len(".npy")]
            fix = f"save the scores as '{stem}_probs.npy' and the labels as '{stem}_labels.npy'"
        raise no_labels(path, "a lone .npy array", fix)
    raise _unknown(
        path, f"the suffix {suffix or '(none)'!r} is not one of .npz, .npy, .csv, .parquet"
    )


# --------------------------------------------------------------------------------------------
# Writing


def write_scores(path: str | Path, logits: object, labels: object) -> Path:
    """Write logits and labels in privcal's layout, chosen by the suffix of ``path``.

    * ``.npz``: arrays ``logits`` (float64, N x C) and ``labels`` (int64, N);
    * ``.csv``: header ``label,logit_0,...,logit_{C-1}``, floats written with 17 significant
      digits so that :func:`read_scores` gives back the same float64 values;
    * ``.parquet``: the same columns (int64 ``label``, float64 ``logit_*``), via pyarrow.

    Parameters
    ----------
    path : str or pathlib.Path
        Destination; its parent folder must exist.  An existing file is overwritten.
    logits : array-like of shape (N, C), (N, 1) or (N,)
        Logits, validated by :func:`~privcal.data.validation.check_scores` (binary ``N`` logits
        ``z`` are stored as ``[0, z]``).
    labels : array-like of shape (N,)
        Integer labels in ``[0, C)``.

    Returns
    -------
    pathlib.Path
        The path written.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    check_option(suffix, "path suffix", "write_scores", (".npz", ".csv", ".parquet"))
    z = check_scores(logits, input="logits", name="logits")
    y = check_labels(labels, z.shape[0], z.shape[1])
    names = ["label", *(f"logit_{c}" for c in range(z.shape[1]))]
    if suffix == ".npz":
        with path.open("wb") as fh:  # a file handle keeps numpy from appending another suffix
            np.savez(fh, logits=z, labels=y)
    elif suffix == ".csv":
        table = np.column_stack([y.astype(np.float64), z])
        fmt = ["%d"] + ["%.17g"] * z.shape[1]
        np.savetxt(path, table, fmt=fmt, delimiter=",", header=",".join(names), comments="")
    else:
        import pyarrow as pa
        import pyarrow.parquet

        arrays = [pa.array(y, type=pa.int64())] + [pa.array(z[:, c]) for c in range(z.shape[1])]
        pyarrow.parquet.write_table(pa.table(arrays, names=names), path)
    return path


#: Output formats of :func:`write_columns`, chosen by the suffix of the path.
OUTPUT_SUFFIXES: tuple[str, ...] = (".json", ".csv", ".parquet", ".npz")


def check_output_path(
    path: str | Path, name: str, owner: str, allowed: Sequence[str] = OUTPUT_SUFFIXES
) -> Path:
    """Check that ``path`` has an allowed suffix and can be written; create its parent folder.

    Called before any work (and before any privacy budget is spent), so that a typo in an
    output path costs nothing. The check writes: it opens an existing file for appending (its
    content unchanged) or creates the file and removes it again, so a place that permissions
    allow but the file system refuses (``/proc``, a read-only mount, a name too long) fails
    here, not after the release. Raises ``ValueError`` naming ``name`` (the option) and the fix.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in allowed:
        raise ValueError(
            f"The {name!r} parameter of {owner} must end in one of {', '.join(allowed)} (the "
            f"suffix picks the format). Got {str(path)!r} instead."
        )
    if os.path.isdir(path):  # False, not an error, for a name the system refuses
        raise ValueError(f"The {name!r} parameter of {owner} names a folder: {str(path)!r}.")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(
            f"The {name!r} parameter of {owner}: cannot create the folder "
            f"{str(path.parent)!r} ({err.strerror or err}); choose a writable path."
        ) from None
    try:
        existed = path.exists()
        with path.open("ab" if existed else "xb"):
            pass
    except OSError as err:
        raise ValueError(
            f"The {name!r} parameter of {owner}: {str(path)!r} cannot be written "
            f"({err.strerror or err}); choose a writable path."
        ) from None
    if not existed:
        path.unlink()
    return path


def _flat_columns(columns: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Expand each ``N x K`` column ``name`` into ``name_0 .. name_{K-1}``."""
    flat: dict[str, np.ndarray] = {}
    for name, values in columns.items():
        arr = np.asarray(values)
        if arr.ndim == 2:
            flat.update({f"{name}_{k}": arr[:, k] for k in range(arr.shape[1])})
        else:
            flat[name] = arr
    return flat


def write_columns(path: str | Path, columns: Mapping[str, np.ndarray]) -> Path:
    """Write equal-length columns in the format named by the suffix of ``path``.

    * ``.npz``: one array per column, as given (2-D columns stay ``N x K``);
    * ``.json``: an object of lists (2-D columns as lists of rows);
    * ``.csv`` / ``.parquet``: one column per 1-D column; an ``N x K`` column ``name`` becomes
      ``name_0 .. name_{K-1}`` (so ``{"label": y, "prob": P}`` is privcal's score layout,
      readable by :func:`read_scores`).

    Other suffixes raise ``ValueError`` listing :data:`OUTPUT_SUFFIXES`; ``OSError`` from the
    file system is re-raised as ``ValueError`` naming the path.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    check_option(suffix, "path suffix", "write_columns", OUTPUT_SUFFIXES)
    try:
        if suffix == ".npz":
            with path.open("wb") as fh:  # a handle keeps numpy from appending another suffix
                np.savez(fh, **{k: np.asarray(v) for k, v in columns.items()})  # type: ignore[arg-type]
        elif suffix == ".json":
            data = {k: np.asarray(v).tolist() for k, v in columns.items()}
            path.write_text(json.dumps(data) + "\n", encoding="utf-8")
        else:
            import pyarrow as pa
            import pyarrow.csv
            import pyarrow.parquet

            table = pa.table(_flat_columns(columns))
            if suffix == ".csv":
                pyarrow.csv.write_csv(table, path)
            else:
                pyarrow.parquet.write_table(table, path)
    except OSError as err:
        raise ValueError(f"Cannot write {str(path)!r}: {err.strerror or err}.") from None
    return path

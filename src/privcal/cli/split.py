"""``privcal split``: a seeded, stratified calibration / test split of one labelled scores file.

* ``privcal split DATA --out-cal cal.npz --out-test test.npz [--test-size 0.5 | --cal-size N]
  [--seed 0]`` splits the rows of DATA (any layout :func:`privcal.data.read_scores` reads) into
  a calibration part and a test part, stratified by label (scikit-learn's
  :func:`~sklearn.model_selection.train_test_split` with ``stratify=labels``), so that each part
  keeps the class proportions of the whole file and holds every class.

The real data in ``shared/data`` hold no validation split; ``privcal split`` makes one. Each
part is written in privcal's layout chosen by its suffix (:func:`privcal.data.write_scores`:
``.npz`` arrays ``logits`` + ``labels``, or ``.csv`` / ``.parquet`` columns ``label, logit_*``);
probabilities ``p`` are stored as the logits ``log p`` that privcal reads them as, so each part
reads back exactly as its rows of DATA. A top-label file (``true_label, pred_label,
confidence``) gives top-label ``.csv`` / ``.parquet`` parts. Each row keeps its order within
its part.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import numpy as np
import typer

from privcal.cli._common import (
    InputKind,
    check_output_path,
    console,
    fail,
    input_kind_option,
    load_scores,
    user_errors,
)
from privcal.data import Scores

__all__ = ["register", "split", "split_indices"]

#: Suffixes of the parts: privcal's score layouts (top-label parts: .csv and .parquet only).
SPLIT_SUFFIXES = (".npz", ".csv", ".parquet")
TOP_LABEL_SUFFIXES = (".csv", ".parquet")
#: ``--test-size`` when neither size is given.
DEFAULT_TEST_SIZE = 0.5


def _part_sizes(n: int, test_size: float | None, cal_size: int | None) -> tuple[int, int]:
    """``(n_cal, n_test)`` from ``--test-size`` (fraction of the rows; the test part is rounded
    up, as scikit-learn does) or ``--cal-size`` (rows); refused when a part would be empty."""
    if cal_size is not None:
        n_cal = cal_size
        if n_cal >= n:
            fail(
                f"--cal-size {cal_size} leaves the test part empty: the file has {n} rows; "
                f"choose --cal-size below {n}."
            )
    else:
        frac = DEFAULT_TEST_SIZE if test_size is None else test_size
        n_test = math.ceil(frac * n)
        n_cal = n - n_test
        if n_cal < 1:
            fail(
                f"--test-size {frac:g} of {n} rows leaves the calibration part empty; choose a "
                "smaller --test-size."
            )
    return n_cal, n - n_cal


def split_indices(
    labels: np.ndarray, n_cal: int, n_test: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Sorted row indices of the calibration and test parts, stratified by ``labels``.

    Each class with ``k`` rows gets about ``k * n_cal / N`` calibration rows
    (:func:`sklearn.model_selection.train_test_split` with ``stratify=labels``). ``ValueError``
    when a class has a single row (it cannot be in both parts) or when a part has fewer rows
    than there are classes, so that a class would be missing from it.
    """
    from sklearn.model_selection import train_test_split

    classes, counts = np.unique(labels, return_counts=True)
    single = classes[counts < 2]
    if single.size:
        shown = ", ".join(str(int(c)) for c in single[:5]) + (" ..." if single.size > 5 else "")
        raise ValueError(
            f"{single.size} class(es) have a single row (labels {shown}); a stratified split "
            "needs at least 2 rows of each class, one for each part. Remove those rows first."
        )
    parts = (
        ("calibration", n_cal, "raise --cal-size or lower --test-size"),
        ("test", n_test, "lower --cal-size or raise --test-size"),
    )
    for part, size, fix in parts:
        if size < classes.size:
            raise ValueError(
                f"The {part} part would have {size} rows for {classes.size} classes, so a class "
                f"would be missing from it; each part needs at least {classes.size} rows "
                f"({fix})."
            )
    cal_idx, test_idx = train_test_split(
        np.arange(labels.shape[0]),
        train_size=n_cal,
        test_size=n_test,
        random_state=seed,
        shuffle=True,
        stratify=labels,
    )
    for (part, _, fix), idx in zip(parts, (cal_idx, test_idx), strict=True):
        missing = np.setdiff1d(classes, labels[idx])
        if missing.size:  # stratification rounds each class's share; a rare class can get 0
            raise ValueError(
                f"{missing.size} class(es) would be missing from the {part} part (labels "
                f"{', '.join(str(int(c)) for c in missing[:5])}); {fix}."
            )
    return np.sort(cal_idx), np.sort(test_idx)


def _take(scores: Scores, idx: np.ndarray) -> Scores:
    if scores.logits is not None:
        return Scores(labels=scores.labels[idx], logits=scores.logits[idx], source=scores.source)
    assert scores.confidence is not None and scores.predicted is not None
    return Scores(
        labels=scores.labels[idx],
        confidence=scores.confidence[idx],
        predicted=scores.predicted[idx],
        source=scores.source,
    )


def _write(path: Path, part: Scores) -> Path:
    from privcal.data import write_scores
    from privcal.data.io import write_columns

    if part.logits is not None:
        return write_scores(path, part.logits, part.labels)
    assert part.confidence is not None and part.predicted is not None
    return write_columns(
        path,
        {"true_label": part.labels, "pred_label": part.predicted, "confidence": part.confidence},
    )


def _check_args(
    data: Path, out_cal: Path, out_test: Path, test_size: float | None, cal_size: int | None
) -> None:
    """Everything that can be checked without reading DATA (fast, before any work)."""
    if test_size is not None and cal_size is not None:
        fail("Give --test-size (a fraction) or --cal-size (rows), not both.")
    if test_size is not None and not 0.0 < test_size < 1.0:
        fail(
            f"The '--test-size' parameter of privcal split must be a fraction in (0, 1). Got "
            f"{test_size:g} instead."
        )
    if cal_size is not None and cal_size < 1:
        fail(
            f"The '--cal-size' parameter of privcal split must be a number of rows >= 1. Got "
            f"{cal_size} instead."
        )
    check_output_path(out_cal, "--out-cal", "privcal split", SPLIT_SUFFIXES)
    check_output_path(out_test, "--out-test", "privcal split", SPLIT_SUFFIXES)
    if out_cal.resolve() == out_test.resolve():
        fail(f"--out-cal and --out-test name the same file ({str(out_cal)!r}); give two paths.")
    for option, out in (("--out-cal", out_cal), ("--out-test", out_test)):
        if data.exists() and out.resolve() == data.resolve():
            fail(f"{option} {str(out)!r} is DATA itself; write the parts to new files.")


def split(
    data: Annotated[
        Path,
        typer.Argument(
            help="Labelled scores to split (any privcal scores file, e.g. the shared data).",
            show_default=False,
        ),
    ],
    out_cal: Annotated[
        Path,
        typer.Option(
            "--out-cal", help="Calibration part; its suffix picks the format: .npz, .csv, .parquet."
        ),
    ],
    out_test: Annotated[
        Path,
        typer.Option("--out-test", help="Test part; .npz, .csv or .parquet."),
    ],
    test_size: Annotated[
        float | None,
        typer.Option(
            "--test-size",
            help=f"Fraction of the rows in the test part, in (0, 1) (default {DEFAULT_TEST_SIZE}).",
            show_default=False,
        ),
    ] = None,
    cal_size: Annotated[
        int | None,
        typer.Option(
            "--cal-size",
            help="Rows in the calibration part (instead of --test-size); the rest is the test.",
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the random split.")] = 0,
    input_kind: Annotated[str, input_kind_option()] = "auto",
) -> None:
    """Split labelled scores into calibration and test parts, stratified by label and seeded.

    Each part keeps the class proportions of DATA and holds every class; full score vectors are
    written as privcal logits (probabilities p as log p, what privcal reads them as), top-label
    files as top-label CSV/Parquet.
    """
    with user_errors():
        _check_args(data, out_cal, out_test, test_size, cal_size)
        kind: InputKind = input_kind  # type: ignore[assignment]
        try:
            scores = load_scores(data, kind, full=False)
        except ValueError as err:
            if "has no labels" in str(err):
                raise ValueError(f"{err} privcal split stratifies by label.") from None
            raise
        if scores.is_top_label:
            for option, out in (("--out-cal", out_cal), ("--out-test", out_test)):
                if out.suffix.lower() not in TOP_LABEL_SUFFIXES:
                    fail(
                        f"{str(data)!r} is a top-label file; {option} must end in .csv or "
                        f".parquet (the top-label layout). Got {str(out)!r}."
                    )
        n_cal, n_test = _part_sizes(scores.n_samples, test_size, cal_size)
        cal_idx, test_idx = split_indices(scores.labels, n_cal, n_test, seed)
        _write(out_cal, _take(scores, cal_idx))
        _write(out_test, _take(scores, test_idx))
    n_classes = int(np.unique(scores.labels).size)
    console.print(
        f"Split {scores.n_samples} rows of {data.name} ({n_classes} classes present) by label, "
        f"seed {seed}: {n_cal} -> {out_cal}, {n_test} -> {out_test}",
        highlight=False,
    )


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Add ``split`` to the ``privcal`` app."""
    del bench_app  # no benchmark verbs here
    app.command("split")(split)

"""``privcal split``: seeded, stratified splits of one labelled scores file.

``privcal split DATA --out-cal cal.npz --out-test test.npz`` makes a calibration / test split
(:func:`split_indices`; the real data in ``shared/data`` hold no validation split);
``privcal split DATA --parts K --out site{k}.npz`` makes the ``K`` site files of a federation
(:func:`~privcal.federated.stratified_partition`, or
:func:`~privcal.federated.dirichlet_partition`: the split ``privcal federate simulate`` draws
with the same ``--beta`` and ``--seed``). Each part is written in privcal's layout chosen by its
suffix (:func:`privcal.cli._common.write_part`), so it reads back exactly as its rows of DATA;
each row keeps its order within its part.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import click
import numpy as np
import typer

from privcal.cli._common import (
    InputKindOption,
    check_output_path,
    console,
    fail,
    load_scores,
    user_errors,
    write_part,
)
from privcal.data import Scores

__all__ = ["register", "split", "split_indices"]

#: Suffixes of the parts: privcal's score layouts (top-label parts: .csv and .parquet only).
SPLIT_SUFFIXES = (".npz", ".csv", ".parquet")
TOP_LABEL_SUFFIXES = (".csv", ".parquet")
#: ``--test-size`` when neither size is given.
DEFAULT_TEST_SIZE = 0.5
#: Values of ``--partition`` (with ``--parts``).
PARTITIONS = ("stratified", "dirichlet")
#: ``--beta`` when not given: the default of ``privcal federate simulate``.
DEFAULT_BETA = 0.1
#: Draws of a Dirichlet split tried before giving up (every part must get a row).
DIRICHLET_TRIES = 100


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
        n_cal = n - math.ceil(frac * n)
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


def _write(path: Path, scores: Scores, idx: np.ndarray) -> Path:
    """Write the rows ``idx`` of ``scores`` to ``path``."""
    arrays = ("labels", "logits", "confidence", "predicted")
    rows = {k: getattr(scores, k)[idx] for k in arrays if getattr(scores, k) is not None}
    return write_part(path, Scores(**rows, source=scores.source))


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
    _not_data(data, "--out-cal", out_cal)
    _not_data(data, "--out-test", out_test)


def _not_data(data: Path, option: str, out: Path) -> None:
    if data.exists() and out.resolve() == data.resolve():
        fail(f"{option} {str(out)!r} is DATA itself; write the parts to new files.")


def _site_paths(data: Path, parts: int, out: str | None, beta: float | None) -> list[Path]:
    """The ``--parts`` files named by ``--out`` (``{k}`` = 0 .. K-1), checked before any work."""
    if parts < 2:
        fail(
            f"The '--parts' parameter of privcal split must be a number of site files >= 2. "
            f"Got {parts} instead."
        )
    if out is None or "{k}" not in out:
        fail(
            "--parts K writes K files named by --out with {k} for the part's number (0 .. K-1), "
            f"e.g. --out 'site{{k}}.npz'. Got {'no --out' if out is None else repr(out)}."
        )
    if beta is not None and not beta > 0:
        fail(f"The '--beta' parameter of privcal split must be > 0. Got {beta:g} instead.")
    paths = [Path(out.replace("{k}", str(k))) for k in range(parts)]
    for path in paths:
        check_output_path(path, "--out", "privcal split", SPLIT_SUFFIXES)
        _not_data(data, "--out", path)
    return paths


def _site_indices(
    labels: np.ndarray, parts: int, partition: str, beta: float, seed: int
) -> list[np.ndarray]:
    """The rows of each site: :func:`~privcal.federated.stratified_partition` or
    :func:`~privcal.federated.dirichlet_partition` (every part at least one row)."""
    from privcal.federated.partition import dirichlet_partition, stratified_partition

    if parts > labels.size:
        raise ValueError(
            f"--parts {parts} is more than the {labels.size} rows of DATA; each part needs a "
            f"row: choose --parts <= {labels.size}."
        )
    if partition == "stratified":
        return stratified_partition(labels, n_clients=parts, seed=seed)
    try:
        return dirichlet_partition(
            labels, n_clients=parts, beta=beta, seed=seed, max_tries=DIRICHLET_TRIES
        )
    except ValueError:  # no draw left every part a row (the only error left after the checks)
        raise ValueError(
            f"--partition dirichlet --beta {beta:g}: no draw of {DIRICHLET_TRIES} gave each of "
            f"the {parts} parts a row; raise --beta (less skew) or lower --parts."
        ) from None


def _read(data: Path, input_kind: str) -> Scores:
    try:
        return load_scores(data, input_kind, full=False)
    except ValueError as err:
        if "has no labels" in str(err):
            raise ValueError(f"{err} privcal split stratifies by label.") from None
        raise


def _check_top_label(data: Path, scores: Scores, outs: dict[str, list[Path]]) -> None:
    if not scores.is_top_label:
        return
    for option, paths in outs.items():
        for out in paths:
            if out.suffix.lower() not in TOP_LABEL_SUFFIXES:
                fail(
                    f"{str(data)!r} is a top-label file; {option} must end in .csv or .parquet "
                    f"(the top-label layout). Got {str(out)!r}."
                )


def split(
    data: Annotated[
        Path,
        typer.Argument(
            help="Labelled scores to split (any privcal scores file, e.g. the shared data).",
            show_default=False,
        ),
    ],
    out_cal: Annotated[
        Path | None,
        typer.Option(
            "--out-cal",
            help="Calibration part; its suffix picks the format: .npz, .csv, .parquet.",
            show_default=False,
        ),
    ] = None,
    out_test: Annotated[
        Path | None,
        typer.Option("--out-test", help="Test part; .npz, .csv or .parquet.", show_default=False),
    ] = None,
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
    parts: Annotated[
        int | None,
        typer.Option(
            "--parts",
            help="K >= 2: write K site files (a federation's clients) named by --out, instead "
            "of --out-cal and --out-test.",
            show_default=False,
        ),
    ] = None,
    out: Annotated[
        str | None,
        typer.Option(
            "--out",
            help="With --parts: the site files, a name with {k} for 0 .. K-1, e.g. site{k}.npz.",
            show_default=False,
        ),
    ] = None,
    partition: Annotated[
        str,
        typer.Option(
            "--partition",
            click_type=click.Choice(PARTITIONS),
            help="With --parts: 'stratified' (near-equal parts with the class proportions of "
            "DATA) or 'dirichlet' (label skew, Dirichlet(--beta) class shares per part).",
        ),
    ] = "stratified",
    beta: Annotated[
        float | None,
        typer.Option(
            "--beta",
            help=f"Concentration of --partition dirichlet, > 0; smaller is more skewed (default "
            f"{DEFAULT_BETA}, as privcal federate simulate).",
            show_default=False,
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the random split.")] = 0,
    input_kind: InputKindOption = "auto",
) -> None:
    """Split labelled scores into calibration and test parts, or into K site files, seeded.

    Calibration / test: each part keeps the class proportions of DATA and holds every class.
    --parts K: near-equal parts with the class proportions of DATA (stratified), or Dirichlet
    label skew. Full score vectors are written as privcal logits (probabilities p as log p, what
    privcal reads them as), top-label files as top-label CSV/Parquet.
    """
    with user_errors():
        if parts is not None or out is not None:
            _split_sites(data, parts, out, partition, beta, seed, input_kind, test_size,
                         cal_size, out_cal, out_test)  # fmt: skip
            return
        if partition != "stratified" or beta is not None:
            fail("--partition and --beta choose how --parts K splits; pass --parts and --out.")
        if out_cal is None or out_test is None:
            missing = "--out-cal" if out_cal is None else "--out-test"
            fail(
                f"Missing option '{missing}': privcal split DATA --out-cal CAL --out-test TEST "
                "writes a calibration / test split (or --parts K --out 'site{k}.npz': K site "
                "files)."
            )
        _check_args(data, out_cal, out_test, test_size, cal_size)
        scores = _read(data, input_kind)
        _check_top_label(data, scores, {"--out-cal": [out_cal], "--out-test": [out_test]})
        n_cal, n_test = _part_sizes(scores.n_samples, test_size, cal_size)
        cal_idx, test_idx = split_indices(scores.labels, n_cal, n_test, seed)
        _write(out_cal, scores, cal_idx)
        _write(out_test, scores, test_idx)
    n_classes = int(np.unique(scores.labels).size)
    console.print(
        f"Split {scores.n_samples} rows of {data.name} ({n_classes} classes present) by label, "
        f"seed {seed}: {n_cal} -> {out_cal}, {n_test} -> {out_test}",
        highlight=False,
    )


def _split_sites(
    data: Path,
    parts: int | None,
    out: str | None,
    partition: str,
    beta: float | None,
    seed: int,
    input_kind: str,
    test_size: float | None,
    cal_size: int | None,
    out_cal: Path | None,
    out_test: Path | None,
) -> None:
    """``privcal split DATA --parts K --out PATTERN``: write the K site files."""
    split_options = {
        "--test-size": test_size,
        "--cal-size": cal_size,
        "--out-cal": out_cal,
        "--out-test": out_test,
    }
    given = [name for name, value in split_options.items() if value is not None]
    if given:
        fail(
            f"--parts K writes K site files: drop {', '.join(given)} (a calibration / test split)."
        )
    if parts is None:
        fail("--out names the site files of --parts K; pass --parts (e.g. --parts 5).")
    if partition == "stratified" and beta is not None:
        fail("--beta is the concentration of --partition dirichlet; drop it, or pass that.")
    paths = _site_paths(data, parts, out, beta)
    scores = _read(data, input_kind)
    _check_top_label(data, scores, {"--out": paths})
    b = DEFAULT_BETA if beta is None else beta
    rows = _site_indices(scores.labels, parts, partition, b, seed)
    how = "stratified by label" if partition == "stratified" else f"Dirichlet beta={b:g}"
    n_classes = int(np.unique(scores.labels).size)
    console.print(
        f"Split {scores.n_samples} rows of {data.name} ({n_classes} classes present) into "
        f"{parts} parts, {how}, seed {seed}:",
        highlight=False,
    )
    for path, idx in zip(paths, rows, strict=True):
        _write(path, scores, idx)
        present = int(np.unique(scores.labels[idx]).size)
        console.print(f"  {idx.size} rows ({present} classes) -> {path}", highlight=False)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Add ``split`` to the ``privcal`` app."""
    del bench_app  # no benchmark verbs here
    app.command("split")(split)

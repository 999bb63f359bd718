"""Private fitting for ``privcal fit --epsilon/--sources`` (called directly by the command).

* ``--method acc-t|nll-t|temperature|ece-t|histogram --epsilon E --sources a.sqlite ...``:
  Luo et al. (2020)'s private recalibration with the sources as data sources
  (:class:`~privcal.private.PrivateTemperatureScaling`,
  :class:`~privcal.private.PrivateHistogramBinning`); each source pays ``E`` from its own
  ledger. With ``--input`` instead of ``--sources`` the file is one private data set with budget
  ``E`` (in memory, no ledger).
* ``--method dp-ts|dp-ps --epsilon E [--delta D] --input val.npz``: Bu et al. (2023)'s
  DP-SGD-trained temperature / Platt (vector) scaling on one held-out split (torch extra).
* ``--ledger PATH`` (with ``--input``): a pipeline ledger (``privcal ledger init``) charged with
  the fit before it releases (the estimators' ``ledger=``); a refused fit exits 3.
"""

from __future__ import annotations

import sqlite3
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from privcal._params import check_option
from privcal.cli._common import err_console, fail, open_sources, warn
from privcal.data import Scores

__all__ = ["PRIVATE_METHODS", "SEEDED_NOISE_WARNING", "fit_private"]

#: ``--method`` names of private fits -> what they build.
PRIVATE_METHODS: dict[str, dict[str, Any]] = {
    "acc-t": {"kind": "temperature", "objective": "acc"},
    "nll-t": {"kind": "temperature", "objective": "nll"},
    "temperature": {"kind": "temperature", "objective": "nll"},
    "ece-t": {"kind": "temperature", "objective": "ece"},
    "histogram": {"kind": "histogram"},
    "dp-ts": {"kind": "dp-sgd", "class": "DPTemperatureScaling"},
    "dp-ps": {"kind": "dp-sgd", "class": "DPPlattScaling"},
}
#: Printed (a ``Warning:`` line) when ``--seed`` replaces secure noise.
SEEDED_NOISE_WARNING = "--seed: seeded noise (simulation only, not safe for real releases)"


def fit_private(
    method: str,
    *,
    scores: Scores | None,
    epsilon: float | None,
    delta: float | None,
    sources: list[str],
    seed: int | None,
    n_bins: int,
    t_range: tuple[float, float] | None,
    aggregation: str = "local",
    threshold: int | None = None,
    ledger: Path | None = None,
    force: bool = False,
) -> Any:
    """Fit the private calibrator ``method`` and print its privacy report on stderr.

    Inconsistent options are refused first, before anything is read from a source or spent.
    ``--seed`` switches to seeded (simulation) noise, with a warning. A temperature fit whose
    release cannot tell its temperature from ``T = 1`` (:func:`privcal.private.release_check`),
    or a histogram fit that calibrates no bin (:func:`privcal.private.binning.readable_bins`),
    exits 2 without saving, unless ``force`` keeps it (``fallback="none"``, with a warning).
    """
    check_option(method, "--method", "privcal fit with --epsilon/--sources", PRIVATE_METHODS)
    if epsilon is None:
        fail("privcal fit --sources/--delta needs --epsilon: the budget the fit spends.")
    if sources and scores is not None:
        fail("privcal fit takes either --input (one private data set) or --sources, not both.")
    if not sources and scores is None:
        fail(f"privcal fit --method {method} --epsilon needs --input or --sources.")
    spec = PRIVATE_METHODS[method]
    kind = spec["kind"]
    if kind == "dp-sgd" and sources:
        fail(
            f"--method {method} fits on one held-out split (--input), not on --sources; "
            f"use acc-t, nll-t, ece-t or histogram with --sources."
        )
    if kind != "dp-sgd" and delta is not None:
        fail(
            f"'{method}' is pure epsilon-DP (Laplace / exponential mechanisms): drop --delta. "
            f"--delta applies to dp-ts and dp-ps."
        )
    if ledger is not None and sources:
        fail(
            "--ledger charges a fit on --input (one party's data); with --sources each source "
            "charges its own ledger. Drop --ledger, or fit on --input."
        )
    if t_range is not None and kind != "temperature":
        fail(f"--t-range applies to the temperature methods, not to --method {method}.")
    if aggregation not in ("local", "distributed"):
        fail(
            f"The '--aggregation' parameter of privcal fit must be 'local' (each source adds its "
            f"own noise) or 'distributed' (noise shares through a secure sum). Got "
            f"{aggregation!r} instead."
        )
    if (aggregation != "local" or threshold is not None) and not sources:
        fail("--aggregation and --threshold say how several --sources add their noise; pass "
             "--sources, or drop them.")  # fmt: skip
    if threshold is not None and aggregation != "distributed":
        fail("--threshold sizes distributed noise shares: pass --aggregation distributed, or "
             "drop --threshold.")  # fmt: skip
    if threshold is not None and not 1 <= threshold <= len(sources):
        fail(
            f"--threshold must be in [1, {len(sources)}] (the number of --sources: more "
            f"sources than exist can never survive). Got {threshold}."
        )
    if kind == "dp-sgd":
        assert scores is not None
        return _fit_dp_sgd(method, spec["class"], scores, epsilon, delta, seed, ledger)
    est = _fit_luo(
        spec, scores, epsilon, sources, seed, n_bins, t_range, aggregation, threshold, ledger,
        force,
    )  # fmt: skip
    check = getattr(est, "release_check_", None)
    if check is not None and check["fell_back"]:
        _refuse_flagged(method, check, sources)
    if kind == "histogram" and not np.isfinite(est.bin_values_).any():
        more = "more or larger --sources" if sources else "more rows"
        fail(
            f"The private histogram fit calibrates no bin: every bin's released accuracy has a "
            f"noise SD above half the bin's width, so the calibrator would be the uncalibrated "
            f"model and nothing was saved (the budget is spent). Use {more}, fewer --n-bins or "
            "a larger --epsilon, or pass --force to keep every bin's noisy accuracy."
        )
    return est


def _refuse_flagged(method: str, check: dict[str, Any], sources: list[str]) -> None:
    """Exit 2 with one line: why the fit is flagged and what to change (the budget is spent)."""
    t = check["release_temperature"]
    how = (
        f"{check['z']:.2f} noise standard deviations, fewer than {check['threshold']:g}"
        if check["z"] is not None
        else "nothing it can measure"
    )
    more = "more or larger --sources" if sources else "more rows"
    fail(
        f"The private {method} fit cannot tell its temperature T = {t:.4g} from no calibration "
        f"(T = 1): {check['compared']}, {how}; it may calibrate worse than no calibration, so "
        f"nothing was saved (the budget is spent). Use {more} or a larger --epsilon, or pass "
        f"--force to keep T = {t:.4g}."
    )


def _fit_luo(
    spec: dict[str, Any],
    scores: Scores | None,
    epsilon: float,
    sources: list[str],
    seed: int | None,
    n_bins: int,
    t_range: tuple[float, float] | None,
    aggregation: str,
    threshold: int | None,
    ledger: Path | None,
    force: bool,
) -> Any:
    """Private temperature scaling or histogram binning, on sources or one private array.

    A fit runs with ``fallback="none"`` under ``force`` (kept, with its warning), else
    ``"identity"``; the fallback's own warning is dropped when the fit fell back, since
    :func:`fit_private` then refuses it in one line.
    """
    from privcal.privacy import InsecureNoiseWarning, SeededNoise
    from privcal.private import (
        NoiseDominatedWarning,
        PrivateHistogramBinning,
        PrivateTemperatureScaling,
        TooFewRowsError,
    )

    params: dict[str, Any] = {"epsilon": epsilon, "n_bins": n_bins, "aggregation": aggregation}
    params.update(threshold=threshold, fallback="none" if force else "identity")
    est: Any
    if spec["kind"] == "histogram":
        est = PrivateHistogramBinning(**params)
    else:
        t = "auto" if t_range is None else t_range
        est = PrivateTemperatureScaling(objective=spec["objective"], t_range=t, **params)
    with warnings.catch_warnings():
        if not force:  # a fallback is refused by fit_private in one line of its own
            warnings.filterwarnings("ignore", ".* falls back to T = 1", NoiseDominatedWarning)
            warnings.filterwarnings("ignore", ".* is the uncalibrated model", NoiseDominatedWarning)
        if seed is not None:  # the user asked for simulation noise explicitly: said once
            warnings.simplefilter("ignore", InsecureNoiseWarning)
            warn(SEEDED_NOISE_WARNING)
        if sources:
            try:
                est.fit(sources=open_sources(sources, seed))
            except sqlite3.Error as err:
                fail(
                    f"A ledger of --sources ({', '.join(sources)}) could not be used ({err}); "
                    "check that the ledger files and their folders are writable."
                )
        else:
            assert scores is not None and scores.logits is not None
            if seed is not None:
                est.set_params(noise=SeededNoise(seed))
            est.set_params(ledger=ledger)
            try:
                est.fit(scores.logits, scores.labels)
            except TooFewRowsError as err:
                what = (
                    "calibrate any bin"
                    if spec["kind"] == "histogram"
                    else "tell its temperature from no calibration (T = 1)"
                )
                fail(
                    f"The private {spec['kind']} fit cannot {what} on {err.rows} rows: its "
                    f"release's noise needs at least "
                    f"{err.needed} rows at --epsilon {epsilon:g} (or --epsilon >= "
                    f"{err.epsilon_needed:.3g} for {err.rows} rows). Nothing was spent. Use "
                    "more rows or a larger --epsilon, or pass --force to fit anyway."
                )
    rep = est.privacy_report_
    err_console.print(
        f"Privacy: {len(rep)} releases; epsilon={rep.epsilon:g} per source "
        f"({len(rep.per_source())} source(s), parallel composition); {rep.unit}-level "
        f"{rep.relation}, n private; {rep.status}"
    )
    if sources:
        for line in rep.threat:  # who is trusted with what
            err_console.print(f"Trust: {line}", soft_wrap=True, highlight=False)
    return est


def _fit_dp_sgd(
    method: str,
    class_name: str,
    scores: Scores,
    epsilon: float,
    delta: float | None,
    seed: int | None,
    ledger: Path | None = None,
) -> Any:
    """Bu et al. (2023)'s DP-TS / DP-PS: DP-SGD on the held-out split ``--input`` (torch)."""
    from privcal.privacy import InsecureNoiseWarning, SeededNoise
    from privcal.training import require_torch

    try:
        require_torch(f"privcal fit --method {method}")
    except ImportError as exc:
        fail(str(exc))
    import privcal.training as training

    est = getattr(training, class_name)(epsilon=epsilon, ledger=ledger)
    if delta is not None:  # else the estimator's own default delta (1e-5)
        est.set_params(delta=delta)
    if seed is not None:
        warn(SEEDED_NOISE_WARNING)
        est.set_params(noise=SeededNoise(seed), seed=seed)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Optimal order is the")
        if seed is not None:  # the line above already said it, once
            warnings.simplefilter("ignore", InsecureNoiseWarning)
        est.fit(scores.logits, scores.labels)
    rep = est.privacy_report_
    err_console.print(
        f"Privacy: DP-SGD ({est.steps_} steps, sigma={est.noise_multiplier_:.4g}); "
        f"epsilon={rep.epsilon:.6g}, delta={rep.delta:g} (Opacus {est.accountant} accountant); "
        f"{rep.unit}-level {rep.relation}; {rep.status}"
    )
    return est

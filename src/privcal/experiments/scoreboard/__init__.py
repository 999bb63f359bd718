"""The scoreboard: every method with its defaults, beside doing nothing and its non-private twin.

``privcal bench scoreboard`` writes ``bench/SCOREBOARD.md`` from :func:`run` and
:func:`render`; the tests call the same per-row functions (:func:`calibration_rows`,
:func:`federated_rows`, :func:`conformal_rows`, :func:`toplabel_rows`, :func:`claim_rows`).

Protocol
--------
* **Data.** Every file of the shared real classifier outputs (``log p`` as logits; the 20
  newsgroups file's exact zeros are clipped by :func:`~privcal.data.read_scores`, which warns)
  and :func:`privcal.data.digits_shift` pooled at severity 5.  The ``cifar-toplabel`` CSVs hold
  the top-label confidence only: they are scored with top-label ECE and top-label histogram
  binning; every other method needs the full score vector and is listed as not applicable.
* **Splits.** ``R`` seeded random halvings into a calibration and a test part (conformal: ``n =
  min(5000, N/2)`` calibration points).  Each method is fitted on the calibration part through
  its public API **with its default arguments** (plus ``epsilon`` and, for seeded noise, a
  :class:`~privcal.privacy.SeededNoise`), and scored on the test part.  Private noise is drawn
  afresh on every split, so the spread over splits contains both the sampling and the noise.
* **Epsilon.** ``epsilon = inf`` is the non-private twin itself (the private estimator's
  statistic without its mechanism).
* **Worse than doing nothing.** For calibration, the per-split paired difference
  ``d_r = ECE(method) - ECE(uncalibrated)`` (classwise ECE for the federated methods, which
  target it) is averaged; a method is marked worse when ``mean(d) > 2 SE(d)``, ``SE = sd(d) /
  sqrt(R)``, i.e. worse than no calibration beyond the sampling (and noise) spread over splits.
  The same test on the error rate ``1 - accuracy`` marks a calibrator that loses accuracy (only
  those that can change the top-1 prediction can), whatever its ECE does.
  For conformal prediction "doing nothing" is the full label set: a method is marked when its
  coverage is below ``1 - alpha`` by more than 3 SE (invalid; :func:`coverage_se`, which adds
  the pool's own sampling error to the spread over splits) or its mean set size is within 1% of
  the number of classes (no information).

Every private fit here draws **seeded** noise: a simulation of the mechanism's law, not a private
release (:data:`SIMULATION_NOTE`).
"""

from privcal.experiments.scoreboard.board import Scoreboard, render, run, steps, write_json
from privcal.experiments.scoreboard.claims import Claim, claim_rows
from privcal.experiments.scoreboard.config import (
    ALPHA,
    DIGITS,
    EPSILONS,
    FED_BETA,
    FED_CLIENTS,
    FED_DELTA,
    FED_ROUNDS,
    FULL,
    QUICK,
    SIMULATION_NOTE,
    Config,
    Dataset,
    dataset_names,
    load_dataset,
    quick_config,
    split_indices,
)
from privcal.experiments.scoreboard.rows import (
    calibration_metrics,
    calibration_row,
    calibration_rows,
    conformal_rows,
    coverage_se,
    federated_rows,
    skipped_methods,
    toplabel_rows,
    worse_than_nothing,
)

__all__ = [
    "ALPHA",
    "DIGITS",
    "EPSILONS",
    "FED_BETA",
    "FED_CLIENTS",
    "FED_DELTA",
    "FED_ROUNDS",
    "FULL",
    "QUICK",
    "SIMULATION_NOTE",
    "Claim",
    "Config",
    "Dataset",
    "Scoreboard",
    "calibration_metrics",
    "calibration_row",
    "calibration_rows",
    "claim_rows",
    "conformal_rows",
    "coverage_se",
    "dataset_names",
    "federated_rows",
    "load_dataset",
    "quick_config",
    "render",
    "run",
    "skipped_methods",
    "split_indices",
    "steps",
    "toplabel_rows",
    "worse_than_nothing",
    "write_json",
]

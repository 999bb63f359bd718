"""Seed 000's protocol (Luo et al. 2020): private recalibration across many small private sources.

For each shifted data set and each setting (number of sources ``d``, samples per source ``n``,
``epsilon``), ``trials`` random splits put ``d x n`` examples into ``d`` private sources and the
rest into a test split; each method recalibrates from the sources and is scored by the 15-bin
top-label ECE on the test split (App. E.1). Three sweeps, as the three panels of Fig. 1-3:
sources (``n`` and ``epsilon`` fixed), samples per source (``d``, ``epsilon`` fixed) and
``epsilon`` (``d``, ``n`` fixed). The Table 1 analogue is the median and mean, over every
(data set, setting), of the per-setting mean ECE of each method.

Vectorisation
-------------
Nothing loops over trials or sources. For one setting the validation logits of all trials are a
``(trials, d, n, C)`` array; a search evaluation takes one temperature per trial, evaluates the
shared statistics (:func:`~privcal.metrics.statistics.top_confidence`,
:func:`~privcal.metrics.statistics.nll_terms`, :func:`~privcal.metrics.statistics.bin_indices`)
on the logits divided by each trial's temperature (``conf_T(z) = conf_1(z / T)``), sums per
source with a reshape or a grouped ``bincount``, adds ``(trials, d[, M])`` Laplace draws from
:class:`~privcal.privacy.SeededNoise` and sums over sources. :func:`golden_section_batch` and
:func:`bisect_sign_batch` run the searches of :mod:`privcal.calibrators.search` for all trials at
once (same arithmetic; a test checks they return the per-trial results, and another that the
batch protocol reproduces :class:`~privcal.private.PrivateTemperatureScaling` fitted on
:class:`~privcal.private.DataSource` objects given the same noise draws). Acc-T's default curve
search needs no loop at all: the exact curves of every trial and source on the public grid are
one ``accuracy_gap_terms`` call, and :func:`~privcal.calibrators.search.monotone_root` reads all
roots at once; NLL-T's default curve search is one ``nll_terms`` call and
:func:`~privcal.calibrators.search.convex_argmin`.
"""

from privcal.experiments.luo2020.loop import run_loop
from privcal.experiments.luo2020.protocol import Luo2020Config, load_datasets, run
from privcal.experiments.luo2020.result import Luo2020Result
from privcal.experiments.luo2020.simulation import (
    METHODS,
    ONE_SOURCE_RANGE,
    GridPoint,
    MethodSpec,
    bisect_sign_batch,
    default_grid,
    golden_section_batch,
    grouped_ece,
    noise_pooled_ece,
    simulate,
)

__all__ = [
    "METHODS",
    "ONE_SOURCE_RANGE",
    "GridPoint",
    "Luo2020Config",
    "Luo2020Result",
    "MethodSpec",
    "bisect_sign_batch",
    "default_grid",
    "golden_section_batch",
    "grouped_ece",
    "load_datasets",
    "noise_pooled_ece",
    "run",
    "run_loop",
    "simulate",
]

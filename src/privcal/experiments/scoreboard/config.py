"""The scoreboard's settings: the data sets, the budgets and :class:`Config` (:data:`FULL`,
:data:`QUICK`)."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

import numpy as np

SIMULATION_NOTE = "simulation, seeded noise: not a private release"
#: The privacy budgets scored; ``inf`` is the non-private twin.
EPSILONS: tuple[float, ...] = (0.5, 1.0, 4.0, math.inf)
#: privcal's own shifted data set (all corruptions pooled at severity 5).
DIGITS = "digits_shift-sev5"
#: Miscoverage level of the conformal rows.
ALPHA = 0.1
#: Federated protocol of the issue (seed 003 Sec. 5): Dirichlet label skew over 100 clients.
FED_CLIENTS, FED_BETA, FED_ROUNDS, FED_DELTA = 100, 0.1, 12, 1e-5
#: The shared files, by folder.
_NETCAL = tuple(
    "wideresnet-16-4-cifar-10 lenet-5-cifar-10 wideresnet-16-4-cifar-100 densenet-bc-100-cifar-100 "
    "lenet-5-cifar-100".split()
)
_CLEANLAB = ("cifar10", "mnist", "imdb", "20news")
_TOPLABEL = tuple(
    "densenet40_c10 resnet110_c10 densenet40_c100 resnet110_c100 resnet50_birds".split()
)


# ----------------------------------------------------------------------------------- data
@dataclass(frozen=True)
class Dataset:
    """Labelled classifier outputs: full ``logits`` or, for top-label files, ``confidence`` and
    ``correct`` (``1[predicted == label]``)."""

    name: str
    labels: np.ndarray
    logits: np.ndarray | None = None
    confidence: np.ndarray | None = None
    correct: np.ndarray | None = None

    @property
    def n(self) -> int:
        return int(self.labels.shape[0])

    @property
    def n_classes(self) -> int | None:
        return None if self.logits is None else int(self.logits.shape[1])


def dataset_names(*, toplabel: bool = True) -> tuple[str, ...]:
    """Every data set of the scoreboard: the shared files, then :data:`DIGITS`."""
    return (*_NETCAL, *_CLEANLAB, *(_TOPLABEL if toplabel else ()), DIGITS)


def _path(name: str) -> Any:
    from privcal.data import shared_data_dir

    root = shared_data_dir()
    if root is None:
        raise FileNotFoundError(
            "The scoreboard needs the shared real classifier outputs (shared/data beside the "
            "repository, or the folder named by PRIVCAL_SHARED_DATA); none was found."
        )
    if name in _NETCAL:
        return root / "netcal-cifar" / f"{name}.npz"
    if name in _CLEANLAB:
        return root / "cleanlab-heldout" / f"{name}_probs.npy"
    if name in _TOPLABEL:
        return root / "cifar-toplabel" / f"probs_{name}_logits.csv"
    raise ValueError(
        f"The 'name' parameter of load_dataset must be one of {dataset_names()}. Got "
        f"{name!r} instead."
    )


@cache
def load_dataset(name: str, seed: int = 0) -> Dataset:
    """Load (once per process) one scoreboard data set with privcal's readers."""
    if name == DIGITS:
        from privcal.data import digits_shift

        z, y, _ = digits_shift(seed).pool(5)
        return Dataset(name, np.asarray(y), logits=np.asarray(z, dtype=np.float64))
    from privcal.data import read_scores

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 20news: exact zeros clipped (documented above)
        sc = read_scores(_path(name))
    if sc.logits is None:
        assert sc.confidence is not None and sc.predicted is not None
        correct = (sc.predicted == sc.labels).astype(np.float64)
        return Dataset(name, sc.labels, confidence=sc.confidence, correct=correct)
    return Dataset(name, sc.labels, logits=sc.logits)


def split_indices(
    n: int, n_cal: int, splits: int, seed: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """``splits`` seeded random (calibration, test) partitions of ``range(n)``."""
    rng = np.random.default_rng([seed, n, n_cal])
    perms = [rng.permutation(n) for _ in range(splits)]
    return [(perm[:n_cal], perm[n_cal:]) for perm in perms]


# ------------------------------------------------------------------------------- configuration
@dataclass(frozen=True)
class Config:
    """What one scoreboard run scores.

    ``splits`` calibration splits, ``conformal_splits`` conformal splits, ``federated`` the data
    sets of the federated rows, ``claims`` which seeds' claims are checked (``torch`` ones run
    only with ``torch=True``).
    """

    datasets: tuple[str, ...]
    epsilons: tuple[float, ...] = EPSILONS
    splits: int = 5
    conformal_splits: int = 20
    federated: tuple[str, ...] = ("wideresnet-16-4-cifar-10", "wideresnet-16-4-cifar-100")
    fed_draws: int = 3
    claim_trials: int = 40
    torch: bool = False
    seed: int = 0
    name: str = "full"


#: ``privcal bench scoreboard``: every data set and budget.
FULL = Config(datasets=dataset_names(), torch=True)
#: ``--quick`` (CI): four data sets (no 100-class one), two budgets, fewer splits.
QUICK = Config(
    datasets=("wideresnet-16-4-cifar-10", "20news", "resnet110_c10", DIGITS),
    epsilons=(1.0, math.inf),
    splits=3,
    conformal_splits=10,
    federated=("wideresnet-16-4-cifar-10",),
    fed_draws=2,
    claim_trials=10,
    name="quick",
)


def quick_config(**changes: Any) -> Config:
    """:data:`QUICK` with ``changes`` (a smaller run for tests)."""
    return replace(QUICK, **changes)

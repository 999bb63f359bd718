"""Calibration quality on real network outputs (netcal CIFAR test sets in /work/shared/data).

Each file holds softmax probabilities of a trained network on a CIFAR test set. The rows are split
5000 / 5000 by a seeded permutation into a calibration half and an evaluation half; logits are
``log(p)`` (the probabilities are strictly positive, so no zero handling is needed).

Tolerances: on 5000 evaluation rows the 15-bin ECE of a calibrated model has a sampling spread of
roughly ``sqrt(acc (1 - acc) / N) ~ 0.004-0.006`` plus a small positive binning bias; the
thresholds (0.02 on CIFAR-100, 0.012 on CIFAR-10) sit about two of those spreads above the values
temperature scaling reaches here (0.014 and 0.009), and far below the uncalibrated values (0.14 and
0.051), so a fit that does not work cannot pass and a correct one does not flake.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from privcal.calibrators import METHODS, BoundaryWarning, TemperatureScaling
from privcal.metrics import classwise_ece, ece

pytestmark = pytest.mark.slow

SEED = 0
N_CAL = 5000


def load_split(shared_data: Path, name: str) -> tuple[np.ndarray, ...]:
    path = shared_data / "netcal-cifar" / name
    if not path.is_file():
        pytest.skip(f"{path} not found")
    with np.load(path) as d:
        probs = d["predictions"].astype(np.float64)
        labels = d["ground_truth"].astype(np.int64)
    logits = np.log(probs)
    perm = np.random.default_rng(SEED).permutation(labels.size)
    cal, test = perm[:N_CAL], perm[N_CAL:]
    return logits[cal], labels[cal], logits[test], labels[test]


@pytest.fixture(scope="module")
def cifar10(shared_data: Path) -> tuple[np.ndarray, ...]:
    return load_split(shared_data, "wideresnet-16-4-cifar-10.npz")


@pytest.fixture(scope="module")
def cifar100(shared_data: Path) -> tuple[np.ndarray, ...]:
    return load_split(shared_data, "densenet-bc-100-cifar-100.npz")


@pytest.mark.parametrize(
    ("dataset", "before_range", "after_max"),
    [("cifar100", (0.12, 0.16), 0.02), ("cifar10", (0.04, 0.065), 0.012)],
)
def test_temperature_scaling_fixes_overconfidence(
    request: pytest.FixtureRequest,
    dataset: str,
    before_range: tuple[float, float],
    after_max: float,
) -> None:
    zc, yc, zt, yt = request.getfixturevalue(dataset)
    before = ece(zt, yt, input="logits")
    cal = TemperatureScaling(objective="nll").fit(zc, yc)
    after = ece(cal.predict_proba(zt), yt)
    msg = f"{dataset}: ECE {before:.4f} -> {after:.4f} at T={cal.temperature_:.3f}"
    assert before_range[0] < before < before_range[1], msg
    assert cal.temperature_ > 1.0, msg  # both networks are over-confident
    assert after <= after_max, msg


def test_every_calibrator_improves_cifar10(cifar10: tuple[np.ndarray, ...]) -> None:
    """Every multiclass method reduces the test ECE or the test classwise ECE.

    MatrixScaling on CIFAR-100 takes tens of seconds, hence CIFAR-10 here.
    """
    zc, yc, zt, yt = cifar10
    base = (ece(zt, yt, input="logits"), classwise_ece(zt, yt, input="logits"))
    rows = [f"{'uncalibrated':22s} ECE {base[0]:.4f}  cwECE {base[1]:.5f}"]
    failed = []
    for name, make in METHODS.items():
        if name == "platt":  # binary only
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("error", BoundaryWarning)
            p = make().fit(zc, yc).predict_proba(zt)
        e, cw = ece(p, yt), classwise_ece(p, yt)
        rows.append(f"{name:22s} ECE {e:.4f}  cwECE {cw:.5f}")
        if not (e < base[0] or cw < base[1]):
            failed.append(name)
    table = "\n".join(rows)
    assert not failed, f"no improvement for {failed}:\n{table}"
    # the table is also printed for `pytest -s` / -rA runs
    print("\nCIFAR-10 (WRN-16-4), 5000 calibration / 5000 test rows\n" + table)

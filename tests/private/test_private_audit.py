"""Statistical privacy audits of every DataSource query on worst-case neighbouring datasets.

For each query we take the exact answers ``f(D)``, ``f(D')`` and the noise scale the source
itself uses (read from a recording noise source), draw 2 x 10^5 releases on each side from
``SeededNoise`` (vectorised), and run :func:`privcal.privacy.audit.audit_pure_dp` on a fixed grid
of buckets of the coordinate that the extra example changes. A correct epsilon-DP mechanism fails
with probability at most ``alpha = 1e-6`` (Clopper-Pearson, Bonferroni). A deliberately broken
source (noise scale halved, so the true loss is ``2 epsilon``) must fail.
"""

from __future__ import annotations

import functools
import math
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from privcal.privacy import NoiseSource, SeededNoise
from privcal.privacy.audit import audit_pure_dp
from privcal.privacy.measurement import Measurement
from privcal.private import DataSource
from privcal.private.queries import curve_release

pytestmark = [
    pytest.mark.statistical,
    pytest.mark.filterwarnings("ignore::privcal.private.InsecureNoiseWarning"),
]

RUNS = 200_000
EPS = 1.0
BOUND = 5.0


class Recorder(NoiseSource):
    """Zero noise; remembers the scale of each draw."""

    def __init__(self) -> None:
        self.scales: list[float] = []

    def laplace(self, scale: float, size: Any = None) -> Any:
        self.scales.append(scale)
        return 0.0 if size is None else np.zeros(size)

    def gaussian(self, sigma: float, size: Any = None) -> Any:  # pragma: no cover
        raise AssertionError

    def exponential_index(self, log_weights: Any, size: Any = None) -> Any:  # pragma: no cover
        raise AssertionError


def _halved(m: Measurement) -> Measurement:
    """``m`` with half its sensitivity (the same public parameters)."""
    if not callable(m.sensitivity):
        return replace(m, sensitivity=m.sensitivity / 2.0)
    real = m.sensitivity

    @functools.wraps(real)
    def half(**params: Any) -> float:
        return real(**params) / 2.0

    return replace(m, sensitivity=half)


class HalvedScaleSource(DataSource):
    """Broken on purpose: calibrates its noise to half the true sensitivity."""

    def _release(self, stat: Any, epsilon: float) -> Any:
        return super()._release(replace(stat, measurement=_halved(stat.measurement)), epsilon)


def neighbours() -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """D' = D plus one worst-case row: wrong with confidence ~1 and NLL 40 (clipped to B)."""
    rng = np.random.default_rng(7)
    z = rng.normal(size=(30, 3))
    y = rng.integers(0, 3, size=30)
    extra_z = np.array([[40.0, 0.0, 0.0]])
    return (z, y), (np.vstack([z, extra_z]), np.append(y, 1))


def _counts(c: Any) -> np.ndarray:
    return np.concatenate([c.correct, c.incorrect])


QUERIES = {
    "accuracy_gap_sum": lambda s: s.accuracy_gap_sum(1.0, EPS),
    "clipped_nll_sum": lambda s: s.clipped_nll_sum(1.0, EPS, bound=BOUND),
    "bin_gaps": lambda s: s.bin_gaps(1.0, EPS, n_bins=15),
    "bin_counts": lambda s: _counts(s.bin_counts(EPS, 15)),
    "count": lambda s: s.count(EPS),
}


def exact_and_scale(cls: type[DataSource], query: str) -> tuple[float, float, float]:
    """Exact answers on D and D' in the changed coordinate, and the source's noise scale."""
    (z, y), (z2, y2) = neighbours()
    out = []
    for zz, yy in ((z, y), (z2, y2)):
        rec = Recorder()
        src = cls(zz, yy, budget=10.0, noise=rec)
        out.append((np.atleast_1d(np.asarray(QUERIES[query](src), dtype=float)), rec.scales[0]))
    (a, scale), (b, scale2) = out
    assert scale == scale2
    changed = np.flatnonzero(a != b)
    assert changed.size == 1, "one example must change exactly one coordinate"
    j = int(changed[0])
    return float(a[j]), float(b[j]), scale


def audit(cls: type[DataSource], query: str, seed: int) -> Any:
    a, b, scale = exact_and_scale(cls, query)
    noise = SeededNoise(seed)
    sample_d = a + noise.laplace(scale, size=RUNS)
    sample_d2 = b + noise.laplace(scale, size=RUNS)
    lo, hi = min(a, b) - 6 * scale, max(a, b) + 6 * scale
    edges = np.linspace(lo, hi, 49)  # fixed before sampling
    return audit_pure_dp(sample_d, sample_d2, edges, EPS, alpha=1e-6), abs(a - b), scale


@pytest.mark.parametrize("query", list(QUERIES))
def test_query_passes_the_audit(query: str) -> None:
    res, diff, scale = audit(DataSource, query, seed=11)
    # worst case reached: the change equals the claimed sensitivity
    expected = BOUND if query == "clipped_nll_sum" else 1.0
    assert diff == pytest.approx(expected, abs=1e-9)
    assert scale == pytest.approx(expected / EPS)
    assert res.passed, str(res)
    assert res.epsilon_lower > 0.5 * EPS  # the audit sees most of the loss: it has power


@pytest.mark.parametrize("query", list(QUERIES))
def test_broken_source_fails_the_audit(query: str) -> None:
    res, _, _ = audit(HalvedScaleSource, query, seed=12)
    assert not res.passed, str(res)
    assert res.epsilon_lower > 1.5 * EPS


def curve_audit(cls: type[DataSource], seed: int) -> Any:
    """The curve query's released vector (anchor value, increments) on D and D', read through
    its Laplace log-likelihood ratio at the source's own noise scale (a fixed function of the
    output), on 2 x 10^5 seeded releases per side."""
    (z, y), (z2, y2) = neighbours()
    grid = np.exp(np.linspace(np.log(0.25), np.log(64.0), 17))
    means, scales = [], []
    for zz, yy in ((z, y), (z2, y2)):
        rec = Recorder()
        src = cls(zz, yy, budget=10.0, noise=rec)
        means.append(curve_release(src.accuracy_gap_curve(grid, EPS, anchor=6), 6))
        scales.append(rec.scales[0])
    (mu, mu2), scale = means, scales[0]
    assert scales[1] == scale

    def loss(x: np.ndarray) -> np.ndarray:
        return np.asarray((np.abs(x - mu).sum(-1) - np.abs(x - mu2).sum(-1)) / scale)

    noise = SeededNoise(seed)
    sample_d = loss(mu + noise.laplace(scale, size=(RUNS, mu.size)))
    sample_d2 = loss(mu2 + noise.laplace(scale, size=(RUNS, mu.size)))
    shift = float(np.abs(mu - mu2).sum())
    edges = np.linspace(-shift / scale, shift / scale, 41)  # the loss's support, fixed
    return audit_pure_dp(sample_d, sample_d2, edges, EPS, alpha=1e-6), shift, scale


def test_curve_query_passes_the_audit() -> None:
    res, shift, scale = curve_audit(DataSource, seed=21)
    # the added row moves the anchor by 1 and the increments by most of 1 - 1/C: within the
    # claimed sensitivity 2, and well beyond what one coordinate alone would show
    assert 1.5 < shift <= 2.0
    assert scale == pytest.approx(2.0 / EPS)
    assert res.passed, str(res)
    assert res.epsilon_lower > 0.4 * EPS  # true loss 0.83 epsilon: the audit has power


def test_broken_source_fails_the_curve_audit() -> None:
    res, _, _ = curve_audit(HalvedScaleSource, seed=22)
    assert not res.passed, str(res)
    assert res.epsilon_lower > 1.1 * EPS


def increments_audit(cls: type[DataSource], seed: int) -> Any:
    """NLL-T's increments on D and D' = D plus a valley row (its clipped NLL falls from B and
    rises again), read through their Laplace log-likelihood ratio at the source's own noise
    scale, on 2 x 10^5 seeded releases per side."""
    (z, y), _ = neighbours()
    z2, y2 = np.vstack([z, [[0.0, -1.25, -37.0]]]), np.append(y, 1)
    grid = np.exp(np.linspace(np.log(0.25), np.log(64.0), 17))
    means, scales = [], []
    for zz, yy in ((z, y), (z2, y2)):
        rec = Recorder()
        src = cls(zz, yy, budget=10.0, noise=rec)
        means.append(src.clipped_nll_increments(grid, EPS, bound=BOUND))
        scales.append(rec.scales[0])
    (mu, mu2), scale = means, scales[0]
    assert scales[1] == scale

    def loss(x: np.ndarray) -> np.ndarray:
        return np.asarray((np.abs(x - mu).sum(-1) - np.abs(x - mu2).sum(-1)) / scale)

    noise = SeededNoise(seed)
    sample_d = loss(mu + noise.laplace(scale, size=(5 * RUNS, mu.size)))
    sample_d2 = loss(mu2 + noise.laplace(scale, size=(5 * RUNS, mu.size)))
    shift = float(np.abs(mu - mu2).sum())
    edges = np.linspace(-shift / scale, shift / scale, 41)  # the loss's support, fixed
    return audit_pure_dp(sample_d, sample_d2, edges, EPS, alpha=1e-6), shift, scale


def test_nll_increments_pass_the_audit() -> None:
    res, shift, scale = increments_audit(DataSource, seed=31)
    # the valley row's total variation: B - 0.59 down, then up by most of log C (3 classes)
    assert 4.0 < shift <= BOUND + math.log(3)
    assert scale == pytest.approx((BOUND + math.log(3)) / EPS)
    assert res.passed, str(res)
    assert res.epsilon_lower > 0.3 * EPS  # true loss 0.72 epsilon: the audit has power


def test_broken_source_fails_the_increments_audit() -> None:
    res, _, _ = increments_audit(HalvedScaleSource, seed=32)
    assert not res.passed, str(res)
    assert res.epsilon_lower > 1.1 * EPS  # true loss 1.45 epsilon

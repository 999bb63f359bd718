"""The batched luo2020 protocol: equal to the per-trial estimators, and its claims on small data."""

from __future__ import annotations

from collections import defaultdict, deque
from typing import Any

import numpy as np
import pytest

from privcal.calibrators import TemperatureScaling
from privcal.calibrators.search import bisect_sign, golden_section
from privcal.data import write_scores
from privcal.experiments import luo2020 as L
from privcal.experiments.luo2020.simulation import _split
from privcal.metrics import ece
from privcal.metrics.statistics import calibration_bins
from privcal.privacy import NoiseSource, SeededNoise
from privcal.private import DataSource, PrivateHistogramBinning, PrivateTemperatureScaling

# seeded noise throughout; small private fits (n = 15) are often noise-dominated and say so
pytestmark = [
    pytest.mark.statistical,
    pytest.mark.filterwarnings("ignore::privcal.private.InsecureNoiseWarning"),
    pytest.mark.filterwarnings("ignore::privcal.private.NoiseDominatedWarning"),
]


def test_grouped_ece_matches_calibration_bins(rng: np.random.Generator) -> None:
    conf = rng.random((7, 50))
    conf[0, :3] = [0.0, 1.0, 1 / 15]
    corr = (rng.random((7, 50)) < conf).astype(float)
    got = L.grouped_ece(conf, corr, 15)
    want = [calibration_bins(c, k, 15).ece() for c, k in zip(conf, corr, strict=True)]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


def test_batch_searches_equal_scalar_searches(rng: np.random.Generator) -> None:
    c = rng.normal(0.5, 1.0, size=40)
    lo, hi = rng.uniform(0.1, 1.0, 40), rng.uniform(2.0, 40.0, 40)
    for e in (2, 3, 6, 20):
        got = L.golden_section_batch(lambda t: (np.log(t) - c) ** 2, lo, hi, e)
        for i in range(40):
            want, _ = golden_section(lambda t, i=i: (np.log(t) - c[i]) ** 2, lo[i], hi[i], e)
            assert got[i] == want
    for e in (1, 5, 9):
        got = L.bisect_sign_batch(lambda t: np.log(t) - c, lo, hi, e)
        for i in range(40):
            want, _ = bisect_sign(lambda t, i=i: np.log(t) - c[i], lo[i], hi[i], e)
            assert got[i] == want


class Recording(NoiseSource):
    """SeededNoise that keeps every Laplace array it draws (the batch protocol's noise)."""

    def __init__(self, seed: int) -> None:
        self.inner = SeededNoise(seed)
        self.draws: list[np.ndarray] = []

    def laplace(self, scale: float, size: Any = None) -> Any:
        out = self.inner.laplace(scale, size)
        self.draws.append(np.asarray(out))
        return out

    def gaussian(self, sigma: float, size: Any = None) -> Any:  # pragma: no cover
        raise AssertionError

    def exponential_index(self, log_weights: Any, size: Any = None) -> Any:  # pragma: no cover
        raise AssertionError


class Replay(NoiseSource):
    """Replays, for one (trial, source), the draws the batch protocol made for it."""

    def __init__(self, queue: deque[np.ndarray]) -> None:
        self.queue = queue

    def laplace(self, scale: float, size: Any = None) -> Any:
        v = self.queue.popleft()
        return float(v) if size is None else np.asarray(v).reshape(size)

    def gaussian(self, sigma: float, size: Any = None) -> Any:  # pragma: no cover
        raise AssertionError

    def exponential_index(self, log_weights: Any, size: Any = None) -> Any:  # pragma: no cover
        raise AssertionError


@pytest.fixture(scope="module")
def shifted() -> tuple[np.ndarray, np.ndarray]:
    """Over-confident synthetic logits (calibrated T ~ 4, beyond seed 000's [0.5, 3])."""
    gen = np.random.default_rng(99)
    z = 5.0 * gen.normal(size=(700, 6))
    s = z / 4.0
    p = np.exp(s - s.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    y = (np.cumsum(p, 1) < gen.random((700, 1))).sum(1).clip(0, 5)
    return z, y


EXTRA = (
    L.MethodSpec("Acc-T golden", "temperature", "acc", "golden", (0.5, 3.0)),
    L.MethodSpec("Acc-T golden auto", "temperature", "acc", "golden", "auto"),
    L.MethodSpec("NLL-T golden auto", "temperature", "nll", "golden", "auto"),
)


@pytest.mark.parametrize(
    "spec",
    [*L.METHODS[1:], *EXTRA],
    ids=lambda s: s.label,
)
def test_batch_protocol_equals_the_estimators(shifted: Any, spec: L.MethodSpec) -> None:
    z, y = shifted
    trials, d, n, eps = 12, 8, 15, 0.8
    s = _split(z, y, trials, d, n, np.random.default_rng(5))
    rec = Recording(3)
    ece_b, t_b = L.simulate(spec, s, eps, rec)
    queues: dict[tuple[int, int], deque[np.ndarray]] = defaultdict(deque)
    for draw in rec.draws:  # (trials, d[, k]) per query, in query order
        for tr in range(trials):
            for j in range(d):
                queues[(tr, j)].append(draw[tr, j])
    for tr in range(trials):
        z_test, y_test = s.z_test[tr], s.y_test[tr]
        if spec.kind == "one_source":
            cal: Any = TemperatureScaling("nll", t_range=L.ONE_SOURCE_RANGE)
            cal.fit(s.z_val[tr, 0], s.y_val[tr, 0])
        else:
            srcs = [
                DataSource(s.z_val[tr, j], s.y_val[tr, j], budget=eps, noise=Replay(queues[tr, j]))
                for j in range(d)
            ]
            if spec.kind == "hist":
                cal = PrivateHistogramBinning(eps, fallback="none").fit(sources=srcs)  # seed 000
            else:
                cal = PrivateTemperatureScaling(
                    spec.objective,
                    eps,
                    t_range=spec.t_range,
                    search=spec.search,
                    fallback="none",  # seed 000, as the batched protocol
                ).fit(sources=srcs)
            assert cal.privacy_report_.epsilon == eps
            assert all(not q for q in (queues[tr, j] for j in range(d)))  # every draw used
        tol = 1e-5 if spec.kind == "one_source" else 1e-9  # batched golden vs Newton
        if spec.kind != "hist":
            assert cal.temperature_ == pytest.approx(t_b[tr], rel=tol)
        want = ece(cal.predict_proba(z_test), y_test, 15)
        assert ece_b[tr] == pytest.approx(want, rel=1e-4 if spec.kind == "one_source" else 1e-9)


def test_run_writes_tidy_outputs_and_acc_t_wins(shifted: Any, tmp_path: Any) -> None:
    z, y = shifted
    path = write_scores(tmp_path / "shifted.npz", z, y)
    grid = [
        L.GridPoint("sources", 20, 10, 1.0),
        L.GridPoint("samples", 20, 20, 1.0),
        L.GridPoint("epsilon", 20, 20, 0.5),
    ]
    res = L.run(path, trials=200, grid=grid)
    res.write(tmp_path / "out")
    names = {p.name for p in res.files}
    assert {"results.csv", "table1.md", "fig_shifted.png"} <= names
    assert len(res.rows) == 3 * len(L.METHODS)
    tab = res.table()
    dp = {m: v for m, v in tab.items() if m not in ("No recalibration", "One source")}
    # over-confident by a factor ~4: Acc-T (curve over [0.25, 64]) is the best DP method and
    # more than halves the ECE of no recalibration (200 trials; margins >> trial s.e.)
    assert min(dp, key=lambda m: dp[m][0]) == "Acc-T"
    assert tab["Acc-T"][0] < 0.5 * tab["No recalibration"][0]
    assert "Acc-T" in (tmp_path / "out" / "table1.md").read_text()


def test_default_grid_and_bad_settings(shifted: Any) -> None:
    assert len(L.default_grid(899)) == 30 and len(L.default_grid(10000)) == 45
    assert all(p.n_sources * p.n_samples < 899 for p in L.default_grid(899))
    z, y = shifted
    with pytest.raises(ValueError, match="test split"):
        L.run({"x": (z, y)}, trials=2, grid=[L.GridPoint("sources", 70, 10, 1.0)])
    with pytest.raises(ValueError, match="trials"):
        L.run({"x": (z, y)}, trials=0)


REAL_METHODS = (
    L.MethodSpec("Acc-T", "temperature", "acc"),
    L.MethodSpec("Acc-T seed 000", "temperature", "acc", "golden-section"),
    L.MethodSpec("NLL-T", "temperature", "nll"),
    L.MethodSpec("ECE-T", "temperature", "ece"),
)


@pytest.mark.parametrize(
    "name", ["netcal-cifar/lenet-5-cifar-10.npz", "netcal-cifar/wideresnet-16-4-cifar-10.npz"]
)
def test_acc_t_default_on_real_networks(shared_data: Any, name: str) -> None:
    """Issue 13: Acc-T with 100 sources x 20 examples at epsilon = 1 has a median test ECE of at
    most 0.027, below DP NLL-T, DP ECE-T and seed 000's golden-section Acc-T, for the noise as
    drawn: 40 splits x 3 independent noise draws pooled (bench/compare_private_search.py runs
    the full 40 x 20 on three networks). Measured medians: 0.020 (lenet-5), 0.011 (wideresnet);
    the median over 120 fits varies by ~0.001 between noise-seed sets of this size, so the
    bound and the margins below are > 5 of those standard errors away."""
    from privcal.data import read_scores

    sc = read_scores(shared_data / name)
    ece_ = {
        k: float(np.median(v))
        for k, v in L.noise_pooled_ece(sc.logits, sc.labels, REAL_METHODS, draws=3).items()
    }
    assert ece_["Acc-T"] <= 0.027, ece_
    assert ece_["Acc-T"] < 0.8 * ece_["Acc-T seed 000"], ece_
    assert ece_["Acc-T"] < 0.5 * min(ece_["NLL-T"], ece_["ECE-T"]), ece_

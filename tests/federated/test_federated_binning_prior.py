"""FedBin / FedBBQ's default shrinkage toward the model (``prior="model"``) and the paper's prior.

One statistic, one function: without DP the federated calibrators equal the central ones fitted
with the same prior; ``prior="midpoint"`` keeps the earlier calibrators; the shrinkage function
has the closed forms its docstring states; and under DP with the default clips the default
FedBin is not worse than the uncalibrated model (paired over noise draws and splits).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from privcal.calibrators import BBQ, HistogramBinning
from privcal.calibrators.base import CrossFitWarning, calibrator_from_dict
from privcal.calibrators.binning import bin_frequencies, shrink_to_model
from privcal.experiments.scoreboard import worse_than_nothing
from privcal.federated import FedBBQ, FedBin, dirichlet_partition, simulate
from privcal.federated.calibrators import WeightedBBQ
from privcal.federated.methods import PRIOR_NOISE_MULTIPLE, binning
from privcal.metrics import accuracy, classwise_ece
from privcal.metrics.statistics import softmax
from privcal.privacy import InsecureNoiseWarning, SeededNoise


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    z = 3.0 * rng.normal(size=(800, 5))
    y = np.argmax(z + 2.0 * rng.normal(size=z.shape), axis=1)
    return z, y


def _dp_run(method: object, z: np.ndarray, y: np.ndarray, seed: int = 0) -> object:
    parts = dirichlet_partition(y, 20, 0.5, seed=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InsecureNoiseWarning)
        cal, _ = simulate(
            method, z, y, parts, 3, epsilon=1.0, delta=1e-5, noise=SeededNoise(seed), seed=seed
        )
    return cal


# ------------------------------------------------------------------ shrink_to_model
def test_shrink_without_noise_is_pseudo_counts_at_the_model() -> None:
    rng = np.random.default_rng(1)
    pos, neg = rng.integers(1, 50, size=(2, 100)).astype(float)
    p = rng.uniform(0.01, 0.99, size=100)
    got = shrink_to_model(pos, neg, p, strength=10.0)
    np.testing.assert_allclose(got, (pos + 10.0 * p) / (pos + neg + 10.0), rtol=1e-12)
    np.testing.assert_allclose(shrink_to_model(pos, neg, p, strength=0.0), pos / (pos + neg))


def test_shrink_keeps_the_model_where_counts_are_below_the_noise() -> None:
    p = np.array([0.05, 0.3, 0.9])
    # released counts 3 + 2 against noise stds (10, 50): the conservative count is negative
    np.testing.assert_array_equal(shrink_to_model(3.0, 2.0, p, (10.0, 50.0)), p)
    np.testing.assert_array_equal(shrink_to_model(-4.0, 1.0, p, (1.0, 1.0)), p)
    # far above the noise it approaches the noiseless value
    big = shrink_to_model(3e5, 2e5, p, (10.0, 50.0))
    np.testing.assert_allclose(big, shrink_to_model(3e5, 2e5, p), atol=1e-3)


def test_shrink_weight_decreases_with_the_noise() -> None:
    p = np.full(4, 0.2)
    moved = [abs(float(shrink_to_model(300.0, 700.0, p, (s, 5 * s))[0]) - 0.2) for s in (0, 2, 8)]
    assert moved[0] > moved[1] > moved[2] > 0


# ------------------------------------------------------------------ one statistic, one function
@pytest.mark.parametrize("rounds", [1, 3])
def test_fedbin_without_dp_equals_central_with_the_same_prior(data, rounds: int) -> None:  # type: ignore[no-untyped-def]
    z, y = data
    parts = dirichlet_partition(y, 8, 0.5, seed=1)
    fed, _ = simulate(FedBin(), z, y, parts, rounds)
    central = HistogramBinning("classwise", n_bins=32, prior="model").fit(z, y)
    np.testing.assert_allclose(fed.predict_proba(z), central.predict_proba(z), rtol=1e-12)
    fed_bbq, _ = simulate(FedBBQ(n_levels=4, weighting=None), z, y, parts, rounds)
    central_bbq = BBQ(n_levels=4, prior="model").fit(z, y)
    np.testing.assert_allclose(fed_bbq.predict_proba(z), central_bbq.predict_proba(z), rtol=1e-12)


def test_midpoint_prior_reproduces_seed_003_without_dp(data) -> None:  # type: ignore[no-untyped-def]
    z, y = data
    parts = dirichlet_partition(y, 8, 0.5, seed=1)
    fed, _ = simulate(FedBin(n_bins=15, prior="midpoint"), z, y, parts, 2)
    with pytest.warns(CrossFitWarning, match="HistogramBinning changes the top-1"):
        central = HistogramBinning("classwise").fit(z, y)  # classwise binning reorders classes
    np.testing.assert_allclose(fed.predict_proba(z), central.predict_proba(z), rtol=1e-12)
    bbq, _ = simulate(FedBBQ(weighting=None, prior="midpoint"), z, y, parts, 1)
    np.testing.assert_allclose(bbq.table_, BBQ().fit(z, y).table_, rtol=1e-12)
    assert bbq.prior is None


def test_midpoint_prior_under_dp_is_the_earlier_counts() -> None:
    """``prior="midpoint"``: clamp at 0, add ``k = 3 sigma+`` pseudo-counts at the bin midpoint."""
    fm = FedBin(n_bins=4, prior="midpoint")
    state = fm.init(2)
    state["hist"] = np.array([[[5.0, -2.0, 0.0, 9.0]] * 2, [[-1.0, 3.0, 7.0, 0.5]] * 2])
    state["rounds"][0], state["noise_std_pos"][0], state["noise_std_neg"][0] = 3, 2.0, 10.0
    pos, neg, noise = fm.counts(state)
    mid = np.array([0.125, 0.375, 0.625, 0.875])
    k = PRIOR_NOISE_MULTIPLE * 2.0
    np.testing.assert_array_equal(pos[0], [5.0, 0.0, 0.0, 9.0] + k * mid)
    np.testing.assert_array_equal(neg[0], [0.0, 3.0, 7.0, 0.5] + k * (1 - mid))
    assert noise == (2.0, 10.0)
    cal = fm.calibrator(state, 2)
    assert cal.prior is None
    np.testing.assert_array_equal(cal.bin_values_, bin_frequencies(pos, pos + neg))
    # prior="model" divides the released sums and their noise stds by the rounds
    pos_m, neg_m, noise_m = FedBin(n_bins=4).counts(state)
    np.testing.assert_array_equal(np.stack([pos_m, neg_m]), state["hist"] / 3)
    assert noise_m == (2.0 / 3, 10.0 / 3)


def test_dp_state_keeps_both_noise_stds(data) -> None:  # type: ignore[no-untyped-def]
    z, y = data
    cal = _dp_run(FedBBQ(n_levels=3), z, y)
    assert isinstance(cal, WeightedBBQ) and cal.prior == "model"
    s_pos, s_neg = cal.count_noise_
    assert s_pos > 0 and s_neg == pytest.approx(s_pos * 50.0 / 10.0)  # C- / C+ of simulate


# ------------------------------------------------------------------ serialisation
@pytest.mark.parametrize(
    "make",
    [
        lambda z, y: HistogramBinning("classwise", prior="model").fit(z, y),
        lambda z, y: HistogramBinning("top", n_bins=10, prior="model").fit(z, y),
        lambda z, y: BBQ(n_levels=4, prior="model").fit(z, y),
        lambda z, y: _dp_run(FedBin(weighting="all"), z, y),
        lambda z, y: _dp_run(FedBBQ(n_levels=3), z, y),
    ],
)
def test_model_prior_round_trips(data, make) -> None:  # type: ignore[no-untyped-def]
    z, y = data
    cal = make(z, y)
    back = calibrator_from_dict(cal.to_dict())
    assert type(back) is type(cal) and back.prior == "model"
    np.testing.assert_allclose(back.predict_proba(z), cal.predict_proba(z), rtol=1e-12)


def test_negative_count_noise_is_refused(data) -> None:  # type: ignore[no-untyped-def]
    z, y = data
    d = HistogramBinning("classwise", prior="model").fit(z, y).to_dict()
    d["fitted"]["count_noise_"]["__ndarray__"][1] = -1.0
    with pytest.raises(ValueError, match="count_noise_"):
        calibrator_from_dict(d)


def test_bad_prior_is_refused(data) -> None:  # type: ignore[no-untyped-def]
    z, y = data
    with pytest.raises(ValueError, match="'prior' parameter of HistogramBinning"):
        HistogramBinning(prior="uniform").fit(z, y)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'prior' parameter of FedBin"):
        FedBin(prior="none")


# ------------------------------------------------------------------ not worse than nothing
def _paired_against_uncalibrated(make: object) -> tuple[tuple[float, float, bool], ...]:
    """``worse_than_nothing`` of cwECE and of the error rate over R = 6 splits and noise draws.

    Ten classes, an over-confident model (logits twice the true ones), 4000 calibration rows
    over 100 clients with Dirichlet(0.1) label skew, 12 rounds at epsilon = 1 with simulate's
    default clips: most bins' counts are below the noise.
    """
    rng = np.random.default_rng(5)
    n = 8000
    rows = []
    for r in range(6):
        u = 1.2 * rng.normal(size=(n, 10))
        y = (rng.random(n)[:, None] > np.cumsum(softmax(u), axis=1)).sum(axis=1)
        z = 2.0 * u
        cal_rows, test = slice(0, n // 2), slice(n // 2, n)
        parts = dirichlet_partition(y[cal_rows], 100, 0.1, seed=r)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cal, _ = simulate(
                make(), z[cal_rows], y[cal_rows], parts, 12,  # type: ignore[operator]
                epsilon=1.0, delta=1e-5, noise=SeededNoise(r), seed=r,
            )  # fmt: skip
        q, p = cal.predict_proba(z[test]), softmax(z[test])
        yt = y[test]
        rows.append(
            (classwise_ece(q, yt), classwise_ece(p, yt), 1 - accuracy(q, yt), 1 - accuracy(p, yt))
        )
    v = np.array(rows)
    return worse_than_nothing(v[:, 0], v[:, 1]), worse_than_nothing(v[:, 2], v[:, 3])


def test_default_fedbin_under_dp_is_not_worse_than_uncalibrated() -> None:
    """Paired: mean(d) <= 2 SE(d) for d = cwECE(FedBin) - cwECE(p), and for the error rate."""
    cw, err = _paired_against_uncalibrated(FedBin)
    assert not cw[2], cw
    assert not err[2], err
    assert math.isfinite(cw[1])


def test_the_paired_test_catches_unshrunk_noisy_bins(monkeypatch: pytest.MonkeyPatch) -> None:
    """Power: the raw noisy frequencies (no prior at all) fail the same test."""
    monkeypatch.setattr(binning, "PRIOR_NOISE_MULTIPLE", 0.0)
    cw, _ = _paired_against_uncalibrated(lambda: FedBin(prior="midpoint"))
    assert cw[2], cw


def test_files_without_prior_keep_their_earlier_format() -> None:
    """``prior=None`` saves only the bin values (files of earlier versions still load);
    ``prior="model"`` saves the counts too and refuses a file without them."""
    rng = np.random.default_rng(1)
    z, y = rng.normal(size=(300, 3)), rng.integers(0, 3, 300)
    for cal, keys in (
        (HistogramBinning(mode="classwise"), {"bin_values_"}),
        (BBQ(), {"table_", "weights_"}),
    ):
        saved = cal.fit(z, y).to_dict()
        assert set(saved["fitted"]) == {*keys, "n_classes_", "fit_warnings_"}
        back = calibrator_from_dict(saved)
        np.testing.assert_array_equal(back.predict_proba(z), cal.predict_proba(z))
    saved = HistogramBinning(prior="model").fit(z, y).to_dict()
    del saved["fitted"]["counts_"]
    with pytest.raises(ValueError, match=r"fitted\.counts_"):
        calibrator_from_dict(saved)

"""Issue 12 in the training layer: secure noise by default, bounded rows, public metadata, split."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("opacus")

from privcal.privacy import InsecureNoiseWarning, SeededNoise  # noqa: E402
from privcal.training import (  # noqa: E402
    DPPlattScaling,
    DPRecalibration,
    DPSGDTrainer,
    DPSGLDTrainer,
    DPTemperatureScaling,
)
from privcal.training.dp_sgd import step_schedule  # noqa: E402
from privcal.training.pipeline import recalibration_side  # noqa: E402

torch.set_num_threads(1)
pytestmark = pytest.mark.filterwarnings("ignore:Optimal order is the")


@pytest.fixture(scope="module")
def blobs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 300)
    return rng.normal(size=(300, 4)) + 1.5 * np.eye(3, 4)[y], y


@pytest.mark.parametrize("row", [[1e6, -1e6, 0.0], [-1e6, 1e6, -1e6], [1e300, -1e300, 0.0]])
@pytest.mark.parametrize(
    "make",
    [
        lambda: DPTemperatureScaling(1.0, epochs=5),
        lambda: DPPlattScaling(1.0, epochs=5),
        lambda: DPPlattScaling(1.0, epochs=5, mode="matrix"),
    ],
)
def test_one_extreme_row_leaves_the_fit_finite(row: list[float], make: object) -> None:
    rng = np.random.default_rng(1)
    z = np.vstack([rng.normal(size=(40, 3)), row])
    y = np.append(rng.integers(0, 3, 40), 1)
    est = make().fit(z, y)  # type: ignore[operator]
    assert all(np.isfinite(v).all() for v in est.params_.values())
    assert np.isfinite(est.predict_proba(z)).all()


def test_binary_platt_extreme_margin_is_finite() -> None:
    z = np.vstack([np.column_stack([np.zeros(30), np.linspace(-2, 2, 30)]), [1e6, -1e6]])
    y = np.append((np.linspace(-2, 2, 30) > 0).astype(int), 1)
    est = DPPlattScaling(1.0, epochs=5).fit(z, y)
    assert est.map_ == "platt" and np.isfinite(est.params_["a"]).all()


def test_dp_ts_default_is_secure_and_reports_public_quantities() -> None:
    rng = np.random.default_rng(2)
    z, y = rng.normal(size=(50, 3)), rng.integers(0, 3, 50)
    with warnings.catch_warnings():
        warnings.simplefilter("error", InsecureNoiseWarning)
        ts = DPTemperatureScaling(2.0, epochs=3).fit(z, y)
    rep = ts.privacy_report_
    assert rep.status == "private" and rep.relation == "add/remove" and rep.unit == "example"
    assert rep.releases[0].mechanism == "laplace"
    assert rep.epsilon <= 2.0 and ts.epsilon_spent_ == pytest.approx(rep.epsilon)
    assert "number of classes" in rep.public and not any(p.startswith("n ") for p in rep.public)
    # the schedule is post-processing of the DP count, not of n
    q, steps, _ = step_schedule(ts.n_estimate_, ts.batch_size_, 3)
    assert (q, steps) == (ts.sample_rate_, ts.steps_)


def test_step_schedule_reads_only_the_estimate() -> None:
    assert step_schedule(-20.0, 64, 10) == (1.0, 10, 64.0)
    q, steps, denom = step_schedule(200.0, 64, 10)
    assert (q, steps) == (0.25, 40) and denom == pytest.approx(50.0)


def test_dp_ts_seed_warns_and_is_not_private() -> None:
    rng = np.random.default_rng(3)
    z, y = rng.normal(size=(30, 3)), rng.integers(0, 3, 30)
    with pytest.warns(InsecureNoiseWarning, match="seed=4"):
        ts = DPTemperatureScaling(2.0, epochs=2, seed=4).fit(z, y)
    assert ts.privacy_report_.status == "not private: seeded noise"
    with pytest.warns(InsecureNoiseWarning):
        ps = DPPlattScaling(2.0, epochs=2, noise=SeededNoise(0)).fit(z, y)
    assert not ps.privacy_report_.private


@pytest.mark.slow  # several seconds (tests/README.md)
def test_dp_trainers_default_to_secure_noise(blobs: tuple[np.ndarray, np.ndarray]) -> None:
    X, y = blobs
    with warnings.catch_warnings():
        warnings.simplefilter("error", InsecureNoiseWarning)
        warnings.filterwarnings("ignore", category=UserWarning, module="opacus")
        a = DPSGDTrainer("logistic", epsilon=2.0, epochs=1, batch_size=100).fit(X, y)
        b = DPSGDTrainer("logistic", epsilon=2.0, epochs=1, batch_size=100).fit(X, y)
        s = DPSGLDTrainer("logistic", temperature="auto", epochs=1, batch_size=100).fit(X, y)
    for tr in (a, s):
        rep = tr.privacy_report_
        assert rep.status == "private" and rep.relation == "add/remove"
        assert "steps per epoch ceil(n / batch_size) = 3" in rep.public
        assert "n_classes = 3, read from the labels (max + 1)" in " ".join(rep.public)
    assert not np.allclose(a.predict_logits(X), b.predict_logits(X))  # fresh noise and init


@pytest.mark.slow  # several seconds (tests/README.md)
def test_dp_trainer_seed_warns_reproducible_and_not_private(
    blobs: tuple[np.ndarray, np.ndarray],
) -> None:
    X, y = blobs
    fits = []
    for _ in range(2):
        with pytest.warns(InsecureNoiseWarning, match="not private"):
            fits.append(DPSGDTrainer("logistic", epochs=1, batch_size=100, seed=0).fit(X, y))
    assert fits[0].privacy_report_.status == "not private: seeded noise"
    np.testing.assert_array_equal(fits[0].predict_logits(X), fits[1].predict_logits(X))


def test_split_is_per_example(blobs: tuple[np.ndarray, np.ndarray]) -> None:
    """Adding one row (anywhere) moves no other row across the split; order does not matter."""
    X, y = blobs
    key = b"k" * 32
    side = recalibration_side(X, y, key, 0.3)
    extra = np.vstack([X[:100], [[9.0, 9.0, 9.0, 9.0]], X[100:]])
    side2 = recalibration_side(extra, np.insert(y, 100, 2), key, 0.3)
    np.testing.assert_array_equal(np.delete(side2, 100), side)
    perm = np.random.default_rng(0).permutation(len(y))
    np.testing.assert_array_equal(recalibration_side(X[perm], y[perm], key, 0.3), side[perm])
    assert 40 < side.sum() < 140  # Binomial(300, 0.3)
    other = recalibration_side(X, y, b"x" * 32, 0.3)
    assert not np.array_equal(side, other)


def test_pipeline_report_and_default_key(blobs: tuple[np.ndarray, np.ndarray]) -> None:
    X, y = blobs
    pipe = DPRecalibration(
        DPSGDTrainer("logistic", epsilon=2.0, epochs=1, batch_size=60),
        DPTemperatureScaling(1.0, epochs=2),
    )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=UserWarning, module="opacus")
        pipe.fit(X, y)
        first = set(pipe.recal_index_)
        pipe.fit(X, y)
    assert first != set(pipe.recal_index_)  # a fresh OS key per fit
    rep = pipe.privacy_report_
    assert rep is not None and rep.relation == "add/remove" and rep.status == "private"
    assert any("keyed hash" in p for p in rep.public)
    assert rep.epsilon == max(g.epsilon for g in rep.per_source().values())
    assert any(p.startswith("n_classes = 3, read from the labels") for p in rep.public)
    assert "n_classes = 3" not in rep.public  # the trainer's width came from the labels


def test_declared_classes_are_reported_as_declared(blobs: tuple[np.ndarray, np.ndarray]) -> None:
    X, y = blobs
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=UserWarning, module="opacus")
        tr = DPSGDTrainer("logistic", epsilon=2.0, epochs=1, batch_size=100, n_classes=3)
        rep = tr.fit(X, y).privacy_report_
    assert "n_classes = 3" in rep.public
    assert not any("read from the labels" in p for p in rep.public)

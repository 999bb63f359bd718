"""``ledger=`` on every private estimator, trainer and simulation: charge before release.

Each fit is charged to the ledger before its first noise draw; a fit the ledger refuses raises
``BudgetExceededError``, draws nothing, records nothing and leaves the estimator unfitted.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from privcal.conformal import PrivateConformal
from privcal.privacy import BudgetExceededError, PrivacyOdometer, SeededNoise
from privcal.private import DataSource, PrivateHistogramBinning, PrivateTemperatureScaling

pytestmark = [
    pytest.mark.filterwarnings("ignore::privcal.privacy.InsecureNoiseWarning"),
    pytest.mark.filterwarnings("ignore::privcal.calibrators.FitWarning"),
    pytest.mark.filterwarnings("ignore:Optimal order is the"),
]

_DRAWS = (
    "laplace",
    "gaussian",
    "exponential_index",
    "uniform",
    "discrete_gaussian",
    "negative_binomial",
    "add_laplace",
    "add_gaussian",
)


class SpyNoise(SeededNoise):
    """Seeded noise that notes how many releases the ledger held at its first draw."""

    def __init__(self, ledger: PrivacyOdometer) -> None:
        super().__init__(0)
        self.ledger = ledger
        self.at_first_draw: int | None = None


def _spy(name: str) -> Callable[..., Any]:
    def draw(self: SpyNoise, *args: Any, **kwargs: Any) -> Any:
        if self.at_first_draw is None:
            self.at_first_draw = len(self.ledger.releases)
        return getattr(SeededNoise, name)(self, *args, **kwargs)

    return draw


for _name in _DRAWS:
    setattr(SpyNoise, _name, _spy(_name))


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    z = 3.0 * rng.normal(size=(600, 4))
    return z, np.argmax(z + 3 * rng.normal(size=z.shape), 1)


ESTIMATORS: dict[str, tuple[Callable[..., Any], str]] = {
    "nll-t": (lambda **kw: PrivateTemperatureScaling("nll", epsilon=1.0, **kw), "temperature_"),
    "ece-t": (lambda **kw: PrivateTemperatureScaling("ece", epsilon=1.0, **kw), "temperature_"),
    "histogram": (lambda **kw: PrivateHistogramBinning(epsilon=1.0, **kw), "bin_values_"),
    "conformal": (lambda **kw: PrivateConformal(epsilon=1.0, **kw), "threshold_"),
}


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_private_estimators_charge_before_release(name: str, data, tmp_path: Path) -> None:
    make, fitted = ESTIMATORS[name]
    relation = "substitute" if name == "conformal" else "add/remove"
    odo = PrivacyOdometer(
        1.5, tmp_path / "p.sqlite", delta_budget=1e-5, renyi_delta=5e-6, relation=relation
    )
    noise = SpyNoise(odo)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = make(noise=noise, ledger=odo).fit(*data)
    assert noise.at_first_draw == 1  # the ledger held the fit before the first draw
    [release] = odo.releases
    assert release.epsilon == 1.0 and release.query.endswith(".fit")
    assert hasattr(est, fitted)
    # a second fit of 1.0 passes the budget (1.5): refused before anything is drawn
    again = SpyNoise(odo)
    est2 = make(noise=again, ledger=str(tmp_path / "p.sqlite"))  # a path opens the same ledger
    with pytest.raises(BudgetExceededError, match="Nothing was recorded"):
        est2.fit(*data)
    assert again.at_first_draw is None and not hasattr(est2, fitted)
    assert len(odo.releases) == 1


def test_conformal_needs_a_substitute_ledger(data) -> None:
    odo = PrivacyOdometer(3.0)
    est = PrivateConformal(epsilon=1.0, noise=SpyNoise(odo), ledger=odo)
    with pytest.raises(ValueError, match="relation='substitute'"):
        est.fit(*data)
    assert est.noise.at_first_draw is None and odo.releases == []
    assert not hasattr(est, "threshold_")


def test_ledger_with_sources_is_refused(data) -> None:
    src = DataSource(*data, budget=1.0, noise=SeededNoise(0))
    odo = PrivacyOdometer(3.0)
    with pytest.raises(ValueError, match="each source charges its own ledger"):
        PrivateTemperatureScaling(ledger=odo).fit(sources=[src])
    assert odo.releases == [] and src.spent == 0.0


def test_ledger_is_not_saved_with_the_calibrator(data) -> None:
    odo = PrivacyOdometer(3.0)
    est = PrivateHistogramBinning(noise=SeededNoise(0), ledger=odo).fit(*data)
    assert "ledger" not in est.to_dict()["params"]


# ---------------------------------------------------------------------------- torch extra
def _torch() -> None:
    pytest.importorskip("torch")
    pytest.importorskip("opacus")


@pytest.mark.parametrize("cls_name", ["DPTemperatureScaling", "DPPlattScaling"])
def test_dp_scaling_charges_count_then_dpsgd(cls_name: str, data) -> None:
    _torch()
    import privcal.training as training

    odo = PrivacyOdometer(2.0, delta_budget=1e-5, renyi_delta=5e-6)
    noise = SpyNoise(odo)
    cls = getattr(training, cls_name)
    est = cls(1.0, 2e-6, epochs=5, noise=noise, ledger=odo).fit(*data)
    assert noise.at_first_draw == 1  # the count was charged before it was drawn
    count, sgd = odo.releases
    assert count.epsilon + sgd.epsilon == pytest.approx(1.0) and sgd.delta == 2e-6
    assert odo.composition().renyi_epsilon < np.inf  # DP-SGD recorded its RDP curve
    assert hasattr(est, "params_")
    refused = cls(1.5, 2e-6, epochs=5, noise=SpyNoise(odo), ledger=odo)
    with pytest.raises(BudgetExceededError):
        refused.fit(*data)
    assert refused.noise.at_first_draw is None and not hasattr(refused, "params_")
    assert len(odo.releases) == 2


@pytest.mark.parametrize("cls_name", ["DPSGDTrainer", "DPSGLDTrainer"])
def test_trainers_charge_before_training(cls_name: str) -> None:
    _torch()
    import privcal.training as training

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    y = (X[:, 0] > 0).astype(int)
    cls = getattr(training, cls_name)
    # basic composition only: two runs of (1, 1e-6) pass 1.5 (a Rényi ledger admits them)
    odo = PrivacyOdometer(1.5, delta_budget=1e-5)
    trainer = cls(epsilon=1.0, delta=1e-6, epochs=2, ledger=odo).fit(X, y)
    [release] = odo.releases
    assert release.epsilon == 1.0 and str(trainer.steps_) in release.query
    refused = cls(epsilon=1.0, delta=1e-6, epochs=2, ledger=odo)
    with pytest.raises(BudgetExceededError):
        refused.fit(X, y)
    assert not hasattr(refused, "model_") and len(odo.releases) == 1


# ------------------------------------------------------------------------- federated extra
def test_simulate_charges_the_run_before_its_first_round(data) -> None:
    from privcal.federated import dirichlet_partition, simulate

    z, y = data
    parts = dirichlet_partition(y, n_clients=6, beta=1.0, seed=0)
    odo = PrivacyOdometer(3.0, delta_budget=1e-5, renyi_delta=5e-6)
    noise = SpyNoise(odo)
    simulate("fedtemp", z, y, parts, rounds=2, epsilon=1.0, delta=1e-6, noise=noise, ledger=odo)
    assert noise.at_first_draw == 1
    [release] = odo.releases
    assert release.epsilon > 1.0  # example level: twice the users of a changed example
    refused = SpyNoise(odo)
    with pytest.raises(BudgetExceededError):
        simulate("fedtemp", z, y, parts, rounds=2, epsilon=1.0, delta=1e-6, noise=refused,
                 ledger=odo)  # fmt: skip
    assert refused.at_first_draw is None and len(odo.releases) == 1
    with pytest.raises(ValueError, match="charges DP runs"):
        simulate("fedtemp", z, y, parts, rounds=1, ledger=odo)
    # distributed shares: 4 rho by the zCDP conversion; a trusted run (the server's Gaussian
    # noise, rho from the exact Gaussian profile): 4 rho exactly, as dp-accounting's PLD says
    from privcal.privacy.accounting import (
        gaussian_rho,
        pld_gaussian_epsilon,
        zcdp_epsilon,
        zcdp_rho,
    )

    assert release.epsilon == pytest.approx(zcdp_epsilon(4 * zcdp_rho(1.0, 1e-6), 1e-6))
    trusted = PrivacyOdometer(3.0, delta_budget=1e-5)
    simulate("fedtemp", z, y, parts, rounds=2, epsilon=1.0, delta=1e-6, noise=SeededNoise(0),
             ledger=trusted, aggregation="trusted")  # fmt: skip
    mu = math.sqrt(8 * gaussian_rho(1.0, 1e-6))
    assert trusted.releases[0].epsilon == pytest.approx(
        pld_gaussian_epsilon(1 / mu, 1e-6), rel=1e-3
    )

"""One ledger for a pipeline: NLL-T, private conformal and DP-TS on the same rows, and the CLI.

The pipeline's three steps charge one ledger file of budget (3, 1e-5); its composed epsilon is at
most the basic sum and is the figure the ledger states; a fourth step past the budget is refused
and records nothing; reopening the file gives the same figure. Then ``privcal ledger init|show``
and ``--ledger`` on ``privcal fit`` and ``privcal conformal``.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from privcal.cli.main import app
from privcal.conformal import PrivateConformal, PrivateRiskControl
from privcal.data import write_scores
from privcal.federated import iid_partition, simulate
from privcal.privacy import BudgetExceededError, PrivacyOdometer, SeededNoise
from privcal.privacy.odometer import read_ledger
from privcal.private import DataSource, PrivateHistogramBinning, PrivateTemperatureScaling

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore::privcal.privacy.InsecureNoiseWarning"),
]
runner = CliRunner()


@pytest.fixture(scope="module")
def rows() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    z = 3.0 * rng.normal(size=(2000, 5))
    return z, np.argmax(z + 3.0 * rng.normal(size=z.shape), 1)


def test_pipeline_on_one_ledger(rows, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("opacus")
    from privcal.training import DPTemperatureScaling

    z, y = rows
    path = tmp_path / "pipeline.sqlite"
    ledger = PrivacyOdometer(
        3.0, ledger=path, delta_budget=1e-5, renyi_delta=5e-6, relation="substitute"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nll_t = PrivateTemperatureScaling(
            objective="nll", epsilon=0.5, noise=SeededNoise(0), ledger=ledger
        ).fit(z, y)
        conformal = PrivateConformal(
            alpha=0.1, epsilon=1.0, noise=SeededNoise(1), ledger=ledger
        ).fit(z, y)
        dp_ts = DPTemperatureScaling(
            0.45,
            1e-6,
            epochs=20,
            noise=SeededNoise(2),
            ledger=path,  # the file, reopened
        ).fit(z, y)
    assert nll_t.temperature_ > 0 and np.isfinite(conformal.threshold_) and dp_ts.params_
    comp = ledger.composition()
    # conformal is substitute-DP (n public): the ledger's add/remove steps count twice
    assert comp.relation == "substitute"
    assert comp.basic_epsilon == pytest.approx(2 * 0.5 + 1.0 + 2 * 0.45)
    assert comp.epsilon <= comp.basic_epsilon <= 3.0
    assert comp.epsilon == min(comp.basic_epsilon, comp.renyi_epsilon)
    assert comp.delta <= 1e-5
    record = read_ledger(path)
    assert [r.query for r in record.releases] == [
        "PrivateTemperatureScaling.fit",
        "PrivateConformal.fit",
        "DPTemperatureScaling.fit: count n",
        "DPTemperatureScaling.fit: DP-SGD (20 steps, q=1)",
    ]
    # a fourth step past the budget: refused, nothing recorded, the estimator unfitted
    fourth = PrivateHistogramBinning(epsilon=0.1, noise=SeededNoise(3), ledger=ledger)
    with pytest.raises(BudgetExceededError, match="Nothing was recorded"):
        fourth.fit(z, y)
    assert not hasattr(fourth, "bin_values_")
    assert len(read_ledger(path).releases) == 4
    # reopening the file gives the same figure
    reopened = PrivacyOdometer.open(path)
    assert reopened.composition() == comp == read_ledger(path).composition()
    with pytest.raises(ValueError, match="a ledger shared by two budgets"):
        PrivacyOdometer(
            4.0, ledger=path, delta_budget=1e-5, renyi_delta=5e-6, relation="substitute"
        )


def test_cli_ledger_init_fit_conformal_show(rows, tmp_path: Path) -> None:
    z, y = rows
    val = write_scores(tmp_path / "val.npz", z, y)
    path = tmp_path / "p.sqlite"
    init = ["ledger", "init", str(path), "--epsilon", "3", "--delta", "1e-5"]
    r = runner.invoke(app, [*init, "--relation", "substitute"])
    assert r.exit_code == 0, r.output
    assert "epsilon=3" in r.output and "Rényi filter delta 5e-06" in r.output
    fit = ["fit", "-m", "nll-t", "--epsilon", "1", "-i", str(val), "--seed", "0"]
    r = runner.invoke(app, [*fit, "-o", str(tmp_path / "c.json"), "--ledger", str(path)])
    assert r.exit_code == 0, r.output
    conf = ["conformal", "--cal", str(val), "--test", str(val), "--epsilon", "0.5"]
    r = runner.invoke(app, [*conf, "--seed", "0", "--ledger", str(path)])
    assert r.exit_code == 0, r.output
    # past the budget (1 counts 2 under substitution): exit 3, nothing recorded
    r = runner.invoke(app, [*fit, "-o", str(tmp_path / "d.json"), "--ledger", str(path)])
    assert r.exit_code == 3 and "Nothing was recorded" in r.output
    assert not (tmp_path / "d.json").exists() and len(read_ledger(path).releases) == 2
    r = runner.invoke(app, ["ledger", "show", str(path)])
    assert r.exit_code == 0, r.output
    out = " ".join(r.output.split())
    for text in (
        "PrivateTemperatureScaling.fit",
        "PrivateConformal.fit",
        "exponential",
        "substitute",
        "budget: epsilon=3, delta=1e-05, substitute",
        "basic composition: epsilon=2.5",  # 2 x 1 (add/remove under substitution) + 0.5
        "Rényi filter: epsilon=",
        "stated: epsilon=",
        "(not private: seeded noise)",  # both steps ran with --seed
        "WARNING: 2 of 2 releases drew seeded noise",
    ):
        assert text in out, (text, out)
    # --ledger with --sources, and without --epsilon, are refused naming the option
    r = runner.invoke(app, [*conf[:5], "--ledger", str(path)])
    assert r.exit_code == 2 and "--ledger" in r.output


def test_cli_ledger_bad_input(rows, tmp_path: Path) -> None:
    junk = tmp_path / "junk.sqlite"
    junk.write_text("not a ledger")
    for target, message in ((junk, "is not a privcal ledger"), (tmp_path / "no", "No ledger at")):
        r = runner.invoke(app, ["ledger", "show", str(target)])
        assert r.exit_code == 2 and message in r.output
        assert r.output.strip().count("\n") == 0  # one line
    path = tmp_path / "p.sqlite"
    assert runner.invoke(app, ["ledger", "init", str(path), "--epsilon", "1"]).exit_code == 0
    r = runner.invoke(app, ["ledger", "init", str(path), "--epsilon", "1"])
    assert r.exit_code == 2 and "already exists" in r.output
    missing = str(tmp_path / "none")
    fit = ["fit", "-m", "nll-t", "--epsilon", "1", "-o", str(tmp_path / "c.json")]
    val = write_scores(tmp_path / "val.npz", *rows)
    r = runner.invoke(app, [*fit, "-i", str(val), "--ledger", missing])
    assert r.exit_code == 2 and "does not exist" in r.output


def _risk_rows() -> tuple[np.ndarray, np.ndarray]:
    """Multi-label scores and boolean labels (3000 x 5) for ``PrivateRiskControl``'s FNR."""
    rng = np.random.default_rng(1)
    y = rng.random((3000, 5)) < 0.3
    return np.clip(0.6 * y + 0.4 * rng.random((3000, 5)), 0.0, 1.0), y


#: Every private entry point that charges a pipeline ledger, with seeded noise: ``f(ledger,
#: noise, rows)`` fits once.
SEEDED_FITS = {
    "PrivateTemperatureScaling": lambda led, noise, r: PrivateTemperatureScaling(
        "nll", epsilon=1.0, noise=noise, ledger=led
    ).fit(*r),
    "PrivateConformal": lambda led, noise, r: PrivateConformal(
        alpha=0.1, epsilon=1.0, noise=noise, ledger=led
    ).fit(*r),
    "PrivateRiskControl": lambda led, noise, r: PrivateRiskControl(
        epsilon=1.0, noise=noise, ledger=led
    ).fit(*_risk_rows()),
    "simulate": lambda led, noise, r: simulate(
        "fedtemp", r[0], r[1], iid_partition(len(r[1]), 4), 2, 1.0, 1e-5, noise=noise, ledger=led
    ),
    "DataSource": lambda led, noise, r: DataSource.open(led, noise=noise).count(epsilon=0.5),
}


@pytest.mark.parametrize("entry", sorted(SEEDED_FITS))
@pytest.mark.filterwarnings("ignore::privcal.private.fallback.NoiseDominatedWarning")
def test_seeded_noise_is_recorded_not_private(rows, tmp_path: Path, entry: str) -> None:
    """A release that drew seeded noise is marked ``(not private: seeded noise)`` on the ledger
    it charged, its report says so, and ``privcal ledger show`` (or ``privcal source status``)
    warns that its budget bounds nothing; the same fit with secure noise is not marked."""
    marked = "(not private: seeded noise)"
    for noise, path in ((SeededNoise(0), "seeded.sqlite"), (None, "secure.sqlite")):
        if entry == "DataSource":  # a source's ledger takes seeded noise only if its owner says
            data = write_scores(tmp_path / "source.npz", *rows)
            DataSource.init_ledger(data, tmp_path / path, 2.0, allow_seeded_noise=True)
            led: object = tmp_path / path
        else:
            led = PrivacyOdometer(20.0, ledger=tmp_path / path, delta_budget=1e-4,
                                  relation="substitute")  # fmt: skip
        SEEDED_FITS[entry](led, noise, rows)
        record = read_ledger(tmp_path / path)
        assert record.releases
        seeded = noise is not None
        assert all(r.mechanism.endswith(marked) == seeded for r in record.releases), entry
        assert PrivacyOdometer.open(tmp_path / path).report().noise == (
            "seeded" if seeded else "secure"
        )
        command = ["source", "status", "--ledger"] if entry == "DataSource" else ["ledger", "show"]
        out = " ".join(runner.invoke(app, [*command, str(tmp_path / path)]).output.split())
        n = len(record.releases)
        assert (f"WARNING: {n} of {n} releases drew seeded noise" in out) == seeded, out


def test_spend_names_a_bad_noise_kind() -> None:
    with pytest.raises(ValueError, match=r"'noise' parameter of PrivacyOdometer\.spend"):
        PrivacyOdometer(1.0).spend("q", 0.1, noise="random")


def test_a_seeded_federated_run_is_marked_on_the_client_ledger(tmp_path: Path) -> None:
    """A Flower client's ledger (charged as the ClientApp charges it) marks each round of a
    seeded run, and takes the run's later rounds as the same run (their recorded mechanism)."""
    pytest.importorskip("flwr")
    from privcal.federated.flower.task import charge_round

    led = tmp_path / "client0.sqlite"
    node = {"ledger": str(led), "budget": 1.0, "delta-budget": 1e-5, "name": "client0"}
    node["allow-seeded-noise"] = True  # the client's own policy opts in (tests only)
    for rnd in (1, 2):
        cfg = {"epsilon": 1.0, "delta": 1e-5, "rounds": 4, "round": rnd, "method": "fedtemp"}
        assert charge_round(node, {**cfg, "noise": "seeded"}, run_id=7) is None
    releases = read_ledger(led).releases
    assert len(releases) == 2
    assert all(r.mechanism.endswith("(not private: seeded noise)") for r in releases)

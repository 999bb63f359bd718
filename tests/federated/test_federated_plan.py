"""``privcal.federated.plan``: a federation's plan from public quantities, and its CLI."""

from __future__ import annotations

import math

import numpy as np
import pytest
from typer.testing import CliRunner

from privcal.cli.main import app
from privcal.federated.dp import default_threshold, run_rho
from privcal.federated.methods import FED_NOISE_Z, FedTemp
from privcal.federated.plan import PLAN_Z, plan_run


@pytest.mark.parametrize(("k", "eps", "agg"), [(2, 1.0, "trusted"), (5, 5.0, "distributed")])
def test_z_max_is_the_closed_form(k: int, eps: float, agg: str) -> None:
    """sqrt(T) K C_g / sigma_g = sqrt(K t 2 f rho): independent of T and of the clip bound."""
    t = default_threshold(k) if agg == "distributed" else k
    f = FedTemp().grad_share
    want = math.sqrt(k * t * 2 * f * run_rho(eps, 1e-5, "gaussian" if agg == "trusted" else "zcdp"))
    for rounds in (1, 3, 12):
        p = plan_run(n_clients=k, rounds=rounds, epsilon=eps, aggregation=agg)
        # distributed: the shares' discrete Gaussian and its rounding add a little noise
        assert p.z_max == pytest.approx(want, rel=0.02 if agg == "distributed" else 1e-6)


def test_two_sites_at_epsilon_1_are_told_it_will_not_help() -> None:
    p = plan_run(n_clients=2, rounds=3, epsilon=1.0)
    assert p.falls_back and p.z_max < FED_NOISE_Z
    assert f"at most {p.z_max:.2f} noise std" in p.summary() and p.z_max < 0.5
    # the smallest K and epsilon it names do reach PLAN_Z, and one less does not
    assert plan_run(n_clients=p.min_clients, rounds=3, epsilon=1.0).z_max >= PLAN_Z
    assert plan_run(n_clients=p.min_clients - 1, rounds=3, epsilon=1.0).z_max < PLAN_Z
    assert plan_run(n_clients=2, rounds=3, epsilon=p.min_epsilon).z_max >= PLAN_Z
    assert plan_run(n_clients=2, rounds=3, epsilon=0.99 * p.min_epsilon).z_max < PLAN_Z


def test_the_documented_five_sites_are_expected_to_calibrate() -> None:
    for agg in ("trusted", "distributed"):
        p = plan_run(n_clients=5, rounds=3, epsilon=5.0, aggregation=agg)
        assert p.expected == "helps" and p.z_max >= PLAN_Z, p.lines()
    p = plan_run(n_clients=5, rounds=3, epsilon=4.0, aggregation="distributed")
    assert p.expected == "may fall back"  # at most 93 % keep their fit


def test_a_reference_set_simulates_the_run() -> None:
    """Over-confident synthetic logits: five sites at epsilon 5 beat doing nothing in (nearly)
    every simulated run."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 10, 6000)
    z = rng.normal(size=(6000, 10))
    z[np.arange(6000), y] += 1.5
    z *= 4.0
    p = plan_run(n_clients=5, rows=500, rounds=3, epsilon=5.0, reference=(z, y), repeats=10)
    assert p.simulated is not None and p.simulated["runs"] == 10
    assert p.simulated["beat"] >= 9, p.lines()
    # the verdict: "helps" needs 19 runs in 20 (here 10 of 10), else "may fall back"
    assert (p.expected == "helps") == (p.simulated["beat"] == 10), p.lines()
    assert p.site_signal == pytest.approx(p.clip)  # 500 over-confident rows: at the clip
    with pytest.raises(ValueError, match="'rows' parameter of plan_run is needed"):
        plan_run(n_clients=5, rounds=3, epsilon=5.0, reference=(z, y))


def test_cli_plan_exit_status_and_server_refusal(tmp_path) -> None:  # type: ignore[no-untyped-def]
    runner = CliRunner()
    r = runner.invoke(app, ["federate", "plan", "--num-nodes", "2", "--epsilon", "1"])
    assert r.exit_code == 2 and "expected to fall back" in r.output
    r = runner.invoke(app, ["federate", "plan", "--num-nodes", "5", "--epsilon", "5", "--secagg"])
    assert r.exit_code == 0 and "expected to calibrate" in r.output
    # the server runs the same check before any process starts
    r = runner.invoke(
        app,
        ["federate", "server", "--num-nodes", "2", "--n-classes", "10", "--epsilon", "1",
         "--insecure", "--out", str(tmp_path / "out")],
    )  # fmt: skip
    assert r.exit_code != 0 and "Refused before any site spends" in r.output
    assert not (tmp_path / "out").exists()

"""``privcal federate server`` refuses federation settings that cannot run before it starts any
process (issue 26): one ``Error:`` line naming the option and the fix, exit status 2, at once.

Before, ``--min-clients`` above ``--num-nodes`` and ``--method acc-t`` without ``--epsilon``
started a SuperLink and waited for ``--timeout`` (3600 s by default).
"""

from __future__ import annotations

import time

import pytest
import typer
from typer.testing import CliRunner

from privcal.cli.federate import register

pytest.importorskip("flwr")


@pytest.fixture()
def apps() -> typer.Typer:
    app, bench = typer.Typer(), typer.Typer()
    app.add_typer(bench, name="bench")
    register(app, bench)
    return app


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--num-nodes", "2", "--min-clients", "3"], ["--min-clients", "--num-nodes", "<= 2"]),
        (["--num-nodes", "5", "--min-clients", "6", "--epsilon", "1"], ["--min-clients"]),
        (["--min-clients", "0"], ["--min-clients must be >= 1"]),
        (["--method", "acc-t"], ["--method acc-t", "--epsilon"]),
        (["--method", "acc-t", "--epsilon", "0"], ["--method acc-t", "--epsilon"]),
        (  # the data sources' shares over SecAgg+ sum distributed noise only
            [
                "--method",
                "acc-t",
                "--epsilon",
                "1",
                "--secagg",
                "--num-nodes",
                "3",
                "--aggregation",
                "trusted",
            ],
            ["acc-t --secagg", "--aggregation trusted"],
        ),
        (["--weighting", "most"], ["--weighting"]),
        (["--method", "conformal-lac", "--alpha", "1.5"], ["--alpha must be in (0, 1)"]),
        (["--method", "conformal-aps", "--row-cap", "0"], ["--row-cap must be >= 1"]),
        (["--method", "conformal-lacs"], ["Unknown --method 'conformal-lacs'", "conformal-aps"]),
        (["--timeout", "0"], ["--timeout"]),
    ],
)
def test_server_refuses_settings_before_starting(
    apps: typer.Typer, args: list[str], names: list[str]
) -> None:
    t0 = time.monotonic()
    r = CliRunner().invoke(
        apps,
        ["federate", "server", "--n-classes", "10", "--insecure", "--timeout", "30", *args],
    )
    took = time.monotonic() - t0
    assert r.exit_code == 2, r.output
    out = r.output.strip()
    assert out.startswith("Error:") and len(out.splitlines()) == 1, out
    assert "SuperLink" not in out
    for name in names:
        assert name in out, out
    assert took < 5.0, took


def test_simulate_refuses_a_bad_alpha_in_one_line(apps: typer.Typer, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import numpy as np

    np.savez(tmp_path / "s.npz", logits=np.eye(3)[[0, 1, 2] * 4], labels=np.array([0, 1, 2] * 4))
    args = ["federate", "simulate", str(tmp_path / "s.npz"), "--num-nodes", "2"]
    r = CliRunner().invoke(apps, [*args, "--method", "conformal-lac", "--alpha", "0"])
    assert r.exit_code == 2 and r.output.startswith("Error: --alpha must be in (0, 1)"), r.output


def test_plan_refuses_the_conformal_methods_naming_why(apps: typer.Typer) -> None:
    """A conformal run releases sets that cover 1 - alpha whatever the noise: no fallback to
    predict (the plan's only verdict); the server runs without a plan for them."""
    from privcal.cli.federate_plan import server_plan
    from privcal.federated.flower.task import DEFAULTS

    args = ["federate", "plan", "--method", "conformal-lac", "--num-nodes", "10", "--epsilon", "1"]
    r = CliRunner().invoke(apps, args)
    assert r.exit_code == 2, r.output
    assert "releases prediction sets" in r.output and "no fallback to predict" in r.output
    assert server_plan({**DEFAULTS, "method": "conformal-aps", "epsilon": 1.0}, False) == ("", "")


def test_the_conformal_options_default_to_the_methods_defaults() -> None:
    from privcal.cli import federate
    from privcal.federated.flower.task import DEFAULTS
    from privcal.federated.methods.conformal import FedConformal

    fm = FedConformal()
    assert (federate._ALPHA, federate._ROW_CAP) == (DEFAULTS["alpha"], DEFAULTS["row-cap"])
    assert (fm.alpha, fm.row_cap) == (DEFAULTS["alpha"], DEFAULTS["row-cap"])

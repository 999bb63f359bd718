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

"""``privcal audit``: lists the audits, runs one and prints claim, bound and confidence."""

from __future__ import annotations

from typing import Any

from typer.testing import CliRunner

import privcal.private.source as source_module
from privcal.cli.main import app
from privcal.privacy import SeededNoise

runner = CliRunner()


def test_list_names_every_area() -> None:
    res = runner.invoke(app, ["audit", "--list"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    for name in ("datasource-count", "private-temperature-acc", "private-conformal"):
        assert name in res.output


def test_an_audit_prints_claim_lower_bound_and_confidence() -> None:
    res = runner.invoke(app, ["audit", "datasource-count", "--runs", "500"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "PASSED" in res.output
    assert "epsilon = 1, delta = 0" in res.output  # the claim, read from the source's report
    assert "at confidence 0.999999" in res.output
    assert "example-level add/remove" in res.output


def test_a_violation_exits_1(monkeypatch: Any) -> None:
    monkeypatch.setattr(source_module, "resolve_noise", lambda noise, owner: SeededNoise(0))
    res = runner.invoke(
        app, ["audit", "private-histogram-binning", "--runs", "300"], env={"COLUMNS": "200"}
    )
    assert res.exit_code == 1, res.output
    assert "FAILED" in res.output


def test_bad_input_is_one_error_line() -> None:
    for args in (
        ["audit", "no-such-audit"],
        ["audit"],
        ["audit", "datasource-count", "--alpha", "2"],
    ):
        res = runner.invoke(app, args)
        assert res.exit_code == 2, (args, res.output)
        assert "Traceback" not in res.output
        assert "Error:" in res.output

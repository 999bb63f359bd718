"""``privcal audit``: lists the audits (table and JSON), runs one and prints claim, bound and
confidence, and runs one with a planted defect."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from typer.testing import CliRunner

import privcal.private.source as source_module
from privcal.cli.main import app
from privcal.privacy import SeededNoise

pytestmark = pytest.mark.integration

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


def test_list_json_gives_every_audit_with_its_plants() -> None:
    from privcal.audits import available_audits

    res = runner.invoke(app, ["audit", "--list", "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    assert [r["name"] for r in rows] == list(available_audits())
    for row in rows:
        assert {"name", "summary", "runs", "slow", "extra", "plants"} <= set(row)
        assert row["plants"] and all({"name", "summary"} <= set(p) for p in row["plants"])
        assert row["max_epsilon"] >= 2 * row["epsilon"]
        # the mechanism and sensitivity come from the audited measurements
        assert row["measurements"]
        assert all({"name", "mechanism", "sensitivity"} <= set(m) for m in row["measurements"])


def test_list_table_has_a_plants_column() -> None:
    res = runner.invoke(app, ["audit", "--list"], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    assert "plants" in res.output and "share-std-over-t" in res.output


def test_a_caught_plant_exits_1_and_says_so() -> None:
    args = ["audit", "datasource-count", "--plant", "exact-release", "--runs", "100"]
    res = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert res.exit_code == 1, res.output
    assert "plant 'exact-release' caught" in res.output and "FAILED" in res.output
    # the plant is undone: the same audit passes afterwards
    res = runner.invoke(app, ["audit", "datasource-count", "--runs", "500"])
    assert res.exit_code == 0, res.output


def test_an_unknown_plant_is_one_error_line_before_anything_runs(monkeypatch: Any) -> None:
    from privcal.audits import _registry, get_audit

    def never(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the audit ran")

    spec = dataclasses.replace(get_audit("datasource-count"), function=never)
    monkeypatch.setitem(_registry._AUDITS, "datasource-count", spec)
    res = runner.invoke(app, ["audit", "datasource-count", "--plant", "nope"])
    assert res.exit_code == 2, res.output
    assert res.output.count("Error:") == 1 and "Known plants: exact-release" in res.output
    res = runner.invoke(app, ["audit", "datasource-count", "--json"])
    assert res.exit_code == 2 and "--json applies to --list only" in res.output

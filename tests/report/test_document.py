"""Report blocks (``privcal.report``): one unit rule, JSON round trips, Markdown."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from privcal.metrics import Reliability, reliability
from privcal.privacy import PrivacyReport, Release
from privcal.report import (
    column,
    format_value,
    jsonable,
    privacy_block,
    table,
    takeaway,
    text,
    to_markdown,
)
from privcal.report.blocks import privacy_sentences
from privcal.report.formatting import cell_text, header_text


def test_units_format_fractions_as_percent_and_differences_as_points() -> None:
    assert format_value(0.031, "percent") == "3.10"
    assert format_value(-0.4153, "pp") == "-41.53"
    assert format_value(0.0, "pp") == "+0.00"
    assert format_value(math.inf, "epsilon") == "inf" and format_value("inf", "epsilon") == "inf"
    assert format_value(None, "percent") == "-" and format_value(math.nan, "ratio") == "-"
    col = column("diff", "vs none, ECE", "pp", se="se")
    assert cell_text({"diff": 0.0123, "se": 0.0045}, col) == "+1.23 ± 0.45"
    assert cell_text({"diff": 0.0123, "se": None}, col) == "+1.23"
    assert header_text(column("ece", "ECE", "percent")) == "ECE (%)"
    assert header_text(column("ece", "ECE (%)", "percent")) == "ECE (%)"
    with pytest.raises(ValueError, match="'unit' parameter of column"):
        column("x", "X", "percentage")


def test_jsonable_keeps_what_json_can_hold() -> None:
    data = jsonable({"e": np.float64(math.inf), "n": math.nan, "a": np.arange(2), "b": np.bool_(1)})
    assert data == {"e": "inf", "n": None, "a": [0, 1], "b": True}
    json.dumps(data, allow_nan=False)


def test_reliability_round_trips_through_json() -> None:
    rng = np.random.default_rng(0)
    rel = reliability(rng.dirichlet(np.ones(3) * 0.3, 200), rng.integers(0, 3, 200), 15)
    assert np.isnan(rel.accuracy).any()  # empty bins survive as null
    back = Reliability.from_dict(json.loads(json.dumps(rel.to_dict(), allow_nan=False)))
    for name in ("edges", "counts", "accuracy", "confidence"):
        np.testing.assert_array_equal(getattr(back, name), getattr(rel, name))
    assert back.ece == rel.ece


def test_markdown_puts_units_in_headers_and_marks_rows() -> None:
    t = table(
        "T",
        [column("m", "Method"), column("ece", "ECE", "percent")],
        [{"m": "a", "ece": 0.5}, {"m": "b", "ece": 0.25, "_mark": "WORSE (ECE)"}],
    )
    lines = to_markdown([takeaway("found"), text("x"), t])
    assert lines[0] == "- found"
    assert "| Method | ECE (%) |" in lines
    assert "| a | 50.00 |" in lines and "| b **WORSE (ECE)** | 25.00 |" in lines


def test_privacy_sentences_say_unit_relation_public_trust_and_status() -> None:
    rep = PrivacyReport(
        [Release("q", "laplace", 1.0, 0.5, source=s) for s in ("a", "a", "b")],
        public=("n_classes",),
        noise="seeded",
    )
    words = " ".join(privacy_sentences(privacy_block(rep, trust="each source adds noise.")))
    assert "ε = 1-DP (pure) for adding or removing one example" in words
    assert "each of the 2 sources" in words and "n_classes" in words
    assert "Trusted: each source adds noise." in words and "not private: seeded noise" in words

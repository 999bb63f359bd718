"""Guarantee, composition rules, Release and PrivacyReport."""

from __future__ import annotations

import json
import math

import pytest

from privcal.privacy import (
    Guarantee,
    PrivacyReport,
    Release,
    basic_composition,
    parallel_composition,
)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (
            {"epsilon": -0.1},
            r"The 'epsilon' parameter of Guarantee must be a finite real number in \[0, inf\)\. "
            r"Got -0.1 instead\.",
        ),
        ({"epsilon": math.inf}, "'epsilon' parameter of Guarantee"),
        ({"epsilon": math.nan}, "'epsilon' parameter of Guarantee"),
        ({"epsilon": "1"}, "'epsilon' parameter of Guarantee"),
        (
            {"epsilon": 1.0, "delta": 1.0},
            r"'delta' parameter of Guarantee must be a finite real number in \[0, 1\)",
        ),
        ({"epsilon": 1.0, "delta": -1e-9}, "'delta' parameter of Guarantee"),
        (
            {"epsilon": 1.0, "unit": "row"},
            r"'unit' parameter of Guarantee must be one of 'example', 'user'",
        ),
        ({"epsilon": 1.0, "relation": "swap"}, "'relation' parameter of Guarantee"),
    ],
)
def test_guarantee_rejects_bad_parameters(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Guarantee(**kwargs)


def test_guarantee_defaults_frozen_and_no_addition() -> None:
    g = Guarantee(1)
    assert (g.epsilon, g.delta, g.unit, g.relation) == (1.0, 0.0, "example", "add/remove")
    assert isinstance(g.epsilon, float) and g.pure
    with pytest.raises(AttributeError):
        g.epsilon = 2.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        _ = g + g  # type: ignore[operator]


def test_basic_composition_sums() -> None:
    g = basic_composition([Guarantee(0.5), Guarantee(0.25, 1e-6), Guarantee(0.125, 2e-6)])
    assert g == Guarantee(0.875, 3e-6)
    # fsum: ten spends of 0.1 compose to exactly 1.0 (plain sum gives 0.9999999999999999)
    assert basic_composition([Guarantee(0.1)] * 10).epsilon == 1.0
    assert basic_composition([]) == Guarantee(0.0)
    assert basic_composition([Guarantee(1.0, unit="user")]).unit == "user"


def test_parallel_composition_takes_max() -> None:
    g = parallel_composition([Guarantee(0.5, 1e-6), Guarantee(0.75), Guarantee(0.1, 1e-5)])
    assert g == Guarantee(0.75, 1e-5)
    assert parallel_composition([]) == Guarantee(0.0)


@pytest.mark.parametrize("compose", [basic_composition, parallel_composition])
def test_composition_requires_same_unit_and_relation(compose) -> None:
    with pytest.raises(ValueError, match="same unit and neighbouring relation"):
        compose([Guarantee(1.0), Guarantee(1.0, unit="user")])
    with pytest.raises(ValueError, match="same unit"):
        compose([Guarantee(1.0), Guarantee(1.0, relation="substitute")])
    with pytest.raises(TypeError):
        compose([Guarantee(1.0), 1.0])


def test_basic_composition_vacuous_delta_raises() -> None:
    with pytest.raises(ValueError, match="composed delta"):
        basic_composition([Guarantee(1.0, 0.6), Guarantee(1.0, 0.5)])


def _report() -> PrivacyReport:
    return PrivacyReport(
        [
            Release("gap(T=1)", "laplace", 1.0, 0.5, source="a"),
            Release("gap(T=2)", "laplace", 1.0, 0.25, source="a"),
            Release("bins", "gaussian", 2.0, 0.5, 1e-6, source="b"),
            Release("bins2", "gaussian", 2.0, 0.5, 1e-6, source="b"),
            Release("count", "laplace", 1.0, 0.1, source="c"),
        ]
    )


def test_report_per_source_and_total() -> None:
    r = _report()
    per = r.per_source()
    assert list(per) == ["a", "b", "c"]
    assert per["a"] == Guarantee(0.75)
    assert per["b"] == Guarantee(1.0, 2e-6)
    assert per["c"] == Guarantee(0.1)
    assert r.epsilon == 1.0 and r.delta == 2e-6
    assert len(r) == 5
    assert PrivacyReport().epsilon == 0.0 and PrivacyReport().delta == 0.0


def test_report_to_dict_round_trip_and_str() -> None:
    r = _report()
    r.add(Release("x", "exponential", float("nan"), 0.2, source="c"))
    d = json.loads(json.dumps(r.to_dict()))  # JSON-safe (NaN sensitivity -> null)
    assert d["epsilon"] == 1.0 and d["per_source"]["c"]["epsilon"] == pytest.approx(0.3)
    back = PrivacyReport.from_dict(d)
    assert back.per_source() == r.per_source()
    assert math.isnan(back.releases[-1].sensitivity)
    text = str(r)
    assert "source" in text.splitlines()[0] and "epsilon" in text.splitlines()[0]
    assert "gap(T=2)" in text and "epsilon=1, delta=2e-06" in text
    with pytest.raises(TypeError):
        r.add("not a release")  # type: ignore[arg-type]


def test_release_validates() -> None:
    with pytest.raises(ValueError, match="'epsilon' parameter of Release"):
        Release("q", "laplace", 1.0, -1.0)
    with pytest.raises(ValueError, match="'delta' parameter of Release"):
        Release("q", "laplace", 1.0, 1.0, 1.0)
    assert Release("q", "laplace", 1, 1).guarantee(unit="user") == Guarantee(1.0, unit="user")

"""PrivacyOdometer in memory and with a SQLite ledger."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from privcal.privacy import BudgetExceededError, Guarantee, PrivacyOdometer


@pytest.fixture(params=["memory", "ledger"])
def make(request, tmp_path: Path):
    def _make(budget: float, delta_budget: float = 0.0, name: str = "src") -> PrivacyOdometer:
        ledger = None if request.param == "memory" else tmp_path / "l.sqlite"
        return PrivacyOdometer(budget, ledger=ledger, delta_budget=delta_budget, name=name)

    return _make


def test_spend_spent_remaining(make) -> None:
    odo = make(1.0)
    odo.spend("a", 0.25, mechanism="laplace", sensitivity=1.0)
    odo.spend("b", 0.5)
    assert odo.spent == 0.75 and odo.remaining == 0.25
    rel = odo.releases
    assert [r.query for r in rel] == ["a", "b"]
    assert rel[0].mechanism == "laplace" and rel[0].sensitivity == 1.0 and rel[0].source == "src"
    assert math.isnan(rel[1].sensitivity)
    assert odo.report().per_source() == {"src": Guarantee(0.75)}
    assert odo.guarantee == Guarantee(0.75)


@pytest.mark.parametrize("k", [3, 7, 10, 100])
def test_equal_split_spends_budget_exactly(make, k: int) -> None:
    odo = make(1.0)
    for i in range(k):
        odo.spend(f"q{i}", 1.0 / k)
    assert odo.spent == pytest.approx(1.0, rel=1e-12)
    assert not odo.can_spend(1e-9)
    with pytest.raises(BudgetExceededError):
        odo.spend("one more", 1e-9)


def test_exceeding_records_nothing_and_message(make) -> None:
    odo = make(1.0, name="hospital")
    odo.spend("a", 0.75)
    with pytest.raises(BudgetExceededError) as info:
        odo.spend("b", 0.5)
    msg = str(info.value)
    assert "hospital" in msg and "'b'" in msg
    assert "budget epsilon=1" in msg and "spent 0.75" in msg and "requested 0.5" in msg
    assert "Nothing was recorded" in msg
    assert (info.value.budget, info.value.spent, info.value.requested) == (1.0, 0.75, 0.5)
    assert isinstance(info.value, RuntimeError)
    assert odo.spent == 0.75 and len(odo.releases) == 1
    odo.spend("c", 0.25)  # the refused request did not consume anything
    assert odo.remaining == 0.0


def test_delta_budget(make) -> None:
    odo = make(10.0, delta_budget=1e-5)
    odo.spend("g", 1.0, 6e-6)
    assert odo.delta_spent == 6e-6
    assert not odo.can_spend(1.0, 6e-6)
    with pytest.raises(BudgetExceededError, match="delta budget=1e-05, spent 6e-06"):
        odo.spend("g2", 1.0, 6e-6)
    pure = PrivacyOdometer(10.0)
    with pytest.raises(BudgetExceededError):
        pure.spend("g", 1.0, 1e-9)  # delta_budget 0 allows only pure spends


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan, "x"])
def test_bad_parameters(make, bad) -> None:
    odo = make(1.0)
    with pytest.raises(ValueError, match=r"'epsilon' parameter of PrivacyOdometer\.spend"):
        odo.spend("q", bad)
    with pytest.raises(ValueError, match=r"'epsilon' parameter of PrivacyOdometer\.can_spend"):
        odo.can_spend(bad)
    with pytest.raises(ValueError, match="'budget' parameter of PrivacyOdometer"):
        PrivacyOdometer(bad)
    assert odo.spent == 0.0


def test_bad_delta_and_name() -> None:
    with pytest.raises(ValueError, match=r"'delta' parameter of PrivacyOdometer\.spend"):
        PrivacyOdometer(1.0, delta_budget=0.5).spend("q", 0.1, 1.0)
    with pytest.raises(ValueError, match="'delta_budget' parameter of PrivacyOdometer"):
        PrivacyOdometer(1.0, delta_budget=1.0)
    with pytest.raises(ValueError, match="'name' parameter"):
        PrivacyOdometer(1.0, name=3)  # type: ignore[arg-type]


def test_charge_context_manager(make) -> None:
    odo = make(1.0)
    with odo.charge("q", 0.5, mechanism="laplace") as g:
        assert g == Guarantee(0.5)
        assert odo.spent == 0.5  # recorded before the body releases anything
    with pytest.raises(BudgetExceededError), odo.charge("q2", 0.75):
        pytest.fail("body must not run")


def test_ledger_persists_and_budget_is_fixed(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "ledger.sqlite"
    odo = PrivacyOdometer(2.0, ledger=path, name="bank")
    odo.spend("a", 0.5, mechanism="laplace", sensitivity=1.0)
    again = PrivacyOdometer(2.0, ledger=str(path), name="bank")
    assert again.spent == 0.5 and again.releases[0].sensitivity == 1.0
    again.spend("b", 1.5)
    assert odo.spent == 2.0  # both views read the file
    with pytest.raises(BudgetExceededError):
        odo.spend("c", 0.1)
    with pytest.raises(ValueError, match=r"holds budget epsilon=2\.0"):
        PrivacyOdometer(3.0, ledger=path)
    with pytest.raises(ValueError, match="cannot change"):
        PrivacyOdometer(2.0, ledger=path, delta_budget=1e-5)
    assert "ledger.sqlite" in repr(odo)

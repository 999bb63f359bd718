"""The ledger's admission rule: basic composition or a Rényi filter (privacy/filter.py)."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

from privcal.privacy import BudgetExceededError, PrivacyOdometer
from privcal.privacy.accounting import rdp_epsilon, zcdp_epsilon
from privcal.privacy.filter import (
    ORDERS,
    FilterRule,
    dpsgd_curve,
    pure_dp_curve,
    zcdp_curve,
)
from privcal.privacy.odometer import as_odometer, read_ledger

RHO = 0.002  # one Gaussian release (zCDP): about 0.3 epsilon at delta 1e-7


def gaussian_step(odo: PrivacyOdometer, name: str) -> None:
    odo.spend(name, zcdp_epsilon(RHO, 1e-7), 1e-7, mechanism="gaussian", rdp=zcdp_curve(RHO))


@pytest.fixture(params=["memory", "ledger"])
def make(request, tmp_path: Path):
    def _make(budget: float, delta: float = 1e-5, renyi: float = 5e-6) -> PrivacyOdometer:
        ledger = None if request.param == "memory" else tmp_path / "p.sqlite"
        return PrivacyOdometer(budget, ledger=ledger, delta_budget=delta, renyi_delta=renyi)

    return _make


def test_curves() -> None:
    a = np.asarray(ORDERS)
    assert np.allclose(pure_dp_curve(0.5), np.minimum(0.5, a * 0.125))
    assert np.allclose(pure_dp_curve(3.0), 3.0)  # D_alpha <= D_inf
    assert np.allclose(zcdp_curve(0.25), a * 0.25)
    curve = dpsgd_curve(1.1, 0.01, 1000)
    eps_grid = compute_epsilon(list(ORDERS), list(curve), 1e-5)[0]
    # the same event on dp_accounting's default orders: the grid can only be looser, and close
    eps_default = rdp_epsilon(1.1, 0.01, 1000, 1e-5)
    assert eps_default <= eps_grid <= 1.1 * eps_default


def test_renyi_branch_admits_past_basic_and_is_stated(make) -> None:
    odo = make(1.0)
    n = 0
    with pytest.raises(BudgetExceededError, match="Rényi filter would reach"):
        while True:
            gaussian_step(odo, f"round {n}")
            n += 1
    comp = odo.composition()
    assert comp.basic_epsilon > 1.0 >= comp.renyi_epsilon  # only the Rényi branch admits these
    assert comp.stated == "renyi" and comp.epsilon == comp.renyi_epsilon
    assert comp.delta == 5e-6
    # the figure is dp_accounting's conversion at delta_R / m on the summed curve
    expect = compute_epsilon(list(ORDERS), list(n * zcdp_curve(RHO)), 5e-6 / len(ORDERS))[0]
    assert comp.renyi_epsilon == pytest.approx(expect, rel=1e-12)
    # basic composition alone stops after 3 of them
    basic = PrivacyOdometer(1.0, delta_budget=1e-5)
    for i in range(3):
        gaussian_step(basic, f"round {i}")
    with pytest.raises(BudgetExceededError):
        gaussian_step(basic, "round 3")
    assert n > 3


def test_rule_is_either_branch_with_its_own_delta() -> None:
    rule = FilterRule(1.0, 1e-5, 4e-6)
    assert rule.basic_delta == pytest.approx(6e-6)
    # basic branch: epsilon within budget, delta within delta - renyi_delta
    assert rule.admits(rule.compose([0.5, 0.5], [3e-6, 3e-6], np.full(16, np.inf)))
    assert not rule.admits(rule.compose([0.5, 0.5], [3e-6, 4e-6], np.full(16, np.inf)))
    # no Rényi branch without renyi_delta
    off = FilterRule(1.0, 1e-5)
    comp = off.compose([2.0], [0.0], zcdp_curve(1e-4))
    assert math.isinf(comp.renyi_epsilon) and not off.admits(comp)
    with pytest.raises(ValueError, match="renyi_delta"):
        FilterRule(1.0, 1e-5, 2e-5)


def test_refusal_records_nothing(make) -> None:
    odo = make(1.0)
    odo.spend("a", 0.75)

    def state() -> tuple:
        return [(r.query, r.epsilon, r.delta) for r in odo.releases], odo.composition()

    before = state()
    with pytest.raises(BudgetExceededError, match="Nothing was recorded"):
        odo.spend("b", 0.5)
    with pytest.raises(BudgetExceededError):
        odo.check("b", 0.5)
    assert state() == before
    odo.spend("c", 0.25)  # the refused request consumed nothing
    assert odo.spent == 1.0


def test_reopened_ledger_gives_the_same_figures(tmp_path: Path) -> None:
    path = tmp_path / "p.sqlite"
    odo = PrivacyOdometer(1.0, ledger=path, delta_budget=1e-5, renyi_delta=5e-6)
    for i in range(5):
        gaussian_step(odo, f"round {i}")
    odo.spend("count", 0.01, mechanism="laplace")
    again = PrivacyOdometer.open(path)
    assert (again.budget, again.delta_budget, again.renyi_delta) == (1.0, 1e-5, 5e-6)
    assert again.composition() == odo.composition() == read_ledger(path).composition()
    assert as_odometer(str(path), "test").composition() == odo.composition()


def test_two_budgets_on_one_ledger_refused(tmp_path: Path) -> None:
    path = tmp_path / "p.sqlite"
    PrivacyOdometer(3.0, ledger=path, delta_budget=1e-5, renyi_delta=5e-6).spend("a", 1.0)
    for kwargs in (
        {"budget": 4.0, "delta_budget": 1e-5, "renyi_delta": 5e-6},
        {"budget": 3.0, "delta_budget": 1e-5, "renyi_delta": 0.0},
    ):
        with pytest.raises(ValueError, match="a ledger shared by two budgets"):
            PrivacyOdometer(ledger=path, **kwargs)
    assert read_ledger(path).spent == 1.0


def test_ledger_written_before_the_filter_opens(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    PrivacyOdometer(1.0, ledger=path).spend("a", 0.5)
    con = sqlite3.connect(path)
    con.execute("DROP TABLE filter")
    con.execute("ALTER TABLE spends DROP COLUMN rdp")
    con.execute("ALTER TABLE spends DROP COLUMN relation")
    con.commit()
    con.close()
    assert read_ledger(path).composition().basic_epsilon == 0.5
    odo = PrivacyOdometer(1.0, ledger=path)
    odo.spend("b", 0.25)
    assert odo.spent == 0.75 and odo.renyi_delta == 0.0


def test_substitute_ledger_doubles_add_remove_releases(tmp_path: Path) -> None:
    odo = PrivacyOdometer(3.0, ledger=tmp_path / "s.sqlite", relation="substitute")
    odo.spend("laplace fit", 1.0)
    odo.spend("conformal", 0.5, relation="substitute")
    comp = odo.composition()
    assert comp.relation == "substitute" and comp.basic_epsilon == 2.5
    with pytest.raises(BudgetExceededError, match="counted twice") as info:
        odo.spend("another", 0.5)  # counts 1.0 under substitution
    assert info.value.spent == 2.5 and info.value.requested == 1.0
    odo.spend("conformal again", 0.5, relation="substitute")
    assert odo.composition().basic_epsilon == 3.0
    assert read_ledger(tmp_path / "s.sqlite").composition() == odo.composition()
    with pytest.raises(ValueError, match="a ledger shared by two budgets"):
        PrivacyOdometer(3.0, ledger=tmp_path / "s.sqlite")  # the relation is part of the budget


def test_add_remove_ledger_refuses_a_substitute_release(make) -> None:
    odo = make(3.0)
    odo.spend("laplace fit", 1.0)
    with pytest.raises(ValueError, match="relation='substitute'"):
        odo.spend("conformal", 0.5, relation="substitute")
    assert len(odo.releases) == 1 and odo.composition().relation == "add/remove"


def test_bad_arguments(tmp_path: Path) -> None:
    odo = PrivacyOdometer(1.0, delta_budget=1e-5, renyi_delta=5e-6)
    with pytest.raises(ValueError, match=r"'rdp' curve .* 16 non-negative values"):
        odo.spend("a", 0.1, rdp=[0.1, 0.2])
    with pytest.raises(ValueError, match="relation"):
        odo.spend("a", 0.1, relation="replace")
    with pytest.raises(ValueError, match=r"does not exist\. Create the ledger"):
        as_odometer(tmp_path / "missing.sqlite", "Est")
    with pytest.raises(ValueError, match="must be None, a PrivacyOdometer or the path"):
        as_odometer(3.0, "Est")


def _spend_sequence() -> list[dict]:
    """Spends of every kind a ledger composes: pure, (epsilon, delta) without a curve, with a
    zCDP curve, substitute; seeded so the sequence passes the budget part-way."""
    rng = np.random.default_rng(7)
    out = []
    for k in range(60):
        kind = k % 4
        eps = float(rng.uniform(0.02, 0.2))
        if kind == 0:
            out.append({"epsilon": eps})
        elif kind == 1:
            out.append({"epsilon": eps, "delta": 1e-8})
        elif kind == 2:
            out.append({"epsilon": zcdp_epsilon(RHO, 1e-7), "delta": 1e-7, "rdp": zcdp_curve(RHO)})
        else:
            out.append({"epsilon": eps, "relation": "substitute"})
    return out


@pytest.mark.parametrize(
    ("relation", "renyi_delta"),
    [("add/remove", 0.0), ("add/remove", 5e-6), ("substitute", 0.0), ("substitute", 5e-6)],
)
def test_memory_and_file_ledgers_admit_the_same_spends(
    tmp_path: Path, relation: str, renyi_delta: float
) -> None:
    """An in-memory ledger keeps its composed terms as spends arrive (SpendRecord); a file
    ledger composes its rows afresh on every spend. Both must refuse the same spends (a
    substitute release on an add/remove ledger, and past the budget), state the same figures at
    every step, and agree with the composition of the rows read back."""
    kw = {"delta_budget": 1e-5, "renyi_delta": renyi_delta, "relation": relation}
    memory = PrivacyOdometer(3.0, **kw)
    disk = PrivacyOdometer(3.0, ledger=tmp_path / "l.sqlite", **kw)
    refused = []
    for i, spend in enumerate(_spend_sequence()):
        outcomes = []
        for odo in (memory, disk):
            try:
                odo.spend(f"q{i}", **spend)
                outcomes.append("ok")
            except (BudgetExceededError, ValueError) as err:
                outcomes.append(type(err).__name__)
        assert outcomes[0] == outcomes[1], (i, spend, outcomes)
        refused.append(outcomes[0] != "ok")
        a, b = memory.composition(), disk.composition()
        assert (a.basic_epsilon, a.basic_delta, a.renyi_epsilon) == pytest.approx(
            (b.basic_epsilon, b.basic_delta, b.renyi_epsilon), rel=1e-12
        )
        assert (memory.spent, memory.delta_spent) == pytest.approx(
            (disk.spent, disk.delta_spent), rel=1e-12
        )
    assert any(refused) and not all(refused)  # the sequence reaches the budget
    record = read_ledger(tmp_path / "l.sqlite")
    assert record.spent == pytest.approx(memory.spent, rel=1e-12)
    assert len(record.releases) == len(memory.releases) == refused.count(False)

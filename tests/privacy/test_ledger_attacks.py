"""An analyst who reads a ledger's figures (or acts on them) against what the ledger charged.

Every figure a ledger states (``spent``, ``remaining``, ``guarantee``, ``privcal source
status``) must be at least what its admission rule counted, under the ledger's own relation.
"""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from privcal.cli import app
from privcal.privacy import PrivacyOdometer
from privcal.privacy.odometer import read_ledger

runner = CliRunner()


def test_a_substitute_ledger_states_what_its_filter_counted(tmp_path: Path) -> None:
    """A pipeline ledger of budget 3 under substitution took an add/remove fit of 1, which its
    filter counts 2 (group privacy). Before the fix ``spent`` said 1, ``remaining`` 2 (an
    add/remove step of 0.9 that looked affordable was refused), ``guarantee`` claimed an
    add/remove epsilon of 1 for a pipeline that also holds a substitute-only conformal release,
    and ``privcal source status`` printed spent=1.5 remaining=1.5 where the filter had 2.5."""
    path = tmp_path / "p.sqlite"
    odo = PrivacyOdometer(3.0, ledger=path, delta_budget=1e-5, relation="substitute")
    odo.spend("PrivateTemperatureScaling.fit", 1.0, mechanism="laplace")
    assert odo.spent == odo.composition().basic_epsilon == 2.0
    assert odo.remaining == 1.0
    odo.spend("PrivateConformal.fit", 0.5, mechanism="exponential", relation="substitute")
    assert odo.guarantee.epsilon == 2.5 and odo.guarantee.relation == "substitute"
    record = read_ledger(path)
    assert record.spent == 2.5 and record.remaining == 0.5
    r = runner.invoke(app, ["source", "status", "--ledger", str(path)])
    assert r.exit_code == 0, r.output
    assert "spent=2.5  remaining=0.5" in r.output

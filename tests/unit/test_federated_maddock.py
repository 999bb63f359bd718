"""Smoke test of the seed 003 protocol (privcal bench maddock2025) on one small setting."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from privcal.experiments import maddock2025

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "netcal-cifar"


@pytest.mark.skipif(not (DATA / "lenet-5-cifar-10.npz").exists(), reason="shared data absent")
def test_quick_run_writes_tidy_csv_figure_and_report(tmp_path: Path) -> None:
    path = maddock2025.run(tmp_path, quick=True, datasets=("CIFAR-10 (LeNet-5)",))
    text = path.read_text()
    assert "Table 3 analogue" in text and "Findings of the paper" in text
    rows = list(csv.DictReader(open(tmp_path / "results.csv")))
    methods = {r["method"] for r in rows}
    assert {"FedTemp", "FedBBQ", "FedBBQ (all weight)"} <= methods
    assert {r["setting"] for r in rows} == {"rounds", "beta", "epsilon"}
    # order-preserving methods never change accuracy; the flag column is consistent
    for r in rows:
        if r["method"].startswith("FedTemp") or r["method"] == "FedOPVector":
            assert float(r["accuracy_drop"]) == pytest.approx(0.0, abs=1e-12)
    assert (tmp_path / "figures" / "CIFAR_10__LeNet_5_.png").stat().st_size > 10_000

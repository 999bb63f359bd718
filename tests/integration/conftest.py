"""Fixtures shared by the integration tests.

* ``demo_run``: one ``run_demo(..., quick=True)`` per session (``report.md``, ``results.json``,
  ``report.html`` and what the console printed), reused by ``test_demo.py`` and
  ``test_report.py`` so the demo runs once.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from privcal.experiments.demo import run_demo


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """``(report.md path, console text)`` of one quick demo run (seed 0)."""
    out = tmp_path_factory.mktemp("demo")
    console = Console(record=True, width=120)
    report = run_demo(out, seed=0, console=console, quick=True)
    return report, console.export_text()

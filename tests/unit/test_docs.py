"""The generated API reference matches the code, and the README's example runs as written."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_api_reference_is_current() -> None:
    spec = importlib.util.spec_from_file_location(
        "gen_api_docs", ROOT / "tools" / "gen_api_docs.py"
    )
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    current = (ROOT / "docs" / "api.md").read_text()
    assert gen.render() == current, "docs/api.md is stale: run tools/gen_api_docs.py"


@pytest.mark.slow
def test_readme_example_runs(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", readme, re.S)
    assert code is not None
    script = tmp_path / "example.py"
    script.write_text(code.group(1))
    out = subprocess.run(
        [sys.executable, "-W", "ignore", str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout.split()
    before, after_ts, after_dp, epsilon = (float(v) for v in out)
    assert after_ts < before / 2 and after_dp < before / 2  # both recalibrations help a lot
    assert epsilon == 1.0

"""The generated docs match the code: the API reference, docs/cli.md's usage block and worked
examples (each command run, its output compared), and the README's example runs as written."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tool(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_api_reference_is_current() -> None:
    gen = _tool("gen_api_docs")
    current = (ROOT / "docs" / "api.md").read_text()
    assert gen.render() == current, "docs/api.md is stale: run tools/gen_api_docs.py"


@pytest.mark.slow
@pytest.mark.parametrize("path", ["docs/private.md", "docs/privacy.md"])
def test_sensitivity_tables_are_current(path: str) -> None:
    gen = _tool("gen_privacy_docs")
    current = (ROOT / path).read_text()
    assert gen.render(path) == current, f"{path} is stale: run tools/gen_privacy_docs.py"


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


@pytest.mark.slow  # reruns every documented command (about 15 s)
def test_cli_docs_are_current() -> None:
    """Every ``$ privcal ...`` example of docs/cli.md, run now, prints what the page shows, and
    the usage block lists every command (only durations are masked)."""
    gen = _tool("gen_cli_docs")
    current = gen.DOC.read_text(encoding="utf-8")
    rendered = gen.render(current)
    assert gen.normalise(rendered) == gen.normalise(current), (
        "docs/cli.md is stale: run tools/gen_cli_docs.py"
    )


def test_cli_docs_show_every_verb() -> None:
    """Each command of the app has a worked example (federate's section runs real processes and
    is tested by the federate integration tests)."""
    import click
    import typer

    from privcal.cli import app

    group = typer.main.get_command(app)
    assert isinstance(group, click.Group)
    doc = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    missing = [
        name
        for name in group.list_commands(click.Context(group))
        if name != "federate" and f"\n$ privcal {name} " not in doc
    ]
    assert not missing, f"docs/cli.md has no worked example of: {missing}"

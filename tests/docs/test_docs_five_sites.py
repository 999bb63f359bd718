"""docs/five-sites.md, the five-site SecAgg+ walk-through, stays runnable (issue 32).

Its federation block is docs/cli.md's SecAgg+ block, word for word, which
``tests/cli/test_cli_federate.py`` runs as separate processes; its synthetic ``scores.npz``
and its ``privcal split`` block run here as written and make the five site files; every
``privcal`` line of the page parses with its command's options.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import click
import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from privcal.cli import app
from privcal.data import read_scores

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "five-sites.md"


def _bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, flags=re.S)


def _commands(block: str) -> list[list[str]]:
    """The ``privcal`` command lines of a bash block (continuations joined, ``$k`` as 0)."""
    joined = block.replace("\\\n", " ")
    lines = [ln.strip().rstrip("&").strip() for ln in joined.splitlines()]
    return [shlex.split(ln.replace("$k", "0")) for ln in lines if ln.startswith("privcal ")]


def test_the_federation_block_is_the_tested_one_in_cli_md() -> None:
    cli = (ROOT / "docs" / "cli.md").read_text()
    section = cli[cli.index("## `privcal federate`") :]
    tested = [b for b in _bash_blocks(section) if "--secagg" in b and "fedtemp" in b]
    assert len(tested) == 1
    assert tested[0] in _bash_blocks(PAGE.read_text())


def test_the_page_is_linked() -> None:
    for page in ("README.md", "docs/index.md", "docs/federated.md", "docs/cli.md"):
        assert "five-sites.md" in (ROOT / page).read_text(), page


def test_the_split_block_makes_five_site_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make, split = _bash_blocks(PAGE.read_text())[:2]
    code = shlex.split(make.strip())  # python -c "..." : the page's synthetic scores.npz
    assert code[:2] == ["python", "-c"]
    subprocess.run([sys.executable, "-c", code[2]], cwd=tmp_path, check=True)
    monkeypatch.chdir(tmp_path)
    for argv in _commands(split):
        res = CliRunner().invoke(app, argv[1:])
        assert res.exit_code == 0, res.output
    sites = [read_scores(tmp_path / f"site{k}.npz") for k in range(5)]
    held = read_scores(tmp_path / "heldout.npz")
    assert held.n_samples == 500 and [s.n_samples for s in sites] == [400] * 5
    assert all(np.unique(s.labels).size == 10 for s in sites)
    assert not (tmp_path / "site5.npz").exists()


def test_every_command_on_the_page_parses() -> None:
    group = typer.main.get_command(app)
    commands = [c for b in _bash_blocks(PAGE.read_text()) for c in _commands(b)]
    assert len(commands) >= 6
    for argv in commands:
        cmd: click.Command = group
        args = argv[1:]
        while isinstance(cmd, click.Group):
            sub = cmd.get_command(click.Context(cmd), args[0])
            assert sub is not None, argv
            cmd, args = sub, args[1:]
        values, extra, _ = cmd.make_parser(click.Context(cmd)).parse_args(list(args))
        assert not extra, argv
        assert all(values.get(p.name) is not None for p in cmd.params if p.required), argv

"""Every ``privcal`` command's ``--help`` ends with a short example that parses (issue 32)."""

from __future__ import annotations

import shlex

import click
import pytest
import typer
from typer.testing import CliRunner

from privcal.cli import app
from privcal.cli.examples import EXAMPLES, command_paths

PATHS = sorted(command_paths(app))


def _command(path: str) -> click.Command:
    cmd = typer.main.get_command(app)
    for name in path.split():
        assert isinstance(cmd, click.Group)
        sub = cmd.get_command(click.Context(cmd), name)
        assert sub is not None, path
        cmd = sub
    return cmd


def test_every_command_has_an_example_and_no_example_is_stale() -> None:
    assert len(PATHS) >= 20
    assert set(EXAMPLES) == set(PATHS)


@pytest.mark.parametrize("path", PATHS)
def test_the_example_parses_with_the_commands_own_options(path: str) -> None:
    cmd = _command(path)
    for line in EXAMPLES[path]:
        assert len(line) <= 88, line  # one line of an 100-column --help
        argv = shlex.split(line)
        assert argv[: 1 + len(path.split())] == ["privcal", *path.split()], line
        args = argv[1 + len(path.split()) :]
        # click's parser alone: an unknown option raises, nothing is converted (files need
        # not exist); every required option and argument must be there
        parser = cmd.make_parser(click.Context(cmd, info_name=path))
        values, extra, _ = parser.parse_args(list(args))
        assert not extra, f"{line}: unparsed {extra}"
        for param in cmd.params:
            if param.required:
                assert values.get(param.name) is not None, f"{line}: needs {param.name}"


@pytest.mark.parametrize("path", ["split", "federate server", "source status"])
def test_help_shows_the_example(path: str) -> None:
    res = CliRunner().invoke(app, [*path.split(), "--help"], terminal_width=100)
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "Example" in text
    assert all(" ".join(line.split()) in text for line in EXAMPLES[path])

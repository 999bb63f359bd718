"""Command-line interface: ``privcal`` (a Typer app; see ``docs/cli.md``)."""

from privcal.cli.main import app

__all__ = ["app"]

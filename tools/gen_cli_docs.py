"""Regenerate the usage block and the worked examples of docs/cli.md from the real CLI.

Run ``.venv/bin/python tools/gen_cli_docs.py`` after changing a command; ``tests/docs/
test_docs.py`` fails while docs/cli.md differs from what this renders, so the page cannot drift.

* The fenced block after ``<!-- privcal-usage -->`` lists every command of the ``privcal`` app
  (and the sub-commands of its groups) with the first line of its help.
* Each ``console`` block after ``<!-- privcal-example -->`` is a sequence of ``$ privcal ...``
  lines; they run in order, in one temporary folder holding the files of :func:`prepare`, through
  typer's ``CliRunner`` on the real app (stdout and stderr as a terminal shows them, at the width
  of a pipe). A non-zero exit status is shown as ``[exit N]``. Lines of other blocks, and
  ``# comments`` after a command, are kept as written.

Only run times vary between runs; :func:`normalise` masks them when the test compares.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "cli.md"
USAGE_MARK = "<!-- privcal-usage -->"
EXAMPLE_MARK = "<!-- privcal-example -->"
_BLOCK = re.compile(r"(?P<mark><!-- privcal-(?P<kind>usage|example) -->\n)(?P<fence>```\w*\n)"
                    r"(?P<body>.*?)(?P<end>```)", re.S)  # fmt: skip
_PROGRESS = re.compile(r"━+.*\d+/\d+ +\d+:\d\d:\d\d\s*$")
_SECONDS = re.compile(r"\b\d+(\.\d+)? s\b")


def prepare(folder: Path) -> None:
    """Write the example files: a digits network's logits under fog (severity 5), seeded.

    ``val.npz`` / ``test.npz`` (first and second half), ``hospital_a.npz`` / ``hospital_b.npz``
    (the halves of ``val``), ``unlabelled.npy`` (the test logits), ``toplabel.csv`` (the test
    set's true label, predicted label and confidence), ``broken.npz`` (a truncated copy) and
    ``tiny.npz`` (the first 20 rows of ``val``); ``ml_cal.npz`` / ``ml_test.npz``: multilabel
    probabilities and label matrices (:func:`privcal.data.synthetic.multilabel`).
    """
    from privcal.data import digits_shift, write_scores
    from privcal.data.synthetic import multilabel

    z, y = digits_shift(seed=0, corruptions=["fog"], severities=[5]).shifted[("fog", 5)]
    half = z.shape[0] // 2
    write_scores(folder / "val.npz", z[:half], y[:half])
    write_scores(folder / "test.npz", z[half:], y[half:])
    write_scores(folder / "tiny.npz", z[:20], y[:20])
    quarter = half // 2
    write_scores(folder / "hospital_a.npz", z[:quarter], y[:quarter])
    write_scores(folder / "hospital_b.npz", z[quarter:half], y[quarter:half])
    np.save(folder / "unlabelled.npy", z[half:])
    p = np.exp(z[half:] - z[half:].max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    rows = zip(y[half:], p.argmax(1), p.max(1), strict=True)
    lines = [f"{t},{k},{c:.6f}" for t, k, c in rows]
    (folder / "toplabel.csv").write_text("true_label,pred_label,confidence\n" + "\n".join(lines))
    data = (folder / "val.npz").read_bytes()
    (folder / "broken.npz").write_bytes(data[: len(data) // 2])
    probs, labels = multilabel(3000, seed=0)  # per-label probabilities for privcal risk
    np.savez(folder / "ml_cal.npz", probs=probs[:2000], labels=labels[:2000])
    np.savez(folder / "ml_test.npz", probs=probs[2000:], labels=labels[2000:])


def usage() -> str:
    """The usage block: every command and group of the app with its one-line help."""
    import click
    import typer

    from privcal.cli import app

    group = typer.main.get_command(app)
    assert isinstance(group, click.Group)
    ctx = click.Context(group, info_name="privcal")
    lines = ["privcal [--version] [--debug] COMMAND [OPTIONS]"]
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None
        lines.append(f"  {name:<22}{cmd.get_short_help_str(limit=76)}")
        if isinstance(cmd, click.Group):
            sub_ctx = click.Context(cmd, info_name=name, parent=ctx)
            for sub in cmd.list_commands(sub_ctx):
                sub_cmd = cmd.get_command(sub_ctx, sub)
                assert sub_cmd is not None
                lines.append(f"    {sub:<20}{sub_cmd.get_short_help_str(limit=76)}")
    return "\n".join(lines) + "\n"


def run(command: str, folder: Path) -> list[str]:
    """Run one ``privcal ...`` line in ``folder``; its output lines as a terminal shows them."""
    from typer.testing import CliRunner

    from privcal.cli import app

    argv = shlex.split(command, comments=True)
    assert argv[0] == "privcal", command
    result = CliRunner().invoke(app, argv[1:], env={"COLUMNS": None, "NO_COLOR": "1"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise RuntimeError(f"{command!r} raised {result.exception!r}") from result.exception
    text = result.output.replace(str(folder.resolve()) + os.sep, "").replace(str(folder), ".")
    lines = [ln.rstrip() for ln in text.splitlines() if not _PROGRESS.search(ln)]
    while lines and not lines[-1]:
        lines.pop()
    if result.exit_code:
        lines.append(f"[exit {result.exit_code}]")
    return lines


def _example(body: str, folder: Path) -> str:
    out: list[str] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            out.append(line)
            out.extend(run(line[2:], folder))
    return "\n".join(out) + "\n"


@contextlib.contextmanager
def _in_folder() -> Iterator[Path]:
    previous = Path.cwd()
    with tempfile.TemporaryDirectory(prefix="privcal-cli-docs-") as tmp:
        folder = Path(tmp)
        prepare(folder)
        os.chdir(folder)
        try:
            yield folder
        finally:
            os.chdir(previous)


def render(text: str | None = None) -> str:
    """docs/cli.md with its usage block and every example block regenerated."""
    text = DOC.read_text(encoding="utf-8") if text is None else text
    with _in_folder() as folder:

        def block(m: re.Match[str]) -> str:
            body = usage() if m["kind"] == "usage" else _example(m["body"], folder)
            return f"{m['mark']}{m['fence']}{body}{m['end']}"

        return _BLOCK.sub(block, text)


#: A private fit's ``Released:`` line: its numbers come from secure (unseeded) noise.
_RELEASED = re.compile(r"^(Released: T = )\S+( \(its release favours it over T = 1 by )\S+", re.M)


def normalise(text: str) -> str:
    """Mask what varies between runs: durations (``1.5 s``) and the numbers of a private fit's
    ``Released:`` line (secure noise)."""
    return _RELEASED.sub(r"\1<T>\2<z>", _SECONDS.sub("<t> s", text))


def main() -> int:
    DOC.write_text(render(), encoding="utf-8")
    print(f"wrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

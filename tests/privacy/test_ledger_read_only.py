"""A ledger this user cannot write is reported as read-only, with the fix (issue 26).

SQLite opens a privcal ledger (write-ahead-log mode) with writes even to read it, so a
read-only ledger used to be called "not a privcal ledger". The checks run as an unprivileged
user: as root (which writes any file) they run in a child process as ``nobody`` (``setpriv``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from privcal.privacy import PrivacyOdometer

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="POSIX permissions")

NOBODY = 65534
BIN = Path(sys.executable).parent


@pytest.fixture
def ledger() -> Iterator[Path]:
    """A ledger with one spend, in a folder others may read, made read-only (file and folder)."""
    folder = Path(tempfile.mkdtemp(prefix="privcal-ro-"))
    path = folder / "src.sqlite"
    PrivacyOdometer(1.0, ledger=path, name="src").spend("count", 0.25, mechanism="laplace")
    for f in folder.iterdir():
        f.chmod(0o444)
    folder.chmod(0o555)
    try:
        yield path
    finally:
        folder.chmod(0o755)
        for f in folder.iterdir():
            f.unlink()
        folder.rmdir()


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    """Run ``args`` as this user, or as ``nobody`` when this user is root."""
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("root without setpriv: every file is writable")
        args = [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *args]
    return subprocess.run(args, capture_output=True, text=True, timeout=120, cwd="/")


def test_source_status_says_read_only_with_the_fix(ledger: Path) -> None:
    res = _run([str(BIN / "privcal"), "source", "status", "--ledger", str(ledger)])
    assert res.returncode == 2, res.stdout + res.stderr
    err = res.stderr.strip()
    assert err.count("Error:") == 1 and len(err.splitlines()) == 1, err
    assert "read-only" in err and "chmod u+w" in err and "not a privcal ledger" not in err


def test_odometer_and_read_ledger_say_read_only(ledger: Path) -> None:
    code = (
        "import sys\n"
        "from privcal.privacy import PrivacyOdometer\n"
        "from privcal.privacy.odometer import read_ledger\n"
        "for f in (lambda: read_ledger(sys.argv[1]), lambda: PrivacyOdometer(1.0, "
        "ledger=sys.argv[1], name='src')):\n"
        "    try:\n"
        "        f()\n"
        "    except ValueError as err:\n"
        "        print(err)\n"
    )
    res = _run([sys.executable, "-c", code, str(ledger)])
    assert res.returncode == 0, res.stderr
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 2, res.stdout
    assert all("is read-only for this user" in ln and "chmod u+w" in ln for ln in lines)
    assert "copy the ledger" in lines[0]  # reading: a copy may be inspected
    assert "copy" not in lines[1]  # spending: a copy would split the budget

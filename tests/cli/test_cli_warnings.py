"""The CLI's warning rule: one ``Warning:`` line per kind of warning, with a count, on stderr.

``privcal.cli._common.collect_warnings`` (applied to every verb by the root group) records the
warnings of library code and prints each kind (category + message with the numbers left out)
once; Python's own ``path:line: Category: message`` form never reaches the user. The first two
tests run real processes, as a user does.
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from privcal.cli._common import collect_warnings, warning_kind
from privcal.cli.private_fit import SEEDED_NOISE_WARNING
from privcal.data.validation import ZeroProbabilityWarning
from privcal.private.temperature import NoiseDominatedWarning

pytestmark = pytest.mark.integration

PRIVCAL = Path(sys.executable).parent / "privcal"


def _stderr_lines(*args: str) -> list[str]:
    proc = subprocess.run(
        [str(PRIVCAL), *args], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stderr.splitlines()


@pytest.mark.slow  # several seconds (tests/README.md)
def test_audit_prints_one_line_per_warning_kind() -> None:
    """Each of the audit's runs warns (noise-dominated fits): hundreds of warnings, one line."""
    lines = _stderr_lines("audit", "private-temperature-acc", "--runs", "200")
    assert len(lines) == 1, lines[:4]
    (line,) = lines
    assert line.startswith("Warning: The private fit cannot tell T = ")
    assert "the released accuracy gap at T = 1 is " in line and "falls back to T = 1" in line
    assert line.endswith(", first shown)") and " (x" in line
    count = int(line.rsplit(" (x", 1)[1].split(",")[0])
    assert count > 100
    assert "temperature.py" not in line and "NoiseDominatedWarning" not in line


def test_evaluate_zero_probabilities_is_one_warning_line(shared_data: Path) -> None:
    """The 20 newsgroups probabilities hold exact zeros: one ``Warning:`` line, no file path."""
    probs = shared_data / "cleanlab-heldout" / "20news_probs.npy"
    if not probs.is_file():
        pytest.skip(f"{probs} not found")
    lines = _stderr_lines("evaluate", "--input", str(probs))
    assert lines == [
        "Warning: 111050 probabilities are exactly 0; they were replaced by the smallest "
        "positive float (2.23e-308) before taking the log."
    ]


def test_seeded_private_fit_keeps_its_fit_warnings(tmp_path: Path) -> None:
    """``--seed`` silences the seeded-noise warning only (said once, as a ``Warning:`` line);
    the fit's own diagnostics still show (a noise-dominated fit at epsilon = 0.05, n = 100, kept
    with --force: without it the fit is refused, tests/cli/test_release_reporting.py)."""
    rng = np.random.default_rng(0)
    data = tmp_path / "val.npz"
    np.savez(data, logits=3 * rng.normal(size=(100, 5)), labels=rng.integers(0, 5, 100))
    lines = _stderr_lines(
        "fit", "--method", "acc-t", "--epsilon", "0.05", "--input", str(data), "--seed", "0",
        "--out", str(tmp_path / "t.json"), "--force",
    )  # fmt: skip
    warned = [line for line in lines if line.startswith("Warning:")]
    assert len(warned) == 2, lines
    assert warned[0] == f"Warning: {SEEDED_NOISE_WARNING}"
    assert warned[1].startswith("Warning: The private fit cannot tell T = ")
    assert "may calibrate worse than no calibration" in warned[1]


def test_collect_warnings_groups_by_kind_and_counts(capsys: pytest.CaptureFixture[str]) -> None:
    with collect_warnings() as caught:
        for gap in (4.5, 2.6, 4.5):
            warnings.warn(f"gap {gap} within 2 SDs", NoiseDominatedWarning, stacklevel=1)
        for _ in range(3):
            warnings.warn("3 probabilities are exactly 0", ZeroProbabilityWarning, stacklevel=1)
        warnings.warn("gap 1.0 within 2 SDs", UserWarning, stacklevel=1)  # another category
        warnings.warn("old API", DeprecationWarning, stacklevel=1)  # hidden, as Python does
    assert len(caught) == 7
    assert capsys.readouterr().err.splitlines() == [
        "Warning: gap 4.5 within 2 SDs (x3, first shown)",
        "Warning: 3 probabilities are exactly 0 (x3)",
        "Warning: gap 1.0 within 2 SDs",
    ]


def test_collect_warnings_prints_before_an_error_propagates(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(ValueError, match="bad"), collect_warnings():
        warnings.warn("fit 1 is poor", NoiseDominatedWarning, stacklevel=1)
        raise ValueError("bad")
    assert capsys.readouterr().err == "Warning: fit 1 is poor\n"


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("gap 4.522 within 2 SDs (9.798) of 0.", "gap -1e-05 within 3 SDs (10) of 0.", True),
        ("T = 0.25 may calibrate worse", "T = 4 may calibrate worse", True),
        ("float32 scores", "float64 scores", False),  # numbers inside names are kept
        ("epsilon * n_1 = 0.5", "epsilon * n_2 = 0.5", False),
    ],
)
def test_warning_kind_ignores_numbers_only(a: str, b: str, same: bool) -> None:
    assert (warning_kind(UserWarning, a) == warning_kind(UserWarning, b)) is same


def test_a_number_at_the_end_of_a_sentence_is_one_kind() -> None:
    """``T = 64.`` and ``T = 0.52.`` are the same kind (the full stop is not the number's)."""
    assert warning_kind(UserWarning, "keeps T = 64.") == warning_kind(
        UserWarning, "keeps T = 0.52."
    )

"""Privacy tables fit an 100-column terminal, wrapped by row; logs written by the CLI are plain.

Issue 32: the server's privacy table of a five-client SecAgg+ run was ~500 characters wide (its
mechanism cell alone ~400), run.log kept Flower's colour codes, and a release without a
recorded sensitivity printed ``nan``.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pytest

from privcal._text import NO_SENSITIVITY, NO_VALUE, TEXT_WIDTH, format_table, number, wrap
from privcal.federated import DPConfig, federated_report, get_method
from privcal.privacy import PrivacyReport, Release, SeededNoise

pytestmark = pytest.mark.filterwarnings("ignore::privcal.privacy.InsecureNoiseWarning")


def _words(text: str) -> str:
    return " ".join(text.split())


def test_columns_when_they_fit() -> None:
    text = format_table(("step", "query", "epsilon"), [("1", "count", "0.5"), ("2", "sum", "1")])
    assert text.splitlines() == [
        "step  query  epsilon",
        "----  -----  -------",
        "1     count  0.5",
        "2     sum    1",
    ]


def test_one_block_per_row_when_the_columns_do_not_fit() -> None:
    long = "gaussian on the summed gradient (L2 sensitivity C_g=28.2843) " * 4
    rows = [("1", "count", long, "0.5"), ("2", "sum", "laplace", "1")]
    text = format_table(("step", "query", "mechanism", "epsilon"), rows, width=60)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 60
    assert lines[0] == "step 1" and "step 2" in lines
    assert lines[1] == "  query      count"
    assert lines[2].startswith("  mechanism  gaussian on the summed")
    assert lines[3].startswith(" " * 13) and not lines[3][13].isspace()  # under the value
    assert _words(long) in _words(text)  # nothing lost, only wrapped
    assert "  epsilon    1" in lines


def test_a_word_longer_than_the_room_is_broken() -> None:
    text = format_table(("a", "b"), [("1", "x" * 250)], width=50)
    assert max(len(line) for line in text.splitlines()) <= 50
    assert "".join(text.split()).count("x") == 250


def test_wrap_and_number() -> None:
    assert wrap("a b c", 3) == ["a b", "  c"]
    assert wrap("", 10, indent="  ") == ["  "]
    assert number(float("nan")) == NO_VALUE and number(2.5) == "2.5"
    assert number(0.123456789, ".3g") == "0.123"


def _five_client_report(method: str, aggregation: str) -> PrivacyReport:
    """The report the server of a five-client run writes (3 rounds, epsilon 4, delta 1e-5,
    c = 10; over SecAgg+ with distributed noise, or trusted)."""
    dp = DPConfig(
        epsilon=4.0,
        delta=1e-5,
        rounds=3,
        noise=SeededNoise(0),
        aggregation=aggregation,
        n_clients=5,
    )
    return federated_report(
        get_method(method), dp, 10, n_clients=5, sample_rate=1.0, transport="secagg+"
    )


@pytest.mark.parametrize("aggregation", ["distributed", "trusted"])
@pytest.mark.parametrize("method", ["fedtemp", "fedmatrix", "fedbin", "fedbbq"])
def test_a_five_client_run_report_fits_100_columns(method: str, aggregation: str) -> None:
    report = _five_client_report(method, aggregation)
    (release,) = report.releases
    assert len(release.mechanism) > TEXT_WIDTH  # the cell that made the table ~500 wide
    text = str(report)
    assert max(len(line) for line in text.splitlines()) <= TEXT_WIDTH
    assert text.splitlines()[0] == "source federation"
    for part in (release.query, release.mechanism, *report.public, *report.threat):
        assert _words(part) in _words(text)  # wrapped, never cut
    narrow = report.format(width=60)
    assert max(len(line) for line in narrow.splitlines()) <= 60
    assert _words(release.mechanism) in _words(narrow)


def test_a_short_report_keeps_its_columns_and_a_missing_sensitivity_is_a_dash() -> None:
    report = PrivacyReport(
        [
            Release("count", "laplace", 1.0, 0.5, source="a"),
            Release("fit", "exponential", float("nan"), 0.25, source="a"),
        ]
    )
    text = str(report)
    lines = text.splitlines()
    assert lines[0].split() == ["source", "query", "mechanism", "sensitivity", "epsilon", "delta"]
    assert lines[2].split() == ["a", "count", "laplace", "1", "0.5", "0"]
    assert lines[3].split() == ["a", "fit", "exponential", NO_VALUE, "0.25", "0"]
    assert "nan" not in text and _words(NO_SENSITIVITY) in _words(text)
    assert "sensitivity —" not in str(PrivacyReport([Release("q", "laplace", 1.0, 0.5)]))


def test_the_server_prints_the_report_within_100_columns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from privcal.cli.federate import _print_report

    report = _five_client_report("fedtemp", "distributed")
    path = tmp_path / "privacy_report.json"
    path.write_text(json.dumps(report.to_dict()))
    _print_report(path)
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= TEXT_WIDTH
    assert _words(report.releases[0].mechanism) in _words(out)
    assert "\x1b" not in out


def test_run_log_holds_no_escape_codes(capsys: pytest.CaptureFixture[str]) -> None:
    """The server's and the simulator's run.log: Flower's coloured lines are written plain."""
    from privcal.cli.federate import _server_line

    log = io.StringIO()
    show = _server_line(log)
    show("\x1b[92mINFO \x1b[0m:      Starting logstream for run_id `1`")
    show("\x1b[93mWARNING \x1b[0m:   A `num_shares` larger than `modulus_range`")
    show("privcal: round 1/3: 5 replied, 0 dropped, 0 refused; epsilon spent so far 2.16 of 4")
    text = log.getvalue()
    assert "\x1b" not in text
    assert text.splitlines() == [
        "INFO :      Starting logstream for run_id `1`",
        "WARNING :   A `num_shares` larger than `modulus_range`",
        "privcal: round 1/3: 5 replied, 0 dropped, 0 refused; epsilon spent so far 2.16 of 4",
    ]
    assert "round 1/3: 5 replied" in capsys.readouterr().err  # the progress line is shown


def test_every_release_sensitivity_round_trips_without_nan() -> None:
    """A release saved without a sensitivity (JSON null) reads back as one, shown as a dash."""
    back = Release.from_dict(Release("q", "m", float("nan"), 0.5).to_dict())
    assert math.isnan(back.sensitivity) and number(back.sensitivity) == NO_VALUE

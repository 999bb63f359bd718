"""Measurements: every release is made by one, and each states its sensitivity truthfully.

* no module outside ``privcal.privacy`` builds a ``Release(...)`` (an AST scan);
* each measurement's proof (a docstring) states ``sensitivity <formula>``;
* each DataSource query's sensitivity holds on worst-case and random neighbours of small data
  (add one row), and is approached by the worst case (so the check can fail both ways);
* the measurement object charges before it draws, and refuses what it cannot draw.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from privcal.audits import available_audits
from privcal.privacy import BudgetExceededError, PrivacyOdometer, Release, SeededNoise
from privcal.privacy.measurement import Measurement, available_measurements, get_measurement
from privcal.private import DataSource
from privcal.private.queries import QUERY_MEASUREMENTS, query_sensitivity

pytestmark = pytest.mark.filterwarnings("ignore::privcal.private.InsecureNoiseWarning")

SRC = Path(__file__).resolve().parents[2] / "src" / "privcal"


def _release_calls(path: Path) -> list[int]:
    tree = ast.parse(path.read_text())
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = (
                f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            )
            if name == "Release":
                lines.append(node.lineno)
    return lines


def test_no_release_is_built_outside_the_privacy_layer() -> None:
    offenders = {
        str(p.relative_to(SRC)): _release_calls(p)
        for p in SRC.rglob("*.py")
        if "privacy" not in p.relative_to(SRC).parts[:1]
    }
    offenders = {k: v for k, v in offenders.items() if v}
    assert offenders == {}, f"Release(...) built by hand (use a Measurement): {offenders}"


def test_the_scan_sees_a_hand_built_release(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from privcal.privacy import Release\nr = Release('q', 'laplace', 1, 1)\n")
    assert _release_calls(bad) == [2]


def _resolve(dotted: str) -> Any:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise AssertionError(dotted)


def _plain(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("`", "").replace("*", ""))


@pytest.mark.parametrize("name", list(available_measurements()))
def test_each_sensitivity_is_derived_in_its_proof(name: str) -> None:
    m = get_measurement(name)
    doc = _plain(inspect.getdoc(_resolve(m.proof)) or "")
    assert f"sensitivity {m.formula}" in doc or f"width {m.formula}" in doc, (name, m.proof)


def test_every_audit_names_registered_measurements() -> None:
    known = available_measurements()
    for name, audit in available_audits().items():
        assert audit.measurements, name
        assert set(audit.measurements) <= set(known), name


def test_the_vocabulary_reads_its_measurements() -> None:
    assert query_sensitivity("clipped_nll_increments", 2.0, 4) == 2.0 + np.log(4)
    assert query_sensitivity("clipped_nll_sum", 7.0) == 7.0
    for q, m in QUERY_MEASUREMENTS.items():
        assert m.name == f"datasource.{q}" and m.mechanism == "laplace" and m.norm == "L1"


# ------------------------------------------------------------------ empirical neighbours
C = 4
BOUND = 10.0
GRID = np.geomspace(0.25, 64.0, 17)


def _rows() -> tuple[np.ndarray, np.ndarray, list[tuple[np.ndarray, int]]]:
    """Small data and the rows added to make neighbours: random ones and the worst cases
    (confidently wrong, confidently right, a valley row whose clipped NLL falls then rises)."""
    rng = np.random.default_rng(3)
    z = 2.0 * rng.normal(size=(20, C))
    y = rng.integers(0, C, 20)
    extra = [(3.0 * rng.normal(size=C), int(rng.integers(0, C))) for _ in range(30)]
    extra += [
        (np.array([50.0, 0.0, 0.0, 0.0]), 1),
        (np.array([50.0, 0.0, 0.0, 0.0]), 0),
        (np.array([0.0, -2.5, -42.0, -42.0]), 1),
    ]
    return z, y, extra


QUERY_CALLS: dict[str, tuple[str, dict[str, Any]]] = {
    "accuracy_gap_sum": ("_accuracy_gap_sum", {"temperature": 1.0}),
    "accuracy_gap_curve": ("_accuracy_gap_curve", {"temperatures": GRID, "anchor": 8}),
    "clipped_nll_sum": ("_clipped_nll_sum", {"temperature": 1.0, "bound": BOUND}),
    "clipped_nll_increments": ("_clipped_nll_increments", {"temperatures": GRID, "bound": BOUND}),
    "bin_gaps": ("_bin_gaps", {"temperature": 1.0, "n_bins": 15}),
    "bin_counts": ("_bin_counts", {"n_bins": 15}),
    "count": ("_count", {}),
    "score_histogram": ("_score_histogram", {"edges": np.linspace(0.0, 1.0, 33), "score": "aps"}),
}


def test_every_query_has_a_neighbour_check() -> None:
    assert set(QUERY_CALLS) == set(QUERY_MEASUREMENTS)


#: The largest change the worst neighbour above reaches, as a share of the stated sensitivity
#: (a looser statement would fail here): the curve reaches 2 - 1/C at most, the increments'
#: valley row the fall from B plus a rise toward log C.
TIGHT = {"accuracy_gap_curve": 0.7, "clipped_nll_increments": 0.75}


@pytest.mark.parametrize("query", list(QUERY_CALLS))
def test_query_sensitivity_holds_on_neighbours_and_is_reached(query: str) -> None:
    z, y, extra = _rows()
    method, params = QUERY_CALLS[query]
    base = getattr(DataSource(z, y, noise=SeededNoise(0)), method)(**params)
    moves = []
    for row, label in extra:
        src = DataSource(np.vstack([z, row]), np.append(y, label), noise=SeededNoise(0))
        stat = getattr(src, method)(**params)
        moves.append(float(np.abs(np.asarray(stat.value) - np.asarray(base.value)).sum()))
    sens = base.sensitivity
    assert sens == stat.sensitivity == QUERY_MEASUREMENTS[query].sensitivity_at(**base.params)
    assert max(moves) <= sens * (1 + 1e-12)
    assert max(moves) >= TIGHT.get(query, 0.95) * sens


# ------------------------------------------------------------------ the object itself
def _sum_measurement() -> Measurement:
    return Measurement("test.sum", "a sum of terms in [0, B]", "laplace", "L1", lambda bound: bound,
                       "B", "tests")  # fmt: skip


def test_release_charges_before_it_draws() -> None:
    m = _sum_measurement()
    calls: list[str] = []

    class Noise(SeededNoise):
        def add_laplace(self, value: Any, scale: float) -> Any:
            calls.append(f"draw {scale}")
            return super().add_laplace(value, scale)

    odo = PrivacyOdometer(1.0, name="a")

    def charge(release: Release) -> None:
        calls.append("charge")
        odo.spend_release(release)

    _, r = m.release(3.0, 0.5, Noise(0), query="sum", source="a", charge=charge, bound=2.0)
    assert calls == ["charge", "draw 4.0"]
    assert odo.releases == [r] and r == Release("sum", "laplace", 2.0, 0.5, 0.0, "a")
    with pytest.raises(BudgetExceededError):
        m.release(3.0, 0.75, Noise(0), query="sum", source="a", charge=charge, bound=2.0)
    assert calls[-1] == "charge"  # refused: nothing drawn


def test_measurement_refuses_wrong_parameters_and_undrawn_mechanisms() -> None:
    m = _sum_measurement()
    with pytest.raises(ValueError, match=r"reads the public parameters \['bound'\]"):
        m.sensitivity_at(clip=1.0)
    with pytest.raises(ValueError, match="takes no parameters"):
        QUERY_MEASUREMENTS["count"].sensitivity_at(bound=1.0)
    rank = get_measurement("conformal.private_rank_quantile")
    with pytest.raises(ValueError, match=r"Measurement\.record"):
        rank.release(1.0, 1.0, SeededNoise(0), query="q", slope=1.0)
    assert rank.record("q", 1.0, source="s", slope=2.0).sensitivity == 3.0


def test_statistics_read_a_swapped_measurement() -> None:
    """A plant (or a fix) changes a query's sensitivity in one place: its measurement."""
    z, y, _ = _rows()
    src = DataSource(z, y, noise=SeededNoise(0), budget=10.0)
    real = QUERY_MEASUREMENTS["bin_gaps"]
    QUERY_MEASUREMENTS["bin_gaps"] = dataclasses.replace(real, sensitivity=0.5)
    try:
        src.bin_gaps(1.0, epsilon=1.0)
    finally:
        QUERY_MEASUREMENTS["bin_gaps"] = real
    assert src.history[-1].sensitivity == 0.5 == src.odometer.releases[-1].sensitivity

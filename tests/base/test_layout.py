"""The layout rules of DESIGN.md hold (``tools/check_layout.py``): no module over 800 lines, at
most three functions over 120 lines (each listed with its reason), no import circle, imports
only down the layers."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _layout():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("check_layout", ROOT / "tools/check_layout.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_layout"] = module
    spec.loader.exec_module(module)
    return module


def test_no_module_over_800_lines() -> None:
    assert _layout().long_modules() == []


def test_long_functions_are_the_listed_few() -> None:
    layout = _layout()
    found = dict(layout.long_functions())
    assert set(found) <= set(layout.LONG_FUNCTIONS), found
    assert len(layout.LONG_FUNCTIONS) <= layout.MAX_LONG


def test_no_import_circle() -> None:
    assert _layout().import_cycles() == []


def test_imports_point_down_the_layers() -> None:
    assert _layout().upward_imports() == []


def test_the_checks_catch_what_they_look_for(tmp_path: Path) -> None:
    """A planted circle, a long module and a long function are found."""
    layout = _layout()
    pkg = tmp_path / "privcal"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "privacy.py").write_text("def f():\n    from privcal import data\n")  # deferred
    (pkg / "data.py").write_text("from privcal.privacy import f\n")
    body = "\n".join(f"    x{i} = {i}" for i in range(layout.MAX_FUNCTION_LINES))
    (pkg / "plots.py").write_text("def long():\n" + body + "\n" + "\n" * layout.MAX_MODULE_LINES)
    for name in ("metrics", "cli"):
        (pkg / name).mkdir()
        (pkg / name / "__init__.py").write_text("")
    (pkg / "metrics" / "m.py").write_text("import privcal.cli\n")
    assert layout.import_cycles(tmp_path) == [["privcal.data", "privcal.privacy"]]
    assert [m for m, _ in layout.long_modules(tmp_path)] == ["privcal.plots"]
    assert [f for f, _ in layout.long_functions(tmp_path)] == ["privcal.plots:long"]
    assert layout.upward_imports(tmp_path) == [
        ("privcal.data", "privcal.privacy"),
        ("privcal.metrics.m", "privcal.cli"),
    ]

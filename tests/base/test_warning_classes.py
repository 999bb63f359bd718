"""Every warning class privcal defines derives from :class:`privcal.exceptions.PrivcalWarning`
(and still from ``UserWarning``), so ``error::privcal.exceptions.PrivcalWarning`` in the test
configuration and ``warnings.simplefilter(..., PrivcalWarning)`` reach all of them."""

from __future__ import annotations

import ast
import importlib
import warnings
from pathlib import Path

import pytest

import privcal
from privcal.exceptions import PrivcalWarning

SRC = Path(privcal.__file__).parent


def _warning_classes() -> list[tuple[str, str]]:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        module = ".".join(("privcal", *path.relative_to(SRC).with_suffix("").parts))
        found += [
            (module.removesuffix(".__init__"), node.name)
            for node in tree.body
            if isinstance(node, ast.ClassDef) and node.name.endswith("Warning")
        ]
    return found


CLASSES = _warning_classes()


def test_the_scan_finds_the_known_warnings() -> None:
    names = {name for _, name in CLASSES}
    assert {"InsecureNoiseWarning", "NoiseDominatedWarning", "ZeroProbabilityWarning"} <= names


@pytest.mark.parametrize(("module", "name"), CLASSES)
def test_every_warning_class_is_a_privcal_warning(module: str, name: str) -> None:
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, PrivcalWarning) and issubclass(cls, UserWarning)


def test_one_filter_selects_them_all() -> None:
    from privcal.data.validation import check_scores

    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivcalWarning)
        with pytest.raises(PrivcalWarning, match="exactly 0"):
            check_scores([[0.0, 1.0], [0.5, 0.5]], input="probs")

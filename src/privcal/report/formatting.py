"""How a raw value is written: the one number formatter and the one JSON encoder of privcal.

Every number a report shows is kept raw (metrics as fractions) until it is written, and it is
written by :func:`format_value` under one unit rule (:data:`UNITS`): calibration errors and
accuracies **in percent** (ECE 0.031 is "3.10"), their differences in percentage points, a
missing value as ``-``. Every JSON file privcal writes for a report goes through
:func:`jsonable` (NumPy values as Python ones, ``inf`` as ``"inf"``, ``nan`` as ``null``), by
:func:`write_json`; an experiment's tidy rows are written by :func:`write_csv`, its Markdown
page by :func:`write_lines`.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "UNITS",
    "cell_text",
    "format_value",
    "header_text",
    "jsonable",
    "plain",
    "write_csv",
    "write_json",
    "write_lines",
]

#: Column units: how a raw value is shown, and the suffix its header gets.
UNITS: dict[str, str] = {
    "text": "",
    "percent": " (%)",  # a fraction shown x 100 with 2 decimals
    "pp": " (pp)",  # a difference of fractions, shown x 100, signed
    "fraction": "",  # 4 decimals
    "count": "",  # an integer
    "number": "",  # 4 significant digits
    "ratio": "",  # 2 decimals
    "epsilon": "",  # a privacy budget ("inf" for none)
    "exact": "",  # the shortest text that reads back as the same float (data files)
}


def jsonable(obj: Any) -> Any:
    """``obj`` with NumPy values as Python ones and non-finite floats as JSON can hold them.

    ``inf`` / ``-inf`` become the strings ``"inf"`` / ``"-inf"`` (an epsilon of ``inf`` is the
    non-private twin), ``nan`` becomes ``None``.
    """
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [jsonable(v) for v in obj.tolist()]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        x = float(obj)
        if math.isnan(x):
            return None
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        return x
    return obj


def write_json(path: str | Path, obj: Any) -> Path:
    """Write :func:`jsonable` of ``obj`` to ``path`` (UTF-8, indented by one, a final newline)."""
    path = Path(path)
    path.write_text(json.dumps(jsonable(obj), indent=1) + "\n", encoding="utf-8")
    return path


def write_lines(path: str | Path, lines: Sequence[str]) -> Path:
    """Write ``lines`` (a Markdown page) to ``path``, one per line, with a final newline."""
    path = Path(path)
    path.write_text("\n".join(lines) + "\n")
    return path


def write_csv(path: str | Path, rows: Sequence[Mapping[str, Any]]) -> Path:
    """Write tidy ``rows`` to the CSV ``path``: one column per key, in order of first appearance
    (a row without a key leaves its cell empty)."""
    path = Path(path)
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
        writer.writeheader()
        writer.writerows(rows)
    return path


def format_value(value: Any, unit: str, digits: int | None = None, *, missing: str = "-") -> str:
    """``value`` as a table shows it (see :data:`UNITS`); a missing value (``None`` or NaN) is
    ``missing``.

    Examples
    --------
    >>> format_value(0.031, "percent"), format_value(-0.004, "pp"), format_value(None, "ratio")
    ('3.10', '-0.40', '-')
    >>> format_value(float("inf"), "epsilon"), format_value(0.1, "exact")
    ('inf', '0.1')
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return missing
    if unit == "text" or isinstance(value, str):
        return str(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    x = float(value)
    if unit == "percent":
        return f"{100.0 * x:.{2 if digits is None else digits}f}"
    if unit == "pp":
        return f"{100.0 * x:+.{2 if digits is None else digits}f}"
    if unit == "fraction":
        return f"{x:.{4 if digits is None else digits}f}"
    if unit == "count":
        return f"{round(x):d}"
    if unit == "ratio":
        return f"{x:.{2 if digits is None else digits}f}"
    if unit == "epsilon":
        return "inf" if math.isinf(x) else f"{x:g}"
    if unit == "exact":
        return repr(x)
    return f"{x:.{4 if digits is None else digits}g}"


def _se_text(value: Any, unit: str, digits: int | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    shown = format_value(value, "percent" if unit == "pp" else unit, digits).lstrip("+")
    return f" ± {shown}"


def cell_text(row: Mapping[str, Any], col: Mapping[str, Any]) -> str:
    """The text of one cell: the value and, for columns with ``se``, ``± se``."""
    value = row.get(col["key"])
    out = format_value(value, col["unit"], col.get("digits"))
    if "se" in col and out != "-":
        out += _se_text(row.get(col["se"]), col["unit"], col.get("digits"))
    return out


def header_text(col: Mapping[str, Any]) -> str:
    """A column header with its unit suffix (``ECE (%)``)."""
    suffix = UNITS[col["unit"]]
    label = str(col["label"])
    return label if suffix.strip() in label else label + suffix


def plain(s: str) -> str:
    """``s`` without the ``**`` / backtick markup."""
    return re.sub(r"\*\*|`", "", s)

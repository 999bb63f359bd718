"""Plain-text tables that fit a terminal: columns when they fit, one block per row when not.

Privacy tables (:meth:`privcal.privacy.PrivacyReport.format`, ``privcal source status``,
``privcal ledger show``) hold long cells (a federated run's mechanism is ~400 characters). Laid
out as columns they are as wide as their longest cell, and a terminal folds each line into
noise; wrapped inside each column (Rich's way) a cell becomes a narrow ribbon. So
:func:`format_table` keeps the columns when every line fits ``width`` and otherwise writes
each row as a block, one ``name  value`` line per column, values wrapped at ``width`` under
their first word: every line of the result is at most ``width`` characters (a single word
longer than the room left is broken).
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence

__all__ = ["NO_SENSITIVITY", "NO_VALUE", "TEXT_WIDTH", "format_table", "number", "wrap"]

#: Width of privacy tables and reports: an 100-column terminal.
TEXT_WIDTH = 100
#: Shown in place of a value a release does not have (a sensitivity never recorded).
NO_VALUE = "—"
#: The note under a table with a release that has no recorded sensitivity.
NO_SENSITIVITY = (
    f"sensitivity {NO_VALUE}: none was recorded with the release (one charge for several "
    "statistics or rounds, each with its own sensitivity: the privacy report of the fit or run "
    "that made it states them)"
)


def number(value: float, spec: str = "g") -> str:
    """``format(value, spec)``, or :data:`NO_VALUE` for NaN (a value that was never recorded)."""
    return NO_VALUE if math.isnan(value) else format(value, spec)


def wrap(text: str, width: int = TEXT_WIDTH, indent: str = "", hanging: str = "  ") -> list[str]:
    """``text`` as lines of at most ``width`` characters: the first starts with ``indent``, the
    others with ``indent + hanging``."""
    return textwrap.wrap(
        text,
        width=width,
        initial_indent=indent,
        subsequent_indent=indent + hanging,
        break_on_hyphens=False,
    ) or [indent]


def format_table(
    header: Sequence[str], rows: Sequence[Sequence[str]], width: int = TEXT_WIDTH
) -> str:
    """A text table of ``rows`` under ``header``, no line longer than ``width``.

    Columns (two spaces apart, a rule of dashes under the header) when the widest line fits;
    otherwise every row as a block: its first cell after the first column's name (``step 2``),
    then one line per other column, ``  name  value``, the values aligned and wrapped under
    their first character.

    Examples
    --------
    >>> print(format_table(("query", "epsilon"), [("count", "0.5")]))
    query  epsilon
    -----  -------
    count  0.5
    >>> print(format_table(("step", "query", "epsilon"), [("1", "a long query " * 3, "0.5")],
    ...                    width=30))
    step 1
      query    a long query a long
               query a long query
      epsilon  0.5
    """
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]
    if sum(widths) + 2 * (len(widths) - 1) <= width:

        def line(cells: Sequence[str]) -> str:
            return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

        return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])
    name_width = max(len(h) for h in header[1:])
    room = max(width - name_width - 4, 20)
    out = []
    for row in rows:
        out.extend(wrap(f"{header[0]} {row[0]}", width))
        for name, value in zip(header[1:], row[1:], strict=True):
            lines = wrap(value, room, hanging="")
            out.append(f"  {name.ljust(name_width)}  {lines[0]}".rstrip())
            out.extend(" " * (name_width + 4) + more for more in lines[1:])
    return "\n".join(out)

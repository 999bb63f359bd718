"""Write the sensitivity tables of docs/private.md and docs/privacy.md from the measurements.

Run from the repository root: ``.venv/bin/python tools/gen_privacy_docs.py``. Each table sits
between ``<!-- BEGIN generated: NAME -->`` and ``<!-- END generated: NAME -->`` and is rebuilt from
the registered :class:`~privcal.privacy.measurement.Measurement` objects (the statistic, the
mechanism, the sensitivity and where it is derived), never edited by hand; a test checks that
the files are current.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from privcal.privacy.measurement import Measurement, available_measurements

ROOT = Path(__file__).resolve().parents[1]


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def datasource_table() -> list[str]:
    """The DataSource vocabulary: one row per query measurement."""
    from privcal.private.queries import QUERY_MEASUREMENTS

    lines = [
        "| query | statistic (shared function) | mechanism | L1 sensitivity, add/remove one "
        "example | derived in |",
        "|---|---|---|---|---|",
    ]
    for query, m in QUERY_MEASUREMENTS.items():
        lines.append(
            f"| `{query}` | {_cell(m.statistic)} | {m.mechanism} | **{m.formula}** | "
            f"`{m.proof.removeprefix('privcal.private.source.')}` |"
        )
    return lines


def measurements_table() -> list[str]:
    """Every registered measurement."""
    lines = [
        "| measurement | statistic | mechanism | sensitivity | relation | public parameters | "
        "derived in |",
        "|---|---|---|---|---|---|---|",
    ]
    m: Measurement
    for name, m in available_measurements().items():
        row = m.row()
        lines.append(
            f"| `{name}` | {_cell(row['statistic'])} | {row['mechanism']} | "
            f"{row['sensitivity']} | {row['relation']} | {row['parameters']} | `{row['proof']}` |"
        )
    return lines


#: file -> {block name: table builder}
BLOCKS = {
    "docs/private.md": {"datasource-measurements": datasource_table},
    "docs/privacy.md": {"measurements": measurements_table},
}


def render(path: str) -> str:
    """``path``'s text with each generated block rebuilt."""
    text = (ROOT / path).read_text()
    for name, build in BLOCKS[path].items():
        begin = f"<!-- BEGIN generated: {name} (tools/gen_privacy_docs.py) -->"
        end = f"<!-- END generated: {name} -->"
        pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
        if not pattern.search(text):
            raise SystemExit(f"{path} has no block {begin!r} ... {end!r}")
        block = "\n".join([begin, *build(), end])
        text = pattern.sub(lambda _, block=block: block, text)
    return text


def main() -> int:
    for path in BLOCKS:
        (ROOT / path).write_text(render(path))
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

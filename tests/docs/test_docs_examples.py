"""Every ```python block of README.md and docs/*.md runs as written.

Per page, the page's python blocks run in order in one namespace (a later block may use what an
earlier one defined), in a fresh temporary working directory, with matplotlib's ``Agg`` backend.
A block preceded by an HTML comment ``<!-- not-run: REASON -->`` is skipped (the reason is
required and shown); use it only for a block that cannot run in a test (a GPU, a Ray cluster, a
multi-process Flower deployment). Generated pages (``docs/api.md``, ``docs/cli.md``) are left to
their own tests in ``test_docs.py``.

A failure names the page, the block's number and its first line, and shows the traceback.
"""

from __future__ import annotations

import re
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Pages made by tools/ (their python blocks, if any, are the generators' business).
GENERATED = frozenset({"docs/api.md", "docs/cli.md"})

#: Pages whose blocks together take more than ~10 s on 2 loaded cores.
SLOW = frozenset(
    {"README.md", "docs/data.md", "docs/federated.md", "docs/training.md", "docs/privacy.md"}
)

_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
_SKIP = re.compile(r"<!--\s*not-run:\s*(\S.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    page: str
    number: int  # 1-based among the page's python blocks
    line: int  # line of the opening fence
    code: str
    skip: str | None  # the not-run reason, if any


def blocks(page: str) -> list[Block]:
    """The python blocks of ``page`` (a path relative to the repository root), in order."""
    text = (ROOT / page).read_text(encoding="utf-8")
    out = []
    for number, match in enumerate(_FENCE.finditer(text), start=1):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        skip = _SKIP.search(before)
        out.append(
            Block(
                page,
                number,
                text.count("\n", 0, match.start()) + 1,
                match.group(1),
                skip.group(1) if skip else None,
            )
        )
    return out


def pages() -> list[str]:
    found = ["README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))]
    return [p for p in found if p not in GENERATED and blocks(p)]


def _param(page: str) -> object:
    marks = [pytest.mark.slow] if page in SLOW else []
    return pytest.param(page, id=page, marks=marks)


def run_page(page: str) -> list[Block]:
    """Run the page's blocks in one namespace (in the current directory); return those skipped."""
    import matplotlib

    matplotlib.use("Agg")
    namespace: dict[str, object] = {"__name__": "__main__"}
    skipped = []
    for block in blocks(page):
        if block.skip is not None:
            skipped.append(block)
            continue
        first = block.code.strip().splitlines()[0] if block.code.strip() else ""
        where = f"{page}, python block {block.number} (line {block.line}: {first!r})"
        try:
            code = compile(block.code, f"<{page} block {block.number}>", "exec")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # examples may use seeded noise on purpose
                exec(code, namespace)
        except Exception:
            pytest.fail(f"{where} failed:\n{traceback.format_exc()}", pytrace=False)
    return skipped


def test_the_pages_have_examples() -> None:
    """The API pages each carry at least one runnable example."""
    expected = {
        "README.md",
        "docs/index.md",
        "docs/conformal.md",
        "docs/metrics.md",
        "docs/data.md",
        "docs/training.md",
        "docs/federated.md",
        "docs/privacy.md",
        "docs/private.md",
        "docs/integrations.md",
        "docs/report.md",
        "docs/angelopoulos2022.md",
        "docs/luo2020.md",
    }
    found = set(pages())
    assert expected <= found, f"pages without a python block: {sorted(expected - found)}"
    for page in expected:
        assert any(b.skip is None for b in blocks(page)), f"{page}: every block is not-run"


def test_skip_markers_give_a_reason() -> None:
    for page in pages():
        text = (ROOT / page).read_text(encoding="utf-8")
        assert "<!-- not-run -->" not in text and "<!-- not-run: -->" not in text, page


@pytest.mark.parametrize("page", [_param(p) for p in pages()])
def test_page_examples_run(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    skipped = run_page(page)
    for block in skipped:
        print(f"{page} block {block.number} (line {block.line}) not run: {block.skip}")

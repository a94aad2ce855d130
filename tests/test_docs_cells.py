"""The notebook examples in docs/ do what their page shows, in a real IPython shell.

A group is marked by a line ``<!-- NAME-cells: tests/test_docs_cells.py runs these cells -->``;
the next four fenced blocks are: a ``python`` cell that sets up, a ``%%cortex`` cell, a
``python`` expression, and the repr that expression shows. (``tests/test_readme.py`` runs the
plain Python examples; a ``%%cortex`` cell needs the magic, so it runs here.)
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from cortex_jupyter import default_registry

ROOT = Path(__file__).parent.parent
MARKER = re.compile(r"<!-- ([\w-]+-cells): tests/test_docs_cells\.py runs these cells -->")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)


def groups() -> list[tuple[str, list[str]]]:
    found = []
    for page in sorted((ROOT / "docs").rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        for match in MARKER.finditer(text):
            name = f"{page.relative_to(ROOT).as_posix()}:{match.group(1)}"
            found.append((name, FENCE.findall(text, match.end())[:4]))
    return found


GROUPS = groups()


def test_the_typed_answers_page_has_its_cells() -> None:
    assert "docs/typed.md:typed-cells" in {name for name, _ in GROUPS}


@pytest.fixture
def own_tools() -> Iterator[None]:
    """The tools a page's setup cell registers (``@tool``) are taken out again after it,
    so no later test finds them in the default registry."""
    before = set(default_registry.names("tool"))
    yield
    for name in set(default_registry.names("tool")) - before:
        default_registry.remove("tool", name)


@pytest.mark.parametrize("blocks", [pytest.param(b, id=name) for name, b in GROUPS])
@pytest.mark.usefixtures("own_tools")
def test_a_cell_group_shows_what_its_page_shows(ip: InteractiveShell, blocks: list[str]) -> None:
    setup, cell, expression, shown = blocks
    assert cell.startswith("%%cortex "), "the second block must be a %%cortex cell"
    assert ip.run_cell(setup).success
    assert ip.run_cell(cell).success
    assert repr(ip.ev(expression.strip())) == shown.strip()

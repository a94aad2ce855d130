"""The runnable examples in README.md and docs/ print what the page says they print.

An example is marked by a line ``<!-- NAME-example: tests/test_readme.py runs this block -->``
before a ``python`` block; the next fenced block is its exact stdout. Each example runs as a
script in a fresh interpreter, and the test id is ``page:NAME-example``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
MARKER = re.compile(r"<!-- ([\w-]+-example): tests/test_readme\.py runs this block -->")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)

# The examples the README had before the docs site; they must stay runnable wherever they live.
KEPT = {"runtime-example", "loop-example", "agent-example", "answer-example"}


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def examples() -> list[tuple[str, str, str]]:
    """Every marked example: (id, code, the stdout shown under it)."""
    found = []
    for page in pages():
        text = page.read_text(encoding="utf-8")
        for match in MARKER.finditer(text):
            blocks = FENCE.findall(text, match.end())[:2]
            name = f"{page.relative_to(ROOT).as_posix()}:{match.group(1)}"
            code, shown = [*blocks, "", ""][:2]
            found.append((name, code, shown))
    return found


EXAMPLES = examples()


@pytest.mark.parametrize(
    ("code", "shown"),
    [pytest.param(code, shown, id=name) for name, code, shown in EXAMPLES]
    or [pytest.param(None, None, id="no-marked-example")],
)
def test_an_example_prints_what_its_page_shows(
    tmp_path: Path, code: str | None, shown: str | None
) -> None:
    assert code is not None, "no marked example found in README.md or docs/"
    assert code.strip() and shown, "a marked example needs a python block and its output block"
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout == shown


def test_the_readmes_first_examples_are_still_run() -> None:
    markers = {name.split(":", 1)[1] for name, _, _ in EXAMPLES}
    assert markers >= KEPT, f"missing: {sorted(KEPT - markers)}"
    assert len({name for name, _, _ in EXAMPLES}) == len(EXAMPLES), "two examples share an id"

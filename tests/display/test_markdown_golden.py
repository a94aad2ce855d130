"""Golden cases for the markdown a model writes: dollars, math, ``$name``, images.

Each file in ``markdown_cases/`` is one case (its format is in that folder's README):
the markdown, the values the notebook has, the HTML expected (in a compact form: a
literal ``$`` or backslash span shown as ``{$}`` / ``{\\}``, ``style`` attributes
dropped) and, when given, the plain text ``fill_references`` gives. Every case is also
streamed one character at a time (incremental == full at every step) and checked for
stray math delimiters and loaded images.

``CORTEX_GOLDEN_UPDATE=1 pytest tests/display/test_markdown_golden.py`` rewrites the
expected sections from the current output: review the diff before keeping it.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cortex_jupyter.display import IncrementalMarkdown, fill_references, render_markdown
from cortex_jupyter.display.markdown import LITERAL_CLASS

from .test_markdown import assert_no_stray_math_delimiters

CASES = Path(__file__).parent / "markdown_cases"
SECTION = re.compile(r"^::: (markdown|values|html|text)$", re.MULTILINE)
UPDATE = os.environ.get("CORTEX_GOLDEN_UPDATE") == "1"


@dataclass
class Case:
    path: Path
    about: str
    sections: dict[str, str]

    @property
    def values(self) -> dict[str, Any]:
        values: dict[str, Any] = json.loads(self.sections.get("values") or "{}")
        return values

    def write(self) -> None:
        parts = [self.about.rstrip("\n") + "\n"]
        for name in ("markdown", "values", "html", "text"):
            if name in self.sections:
                parts.append(f"\n::: {name}\n{self.sections[name]}\n")
        self.path.write_text("".join(parts), encoding="utf-8")


def load(path: Path) -> Case:
    source = path.read_text(encoding="utf-8")
    pieces = SECTION.split(source)
    about, rest = pieces[0], pieces[1:]
    # A section is the lines between its marker and the next one, blank lines around
    # it dropped.
    sections = {name: body.strip("\n") for name, body in zip(rest[::2], rest[1::2], strict=True)}
    return Case(path, about.strip(), sections)


def compact(html: str) -> str:
    """The HTML in the form the cases are written in."""
    html = html.replace(f'<span class="{LITERAL_CLASS}">&#36;</span>', "{$}")
    html = html.replace(f'<span class="{LITERAL_CLASS}">&#92;</span>', "{\\}")
    return re.sub(r' style="[^"]*"', "", html).strip()


def case_files() -> list[Path]:
    return sorted(CASES.glob("*.md"))


def test_there_are_cases() -> None:
    assert len(case_files()) >= 20


@pytest.mark.parametrize("path", case_files(), ids=lambda p: p.stem)
def test_golden_case(path: Path) -> None:
    case = load(path)
    markdown, values = case.sections["markdown"], case.values
    html = render_markdown(markdown, values)
    text = fill_references(markdown, values)[0]
    if UPDATE:
        case.sections["html"] = compact(html)
        if "text" in case.sections:
            case.sections["text"] = text
        case.write()
    assert compact(html) == case.sections["html"].strip(), path.name
    if "text" in case.sections:
        assert text == case.sections["text"], path.name
    # What every case must also hold, whatever it pins.
    assert_no_stray_math_delimiters(html)
    for src in re.findall(r"<img\b[^>]*\bsrc=\"([^\"]*)\"", html):
        assert src.startswith("data:image/"), src
    md = IncrementalMarkdown()
    for end in range(len(markdown) + 1):
        assert md.render(markdown[:end], values) == render_markdown(markdown[:end], values)

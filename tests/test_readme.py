"""The README's runnable examples do what the README says they do."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")


def block_after(marker: str) -> tuple[str, str]:
    """The code block after ``marker`` and the plain block printed after it."""
    start = README.index(marker)
    blocks = re.findall(r"```(?:python)?\n(.*?)```", README[start:], re.DOTALL)
    return blocks[0], blocks[1]


@pytest.mark.parametrize(
    "marker", ["runtime-example", "loop-example", "agent-example", "answer-example"]
)
def test_an_example_prints_what_the_readme_shows(tmp_path: Path, marker: str) -> None:
    code, shown = block_after(f"<!-- {marker}")
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout == shown

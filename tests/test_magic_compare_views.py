"""What a ``%%cortex --compare`` cell's columns show, against a plain cell of the same run
(issue 35's gaps): the tokens in a column's header, ``--repeat``'s runs as they come, and
the live widgets counted under ``CortexMagics.live_views``."""

from __future__ import annotations

import re
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from cortex_jupyter.display.compare import header_words

BODY = (
    "<thought>Let me think about the capital.</thought>\n"
    "<response>The capital of France is Paris, a city on the Seine.</response>"
)


def test_a_script_columns_tokens_are_those_its_plain_cell_shows(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    ip.run_cell_magic("cortex", "--text --script", BODY)
    plain = capsys.readouterr().out
    shown = re.search(r"· (~?\d+) tokens ·", plain)
    assert shown is not None, plain
    ip.run_cell_magic("cortex", "--text --script --compare cortex:x", BODY)
    table = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(table) if line.startswith("column "))
    row = table[header + 1].split()
    assert row[:3] == ["cortex:x", "script", "completed"]
    assert row[3] == shown.group(1) != "0"
    facts: Any = ip.user_ns["_compare"].facts()[0]
    assert f"{shown.group(1)} tokens" in header_words(facts)

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


@pytest.fixture
def widgets(ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Widget views in a plain shell: what ``display`` was given, in order."""
    from cortex_jupyter.session import compare_views, views

    shown: list[Any] = []

    class Handle:
        def update(self, data: Any, **kwargs: Any) -> None:
            shown.append(("update", data))

    def display(obj: Any, **kwargs: Any) -> Handle:
        shown.append(obj)
        return Handle()

    monkeypatch.setattr(compare_views, "display", display)
    monkeypatch.setattr(views, "display", display)
    ip.run_line_magic("config", "CortexMagics.display = 'widgets'")
    ip.run_line_magic("config", "CortexMagics.live_views = 3")
    yield shown
    ip.run_line_magic("cortex", "views close")
    ip.run_line_magic("config", "CortexMagics.display = 'auto'")
    ip.run_line_magic("config", "CortexMagics.live_views = 10")


def closed(box: Any) -> bool:
    return all(w.comm is None for w in (box.widget, box.row, box.bar, *box._headers)) and all(
        view.closed for view in box.views
    )


def test_compare_columns_count_as_live_views_and_older_ones_let_go(
    ip: InteractiveShell, widgets: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    ip.run_cell_magic("cortex", "--script --compare cortex:x,sigil:x", BODY)
    first = ip.user_ns["_compare"].view.box
    assert not closed(first)
    ip.run_cell_magic("cortex", "--script --compare cortex:x,sigil:x", BODY)
    second = ip.user_ns["_compare"].view.box
    # Four columns live, three may be: the older comparison lets go, whole.
    assert closed(first) and not closed(second)
    assert ("update", {"text/plain": ""}) in widgets  # its output now leaves the static copy
    capsys.readouterr()
    ip.run_line_magic("cortex", "views")
    listing = capsys.readouterr().out
    assert "2 live view(s)" in listing and listing.count("script") == 2
    ip.run_cell_magic("cortex", "--script", BODY)
    ip.run_cell_magic("cortex", "--script", BODY)
    assert closed(second)  # two columns and two plain views: the columns were the oldest


def test_a_repeat_column_shows_its_finished_runs_answers_as_they_finish(
    ip: InteractiveShell, widgets: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import ipywidgets

    sent: list[str] = []  # every widget value the front end was sent, in order
    send = ipywidgets.Widget.send_state

    def record(widget: Any, key: Any = None) -> None:
        value = getattr(widget, "value", None)
        if isinstance(value, str):
            sent.append(value)
        send(widget, key)

    monkeypatch.setattr(ipywidgets.Widget, "send_state", record)
    body = "<response>Paris.</response>"
    line = "--script --chunk-size 2 --delay 0.02 --compare cortex:x --repeat 3"
    ip.run_cell_magic("cortex", line, body)
    headers = [v for v in sent if "cortex-compare-header" in v]
    assert any("run 2 of 3" in v or "run 3 of 3" in v for v in headers)  # which one runs
    so_far = [v for v in sent if "Answers so far" in v]
    counts = [int(m.group(1)) for v in so_far if (m := re.search(r"\((\d) of 3 runs", v))]
    # Shown as runs finish, not only at the end: the first while a later run streamed.
    assert counts[0] < 3 and counts[-1] == 3 and counts == sorted(counts)
    assert f"×{counts[0]}</span> Paris." in so_far[0] and "×3</span> Paris." in so_far[-1]

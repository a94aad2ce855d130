"""The plain-text renderer: the stream as it happens, and the final summary."""

from __future__ import annotations

from cortex_jupyter.display import TextRenderer, ViewState, render_text
from cortex_jupyter.protocol import Parser
from cortex_jupyter.runtime import End, Nested

from .helpers import finished_run, parse, status


def test_text_renderer_streams_a_small_run() -> None:
    out: list[str] = []
    renderer = TextRenderer(out.append, model="m")
    events = parse(
        '<thought>Look it up.\n<action id="a1">{"name": "search"}</action>'
        '<action id="a2">{"name": "fetch"}</action></thought>'
        "<response>Found it.</response>",
        chunk=6,
    )
    for event in events:
        renderer.feed(event, 1.0)
    for event in [
        status("a1", "pending", 1.0, name="search"),
        status("a1", "running", 1.1, attempt=1),
        status("a2", "running", 1.1, attempt=1),
        status("a2", "running", 1.2, attempt=1, error="ConnectionError: reset", retry_in=0.5),
        status("a2", "running", 1.7, attempt=2),
        status("a1", "done", 1.52, attempt=1, output="{'hits': 2}"),
        status("a2", "failed", 2.0, attempt=2, error="ConnectionError: reset\nagain"),
        End("completed", 2.1),
    ]:
        renderer.feed(event)
    assert "".join(out) == (
        "[thought] Look it up.\n"
        "[response] Found it.\n"
        "[running] search (a1)\n"
        "[running] fetch (a2)\n"
        "[retry in 0.50 s] fetch (a2): ConnectionError: reset\n"
        "[done 0.42 s] search (a1) -> {'hits': 2}\n"
        "[failed 0.90 s] fetch (a2): ConnectionError: reset again\n"
        "[end] m · done · 1.10 s · ~29 tokens · 1 done, 1 failed\n"
    )


def test_a_status_line_waits_for_the_streaming_line_to_end() -> None:
    """Never in the middle of a word: the line is finished first."""
    out: list[str] = []
    renderer = TextRenderer(out.append)
    parser = Parser("cortex")
    for event in parser.feed("<thought>thinking and"):
        renderer.feed(event, 1.0)
    renderer.feed(status("x", "running", 1.0, name="t"))
    assert "".join(out) == "[thought] thinking and"
    for event in parser.feed(" more\nnext line"):
        renderer.feed(event, 1.1)
    assert "".join(out) == "[thought] thinking and more\n[running] t (x)\nnext line"


def test_held_lines_go_out_at_a_space_on_a_long_line_and_at_the_end() -> None:
    out: list[str] = []
    renderer = TextRenderer(out.append)
    parser = Parser("cortex")
    for event in parser.feed("<response>" + "word " * 20):
        renderer.feed(event, 1.0)
    renderer.feed(status("x", "running", 1.0, name="t"))
    for event in parser.feed("word " * 20):  # past 160 columns: broken at a space
        renderer.feed(event, 1.0)
    text = "".join(out)
    assert text.endswith(" word word \n[running] t (x)\n")
    for event in parser.feed("more"):
        renderer.feed(event, 1.0)
    renderer.feed(status("x", "done", 1.5, output="'ok'"))
    renderer.feed(End("completed", 1.6))  # the end releases what is still held
    assert "".join(out).endswith(
        "more\n[done 0.50 s] t (x) -> 'ok'\n[end] model · done · 0.60 s · ~51 tokens · 1 done\n"
    )


def test_rejected_action_is_reported_once_and_nested_lines_are_indented() -> None:
    out: list[str] = []
    renderer = TextRenderer(out.append)
    for event in parse(
        '<action id="bad">{"name": oops}</action>'
        '<action type="agent" id="ag">{"name": "helper"}</action>'
    ):
        renderer.feed(event, 1.0)
    renderer.feed(status("bad", "failed", 1.0, error=renderer.state.nodes["bad"].error))
    renderer.feed(Nested("ag", status("s1", "running", 1.5, name="search")))
    text = "".join(out)
    assert text.count("[failed] bad (bad)") == 1
    assert "\n  [running] search (ag/s1)\n" in text


def test_control_characters_cannot_reach_the_terminal() -> None:
    out: list[str] = []
    renderer = TextRenderer(out.append)
    for event in parse("<response>\x1b[31mred\x1b[0m</response>"):
        renderer.feed(event, 1.0)
    assert "\x1b" not in "".join(out)


def test_render_text_summary() -> None:
    text = render_text(finished_run())
    assert text.startswith("cortex · test-model · done · ")
    assert "Thought:\n  I will look up cats and dogs" in text
    assert "  ✓ [done 0.30 s] search (a1) -> {'hits': 3}" in text
    assert "  ✗ [failed 0.20 s] compare (a3): ValueError: no model" in text
    assert text.rstrip().endswith('print("done")\n```')
    assert render_text(ViewState()).startswith("cortex · model · streaming")

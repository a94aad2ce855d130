"""The plain-text renderer: the stream as it happens, and the final summary."""

from __future__ import annotations

from cortex_jupyter.display import TextRenderer, ViewState, header_parts, render_text
from cortex_jupyter.protocol import Parser
from cortex_jupyter.runtime import End, Metric, Nested
from cortex_jupyter.runtime.core.events import ActionOutput, ContextUse, Progress

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


def test_what_tools_write_goes_under_their_node_never_into_the_text() -> None:
    out: list[str] = []
    renderer = TextRenderer(out.append, model="m")
    parser = Parser("cortex")
    feed_all = [
        *parser.feed('<action id="a">{"name": "fetch"}</action><action id="b">{"name": "log"}'),
        *parser.feed("</action><response>Half a line"),
    ]
    for event in feed_all:
        renderer.feed(event, 1.0)
    renderer.feed(status("a", "running", 1.0, attempt=1))
    renderer.feed(ActionOutput("a", 1.1, stdout="page 1\npage", stderr="slow\n"))
    renderer.feed(ActionOutput("b", 1.1, logs=("WARNING root: low disk\nsecond line",)))
    # Nothing splices into "Half a line": the lines wait for it to end.
    assert "".join(out).endswith("[response] Half a line")
    for event in parser.feed(" of text.\n"):
        renderer.feed(event, 1.2)
    renderer.feed(ActionOutput("a", 1.3, stdout=" 2\n", progress=Progress(1, 3, "pages")))
    renderer.feed(ActionOutput("a", 1.4, progress=Progress(2, 3, "pages")))  # within 1 s: held
    renderer.feed(ActionOutput("a", 1.5, stdout="no newline"))
    renderer.feed(status("a", "done", 1.6, attempt=1, output="'ok'"))
    text = "".join(out)
    assert "[response] Half a line of text.\n" in text
    assert "  a | page 1\n  a ! slow\n  b ~ WARNING root: low disk\n  b ~ second line\n" in text
    assert "  a | page 2\n  a % 1/3 pages\n" in text
    # At the end: the unfinished line and the held progress, then the status line.
    assert text.endswith("  a | no newline\n  a % 2/3 pages\n[done 0.60 s] fetch (a) -> 'ok'\n")


def test_an_awaiting_action_and_the_context_in_the_end_line() -> None:
    out: list[str] = []
    renderer = TextRenderer(out.append, model="m")
    for event in parse('<action id="m">{"name": "mail"}</action>'):
        renderer.feed(event, 1.0)
    renderer.feed(status("m", "awaiting", 1.1, parameters='{"to": "bob"}'))
    renderer.feed(ContextUse(turn=1, time=1.2, tokens=21_000, budget=32_000))
    renderer.feed(Metric("context_tokens", 21_400, 1.3))
    renderer.feed(End("completed", 2.0))
    text = "".join(out)
    assert '[awaiting approval] mail (m): {"to": "bob"}\n' in text
    assert " · ctx 21k/32k · " in text.splitlines()[-1]
    state = ViewState()
    state.apply(ContextUse(turn=1, time=1.0, tokens=2_100, budget=32_000, over=True))
    assert "ctx ~2.1k/32k (over)" in header_parts(state)

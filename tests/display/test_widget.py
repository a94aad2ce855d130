"""The live widget view: what it shows, what it re-sends, and what a whole run costs.

No kernel: ipywidgets widgets work without a front end. A recording comm stands in for
the kernel's, so every message a view would put on iopub is counted and measured.
"""

from __future__ import annotations

import html
import importlib.util
import json
import random
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import comm
import ipywidgets
import pytest
from comm.base_comm import BaseComm

from cortex_jupyter.display import IncrementalMarkdown, render_markdown
from cortex_jupyter.display.widget import (
    BURST,
    MAX_MESSAGES,
    WIDGET_MIME,
    WidgetView,
)
from cortex_jupyter.protocol import ActionStart, Parser
from cortex_jupyter.runtime import ActionStatus, End, Interrupt, Nested
from cortex_jupyter.runtime.core.events import ActionOutput, Progress

from .helpers import comm_messages, parse, status, stream
from .test_xss import (
    HTML_ELEMENTS,
    PAYLOADS,
    SVG_ELEMENTS,
    check_tree,
    hostile_state,
    split_pictures,
)

ROOT = Path(__file__).resolve().parents[2]


class Clock:
    """A fake ``time.monotonic``: moves only when told."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def step(self, seconds: float) -> float:
        self.now += seconds
        return self.now


@dataclass
class Message:
    at: float
    type: str
    comm_id: str
    size: int  # bytes of the message's JSON data, as the kernel would encode it


@dataclass
class Recorder:
    """Every comm message the widgets would send, stamped with the fake clock."""

    clock: Clock
    messages: list[Message] = field(default_factory=list)

    def since(self, start: float) -> list[Message]:
        return [m for m in self.messages if m.at >= start]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch, clock: Clock) -> Recorder:
    record = Recorder(clock)

    class RecordingComm(BaseComm):  # type: ignore[misc]
        def publish_msg(self, msg_type: str, data: Any = None, *args: Any, **kw: Any) -> None:
            size = len(json.dumps(data, ensure_ascii=False).encode())
            record.messages.append(Message(clock(), msg_type, self.comm_id, size))

    monkeypatch.setattr(comm, "create_comm", RecordingComm)
    return record


def make_view(clock: Clock, **kw: Any) -> WidgetView:
    """A view, and half a second for its message budget to recover from creating it."""
    view = WidgetView(model="test-model", clock=clock, **kw)
    clock.step(0.5)
    return view


def html_values(widget: Any) -> Iterator[str]:
    """Every HTML value in a widget tree (parts, pieces and tails)."""
    if isinstance(widget, ipywidgets.HTML | ipywidgets.HTMLMath):
        yield widget.value
    for child in getattr(widget, "children", ()):
        yield from html_values(child)


def part(view: WidgetView, css_class: str) -> Any:
    """The widget carrying ``css_class`` in the view (which must have it)."""
    found = maybe_part(view, css_class)
    assert found is not None, f"the view has no {css_class} yet"
    return found


def maybe_part(view: WidgetView, css_class: str) -> Any:
    """The widget carrying ``css_class``, or None while the view has not made it."""
    found = [w for w in walk(view.widget) if css_class in w._dom_classes]
    assert len(found) <= 1, css_class
    return found[0] if found else None


def settle(view: WidgetView, clock: Clock, seconds: float = 1.0) -> None:
    """Redraw at the bridge's 25 Hz for ``seconds`` with nothing new: long enough for the
    message budget to let every pending part out."""
    for _ in range(round(seconds * 25)):
        clock.step(1 / 25)
        view.redraw()


def walk(widget: Any) -> Iterator[Any]:
    yield widget
    for child in getattr(widget, "children", ()):
        yield from walk(child)


def picture(view: WidgetView) -> str:
    """The whole live graph, as a front end asking for the widget's state gets it."""
    value: str = part(view, "cortex-graph").get_state()["value"]
    return value


def text_of(widget: Any) -> str:
    return "".join(html_values(widget))


def count_changes(widget: Any) -> list[str]:
    """A list that grows by the trait name on every synced change of ``widget``'s value."""
    changes: list[str] = []
    widget.observe(lambda change: changes.append(change["name"]), names="value")
    return changes


# ----------------------------------------------------------------------------- parts


def test_a_run_fills_every_part(clock: Clock) -> None:
    view = make_view(clock)
    header = part(view, "cortex-header")
    assert 'data-phase="streaming"' in header.value and "test-model" in header.value
    view.apply(parse())
    settle(view, clock)  # within a second of arriving, within the message budget
    assert "I will look up cats and dogs, then compare." in text_of(part(view, "cortex-thought"))
    response = text_of(part(view, "cortex-response"))
    assert "<h1>Cats and dogs</h1>" in response
    assert 'data-lang="python"' in response
    graph = picture(view)
    assert all(f'data-id="{i}"' in graph for i in ("a1", "a2", "a3"))
    assert 'data-phase="running actions"' in header.value  # the final response closed it


def test_a_finished_thought_reads_from_its_first_line(clock: Clock) -> None:
    """While it streams the thought box is pinned to its newest line; a finished one that
    stayed pinned hid its beginning (issue 19 §17)."""
    view = make_view(clock)
    lines = "".join(f"step {i} of a long plan\n" for i in range(40))
    view.apply(parse(f"<thought>{lines}</thought><response>ok</response>"))
    settle(view, clock)
    box = part(view, "cortex-thought")
    assert box.layout.flex_flow == "column-reverse"  # live: the newest line shows
    view.finish()
    assert box.layout.flex_flow == "column"  # finished: the first line shows
    assert "step 0 of a long plan" in text_of(box)


def test_a_long_unbroken_token_wraps_in_the_response(clock: Clock) -> None:
    """A URL or a hash longer than the cell is wide wraps (issue 19 §14)."""
    url = "https://example.org/" + "a1b2c3d4" * 40
    view = make_view(clock)
    view.apply(parse(f"<response>See {url}</response>"))
    settle(view, clock)
    shown = text_of(part(view, "cortex-response"))
    assert "overflow-wrap:anywhere" in shown
    saved = view.finish().static[0]["text/html"]
    assert "overflow-wrap:anywhere" in saved


def test_model_text_is_escaped_in_the_thought(clock: Clock) -> None:
    view = make_view(clock)
    view.apply(parse('<thought>if a < b & c > d: say "hi"</thought>'))
    view.redraw()
    thought = text_of(part(view, "cortex-thought"))
    assert "if a &lt; b &amp; c &gt; d: say &quot;hi&quot;" in thought


def test_a_new_view_is_its_header_alone(clock: Clock) -> None:
    """Every widget is a comm_open: parts are made when they have something to show."""
    view = make_view(clock)
    view.redraw()
    assert [w._dom_classes for w in view.widget.children] == [("cortex-header",)]


def test_redraw_says_when_the_budget_held_something_back(clock: Clock) -> None:
    view = WidgetView(model="test-model", clock=clock)  # creating it spent the burst
    view.apply(parse("<thought>hmm</thought>"))
    assert view.redraw() is True and maybe_part(view, "cortex-thought") is None
    clock.step(0.36)  # creation overdrew by one; then six messages: the thought box and text
    assert view.redraw() is True  # the header's token count still waits
    assert "hmm" in text_of(part(view, "cortex-thought"))
    clock.step(0.05)
    assert view.redraw() is False
    assert "~1 tokens" in part(view, "cortex-header").value


def test_the_graph_appears_with_the_first_action(clock: Clock) -> None:
    view = make_view(clock)
    view.apply(parse("<thought>thinking about it</thought>"))
    settle(view, clock)
    assert maybe_part(view, "cortex-graph") is None
    view.apply([ActionStart(id="x", type="tool", mode="async")])
    clock.step(0.04)
    view.redraw()
    graph = picture(view)
    assert 'data-id="x"' in graph and "starting" in graph


def test_thought_and_response_appear_when_they_have_text(clock: Clock) -> None:
    view = make_view(clock)
    view.apply(parse("<response>Hello</response>"))
    view.redraw()
    assert maybe_part(view, "cortex-thought") is None
    assert "Hello" in text_of(part(view, "cortex-response"))
    # In the order of the page, whatever order they were made in.
    view.apply(parse("<thought>hmm</thought>"))
    settle(view, clock)
    classes = [w._dom_classes[-1] for w in view.widget.children]
    assert classes == ["cortex-header", "cortex-thought", "cortex-response"]


def test_a_failure_is_shown_once_in_its_nodes_panel(clock: Clock) -> None:
    # issue 37: the failed node's inspector opens by itself; no list repeats it
    view = make_view(clock)
    view.apply(parse('<action id="a1">{"name": "search"}</action>'))
    view.apply([status("a1", "running", clock.now)])
    settle(view, clock, 0.5)
    assert maybe_part(view, "cortex-details") is None
    view.apply([status("a1", "failed", clock.now, error="ValueError: bad query")])
    settle(view, clock, 0.5)
    details = maybe_part(view, "cortex-details")
    assert details is None or "ValueError: bad query" not in details.value
    assert "ValueError: bad query" in part(view, "cortex-inspector").value


def test_stream_closed_then_end_move_the_state_word(clock: Clock) -> None:
    view = make_view(clock)
    header = part(view, "cortex-header")
    view.apply(parse("<thought>x</thought>"))
    settle(view, clock)
    view.stream_closed()
    # Well inside the slow interval (0.25 s): a new state word goes out as soon as the
    # budget has a message for it (one every 0.05 s).
    clock.step(0.05)
    view.redraw()
    assert 'data-phase="running actions"' in header.value
    view.apply([End("completed", clock.now)])
    clock.step(0.05)
    view.redraw()
    assert 'data-phase="done"' in header.value and "✓ done" in header.value


@pytest.mark.parametrize(
    ("events", "phase"),
    [
        ([End("failed", 101.0)], "failed"),
        ([Interrupt("cancelled", 101.0)], "interrupted"),
        # A limit stopped it: the header says which, not "interrupted".
        ([Interrupt("token limit", 101.0), End("truncated", 101.0)], "truncated"),
        ([Interrupt("turn limit", 101.0), End("turn_limit", 101.0)], "turn limit"),
        ([Interrupt("stream failed", 101.0), End("interrupted", 101.0)], "interrupted"),
    ],
)
def test_failed_and_interrupted_runs_say_so(clock: Clock, events: list[Any], phase: str) -> None:
    view = make_view(clock)
    view.apply(events)
    view.redraw()
    assert f'data-phase="{phase}"' in part(view, "cortex-header").value


# ----------------------------------------------------------------------------- re-sending


def test_unchanged_parts_are_not_re_sent(clock: Clock) -> None:
    view = make_view(clock)
    view.apply(parse())
    view.apply([End("completed", clock.now)])
    settle(view, clock)
    counts = {name: count_changes(part(view, name)) for name in ("cortex-header", "cortex-graph")}
    pieces = [
        count_changes(w)
        for w in walk(view.widget)
        if isinstance(w, ipywidgets.HTML | ipywidgets.HTMLMath)
    ]
    for _ in range(50):
        clock.step(0.04)
        view.apply([])
        view.redraw()
    assert counts == {"cortex-header": [], "cortex-graph": []}
    assert all(not changes for changes in pieces)


def test_only_the_thought_moves_while_a_thought_streams(clock: Clock) -> None:
    view = make_view(clock)
    view.apply(parse('<action id="a1">{"name": "search"}</action><thought>start'))
    settle(view, clock)
    graph = count_changes(part(view, "cortex-graph"))
    thought_tail = [
        w
        for w in walk(part(view, "cortex-thought"))
        if isinstance(w, ipywidgets.HTML | ipywidgets.HTMLMath)
    ]
    thought = count_changes(thought_tail[-1])
    parser = Parser("cortex")
    parser.feed('<action id="a1">{"name": "search"}</action><thought>start')
    for word in range(10):
        clock.step(0.04)
        view.apply(parser.feed(f" word{word}"))
        view.redraw()
    assert 8 <= len(thought) <= 10  # one a redraw, within the view's message budget
    assert graph == [] and maybe_part(view, "cortex-response") is None


def test_clocks_tick_at_most_slow_hz_and_durations_in_the_page(clock: Clock) -> None:
    view = make_view(clock, slow_hz=4.0)
    view.apply(parse('<action id="a1">{"name": "search"}</action>'))
    view.apply([status("a1", "running", clock.now)])
    view.redraw()
    header = count_changes(part(view, "cortex-header"))
    graph = count_changes(part(view, "cortex-graph"))
    for _ in range(50):  # two seconds of redraws at 25 Hz with nothing new but time
        clock.step(1 / 25)
        view.apply([])
        view.redraw()
    assert 6 <= len(header) <= 9  # 4 a second, give or take the ends
    # The running duration ticks in the page (live_graph.js), from the run's clock.
    assert graph == []
    since = re.search(r'data-cxj-since="([\d.]+)"', picture(view))
    assert since is not None and float(since.group(1)) == pytest.approx(0.5, abs=0.01)


def test_values_are_read_only_when_the_response_is_redrawn(clock: Clock) -> None:
    calls: list[int] = []

    def values() -> Mapping[str, Any]:
        calls.append(1)
        return {"cats": "3 cats"}

    view = make_view(clock, values=values)
    view.apply(parse("<thought>hmm</thought>"))
    settle(view, clock)
    assert calls == []
    view.apply(parse("<response>We found $cats.</response>"))
    settle(view, clock)
    assert len(calls) == 1
    assert "We found 3 cats." in text_of(part(view, "cortex-response"))


def test_a_broken_namespace_does_not_stop_the_answer(clock: Clock) -> None:
    def values() -> Mapping[str, Any]:
        raise RuntimeError("namespace gone")

    view = make_view(clock, values=values)
    view.apply(parse("<response>We found $cats.</response>"))
    view.redraw()
    shown = html.unescape(re.sub(r"<[^>]+>", "", text_of(part(view, "cortex-response"))))
    assert "We found $cats." in shown  # left as written (however the renderer marks a $)


# ----------------------------------------------------------------------------- pieces


def inner(value: str) -> str:
    """A piece's content without its wrapping ``<div style=...>``."""
    return value[value.index(">") + 1 : -len("</div>")] if value else ""


def test_a_long_thought_is_sent_in_pieces_that_add_up_to_it(clock: Clock) -> None:
    thought = "\n".join(f"line {i} <of> the thought & more" for i in range(400))
    view = make_view(clock)
    stream(view, clock, f"<thought>{thought}</thought>")
    box = part(view, "cortex-thought")
    values = [v for v in html_values(box)]
    assert len(values) > 5  # several settled pieces and the tail
    shown_text = "".join(html.unescape(inner(v)) for v in values)
    assert shown_text == thought


def test_an_endless_thought_line_is_still_sent_in_pieces(clock: Clock) -> None:
    thought = " ".join(f"word{i}" for i in range(8000))  # ~70 KB, no line break
    view = make_view(clock)
    stream(view, clock, f"<thought>{thought}</thought>", chunk=400)
    values = list(html_values(part(view, "cortex-thought")))
    assert len(values) > 3
    assert max(len(value) for value in values[-1:]) < 10 * 1024  # the tail stays small
    assert "".join(html.unescape(inner(v)) for v in values) == thought


def test_the_response_pieces_equal_a_full_render(clock: Clock) -> None:
    body = "\n\n".join(
        f"## Part {i}\n\nSome *text* for part {i}, see $r.\n\n```python\nx = {i}\n```"
        for i in range(60)
    )
    values = {"r": "first"}
    view = make_view(clock, values=lambda: values)
    parser = Parser("cortex")
    text = f"<response>{body}</response>"
    for start in range(0, len(text), 64):
        if start >= len(text) // 2:
            values["r"] = "second"  # re-renders everything: the pieces are replaced
        clock.step(0.04)
        view.apply(parser.feed(text[start : start + 64]))
        view.redraw()
        if start == len(text) // 2 // 64 * 64 - 64:
            pieces_before = list(html_values(part(view, "cortex-response")))
    view.apply(parser.close())
    view.finish()
    values_shown = list(html_values(part(view, "cortex-response")))
    assert len(pieces_before) >= 3 and len(values_shown) >= 2
    assert not set(pieces_before[:-1]) & set(values_shown)  # the old pieces are gone
    shown_html = "".join(inner(value) for value in values_shown)
    assert shown_html == render_markdown(view.state.body, values)
    assert "see second." in shown_html and "first" not in shown_html


def test_a_value_arriving_replaces_only_the_pieces_after_it(clock: Clock) -> None:
    parts = [f"## Part {i}\n\nSome *text* for part {i}." for i in range(80)]
    parts[60] += " The answer is $late."
    values: dict[str, str] = {}
    view = make_view(clock, values=lambda: values)
    parser = Parser("cortex")
    action = '<action id="a1">{"name": "slow", "output_key": "late"}</action>'
    text = action + "<response>" + "\n\n".join(parts) + "\n\n"
    for start in range(0, len(text), 64):
        clock.step(0.1)  # a slow model: a piece every half second
        view.apply(parser.feed(text[start : start + 64]))
        view.redraw()
    box = part(view, "cortex-response")
    before = list(box.children[:-1])
    assert len(before) >= 4
    values["late"] = "42"
    view.apply([status("a1", "done", clock.now, output="42")])
    settle(view, clock)
    after = list(box.children)
    kept = [piece for piece in before if piece in after]
    gone = [piece for piece in before if piece not in after]
    assert kept and gone and kept == before[: len(kept)]  # the start stays as it was
    assert all(piece.comm is None for piece in gone)  # closed, within the budget
    shown_html = "".join(inner(value) for value in html_values(box))
    assert shown_html == render_markdown(view.state.body, values)
    assert "The answer is 42." in shown_html


def test_code_blocks_keep_their_colours_in_a_dark_theme() -> None:
    # JupyterLab's dark theme paints a bare <code> inside <pre> black: ours carries a style.
    rendered = IncrementalMarkdown().render("`a<code>b`\n\n```\n<code>\n```\n")
    assert rendered.count('<code style="background:none;color:inherit') == 1
    assert "&lt;code&gt;" in rendered


# ----------------------------------------------------------------------------- safety


@pytest.mark.parametrize("payload", PAYLOADS)
def test_no_widget_value_lets_model_text_through(clock: Clock, payload: str) -> None:
    view = make_view(clock)
    view.state = hostile_state(payload)  # every field the model can write, hostile
    view.redraw()
    saved = view.finish()
    data, _ = saved.static
    values = [v for v in html_values(view.widget) if v]
    assert len(values) >= 5
    assert maybe_part(view, "cortex-inspector") is not None  # a failed node: opened
    # The copy's own <style> (SWITCH_CSS) and graph picture, then what is left.
    copy, pictures = split_pictures(data["text/html"].split("</style>", 1)[1])
    assert len(pictures) == 1
    for svg in pictures:
        check_tree(ET.fromstring(svg), SVG_ELEMENTS)
    for value in [*values, copy, picture(view)]:
        lowered = value.lower()
        for raw in ("<script", "<img", "<iframe", "<svg onload", "\x00", "\x1b"):
            assert raw not in lowered, raw
        check_tree(ET.fromstring(f"<root>{value}</root>"), HTML_ELEMENTS)
    json.dumps(saved.live[1])


def test_text_plain_has_no_control_characters(clock: Clock) -> None:
    view = make_view(clock)
    view.state = hostile_state("\x00\x1b[31m red")
    data, _ = view.finish().static
    assert "\x00" not in data["text/plain"] and "\x1b" not in data["text/plain"]


def test_finish_returns_the_widget_and_a_static_copy(
    clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret-key")
    view = make_view(clock)
    view.apply(parse())
    view.apply([status("a1", "running", clock.now), status("a1", "done", clock.now + 0.2)])
    view.apply([End("completed", clock.now + 0.3)])
    clock.step(0.5)
    saved = view.finish()
    # The view's own output: the widget, an empty text, the run's record.
    live, metadata = saved.live
    assert live == {WIDGET_MIME: live[WIDGET_MIME], "text/plain": ""}
    assert live[WIDGET_MIME]["model_id"] == view.widget.model_id
    # The static copy, a second output with no widget in it.
    data, _ = saved.static
    assert set(data) == {"text/html", "text/plain"}
    assert "<script" not in data["text/html"].lower()
    assert "Cats and dogs" in data["text/html"] and "Cats and dogs" in data["text/plain"]
    assert 'class="cortex-static cortex-run"' in data["text/html"]
    assert 'src="data:image/svg+xml;base64,' in data["text/html"]
    record = metadata["cortex"]
    assert record["model"] == "test-model" and record["status"] == "done"
    assert [a["id"] for a in record["actions"]] == ["a1", "a2", "a3"]
    everything = json.dumps([data, metadata])
    assert "sk-test-secret-key" not in everything and "api_key" not in everything.lower()
    assert 'data-phase="done"' in part(view, "cortex-header").value


def test_widget_view_is_exported_without_importing_ipywidgets() -> None:
    code = (
        "import sys, cortex_jupyter.display as d\n"
        "assert 'ipywidgets' not in sys.modules\n"
        "assert d.WidgetView.__module__ == 'cortex_jupyter.display.widget'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ----------------------------------------------------------------------------- traffic


def load_bench() -> ModuleType:
    """bench/display_bench.py (a script, not a package), for its workload."""
    if "display_bench" in sys.modules:
        return sys.modules["display_bench"]
    spec = importlib.util.spec_from_file_location("display_bench", ROOT / "bench/display_bench.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["display_bench"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def stream_bench_run(
    view: WidgetView, clock: Clock, rate: float, chunk: int = 8, seed: int = 1
) -> int:
    """The bench's run (a thought with 10 actions, a ~16 KB answer) at ``rate`` chunks/s;
    the view applies and redraws every 1/25 s, as the session's bridge does. Returns the
    number of chunks."""
    rng = random.Random(seed)
    text, _ = load_bench().protocol_text(rng)
    chunks = [text[i : i + chunk] for i in range(0, len(text), chunk)]
    parser = Parser("cortex")
    start, pending, batch = clock.now, [], []
    next_redraw = start

    def redraw() -> None:
        due = sorted((e for e in pending if e.time <= clock.now), key=lambda e: e.time)
        pending[:] = [e for e in pending if e.time > clock.now]
        view.apply(batch + due)
        batch.clear()
        view.redraw()

    for index, piece in enumerate(chunks):
        clock.now = start + index / rate
        events = parser.feed(piece)
        for event in events:
            if event.kind == "action":  # each action runs 0.3-1.5 s, from its closing tag
                began = clock.now + 0.02
                ended = began + rng.uniform(0.3, 1.5)
                pending.append(ActionStatus(event.action.id, "running", began, attempt=1))
                pending.append(ActionStatus(event.action.id, "done", ended, 1, output="'ok'"))
        batch.extend(events)
        if clock.now >= next_redraw:
            next_redraw += 1 / 25
            redraw()
    batch.extend(parser.close())
    view.stream_closed()
    while pending:
        clock.step(1 / 25)
        redraw()
    view.apply([End("completed", clock.now)])
    view.redraw()
    return len(chunks)


def busiest_second(messages: list[Message]) -> int:
    times = sorted(m.at for m in messages)
    most, first = 0, 0
    for last, at in enumerate(times):
        while at - times[first] >= 1.0:
            first += 1
        most = max(most, last - first + 1)
    return most


@pytest.mark.parametrize(("rate", "limit"), [(2000.0, 1_000_000), (250.0, 1_000_000)])
def test_a_whole_streamed_run_stays_within_the_iopub_budget(
    recorder: Recorder, clock: Clock, rate: float, limit: int
) -> None:
    values = {f"r{i}": f"result {i}" for i in range(10)}
    created = clock.now
    view = WidgetView(model="test-model", clock=clock, values=lambda: values)
    chunks = stream_bench_run(view, clock, rate)
    data, _ = view.finish().live
    # The session shows the view (display_data) and ends with the static copy's display
    # and the view's update: all count against the view's messages, as in the kernel.
    displays = [
        Message(created, "display_data", "", 0),
        Message(clock.now, "display_data", "", 0),
        Message(clock.now, "update", "", 0),
    ]
    messages = recorder.messages + displays
    total = sum(m.size for m in recorder.messages)
    print(
        f"\n{chunks} chunks at {rate:.0f}/s over {clock.now - created:.2f} s: "
        f"{len(messages)} messages, {total:,} bytes; busiest second "
        f"{busiest_second(messages)} messages; final response "
        f"{len(text_of(part(view, 'cortex-response'))):,} chars of HTML"
    )
    assert chunks >= 2000
    assert total < limit
    # Issue 6: at most 30 messages a second per view, counting the view's creation.
    assert busiest_second(messages) <= 30
    assert view.sent == len(messages)  # the budget is charged with every real message
    assert "Section" in text_of(part(view, "cortex-response"))
    assert data[WIDGET_MIME]["model_id"] == view.widget.model_id


def test_the_budget_holds_every_second_whatever_the_rate(recorder: Recorder, clock: Clock) -> None:
    """At 20,000 chunks a second the view falls behind but never sends faster; then the
    final frame catches up."""
    view = WidgetView(model="test-model", clock=clock)
    stream_bench_run(view, clock, 20_000.0, chunk=1)
    streaming = busiest_second(recorder.messages)
    view.finish()
    assert streaming <= BURST + MAX_MESSAGES
    assert "Section" in text_of(part(view, "cortex-response"))


def test_re_sending_the_whole_answer_would_cost_far_more(
    recorder: Recorder, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pieces are what keeps a slow stream cheap: without them (one growing value)
    the same run at a realistic 250 chunks/s sends several times the bytes."""
    values = {f"r{i}": f"result {i}" for i in range(10)}
    stream_bench_run(make_view(clock, values=lambda: values), clock, 250.0)
    with_pieces = sum(m.size for m in recorder.messages)
    recorder.messages.clear()
    monkeypatch.setattr("cortex_jupyter.display.widget.FREEZE_CHARS", 10**9)
    stream_bench_run(make_view(clock, values=lambda: values), clock, 250.0)
    without = sum(m.size for m in recorder.messages)
    print(f"\n250 chunks/s: {with_pieces:,} bytes with pieces, {without:,} without")
    assert with_pieces * 4 < without


def test_header_counts_follow_node_statuses_at_once(clock: Clock) -> None:
    view = make_view(clock, slow_hz=1.0)
    view.apply(parse('<action id="a1">{"name": "one"}</action>'))
    view.apply([status("a1", "running", clock.now)])
    view.redraw()
    assert "1 running" in text_of(part(view, "cortex-header"))
    clock.step(0.05)  # far less than 1/slow_hz: the clock would not tick yet
    view.apply([status("a1", "done", clock.now)])
    view.redraw()
    header = text_of(part(view, "cortex-header"))
    assert "1 done" in header and "running" not in header.split("</span>", 1)[1]


def test_the_text_copy_fills_dollar_names_like_the_view(clock: Clock) -> None:
    view = WidgetView(model="m", clock=clock, values=lambda: {"answer": 42})
    view.apply(parse("<response>The answer is $answer.</response>"))
    view.apply([End("completed", clock.now)])
    data, _ = view.finish().static
    assert "The answer is 42." in data["text/plain"]


# ----------------------------------------------------------------------------- the live graph


class FrontEnd:
    """What live_graph.js does with the graph's patches: pieces kept by key."""

    def __init__(self, graph: Any) -> None:
        self.pieces: dict[str, str] = {}
        self.size = (0, 0)
        self.apply(graph.get_state()["value"])
        graph.observe(lambda change: self.apply(change["new"]), names="value")

    def apply(self, value: str) -> None:
        root = ET.fromstring(f'<svg xmlns="http://www.w3.org/2000/svg">{value}</svg>')
        for element in root:
            if element.get("data-cxj-frame"):
                if element.get("data-cxj-frame") == "full":
                    self.pieces.clear()
                self.size = (int(element.get("data-w", 0)), int(element.get("data-h", 0)))
            elif element.get("data-gone") is not None:
                self.pieces.pop(element.get("data-key", ""), None)
            else:
                self.pieces[element.get("data-key", "")] = ET.tostring(element, "unicode")

    def statuses(self) -> dict[str, str]:
        found = {}
        for piece in self.pieces.values():
            match = re.search(r'data-id="([^"]+)" data-status="([^"]+)"', piece)
            if match and "cxj-node" in piece.split(">", 1)[0]:
                found[match.group(1)] = match.group(2)
        return found


def many(view: WidgetView, count: int, name: str = "fetch") -> None:
    view.apply(
        parse(
            "".join(
                f'<action id="{name}{i}">{{"name": "{name}", "parameters": {{"i": {i}}}}}</action>'
                for i in range(count)
            ),
            chunk=500,
        )
    )


def test_graph_updates_carry_only_what_changed(clock: Clock) -> None:
    view = make_view(clock)
    many(view, 8)  # one column, no groups: eight boxes
    settle(view, clock)
    graph = part(view, "cortex-graph")
    front = FrontEnd(graph)
    sent: list[str] = []
    graph.observe(lambda change: sent.append(change["new"]), names="value")
    view.apply([status("fetch3", "running", clock.now, attempt=1)])
    settle(view, clock, 0.2)
    (update,) = sent
    assert update.count('data-key="n:') == 1 and 'data-id="fetch3"' in update
    assert len(update) < 2_000
    assert front.statuses()["fetch3"] == "running"
    assert front.pieces == FrontEnd(graph).pieces  # patches add up to the whole picture


def test_a_crowded_level_is_grouped_live_and_patches_stay_small(clock: Clock) -> None:
    view = make_view(clock)
    many(view, 60)
    settle(view, clock)
    graph = part(view, "cortex-graph")
    front = FrontEnd(graph)
    sizes: list[int] = []
    graph.observe(lambda change: sizes.append(len(change["new"])), names="value")
    for i in range(60):
        view.apply([status(f"fetch{i}", "running", clock.now, attempt=1)])
        clock.step(0.01)
        view.redraw()
    view.apply([status("fetch7", "failed", clock.now, attempt=1, error="refused")])
    settle(view, clock)
    assert max(sizes) < 4_000 and sum(sizes) < 60_000
    assert set(front.pieces) >= {"g:0:fetch", "n:fetch7", "defs"}
    assert front.statuses() == {"fetch7": "failed"}
    assert front.pieces == FrontEnd(graph).pieces
    assert front.size[1] < 300  # not a 5,000 px column


def test_a_patch_too_big_for_one_message_goes_in_parts(clock: Clock) -> None:
    view = make_view(clock)
    many(view, 8, "a")
    many(view, 8, "b")  # 16 boxes in 2 columns... and each gets a long error
    settle(view, clock)
    graph = part(view, "cortex-graph")
    front = FrontEnd(graph)
    sizes: list[int] = []
    graph.observe(lambda change: sizes.append(len(change["new"])), names="value")
    long = "E" * 590
    view.apply([status(f"{n}{i}", "failed", clock.now, error=long) for n in "ab" for i in range(8)])
    clock.step(0.1)
    assert view.redraw() is True  # part of it waits for the next message
    settle(view, clock)
    assert len(sizes) >= 2 and max(sizes) <= 16_000 + 2_000
    assert set(front.statuses().values()) == {"failed"} and len(front.statuses()) == 16


def test_clicks_open_close_and_expand(clock: Clock) -> None:
    view = make_view(clock)
    view.apply(parse())
    view.apply([status("a1", "done", clock.now, attempt=1, output="{'hits': 3}")])
    settle(view, clock)
    graph = part(view, "cortex-graph")
    graph._handle_custom_msg({"act": "select", "id": "a1"}, [])  # as the page sends it
    inspector = part(view, "cortex-inspector")
    assert view.selected == "a1" and 'data-id="a1"' in inspector.value
    assert "{&#x27;hits&#x27;: 3}" in inspector.value
    assert "cxj-selected" in picture(view)
    graph._handle_custom_msg({"act": "select", "id": "a1"}, [])  # again: closed
    assert view.selected is None and inspector.value == ""
    graph._handle_custom_msg({"act": "select", "id": "a2"}, [])
    graph._handle_custom_msg({"act": "close", "id": ""}, [])
    assert inspector.value == ""
    graph._handle_custom_msg({"act": "select", "id": "<nobody>"}, [])
    graph._handle_custom_msg({"act": "explode"}, [])
    graph._handle_custom_msg(["not", "a", "dict"], [])
    assert view.selected is None
    view.finish()  # after the run the view still answers clicks, at once
    graph._handle_custom_msg({"act": "select", "id": "a2"}, [])
    assert 'data-id="a2"' in inspector.value


def test_a_group_expands_and_folds_on_click(clock: Clock) -> None:
    view = make_view(clock)
    many(view, 12)
    settle(view, clock)
    graph = part(view, "cortex-graph")
    assert "cxj-chip" not in picture(view)
    graph._handle_custom_msg({"act": "toggle", "id": "g:0:fetch"}, [])
    assert picture(view).count('class="cxj-chip"') == 12
    graph._handle_custom_msg({"act": "select", "id": "fetch5"}, [])  # a chip
    assert view.selected == "fetch5"
    graph._handle_custom_msg({"act": "toggle", "id": "g:0:fetch"}, [])
    assert "cxj-chip" not in picture(view)


def test_a_failed_action_opens_its_inspector_unless_the_person_chose(clock: Clock) -> None:
    view = make_view(clock)
    view.apply(parse())
    view.apply([status("a3", "failed", clock.now, error="ValueError: no model")])
    settle(view, clock)
    assert view.selected == "a3"
    assert "ValueError: no model" in part(view, "cortex-inspector").value
    part(view, "cortex-graph")._handle_custom_msg({"act": "close"}, [])
    view.apply([status("a2", "failed", clock.now, error="another")])
    settle(view, clock)
    assert view.selected is None  # closed by the person: it stays closed


def test_the_inspector_follows_its_action_live(clock: Clock) -> None:
    view = make_view(clock)
    view.apply(parse('<action id="g">{"name": "crawl"}</action>'))
    view.apply([status("g", "running", clock.now, attempt=1)])
    settle(view, clock)
    view.select("g")
    inspector = part(view, "cortex-inspector")
    changes = count_changes(inspector)
    for i in range(1, 6):
        view.apply([ActionOutput("g", clock.now, stdout=f"line {i}\n", progress=Progress(i, 5))])
        settle(view, clock, 0.2)
    assert "line 5" in inspector.value and "5/5" in inspector.value
    assert 5 <= len(changes) <= 6
    settle(view, clock)  # nothing new: nothing sent
    assert len(changes) <= 6


def test_the_inspector_reads_the_run_record(clock: Clock) -> None:
    class Table:
        def _repr_html_(self) -> str:
            return "<table><tr><td>cell</td></tr></table><script>alert(1)</script>"

    node = type("Node", (), {"status": "done", "output": Table(), "resolved": {"q": 1}})
    record = type("Run", (), {"actions": {"a1": node}})
    view = make_view(clock, record=lambda: record)
    view.apply(parse())
    view.apply([status("a1", "done", clock.now, attempt=1, output="<Table>")])
    settle(view, clock)
    view.select("a1")
    value = part(view, "cortex-inspector").value
    assert "<td>cell</td>" in value and "<script" not in value


def test_approve_and_deny_call_decide_and_the_rows_leave(clock: Clock) -> None:
    answers: list[tuple[str, bool]] = []

    def decide(node_id: str, approved: bool) -> bool:
        answers.append((node_id, approved))
        return True

    view = make_view(clock, decide=decide)
    view.apply(
        parse('<action id="m1">{"name": "mail"}</action><action id="m2">{"name": "rm"}</action>')
    )
    view.apply(
        [
            status("m1", "awaiting", clock.now, parameters='{"to": "<bob>"}'),
            status("m2", "awaiting", clock.now, parameters='{"path": "/"}'),
        ]
    )
    settle(view, clock)
    rows = [w for w in walk(part(view, "cortex-approvals")) if "cortex-approval" in w._dom_classes]
    assert len(rows) == 2 and "&lt;bob&gt;" in rows[0].children[0].value
    approve, deny = rows[0].children[1], rows[1].children[2]
    approve.click()
    deny.click()
    assert answers == [("m1", True), ("m2", False)]
    assert approve.description == "Approved" and deny.description == "Denied"
    assert all(b.disabled for row in rows for b in row.children[1:])
    view.apply([status("m1", "running", clock.now), status("m2", "skipped", clock.now)])
    settle(view, clock)
    assert part(view, "cortex-approvals").children == ()
    assert all(w.comm is None for row in rows for w in walk(row))  # closed, in the budget


def test_an_answer_nobody_waits_for_and_a_nested_action(clock: Clock) -> None:
    answers: list[str] = []
    view = make_view(clock, decide=lambda node_id, ok: answers.append(node_id) or False)
    view.apply(parse('<action type="agent" id="ag">{"name": "helper"}</action>'))
    view.apply([Nested("ag", status("t1", "awaiting", clock.now, name="mail"))])
    settle(view, clock)
    (row,) = part(view, "cortex-approvals").children
    row.children[1].click()
    assert answers == ["ag/t1"]  # its path: the sub-run's "t1" is not the caller's "t1"
    assert row.children[1].description == "Not waiting"


def awaiting_mail(clock: Clock, parameters: str) -> tuple[WidgetView, list[str]]:
    """A view showing action a1 (``mail``) awaiting approval; the node ids it answers."""
    answers: list[str] = []
    view = make_view(clock, decide=lambda node_id, ok: answers.append(node_id) or True)
    view.apply(parse('<action id="a1">{"name": "mail"}</action>'))
    view.apply([status("a1", "awaiting", clock.now, parameters=parameters)])
    settle(view, clock)
    return view, answers


def test_a_stale_row_answers_nothing(clock: Clock) -> None:
    # The node was answered elsewhere (or timed out) before the row left the page: a
    # click on the row still shown must not answer anything.
    view, answers = awaiting_mail(clock, parameters='{"to": "boss@"}')
    (row,) = part(view, "cortex-approvals").children
    view.apply([status("a1", "skipped", clock.now, error="denied: not approved within 1 s")])
    row.children[1].click()  # before the next redraw takes the row away
    assert answers == []
    assert row.children[1].description == "Not waiting"
    assert all(b.disabled for b in row.children[1:])


def test_a_row_whose_run_ended_is_disabled_and_answers_nothing(clock: Clock) -> None:
    view, answers = awaiting_mail(clock, parameters="{}")
    view.finish()  # the final frame, and no end came: the run failed, nothing waits
    (row,) = part(view, "cortex-approvals").children
    assert all(b.disabled for b in row.children[1:])
    row.children[1].click()
    assert answers == []


def test_a_fire_and_forget_action_stays_answerable_after_its_run_ended(clock: Clock) -> None:
    answers: list[str] = []
    view = make_view(clock, decide=lambda node_id, ok: answers.append(node_id) or True)
    view.apply(
        parse(
            '<action id="a1">{"name": "mail"}</action>'
            '<action id="bg" mode="fire_and_forget">{"name": "mail"}</action>'
        )
    )
    view.apply([status(i, "awaiting", clock.now, parameters="{}") for i in ("a1", "bg")])
    settle(view, clock)
    rows = dict(zip(("a1", "bg"), part(view, "cortex-approvals").children, strict=True))
    view.apply([End("completed", clock.now)])  # (the runtime settles a1 before its end)
    view.finish()  # the cell ends; the fire_and_forget action still waits
    assert all(b.disabled for b in rows["a1"].children[1:])
    assert not any(b.disabled for b in rows["bg"].children[1:])
    rows["a1"].children[1].click()
    rows["bg"].children[1].click()
    assert answers == ["bg"]


def test_stop_calls_stop_and_leaves_when_the_run_ends(recorder: Recorder, clock: Clock) -> None:
    stops: list[int] = []
    view = make_view(clock, stop=lambda: stops.append(1))
    button = part(view, "cortex-stop")
    button.click()
    assert stops == [1] and button.disabled and button.description == "Stopping…"
    view.apply([Interrupt("cancelled", clock.now), End("cancelled", clock.now)])
    settle(view, clock)
    assert maybe_part(view, "cortex-stop") is None and button.comm is None
    view.finish()
    assert view.sent == len(recorder.messages) + 3  # + the display, the copy's, the update


def test_every_message_is_counted_with_buttons_and_clicks(recorder: Recorder, clock: Clock) -> None:
    view = WidgetView(model="m", clock=clock, decide=lambda i, a: True, stop=lambda: None)
    clock.step(0.5)
    many(view, 20)
    view.apply([status("fetch1", "awaiting", clock.now, parameters="{}")])
    settle(view, clock)
    part(view, "cortex-approve").click()
    part(view, "cortex-graph")._handle_custom_msg({"act": "select", "id": "fetch2"}, [])
    view.apply([status("fetch1", "failed", clock.now, error="x"), End("completed", clock.now)])
    settle(view, clock)
    view.finish()
    assert view.sent == len(recorder.messages) + 3
    assert busiest_second(recorder.messages) <= 30


def test_a_110_action_run_is_cheap(recorder: Recorder, clock: Clock) -> None:
    """Issue 12, section 5, without a kernel (bench/graph_bench.py measures it in one)."""
    bench = importlib.util.spec_from_file_location("graph_bench", ROOT / "bench/graph_bench.py")
    assert bench is not None and bench.loader is not None
    module = importlib.util.module_from_spec(bench)
    bench.loader.exec_module(module)
    events = parse(module.script(), chunk=64)
    view = WidgetView(model="m", clock=clock)
    rng = random.Random(3)
    running: list[str] = []
    for event in events:
        clock.step(0.01)
        batch = [event]
        if event.kind == "action":
            batch.append(status(event.action.id, "running", clock.now, attempt=1))
            running.append(event.action.id)
        if running and rng.random() < 0.5:
            done = running.pop(rng.randrange(len(running)))
            batch.append(status(done, "failed" if done == "f13" else "done", clock.now, attempt=1))
        view.apply(batch)
        view.redraw()
    view.apply(
        [status(i, "done", clock.now, attempt=1) for i in running] + [End("completed", clock.now)]
    )
    settle(view, clock)
    view.finish()
    total = sum(m.size for m in recorder.messages)
    largest = max(m.size for m in recorder.messages)
    print(f"\n110 actions: {len(recorder.messages)} messages, {total:,} bytes, largest {largest:,}")
    assert total < 500_000 and largest < 20_000
    assert busiest_second(recorder.messages) <= 30


def test_the_final_frame_places_new_parts_at_once_and_leaves_text_whole(
    recorder: Recorder, clock: Clock
) -> None:
    # A run too quick for any redraw: the final frame makes every part. They join the
    # view in one message, and a thought long enough to be split while streaming is sent
    # whole (it grows no more: a piece would cost two more messages for nothing).
    view = make_view(clock)
    thought = "\n".join(f"line {i} of a long thought" for i in range(120))
    view.apply(
        parse(
            f"<thought>{thought}</thought>"
            '<action id="a">{"name": "fetch"}</action>'
            "<response>All **done**.</response>"
        )
    )
    view.apply([status("a", "done", clock.now, name="fetch")])
    start = clock.now
    view.finish()
    root = view.widget.comm.comm_id
    assert [m.type for m in recorder.since(start) if m.comm_id == root] == ["comm_msg"]
    box = part(view, "cortex-thought")
    (tail,) = html_values(box)
    assert "line 119 of a long thought" in tail and "line 0 of a long thought" in tail


# ----------------------------------------------------------------------------- secrets

#: The model's key and a credential-looking environment value: neither may reach the page.
#: (No hex digits: random widget ids must not look like a part of one.)
KEY = "sk-qz-KEYVALUEghijkmnopqrstuvw"
TOKEN = "ghp_TOKENVALUEmnopqrstuvwxyz"


def fragments(text: str) -> set[str]:
    """The parts of ``KEY`` and ``TOKEN`` (four characters or more) that ``text`` holds."""
    pieces = {secret[i : i + 4] for secret in (KEY, TOKEN) for i in range(len(secret) - 3)}
    return pieces & {text[i : i + 4] for i in range(len(text) - 3)}


@pytest.fixture
def wire(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every comm message the widgets would send, as the JSON the kernel would send."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    return comm_messages(monkeypatch)


def secret_run(view: WidgetView, clock: Clock) -> None:
    """A run whose actions were called with, returned, printed, logged and failed with
    the secrets, some of them cut at the view's limits; the answer names ``$dump``."""
    view.apply(
        parse(
            f"<thought>Checking the config.</thought>"
            f'<action id="a1">{{"name": "peek", "parameters": {{"q": "{KEY}"}}, '
            f'"output_key": "dump"}}</action>'
            f'<action id="a2">{{"name": "fail", "parameters": {{"q": "$dump"}}}}</action>'
            f"<response>The config: $dump and {TOKEN}.</response>"
        )
    )
    settle(view, clock)
    half = len(TOKEN) // 2
    view.apply(
        [
            status("a1", "running", clock.now, attempt=1, parameters=f'{{"q": "{KEY}"}}'),
            # a stream piece that ends inside the token, then the rest of it
            ActionOutput("a1", clock.now, stdout=f"token={TOKEN[:half]}"),
            ActionOutput("a1", clock.now, stdout=f"{TOKEN[half:]}\n", logs=(f"using {KEY}",)),
            # so much stderr that the view keeps only its newest part, which cuts the key
            ActionOutput("a1", clock.now, stderr=KEY + "." * 16_000),
            ActionOutput("a1", clock.now, partial=f"'{KEY}'"),
            status("a1", "done", clock.now, attempt=1, output=f"'config: {KEY}'"),
            status("a2", "running", clock.now, attempt=1, parameters=f'{{"q": "{KEY}"}}'),
            status("a2", "failed", clock.now, attempt=1, error=f"ValueError: no {TOKEN}"),
            End("completed", clock.now),
        ]
    )
    settle(view, clock)
    for node_id in ("a1", "a2", None):
        view.select(node_id)
        settle(view, clock)


def test_the_live_view_sends_no_part_of_a_secret(clock: Clock, wire: list[str]) -> None:
    # ``$dump`` in the answer is filled from the notebook: cut at its limit in the key.
    from cortex_jupyter.runtime.core.values.answer import VALUE_LIMIT

    values = {"dump": "." * (VALUE_LIMIT - 5) + KEY}
    view = make_view(clock, values=lambda: values)
    secret_run(view, clock)
    saved = view.finish()
    text, html_copy = saved.static[0]["text/plain"], saved.static[0]["text/html"]
    html_copy = re.sub(r"base64,[\w+/=]+", "", html_copy)  # (its pictures, redacted before)
    shown = [*wire, *html_values(view.widget), picture(view), text, html_copy]
    assert any("[redacted]" in text for text in wire)
    assert [fragments(text) for text in shown if fragments(text)] == []
    assert values["dump"].endswith(KEY)  # the notebook's own value stays exact


def test_the_inspector_redacts_what_it_reads_from_the_run_record(
    clock: Clock, wire: list[str]
) -> None:
    node = SimpleNamespace(
        status="done",
        output={"config": KEY, "long": "." * 390 + TOKEN},
        resolved={"q": KEY, "token": "." * 490 + TOKEN},
        stdout=f"key={KEY}\n" + "." * 16_000 + TOKEN,
        stderr=TOKEN,
        logs=[f"using {KEY}"],
    )
    record = SimpleNamespace(actions={"a1": node})
    view = make_view(clock, record=lambda: record)
    secret_run(view, clock)
    view.select("a1")
    settle(view, clock)
    inspector = part(view, "cortex-inspector").value
    assert "[redacted]" in inspector and "config" in inspector
    assert [fragments(text) for text in wire if fragments(text)] == []
    assert node.output["config"] == KEY  # the record keeps the value itself


def test_a_thought_streamed_up_to_the_middle_of_a_secret_shows_none_of_it(
    clock: Clock, wire: list[str]
) -> None:
    parser = Parser("cortex")
    view = make_view(clock)
    view.apply(parser.feed(f"<thought>The key is {KEY[:12]}"))
    settle(view, clock)
    thought = text_of(part(view, "cortex-thought"))
    assert "The key is [redacted]" in thought and KEY[:4] not in thought
    view.apply(parser.feed(f"{KEY[12:]}, it works.</thought>"))
    settle(view, clock)
    assert "The key is [redacted], it works." in text_of(part(view, "cortex-thought"))
    assert [fragments(text) for text in wire if fragments(text)] == []


# ------------------------------------------------------------------ letting go (issue 19)


def live_widgets() -> set[str]:
    """The model ids of every widget the kernel holds open."""
    from ipywidgets.widgets.widget import _instances

    return set(_instances)


def test_a_fast_run_leaves_no_stop_button_behind(recorder: Recorder, clock: Clock) -> None:
    """Issue 19, item 16: a run that ends before any redraw sees it end."""
    view = make_view(clock, stop=lambda: None)
    button = part(view, "cortex-stop")
    view.apply(parse())
    view.apply([End("completed", clock.now)])
    view.finish()
    assert maybe_part(view, "cortex-stop") is None
    assert button.comm is None  # closed: a comm_close, and the kernel lets it go
    assert view.sent == len(recorder.messages) + 3


def test_closing_a_view_closes_every_widget_it_made(recorder: Recorder, clock: Clock) -> None:
    """Issue 19, item 1: each widget, layout and style of the view is a comm of its own."""
    from cortex_jupyter.display.live_graph import graph_code

    graph_code()  # the graph's shared code: made once per kernel, not the view's
    before = live_widgets()
    record = object()
    view = make_view(
        clock, decide=lambda i, a: True, stop=lambda: None, record=lambda: record, values=dict
    )
    many(view, 20)
    view.apply([status("fetch1", "awaiting", clock.now, parameters="{}")])
    settle(view, clock)
    view.apply(parse())
    view.apply([status("fetch2", "failed", clock.now, error="x"), End("completed", clock.now)])
    settle(view, clock)
    part(view, "cortex-graph")._handle_custom_msg({"act": "select", "id": "fetch3"}, [])
    view.finish()
    made = live_widgets() - before
    assert len(made) > 20  # the view, its parts, pieces, graph, inspector, layouts, styles
    start = len(recorder.messages)
    assert view.close() == len(made)
    assert live_widgets() == before  # every one of them closed; the shared code stays
    closes = [m for m in recorder.messages[start:] if m.type == "comm_close"]
    assert len(closes) == len(made)  # a comm_close each, so the front end frees them too
    # The view lets go of the run: nothing of it is reachable from the view any more.
    assert view.closed and view._record is None and not view.state.nodes
    assert view.close() == 0  # twice: nothing more
    view.apply([status("fetch4", "done", clock.now)])  # a late event: ignored
    assert view.redraw() is False and not view.state.nodes

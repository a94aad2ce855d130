"""A typed run's answer in the view: the object filling in as the model writes it (the
inspector's tree, not JSON characters), the checked object or what did not fit, and the
static copy's final object. Driven by the real parser's events plus the runtime's
``OutputExpected`` / ``OutputChecked`` events, as a session feeds them."""

from __future__ import annotations

import html
import json
import re
import xml.etree.ElementTree as ET
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cortex_jupyter.display import ViewState, static_html, static_text
from cortex_jupyter.display.typed import split_answer, typed_html
from cortex_jupyter.display.widget import WidgetView
from cortex_jupyter.protocol import Parser
from cortex_jupyter.runtime import End
from cortex_jupyter.runtime.core.events import OutputChecked, OutputExpected, Turn

from .helpers import status
from .helpers import stream as stream_view
from .test_widget import (  # noqa: F401 (the fixtures)
    KEY,
    Clock,
    Recorder,
    clock,
    html_values,
    make_view,
    maybe_part,
    part,
    recorder,
    text_of,
    wire,
)
from .test_widget import fragments as wire_fragments
from .test_xss import HTML_ELEMENTS, PAYLOADS, check_tree

WEATHER = {"city": "Paris", "temp": 12, "tags": ["mild", "grey"], "wind": {"kmh": 7.5}}


def typed_state(type_name: str = "Weather") -> ViewState:
    state = ViewState(model="m")
    state.apply(OutputExpected(type=type_name, time=1.0, schema={"type": "object"}), 1.0)
    state.apply(Turn(number=1, time=1.0), 1.0)
    return state


def stream(state: ViewState, text: str, chunk: int = 7, parser: Parser | None = None) -> Parser:
    parser = parser or Parser("cortex")
    for start in range(0, len(text), chunk):
        for event in parser.feed(text[start : start + chunk]):
            state.apply(event, 2.0)
    return parser


def shown_tree(state: ViewState) -> Any:
    assert state.typed is not None
    return state.typed.shown()[0]


def leaves_prefix(partial: Any, final: Any) -> bool:
    """Whether every leaf of ``partial`` is a prefix of the same leaf of ``final``
    (strings), or equal to it (numbers, literals); containers may be shorter."""
    if isinstance(partial, dict):
        keys = list(partial)
        return (
            isinstance(final, dict)
            and keys == list(final)[: len(keys)]
            and all(leaves_prefix(partial[k], final[k]) for k in keys)
        )
    if isinstance(partial, list):
        return (
            isinstance(final, list)
            and len(partial) <= len(final)
            and all(leaves_prefix(p, f) for p, f in zip(partial, final, strict=False))
        )
    if isinstance(partial, str):
        return isinstance(final, str) and final.startswith(partial)
    return partial == final and type(partial) is type(final)


# ----------------------------------------------------------------------------- reduction


def test_the_answer_fills_in_as_an_object_with_its_text_before_it() -> None:
    state = typed_state()
    answer = "<response>Here is the weather:\n```json\n" + json.dumps(WEATHER) + "\n```</response>"
    seen = []
    parser = Parser("cortex")
    for end in range(len(answer)):
        for event in parser.feed(answer[end]):
            state.apply(event, 2.0)
        value = shown_tree(state)
        if isinstance(value, dict):
            seen.append(value)
            assert leaves_prefix(value, WEATHER), value
    assert seen[-1] == WEATHER
    assert {"city": "Pa"} in seen  # the string still being written is shown as it grows
    html = typed_html(state.typed)  # type: ignore[arg-type]
    assert "Here is the weather:" in html
    assert "```" not in html and '"city"' not in html  # no JSON characters: a tree
    assert "<details" in html and "&#x27;Paris&#x27;" in html
    assert state.body == ""  # the answer's text went to the typed part, not the markdown


def test_the_fence_opening_is_never_shown_as_text() -> None:
    text = "Sure.\n```json\n{}"
    for end in range(len(text) + 1):
        split = split_answer(text[:end])
        assert "`" not in split.prose, text[:end]
        assert "json" not in split.prose


@pytest.mark.parametrize(
    ("text", "prose", "json_text"),
    [
        ('{"a": "```"}', "", '{"a": "```"}'),  # a fence inside a bare object is data
        ("[1, 2", "", "[1, 2"),
        ("42", "", "42"),
        ("Here:\n```\n[1]\n```\nDone.", "Here:\n", "[1]"),
        ('I found it.\n{"a": 1}', "I found it.\n", '{"a": 1}'),
        ("Still thinking", "Still thinking", ""),
    ],
)
def test_where_the_json_starts(text: str, prose: str, json_text: str) -> None:
    split = split_answer(text)
    assert (split.prose, split.json) == (prose, json_text)


def test_a_number_still_being_written_is_left_out() -> None:
    state = typed_state()
    stream(state, '<response>{"small": 1e-05, "n": 12', chunk=1)
    assert shown_tree(state) == {"small": 1e-05}  # not "n": 1, then 12
    stream(state, ", ", chunk=1)


def test_interim_replies_are_text_and_the_next_answer_is_the_object() -> None:
    state = typed_state()
    parser = stream(state, '<response>{"looking": "up"}</response>')
    stream(state, '<action id="a1">{"name": "weather"}</action>', parser=parser)
    assert '{"looking": "up"}' in state.body  # an interim message: shown as written
    assert state.typed is not None and not state.typed.split().started
    state.apply(status("a1", "done", 3.0, name="weather"), 3.0)
    state.apply(Turn(number=2, time=4.0), 4.0)
    stream(state, '<response>```json\n{"city": "Pa')
    assert shown_tree(state) == {"city": "Pa"}


def test_a_checked_answer_shows_the_validated_object() -> None:
    state = typed_state()
    stream(state, '<response>{"city": "Paris", "temp": "$weather.temp"}</response>')
    # "$weather.temp" filled by the runtime: the view shows the object it validated.
    state.apply(OutputChecked(1, 5.0, True, {"city": "Paris", "temp": 12}, turn=1), 5.0)
    assert shown_tree(state) == {"city": "Paris", "temp": 12}
    html = typed_html(state.typed, live=False)  # type: ignore[arg-type]
    assert "$weather" not in html and "12" in html and "did not fit" not in html


def test_a_failed_check_shows_its_errors_and_a_retry_replaces_the_object() -> None:
    state = typed_state()
    stream(state, '<response>{"city": 3}</response>')
    errors = ("city: Input should be a valid string", "temp: Field required")
    state.apply(OutputChecked(1, 5.0, False, None, errors, turn=1), 5.0)
    html = typed_html(state.typed)  # type: ignore[arg-type]
    assert "cortex-typed-errors" in html
    assert "city: Input should be a valid string" in html and "temp: Field required" in html
    assert shown_tree(state) == {"city": 3}  # the object that did not fit, with them
    assert state.versions["output"] > 0
    # The retry: a new turn; its answer replaces the old object (and its errors).
    state.apply(Turn(number=2, time=6.0), 6.0)
    assert shown_tree(state) == {"city": 3}  # until the new one begins
    stream(state, '<response>{"city": "Ly')
    assert shown_tree(state) == {"city": "Ly"}
    assert "cortex-typed-errors" not in typed_html(state.typed)  # type: ignore[arg-type]
    stream(state, 'on", "temp": 9}</response>')
    state.apply(OutputChecked(2, 7.0, True, {"city": "Lyon", "temp": 9}, turn=2), 7.0)
    assert shown_tree(state) == {"city": "Lyon", "temp": 9}


def test_an_answer_that_is_not_json_is_shown_as_text() -> None:
    state = typed_state("list[int]")
    stream(state, "<response>- one\n- two</response>")
    html = typed_html(state.typed)  # type: ignore[arg-type]
    assert "- one\n- two" in html and "<details" not in html


def test_a_text_answer_is_shown_once_as_its_value() -> None:
    state = typed_state("str")
    stream(state, "<response>Paris, in the north.</response>")
    assert "Paris, in the north." in typed_html(state.typed)  # type: ignore[arg-type]
    state.apply(OutputChecked(1, 5.0, True, "Paris, in the north.", turn=1), 5.0)
    assert typed_html(state.typed).count("Paris, in the north.") == 1  # type: ignore[arg-type]


def test_an_untyped_run_is_unchanged() -> None:
    state = ViewState(model="m")
    stream(state, '<response>{"a": 1}</response>')
    assert state.typed is None and state.body == '{"a": 1}'


# Any JSON value the model may be asked for (keys and strings with quotes, escapes and
# non-ASCII; numbers of every shape json.dumps writes).
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**20), 10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    value=JSON,
    fenced=st.booleans(),
    indent=st.sampled_from([None, 2]),
    chunk=st.integers(1, 9),
)
def test_any_prefix_of_an_answer_shows_a_tree_of_prefixes(
    value: Any, fenced: bool, indent: int | None, chunk: int
) -> None:
    body = json.dumps(value, indent=indent, ensure_ascii=False)
    answer = f"Here it is:\n```json\n{body}\n```" if fenced else body
    state = typed_state()
    parser = Parser("cortex")
    text = f"<response>{answer}</response>"
    for start in range(0, len(text), chunk):
        for event in parser.feed(text[start : start + chunk]):
            state.apply(event, 2.0)
        assert state.typed is not None
        shown = state.typed.partial()
        if state.typed.split().started and _is_value(shown):
            assert leaves_prefix(shown, value), (text[: start + chunk], shown)
        typed_html(state.typed)  # never raises
    for event in parser.close():
        state.apply(event, 2.0)
    assert state.errors == []
    assert state.typed is not None
    assert state.typed.partial() == value or _equal_json(state.typed.partial(), value)
    assert "```" not in state.typed.split().prose


def _is_value(shown: Any) -> bool:
    from cortex_jupyter.display import typed

    return shown is not typed._NOTHING and shown is not typed._INVALID


def _equal_json(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


# ----------------------------------------------------------------------------- safety


@pytest.mark.parametrize("payload", PAYLOADS)
def test_keys_and_values_are_escaped(payload: str) -> None:
    state = typed_state(payload)
    hostile = {payload: [payload, {payload: payload}], "k": payload}
    stream(state, "<response>" + json.dumps(hostile)[:-5])  # a partial object too
    live = typed_html(state.typed)  # type: ignore[arg-type]
    stream(state, json.dumps(hostile)[-5:] + "</response>")
    state.apply(OutputChecked(1, 5.0, False, None, (f"{payload}: {payload}",), turn=1), 5.0)
    failed = typed_html(state.typed)  # type: ignore[arg-type]
    state.apply(OutputChecked(2, 6.0, True, hostile, turn=1), 6.0)
    state.apply(End("completed", 7.0), 7.0)
    for out in (live, failed, typed_html(state.typed, live=False), static_html(state)):  # type: ignore[arg-type]
        out = re.sub(r'<img class="cortex-graph"[^>]*/>', "", out)
        lowered = out.lower()
        for raw in ("<script", "<img", "<iframe", "<svg onload", "\x00", "\x1b"):
            assert raw not in lowered, raw
        check_tree(ET.fromstring(f"<root>{out}</root>"), HTML_ELEMENTS)
    assert html.escape(payload[:6], quote=True) in failed  # shown, as text


def fragments(text: str) -> set[str]:
    pieces = {KEY[i : i + 4] for i in range(len(KEY) - 3)}
    return pieces & {text[i : i + 4] for i in range(len(text) - 3)}


def test_a_secret_in_the_object_is_never_shown_at_any_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    answer = (
        'Config follows.\n```json\n{"note": "the key is ' + KEY + ' ok", "' + KEY + '": 1, '
        '"list": ["' + KEY + '"]}\n```'
    )
    for end in range(len(answer) + 1):
        state = typed_state()
        stream(state, "<response>" + answer[:end], chunk=len(answer) + 20)
        shown = [typed_html(state.typed), static_html(state), static_text(state)]  # type: ignore[arg-type]
        assert [fragments(text) for text in shown if fragments(text)] == [], answer[:end]
    assert "[redacted]" in typed_html(state.typed)  # type: ignore[arg-type]


def test_a_secret_in_the_text_before_the_json_is_not_shown_at_any_cut(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    answer = f"Using {KEY} here\n```json\n[1]\n```"
    for end in range(len(answer) + 1):
        state = typed_state()
        stream(state, "<response>" + answer[:end], chunk=len(answer) + 20)
        assert not fragments(typed_html(state.typed)), answer[:end]  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- the copy


def test_the_static_copy_shows_the_final_object_as_a_tree_and_as_text() -> None:
    state = typed_state()
    stream(state, '<response>Done.\n```json\n{"city": "Paris", "temp": "$t"}\n```</response>')
    state.apply(OutputChecked(1, 5.0, True, {"city": "Paris", "temp": 12}, turn=1), 5.0)
    state.apply(End("completed", 6.0), 6.0)
    html = static_html(state)
    assert "<details" in html and "&#x27;city&#x27;" in html and "&#x27;Paris&#x27;" in html
    assert "$t" not in html and "```" not in html
    assert "Done." in html
    text = static_text(state)
    assert "Answer (Weather):" in text
    assert json.dumps({"city": "Paris", "temp": 12}, indent=2) in text


def test_the_static_copy_of_an_answer_that_never_fit_shows_why() -> None:
    state = typed_state()
    stream(state, '<response>{"city": 3}</response>')
    state.apply(OutputChecked(1, 5.0, False, None, ("city: Input should be a valid string",)), 5.0)
    state.apply(End("failed", 6.0), 6.0)
    assert "city: Input should be a valid string" in static_html(state)
    text = static_text(state)
    assert "It does not fit:" in text and "(not checked)" in text


# ----------------------------------------------------------------------------- the widget


def typed_view(clock: Clock) -> WidgetView:  # noqa: F811 (test_widget's fixtures)
    view = make_view(clock)
    view.apply([OutputExpected(type="Weather", time=clock.now), Turn(number=1, time=clock.now)])
    return view


@pytest.mark.usefixtures("recorder")
def test_the_live_view_draws_the_object_filling_in(clock: Clock) -> None:  # noqa: F811
    view = typed_view(clock)
    seen: list[str] = []
    answer = "Here it is:\n```json\n" + json.dumps(WEATHER) + "\n```"
    parser = Parser("cortex")
    text = f"<response>{answer}</response>"
    for start in range(0, len(text), 3):
        clock.step(0.04)
        view.apply(parser.feed(text[start : start + 3]))
        view.redraw()
        output = maybe_part(view, "cortex-output")
        if output is not None and output.value not in seen[-1:]:
            seen.append(output.value)
    view.apply([*parser.close(), OutputChecked(1, clock.now, True, WEATHER, turn=1)])
    view.apply([End("completed", clock.now)])
    saved = view.finish()
    assert len(seen) >= 4  # drawn while it was written, not once at the end
    cut = [f"&#x27;{'Paris'[:n]}&#x27;" for n in range(1, 5)]  # the city being written
    assert any(any(c in value for c in cut) for value in seen)
    assert any("<details" in value and "grey" not in value for value in seen)
    for value in seen:  # a tree with the text before it; never JSON characters
        assert "```" not in value and "&quot;city&quot;" not in value and '"city"' not in value
    final = part(view, "cortex-output").value
    assert "<details" in final and "&#x27;grey&#x27;" in final and "Here it is:" in final
    assert "city" not in text_of(maybe_part(view, "cortex-response") or view.widget.children[0])
    copy = saved.static[0]
    assert "&#x27;wind&#x27;" in copy["text/html"] and '"kmh": 7.5' in copy["text/plain"]


def test_a_large_answer_is_redrawn_at_a_bounded_rate(clock: Clock, recorder: Recorder) -> None:  # noqa: F811
    """A 50 KB object: its tree is re-sent whole, so past ``BIG_OUTPUT`` characters it is
    redrawn at ``slow_hz`` (4 a second), not at every 1/25 s batch."""
    big = {f"row{i}": {"name": f"item {i}", "tags": ["a", "b"], "n": i} for i in range(900)}
    answer = json.dumps(big)
    assert len(answer) > 50_000
    view = typed_view(clock)
    start = clock.now
    changes = []
    stream_view(view, clock, f"<response>{answer}", chunk=200, finish=False)
    output = part(view, "cortex-output")
    changes = [m for m in recorder.since(start) if m.comm_id == output.comm.comm_id]
    seconds = clock.now - start
    assert len(answer) // 200 > 250  # batches
    assert len(changes) <= seconds * 4 + 30  # the small tree's first redraws, then 4/s
    assert len(changes) >= seconds * 3  # still live: it keeps filling in
    view.apply([OutputChecked(1, clock.now, True, big, turn=1), End("completed", clock.now)])
    view.finish()
    assert "&#x27;row899&#x27;" not in output.value  # the tree is bounded (TREE_WIDTH)
    assert "… 800 more" in output.value


def test_the_live_view_sends_no_part_of_a_secret_in_the_object(
    clock: Clock,  # noqa: F811
    wire: list[str],  # noqa: F811
) -> None:
    view = typed_view(clock)
    answer = json.dumps({"note": f"the key is {KEY}", KEY: [KEY]})
    text = f"<response>Using {KEY}:\n```json\n{answer}\n```</response>"
    stream_view(view, clock, text, 5, finish=False)
    view.apply([End("completed", clock.now)])
    saved = view.finish()
    shown = [*wire, *html_values(view.widget), *saved.static[0].values()]
    assert any("[redacted]" in text for text in wire)
    assert [wire_fragments(text) for text in shown if wire_fragments(text)] == []

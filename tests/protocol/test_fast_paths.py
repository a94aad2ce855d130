"""The parser's fast paths (issue 19 §7): cheap per chunk, and never a different answer.

A model streams a token (or a character) at a time, so what each ``feed`` costs is what
the parser costs. These tests pin the work the fast paths save without a clock: which
objects a chunk builds, how many chunks take the slow path, and that the memory the
savings use stays bounded. That the answers stay the same under any chunking is
``test_properties``' job.
"""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Callable
from typing import Any

from cortex_jupyter.protocol import (
    ActionReady,
    Parser,
    ProtocolError,
    ResponseDelta,
    ResponseEnd,
    ThoughtDelta,
)
from cortex_jupyter.protocol.events import Event
from cortex_jupyter.protocol.tags import tag_set
from cortex_jupyter.protocol.xml import TABLES
from cortex_jupyter.protocol.xml.dialects import THOUGHT_CLOSE as _THOUGHT_CLOSE


def feed_each(parser: Parser, text: str) -> list[Event]:
    events: list[Event] = []
    for char in text:
        events.extend(parser.feed(char))
    return events


def test_a_short_chunk_seen_again_in_a_thought_reuses_its_delta() -> None:
    parser = Parser()
    parser.feed("<thought>Plan")
    first = parser.feed("a")
    again = parser.feed("a")
    assert first == again == [ThoughtDelta("a")]
    # Deltas are immutable: the second is the same object, not a new one to build.
    assert again[0] is first[0]


def test_shared_response_deltas_keep_each_responses_finality() -> None:
    parser = Parser()
    events = feed_each(
        parser, '<response final="false">ok ok</response><response final="true">ok ok</response>'
    )
    events += parser.close()
    deltas = [(e.text, e.final) for e in events if isinstance(e, ResponseDelta)]
    assert "".join(t for t, final in deltas if not final) == "ok ok"
    assert "".join(t for t, final in deltas if final) == "ok ok"
    assert [e for e in events if isinstance(e, ResponseEnd)] == [
        ResponseEnd(False),
        ResponseEnd(True),
    ]


def test_a_long_stream_of_distinct_short_chunks_leaves_the_parser_small() -> None:
    # 65,536 different 4-character chunks: were every delta kept for reuse, the parser
    # would hold about 10 MB after dropping its events; the tables are bounded.
    parser = Parser()
    parser.feed("<thought>Counting:")
    tracemalloc.start()
    try:
        for i in range(1 << 16):
            parser.feed(f"{i:04x}")
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held < 1_000_000


def count_slow_passes(parser: Parser) -> list[int]:
    """Count the chunks that reach the parser's state handlers (the slow path)."""
    calls = [0]

    def counting(handler: Callable[[str, int, list[Event]], int]) -> Any:
        def wrapped(data: str, pos: int, out: list[Event]) -> int:
            calls[0] += 1
            return handler(data, pos, out)

        return wrapped

    parser._handlers = tuple(counting(h) for h in parser._handlers)  # type: ignore[attr-defined]
    return calls


def test_an_action_closing_tag_arriving_a_character_at_a_time_takes_two_slow_passes() -> None:
    parser = Parser()
    parser.feed('<action id="a1">{"name": "search", "parameters": {"q": "x < 3"}}')
    slow = count_slow_passes(parser)
    # Its "<" is read by the slow path; then it is held while it can only be the
    # closing tag (a character each), and its ">" ends the action.
    assert feed_each(parser, "</action") == [] and slow == [1]
    [ready] = parser.feed(">")
    assert isinstance(ready, ActionReady) and ready.action.name == "search"
    assert ready.source.endswith("</action>")
    assert slow == [2]


def test_a_closing_tag_written_otherwise_is_still_read_by_the_slow_path() -> None:
    for closing in ("</ACTION>", "</action >", "</ action>"):
        parser = Parser()
        parser.feed('<action id="a1">{"name": "search"}')
        events = feed_each(parser, closing)
        assert [e.kind for e in events] == ["action"], closing
        assert events[0].source.endswith(closing)  # type: ignore[attr-defined]


def test_a_tag_name_still_arriving_is_one_of_the_known_prefixes() -> None:
    # The set the tag fast path looks names up in may only ever say what the
    # partial-tag check says, in every dialect and block.
    known_sets = {known for table in TABLES.values() for known in table.values()}
    known_sets.add(TABLES["hermes"][0] | _THOUGHT_CLOSE)  # a hermes reply's start
    for known in known_sets:
        tags = tag_set(known)
        for head in tags.heads:
            assert tags.is_partial(head, 0), (sorted(known), head)
        for name in known:
            assert "<" + name in tags.heads


def test_a_body_with_a_byte_order_mark_is_refused_with_jsons_own_reason() -> None:
    parser = Parser()
    events = parser.feed('<action id="a1">\ufeff{"name": "search"}</action>') + parser.close()
    [error] = [e for e in events if isinstance(e, ProtocolError)]
    assert error.code == "invalid_json" and "BOM" in error.message


def test_decoded_bodies_keep_control_characters_in_strings() -> None:
    parser = Parser()
    body = '{"name": "write", "parameters": {"text": "a\tb\nc"}}'
    events = parser.feed(f'<action id="a1">{body}</action>') + parser.close()
    [ready] = [e for e in events if isinstance(e, ActionReady)]
    assert ready.action.parameters == json.loads(body, strict=False)["parameters"]

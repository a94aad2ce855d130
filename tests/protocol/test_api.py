"""The parser's public surface: construction, misuse, ids across turns, events."""

from __future__ import annotations

import dataclasses

import pytest

from cortex_jupyter.protocol import (
    ActionReady,
    Parser,
    ParserClosedError,
    ProtocolError,
    ThoughtDelta,
    event_to_dict,
    parse,
)
from cortex_jupyter.protocol.auto import AutoParser
from cortex_jupyter.protocol.sigil import SigilParser
from cortex_jupyter.protocol.xml import XmlParser


@pytest.mark.parametrize(
    ("dialect", "cls"),
    [("cortex", XmlParser), ("cogency", XmlParser), ("sigil", SigilParser), ("auto", AutoParser)],
)
def test_parser_builds_the_dialects_parser(dialect: str, cls: type) -> None:
    parser = Parser(dialect)
    assert isinstance(parser, cls)
    assert isinstance(parser, Parser)


def test_unknown_dialect_names_the_choices() -> None:
    with pytest.raises(ValueError, match=r"unknown protocol dialect 'xml'; choose one of: auto"):
        Parser("xml")


@pytest.mark.parametrize("bad", [0, -5, 1.5, True, "10"])
def test_limits_must_be_positive_whole_numbers(bad: object) -> None:
    with pytest.raises(ValueError, match="max_action_chars must be a positive whole number"):
        Parser(max_action_chars=bad)  # type: ignore[arg-type]


def test_feeding_a_closed_parser_says_so() -> None:
    parser = Parser()
    parser.close()
    with pytest.raises(ParserClosedError, match="create a new Parser"):
        parser.feed("more")
    assert parser.close() == []


@pytest.mark.parametrize("dialect", ["cortex", "sigil", "auto"])
def test_non_text_chunks_are_refused_clearly(dialect: str) -> None:
    parser = Parser(dialect)
    with pytest.raises(TypeError, match=r"Parser\.feed takes str chunks, not bytes"):
        parser.feed(b"<thought>")  # type: ignore[arg-type]
    parser.feed("<thought>ok")
    with pytest.raises(TypeError, match="not list"):
        parser.feed(["x"])  # type: ignore[arg-type]


def test_ids_from_earlier_turns_are_duplicates_and_never_generated() -> None:
    parser = Parser(taken_ids={"a1", "auto-1"})
    events = parser.feed('<action id="a1">{"name": "x"}</action><action>{"name": "y"}</action>')
    assert isinstance(events[0], ProtocolError)
    assert events[0].code == "duplicate_id"
    ready = [e for e in events if isinstance(e, ActionReady)]
    assert [e.action.id for e in ready] == ["auto-2"]


def test_events_are_frozen_values() -> None:
    event = ThoughtDelta("x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.text = "y"  # type: ignore[misc]
    assert event == ThoughtDelta("x")
    assert hash(event) == hash(ThoughtDelta("x"))


def test_fast_path_events_equal_ordinary_ones() -> None:
    parser = Parser()
    parser.feed("<thought>a")
    fast = parser.feed("bcd")  # a plain chunk inside a thought takes the fast path
    assert fast == [ThoughtDelta("bcd")]
    assert repr(fast[0]) == "ThoughtDelta(text='bcd')"


def test_event_to_dict_leaves_out_action_defaults() -> None:
    (start, ready) = parse('<action id="a">{"name": "n"}</action>')
    assert event_to_dict(start) == {
        "kind": "action_start",
        "id": "a",
        "type": "tool",
        "mode": "async",
        "in_thought": False,
    }
    assert event_to_dict(ready) == {
        "kind": "action",
        "id": "a",
        "type": "tool",
        "mode": "async",
        "name": "n",
        "parameters": {},
    }

"""The parser's public surface: construction, misuse, ids across turns, events."""

from __future__ import annotations

import dataclasses

import pytest

from cortex_jupyter.protocol import (
    Action,
    ActionReady,
    Parser,
    ParserClosedError,
    ProtocolError,
    ResponseEnd,
    ThoughtDelta,
    action_to_dict,
    event_to_dict,
    parse,
)
from cortex_jupyter.protocol.auto import AutoParser
from cortex_jupyter.protocol.sigil import SigilParser
from cortex_jupyter.protocol.xml import XmlParser


@pytest.mark.parametrize(
    ("dialect", "cls"),
    [
        ("cortex", XmlParser),
        ("cogency", XmlParser),
        ("hermes", XmlParser),
        ("sigil", SigilParser),
        ("auto", AutoParser),
    ],
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


def test_ids_from_earlier_turns_are_renamed_and_never_generated() -> None:
    parser = Parser(taken_ids={"a1", "auto-1"})
    events = parser.feed('<action id="a1">{"name": "x"}</action><action>{"name": "y"}</action>')
    assert not [e for e in events if isinstance(e, ProtocolError)]
    ready = [e.action for e in events if isinstance(e, ActionReady)]
    assert [(a.id, a.original_id) for a in ready] == [("a1~2", "a1"), ("auto-2", None)]


@pytest.mark.parametrize("dialect", ["cortex", "cogency", "hermes", "sigil", "auto"])
def test_every_dialect_accepts_the_ids_of_earlier_turns(dialect: str) -> None:
    # The runtime builds each turn's parser this way, whatever the dialect.
    parser = Parser(dialect, taken_ids=["auto-1", "r1"])
    assert parser.close() == []


def test_the_agent_loop_reads_the_last_response_end_of_a_reply() -> None:
    # The runtime asks the model again unless the reply's last ResponseEnd is final.
    def verdict(text: str, dialect: str = "cortex") -> bool:
        ends = [e for e in parse(text, dialect) if isinstance(e, ResponseEnd)]
        return ends[-1].final

    status_then_actions = '<response>Checking.</response><action>{"name": "a"}</action>'
    actions_then_answer = '<action>{"name": "a"}</action><response>It is 4.</response>'
    response_thought_action = (
        '<response>Checking.</response><thought>go<action>{"name": "a"}</action></thought>'
    )
    assert verdict(status_then_actions) is False
    assert verdict(actions_then_answer) is True
    assert verdict("<response>Hello.</response>") is True
    assert verdict(response_thought_action) is False
    assert verdict('Let me see.<tool_call>{"name": "a"}</tool_call>', "hermes") is False
    assert verdict('<tool_call>{"name": "a"}</tool_call>It is 4.', "hermes") is True


def test_an_implicit_response_followed_by_actions_never_blocks_them() -> None:
    events = parse('<response>Working.</response><action id="a">{"name": "x"}</action>')
    assert [e.code for e in events if isinstance(e, ProtocolError)] == []
    assert [e.action.id for e in events if isinstance(e, ActionReady)] == ["a"]


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


def test_original_id_and_source_appear_in_dicts_only_when_set() -> None:
    renamed = Action(id="r1~2", name="n", original_id="r1")
    assert action_to_dict(renamed)["original_id"] == "r1"
    assert "original_id" not in action_to_dict(Action(id="r1", name="n"))
    error = ProtocolError("invalid_json", "bad", "a", "<action id=a>{</action>")
    assert event_to_dict(error)["source"] == "<action id=a>{</action>"
    assert "source" not in event_to_dict(ProtocolError("duplicate_id", "again", "a"))


def test_every_refused_action_keeps_what_the_model_wrote() -> None:
    text = '<action id="a" type="shell">{"name": "rm", "parameters": {"path": "/"}}</action >'
    (_, error) = parse(text)
    assert isinstance(error, ProtocolError)
    assert error.source == text


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

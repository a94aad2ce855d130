"""Eagerness: text shows as it arrives and actions start the moment they close."""

from __future__ import annotations

from cortex_jupyter.protocol import (
    ActionReady,
    ActionStart,
    Parser,
    ResponseDelta,
    ResponseEnd,
    ThoughtDelta,
    ThoughtEnd,
)
from cortex_jupyter.protocol.events import Event
from cortex_jupyter.protocol.xml import OPENERLESS_HOLD


def kinds(events: list[Event]) -> list[str]:
    return [e.kind for e in events]


def texts(events: list[Event]) -> str:
    return "".join(getattr(e, "text", "") for e in events)


def test_thought_text_is_emitted_before_the_block_closes() -> None:
    parser = Parser()
    assert parser.feed("<thought>Hello") == [ThoughtDelta("Hello")]
    assert parser.feed(" wor") == [ThoughtDelta(" wor")]


def test_only_a_possible_closing_tag_is_held_back() -> None:
    parser = Parser()
    assert texts(parser.feed("<thought>abc</tho")) == "abc"
    assert parser.feed("ught>") == [ThoughtEnd()]


def test_a_lt_that_cannot_start_a_tag_is_emitted_at_once() -> None:
    parser = Parser()
    assert texts(parser.feed("<thought>if a <b")) == "if a <b"
    assert texts(parser.feed(" or x < 3")) == " or x < 3"


def test_held_text_turns_out_to_be_text_when_the_next_chunk_arrives() -> None:
    parser = Parser()
    assert texts(parser.feed("<thought>see <act")) == "see "
    assert texts(parser.feed("ual results")) == "<actual results"


def test_action_start_comes_with_the_opening_tag() -> None:
    parser = Parser()
    assert parser.feed('<action type="tool" mode="sync" id="a1">') == [
        ActionStart("a1", "tool", "sync", False)
    ]
    assert parser.feed('{"name": "search", ') == []


def test_action_is_ready_in_the_chunk_that_closes_it_while_text_goes_on() -> None:
    parser = Parser()
    parser.feed('<thought>Plan.<action id="a1">{"name": "search"}')
    events = parser.feed("</action>More thinking")
    assert kinds(events) == ["action", "thought"]
    assert isinstance(events[0], ActionReady)
    assert events[0].action.name == "search"
    assert events[0].action.in_thought
    assert texts(events[1:]) == "More thinking"


def test_response_text_streams_with_its_finality() -> None:
    parser = Parser()
    assert parser.feed('<response final="false">Part') == [ResponseDelta("Part", False)]


def test_sigil_call_starts_before_the_list_ends() -> None:
    parser = Parser("sigil")
    events = parser.feed('§CALLS: [{"name": "a", "args": {}}')
    assert kinds(events) == ["action_start", "action"]
    assert kinds(parser.feed(', {"name": "b"')) == ["action_start"]
    assert kinds(parser.feed("}]")) == ["action"]


def test_cogency_call_starts_before_the_list_ends() -> None:
    parser = Parser("cogency")
    events = parser.feed('<execute>[{"name": "a", "args": {"q": "x"}}, ')
    assert kinds(events) == ["action_start", "action"]


def test_turn_boundaries_are_visible_on_the_parser() -> None:
    sigil = Parser("sigil")
    sigil.feed('§CALLS: [{"name": "a"}]\n§EXECUTE:')
    sigil.close()
    assert sigil.boundary == "execute"
    cogency = Parser("cogency")
    cogency.feed("<respond>ok</respond><end>")
    assert cogency.boundary == "end"
    cortex = Parser()
    cortex.feed("<response>ok</response>")
    assert cortex.boundary is None


def test_a_spaced_closing_tag_is_held_back_only_while_it_may_be_one() -> None:
    parser = Parser()
    assert texts(parser.feed("<thought>abc</ thou")) == "abc"
    assert parser.feed("ght >") == [ThoughtEnd()]
    parser.feed('<action id="a">{"name": "x"}</ act')
    assert kinds(parser.feed("ion >")) == ["action"]


def test_a_response_without_final_streams_at_once_and_waits_for_its_verdict() -> None:
    parser = Parser()
    assert parser.feed("<response>Checking") == [ResponseDelta("Checking", False)]
    assert parser.feed("</response>") == []
    events = parser.feed('<action id="a">')
    assert events == [ResponseEnd(False), ActionStart("a", "tool", "async", False)]


def test_a_response_without_final_is_final_when_the_stream_ends() -> None:
    parser = Parser()
    parser.feed("<response>It is 4.</response>")
    assert parser.close() == [ResponseEnd(True)]


def test_hermes_text_is_the_response_as_it_arrives_and_calls_start_at_their_close() -> None:
    parser = Parser("hermes")
    # (The reply's leading text is held until it is decided: see the next test.)
    assert parser.feed("<think>Look it up.</think>") == [ThoughtDelta("Look it up."), ThoughtEnd()]
    assert parser.feed("Let me look") == [ResponseDelta("Let me look", False)]
    events = parser.feed('.<tool_call>{"name": "a", "arguments": {}}')
    assert events == [
        ResponseDelta(".", False),
        ResponseEnd(False),
        ActionStart("auto-1", "tool", "async", False),
    ]
    assert kinds(parser.feed("</tool_call>")) == ["action"]


def test_hermes_text_before_a_lone_think_close_is_the_thought() -> None:
    # Issue 18 item 7f: a chat template that writes <think> into the prompt (Qwen3's)
    # leaves the reply with only the closing tag; that was shown as the answer.
    parser = Parser("hermes")
    assert parser.feed("The user wants 2 + 2.\n") == []  # held: a </think> may follow
    assert parser.feed("</think>\n\nIt is 4.") == [
        ThoughtDelta("The user wants 2 + 2.\n"),
        ThoughtEnd(),
        ResponseDelta("It is 4.", False),
    ]
    assert parser.close() == [ResponseEnd(True)]
    # Without a </think>, the held text is the response once anything decides it.
    parser = Parser("hermes")
    assert parser.feed("Just 4.") == []
    assert parser.close() == [ResponseDelta("Just 4.", False), ResponseEnd(True)]
    parser = Parser("hermes")
    parser.feed("Checking.")
    assert kinds(parser.feed('<tool_call>{"name": "a"}</tool_call>')) == [
        "response", "response_end", "action_start", "action",
    ]  # fmt: skip
    # Past the hold limit the text goes out as the response, and streams from there.
    parser = Parser("hermes")
    assert texts(parser.feed("x" * (OPENERLESS_HOLD + 1))) == "x" * (OPENERLESS_HOLD + 1)
    assert parser.feed("y") == [ResponseDelta("y", False)]


def test_a_possible_lost_response_opener_is_held_only_while_it_may_be_one() -> None:
    parser = Parser()
    assert parser.feed("fin") == []
    assert texts(parser.feed("e, thanks")) == "fine, thanks"
    parser = Parser()
    assert parser.feed(' final="tr') == []
    assert parser.feed('ue">Done') == [ResponseDelta("Done", True)]

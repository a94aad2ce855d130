"""The reply assembler directly: pure, fed chunks as plain dicts (as the SDK hands over
fields it does not know), for what the real SDK cannot be made to send."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cortex_jupyter.models._reply import ReplyAssembler, ServerFailure, call_ids_in, failure_of
from cortex_jupyter.runtime.core.model.chunks import TextChunk, ToolCallReady, ToolCallStart


def delta(**fields: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": fields, "finish_reason": None}]}


def fragment(arguments: str, **call: Any) -> dict[str, Any]:
    return delta(tool_calls=[{"index": 0, **call, "function": {"arguments": arguments}}])


# Values whose JSON holds braces, quotes and backslashes inside strings.
_tricky_text = st.text(alphabet='{}"\\ ab\n:,[]é', max_size=12)
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | _tricky_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_tricky_text, inner, max_size=3),
    max_leaves=12,
)


@given(
    arguments=st.dictionaries(_tricky_text, _json_values, max_size=4).map(json.dumps),
    cuts=st.lists(st.integers(min_value=0), max_size=8),
)
def test_a_call_is_ready_exactly_when_its_object_is_complete_however_it_is_split(
    arguments: str, cuts: list[int]
) -> None:
    points = sorted({cut % (len(arguments) + 1) for cut in cuts} | {0, len(arguments)})
    pieces = [arguments[a:b] for a, b in itertools.pairwise(points)]
    assembler = ReplyAssembler()
    out = assembler.feed(delta(tool_calls=[{"index": 0, "id": "c", "function": {"name": "f"}}]))
    assert out == [ToolCallStart(0, "c", "f")]
    for number, piece in enumerate(pieces, 1):
        out = assembler.feed(fragment(piece))
        # No proper prefix of an object balances its braces: ready at the last piece only.
        expected = [ToolCallReady(0, "c", "f", arguments)] if number == len(pieces) else []
        assert out == expected
    assert [c.kind for c in assembler.close()] == ["finish"]


def test_an_error_beside_text_in_one_chunk_keeps_the_text() -> None:
    # What a later SDK that stops raising on `error` keys would hand over (OpenRouter's
    # error chunk with its last words): the text is yielded, then the failure raised.
    assembler = ReplyAssembler()
    out = assembler.feed(
        {
            "error": {"code": 502, "message": "Upstream closed"},
            "choices": [{"index": 0, "delta": {"content": "last"}, "finish_reason": "error"}],
        }
    )
    assert out == [TextChunk("last")]
    assert assembler.failure == ServerFailure("Upstream closed", "502", rejected=False)


def test_a_half_call_is_not_reported_ready_when_the_reply_fails() -> None:
    assembler = ReplyAssembler()
    assembler.feed(fragment('{"a": ', id="c", type="function"))
    assert assembler.feed({"error": "model crashed"}) == []
    assert assembler.failure == ServerFailure("model crashed")


F = ServerFailure
CONTEXT = "the request exceeds the available context size"


@pytest.mark.parametrize(
    ("body", "failure"),
    [
        # OpenRouter: a provider's status, or a word, as the code
        ({"code": "server_error", "message": "Disconnected"}, F("Disconnected", "server_error")),
        ({"code": 502, "message": "Bad gateway"}, F("Bad gateway", "502")),
        ({"code": 403, "message": "Flagged", "metadata": {}}, F("Flagged", "403", rejected=True)),
        ({"code": 429, "message": "Slow down"}, F("Slow down", "429")),
        # Groq: a malformed call is the request's; an internal error is not
        (
            {"message": "Bad call.", "type": "invalid_request_error", "code": "tool_use_failed"},
            F("Bad call.", "tool_use_failed", rejected=True),
        ),
        ({"message": "oops", "type": "internal_server_error"}, F("oops", "internal_server_error")),
        # OpenAI
        (
            {
                "message": "Too long",
                "type": "invalid_request_error",
                "code": "context_length_exceeded",
            },
            F("Too long", "context_length_exceeded", rejected=True),
        ),
        # llama.cpp
        (
            {"code": "400", "message": CONTEXT, "type": "exceed_context_size_error"},
            F(CONTEXT, "400", rejected=True),
        ),
        # Ollama: a bare string; a message naming the context length needs no code
        ("model runner has unexpectedly stopped", F("model runner has unexpectedly stopped")),
        (
            "prompt exceeds the context length",
            F("prompt exceeds the context length", rejected=True),
        ),
        # nothing usable: the fallback
        ({"message": ""}, F("fallback")),
        (["odd"], F("fallback")),
    ],
)
def test_in_stream_errors_say_whose_fault_they_are(body: object, failure: ServerFailure) -> None:
    assert failure_of(body, "fallback") == failure


def test_the_ids_a_conversation_holds() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "a"}, {"id": "b"}, "junk"]},
        {"role": "tool", "content": "1", "tool_call_id": "a"},
        {"role": "tool", "content": "2", "tool_call_id": "c"},
    ]
    assert call_ids_in(messages) == {"a", "b", "c"}


def test_ids_reported_are_added_to_the_set_the_caller_passed() -> None:
    taken = {"call_0"}
    assembler = ReplyAssembler(taken)
    out = assembler.feed(
        delta(
            tool_calls=[
                {"index": 0, "id": "call_0", "function": {"name": "f", "arguments": "{}"}},
                {"index": 1, "id": "fresh", "function": {"name": "g", "arguments": "{}"}},
            ]
        )
    )
    ids = [c.id for c in out if isinstance(c, ToolCallReady)]
    assert ids[0] != "call_0"
    assert ids[1] == "fresh"
    assert taken == {"call_0", *ids}


def test_a_call_nested_too_deep_to_decode_is_ready_when_complete() -> None:
    # Ready (so the runtime refuses it with one line while the reply goes on), not held
    # until the reply ends because json.loads overflowed the stack on it.
    arguments = '{"value": ' + "[" * 1500 + "]" * 1500 + "}"
    assembler = ReplyAssembler()
    assembler.feed(delta(tool_calls=[{"index": 0, "id": "c", "function": {"name": "f"}}]))
    assert assembler.feed(fragment(arguments[:1000])) == []
    assert assembler.feed(fragment(arguments[1000:])) == [ToolCallReady(0, "c", "f", arguments)]

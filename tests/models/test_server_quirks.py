"""Servers as they really are: each test replays, through the real openai SDK, an event
stream shaped like one a real server sent (NOTES.md, "Real servers' SSE"), and names the
quirk it pins and the server it comes from."""

from __future__ import annotations

import re
import threading
from contextlib import aclosing
from typing import Any

import pytest

from cortex_jupyter.models import (
    ContextTooLong,
    ModelError,
    OpenAIModel,
    ReplyRejected,
    ServerError,
)
from cortex_jupyter.runtime import Agent, Registry
from cortex_jupyter.runtime.core.model.chunks import (
    ChatMessage,
    Finish,
    ModelChunk,
    ReasoningChunk,
    RefusalChunk,
    TextChunk,
    ToolCallPayload,
    ToolCallReady,
    ToolCallStart,
    Usage,
    text_client,
)
from cortex_jupyter.runtime.core.model.client import complete

from .fake_openai_server import (
    FakeOpenAIServer,
    Stream,
    blank_lines,
    chunk,
    comment,
    event,
    finish,
    refusal,
    role,
    text,
    tool_call,
    usage,
)
from .test_openai_client import (
    HELLO,
    MASKED_KEY,
    assert_no_key,
    called,
    collect,
    collect_until_error,
    model_for,
)

GENERATED_ID = re.compile(r"call_[0-9a-f]{12}")


async def stream_until(
    model: OpenAIModel, gate: threading.Event, kind: type[ModelChunk]
) -> tuple[list[ModelChunk], bool]:
    """Every chunk of the reply; opens ``gate`` at the first ``kind`` chunk and says
    whether the server was still holding back the rest then."""
    got: list[ModelChunk] = []
    held_back = False
    async with aclosing(model.stream(HELLO)) as chunks:
        async for c in chunks:
            got.append(c)
            if isinstance(c, kind) and not gate.is_set():
                held_back = True
                gate.set()
    return got, held_back


def openrouter_chunk(**fields: Any) -> dict[str, Any]:
    """A chunk as OpenRouter sends it: its own fields (`provider`) beside OpenAI's."""
    return {**chunk({}), "provider": "OpenAI", **fields}


# --------------------------------------------------------------------------- refusals


@pytest.mark.anyio
async def test_a_refusal_streams_as_refusal_chunks(server: FakeOpenAIServer) -> None:
    # OpenAI: a refusal arrives in `delta.refusal`, with `content` null throughout.
    server.script(
        Stream(
            [
                chunk({"role": "assistant", "content": None, "refusal": ""}),
                refusal("I'm sorry, "),
                refusal("I can't help with that."),
                finish("stop"),
                usage(12, 9),
            ]
        )
    )
    assert await collect(model_for(server)) == [
        RefusalChunk("I'm sorry, "),
        RefusalChunk("I can't help with that."),
        Usage(12, 9),
        Finish("stop"),
    ]


@pytest.mark.anyio
async def test_an_llm_action_gets_the_refusal_as_its_answer(server: FakeOpenAIServer) -> None:
    # OpenAI: a refused `llm` action answers with its refusal, not an empty string.
    server.script(Stream([refusal("I can't help with that."), finish()]))
    assert await complete(text_client(model_for(server)), HELLO) == "I can't help with that."


# --------------------------------------------------------------------------- errors


@pytest.mark.anyio
async def test_openrouters_error_chunk_ends_the_reply_after_what_arrived(
    server: FakeOpenAIServer,
) -> None:
    # OpenRouter: a provider failing mid-reply becomes an ordinary chunk with an `error`
    # key beside `choices` (finish_reason "error"); the HTTP status stays 200.
    failed = openrouter_chunk(
        error={"code": "server_error", "message": "Provider disconnected unexpectedly"},
        choices=[{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}],
    )
    server.script(Stream([role(), comment("OPENROUTER PROCESSING"), text("Half an an"), failed]))
    got, error = await collect_until_error(model_for(server))
    assert got == [TextChunk("Half an an")]
    assert isinstance(error, ServerError)
    assert error.continuable  # the provider's failure: asking again may well work
    assert (error.status, error.code) == (None, "server_error")
    assert str(error).startswith(
        f"The server at http://127.0.0.1:{server.port} reported an error in the middle of "
        "the reply (server_error) for model 'fake-model'."
    )
    assert str(error).endswith("The server said: Provider disconnected unexpectedly")
    assert len(server.requests) == 1  # not silently asked again


@pytest.mark.anyio
@pytest.mark.parametrize("with_error_key", [True, False])
async def test_the_tokens_a_failed_reply_spent_are_kept(
    server: FakeOpenAIServer, with_error_key: bool
) -> None:
    # OpenRouter: the chunk that carries the error also carries `usage`, what the failed
    # reply cost (the SDK raises on the `error` key; a proxy that drops the key passes
    # finish_reason "error" on): the run counts those tokens.
    failed = openrouter_chunk(
        choices=[{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}],
        usage={"prompt_tokens": 120, "completion_tokens": 7, "total_tokens": 127},
    )
    if with_error_key:
        failed["error"] = {"code": 502, "message": "Provider returned error"}
    server.script(Stream([role(), text("<response>Half an an"), failed]))
    got, error = await collect_until_error(model_for(server))
    assert got == [TextChunk("<response>Half an an"), Usage(120, 7)]
    assert isinstance(error, ServerError)

    server.script(Stream([role(), text("<response>Half an an"), failed]))
    run = await Agent(model=model_for(server), registry=Registry(builtins=False)).run("Hi")
    assert run.status == "interrupted"
    assert run.usage == {"prompt_tokens": 120, "completion_tokens": 7}


@pytest.mark.anyio
async def test_an_error_the_request_causes_is_not_continuable(server: FakeOpenAIServer) -> None:
    # OpenRouter relays a provider's refusal mid-stream with the provider's HTTP status
    # as `code`: asking again with the same conversation gets the same error.
    failed = openrouter_chunk(
        error={
            "code": 400,
            "message": "This endpoint's maximum context length is 8192 tokens. However, "
            f"you requested about 9100 tokens (key {MASKED_KEY}).",
        }
    )
    server.script(Stream([text("Sure"), failed]))
    got, error = await collect_until_error(model_for(server))
    assert got == [TextChunk("Sure")]
    # over the context window: the one line says what to do about it
    assert isinstance(error, ContextTooLong)
    assert not error.continuable
    assert "no longer fits model 'fake-model''s context window" in str(error)
    assert "maximum context length is 8192 tokens" in str(error)
    assert_no_key(str(error))
    assert "[redacted]" in str(error)


GROQ_TOOL_USE_FAILED = {
    "error": {
        "message": "Failed to call a function. Please adjust your prompt. See "
        "'failed_generation' for more details.",
        "type": "invalid_request_error",
        "code": "tool_use_failed",
        "failed_generation": '<function=search{"q": "x"}</function>',
    }
}
GROQ_INTERNAL = {
    "error": {"message": "Internal Server Error", "type": "internal_server_error", "code": None}
}


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("frame", "expected", "continuable", "code"),
    [
        (GROQ_TOOL_USE_FAILED, ReplyRejected, False, "tool_use_failed"),
        (GROQ_INTERNAL, ServerError, True, "internal_server_error"),
    ],
    ids=["tool_use_failed", "internal"],
)
async def test_groqs_error_event_without_done_ends_the_reply(
    server: FakeOpenAIServer,
    frame: dict[str, Any],
    expected: type[ModelError],
    continuable: bool,
    code: str,
) -> None:
    # Groq: the error is an `event: error` frame and the stream ends there, no [DONE].
    server.script(Stream([role(), text("Let me look"), event("error", frame)], done=False))
    got, error = await collect_until_error(model_for(server))
    assert got == [TextChunk("Let me look")]
    assert type(error) is expected
    assert error.continuable is continuable
    assert getattr(error, "code", None) == code
    assert frame["error"]["message"] in str(error)


@pytest.mark.anyio
async def test_an_error_event_the_sdk_passes_through_is_raised_too(
    server: FakeOpenAIServer,
) -> None:
    # vLLM's ErrorResponse shape sent as the event itself (`object: "error"`, no `error`
    # key): the SDK does not raise on it, it hands it over as a chunk.
    oops = {"object": "error", "message": "Prompt too long", "type": "BadRequestError", "code": 400}
    server.script(Stream([text("so far"), oops, text("never read")]))
    got, error = await collect_until_error(model_for(server))
    assert got == [TextChunk("so far")]
    assert isinstance(error, ReplyRejected)
    assert "The server said: Prompt too long" in str(error)


@pytest.mark.anyio
async def test_a_finish_reason_error_is_a_failure_not_an_answer(server: FakeOpenAIServer) -> None:
    # OpenRouter's finish_reason "error", as a proxy that drops the `error` key passes it
    # on: the partial text must not be taken for the model's whole answer; the usage chunk
    # after it is still read, and what the failed reply cost is counted.
    server.script(Stream([text("The answer is"), finish("error"), usage(5, 3)]))
    got, error = await collect_until_error(model_for(server))
    assert got == [TextChunk("The answer is"), Usage(5, 3)]
    assert isinstance(error, ServerError)
    assert error.continuable
    assert 'in the middle of the reply (finish_reason "error")' in str(error)


# An error or usage after finish_reason: the reply has ended, so what follows is its tail (the
# tokens it cost, a restatement of why it ended). The stream is read to its end whatever came
# before, the usage is kept, and the reply ends as its finish_reason said.

OPENROUTER_USAGE = {"prompt_tokens": 120, "completion_tokens": 64, "total_tokens": 184}


def openrouter_cut() -> list[dict[str, Any]]:
    """OpenRouter's real stream for a reply cut at max_tokens: the `length` chunk, then a
    chunk with an `error` (code 400, "Token limit reached"), finish_reason null and the
    usage, then [DONE]."""
    return [
        openrouter_chunk(
            choices=[{"index": 0, "delta": {"content": ""}, "finish_reason": "length"}]
        ),
        openrouter_chunk(
            error={"code": 400, "message": "Token limit reached"},
            choices=[{"index": 0, "delta": {"content": ""}, "finish_reason": None}],
            usage=OPENROUTER_USAGE,
        ),
    ]


@pytest.mark.anyio
async def test_openrouters_token_limit_error_after_length_keeps_the_cut_and_the_usage(
    server: FakeOpenAIServer,
) -> None:
    # OpenRouter (the order its real stream has): finish_reason "length", then the error
    # chunk that carries the usage. Not a failure: the reply was cut, and it cost tokens.
    server.script(Stream([role(), text("<response>Once upon a"), *openrouter_cut()]))
    got = await collect(model_for(server))
    assert got == [TextChunk("<response>Once upon a"), Usage(120, 64), Finish("length")]

    server.script(Stream([role(), text("<response>Once upon a"), *openrouter_cut()]))
    run = await Agent(model=model_for(server), registry=Registry(builtins=False)).run("Hi")
    assert run.status == "truncated"
    assert run.usage == {"prompt_tokens": 120, "completion_tokens": 64}


@pytest.mark.anyio
@pytest.mark.parametrize(
    "tail",
    [
        # Groq: an `event: error` frame after the finish, and no [DONE]
        pytest.param([event("error", GROQ_INTERNAL)], id="groq-error-frame"),
        # the usage chunk (`choices: []`), then an error chunk
        pytest.param(
            [usage(9, 4), openrouter_chunk(error={"code": 502, "message": "upstream closed"})],
            id="usage-then-error",
        ),
        # an error chunk, then the usage chunk: read on to the end for it
        pytest.param(
            [openrouter_chunk(error={"code": 502, "message": "upstream closed"}), usage(9, 4)],
            id="error-then-usage",
        ),
        # Groq's error frame, then the usage chunk
        pytest.param([event("error", GROQ_INTERNAL), usage(9, 4)], id="groq-frame-then-usage"),
    ],
)
async def test_an_error_after_the_finish_is_the_replys_tail_not_its_failure(
    server: FakeOpenAIServer, tail: list[Any]
) -> None:
    server.script(Stream([role(), text("Done."), finish("stop"), *tail], done=False))
    got = await collect(model_for(server))
    counted = [Usage(9, 4)] if any(c == usage(9, 4) for c in tail) else []
    assert got == [TextChunk("Done."), *counted, Finish("stop")]


@pytest.mark.anyio
async def test_the_usage_after_a_failure_is_still_counted(server: FakeOpenAIServer) -> None:
    # An error in the middle of the reply, then the usage chunk (`choices: []`) the request
    # asked for: the failure is raised, after the tokens it cost are reported.
    failed = openrouter_chunk(error={"code": 502, "message": "Provider returned error"})
    server.script(Stream([role(), text("Half"), failed, usage(30, 2)]))
    got, error = await collect_until_error(model_for(server))
    assert got == [TextChunk("Half"), Usage(30, 2)]
    assert isinstance(error, ServerError)
    assert "Provider returned error" in str(error)


# --------------------------------------------------------------------------- content shapes


@pytest.mark.anyio
async def test_mistral_content_parts_split_into_reasoning_and_text(
    server: FakeOpenAIServer,
) -> None:
    # Mistral (magistral): `content` is a list of parts; `thinking` parts hold a list of
    # text parts; later deltas may go back to a plain string.
    def thinking(words: str) -> dict[str, Any]:
        return {"type": "thinking", "thinking": [{"type": "text", "text": words}]}

    server.script(
        Stream(
            [
                chunk({"role": "assistant", "content": [thinking("The user greets")]}),
                chunk({"content": [thinking(" me.")]}),
                chunk({"content": [thinking(" Reply."), {"type": "text", "text": "Hello"}]}),
                chunk({"content": [{"type": "text", "text": " there"}]}),
                chunk({"content": "!"}),
                finish(),
            ]
        )
    )
    assert await collect(model_for(server)) == [
        ReasoningChunk("The user greets"),
        ReasoningChunk(" me."),
        ReasoningChunk(" Reply."),
        TextChunk("Hello"),
        TextChunk(" there"),
        TextChunk("!"),
        Finish("stop"),
    ]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("content", "expected"),
    [
        # text parts with no type, parts that are bare strings
        ([{"text": "a"}, "b", {"type": "text", "text": "c"}], [TextChunk("abc")]),
        # nested lists, and thinking text given as a string
        (
            [[{"type": "thinking", "thinking": "hm"}], [["x"]]],
            [ReasoningChunk("hm"), TextChunk("x")],
        ),
        # parts that hold no text (Mistral's references, images) are skipped
        ([{"type": "reference", "reference_ids": [1]}, {"text": "ok"}], [TextChunk("ok")]),
        ([{"type": "image_url", "image_url": {"url": "data:,"}}], []),
        # a refusal part (the request-side shape, sent back by some proxies)
        ([{"type": "refusal", "refusal": "No."}], [RefusalChunk("No.")]),
        # empty and null parts
        ([{"type": "text", "text": ""}, None, []], []),
    ],
    ids=["loose", "nested", "reference", "image", "refusal", "empty"],
)
async def test_content_parts_of_any_shape_keep_their_text(
    server: FakeOpenAIServer, content: list[Any], expected: list[ModelChunk]
) -> None:
    server.script(Stream([chunk({"content": content}), finish()]))
    assert await collect(model_for(server)) == [*expected, Finish("stop")]


@pytest.mark.anyio
async def test_llama_cpp_tool_markup_in_content_passes_through_untouched(
    server: FakeOpenAIServer,
) -> None:
    # llama.cpp: a Qwen-style model's call leaks into `content` as markup (the parser's
    # `hermes` dialect reads it); the model layer passes it on exactly as it came.
    leaked = '<tool_call>\n<function=search>\n<parameter=q>\n"a < b"\n</parameter>\n</function>'
    pieces = [leaked[:9], leaked[9:30], leaked[30:]]
    server.script(Stream([*(text(p) for p in pieces), finish()]))
    assert await collect(model_for(server)) == [*(TextChunk(p) for p in pieces), Finish("stop")]


# --------------------------------------------------------------------------- reasoning


@pytest.mark.anyio
async def test_openrouter_reasoning_beside_reasoning_details_is_shown_once(
    server: FakeOpenAIServer,
) -> None:
    # OpenRouter: `reasoning` and `reasoning_details` carry the same text in one delta.
    def both(words: str) -> dict[str, Any]:
        details = [{"type": "reasoning.text", "text": words, "format": "unknown", "index": 0}]
        return chunk({"content": "", "reasoning": words, "reasoning_details": details})

    server.script(Stream([both("Two"), both(" steps."), text("Done."), finish()]))
    assert await collect(model_for(server)) == [
        ReasoningChunk("Two"),
        ReasoningChunk(" steps."),
        TextChunk("Done."),
        Finish("stop"),
    ]


@pytest.mark.anyio
async def test_reasoning_details_alone_are_shown_and_encrypted_ones_skipped(
    server: FakeOpenAIServer,
) -> None:
    # OpenRouter, for providers that summarise reasoning (and send it encrypted beside).
    details = [
        {"type": "reasoning.summary", "summary": "Checked the units."},
        {"type": "reasoning.encrypted", "data": "gAAAAABo..."},
    ]
    server.script(Stream([chunk({"reasoning_details": details}), text("42"), finish()]))
    assert await collect(model_for(server)) == [
        ReasoningChunk("Checked the units."),
        TextChunk("42"),
        Finish("stop"),
    ]


@pytest.mark.anyio
async def test_content_on_gpt_oss_analysis_channel_is_reasoning(server: FakeOpenAIServer) -> None:
    # gpt-oss behind servers that pass harmony's `channel` on: `content` on the analysis
    # channel is reasoning, on the final channel the reply; when `reasoning` carries the
    # same text too it is shown once.
    server.script(
        Stream(
            [
                chunk({"channel": "analysis", "content": "Need the date."}),
                chunk({"channel": "analysis", "content": " Easy.", "reasoning": " Easy."}),
                chunk({"channel": "final", "content": "It is Monday."}),
                finish(),
            ]
        )
    )
    assert await collect(model_for(server)) == [
        ReasoningChunk("Need the date."),
        ReasoningChunk(" Easy."),
        TextChunk("It is Monday."),
        Finish("stop"),
    ]


# --------------------------------------------------------------------------- usage, choices


@pytest.mark.anyio
async def test_usage_sent_in_every_chunk_is_the_last_not_the_sum(
    server: FakeOpenAIServer,
) -> None:
    # Some servers (vLLM with continuous_usage_stats, some proxies) put running usage
    # totals on every chunk: the last is the reply's.
    script = [chunk({"content": c}, usage=(10, n)) for n, c in enumerate("abc", 1)]
    server.script(Stream([*script, chunk({}, "stop", usage=(10, 4))]))
    assert await collect(model_for(server)) == [
        TextChunk("a"),
        TextChunk("b"),
        TextChunk("c"),
        Usage(10, 4),
        Finish("stop"),
    ]


@pytest.mark.anyio
async def test_usage_on_the_finish_chunk_is_recorded(server: FakeOpenAIServer) -> None:
    # DeepSeek and llama.cpp: usage on the chunk that carries finish_reason, no usage-only
    # chunk after it.
    server.script(Stream([text("ok"), chunk({}, "stop", usage=(7, 1))]))
    assert await collect(model_for(server)) == [TextChunk("ok"), Usage(7, 1), Finish("stop")]


@pytest.mark.anyio
async def test_only_the_first_choice_is_read_when_a_server_sends_several(
    server: FakeOpenAIServer,
) -> None:
    # n > 1 (a request or a server default): choices are interleaved by index; only
    # choice 0 is the reply, and its own finish_reason is the one reported.
    two = {**chunk({}), "choices": [
        {"index": 1, "delta": {"content": "B1"}, "finish_reason": None},
        {"index": 0, "delta": {"content": "A1"}, "finish_reason": None},
    ]}  # fmt: skip
    server.script(
        Stream(
            [
                two,
                chunk({"content": "B2"}, index=1),
                chunk({"content": "A2"}),
                chunk({}, "length", index=1),
                chunk({"content": "A3"}),
                chunk({}, "stop"),
                usage(4, 8),
            ]
        )
    )
    assert await collect(model_for(server)) == [
        TextChunk("A1"),
        TextChunk("A2"),
        TextChunk("A3"),
        Usage(4, 8),
        Finish("stop"),
    ]


@pytest.mark.anyio
async def test_openrouter_comments_and_blank_keep_alives_are_ignored(
    server: FakeOpenAIServer,
) -> None:
    # OpenRouter sends `: OPENROUTER PROCESSING` comment lines while a provider thinks,
    # before and between events; other servers send blank lines to keep the line open.
    processing = comment("OPENROUTER PROCESSING")
    server.script(
        Stream(
            [
                processing,
                blank_lines(3),
                processing,
                role(),
                text("Hi"),
                processing,
                blank_lines(2),
                text("!"),
                finish(),
                processing,
                usage(3, 2),
            ]
        )
    )
    assert await collect(model_for(server)) == [
        TextChunk("Hi"),
        TextChunk("!"),
        Usage(3, 2),
        Finish("stop"),
    ]


@pytest.mark.anyio
@pytest.mark.parametrize("reason", ["length", "content_filter"])
async def test_length_and_content_filter_reach_the_loop(
    server: FakeOpenAIServer, reason: str
) -> None:
    # OpenAI (and every compatible server): a reply cut at max_tokens ends "length"; one
    # stopped by the content filter "content_filter" - the loop decides what each means.
    server.script(Stream([text("Once upon a"), finish(reason), usage(5, 3)]))
    got = await collect(model_for(server))
    assert got == [TextChunk("Once upon a"), Usage(5, 3), Finish(reason)]


# --------------------------------------------------------------------------- tool-call ids


def llama_cpp_call(name: str, arguments: str) -> dict[str, Any]:
    """A call as older llama.cpp servers send it: whole, with an index but no id."""
    call = {"index": 0, "type": "function", "function": {"name": name, "arguments": arguments}}
    return chunk({"tool_calls": [call]})


@pytest.mark.anyio
async def test_made_up_ids_differ_across_replies(server: FakeOpenAIServer) -> None:
    # llama.cpp and some vLLM builds send no id: a made-up `call_0` in every reply would
    # make the run refuse the second turn's call as a duplicate.
    model = model_for(server)
    ids = []
    for _ in range(3):
        server.script(Stream([llama_cpp_call("add", '{"a": 1}'), finish("tool_calls")]))
        start, ready, _finish = await collect(model)
        assert start.id == ready.id
        ids.append(start.id)
    assert all(GENERATED_ID.fullmatch(i) for i in ids)
    assert len(set(ids)) == 3


def explicit_call(call_id: str) -> list[dict[str, Any]]:
    return [*tool_call(0, call_id, "add", '{"a": 1}'), finish("tool_calls")]


@pytest.mark.anyio
async def test_an_id_the_server_sends_in_every_reply_is_replaced_after_the_first(
    server: FakeOpenAIServer,
) -> None:
    # Servers that number calls per reply (`call_0` every turn): the first keeps the
    # server's id, later replies of the same model get new ones.
    model = model_for(server)
    server.script(Stream(explicit_call("call_0")), Stream(explicit_call("call_0")))
    first = await collect(model)
    second = await collect(model)
    assert first[0] == ToolCallStart(0, "call_0", "add")
    assert first[1] == ToolCallReady(0, "call_0", "add", '{"a": 1}')
    assert GENERATED_ID.fullmatch(second[0].id)
    assert second[1] == ToolCallReady(0, second[0].id, "add", '{"a": 1}')


@pytest.mark.anyio
async def test_an_id_the_conversation_already_holds_is_replaced(server: FakeOpenAIServer) -> None:
    # The same quirk seen by a new model object (a continued run): the ids in the
    # messages sent are taken too.
    earlier: ToolCallPayload = {
        "id": "call_0",
        "type": "function",
        "function": {"name": "add", "arguments": "{}"},
    }
    messages: list[ChatMessage] = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": [earlier]},
        {"role": "tool", "content": "1", "tool_call_id": "call_0"},
    ]
    server.script(Stream(explicit_call("call_0")))
    start, *_ = await collect(model_for(server), messages)
    assert isinstance(start, ToolCallStart)
    assert GENERATED_ID.fullmatch(start.id)


@pytest.mark.anyio
async def test_one_id_for_two_calls_of_one_reply_becomes_two_ids(
    server: FakeOpenAIServer,
) -> None:
    # Servers that give every call of a reply the same id, with distinct indexes.
    script = [*tool_call(0, "call_0", "f", "{}"), *tool_call(1, "call_0", "g", "{}"), finish()]
    server.script(Stream(script))
    ready = [c for c in await collect(model_for(server)) if isinstance(c, ToolCallReady)]
    assert [(c.index, c.name) for c in ready] == [(0, "f"), (1, "g")]
    assert ready[0].id == "call_0"
    assert GENERATED_ID.fullmatch(ready[1].id)


@pytest.mark.anyio
@pytest.mark.parametrize("server_id", ["call_0", None], ids=["same-id", "no-id"])
async def test_every_turns_call_runs_in_the_agent_loop(
    server: FakeOpenAIServer, server_id: str | None
) -> None:
    # The symptom these ids fix, end to end: llama.cpp-style replies (the same `call_0`,
    # or no id, in every turn) used to have the second turn's call refused as a
    # duplicate id. Each turn's call runs, and each answer goes back under its own id.
    registry = Registry(builtins=False)

    @registry.tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    def turn(a: int) -> Stream:
        call = tool_call(0, server_id, "add", f'{{"a": {a}, "b": 1}}')
        return Stream([*call, finish("tool_calls")])

    server.script(turn(1), turn(10), Stream([text("<response>2 and 11</response>"), finish()]))
    agent = Agent(model=model_for(server), registry=registry, native_tools=True)
    run = await agent.run("add twice")
    assert run.status == "completed"
    assert run.errors == []
    assert [(n.name, n.status, n.output) for n in run.actions.values()] == [
        ("add", "done", 2),
        ("add", "done", 11),
    ]
    last = server.requests[-1].json["messages"]
    answers = [m["tool_call_id"] for m in last if m["role"] == "tool"]
    asked = [c["id"] for m in last for c in m.get("tool_calls") or ()]
    assert answers == asked == list(run.actions)
    assert len(set(answers)) == 2


# --------------------------------------------------------------------------- tool calls ready early


@pytest.mark.anyio
async def test_a_call_is_ready_the_moment_its_json_object_is_complete(
    server: FakeOpenAIServer,
) -> None:
    # OpenAI streams the arguments in fragments: the call may start as soon as the last
    # brace arrives, while the server still holds back finish_reason (the gate).
    arguments = '{"city": "Paris", "days": 3}'
    fragments = tool_call(0, "call_a", "get_weather", arguments, pieces=5)
    gate = threading.Event()
    before_finish = 1 + len(fragments)
    server.script(Stream([role(), *fragments, finish("tool_calls")], gates=[(before_finish, gate)]))
    got, held_back = await stream_until(model_for(server), gate, ToolCallReady)
    assert held_back
    assert not server.gate_timed_out
    assert got == [*called("call_a", "get_weather", arguments), Finish("tool_calls")]


@pytest.mark.anyio
async def test_ollamas_whole_call_is_ready_at_once(server: FakeOpenAIServer) -> None:
    # Ollama sends each call whole in one chunk (name, id and all the arguments).
    call = {
        "id": "call_x1y2z3",
        "index": 0,
        "type": "function",
        "function": {"name": "add", "arguments": '{"a":1,"b":2}'},
    }
    gate = threading.Event()
    whole = chunk({"role": "assistant", "content": "", "tool_calls": [call]})
    script = [whole, finish("tool_calls")]
    server.script(Stream(script, gates=[(1, gate)]))
    got, held_back = await stream_until(model_for(server), gate, ToolCallReady)
    assert held_back
    assert not server.gate_timed_out
    assert got == [*called("call_x1y2z3", "add", '{"a":1,"b":2}'), Finish("tool_calls")]


@pytest.mark.anyio
async def test_braces_and_quotes_inside_strings_do_not_end_the_call_early(
    server: FakeOpenAIServer,
) -> None:
    # Code as an argument: the object ends at its own last brace - not at one inside a
    # string, nor after an escaped quote - and there, before finish_reason (the gate).
    arguments = '{"code": "if (x) { y(); }", "say": "\\"}\\" \\\\", "n": {"k": 1}}'
    fragments = [arguments[:20], arguments[20:29], arguments[29:40], arguments[40:]]
    calls = [chunk({"tool_calls": [{"index": 0, "function": {"arguments": f}}]}) for f in fragments]
    script = [*tool_call(0, "c1", "run", ""), *calls, finish("tool_calls")]
    gate = threading.Event()
    server.script(Stream(script, gates=[(len(script) - 1, gate)]))
    got, held_back = await stream_until(model_for(server), gate, ToolCallReady)
    assert held_back
    assert not server.gate_timed_out
    assert got == [*called("c1", "run", arguments), Finish("tool_calls")]


@pytest.mark.anyio
async def test_arguments_that_are_not_an_object_wait_for_the_end_of_the_call(
    server: FakeOpenAIServer,
) -> None:
    # A model that writes a list (or a half object) as arguments: nothing says it is
    # complete, so it is ready when the next call begins or the choice finishes, and the
    # runtime reports it.
    first = tool_call(0, "c1", "f", "[1, 2]", pieces=2)
    gate = threading.Event()
    script = [*first, *tool_call(1, "c2", "g", "{}"), finish("tool_calls")]
    server.script(Stream(script, gates=[(len(first), gate)]))
    got: list[ModelChunk] = []
    async with aclosing(model_for(server).stream(HELLO)) as chunks:
        async for c in chunks:
            got.append(c)
            if isinstance(c, ToolCallStart):
                gate.set()
    assert got == [
        *called("c1", "f", "[1, 2]"),
        *called("c2", "g", "{}", index=1),
        Finish("tool_calls"),
    ]


@pytest.mark.anyio
async def test_text_after_a_complete_call_is_a_call_of_its_own(server: FakeOpenAIServer) -> None:
    # Servers that merge two calls' arguments into one call (`{...}{...}`), or trail
    # whitespace: whitespace is dropped; anything else is not lost silently but reported
    # as a call of its own with the same name and a new id (the runtime runs or refuses
    # it, where the user sees it).
    fragments = ['{"city": "Paris"}', "\n ", '{"city": ', '"Rome"}', "  "]
    calls = [chunk({"tool_calls": [{"index": 0, "function": {"arguments": f}}]}) for f in fragments]
    server.script(Stream([*tool_call(0, "c1", "weather", ""), *calls, finish("tool_calls")]))
    first_start, first_ready, second_start, second_ready, end = await collect(model_for(server))
    assert first_start == ToolCallStart(0, "c1", "weather")
    assert first_ready == ToolCallReady(0, "c1", "weather", '{"city": "Paris"}')
    assert second_start == ToolCallStart(1, second_start.id, "weather")
    assert GENERATED_ID.fullmatch(second_start.id)
    assert second_ready == ToolCallReady(1, second_start.id, "weather", '{"city": "Rome"}')
    assert end == Finish("tool_calls")


@pytest.mark.anyio
async def test_arguments_sent_as_an_object_are_passed_on_as_json(
    server: FakeOpenAIServer,
) -> None:
    # Proxies that translate from other APIs sometimes send `arguments` as the object
    # itself instead of its JSON text.
    call = {"index": 0, "id": "c1", "function": {"name": "add", "arguments": {"a": 1}}}
    server.script(Stream([chunk({"tool_calls": [call]}), finish("tool_calls")]))
    assert await collect(model_for(server)) == [
        *called("c1", "add", '{"a": 1}'),
        Finish("tool_calls"),
    ]


@pytest.mark.anyio
async def test_a_negative_token_count_is_not_subtracted_from_the_runs(
    server: FakeOpenAIServer,
) -> None:
    # Server bytes are untrusted: a proxy's `"prompt_tokens": -5` must not take tokens off
    # what the run spent (its cost, its context meter).
    broken = chunk({}) | {"choices": [], "usage": {"prompt_tokens": -5, "completion_tokens": 3}}
    server.script(Stream([role(), text("Done."), finish("stop"), broken]))
    assert await collect(model_for(server)) == [TextChunk("Done."), Usage(0, 3), Finish("stop")]

"""OpenAIModel through the real openai SDK against a scripted OpenAI-compatible server."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Sequence
from contextlib import aclosing
from typing import Any, TypeVar

import anyio
import pytest

from cortex_jupyter.models import (
    AuthenticationFailed,
    BadRequest,
    CannotConnect,
    ContextTooLong,
    MissingAPIKey,
    ModelError,
    OpenAIModel,
    RateLimited,
    ServerError,
    StreamDropped,
    UnexpectedReply,
    UnknownModel,
)
from cortex_jupyter.runtime.core.model.chunks import (
    Finish,
    Message,
    ModelChunk,
    ReasoningChunk,
    TextChunk,
    ToolCallReady,
    ToolCallStart,
    Usage,
    text_client,
    tool_definition,
)
from cortex_jupyter.runtime.core.model.client import complete

from .fake_openai_server import (
    Error,
    FakeOpenAIServer,
    Stream,
    chunk,
    finish,
    free_port,
    reasoning,
    role,
    text,
    texts,
    tool_call,
    usage,
)

# Shaped like a real project key, so the redaction that matters is the one tested.
KEY = "sk-proj-Ab12cd34EF56gh78IJ90kl12MN34op56QR78st90wxyz"
# The visible parts of the key as OpenAI's 401 body shows them, and its ends.
KEY_PARTS = (KEY, "sk-proj-Ab", "Ab12", "wxyz", KEY[8:20])
MASKED_KEY = "sk-proj-Ab**********************************wxyz"

HELLO: list[Message] = [{"role": "user", "content": "hi"}]


def assert_no_key(text: str) -> None:
    for part in KEY_PARTS:
        assert part not in text, f"{part!r} leaked into: {text}"


E = TypeVar("E", bound=ModelError)


def model_for(server: FakeOpenAIServer, **options: Any) -> OpenAIModel:
    options.setdefault("api_key", KEY)
    return OpenAIModel("fake-model", base_url=server.url, **options)


def called(id: str, name: str, arguments: str, index: int = 0) -> list[ModelChunk]:
    """The chunks of one tool call as the client streams it: its start, then ready."""
    return [ToolCallStart(index, id, name), ToolCallReady(index, id, name, arguments)]


async def collect(model: OpenAIModel, messages: Sequence[Message] = HELLO, **kw: Any) -> list[Any]:
    async with aclosing(model.stream(messages, **kw)) as chunks:
        return [c async for c in chunks]


async def refusal(server: FakeOpenAIServer, kind: type[E], status: int, body: Any) -> E:
    """The ``kind`` of error the client raises when the server answers ``status``, ``body``."""
    server.script(Error(status, body))
    with pytest.raises(kind) as caught:
        await collect(model_for(server))
    return caught.value


async def collect_until_error(model: OpenAIModel) -> tuple[list[ModelChunk], ModelError]:
    got: list[ModelChunk] = []
    with pytest.raises(ModelError) as caught:
        async with aclosing(model.stream(HELLO)) as chunks:
            async for c in chunks:
                got.append(c)
    return got, caught.value


def joined(chunks: Sequence[object], kind: type[TextChunk | ReasoningChunk] = TextChunk) -> str:
    return "".join(c.text for c in chunks if isinstance(c, kind))


# --------------------------------------------------------------------------- streaming


@pytest.mark.anyio
async def test_text_streams_as_text_chunks_then_usage_then_finish(
    server: FakeOpenAIServer,
) -> None:
    server.script(Stream([role(), *texts("<thought>hello</thought>", 5), finish(), usage(9, 6)]))
    chunks = await collect(model_for(server))
    assert chunks == [
        TextChunk("<thou"),
        TextChunk("ght>h"),
        TextChunk("ello<"),
        TextChunk("/thou"),
        TextChunk("ght>"),
        Usage(prompt_tokens=9, completion_tokens=6),
        Finish("stop"),
    ]
    for c in chunks:
        assert_no_key(repr(c))


@pytest.mark.anyio
async def test_the_request_is_a_streamed_chat_completion(server: FakeOpenAIServer) -> None:
    server.script(Stream([text("ok"), finish()]))
    await collect(model_for(server))
    [request] = server.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.json == {
        "model": "fake-model",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }


@pytest.mark.anyio
async def test_tools_temperature_and_max_tokens_are_sent_when_given(
    server: FakeOpenAIServer,
) -> None:
    server.script(Stream([text("ok"), finish()]))
    tool = tool_definition("add", "Add two numbers.", {"type": "object", "properties": {}})
    await collect(model_for(server), tools=[tool], temperature=0.2, max_tokens=50)
    sent = server.requests[0].json
    assert sent["tools"] == [tool]
    assert sent["temperature"] == 0.2
    assert sent["max_tokens"] == 50


@pytest.mark.anyio
async def test_messages_with_tool_calls_are_sent_as_they_are(server: FakeOpenAIServer) -> None:
    server.script(Stream([text("ok"), finish()]))
    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}
    messages: list[Any] = [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": "3", "tool_call_id": "c1"},
    ]
    await collect(model_for(server), messages)
    assert server.requests[0].json["messages"] == messages


@pytest.mark.anyio
@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
async def test_reasoning_deltas_become_reasoning_chunks(
    server: FakeOpenAIServer, field: str
) -> None:
    # DeepSeek and older vLLM stream `reasoning_content`; newer vLLM and Ollama `reasoning`.
    server.script(Stream([reasoning("Let me ", field), reasoning("think.", field), text("Hi")]))
    chunks = await collect(model_for(server))
    assert chunks[:3] == [ReasoningChunk("Let me "), ReasoningChunk("think."), TextChunk("Hi")]


@pytest.mark.anyio
async def test_reasoning_sent_under_both_names_is_shown_once(server: FakeOpenAIServer) -> None:
    # Some servers send the same text as both `reasoning_content` and `reasoning`.
    both = chunk({"content": None, "reasoning_content": "hmm", "reasoning": "hmm"})
    server.script(Stream([both, finish()]))
    assert await collect(model_for(server)) == [ReasoningChunk("hmm"), Finish("stop")]


@pytest.mark.anyio
async def test_a_server_that_never_sends_usage_still_finishes(server: FakeOpenAIServer) -> None:
    # Older llama.cpp and many proxies ignore include_usage: no Usage chunk, no error.
    server.script(Stream([text("a"), finish("length")]))
    assert await collect(model_for(server)) == [TextChunk("a"), Finish("length")]


@pytest.mark.anyio
async def test_a_server_that_never_says_why_it_stopped_finishes_unknown(
    server: FakeOpenAIServer,
) -> None:
    # Pins servers that end with [DONE] and no finish_reason at all.
    server.script(Stream([text("a")]))
    assert await collect(model_for(server)) == [TextChunk("a"), Finish("unknown")]


@pytest.mark.anyio
async def test_finish_names_the_model_the_server_says_answered(server: FakeOpenAIServer) -> None:
    # Asked for one name, answered by a more exact one (OpenAI, OpenRouter, proxies).
    server.script(Stream([{**c, "model": "fake-model-2024-07-18"} for c in [text("a"), finish()]]))
    chunks = await collect(model_for(server))
    assert server.requests[-1].json["model"] == "fake-model"
    assert isinstance(chunks[-1], Finish) and chunks[-1].model == "fake-model-2024-07-18"


@pytest.mark.anyio
@pytest.mark.parametrize("named", [None, "", "   ", 42, {"id": "x"}, "m" * 10_000])
async def test_finish_names_no_model_when_the_server_gives_none_that_is_a_name(
    server: FakeOpenAIServer, named: object
) -> None:
    # Missing, blank, not text, or too long to be a name: none is made up.
    server.script(Stream([{**c, "model": named} for c in [text("a"), finish()]]))
    chunks = await collect(model_for(server))
    assert chunks == [TextChunk("a"), Finish("stop")]
    assert isinstance(chunks[-1], Finish) and chunks[-1].model is None


# --------------------------------------------------------------------------- tool calls


@pytest.mark.anyio
async def test_a_tool_call_is_ready_before_the_next_ones_arguments_arrive(
    server: FakeOpenAIServer,
) -> None:
    first = tool_call(0, "call_a", "get_weather", '{"city": "Paris", "days": 3}', pieces=6)
    second = tool_call(1, "call_b", "add", '{"a": 1, "b": 2}', pieces=5)
    script = [role(), *first, *second, finish("tool_calls"), usage(20, 30)]
    # Hold back call 1's argument fragments until the test has seen call 0 ready, and
    # the usage after finish_reason until it has seen call 1 ready.
    call_1_arguments = 1 + len(first) + 1
    after_finish = script.index(script[-1])
    gate_1, gate_2 = threading.Event(), threading.Event()
    server.script(Stream(script, gates=[(call_1_arguments, gate_1), (after_finish, gate_2)]))

    got: list[ModelChunk] = []
    held_back: dict[int, bool] = {}
    async with aclosing(model_for(server).stream(HELLO)) as chunks:
        async for c in chunks:
            got.append(c)
            if isinstance(c, ToolCallReady):
                gate = gate_1 if c.index == 0 else gate_2
                held_back[c.index] = not gate.is_set()
                gate.set()

    assert held_back == {0: True, 1: True}
    assert not server.gate_timed_out
    assert got == [
        *called("call_a", "get_weather", '{"city": "Paris", "days": 3}'),
        *called("call_b", "add", '{"a": 1, "b": 2}', index=1),
        Usage(20, 30),
        Finish("tool_calls"),
    ]


@pytest.mark.anyio
async def test_text_before_a_tool_call_streams_first(server: FakeOpenAIServer) -> None:
    server.script(Stream([text("Checking."), *tool_call(0, "c", "f", "{}"), finish("tool_calls")]))
    got = await collect(model_for(server))
    assert got == [
        TextChunk("Checking."),
        *called("c", "f", "{}"),
        Finish("tool_calls"),
    ]


@pytest.mark.anyio
async def test_calls_numbered_zero_with_new_ids_are_separate_calls(
    server: FakeOpenAIServer,
) -> None:
    # Pins servers that give every call index 0: a new id still means a new call.
    script = [*tool_call(0, "c1", "f", '{"x": 1}', 2), *tool_call(0, "c2", "g", "{}"), finish()]
    server.script(Stream(script))
    ready = [c for c in await collect(model_for(server)) if isinstance(c, ToolCallReady)]
    assert ready == [ToolCallReady(0, "c1", "f", '{"x": 1}'), ToolCallReady(1, "c2", "g", "{}")]


@pytest.mark.anyio
async def test_several_whole_calls_in_one_delta(server: FakeOpenAIServer) -> None:
    # Pins servers that send each call whole, several in one delta (no fragments).
    calls = [
        {"index": i, "id": f"c{i}", "function": {"name": "f", "arguments": f'{{"i": {i}}}'}}
        for i in range(2)
    ]
    server.script(Stream([chunk({"tool_calls": calls}, finish="tool_calls")]))
    assert await collect(model_for(server)) == [
        *called("c0", "f", '{"i": 0}'),
        *called("c1", "f", '{"i": 1}', index=1),
        Finish("tool_calls"),
    ]


@pytest.mark.anyio
async def test_tool_call_fragments_without_index_id_or_repeated_name(
    server: FakeOpenAIServer,
) -> None:
    # Pins servers that leave out `index` and `id`, and that repeat the name in every
    # fragment: an id is made up, fragments join the open call, the name is not doubled.
    fragments = [
        chunk({"tool_calls": [{"function": {"name": "search", "arguments": '{"q": '}}]}),
        chunk({"tool_calls": [{"function": {"name": "search", "arguments": '"cats"}'}}]}),
    ]
    server.script(Stream([*fragments, finish("tool_calls")]))
    start, ready, end = await collect(model_for(server))
    assert re.fullmatch(r"call_[0-9a-f]{12}", start.id)
    assert start == ToolCallStart(0, start.id, "search")
    assert ready == ToolCallReady(0, start.id, "search", '{"q": "cats"}')
    assert end == Finish("tool_calls")


# --------------------------------------------------------------------------- configuration


def test_a_missing_key_is_reported_at_once_with_the_variables_to_set() -> None:
    with pytest.raises(MissingAPIKey) as caught:
        OpenAIModel("gpt-4o-mini")
    message = str(caught.value)
    assert "No API key for model 'gpt-4o-mini'" in message
    assert "OPENAI_API_KEY" in message
    assert "OPENAI_BASE_URL" in message
    assert "placeholder" in message


@pytest.mark.anyio
async def test_key_and_base_url_default_to_the_sdk_variables(
    server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    model = OpenAIModel("fake-model")
    assert model.endpoint == f"http://127.0.0.1:{server.port}"
    server.script(Stream([text("ok"), finish()]))
    assert joined(await collect(model)) == "ok"
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"


def test_the_client_never_shows_the_key() -> None:
    model = OpenAIModel("gpt-4o", api_key=KEY, base_url="https://user:pw@example.test/v1?x=1")
    assert model.endpoint == "https://example.test:443"
    assert repr(model) == "OpenAIModel('gpt-4o', endpoint='https://example.test:443')"
    assert_no_key(repr(model))
    assert_no_key(str(model))
    assert_no_key(repr(vars(model)))
    assert "pw" not in repr(model)


def test_name_defaults_to_the_model() -> None:
    assert OpenAIModel("m", api_key="none").name == "m"
    assert OpenAIModel("m", api_key="none", name="local").name == "local"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"base_url": "localhost:11434/v1"}, "base_url must be an http(s) URL"),
        ({"base_url": "ftp://host/v1"}, "base_url must be an http(s) URL"),
        ({"max_retries": -1}, "max_retries must be a whole number, 0 or more; got -1"),
        ({"timeout": 0}, "timeout must be a number of seconds above 0; got 0"),
    ],
)
def test_bad_options_are_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        OpenAIModel("m", api_key="none", **options)


def test_a_bad_base_url_from_the_environment_names_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "127.0.0.1:8000")
    with pytest.raises(ValueError, match="OPENAI_BASE_URL must be an http"):
        OpenAIModel("m", api_key="none")


# --------------------------------------------------------------------------- adapting


@pytest.mark.anyio
async def test_a_server_that_rejects_stream_options_is_asked_again_without(
    server: FakeOpenAIServer,
) -> None:
    # Pins servers from before usage-in-streams that refuse the unknown field with a 400.
    rejected = {"error": {"message": "Unrecognized request argument supplied: stream_options"}}
    server.script(Error(400, rejected), Stream([text("a"), finish()]), Stream([finish()]))
    model = model_for(server)
    assert await collect(model) == [TextChunk("a"), Finish("stop")]
    await collect(model)
    assert [("stream_options" in r.json) for r in server.requests] == [True, False, False]


@pytest.mark.anyio
async def test_max_tokens_becomes_max_completion_tokens_when_the_server_asks(
    server: FakeOpenAIServer,
) -> None:
    # Pins OpenAI's reasoning models, which refuse max_tokens and name the replacement.
    refused = {
        "error": {
            "message": "Unsupported parameter: 'max_tokens' is not supported with this model. "
            "Use 'max_completion_tokens' instead.",
            "param": "max_tokens",
        }
    }
    server.script(Error(400, refused), Stream([finish()]))
    await collect(model_for(server), max_tokens=10)
    assert server.requests[0].json["max_tokens"] == 10
    assert server.requests[1].json["max_completion_tokens"] == 10
    assert "max_tokens" not in server.requests[1].json


# --------------------------------------------------------------------------- errors


@pytest.mark.anyio
async def test_401_names_the_fix_and_never_the_key(server: FakeOpenAIServer) -> None:
    # OpenAI's own 401 body echoes the refused key, masked, keeping its ends visible.
    body = {
        "error": {
            "message": f"Incorrect API key provided: {MASKED_KEY}. You can find your API key "
            "at https://platform.openai.com/account/api-keys.",
            "type": "invalid_request_error",
            "code": "invalid_api_key",
        }
    }
    error = await refusal(server, AuthenticationFailed, 401, body)
    assert str(error).startswith(
        f"The server at http://127.0.0.1:{server.port} refused the API key (HTTP 401)"
    )
    assert "Incorrect API key provided: [redacted]." in str(error)
    assert "OPENAI_API_KEY" in str(error)
    for shown in (str(error), repr(error), repr(vars(error))):
        assert_no_key(shown)
    # The SDK's error (its request holds the Authorization header) is not chained.
    assert error.__cause__ is None
    assert error.__suppress_context__


@pytest.mark.anyio
async def test_a_key_echoed_whole_by_a_proxy_is_redacted(server: FakeOpenAIServer) -> None:
    body = {"error": {"message": f"bad header Authorization: Bearer {KEY} (key {KEY})"}}
    error = await refusal(server, AuthenticationFailed, 401, body)
    assert_no_key(str(error))
    assert "Authorization: [redacted]" in str(error)


@pytest.mark.anyio
async def test_404_names_the_model_and_the_endpoint(server: FakeOpenAIServer) -> None:
    # Ollama's shape: {"error": "<message>"}.
    error = await refusal(
        server, UnknownModel, 404, {"error": 'model "fake-model" not found, try pulling it first'}
    )
    assert str(error) == (
        f"The server at http://127.0.0.1:{server.port} has no model 'fake-model' (HTTP 404). "
        "Check the model name against the server's model list, and that OPENAI_BASE_URL ends "
        'with the API root (usually /v1). The server said: model "fake-model" not found, '
        "try pulling it first"
    )


@pytest.mark.anyio
async def test_400_quotes_the_servers_message(server: FakeOpenAIServer) -> None:
    # vLLM's shape: the message at the top level, no "error" wrapper.
    body = {"object": "error", "message": "temperature must be at most 2.0, got 7"}
    error = await refusal(server, BadRequest, 400, body)
    assert error.status == 400
    assert "rejected the request for model 'fake-model' (HTTP 400)" in str(error)
    assert str(error).endswith("The server said: temperature must be at most 2.0, got 7")
    assert len(server.requests) == 1  # a 400 is not retried


@pytest.mark.anyio
async def test_a_400_over_the_context_window_says_what_to_do(server: FakeOpenAIServer) -> None:
    # vLLM's shape again; OpenAI's says "context_length_exceeded" in its code.
    body = {"object": "error", "message": "This model's maximum context length is 4096 tokens."}
    error = await refusal(server, ContextTooLong, 400, body)
    assert not error.continuable
    assert "Start afresh with %cortex reset" in str(error)
    assert str(error).endswith(
        "The server said: This model's maximum context length is 4096 tokens."
    )


@pytest.mark.anyio
async def test_429_is_retried_after_the_servers_delay(server: FakeOpenAIServer) -> None:
    busy = {"error": {"message": "Rate limit reached", "type": "requests"}}
    server.script(Error(429, busy, {"retry-after": "0.2"}), Stream([text("ok"), finish()]))
    assert joined(await collect(model_for(server))) == "ok"
    first, second = server.requests
    assert 0.18 <= second.at - first.at < 1.5
    assert second.headers["x-stainless-retry-count"] == "1"


@pytest.mark.anyio
async def test_429_after_every_retry_says_how_often_and_how_long_to_wait(
    server: FakeOpenAIServer,
) -> None:
    busy = {"error": {"message": "Rate limit reached for requests", "type": "requests"}}
    server.script(*[Error(429, busy, {"retry-after": "0.05"})] * 3)
    with pytest.raises(RateLimited) as caught:
        await collect(model_for(server, max_retries=2))
    assert len(server.requests) == 3
    assert (caught.value.tries, caught.value.retry_after) == (3, 0.05)
    assert str(caught.value) == (
        f"The server at http://127.0.0.1:{server.port} is rate-limiting model 'fake-model' "
        "(HTTP 429) after 3 tries. It asked to wait 0.05 s before retrying. Wait and run it "
        "again, or allow more retries (max_retries=...). The server said: Rate limit reached "
        "for requests"
    )


@pytest.mark.anyio
async def test_429_for_an_exhausted_quota_says_waiting_will_not_help(
    server: FakeOpenAIServer,
) -> None:
    quota = {"error": {"message": "You exceeded your current quota.", "code": "insufficient_quota"}}
    server.script(Error(429, quota, {"retry-after-ms": "10"}))
    with pytest.raises(RateLimited, match="quota is used up: check its plan and billing"):
        await collect(model_for(server, max_retries=0))


@pytest.mark.anyio
async def test_500_is_retried_then_reported_with_its_status(server: FakeOpenAIServer) -> None:
    failure = Error(500, {"error": {"message": "upstream failed"}}, {"retry-after-ms": "50"})
    server.script(failure, failure)
    with pytest.raises(ServerError) as caught:
        await collect(model_for(server, max_retries=1))
    assert len(server.requests) == 2
    assert (caught.value.status, caught.value.tries) == (500, 2)
    assert "failed (HTTP 500) after 2 tries for model 'fake-model'" in str(caught.value)
    assert str(caught.value).endswith("The server said: upstream failed")


@pytest.mark.anyio
async def test_503_then_success(server: FakeOpenAIServer) -> None:
    server.script(Error(503, "overloaded", {"retry-after": "0.05"}), Stream([text("ok")]))
    assert joined(await collect(model_for(server))) == "ok"


@pytest.mark.anyio
async def test_a_refused_connection_names_host_and_port() -> None:
    port = free_port()
    model = OpenAIModel("m", api_key=KEY, base_url=f"http://127.0.0.1:{port}/v1", max_retries=0)
    with pytest.raises(CannotConnect) as caught:
        await collect(model)
    assert str(caught.value).startswith(f"Cannot connect to 127.0.0.1:{port} for model 'm'")
    assert "Check the server is running" in str(caught.value)
    assert_no_key(str(caught.value))


# --------------------------------------------------------------------------- broken streams

ACTION_TEXT = (
    "<thought>I will look it up.</thought>\n"
    '<action type="tool" id="a1">{"name": "search", "parameters": {"q": "the weather'
)


@pytest.mark.anyio
async def test_a_connection_cut_mid_action_yields_everything_then_raises(
    server: FakeOpenAIServer,
) -> None:
    sent = texts(ACTION_TEXT, 7)
    server.script(Stream([role(), *sent], cut=True))
    got, error = await collect_until_error(model_for(server))
    assert joined(got) == ACTION_TEXT  # every chunk before the cut reached the caller
    assert isinstance(error, StreamDropped)
    assert (error.chunks, error.characters) == (len(sent) + 1, len(ACTION_TEXT))
    assert str(error) == (
        f"The reply of model 'fake-model' from http://127.0.0.1:{server.port} broke off after "
        f"{len(sent) + 1} chunks ({len(ACTION_TEXT)} characters): the connection dropped. The "
        "reply is incomplete. Run it again; if it keeps happening, check the network, and a "
        "proxy's or the server's timeouts."
    )
    assert len(server.requests) == 1  # a broken reply is not silently asked for again


@pytest.mark.anyio
async def test_a_cut_in_a_tool_call_does_not_report_it_ready(server: FakeOpenAIServer) -> None:
    server.script(Stream(tool_call(0, "c", "f", '{"x": 1', 3), cut=True))
    got, error = await collect_until_error(model_for(server))
    assert got == [ToolCallStart(0, "c", "f")]
    assert isinstance(error, StreamDropped)


@pytest.mark.anyio
async def test_a_cut_after_the_reply_finished_loses_only_usage(server: FakeOpenAIServer) -> None:
    # The reply is whole once finish_reason arrived: a cut before [DONE] costs nothing.
    server.script(Stream([text("done"), finish()], cut=True))
    assert await collect(model_for(server)) == [TextChunk("done"), Finish("stop")]


@pytest.mark.anyio
async def test_a_server_that_goes_silent_mid_reply_is_reported(server: FakeOpenAIServer) -> None:
    server.script(Stream([text("partial")], stall=True))
    got, error = await collect_until_error(model_for(server, timeout=0.5, max_retries=0))
    assert got == [TextChunk("partial")]
    assert isinstance(error, StreamDropped)
    assert error.stalled_for == 0.5
    assert "the server sent nothing more for 0.5 s" in str(error)


@pytest.mark.anyio
async def test_an_error_event_mid_reply_is_a_server_error(server: FakeOpenAIServer) -> None:
    # Pins vLLM/OpenAI-style in-stream errors: `data: {"error": {...}}` after some text.
    oops = {"error": {"message": f"engine died (key {MASKED_KEY})", "type": "internal"}}
    server.script(Stream([text("so far"), oops]))
    got, error = await collect_until_error(model_for(server))
    assert got == [TextChunk("so far")]
    assert isinstance(error, ServerError)
    assert error.status is None
    assert "reported an error in the middle of the reply" in str(error)
    assert "engine died" in str(error)
    assert_no_key(str(error))


@pytest.mark.anyio
async def test_a_reply_without_events_is_not_taken_for_an_empty_answer(
    server: FakeOpenAIServer,
) -> None:
    # Pins a base URL that reaches some other 200-answering server: no chunk at all is
    # never a valid reply (a model that writes nothing still sends a finish_reason).
    server.script(Stream([]))
    with pytest.raises(UnexpectedReply, match="not with an OpenAI chat completion stream: it"):
        await collect(model_for(server))


@pytest.mark.anyio
async def test_an_event_that_is_not_json_is_reported(server: FakeOpenAIServer) -> None:
    server.script(Stream([text("a"), "<html>oops</html>"]))
    got, error = await collect_until_error(model_for(server))
    assert got == [TextChunk("a")]
    assert isinstance(error, UnexpectedReply)
    assert "an event is not JSON: '<html>oops</html>'" in str(error)


# --------------------------------------------------------------------------- cancellation


@pytest.mark.anyio
async def test_cancelling_the_consumer_closes_the_response_promptly(
    server: FakeOpenAIServer,
) -> None:
    server.script(Stream([text("first")], stall=True))
    got: list[ModelChunk] = []
    cancelled_at = 0.0
    with anyio.CancelScope() as scope:
        async with aclosing(model_for(server).stream(HELLO)) as chunks:
            async for c in chunks:
                got.append(c)
                # Cancelled while the next chunk is awaited (the server sends none).
                scope.deadline = anyio.current_time() + 0.1
                cancelled_at = time.monotonic() + 0.1
    assert scope.cancelled_caught
    assert got == [TextChunk("first")]
    assert server.client_closed.wait(2)
    assert server.client_closed_at is not None
    assert server.client_closed_at - cancelled_at < 1.0


@pytest.mark.anyio
async def test_a_consumer_cancelled_between_chunks_still_closes_the_response(
    server: FakeOpenAIServer,
) -> None:
    server.script(Stream([text("first"), text("second")], stall=True))
    cancelled_at = 0.0
    with anyio.CancelScope() as scope:
        async with aclosing(model_for(server).stream(HELLO)) as chunks:
            async for _ in chunks:
                scope.deadline = anyio.current_time() + 0.1
                cancelled_at = time.monotonic() + 0.1
                await anyio.sleep(10)  # cancelled here; aclosing closes under cancellation
    assert scope.cancelled_caught
    assert server.client_closed.wait(2)
    assert server.client_closed_at is not None
    assert server.client_closed_at - cancelled_at < 1.0


@pytest.mark.anyio
async def test_a_consumer_that_stops_early_closes_the_response(server: FakeOpenAIServer) -> None:
    server.script(Stream([text("first"), text("second")], stall=True))
    async with aclosing(model_for(server).stream(HELLO)) as chunks:
        async for _ in chunks:
            break
    assert server.client_closed.wait(1)


# --------------------------------------------------------------------------- the text seam


@pytest.mark.anyio
async def test_text_client_gives_the_runtime_only_the_text(server: FakeOpenAIServer) -> None:
    server.script(Stream([reasoning("hmm"), text("<response>"), text("hi</response>"), finish()]))
    assert await complete(text_client(model_for(server)), HELLO) == "<response>hi</response>"


# --------------------------------------------------------------------------- TLS store


@pytest.mark.anyio
async def test_the_tls_store_is_loaded_once_a_process_not_once_a_request(
    server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """Loading the certificate store took 30-100 ms before every request (each request has
    a client of its own): it is built once, and again only when SSL_CERT_FILE changes."""
    from cortex_jupyter.models import _tls

    library = _tls.http_library()  # httpx2 under openai 3, httpx under 1 and 2
    built: list[str | None] = []
    real = library.create_ssl_context

    def counting(*args: Any, **kwargs: Any) -> Any:
        import os

        built.append(os.environ.get("SSL_CERT_FILE"))
        return real(*args, **kwargs)

    monkeypatch.setattr(library, "create_ssl_context", counting)
    monkeypatch.setattr(_tls, "_CONTEXTS", {})
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    for _ in range(3):
        server.script(Stream([text("ok"), finish()]))
        assert joined(await collect(model_for(server))) == "ok"
    assert built == [None]
    import certifi

    monkeypatch.setenv("SSL_CERT_FILE", certifi.where())
    server.script(Stream([text("ok"), finish()]))
    assert joined(await collect(model_for(server))) == "ok"
    assert built == [None, certifi.where()]
    assert len(server.requests) == 4


@pytest.mark.anyio
@pytest.mark.parametrize("content", [None, "not a certificate\n"], ids=["missing", "no-pem"])
async def test_a_bad_certificate_file_is_named_and_the_next_request_after_fixing_it_works(
    server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Any, content: Any
) -> None:
    """A mistyped SSL_CERT_FILE read "FileNotFoundError: [Errno 2] No such file or
    directory", naming neither the variable nor the path; the failure is not kept."""
    from cortex_jupyter.models import BadCertificates, _tls

    monkeypatch.setattr(_tls, "_CONTEXTS", {})
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    variable = "SSL_CERT_FILE"
    missing = str(tmp_path / "ca.pem")
    if content is not None:
        (tmp_path / "ca.pem").write_text(content)
    monkeypatch.setenv(variable, missing)
    with pytest.raises(BadCertificates) as failed:
        await collect(model_for(server))
    said = str(failed.value)
    assert variable in said and repr(missing) in said and "\n" not in said
    assert failed.value.continuable is False
    assert server.requests == []
    monkeypatch.delenv(variable)
    server.script(Stream([text("ok"), finish()]))
    assert joined(await collect(model_for(server))) == "ok"


@pytest.mark.anyio
async def test_the_window_is_learned_once_a_bad_certificate_file_is_fixed(
    server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """A mistyped SSL_CERT_FILE made the context-window probe fail, and its "unknown" was
    kept for the process: after the fix the gauge never learned the server's window."""
    from cortex_jupyter.models import _tls, _window

    monkeypatch.setattr(_tls, "_CONTEXTS", {})
    monkeypatch.setattr(_window, "_CACHE", {})
    server.props = {"default_generation_settings": {"n_ctx": 8192}}
    model = model_for(server)
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "missing.pem"))
    assert await model.learn_context_window() is None
    monkeypatch.delenv("SSL_CERT_FILE")
    assert await model.learn_context_window() == 8192
    assert model.context_window == 8192


def test_a_process_forked_while_the_tls_context_is_being_built_can_build_its_own() -> None:
    """A process-pool tool forked while another thread held the TLS context's lock (a
    first request building it) inherited the lock held, and hung at its first request."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        """
        import os, signal
        from cortex_jupyter.models import _tls
        with _tls._LOCK:  # as while another thread builds the context
            pid = os.fork()
            if pid == 0:
                signal.alarm(20)  # a hung child ends itself (exit code -14), never lingers
                _tls.tls_context()
                os._exit(7)
        print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.stdout.split() == ["7"], done.stderr

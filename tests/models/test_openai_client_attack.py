"""A hostile server against OpenAIModel after it began reading chunks as the server's JSON
(no SDK model built per chunk) and posting the body as built: what the SDK's validation
used to do for us, and what a server's odd bytes and long bodies do to the client."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from cortex_jupyter.models import BadRequest, ServerError, UnexpectedReply
from cortex_jupyter.models._limits import refused_cap
from cortex_jupyter.models._redact import redact
from cortex_jupyter.runtime.core.model.chunks import TextChunk, Usage

from .fake_openai_server import Error, FakeOpenAIServer, Raw, Stream, finish, text
from .test_openai_client import KEY, assert_no_key, collect, collect_until_error, model_for


def usage_chunk(**counts: Any) -> dict[str, Any]:
    return {"object": "chat.completion.chunk", "choices": [], "usage": counts}


# --------------------------------------------------------------------------- token counts


@pytest.mark.anyio
@pytest.mark.parametrize(
    "counts",
    [
        {"prompt_tokens": "12", "completion_tokens": "7", "total_tokens": "19"},
        {"prompt_tokens": 12.0, "completion_tokens": 7.0, "total_tokens": 19.0},
        {"prompt_tokens": " 12 ", "completion_tokens": 7},
    ],
    ids=["strings", "whole-floats", "padded"],
)
async def test_token_counts_sent_as_strings_or_whole_floats_are_still_counted(
    server: FakeOpenAIServer, counts: dict[str, Any]
) -> None:
    # The SDK's validation read these as 12 and 7 before chunks were taken as raw JSON;
    # counted as 0 the reply cost nothing and a run's budget never saw it.
    server.script(Stream([text("hi"), finish(), usage_chunk(**counts)]))
    chunks = await collect(model_for(server))
    assert [c for c in chunks if isinstance(c, Usage)] == [Usage(12, 7)]


@pytest.mark.anyio
@pytest.mark.parametrize("count", ["12.5", 12.5, "abc", True, "--3", "1e3", "", "١٢", "9" * 40])
async def test_a_count_that_is_no_whole_number_counts_nothing(
    server: FakeOpenAIServer, count: object
) -> None:
    server.script(
        Stream([text("hi"), finish(), usage_chunk(prompt_tokens=count, completion_tokens=7)])
    )
    chunks = await collect(model_for(server))
    assert [c for c in chunks if isinstance(c, Usage)] == [Usage(0, 7)]


# --------------------------------------------------------------------------- bytes


@pytest.mark.anyio
async def test_bytes_that_are_no_utf8_are_an_unexpected_reply_not_a_decode_error(
    server: FakeOpenAIServer,
) -> None:
    bad = b'data: {"choices": [{"index": 0, "delta": {"content": "A\xff\xfeB"}}]}\n\n'
    server.script(Stream([text("before "), Raw(bad), finish()]))
    got, error = await collect_until_error(model_for(server))
    assert got == [TextChunk("before ")]
    assert isinstance(error, UnexpectedReply)
    assert "not UTF-8" in str(error)


# --------------------------------------------------------------------------- long bodies


@pytest.mark.anyio
async def test_a_huge_error_body_without_spaces_is_quoted_cut_not_frozen_on(
    server: FakeOpenAIServer,
) -> None:
    # 300,000 characters took the key redaction a quarter of an hour of CPU (quadratic),
    # the kernel frozen meanwhile; this test then fails by the suite's timeout.
    server.script(Error(400, "x" * 300_000))
    with pytest.raises(BadRequest) as caught:
        await collect(model_for(server), max_tokens=100)
    assert "x" * 400 in str(caught.value)
    assert "x" * 600 not in str(caught.value)


@pytest.mark.anyio
async def test_a_huge_error_inside_the_stream_is_quoted_cut_and_keeps_the_key_out(
    server: FakeOpenAIServer,
) -> None:
    message = f"{KEY} " + "a" + "." * 300_000
    server.script(Stream([text("hi"), {"error": {"message": message}}]))
    got, error = await collect_until_error(model_for(server))
    assert got == [TextChunk("hi")] and isinstance(error, ServerError)
    assert_no_key(str(error))


HOSTILE: list[Callable[[int], str]] = [
    lambda n: "x" * n,  # a token, base64, a minified page
    lambda n: "a" + "*" * n,
    lambda n: "sk-" + "." * n,
    lambda n: "-" * n,
]


def _best_of(rounds: int, work: Callable[[], object]) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return min(times)


@pytest.mark.parametrize("shape", HOSTILE)
def test_redacting_a_servers_text_costs_linear_time(shape: Callable[[int], str]) -> None:
    # A million characters: linear work takes well under a second; the old pattern's
    # quadratic work took 1m45s at 100,000 and would take hours here, past the test
    # timeout (no wall-clock threshold in the test itself).
    text = shape(1_000_000)
    assert len(redact(text, KEY)) == len(text)


def test_reading_a_refused_cap_costs_linear_time() -> None:
    assert refused_cap("max_tokens " * 30_000, 100) is None

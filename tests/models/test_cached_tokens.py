"""Prompt tokens a server read from its cache are priced at the provider's cache-read price.

OpenAI's streamed usage chunk says how many of the prompt's tokens were cached
(``usage.prompt_tokens_details.cached_tokens``); OpenRouter, vLLM and llama.cpp send the
same field, DeepSeek its own ``prompt_cache_hit_tokens``. Through the real openai SDK
against the loopback server, the client keeps that count and its price is genai-prices'
own ``calc_price`` with ``cache_read_tokens``. The count is the server's bytes: a value
that makes no sense (a string, a bool, a negative, more than the prompt...) is taken as
not sent, never as a crash or a wrong price.
"""

from __future__ import annotations

from contextlib import aclosing
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cortex_jupyter.models import OpenAIModel, pricing
from cortex_jupyter.models._reply import ReplyAssembler
from cortex_jupyter.runtime.core.model.chunks import Finish, Usage
from tests.helpers import genai_price

from .fake_openai_server import FakeOpenAIServer, Stream, finish, openai_usage, role, texts, usage

KEY = "sk-test-cachedtokens0123456789"


async def reply_usage(server: FakeOpenAIServer, model: str, last: dict[str, Any]) -> Usage:
    """The ``Usage`` the client yields for a reply whose usage chunk is ``last``."""
    server.script(Stream([role(), *texts("Hello there.", 4), finish(), last]))
    client = OpenAIModel(model, base_url=server.url, api_key=KEY)
    async with aclosing(client.stream([{"role": "user", "content": "hi"}])) as stream:
        chunks = [c async for c in stream]
    assert isinstance(chunks[-1], Finish)
    found = [c for c in chunks if isinstance(c, Usage)]
    assert len(found) == 1, chunks
    return found[0]


@pytest.mark.anyio
async def test_openais_cached_count_is_kept_and_priced_at_the_cache_read_price(
    server: FakeOpenAIServer,
) -> None:
    got = await reply_usage(server, "gpt-4o-mini", openai_usage(1200, 80, 1024, reasoning=16))
    assert got == Usage(1200, 80, cached_tokens=1024)
    client = OpenAIModel("gpt-4o-mini", base_url=server.url, api_key=KEY)
    priced = client.price(got)
    expected = genai_price("gpt-4o-mini", 1200, 80, cached=1024)
    assert priced.usd == pytest.approx(expected)
    # gpt-4o-mini's cached input costs half its input: the cache read is really cheaper
    assert expected < genai_price("gpt-4o-mini", 1200, 80)
    assert "$0.075 cached" in priced.note


@pytest.mark.anyio
async def test_deepseeks_cache_hit_count_is_priced_the_same_way(
    server: FakeOpenAIServer,
) -> None:
    last = usage(1000, 50, prompt_cache_hit_tokens=800, prompt_cache_miss_tokens=200)
    got = await reply_usage(server, "deepseek-chat", last)
    assert got == Usage(1000, 50, cached_tokens=800)
    expected = genai_price("deepseek-chat", 1000, 50, cached=800)
    assert pricing.price("deepseek-chat", None, got).usd == pytest.approx(expected)
    assert expected < genai_price("deepseek-chat", 1000, 50)


@pytest.mark.anyio
async def test_a_model_with_no_cache_read_price_prices_cached_tokens_as_input_and_says_so(
    server: FakeOpenAIServer,
) -> None:
    # genai-prices knows no cache-read price for gpt-4: the cached tokens cost what input
    # does (an upper bound, never less than the bill), and the note says why.
    got = await reply_usage(server, "gpt-4", openai_usage(1200, 80, 1024))
    priced = pricing.price("gpt-4", None, got)
    assert priced.usd == pytest.approx(genai_price("gpt-4", 1200, 80))
    assert priced.usd == pytest.approx(genai_price("gpt-4", 1200, 80, cached=1024))
    assert "cached prompt tokens priced as input: no cache-read price is known" in priced.note
    plain = pricing.price("gpt-4", None, Usage(1200, 80))
    assert "cached" not in plain.note  # said only when there were cached tokens


# What a server may put where the cached count goes (it is its bytes, not a promise).
# Not here: ``"1024"`` and ``true``, which the openai SDK itself reads as 1024 and 1 before
# we see them (a known field is coerced where it can be); the property test below feeds
# the assembler such values directly.
HOSTILE_DETAILS: list[Any] = [
    None,
    {},
    {"cached_tokens": None},
    {"cached_tokens": "lots"},
    {"cached_tokens": -5},
    {"cached_tokens": 1201},  # more than the prompt
    {"cached_tokens": [1024]},
    {"cached_tokens": {"n": 1024}},
    {"cached_tokens": 10**30},
    "1024",
    [1024],
    7,
]


@pytest.mark.anyio
@pytest.mark.parametrize("details", HOSTILE_DETAILS, ids=repr)
async def test_a_nonsense_cached_count_prices_as_if_absent(
    server: FakeOpenAIServer, details: Any
) -> None:
    got = await reply_usage(server, "gpt-4o-mini", usage(1200, 80, prompt_tokens_details=details))
    assert got == Usage(1200, 80) and got.cached_tokens == 0
    priced = pricing.price("gpt-4o-mini", None, got)
    assert priced.usd == pytest.approx(genai_price("gpt-4o-mini", 1200, 80))


@pytest.mark.anyio
@pytest.mark.parametrize("hit", ["800", -1, 1001, False, None, 3.5])
async def test_a_nonsense_deepseek_hit_count_prices_as_if_absent(
    server: FakeOpenAIServer, hit: Any
) -> None:
    got = await reply_usage(server, "deepseek-chat", usage(1000, 50, prompt_cache_hit_tokens=hit))
    assert got == Usage(1000, 50)
    expected = genai_price("deepseek-chat", 1000, 50)
    assert pricing.price("deepseek-chat", None, got).usd == pytest.approx(expected)


# ---- a property over the usage field's shapes -----------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**20), max_value=10**20)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=6,
)
counts = st.integers(min_value=0, max_value=2_000_000)


@st.composite
def usages(draw: st.DrawFn) -> tuple[dict[str, Any], int, Any]:
    """A usage object a server might send: the counts, and a cached count (a sensible
    one, near the prompt's size, or any JSON) under one of the names servers use, or
    details of any shape."""
    prompt, completion = draw(counts), draw(counts)
    cached = draw(st.integers(min_value=-3, max_value=prompt + 3) | json_values)
    shape = draw(st.sampled_from(["openai", "deepseek", "details", "none"]))
    body: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion}
    if shape == "openai":
        body["prompt_tokens_details"] = {"cached_tokens": cached, "audio_tokens": 0}
    elif shape == "deepseek":
        body["prompt_cache_hit_tokens"] = cached
    elif shape == "details":
        body["prompt_tokens_details"] = cached
    if shape in ("details", "none"):
        cached = None  # no count where a count goes
    return body, prompt, cached


def sensible(cached: Any, prompt: int) -> int:
    """What the cached count must be taken as: itself when it is a whole number from 1
    to the prompt's count, else nothing (0)."""
    whole = isinstance(cached, int) and not isinstance(cached, bool)
    return cached if whole and 0 < cached <= prompt else 0


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(usages(), st.sampled_from(["gpt-4o-mini", "gpt-4", "deepseek-chat", "no-such-model-x"]))
def test_any_usage_shape_gives_a_sensible_count_and_genai_prices_own_price(
    sent: tuple[dict[str, Any], int, Any], model: str
) -> None:
    body, prompt, cached = sent
    assembler = ReplyAssembler()
    assembler.feed({"choices": [], "usage": body})
    got = assembler.usage
    assert got is not None
    expected = sensible(cached, prompt)
    assert got.cached_tokens == expected
    assert 0 <= got.cached_tokens <= got.prompt_tokens
    priced = pricing.price(model, None, got)  # never raises
    if model == "no-such-model-x":
        assert priced.usd is None
    else:
        want = genai_price(model, prompt, body["completion_tokens"], cached=expected or None)
        assert priced.usd == pytest.approx(want)


@pytest.mark.anyio
async def test_running_totals_in_every_chunk_give_the_last_report_once(
    server: FakeOpenAIServer,
) -> None:
    # vLLM's continuous usage stats: every chunk carries the usage so far, cached count
    # included; the one Usage yielded is the last, never a sum of the running totals.
    pieces = texts("Hello there.", 4)
    chunks = [
        {**piece, "usage": openai_usage(1200, n + 1, 1024)["usage"]}
        for n, piece in enumerate(pieces)
    ]
    server.script(Stream([role(), *chunks, {**finish(), **openai_usage(1200, 9, 1024)}]))
    client = OpenAIModel("gpt-4o-mini", base_url=server.url, api_key=KEY)
    async with aclosing(client.stream([{"role": "user", "content": "hi"}])) as stream:
        found = [c async for c in stream if isinstance(c, Usage)]
    assert found == [Usage(1200, 9, cached_tokens=1024)]

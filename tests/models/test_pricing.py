"""Pricing a request is fast and gives genai-prices' own numbers.

``models.pricing`` finds a model's genai-prices entry once per (model, provider) and
prices a model with plain per-token prices itself, in ``Decimal`` as genai-prices does;
any other model (tiers by prompt size, cache writes, audio) goes to genai-prices. The
numbers, the notes and the unknown prices must be exactly those of
``genai_prices.calc_price`` for any usage: the property below pins that. How much faster
it is: ``bench/pricing_bench.py``.
"""

from __future__ import annotations

from typing import Any

import genai_prices
import pytest
from genai_prices.data_snapshot import get_snapshot
from hypothesis import given, settings
from hypothesis import strategies as st

from cortex_jupyter.models import pricing
from cortex_jupyter.runtime.core.cost.prices import Price
from cortex_jupyter.runtime.core.model.chunks import Usage

OPENAI = "https://api.openai.com/v1"
LOCAL = "http://127.0.0.1:8000/v1"
ZOO = [
    ("gpt-4o-mini", OPENAI),  # input, cached input, output
    ("gpt-4o", LOCAL),  # priced by its name alone
    ("openai/gpt-4o-mini", "http://127.0.0.1:4000"),  # a LiteLLM proxy's name
    ("deepseek-chat", "https://api.deepseek.com"),
    ("gemini-2.5-pro", "https://generativelanguage.googleapis.com/v1beta/openai"),  # tiers
    ("claude-3-5-sonnet-latest", "https://api.anthropic.com/v1"),  # cache writes
    ("llama-3.1-8b-instant", "https://api.groq.com/openai/v1"),
    ("openai/gpt-4o", "https://openrouter.ai/api/v1"),
    ("google/gemma-3-27b-it", LOCAL),  # listed without token prices
    ("my-private-finetune-7", LOCAL),  # not listed
]


def reference(model: str, base_url: str, usage: Usage) -> Price:
    """The price as ``genai_prices.calc_price`` gives it, asked from scratch each time."""
    provider = pricing.provider_of(base_url)
    tokens = genai_prices.Usage(
        input_tokens=usage.prompt_tokens,
        output_tokens=usage.completion_tokens,
        cache_read_tokens=usage.cached_tokens or None,
    )
    where = f" at {provider}" if provider else ""
    try:
        calc = genai_prices.calc_price(tokens, model_ref=model, provider_id=provider)
    except LookupError:
        named, _, rest = model.partition("/")
        try:
            if provider is not None or not rest:
                raise
            calc = genai_prices.calc_price(tokens, model_ref=rest, provider_id=named)
        except LookupError:
            return Price(None, f"no price is known for the model {model!r}{where} (genai-prices)")
    missing = pricing._unpriced(calc, usage)
    if missing:
        return Price(
            None,
            f"no price is known for the {missing} tokens of the model {model!r}{where} "
            "(genai-prices lists it without one)",
        )
    return Price(float(calc.total_price), pricing._note(calc, usage.cached_tokens))


@st.composite
def usages(draw: st.DrawFn) -> Usage:
    prompt = draw(st.integers(0, 2_000_000))  # past the 200k tier of some models
    completion = draw(st.integers(0, 200_000))
    cached = draw(st.integers(0, prompt))
    return Usage(prompt, completion, cached)


@settings(max_examples=60, deadline=None)
@given(where=st.sampled_from(ZOO), usage=usages())
def test_the_price_is_genai_prices_own_for_any_usage(where: tuple[str, str], usage: Usage) -> None:
    model, base_url = where
    assert pricing.price(model, base_url, usage) == reference(model, base_url, usage)


def test_a_model_is_looked_up_once_and_flat_prices_are_worked_out_here(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What made each price cost a tenth of a millisecond and more: finding the entry
    # and genai-prices' general calculation. A budget's reservation prices a request
    # several times; a run prices hundreds.
    calls: dict[str, int] = {"find": 0, "calc": 0}
    snapshot = get_snapshot()
    find = snapshot.find_provider_model

    def counted_find(*args: Any) -> Any:
        calls["find"] += 1
        return find(*args)

    calc = genai_prices.types.ModelPrice.calc_price

    def counted_calc(self: Any, usage: Any) -> Any:
        calls["calc"] += 1
        return calc(self, usage)

    monkeypatch.setattr(snapshot, "find_provider_model", counted_find)
    monkeypatch.setattr(genai_prices.types.ModelPrice, "calc_price", counted_calc)
    pricing._find.cache_clear()  # as in a new kernel
    base_url = "http://127.0.0.1:9/v1"
    prices = [pricing.price("gpt-4o-mini", base_url, Usage(1000 + n, 50)) for n in range(50)]
    assert calls == {"find": 1, "calc": 0}
    assert prices == [reference("gpt-4o-mini", base_url, Usage(1000 + n, 50)) for n in range(50)]

"""Prices of model requests, from genai-prices: the one module that imports it.

genai-prices keeps the prices of every major provider's models with the dates they
changed; a request is priced at the prices in force on the day it was made. A model is
priced by its name, at the provider its base URL names when that is a known one
(``api.openai.com``, ``openrouter.ai``, ``api.groq.com``...): the same name can cost
differently there. Any other address (``127.0.0.1``, a company proxy) may stand in
front of a paid model, so the address alone never makes a request free: the model is
then priced by its name alone, and a name genai-prices does not know has no price
(``None``, shown as unknown), and so has a model it lists without a price for the
tokens a request used (its total would read $0). What is known to cost nothing says so
itself (the model ``cortex_jupyter.local`` serves, a script).

Prompt tokens the server read from its cache (``Usage.cached_tokens``: OpenAI's
``prompt_tokens_details.cached_tokens``) are passed to genai-prices as
``cache_read_tokens`` and priced at the provider's cache-read price. Where genai-prices
knows no cache-read price for the model, they are priced as ordinary input tokens (what
genai-prices does with them too), and the note says so: for a provider that does
discount them the cost shown is then an upper bound, never less than the bill. A server
that reports no cached count (or nonsense: ``Usage`` drops it) is priced the same way.
"""

from __future__ import annotations

import datetime
import functools
from decimal import Decimal

import genai_prices
from genai_prices.data_snapshot import get_snapshot
from genai_prices.types import PriceCalculation

from cortex_jupyter.runtime.core.chunks import Usage
from cortex_jupyter.runtime.core.cost import Price

__all__ = ["price", "provider_of"]


@functools.lru_cache(maxsize=64)
def provider_of(base_url: str) -> str | None:
    """The genai-prices provider id that ``base_url`` names (``openai`` for
    ``https://api.openai.com/v1``), or None for any other address."""
    try:
        return get_snapshot().find_provider(None, None, base_url).id
    except LookupError:
        return None


def price(model: str, base_url: str | None, usage: Usage | None) -> Price:
    """The price of one request to ``model`` at ``base_url`` that used ``usage``."""
    provider = provider_of(base_url) if base_url else None
    where = f" at {provider}" if provider else ""
    if usage is None:
        return Price(None, f"{model}{where}: the server reported no token usage")
    tokens = genai_prices.Usage(
        input_tokens=usage.prompt_tokens,
        output_tokens=usage.completion_tokens,
        cache_read_tokens=usage.cached_tokens or None,  # a part of the input's
    )
    try:
        calc = genai_prices.calc_price(tokens, model_ref=model, provider_id=provider)
    except LookupError:
        # A proxy's name for a model may say its provider ("openai/gpt-4o-mini" through
        # LiteLLM at 127.0.0.1): priced at that provider when genai-prices knows it.
        named, _, rest = model.partition("/")
        try:
            if provider is not None or not rest:
                raise
            calc = genai_prices.calc_price(tokens, model_ref=rest, provider_id=named)
        except LookupError:
            return Price(None, f"no price is known for the model {model!r}{where} (genai-prices)")
    missing = _unpriced(calc, usage)
    if missing:
        # genai-prices lists some models without token prices (``google/gemma-3-27b-it``,
        # speech models): its total is then 0, which is not a price but a gap.
        return Price(
            None,
            f"no price is known for the {missing} tokens of the model {model!r}{where} "
            "(genai-prices lists it without one)",
        )
    return Price(float(calc.total_price), _note(calc, usage.cached_tokens))


def _unpriced(calc: PriceCalculation, usage: Usage) -> str:
    """Which tokens of ``usage`` the model's prices leave without a price ("input",
    "output"), or "" when each kind it used has one."""
    rates = vars(calc.model_price)
    if rates.get("input_mtok") is None:
        return "input"  # every request sends a prompt
    if usage.completion_tokens and rates.get("output_mtok") is None:
        return "output"
    return ""


def _note(calc: PriceCalculation, cached: int) -> str:
    """Whose prices, per million tokens, of which date (and how cached tokens went)."""
    rates = vars(calc.model_price)
    cache_read = rates.get("cache_read_mtok")
    note = (
        f"{calc.provider.name} {calc.model.id}: {_per_m(rates.get('input_mtok'))} in"
        f"{f' ({_per_m(cache_read)} cached)' if cache_read is not None else ''}, "
        f"{_per_m(rates.get('output_mtok'))} out per million tokens (genai-prices "
        f"{genai_prices.__version__}, the prices of {datetime.date.today().isoformat()})"
    )
    if cached and cache_read is None:
        note += "; cached prompt tokens priced as input: no cache-read price is known"
    return note


def _per_m(rate: object) -> str:
    return f"${rate}" if isinstance(rate, Decimal) else "?"

"""Prices of model requests, from genai-prices: the one module that imports it.

genai-prices keeps the prices of every major provider's models with the dates they
changed; a request is priced at the prices in force on the day it was made. A model is
priced by its name, at the provider its base URL names when that is a known one
(``api.openai.com``, ``openrouter.ai``, ``api.groq.com``...): the same name can cost
differently there. Any other address (``127.0.0.1``, a company proxy) may stand in
front of a paid model, so the address alone never makes a request free: the model is
then priced by its name alone, and a name genai-prices does not know has no price
(``None``, shown as unknown). What is known to cost nothing says so itself (the model
``cortex_jupyter.local`` serves, a script).

Cached prompt tokens are priced as ordinary input tokens (the chunks do not carry the
cached count): for a provider that discounts them, the cost shown is an upper bound.
"""

from __future__ import annotations

import datetime
import functools
from decimal import Decimal

import genai_prices
from genai_prices.data_snapshot import get_snapshot

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
        input_tokens=usage.prompt_tokens, output_tokens=usage.completion_tokens
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
    rates = vars(calc.model_price)
    return Price(
        float(calc.total_price),
        f"{calc.provider.name} {calc.model.id}: {_per_m(rates.get('input_mtok'))} in, "
        f"{_per_m(rates.get('output_mtok'))} out per million tokens (genai-prices "
        f"{genai_prices.__version__}, the prices of {datetime.date.today().isoformat()})",
    )


def _per_m(rate: object) -> str:
    return f"${rate}" if isinstance(rate, Decimal) else "?"

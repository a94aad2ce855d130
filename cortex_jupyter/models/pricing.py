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
from genai_prices.types import ModelInfo, ModelPrice, PriceCalculation, Provider

from cortex_jupyter.runtime.core.cost.prices import Price
from cortex_jupyter.runtime.core.model.chunks import Usage

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
    found = _find(model, provider)
    if found is None:
        return Price(None, f"no price is known for the model {model!r}{where} (genai-prices)")
    calc = _calc(*found, usage)
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


@functools.lru_cache(maxsize=256)
def _find(model: str, provider: str | None) -> tuple[Provider, ModelInfo] | None:
    """genai-prices' entry for ``model`` at ``provider`` (None: any), found once per
    pair for the process: which entry a name means does not change with the date, its
    prices do (``_calc`` picks those in force for each request). None: not listed."""
    snapshot = get_snapshot()
    try:
        return snapshot.find_provider_model(model, None, provider, None)
    except LookupError:
        pass
    # A proxy's name for a model may say its provider ("openai/gpt-4o-mini" through
    # LiteLLM at 127.0.0.1): priced at that provider when genai-prices knows it.
    named, _, rest = model.partition("/")
    if provider is not None or not rest:
        return None
    try:
        return snapshot.find_provider_model(rest, None, named, None)
    except LookupError:
        return None


def _calc(provider: Provider, info: ModelInfo, usage: Usage) -> PriceCalculation:
    """What genai-prices' ``calc_price`` gives for ``usage`` now, the same numbers.

    The prices are those in force at this moment (a new price from a date, DeepSeek's
    off-peak hours). A model priced only per input, cached input and output token is
    priced here, in ``Decimal`` as genai-prices does (its general calculation resolves
    and validates the model's units on every call: a tenth of a millisecond, and a
    budget's reservation prices a request several times); any other (tiers by prompt
    size, audio, per-request fees) by genai-prices itself."""
    now = datetime.datetime.now(tz=datetime.timezone.utc)
    rates = info.get_prices(now)
    snapshot = get_snapshot()
    stamp = snapshot.timestamp if snapshot.from_auto_update else None
    flat = _flat(rates)
    if flat is None:
        tokens = genai_prices.Usage(
            input_tokens=usage.prompt_tokens,
            output_tokens=usage.completion_tokens,
            cache_read_tokens=usage.cached_tokens or None,  # a part of the input's
        )
        return info.calc_price(
            tokens, provider, genai_request_timestamp=now, auto_update_timestamp=stamp
        )
    cache_read = flat.get("cache_read_mtok")
    # Cached tokens without a cache-read price are priced as input, as genai-prices does.
    cached = usage.cached_tokens if cache_read is not None else 0
    input_price = _per_token(flat.get("input_mtok"), usage.prompt_tokens - cached)
    input_price += _per_token(cache_read, cached)
    output_price = _per_token(flat.get("output_mtok"), usage.completion_tokens)
    return PriceCalculation(
        input_price=input_price,
        output_price=output_price,
        total_price=input_price + output_price,
        model=info,
        provider=provider,
        model_price=rates,
        auto_update_timestamp=stamp,
    )


# The prices ``_calc`` works out itself: per million tokens, of these kinds.
_FLAT = frozenset({"input_mtok", "cache_read_mtok", "output_mtok"})
# Prices of what a request's usage here never reports (web searches, cache writes): they
# count nothing, so a model that has them besides ``_FLAT`` ones is priced here too.
_NOT_SENT = frozenset(
    {"web_searches_kcount", "storage_searches_kcount", "cache_write_mtok", "cache_write_1h_mtok"}
)


def _flat(rates: ModelPrice) -> dict[str, Decimal] | None:
    """The ``_FLAT`` prices of ``rates`` when they are plain per-token prices and the rest
    is ``_NOT_SENT`` (None: genai-prices works the price out)."""
    given = {key: value for key, value in vars(rates).items() if value is not None}
    flat = {key: value for key, value in given.items() if key in _FLAT}
    if given.keys() - flat.keys() <= _NOT_SENT and all(
        isinstance(v, Decimal) for v in flat.values()
    ):
        return flat
    return None


def _per_token(rate: Decimal | None, count: int) -> Decimal:
    """``count`` tokens at ``rate`` per million (genai-prices' ``calc_unit_price``)."""
    return Decimal(0) if rate is None else rate * Decimal(count) / _MILLION


_MILLION = 1_000_000


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

"""What pricing a request costs: genai-prices asked from scratch against ``models.pricing``.

    python bench/pricing_bench.py [--runs N]

A budget in dollars prices each request several times before it is sent (its shortest
reply, its longest, its prompt alone, the reply that fits: ``Spend.reserve``) and once
when it settles (``charge``). ``models.pricing`` finds a model's genai-prices entry once
per (model, provider) and works plain per-token prices out itself, in ``Decimal`` as
genai-prices does (``tests/models/test_pricing.py`` pins that the numbers are the same).
Times are per call, the median of ``--runs`` runs of 200 calls, measured with
``time.thread_time`` (CPU time of this thread: other work on the machine moves wall time).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import genai_prices

from bench._common import table
from cortex_jupyter.models import OpenAIModel, pricing
from cortex_jupyter.runtime.core.cost.budget import Budget, Spend, charge
from cortex_jupyter.runtime.core.model.chunks import Usage

CALLS = 200
MODELS = [
    ("gpt-4o-mini", "https://api.openai.com/v1"),
    ("gpt-4o", "http://127.0.0.1:8000/v1"),
    ("deepseek-chat", "https://api.deepseek.com"),
    ("claude-3-5-sonnet-latest", "https://api.anthropic.com/v1"),
    ("gemini-2.5-pro", "https://generativelanguage.googleapis.com/v1beta/openai"),  # tiers
]


def per_call(work: Callable[[], object], runs: int, uncached: bool = False) -> float:
    """Seconds of CPU per call of ``work``: the median of ``runs`` runs of ``CALLS``
    (``uncached``: with ``models.pricing`` as it was, genai-prices asked every time)."""
    if uncached:
        find, flat = pricing._find, pricing._flat
        pricing._find, pricing._flat = find.__wrapped__, lambda rates: None  # type: ignore[assignment]
        try:
            return per_call(work, runs)
        finally:
            pricing._find, pricing._flat = find, flat
    work()  # loads what the first call loads
    times = []
    for _ in range(runs):
        start = time.thread_time()
        for _ in range(CALLS):
            work()
        times.append((time.thread_time() - start) / CALLS)
    return statistics.median(times)


def from_scratch(model: str, base_url: str, usage: Usage) -> object:
    """What ``pricing.price`` did before: genai-prices' ``calc_price`` on every call."""
    tokens = genai_prices.Usage(
        input_tokens=usage.prompt_tokens,
        output_tokens=usage.completion_tokens,
        cache_read_tokens=usage.cached_tokens or None,
    )
    return genai_prices.calc_price(
        tokens, model_ref=model, provider_id=pricing.provider_of(base_url)
    ).total_price


def reservation(model: OpenAIModel) -> None:
    """One request under a $0.10 budget: reserved, then settled."""
    spend = Spend(Budget(0.10))
    hold = spend.reserve(model, 1_100, None)
    assert not isinstance(hold, str)
    charge(spend, lambda event: None, model, Usage(1_100, 300), True, hold)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    usage = Usage(12_000, 800, 4_000)
    rows = []
    for model, base_url in MODELS:
        before = per_call(functools.partial(from_scratch, model, base_url, usage), runs)
        now = per_call(functools.partial(pricing.price, model, base_url, usage), runs)
        rows.append(
            (model, f"{before * 1e3:.3f} ms", f"{now * 1e3:.3f} ms", f"{before / now:.0f}x")
        )
    print(
        table(
            "One price (12k prompt, 4k of it cached, 800 out)",
            ("model", "genai-prices", "models.pricing", "faster"),
            rows,
        )
    )
    model = OpenAIModel("gpt-4o", api_key="none", base_url="https://api.openai.com/v1")
    asked = count_prices(model)
    now = per_call(lambda: reservation(model), runs)
    before = per_call(lambda: reservation(model), runs, uncached=True)
    row = (asked, f"{before * 1e3:.3f} ms", f"{now * 1e3:.3f} ms", f"{before / now:.0f}x")
    title = "A request under a $0.10 budget on gpt-4o: reserved, then settled"
    print(table(title, ("prices asked", "genai-prices", "models.pricing", "faster"), [row]))


def count_prices(model: OpenAIModel) -> int:
    """How many times one reservation and its settling price a request."""
    real = pricing.price
    calls = []

    def counted(*args: object) -> object:
        calls.append(args)
        return real(*args)  # type: ignore[arg-type]

    pricing.price = counted  # type: ignore[assignment]
    try:
        reservation(model)
    finally:
        pricing.price = real
    return len(calls)


if __name__ == "__main__":
    main()

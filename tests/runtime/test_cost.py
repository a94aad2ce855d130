"""``runtime.core.cost`` and ``models.pricing``: budgets as people type them, spending
counted against them, prices by model name and by the provider a base URL names."""

from __future__ import annotations

import math

import genai_prices
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cortex_jupyter.models import OpenAIModel, ScriptModel
from cortex_jupyter.models.pricing import price, provider_of
from cortex_jupyter.runtime.core.cost.budget import Budget, Spend
from cortex_jupyter.runtime.core.cost.prices import Price, fmt_usd, price_request
from cortex_jupyter.runtime.core.model.chunks import Usage


@pytest.mark.parametrize(
    ("typed", "budget"),
    [
        (0.05, Budget(0.05)),
        (1, Budget(1.0)),
        ("0.05", Budget(0.05)),
        ("$0.05", Budget(0.05)),
        (" $ 2 ", Budget(2.0)),
        ("1e-3", Budget(0.001)),
        ("20000tok", Budget(20000, "tok")),
        ("20,000 tokens", Budget(20000, "tok")),
        ("1_000TOK", Budget(1000, "tok")),
        (None, None),
    ],
)
def test_a_budget_is_dollars_or_tokens(typed: object, budget: Budget | None) -> None:
    assert Budget.parse(typed) == budget


@given(st.one_of(st.text(max_size=20), st.floats(), st.integers(), st.booleans()))
def test_any_typed_budget_is_a_positive_finite_limit_or_one_value_error(value: object) -> None:
    try:
        budget = Budget.parse(value)
    except ValueError as error:
        assert str(error).startswith("a budget is US dollars") and "\n" not in str(error)
        return
    assert budget is not None and math.isfinite(budget.limit) and budget.limit > 0


@pytest.mark.parametrize(
    ("usd", "shown"),
    [(None, "$?"), (0.0, "$0"), (0.0004, "$0.0004"), (0.00021, "$0.00021"), (0.05, "$0.05"),
     (0.5, "$0.5"), (12.345, "$12.35"), (1234.5, "$1,234.50")],
)  # fmt: skip
def test_costs_read_as_dollars_with_two_significant_digits(usd: float | None, shown: str) -> None:
    assert fmt_usd(usd) == shown


def test_spend_is_unknown_once_a_price_is_and_tokens_once_usage_is() -> None:
    spend = Spend(Budget(1.0))
    spend.add(Price(0.25), Usage(10, 5))
    assert (spend.usd, spend.tokens) == (0.25, 15)
    spend.add(Price(None, "no price"), Usage(1, 1))
    assert (spend.usd, spend.tokens) == (None, 17)
    spend.add(Price(None, "no usage"), None)
    assert spend.tokens is None
    free = Spend()
    free.add(Price(0.0, "a script", "no model"), None)  # a script has no tokens at all
    assert (free.usd, free.tokens) == (0.0, 0)


def test_the_check_counts_what_was_spent_and_what_the_next_request_takes() -> None:
    spend = Spend(Budget(1.0))
    spend.add(Price(0.6), Usage(1, 1))
    assert spend.check(Price(0.4), 10, 0) is None  # exactly at the budget: allowed
    why = spend.check(Price(0.5), 10, 0)
    assert why is not None and "$0.6 spent" in why and "about $0.5 more" in why
    tokens = Spend(Budget(100, "tok"))
    tokens.add(Price(None), Usage(60, 20))
    assert tokens.check(Price(None), 20, 0) is None
    assert "80 tokens spent" in (tokens.check(Price(None), 15, 10) or "")
    assert Spend().check(Price(None), 10**9, 0) is None  # no budget, no limit


def test_a_model_without_a_price_method_has_no_price() -> None:
    class Plain:
        name = "mine"

    assert price_request(Plain(), Usage(1, 1)) == Price(
        None, "no price is known for the model 'mine'"
    )


def test_a_script_costs_nothing_because_no_model_is_asked() -> None:
    got = price_request(ScriptModel("<response>x</response>"), None)
    assert (got.usd, got.free) == (0.0, "no model")


@pytest.mark.parametrize(
    ("url", "provider"),
    [
        ("https://api.openai.com/v1", "openai"),
        ("https://api.anthropic.com/v1/", "anthropic"),
        ("https://openrouter.ai/api/v1", "openrouter"),
        ("https://api.groq.com/openai/v1", "groq"),
        ("https://api.deepseek.com", "deepseek"),
        ("https://api.mistral.ai/v1", "mistral"),
        ("https://generativelanguage.googleapis.com/v1beta/openai/", "google"),
        ("http://127.0.0.1:8080/v1", None),
        ("http://localhost:11434/v1", None),
        ("https://llm-proxy.example.com/v1", None),
    ],
)
def test_the_provider_is_the_one_a_base_url_names(url: str, provider: str | None) -> None:
    assert provider_of(url) == provider


def test_a_model_is_priced_at_the_provider_its_url_names() -> None:
    tokens = genai_prices.Usage(input_tokens=5000, output_tokens=700)
    at = genai_prices.calc_price(tokens, model_ref="openai/gpt-4o", provider_id="openrouter")
    got = price("openai/gpt-4o", "https://openrouter.ai/api/v1", Usage(5000, 700))
    assert got.usd == pytest.approx(float(at.total_price))
    assert "OpenRouter" in got.note


def test_a_proxy_address_prices_by_name_and_an_unknown_name_has_no_price() -> None:
    tokens = genai_prices.Usage(input_tokens=5000, output_tokens=700)
    expected = float(genai_prices.calc_price(tokens, model_ref="gpt-4o").total_price)
    assert price("gpt-4o", "http://127.0.0.1:9/v1", Usage(5000, 700)).usd == pytest.approx(expected)
    unknown = price("not-a-model-anyone-prices", "http://127.0.0.1:9/v1", Usage(5, 5))
    assert unknown.usd is None and "no price is known" in unknown.note
    at_openai = price("not-a-model-anyone-prices", "https://api.openai.com/v1", Usage(5, 5))
    assert at_openai.usd is None and "at openai" in at_openai.note


def test_an_openai_model_marked_free_costs_nothing() -> None:
    model = OpenAIModel("gpt-4o", api_key="local", base_url="http://127.0.0.1:9/v1", free="x")
    assert model.price(Usage(10_000, 10_000)).usd == 0.0
    paid = OpenAIModel("gpt-4o", api_key="k", base_url="http://127.0.0.1:9/v1")
    assert (paid.price(Usage(10_000, 10_000)).usd or 0) > 0

"""What a run costs, and what it may spend: prices as data, budgets as limits.

The core knows no price list. A model prices its own requests (``Priced``: a ``price``
method; ``models.pricing`` does it for OpenAI-compatible servers with genai-prices, a
script says it runs no model), and the loop records each request's price as a ``Cost``
event. From those events ``run.cost`` is summed, a nested agent's included. A price that
is not known is ``None``, never 0: one unpriced request makes the run's cost ``None``
too (a sum that leaves a request out would read as a smaller bill than the real one).

A ``Budget`` is a limit in US dollars or in tokens; one ``Spend`` per top-level run counts
what its requests (its nested agents' too) spent, and is checked before each request.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from cortex_jupyter.runtime.core.chunks import Usage
from cortex_jupyter.runtime.core.events import AnyEvent, Cost

__all__ = ["Budget", "Price", "Priced", "Spend", "charge", "fmt_usd", "price_request"]


@dataclass(frozen=True, slots=True)
class Price:
    """The price of one request: ``usd`` (None: not known), ``note`` saying how it was
    priced (whose prices, of which date) or why it is not known, and ``free`` naming why
    it costs nothing when it does (``"local model"``, ``"no model"``)."""

    usd: float | None
    note: str = ""
    free: str = ""


@runtime_checkable
class Priced(Protocol):
    """A model that prices its own requests: ``usage`` is what the server reported for
    one reply (None: it reported none)."""

    def price(self, usage: Usage | None) -> Price: ...


def price_request(model: Any, usage: Usage | None) -> Price:
    """The price of one request to ``model``: its own ``price``, or not known."""
    if isinstance(model, Priced):
        try:
            return model.price(usage)
        except Exception as exc:  # a model's price must not break its run
            return Price(None, f"pricing failed: {type(exc).__name__}")
    name = getattr(model, "name", type(model).__name__)
    return Price(None, f"no price is known for the model {name!r}")


def fmt_usd(usd: float | None) -> str:
    """A cost as the header shows it: ``$0.0004``, ``$1.23``; ``$?`` when not known."""
    if usd is None:
        return "$?"
    if usd == 0:
        return "$0"
    if usd >= 1:
        return f"${usd:,.2f}"
    # Two significant digits: $0.00021, $0.0035, $0.05.
    places = max(2, 1 - math.floor(math.log10(usd)))
    return "$" + f"{usd:.{places}f}".rstrip("0").rstrip(".")


def total(costs: Iterable[float | None]) -> float | None:
    """The sum of ``costs``; None when any is None."""
    out = 0.0
    for usd in costs:
        if usd is None:
            return None
        out += usd
    return out


_TOKENS = re.compile(r"^\s*([0-9][0-9_,]*)\s*(?:tok|tokens?)\s*$", re.IGNORECASE)
_DOLLARS = re.compile(r"^\s*\$?\s*([0-9]*\.?[0-9]+(?:e-?[0-9]+)?)\s*(?:usd)?\s*$", re.IGNORECASE)
_SAY = "a budget is US dollars (0.05, '$0.05') or tokens ('20000tok'), above 0"


@dataclass(frozen=True, slots=True)
class Budget:
    """A run's spending limit: ``limit`` US dollars, or ``limit`` tokens (prompt and
    completion tokens of every request) when ``unit`` is ``"tok"``."""

    limit: float
    unit: Literal["usd", "tok"] = "usd"

    @classmethod
    def parse(cls, value: Any) -> Budget | None:
        """A budget from what a person typed: a number of dollars (``0.05``, ``"$0.05"``)
        or of tokens (``"20000tok"``); None stays None. ``ValueError`` saying what a
        budget is for anything else (a negative, NaN, a word)."""
        if value is None or isinstance(value, Budget):
            return value
        if isinstance(value, bool):
            raise ValueError(f"{_SAY}; got {value!r}")
        if isinstance(value, int | float):
            return cls._usd(float(value), value)
        if isinstance(value, str):
            if match := _TOKENS.match(value):
                tokens = int(match.group(1).replace("_", "").replace(",", ""))
                if tokens < 1:
                    raise ValueError(f"{_SAY}; got {value!r}")
                return cls(float(tokens), "tok")
            if match := _DOLLARS.match(value):
                return cls._usd(float(match.group(1)), value)
        raise ValueError(f"{_SAY}; got {value!r}")

    @classmethod
    def _usd(cls, usd: float, given: Any) -> Budget:
        if not math.isfinite(usd) or usd <= 0:
            raise ValueError(f"{_SAY}; got {given!r}")
        return cls(usd, "usd")

    def show(self, amount: float) -> str:
        """``amount`` in this budget's unit: ``$0.0004`` or ``1,234 tokens``."""
        return fmt_usd(amount) if self.unit == "usd" else f"{int(amount):,} tokens"

    def __str__(self) -> str:
        return self.show(self.limit)


class Spend:
    """What a run and its nested agents spent so far, against its ``budget`` (if any).

    One object per top-level run, shared by the runs nested in it (``RunSpec.spend``), so
    a nested agent's requests count against its caller's budget.
    """

    def __init__(self, budget: Budget | None = None) -> None:
        self.budget = budget
        self.usd: float | None = 0.0
        self.tokens: int | None = 0
        self.requests = 0

    def add(self, price: Price, usage: Usage | None) -> None:
        """Count one request's price and tokens (unknown ones make the sum unknown)."""
        self.requests += 1
        self.usd = None if self.usd is None or price.usd is None else self.usd + price.usd
        if usage is not None and self.tokens is not None:
            self.tokens += usage.prompt_tokens + usage.completion_tokens
        elif not price.free:  # a script has no tokens; a real reply without usage does
            self.tokens = None

    def spent_before(self, costs: Iterable[Cost]) -> None:
        """Count what a run spent before it stopped (its recorded ``Cost`` events): a
        resumed run's budget holds over the whole run, not only what comes after."""
        for cost in costs:
            tokens = cost.prompt_tokens
            usage = None if tokens is None else Usage(tokens, cost.completion_tokens or 0)
            self.add(Price(cost.usd, cost.note, cost.free), usage)

    def check_text(self, model: Any, text: str) -> str | None:
        """``check`` for a request whose prompt is ``text`` (an ``llm`` action's, which
        the context module does not fit), its tokens estimated at ~4 characters each."""
        if self.budget is None:
            return None
        tokens = estimate_tokens(text)
        return self.check(price_request(model, Usage(tokens, 0)), tokens, 0)

    def check(
        self,
        estimate: Price,
        prompt_tokens: int,
        reply_tokens: int,
        request: str = "its next request",
    ) -> str | None:
        """Why the next request must not be sent (None: it may be): its ``estimate``
        (its prompt, and ``reply_tokens`` of reply when a limit says so) on top of what
        was spent would pass the budget, or either is not known. ``request`` names the
        request in the reason."""
        budget = self.budget
        if budget is None:
            return None
        spent: float | None
        next_one: float | None
        if budget.unit == "tok":
            spent, next_one = self.tokens, float(prompt_tokens + reply_tokens)
            unknown = "a reply's tokens were not reported by the server"
        else:
            spent, next_one = self.usd, estimate.usd
            unknown = estimate.note if estimate.usd is None else "a reply's cost is not known"
        if spent is None or next_one is None:
            return (
                f"the budget of {budget} cannot be kept: {unknown}; give the budget in "
                "tokens instead (e.g. 20000tok)"
            )
        if spent + next_one <= budget.limit:
            return None
        return (
            f"the budget of {budget} stopped the run before {request}: "
            f"{budget.show(spent)} spent, and that request would take about "
            f"{budget.show(next_one)} more"
        )


def charge(
    spend: Spend,
    emit: Callable[[AnyEvent], None],
    model: Any,
    usage: Usage | None,
    replied: bool,
) -> None:
    """Record one request to ``model`` that used ``usage``: its price counts towards
    ``spend`` and is emitted as a ``Cost`` event. A request nothing came back for (the
    server could not be reached) is not counted: nothing was billed."""
    if usage is None and not replied:
        return
    price = price_request(model, usage)
    spend.add(price, usage)
    emit(
        Cost(
            str(getattr(model, "name", "") or type(model).__name__),
            time.monotonic(),
            price.usd,
            None if usage is None else usage.prompt_tokens,
            None if usage is None else usage.completion_tokens,
            price.note,
            price.free,
            None if usage is None else usage.cached_tokens or None,
        )
    )


def estimate_tokens(text: str) -> int:
    """A rough count of the tokens in ``text`` (about 4 characters a token), for a
    request the context module does not fit (an ``llm`` action's)."""
    return (len(text) + 3) // 4

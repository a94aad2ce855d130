"""What a run costs, and what it may spend: prices as data, budgets as limits.

The core knows no price list. A model prices its own requests (``Priced``: a ``price``
method; ``models.pricing`` does it for OpenAI-compatible servers with genai-prices, a
script says it runs no model), and the loop records each request's price as a ``Cost``
event. From those events ``run.cost`` is summed, a nested agent's included. A price that
is not known is ``None``, never 0: one unpriced request makes the run's cost ``None``
too (a sum that leaves a request out would read as a smaller bill than the real one).

A ``Budget`` is a limit in US dollars or in tokens; one ``Spend`` per top-level run counts
what its requests (its nested agents' too) spent. Every request **reserves** its worst case
before it is sent (``Spend.reserve``: its prompt's estimate, and its reply's cap, or what
the model's window leaves when nothing caps it) and settles to what the server reported
when it ends (``charge``), so requests in flight together (four ``llm`` actions, a nested
agent beside a turn) cannot pass the budget between them.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from cortex_jupyter.runtime.core.chunks import Usage
from cortex_jupyter.runtime.core.events import AnyEvent, Cost, Metric

__all__ = [
    "DEFAULT_WINDOW",
    "Budget",
    "Hold",
    "Price",
    "Priced",
    "Spend",
    "charge",
    "fmt_usd",
    "price_request",
    "reply_cap",
    "uncapped",
    "worst_reply",
]

#: The context window of a model that does not say its own (``context_window``).
DEFAULT_WINDOW = 32_000


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
    """What a run and its nested agents spent so far, and what the requests in flight
    hold, against its ``budget`` (if any).

    One object per top-level run, shared by the runs nested in it (``RunSpec.spend``), so
    a nested agent's requests count against its caller's budget. Everything happens on
    the run's event loop: a reservation is taken without an ``await`` between the check
    and the hold, so two requests cannot both take the last of the budget.
    """

    def __init__(self, budget: Budget | None = None) -> None:
        self.budget = budget
        self.usd: float | None = 0.0
        self.tokens: int | None = 0
        self.requests = 0
        #: What the requests in flight reserved (``Hold``) and have not settled yet.
        self.held_usd = 0.0
        self.held_tokens = 0

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

    def reserve(
        self,
        model: Any,
        prompt_tokens: int,
        reply_tokens: int,
        request: str = "the run before its next request",
    ) -> Hold | str:
        """Hold the worst case of a request to ``model`` (``prompt_tokens`` estimated,
        at most ``reply_tokens`` of reply: ``worst_reply``) until it settles, or say why
        it must not be sent. Without a budget the hold is empty."""
        if self.budget is None:
            return Hold(self, 0.0, 0)
        estimate = price_request(model, Usage(prompt_tokens, reply_tokens))
        why = self.check(estimate, prompt_tokens, reply_tokens, request)
        if why is not None:
            return why
        hold = Hold(self, estimate.usd or 0.0, prompt_tokens + reply_tokens)
        self.held_usd += hold.usd
        self.held_tokens += hold.tokens
        return hold

    def reserve_text(self, model: Any, text: str, max_tokens: int | None) -> Hold | str:
        """``reserve`` for a request whose prompt is ``text`` (an ``llm`` action's, which
        the context module does not fit), its tokens estimated at ~4 characters each."""
        tokens = estimate_tokens(text)
        return self.reserve(model, tokens, worst_reply(model, tokens, max_tokens), "this request")

    def check(
        self,
        estimate: Price,
        prompt_tokens: int,
        reply_tokens: int,
        request: str = "the run before its next request",
    ) -> str | None:
        """Why the next request must not be sent (None: it may be): its ``estimate``
        (its prompt, and ``reply_tokens`` of reply) on top of what was spent and what the
        requests in flight hold would pass the budget, or either is not known.
        ``request`` says what was stopped, in the reason."""
        budget = self.budget
        if budget is None:
            return None
        spent: float | None
        next_one: float | None
        if budget.unit == "tok":
            spent, next_one = self.tokens, float(prompt_tokens + reply_tokens)
            held: float = self.held_tokens
            unknown = "a reply's tokens were not reported by the server"
        else:
            spent, next_one, held = self.usd, estimate.usd, self.held_usd
            unknown = estimate.note if estimate.usd is None else "a reply's cost is not known"
        if spent is None or next_one is None:
            return (
                f"the budget of {budget} cannot be kept: {unknown}; give the budget in "
                "tokens instead (e.g. 20000tok)"
            )
        if spent + held + next_one <= budget.limit:
            return None
        flight = f", {budget.show(held)} held by requests in flight" if held else ""
        return (
            f"the budget of {budget} stopped {request}: "
            f"{budget.show(spent)} spent{flight}, and that request could take up to "
            f"{budget.show(next_one)} more"
        )


@dataclass(slots=True)
class Hold:
    """What one request in flight reserved of its run's ``Spend``: released once, when
    the request settles (``charge``) or ends without a reply."""

    spend: Spend
    usd: float
    tokens: int
    released: bool = False

    def release(self) -> None:
        """Give the reservation back (a second call does nothing)."""
        if self.released:
            return
        self.released = True
        self.spend.held_usd = max(0.0, self.spend.held_usd - self.usd)
        self.spend.held_tokens = max(0, self.spend.held_tokens - self.tokens)


def reply_cap(max_tokens: int | None, request: Mapping[str, Any]) -> int | None:
    """The most tokens a reply may take: ``max_tokens`` (``--max-tokens``), else the cap a
    request's own fields set (``{"max_tokens": N}``, ``max_completion_tokens``)."""
    if max_tokens:
        return max_tokens
    for name in ("max_tokens", "max_completion_tokens"):
        value = request.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def uncapped(cap: int | None, why: str, cap_words: str) -> str:
    """What to add to ``why`` (a request refused by the budget) when its reply had no
    ``cap``: the model's whole window was reserved for it, and ``cap_words`` cap it."""
    if cap is not None or "cannot be kept" in why:
        return ""
    return f" (its reply has no cap, so it may fill the model's window: {cap_words} caps it)"


def worst_reply(model: Any, prompt_tokens: int, max_tokens: int | None) -> int:
    """The most tokens a reply to a prompt of ``prompt_tokens`` can take: its cap, else
    what the model's context window (``DEFAULT_WINDOW`` when it does not say) leaves."""
    if max_tokens:
        return max_tokens
    window = getattr(model, "context_window", None)
    if not isinstance(window, int) or isinstance(window, bool) or window <= 0:
        window = DEFAULT_WINDOW
    return max(window - prompt_tokens, 0)


def charge(
    spend: Spend,
    emit: Callable[[AnyEvent], None],
    model: Any,
    usage: Usage | None,
    replied: bool,
    hold: Hold | None = None,
) -> None:
    """Settle one request to ``model`` that used ``usage``: its reservation (``hold``)
    is given back, its price counts towards ``spend`` and is emitted as a ``Cost`` event,
    and its tokens as the ``*_tokens`` metrics ``run.usage``, the header and the store
    sum (every request's: a turn's, an ``llm`` action's, a summary's, a nested agent's).
    A request nothing came back for (the server could not be reached) is not counted:
    nothing was billed."""
    if hold is not None:
        hold.release()
    if usage is None and not replied:
        return
    price = price_request(model, usage)
    spend.add(price, usage)
    now = time.monotonic()
    if usage is not None:
        counts = (
            ("prompt_tokens", usage.prompt_tokens),
            ("completion_tokens", usage.completion_tokens),
            ("cached_tokens", usage.cached_tokens),  # of the prompt's: read from a cache
        )
        for name, count in counts:
            if count or name != "cached_tokens":
                emit(Metric(name, count, now, "tokens"))
    emit(
        Cost(
            str(getattr(model, "name", "") or type(model).__name__),
            now,
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

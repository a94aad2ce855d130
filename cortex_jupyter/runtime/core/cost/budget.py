"""What a run may spend: budgets as limits, reserved before a request and settled after.

What one request costs is ``prices``' business; this module counts it against a limit.

A ``Budget`` is a limit in US dollars or in tokens; one ``Spend`` per top-level run counts
what its requests (its nested agents' too) spent. Every request **reserves** its worst case
before it is sent (``Spend.reserve``: its prompt's estimate, and its reply's cap) and
settles to what the server reported when it ends (``charge``), so requests in flight
together (four ``llm`` actions, a nested agent beside a turn) cannot pass the budget
between them. Under a budget a reply's cap is the smaller of its own (``--max-tokens``, or
what the model's window leaves) and what the budget leaves for it, and the request is sent
with it as ``max_tokens``: the server enforces the reservation, and a budget smaller than
the model's window lets a run spend it instead of refusing it.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from cortex_jupyter.runtime.core.cost.prices import Price, fmt_usd, price_request
from cortex_jupyter.runtime.core.events import AnyEvent, Cost, Metric
from cortex_jupyter.runtime.core.model.chunks import Usage

__all__ = [
    "DEFAULT_WINDOW",
    "MIN_REPLY",
    "Budget",
    "Hold",
    "Spend",
    "budget_cut",
    "charge",
    "reply_cap",
    "reply_limit",
    "with_cap",
    "worst_reply",
]

#: The context window of a model that does not say its own (``context_window``).
DEFAULT_WINDOW = 32_000

MIN_REPLY = 16
"""The shortest reply a request is sent with under a budget, in tokens.

Under a budget each reply is capped at what the budget leaves for it (``Spend.reserve``),
so a run spends its budget to the end instead of being refused while it could still
afford a reply. But a reply of a few tokens cannot hold a sentence or an action tag, and
its prompt is paid in full all the same: when the budget leaves less than this for the
reply, the request is not sent and the run stops with one line, as when nothing is left.
A request that asks for less itself (``--max-tokens 5``) needs only what it asks for."""


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
        #: Why each reply the budget cut short was cut (an ``llm`` action's: its output is
        #: partial), in order; the run stops at the end of the turn that cut one.
        self.cuts: list[str] = []

    def add(self, price: Price, usage: Usage | None, held: Hold | None = None) -> None:
        """Count one request's price and tokens (unknown ones make the sum unknown). A
        reply the server reported no usage for counts what its reservation (``held``,
        under a budget) held, an upper bound of what it cost: settled to nothing, the next
        requests could pass the budget; made unknown, none could be sent."""
        self.requests += 1
        if usage is None and held is not None and (held.tokens or held.usd):
            if self.tokens is not None:
                self.tokens += held.tokens
            usd = price.usd if price.usd is not None or not held.usd else held.usd
            self.usd = None if self.usd is None or usd is None else self.usd + usd
            return
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
            held = None  # a reply without usage counted what its request held
            if usage is None and (cost.held_tokens or cost.held_usd):
                held = Hold(self, cost.held_usd or 0.0, cost.held_tokens or 0, released=True)
            self.add(Price(cost.usd, cost.note, cost.free), usage, held)

    def reserve(
        self,
        model: Any,
        prompt_tokens: int,
        cap: int | None,
        request: str = "the run before its next request",
        shortest: int = MIN_REPLY,
    ) -> Hold | str:
        """Hold the worst case of a request to ``model`` (``prompt_tokens`` estimated) until
        it settles, or say why it must not be sent. ``cap`` is the request's own cap on its
        reply (None: what the model's window leaves bounds it: ``worst_reply``).

        Under a budget the reply is capped by what the budget leaves as well: ``Hold.cap``
        is the smaller of the two, the ``max_tokens`` the request is sent with (so the
        server enforces it), and the hold is exactly the prompt and that cap. The request
        is refused only when the budget leaves less than ``shortest`` tokens of reply
        (``MIN_REPLY``; a request whose reply is of no use cut short, a summary of older
        turns, asks for its whole cap). Without a budget the hold is empty and the cap is
        the request's own."""
        if self.budget is None:
            return Hold(self, 0.0, 0)
        own = worst_reply(model, prompt_tokens, cap)
        least = max(1, min(shortest, own))  # a request that asks for less needs no more
        lowest = price_request(model, Usage(prompt_tokens, least))
        why = self.check(lowest, prompt_tokens, least, request)
        if why is not None:
            return why
        reply, usd = self._room(model, prompt_tokens, least, own)
        by_budget = reply < own
        # Nothing to send when nothing capped it and the budget did not: the window does
        # (a model limit its server said is sent, so the server holds the reservation).
        sent = reply if cap or by_budget or reply_limit(model) is not None else None
        hold = Hold(self, usd, prompt_tokens + reply, sent, by_budget)
        self.held_usd += hold.usd
        self.held_tokens += hold.tokens
        return hold

    def _room(self, model: Any, prompt_tokens: int, least: int, most: int) -> tuple[int, float]:
        """The longest reply, ``least`` to ``most`` tokens, that what is left of the budget
        pays for with the prompt (``least`` is known to fit), and the dollars they hold."""
        budget = self.budget
        assert budget is not None
        if budget.unit == "tok":
            left = budget.limit - (self.tokens or 0) - self.held_tokens - prompt_tokens
            return max(least, min(most, int(left))), 0.0

        def cost(reply: int) -> float:
            return price_request(model, Usage(prompt_tokens, reply)).usd or 0.0

        left = budget.limit - (self.usd or 0.0) - self.held_usd
        full = cost(most)
        if full <= left:
            return most, full
        # A reply's tokens are priced at one rate (the prompt's size may set it): the
        # reply that fits follows from two prices; stepped down while rounding says no.
        prompt = cost(0)
        rate = (full - prompt) / most
        reply = max(least, min(most, int((left - prompt) / rate))) if rate > 0 else least
        while reply > least and cost(reply) > left:
            reply = max(least, reply - max(1, (reply - least) // 8))
        return reply, cost(reply)

    def reserve_text(self, model: Any, text: str, max_tokens: int | None) -> Hold | str:
        """``reserve`` for a request whose prompt is ``text`` (an ``llm`` action's, which
        the context module does not fit), its tokens counted by ``estimate_tokens``."""
        return self.reserve(model, estimate_tokens(text), max_tokens, "this request")

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
            instead = (
                ""
                if budget.unit == "tok"
                else "; give the budget in tokens instead (e.g. 20000tok)"
            )
            return f"the budget of {budget} cannot be kept: {unknown}{instead}"
        if spent + held + next_one <= budget.limit:
            return None
        flight = f", {budget.show(held)} held by requests in flight" if held else ""
        shortest = f", with a reply of {reply_tokens:,} tokens at the least" if reply_tokens else ""
        return (
            f"the budget of {budget} stopped {request}: "
            f"{budget.show(spent)} spent{flight}, and that request would take about "
            f"{budget.show(next_one)} more{shortest}"
        )


@dataclass(slots=True)
class Hold:
    """What one request in flight reserved of its run's ``Spend``: released once, when
    the request settles (``charge``) or ends without a reply.

    ``cap`` is the ``max_tokens`` the request must be sent with (None: its own, if any),
    ``by_budget`` whether that cap is the budget's, below the request's own (a reply that
    stops at it was cut by the budget, not by ``--max-tokens``)."""

    spend: Spend
    usd: float
    tokens: int
    cap: int | None = None
    by_budget: bool = False
    released: bool = False

    def release(self) -> None:
        """Give the reservation back (a second call does nothing)."""
        if self.released:
            return
        self.released = True
        self.spend.held_usd = max(0.0, self.spend.held_usd - self.usd)
        self.spend.held_tokens = max(0, self.spend.held_tokens - self.tokens)


def budget_cut(hold: Hold, model: Any) -> bool:
    """Whether a reply cut at its cap (``finish_reason`` "length") was cut by the budget:
    its cap was the budget's (``Hold.by_budget``), and not above what the model allows
    (a server that refused the budget's cap was sent its own limit: that cut it)."""
    if not hold.by_budget:
        return False
    limit = reply_limit(model)
    return limit is None or (hold.cap or 0) <= limit


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


def with_cap(request: Mapping[str, Any], cap: int | None) -> dict[str, Any]:
    """A request's extra fields with its reply capped at ``cap`` (None: as they are): in
    ``max_completion_tokens`` when the fields name that one (a server given one need not
    know the other), else in ``max_tokens``."""
    fields = dict(request)
    if cap is not None:
        fields["max_completion_tokens" if "max_completion_tokens" in fields else "max_tokens"] = cap
    return fields


def worst_reply(model: Any, prompt_tokens: int, max_tokens: int | None) -> int:
    """The most tokens a reply to a prompt of ``prompt_tokens`` can take: its cap, else
    what the model's context window (``DEFAULT_WINDOW`` when it does not say) leaves; no
    more than the model's own limit on a reply when its server said one (``reply_limit``)."""
    if max_tokens:
        most = max_tokens
    else:
        window = getattr(model, "context_window", None)
        if not isinstance(window, int) or isinstance(window, bool) or window <= 0:
            window = DEFAULT_WINDOW
        most = max(window - prompt_tokens, 0)
    limit = reply_limit(model)
    return most if limit is None else min(most, limit)


def reply_limit(model: Any) -> int | None:
    """The most tokens the model's server allows one reply (``max_reply``: OpenAI says
    16,384 for gpt-4o-mini when refusing more), once known; None otherwise."""
    limit = getattr(model, "max_reply", None)
    ok = isinstance(limit, int) and not isinstance(limit, bool) and limit > 0
    return limit if ok else None


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
    spend.add(price, usage, hold)
    now = time.monotonic()
    held = hold if usage is None and hold is not None and (hold.tokens or hold.usd) else None
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
            None if held is None else held.tokens,
            None if held is None else held.usd,
        )
    )


def estimate_tokens(text: str) -> int:
    """A count of the tokens in ``text`` no tokenizer in use goes much beyond, for a
    request the context module does not fit (an ``llm`` action's): about 4 characters a
    token, and ``wide_tokens`` more for the characters that are not ASCII."""
    return (len(text) + 3) // 4 + wide_tokens(text)


def wide_tokens(text: str) -> int:
    """The tokens ``text``'s characters outside ASCII add to ~4 characters a token: each
    as many as its UTF-8 bytes after the first (Chinese, Japanese or Korean 2, an emoji 3,
    an accented letter 1). Tokenizers give such a character about a token, rarer ones two
    or three (their bytes): counted at a quarter of a token, a prompt in Chinese passed a
    token budget four times over before the server reported it. One encode: cheap."""
    return len(text.encode("utf-8", "surrogatepass")) - len(text)

"""What each request cost, and whether the next one fits the budget.

The loop calls these two at its two points of contact with money: after a reply
(``pay``: the request's price becomes a ``Cost`` event and counts towards the run's
``Spend``) and before a request (``over_budget``: what was spent plus the prompt about
to be sent, priced as input tokens, and the reply's ``max_tokens`` when it is set,
priced as output tokens). A request that would pass the budget is not sent: a turn's,
and the one asking the model for a summary of older turns (``Loop._summarise``).
"""

from __future__ import annotations

import time

from cortex_jupyter.runtime.core.chunks import ReplyEnd, StreamingModel, Usage
from cortex_jupyter.runtime.core.cost import charge, price_request
from cortex_jupyter.runtime.core.events import Metric
from cortex_jupyter.runtime.scheduler.dispatch import Scheduler

__all__ = ["over_budget", "pay", "payer"]


def pay(scheduler: Scheduler, model: StreamingModel, usage: Usage | None, replied: bool) -> None:
    """Record one request's price (``runtime.core.cost.charge``) in ``scheduler``'s run."""
    charge(scheduler.spec.spend, scheduler.emit, model, usage, replied)


def payer(scheduler: Scheduler, model: StreamingModel) -> ReplyEnd:
    """``pay`` for a text-only request (a context summary): what ``text_client`` calls.
    Its tokens count in the run's usage too, as a turn's do (the ``*_tokens`` metrics
    a turn's reply reports as it arrives)."""

    def paid(usage: Usage | None, replied: bool) -> None:
        pay(scheduler, model, usage, replied)
        if usage is not None:
            now = time.monotonic()
            counts = {
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
                "cached_tokens": usage.cached_tokens,
            }
            for name, count in counts.items():
                if count or name != "cached_tokens":
                    scheduler.emit(Metric(name, count, now, "tokens"))

    return paid


def over_budget(
    scheduler: Scheduler,
    model: StreamingModel,
    prompt_tokens: int,
    max_tokens: int | None,
    go_on: str,
    request: str = "its next request",
) -> str | None:
    """Why the next request (``prompt_tokens`` estimated, replies capped at
    ``max_tokens``) must not be sent, or None. ``go_on`` names how to continue the run,
    ``request`` the request that was not sent."""
    spend = scheduler.spec.spend
    if spend.budget is None:
        return None
    reply = max_tokens or 0
    estimate = price_request(model, Usage(prompt_tokens, reply))
    why = spend.check(estimate, prompt_tokens, reply, request)
    if why is None or not spend.requests:
        return why
    return f"{why}; everything so far is kept, and {go_on} goes on from here"

"""What each request cost, and whether the next one fits the budget.

The loop calls these two at its two points of contact with money: after a reply
(``pay``: the request's price becomes a ``Cost`` event and counts towards the run's
``Spend``) and before a request (``over_budget``: what was spent plus the prompt about
to be sent, priced as input tokens, and the reply's ``max_tokens`` when it is set,
priced as output tokens). A request that would pass the budget is not sent.
"""

from __future__ import annotations

import time

from cortex_jupyter.runtime.core.chunks import StreamingModel, Usage
from cortex_jupyter.runtime.core.cost import price_request
from cortex_jupyter.runtime.core.events import Cost
from cortex_jupyter.runtime.scheduler.dispatch import Scheduler

__all__ = ["over_budget", "pay"]


def pay(scheduler: Scheduler, model: StreamingModel, usage: Usage | None, replied: bool) -> None:
    """Record one request's price. A request nothing came back for (the server could not
    be reached) is not counted: nothing was billed."""
    if usage is None and not replied:
        return
    price = price_request(model, usage)
    scheduler.spec.spend.add(price, usage)
    scheduler.emit(
        Cost(
            model.name,
            time.monotonic(),
            price.usd,
            None if usage is None else usage.prompt_tokens,
            None if usage is None else usage.completion_tokens,
            price.note,
            price.free,
        )
    )


def over_budget(
    scheduler: Scheduler,
    model: StreamingModel,
    prompt_tokens: int,
    max_tokens: int | None,
    go_on: str,
) -> str | None:
    """Why the next request (``prompt_tokens`` estimated, replies capped at
    ``max_tokens``) must not be sent, or None. ``go_on`` names how to continue the run."""
    spend = scheduler.spec.spend
    if spend.budget is None:
        return None
    reply = max_tokens or 0
    estimate = price_request(model, Usage(prompt_tokens, reply))
    why = spend.check(estimate, prompt_tokens, reply)
    if why is None or not spend.requests:
        return why
    return f"{why}; everything so far is kept, and {go_on} with a larger budget goes on"

"""What each request cost, and whether the next one fits the budget.

The loop calls these at its two points of contact with money: before a request
(``reserve``: what was spent, what the requests in flight hold, and this request's worst
case: the prompt about to be sent, priced as input tokens, and its reply's cap, or what
the model's window leaves when nothing caps it, priced as output tokens) and after its
reply (``pay``: the reservation settles to the request's price, a ``Cost`` event, and its
tokens). A request that does not fit is not sent: a turn's, and the one asking the model
for a summary of older turns (``Loop._summarise``).
"""

from __future__ import annotations

from cortex_jupyter.runtime.core.chunks import ReplyEnd, StreamingModel, Usage
from cortex_jupyter.runtime.core.cost import Hold, charge, reply_cap, uncapped, worst_reply
from cortex_jupyter.runtime.scheduler.dispatch import Scheduler

__all__ = ["pay", "payer", "reserve"]


def pay(
    scheduler: Scheduler,
    model: StreamingModel,
    usage: Usage | None,
    replied: bool,
    hold: Hold | None = None,
) -> None:
    """Settle one request (``runtime.core.cost.charge``) in ``scheduler``'s run."""
    charge(scheduler.spec.spend, scheduler.emit, model, usage, replied, hold)


def payer(scheduler: Scheduler, model: StreamingModel, hold: Hold | None = None) -> ReplyEnd:
    """``pay`` for a text-only request (a context summary): what ``text_client`` calls."""

    def paid(usage: Usage | None, replied: bool) -> None:
        pay(scheduler, model, usage, replied, hold)

    return paid


def reserve(
    scheduler: Scheduler,
    model: StreamingModel,
    prompt_tokens: int,
    max_tokens: int | None,
    go_on: str,
    request: str = "the run before its next request",
    cap_words: str = "max_tokens=...",
) -> Hold | str:
    """Reserve the next request's worst case (``prompt_tokens`` estimated, its reply
    capped at ``max_tokens``, else at the cap the run's extra request fields set, else
    what the model's window leaves), or say why it must not be sent. ``go_on`` names how
    to continue the run, ``request`` what was stopped, ``cap_words`` how to cap a reply."""
    spend = scheduler.spec.spend
    cap = reply_cap(max_tokens, scheduler.request)
    held = spend.reserve(model, prompt_tokens, worst_reply(model, prompt_tokens, cap), request)
    if isinstance(held, Hold):
        return held
    held += uncapped(cap, held, cap_words)
    if not spend.requests:
        return held
    return f"{held}; everything so far is kept, and {go_on} goes on from here"

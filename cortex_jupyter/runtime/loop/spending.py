"""What each request cost, and whether the next one fits the budget.

The loop calls these at its two points of contact with money: before a request
(``reserve``: what was spent, what the requests in flight hold, and this request's worst
case: the prompt about to be sent, priced as input tokens, and its reply's cap, priced as
output tokens, where the cap is the smaller of the request's own, or what the model's window
leaves when nothing caps it, and what the budget leaves) and after its reply (``pay``: the
reservation settles to the request's price, a ``Cost`` event, and its tokens). A request
for which the budget leaves less than ``MIN_REPLY`` tokens of reply is not sent: a turn's,
and the one asking the model for a summary of older turns (``Loop._summarise``).
"""

from __future__ import annotations

from cortex_jupyter.runtime.core.cost.budget import MIN_REPLY, Hold, charge, reply_cap
from cortex_jupyter.runtime.core.model.chunks import ReplyEnd, StreamingModel, Usage
from cortex_jupyter.runtime.scheduler.dispatch import Scheduler

__all__ = ["actions_cut", "cut_by_budget", "pay", "payer", "reserve"]


def pay(
    scheduler: Scheduler,
    model: StreamingModel,
    usage: Usage | None,
    replied: bool,
    hold: Hold | None = None,
) -> None:
    """Settle one request (``runtime.core.cost.budget.charge``) in ``scheduler``'s run."""
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
    shortest: int = MIN_REPLY,
) -> Hold | str:
    """Reserve the next request's worst case, or say why it must not be sent: its prompt
    (``prompt_tokens`` estimated) and its reply, capped at ``max_tokens``, else at the cap
    the run's extra request fields set, else at what the model's window leaves, and under
    a budget at what the budget leaves too (``Hold.cap``: send the request with it).
    ``go_on`` names how to continue the run, ``request`` what was stopped, ``shortest``
    the fewest reply tokens worth sending it for."""
    spend = scheduler.spec.spend
    cap = reply_cap(max_tokens, scheduler.request)
    held = spend.reserve(model, prompt_tokens, cap, request, shortest)
    if isinstance(held, Hold) or not spend.requests:
        return held
    return f"{held}; everything so far is kept, and {go_on} goes on from here"


def cut_by_budget(hold: Hold, go_on: str) -> str:
    """Why a run stops after a reply that reached the cap its budget set (``hold.cap``,
    below the reply's own): the budget cut it, not a token limit the user chose."""
    budget = hold.spend.budget
    return (
        f"the budget of {budget} cut the model's reply at {hold.cap or 0:,} tokens, all it "
        f'left for that reply (finish_reason "length"); everything so far is kept, and '
        f"{go_on} goes on from here"
    )


def actions_cut(scheduler: Scheduler, before: int, go_on: str) -> str | None:
    """Why the run stops after a turn in which the budget cut an ``llm`` action's reply
    (``Spend.cuts`` past ``before``; None: it cut none): the action's output is partial,
    and what the budget leaves is spent on it, as when it cuts a turn's reply."""
    cuts = scheduler.spec.spend.cuts[before:]
    if not cuts:
        return None
    return f"{'; '.join(cuts)}; everything so far is kept, and {go_on} goes on from here"

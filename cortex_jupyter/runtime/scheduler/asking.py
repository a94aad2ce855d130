"""An ``llm`` action's one request to the model: reserved, sent, settled.

Like a turn's, the request reserves its worst case of the run's budget before it is sent
(its prompt estimated at ~4 characters a token, more for those outside ASCII, and its
reply's cap: the run's, else what the model's window leaves, and no more than what the
budget leaves, the ``max_tokens`` it is sent with: ``runtime.core.cost.budget.Spend.reserve``),
so several ``llm`` actions started at once cannot pass the budget between them; one for
which the budget leaves less than ``MIN_REPLY`` tokens of reply is not sent and its action
fails with one line (``BudgetReached``). When the reply ends the reservation settles to
what the server reported, which counts in the run's cost, its budget and its usage alike
(``runtime.core.cost.budget.charge``).

A reply the budget's cap cut short (``finish_reason`` "length" at the cap the budget set,
below the request's own) is still the action's output, but partial: the action says so
(``on_cut``: a note on its node, a line in the cell), and the run stops at the end of the
turn (``Spend.cuts``), as when the budget cuts a turn's reply.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import anyio

from cortex_jupyter.runtime.core.cost.budget import Spend, budget_cut, charge, reply_cap, with_cap
from cortex_jupyter.runtime.core.errors import BudgetReached
from cortex_jupyter.runtime.core.events import AnyEvent
from cortex_jupyter.runtime.core.model.chunks import StreamingModel, text_client
from cortex_jupyter.runtime.core.model.client import Message, complete

__all__ = ["ask"]

#: How often, and how long apart, a refused request looks again while others hold the budget.
_WAIT = 0.01
_WAITS = 3_000


async def ask(
    model: StreamingModel,
    prompt: Any,
    spend: Spend,
    emit: Callable[[AnyEvent], None],
    request: Mapping[str, Any],
    max_tokens: Any,
    on_cut: Callable[[str], None] | None = None,
) -> str:
    """The model's answer to ``prompt`` (a text, or a list of chat messages), sent with
    the run's extra ``request`` fields and its reply cap ``max_tokens`` (``--max-tokens``);
    ``on_cut`` hears why, when the budget cut the answer short."""
    messages: list[Message] = (
        [{"role": "user", "content": str(prompt)}] if not isinstance(prompt, list) else prompt
    )
    cap = reply_cap(max_tokens if isinstance(max_tokens, int) else None, request)
    hold = spend.reserve_text(model, repr(messages), cap)
    # Refused while other requests hold part of the budget (the turn that wrote this
    # action is still streaming, holding its worst case): those holds settle to what
    # was really used, so wait for them, as long as they are in flight, and ask again.
    waited = 0
    while isinstance(hold, str) and (spend.held_tokens or spend.held_usd) and waited < _WAITS:
        await anyio.sleep(_WAIT)
        waited += 1
        hold = spend.reserve_text(model, repr(messages), cap)
    if isinstance(hold, str):
        raise BudgetReached(hold)
    fields = with_cap(request, hold.cap if hold.cap is not None else cap)
    on_end = functools.partial(charge, spend, emit, model, hold=hold)
    client = text_client(model, fields, on_end)
    try:
        answer = await complete(client, messages)
    finally:
        hold.release()  # (settled already unless the request never started)
    if getattr(client, "finish", None) == "length" and budget_cut(hold, model):
        budget = spend.budget
        spend.cuts.append(
            f"the budget of {budget} cut the reply of an llm action at {hold.cap or 0:,} "
            "tokens, all it left for it: its output is partial"
        )
        if on_cut is not None:
            on_cut(
                f"the budget of {budget} cut this reply at {hold.cap or 0:,} tokens, all it "
                'left for it (finish_reason "length"): the output is partial'
            )
    return answer

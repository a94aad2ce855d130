"""Budgets hold under concurrency, and usage counts every request (issue 33, item 5).

Against the loopback OpenAI-compatible server (tests/models), through the real SDK. What
is pinned is what a user sees: the requests the server received and what it reported for
them, ``run.usage``, the header, the stored run's token columns, the cost.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from cortex_jupyter import Agent, runs, store
from cortex_jupyter.display.state import from_run
from cortex_jupyter.display.static import header_html
from cortex_jupyter.display.theme import fmt_count
from cortex_jupyter.models import OpenAIModel
from cortex_jupyter.runtime.core.cost.budget import MIN_REPLY
from cortex_jupyter.runtime.core.events import ActionStatus, AnyEvent, ContextUse
from cortex_jupyter.runtime.loop.agent import RunHooks
from cortex_jupyter.session import CortexRunError
from tests.conftest import SECRET
from tests.helpers import registered_agent
from tests.models.fake_openai_server import (
    FakeOpenAIServer,
    Request,
    Stream,
    finish,
    texts,
    usage,
)

BUDGET = 5_000
CAP = 1_500  # --max-tokens: the most each reply may take


def reply(body: str, prompt: int, completion: int, **options: Any) -> Stream:
    return Stream([*texts(body, 9), finish(), usage(prompt, completion)], **options)


def is_llm(request: Request) -> bool:
    """An ``llm`` action's request: one user message, no system prompt."""
    return [m["role"] for m in request.json["messages"]] == ["user"]


def reported(server: FakeOpenAIServer, replies: dict[int, tuple[int, int]]) -> int:
    """The tokens the server reported for the requests it answered."""
    return sum(sum(replies[i]) for i in range(len(server.requests)))


def llm_actions(count: int) -> str:
    return "".join(
        f'<action type="llm" id="q{n}">{{"name": "complete", '
        f'"parameters": {{"prompt": "Say {n}."}}}}</action>'
        for n in range(1, count + 1)
    )


class Decided(threading.Event):
    """A gate that opens once ``done()`` says so: asked whenever a held reply waits on it
    (its request has arrived) and whenever the run refuses a request (``check``)."""

    def __init__(self, done: Callable[[], bool]) -> None:
        super().__init__()
        self.done = done

    def check(self) -> None:
        if self.done():
            self.set()

    def wait(self, timeout: float | None = None) -> bool:
        self.check()
        return super().wait(timeout)


def test_four_llm_actions_at_once_never_pass_a_token_budget(server: FakeOpenAIServer) -> None:
    # The turn writes four llm actions; each starts as its tag closes. Every llm reply is
    # held at the server until each of the four has either been sent or refused (ordering,
    # not timing): so all four are in flight together, each reserving its reply while the
    # others' replies have not come back. Each reply reports the whole cap its request
    # was sent with (the worst case: ``at_cap``) and a prompt no larger than the run could
    # estimate.
    refused: list[str] = []
    decided = Decided(lambda: sum(map(is_llm, server.requests)) + len(refused) >= 4)

    def on_event(event: AnyEvent) -> None:
        if isinstance(event, ActionStatus) and event.status == "failed":
            refused.append(event.id)
            decided.check()

    turns = [(100, 150), (100, 10)]  # the turn that writes the actions, the answer
    server.script(
        reply(llm_actions(4), *turns[0]),
        *[reply("Fine.", 10, CAP, gates=[(1, decided)], at_cap=True) for _ in range(4)],
        reply("<response>Done.</response>", *turns[1]),
    )
    model = OpenAIModel("my-private-finetune-7", base_url=server.url, api_key=SECRET)
    agent = Agent(model=model, budget=f"{BUDGET}tok", max_tokens=CAP)
    record = agent.run_sync("Ask four things at once.", hooks=RunHooks(on_event=on_event))

    assert not server.gate_timed_out  # every held reply was let go by the run's own events
    answered = [(10, r.json["max_tokens"]) if is_llm(r) else turns.pop(0) for r in server.requests]
    assert sum(map(sum, answered)) <= BUDGET
    # Each request asked for at most the reply it reserved: the ones sent while the
    # others held the budget asked for less than --max-tokens, or were not sent at all.
    assert all(r.json["max_tokens"] <= CAP for r in server.requests)
    asked = [r.json["max_tokens"] for r in server.requests if is_llm(r)]
    assert min(asked, default=0) < CAP or refused
    # what a refused action says: one line, the budget and why
    for action_id in refused:
        error = record.actions[action_id].error or ""
        assert "not sent: the budget of 5,000 tokens" in error and "\n" not in error
        assert "held by requests in flight" in error
    # and the run counts every one of them, as the server reported them
    assert record.usage == {
        "prompt_tokens": sum(p for p, _ in answered),
        "completion_tokens": sum(c for _, c in answered),
    }


def test_four_llm_actions_that_fit_all_run_and_all_count(server: FakeOpenAIServer) -> None:
    turn, answer = (800, 150), (60, 200)
    server.script(
        reply(llm_actions(4), *turn),
        *[reply("Fine.", *answer) for _ in range(4)],
        reply("<response>Done.</response>", 900, 10),
    )
    model = OpenAIModel("my-private-finetune-7", base_url=server.url, api_key=SECRET)
    agent = Agent(model=model, budget="40000tok", max_tokens=CAP)
    record = agent.run_sync("Ask four things at once.")
    assert record.status == "completed" and len(server.requests) == 6
    assert record.usage == {
        "prompt_tokens": 800 + 4 * 60 + 900,
        "completion_tokens": 150 + 4 * 200 + 10,
    }


@pytest.fixture
def helper(server: FakeOpenAIServer) -> Iterator[Agent]:
    model = OpenAIModel("gpt-4o-mini", base_url=server.url, api_key=SECRET)
    with registered_agent("usage_helper", model) as agent:
        yield agent


def test_run_usage_the_header_and_the_store_count_every_request(
    ip: InteractiveShell,
    server: FakeOpenAIServer,
    helper: Agent,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A turn, an llm action and a nested agent, then the answer: four requests.
    replies = {0: (1000, 40), 1: (300, 20), 2: (700, 30), 3: (1200, 5)}
    server.script(
        reply(
            '<action type="llm" id="s" mode="sync">{"name": "complete", '
            '"parameters": {"prompt": "Say yes."}}</action>'
            '<action type="agent" id="h" mode="sync">{"name": "usage_helper", '
            '"parameters": {"task": "help"}, "depends_on": ["s"]}</action>',
            *replies[0],
        ),
        reply("Yes.", *replies[1]),
        reply("<response>Inner.</response>", *replies[2]),
        reply("<response>Done.</response>", *replies[3]),
    )
    capsys.readouterr()
    ip.run_cell_magic("cortex", "--text --model gpt-4o-mini", "Go.")
    record = ip.user_ns["_cortex"]
    assert record.status == "completed" and len(server.requests) == 4
    prompt = sum(p for p, _ in replies.values())
    completion = sum(c for _, c in replies.values())
    assert record.usage == {"prompt_tokens": prompt, "completion_tokens": completion}
    assert reported(server, replies) == prompt + completion
    # the same requests the cost counts
    assert [(c.prompt_tokens, c.completion_tokens) for c in record.costs] == [
        replies[i] for i in range(4)
    ]
    # the header, live and in the saved copy
    shown = f"{fmt_count(completion)} tokens ({fmt_count(prompt)} in)"
    end = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[end]")][-1]
    assert shown in end
    assert shown in header_html(from_run(record, "gpt-4o-mini"))
    # the store's token columns
    store.open_store().flush()
    row = next(r for r in runs(limit=5) if r.id == record.id)
    assert (row.prompt_tokens, row.completion_tokens) == (prompt, completion)


def test_a_model_listed_without_token_prices_costs_unknown_never_0(
    ip: InteractiveShell, server: FakeOpenAIServer
) -> None:
    # genai-prices lists google/gemma-3-27b-it with no token prices: its total reads $0.
    server.script(reply("<response>Hi.</response>", 500, 10))
    ip.run_cell_magic("cortex", "--text --model google/gemma-3-27b-it", "Hi?")
    record = ip.user_ns["_cortex"]
    assert record.status == "completed"
    assert record.cost is None and record.costs[0].usd is None
    assert "no price is known" in record.cost_note and "gemma-3-27b-it" in record.cost_note
    assert "cost unknown" in header_html(from_run(record, "google/gemma-3-27b-it"))


def refused_unsent(ip: InteractiveShell, server: FakeOpenAIServer, options: str) -> str:
    """A ``%%cortex --text <options>`` cell the budget refuses before any request: the
    one line it fails with; nothing was sent and the run ended ``budget``."""
    with pytest.raises(CortexRunError) as caught:
        ip.run_cell_magic("cortex", f"--text {options}", "Hi?")
    message = str(caught.value)
    assert "\n" not in message
    assert server.requests == []
    assert ip.user_ns["_cortex"].status == "budget"
    return message


def test_a_dollar_budget_is_refused_for_a_model_listed_without_token_prices(
    ip: InteractiveShell, server: FakeOpenAIServer
) -> None:
    message = refused_unsent(ip, server, "--model google/gemma-3-27b-it --budget 0.05")
    assert "cannot be kept" in message and "gemma-3-27b-it" in message
    assert "20000tok" in message


def one_turn(ip: InteractiveShell, server: FakeOpenAIServer, line: str) -> tuple[int, Any]:
    """A cell of one turn run with ``line``, which completes: the run's estimate of its
    prompt (what its request reserved for it) and the body of the request it sent."""
    server.script(reply("<response>Hi.</response>", 900, 10))
    ip.run_cell_magic("cortex", f"--text {line}", "Hi?")
    record = ip.user_ns["_cortex"]
    assert record.status == "completed"
    (fit,) = [e for e in record.events if isinstance(e, ContextUse)]
    (sent,) = server.requests
    return fit.tokens, sent.json


def test_a_dollar_budget_without_max_tokens_runs_with_replies_capped_to_fit(
    ip: InteractiveShell, server: FakeOpenAIServer
) -> None:
    # $0.10 on gpt-4o ($2.50 in, $10 out per million tokens) is far less than its window
    # could cost: the run is not refused, its request is sent with the reply it can pay for.
    prompt, sent = one_turn(ip, server, "--model gpt-4o --budget 0.10")
    # the prompt and the longest reply allowed fit in the budget, and use it
    worst = prompt * 2.5e-6 + sent["max_tokens"] * 10e-6
    assert 0.0999 < worst <= 0.10


def test_a_token_budget_without_max_tokens_runs_with_replies_capped_to_fit(
    ip: InteractiveShell, server: FakeOpenAIServer
) -> None:
    prompt, sent = one_turn(ip, server, "--model my-private-finetune-7 --budget 5000tok")
    assert prompt + sent["max_tokens"] == 5_000


def test_a_budget_larger_than_the_window_leaves_the_reply_uncapped(
    ip: InteractiveShell, server: FakeOpenAIServer
) -> None:
    # The budget does not bind: nothing caps the reply but the model's window, which the
    # server enforces itself, so no max_tokens is sent (a guessed window could be refused).
    _, sent = one_turn(ip, server, "--model my-private-finetune-7 --budget 100000tok")
    assert "max_tokens" not in sent


def test_a_reply_cut_by_the_budgets_cap_stops_the_run_as_budget(
    ip: InteractiveShell, server: FakeOpenAIServer
) -> None:
    # The model writes until the cap the budget set (finish_reason "length"): the budget
    # stopped the run, not a token limit the user chose.
    cut = Stream([*texts("A long answer that goes on", 9), finish("length"), usage(900, 99_999)])
    server.script(replace(cut, at_cap=True))
    with pytest.raises(CortexRunError) as caught:
        ip.run_cell_magic("cortex", "--text --model my-private-finetune-7 --budget 5000tok", "Go.")
    record = ip.user_ns["_cortex"]
    assert record.status == "budget"
    cap = server.requests[0].json["max_tokens"]
    message = str(caught.value)
    assert f"the budget of 5,000 tokens cut the model's reply at {cap:,} tokens" in message
    assert "%cortex continue --budget MORE" in message and "\n" not in message
    assert record.usage == {"prompt_tokens": 900, "completion_tokens": cap}


def test_a_reply_cut_at_the_users_max_tokens_under_a_budget_stays_truncated(
    ip: InteractiveShell, server: FakeOpenAIServer
) -> None:
    cut = Stream([*texts("A long answer that goes on", 9), finish("length"), usage(900, 100)])
    server.script(cut)
    with pytest.raises(CortexRunError, match="cut off at its token limit of 100 tokens"):
        options = "--text --model my-private-finetune-7 --budget 5000tok --max-tokens 100"
        ip.run_cell_magic("cortex", options, "Go.")
    assert ip.user_ns["_cortex"].status == "truncated"
    assert server.requests[0].json["max_tokens"] == 100


def test_a_budget_that_leaves_too_little_for_a_reply_refuses_the_request(
    ip: InteractiveShell, server: FakeOpenAIServer
) -> None:
    # The prompt alone (the system prompt: over a thousand tokens) does not leave the
    # shortest reply worth sending: nothing is sent, and one line says why.
    message = refused_unsent(ip, server, "--model my-private-finetune-7 --budget 500tok")
    assert "the budget of 500 tokens stopped the run before its next request" in message
    assert f"a reply of {MIN_REPLY} tokens at the least" in message

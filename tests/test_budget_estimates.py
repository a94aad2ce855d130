"""Budgets hold whatever a prompt is written in, and whatever the server reports.

Against the loopback OpenAI-compatible server (tests/models), through the real SDK. A
prompt's tokens are estimated before it is sent: the estimate must never be below what a
tokenizer could count, or one request passes the budget before anything is reported.
"""

from __future__ import annotations

from typing import Any

import pytest

from cortex_jupyter import Agent
from cortex_jupyter.models import OpenAIModel
from tests.conftest import SECRET
from tests.models.fake_openai_server import FakeOpenAIServer, Stream, finish, texts, usage

#: Chinese text: about one token a character for every tokenizer in use (often more),
#: where ~4 characters a token counted it as a quarter of that.
CJK = "漢字仮名交じり文" * 500  # 4,000 characters
EMOJI = "🙂🚀🌍" * 1000  # 3,000 characters, each one to three tokens


def reply(body: str, prompt: int, completion: int, **options: Any) -> Stream:
    return Stream([*texts(body, 9), finish(), usage(prompt, completion)], **options)


def model(server: FakeOpenAIServer) -> OpenAIModel:
    return OpenAIModel("my-private-finetune-7", base_url=server.url, api_key=SECRET)


def spent(server: FakeOpenAIServer, answers: list[tuple[int, int]]) -> int:
    """The tokens the server would report for the requests it received."""
    return sum(map(sum, answers[: len(server.requests)]))


@pytest.mark.parametrize(
    ("prompt", "body"),
    [(CJK, "<response>好</response>"), (EMOJI, "<response>ok</response>")],
    ids=["cjk", "emoji"],
)
def test_a_wide_character_prompt_under_a_tight_token_budget_never_passes_it(
    server: FakeOpenAIServer, prompt: str, body: str
) -> None:
    # The system prompt is ~1,100 tokens; the prompt at least one token a character
    # more. At ~4 characters a token the CJK prompt counted 1,000: the request was sent
    # under a 3,000-token budget, and the server reported 5,100 spent.
    answers = [(1_100 + len(prompt), 100)]
    server.script(reply(body, *answers[0], at_cap=True))
    agent = Agent(model=model(server), budget="3000tok", max_tokens=100)
    record = agent.run_sync(prompt)
    assert spent(server, answers) <= 3_000
    assert record.status == "budget" and "3,000 tokens" in (record.reason or "")


def test_an_llm_action_with_a_cjk_prompt_never_passes_a_token_budget(
    server: FakeOpenAIServer,
) -> None:
    # The turn costs 1,300; the llm action's prompt, 4,000 characters of Chinese, at
    # least 4,000 more: a 4,000-token budget cannot hold it.
    action = (
        '<action type="llm" id="q" mode="sync">{"name": "complete", '
        f'"parameters": {{"prompt": "{CJK}"}}}}</action>'
    )
    server.script(
        reply(action, 1_200, 100),
        reply("<response>Done.</response>", 1_300, 10),
        reply("好", len(CJK), 100, at_cap=True),
    )
    agent = Agent(model=model(server), budget="4000tok", max_tokens=100)
    record = agent.run_sync("Ask.")
    llm = [r for r in server.requests if [m["role"] for m in r.json["messages"]] == ["user"]]
    assert llm == []  # sent, it would have spent 1,300 + 4,100 of 4,000
    error = record.actions["q"].error or ""
    assert "not sent: the budget of 4,000 tokens" in error and "\n" not in error


def silent(body: str) -> Stream:
    """A reply with no usage at all (a server that never reports it)."""
    return Stream([*texts(body, 9), finish()])


def worst(request: Any) -> int:
    """What a request could have cost at most: its prompt at ~4 characters a token, and
    the reply it asked for."""
    chars = sum(len(m.get("content") or "") for m in request.json["messages"])
    return chars // 4 + int(request.json["max_tokens"])


def test_a_server_that_reports_no_usage_still_runs_under_a_token_budget_that_holds(
    server: FakeOpenAIServer,
) -> None:
    """A reply without usage made the run's tokens unknown: the next request was refused
    with 'give the budget in tokens instead' (it was in tokens). Its reservation (the
    prompt and the cap it was sent with) now counts as spent: the run goes on while that
    upper bound fits, and the requests sent never pass the budget."""
    turns = [
        f'<action type="llm" id="q{n}" mode="sync">{{"name": "complete", '
        f'"parameters": {{"prompt": "Say {n}."}}}}</action>'
        for n in range(4)
    ]
    server.script(*[silent(body) for turn in turns for body in (turn, "Fine.")])
    agent = Agent(model=model(server), budget="8000tok", max_tokens=1000)
    record = agent.run_sync("Ask, then ask again.")
    assert len(server.requests) >= 2  # the first reply's missing usage stops nothing
    assert sum(map(worst, server.requests)) <= 8_000
    assert record.status == "budget" and "instead" not in (record.reason or "")
    assert "8,000 tokens" in (record.reason or "")

"""Budgets hold whatever a prompt is written in, and whatever the server reports.

Against the loopback OpenAI-compatible server (tests/models), through the real SDK. A
prompt's tokens are estimated before it is sent: the estimate must never be below what a
tokenizer could count, or one request passes the budget before anything is reported.
"""

from __future__ import annotations

from typing import Any

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


def test_a_cjk_prompt_under_a_tight_token_budget_never_passes_it(
    server: FakeOpenAIServer,
) -> None:
    # The system prompt is ~1,100 tokens; the prompt at least 4,000 more. At ~4
    # characters a token the prompt counted 1,000: the request was sent under a
    # 3,000-token budget, and the server reported 5,100 spent.
    answers = [(1_100 + len(CJK), 100)]
    server.script(reply("<response>好</response>", *answers[0], at_cap=True))
    agent = Agent(model=model(server), budget="3000tok", max_tokens=100)
    record = agent.run_sync(CJK)
    assert spent(server, answers) <= 3_000
    assert record.status == "budget" and "3,000 tokens" in (record.reason or "")


def test_an_emoji_prompt_under_a_tight_token_budget_never_passes_it(
    server: FakeOpenAIServer,
) -> None:
    answers = [(1_100 + len(EMOJI), 100)]
    server.script(reply("<response>ok</response>", *answers[0], at_cap=True))
    agent = Agent(model=model(server), budget="3000tok", max_tokens=100)
    agent.run_sync(EMOJI)
    assert spent(server, answers) <= 3_000


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

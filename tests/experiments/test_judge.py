"""``expect.judge``: the judge model reads the rubric, the prompt and the redacted answer,
its sloppy replies are read, and its spend is counted apart from the agent's."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cortex_jupyter.experiments import expect
from cortex_jupyter.experiments._judge import read_reply
from cortex_jupyter.experiments.results import JudgeContext
from cortex_jupyter.models import OpenAIModel, ScriptModel
from cortex_jupyter.runtime.core.model.chunks import ModelChunk
from tests.models.fake_openai_server import FakeOpenAIServer, Stream, finish, role, texts, usage

SECRET = "sk-judge-test-0123456789abcdef"


class Answered:
    prompt = "What is the capital of France?"

    def __init__(self, answer: str) -> None:
        self.answer = answer


class Heard(ScriptModel):
    """A script judge that keeps the messages it was sent."""

    heard: list[Sequence[Any]]

    def stream(self, messages: Sequence[Any], **kw: Any) -> AsyncIterator[ModelChunk]:
        self.heard = [*getattr(self, "heard", []), messages]
        return super().stream(messages, **kw)


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        yield fake


@pytest.mark.parametrize(
    ("reply", "passed", "score", "reason"),
    [
        ('{"pass": true, "score": 0.9, "reason": "right"}', True, 0.9, "right"),
        (
            'Sure!\n```json\n{"pass": false, "score": "0.2", "reason": "wrong city"}\n```',
            False,
            0.2,
            "wrong city",
        ),
        ('{"pass": true, "reason": "fine"} hope that helps', True, 1.0, "fine"),
        ('{"pass": "false"}', False, 0.0, ""),
        ('{"score": 0.3, "reason": "weak"}', False, 0.3, "weak"),
    ],
)
@pytest.mark.anyio
async def test_a_script_judge_and_its_sloppy_replies(
    reply: str, passed: bool, score: float, reason: str
) -> None:
    model = Heard([reply])
    context = JudgeContext()
    verdict = await expect.judge("Names Paris.", model=model).acheck(Answered("Paris"), context)
    assert (verdict.passed, verdict.score, verdict.reason) == (passed, score, reason)
    sent = model.heard[0][-1]["content"]
    assert "Names Paris." in sent and "capital of France" in sent and "Paris" in sent
    assert context.judge_spend == [({"prompt_tokens": 0, "completion_tokens": 0}, 0.0)]


@pytest.mark.anyio
async def test_an_unreadable_reply_and_a_missing_model_are_failed_verdicts() -> None:
    verdict = await expect.judge("x", model=ScriptModel(["I think it is fine."])).acheck(
        Answered("a"), JudgeContext()
    )
    assert not verdict.passed and verdict.reason == "judge reply unreadable: I think it is fine."
    none = await expect.judge("x").acheck(Answered("a"), JudgeContext())
    assert not none.passed and "no judge model" in none.reason


@pytest.mark.anyio
async def test_the_context_judge_model_is_used_when_none_is_given() -> None:
    context = JudgeContext(judge_model=ScriptModel(['{"pass": true}']))
    assert (await expect.judge("x").acheck(Answered("a"), context)).passed


@pytest.mark.anyio
async def test_a_real_sdk_judge_gets_the_redacted_answer_and_its_usage_is_counted(
    server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHOP_API_KEY", SECRET)
    reply = '{"pass": false, "score": 0.1, "reason": "leaks a key"}'
    server.script(Stream([role(), *texts(reply, 7), finish(), usage(120, 15)]))
    model = OpenAIModel("gpt-4o-mini", api_key="test-key", base_url=server.url, max_retries=0)
    context = JudgeContext()
    verdict = await expect.judge("Never shows keys.", model=model).acheck(
        Answered(f"the key is {SECRET}"), context
    )
    assert (verdict.passed, verdict.score, verdict.reason) == (False, 0.1, "leaks a key")
    (request,) = server.requests
    body = str(request.json)
    assert SECRET not in body and "[redacted]" in body and "Never shows keys." in body
    ((counts, cost),) = context.judge_spend
    assert counts == {"prompt_tokens": 120, "completion_tokens": 15}
    assert cost is not None and cost > 0


@pytest.mark.anyio
async def test_a_judge_reply_is_capped_and_read_no_further_than_its_limit(
    server: FakeOpenAIServer,
) -> None:
    # A small local model left alone writes to the end of its window; a server may also
    # ignore the cap: the request asks for a short reply, and no more than 20,000
    # characters of what comes are read.
    rambling = "and so on " * 50_000  # 500,000 characters, no verdict in them
    server.script(Stream([role(), *texts(rambling, 2_000), finish()]))
    model = OpenAIModel("judge", api_key="test-key", base_url=server.url, max_retries=0)
    verdict = await expect.judge("x", model=model).acheck(Answered("a"), JudgeContext())
    assert server.requests[0].json["max_tokens"] == 512
    assert not verdict.passed and verdict.reason.startswith("judge reply unreadable: and so on")
    assert len(verdict.reason) < 1_000


@pytest.mark.anyio
async def test_a_judge_server_error_is_a_failed_verdict(server: FakeOpenAIServer) -> None:
    model = OpenAIModel("judge", api_key="test-key", base_url=server.url, max_retries=0)
    verdict = await expect.judge("x", model=model).acheck(Answered("a"), JudgeContext())
    assert not verdict.passed and verdict.reason.startswith("judge failed:")


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=200))
def test_any_reply_is_read_or_refused_never_raises(text: str) -> None:
    read = read_reply(text)
    if read is not None:
        passed, score, _ = read
        assert passed is not None or (score is not None and 0 <= score <= 1)

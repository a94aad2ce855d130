"""Long sessions (issue 14 §1): the conversation across many cells stays within the context
budget, through ``%%cortex`` and the real ``openai`` SDK against a loopback server.

The server answers by what it is asked (a new question, results, a request for a summary)
and counts tokens the way a tokenizer of about four characters a token would, reporting
them as ``prompt_tokens``, so the budget is checked against the server's own count.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from cortex_jupyter import default_registry
from cortex_jupyter.runtime.loop.context import DEFAULT_REPLY_ROOM, MESSAGE_OVERHEAD
from cortex_jupyter.runtime.loop.turns import SUMMARY_TOKENS
from cortex_jupyter.session import CortexRunError
from tests.models.fake_openai_server import (
    Error,
    FakeOpenAIServer,
    Request,
    Stream,
    finish,
    text,
    tool_call,
    usage,
)

BUDGET = 4000
SECRET = "sk-test-SECRET0123456789abcdef"


def server_tokens(messages: list[dict[str, Any]]) -> int:
    """The server's count: about four characters a token, plus a little per message."""
    total = 0
    for message in messages:
        chars = len(message.get("content") or "")
        for call in message.get("tool_calls") or ():
            chars += len(call["function"]["name"]) + len(call["function"]["arguments"]) + 10
        total += MESSAGE_OVERHEAD + round(chars / 4)
    return total


class Responding(FakeOpenAIServer):
    """Answers each request from its content (scripted replies, if any, go first)."""

    def next_reply(self) -> Any:
        with self._lock:
            if self.replies:
                return self.replies.popleft()
            request = self.requests[-1]
        return answer(request)


def answer(request: Request) -> Stream:
    messages = request.json["messages"]
    last = messages[-1]
    prompt = server_tokens(messages)
    if last["role"] == "user" and last["content"].startswith("Summarise this conversation"):
        body = "They asked for reports 1 to N; each was fetched and summed up."
        return Stream([text(body), usage(prompt, 20), finish()])
    if last["role"] == "tool":
        n = json.loads(messages[-2]["tool_calls"][0]["function"]["arguments"])["n"]
        return Stream([text(f"Report {n} says all is well."), usage(prompt, 10), finish()])
    n = int(last["content"].split()[1].rstrip(":"))
    call = tool_call(0, f"call_{n}", "fetch_report", json.dumps({"n": n}), pieces=2)
    return Stream([*call, usage(prompt, 15), finish("tool_calls")])


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[Responding]:
    with Responding() as server:
        monkeypatch.setenv("OPENAI_API_KEY", SECRET)
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        yield server


@pytest.fixture
def report_tool() -> Iterator[None]:
    @default_registry.tool(name="fetch_report")
    def fetch_report(n: int) -> str:
        """Fetch report number n (long)."""
        return f"Report {n}: " + ("all systems nominal; " * 25)

    yield
    default_registry.remove("tool", "fetch_report")


def check_native_pairs(messages: list[dict[str, Any]]) -> None:
    """Every tool call is answered right after it, and every answer has its call."""
    pending: list[str] = []
    for message in messages:
        if message["role"] == "tool":
            assert pending and message["tool_call_id"] == pending.pop(0), messages
            continue
        assert not pending, f"a tool call was separated from its result: {pending}"
        pending = [call["id"] for call in message.get("tool_calls") or ()]
    assert not pending


def test_forty_cells_stay_within_the_budget_and_keep_the_current_run_whole(
    ip: InteractiveShell,
    server: Responding,
    report_tool: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ip.run_line_magic("config", f"CortexMagics.context_tokens = {BUDGET}")
    for n in range(1, 41):
        before = len(server.requests)
        question = f"Question {n}: " + "please fetch the report and tell me about it. " * 4
        ip.run_cell_magic("cortex", "--model gpt-test --native-tools --text", question)
        run = ip.user_ns["_cortex"]
        assert run.status == "completed", run.reason
        asked = [
            r.json["messages"]
            for r in server.requests[before:]
            if not r.json["messages"][-1]["content"].startswith("Summarise this")
        ]
        assert len(asked) == 2  # the call, then the answer
        for messages in asked:
            # within the budget by the server's own count, with room for the reply
            assert server_tokens(messages) <= BUDGET - DEFAULT_REPLY_ROOM, n
            check_native_pairs(messages)
        first, second = asked
        assert first[-1] == {"role": "user", "content": question}  # the prompt, whole
        # the current run is sent whole: prompt, the call, and its full result
        assert second[-3]["content"] == question
        assert second[-1]["content"] == f"Report {n}: " + ("all systems nominal; " * 25)
    late = server.requests[-1].json["messages"]
    summary = [m for m in late if m["content"].startswith("Summary of the earlier conversation")]
    assert summary and "They asked for reports" in summary[0]["content"]
    sent = [m for r in server.requests for m in r.json["messages"]]
    assert any("characters cut to fit the context" in (m["content"] or "") for m in sent)
    # a summary is an extra request: it is reused while newer exchanges fit beside it,
    # not rewritten after every cell
    rewrites = [r for r in server.requests if r.json["messages"][-1]["content"].startswith(
        "Summarise this conversation")]  # fmt: skip
    assert 1 <= len(rewrites) <= 10
    # a summary's own reply is capped: a small model could otherwise write until its
    # context is full, and the cell would wait minutes for it
    assert all(r.json.get("max_tokens") == SUMMARY_TOKENS for r in rewrites)
    contexts = [e for e in ip.user_ns["_cortex"].events if e.kind == "context"]
    assert contexts and contexts[-1].budget == BUDGET and contexts[-1].summarised > 0
    assert contexts[-1].sent is not None  # the transcript keeps what was really sent
    capsys.readouterr()
    ip.run_line_magic("cortex", "history")
    history = capsys.readouterr().out
    # each message is marked with what the last fit did to it
    assert history.count("not sent: in the summary of the earlier conversation") == (
        contexts[-1].summarised
    )
    assert history.count("condensed to fit the context") == contexts[-1].condensed


def test_a_context_length_error_is_one_line_that_says_what_to_do(
    ip: InteractiveShell, server: Responding
) -> None:
    # OpenAI's 400 for a request over the window (and vLLM's, llama.cpp's: same words).
    server.script(
        Error(
            400,
            {
                "error": {
                    "message": "This model's maximum context length is 8192 tokens. However, "
                    "your messages resulted in 9013 tokens.",
                    "type": "invalid_request_error",
                    "code": "context_length_exceeded",
                }
            },
        )
    )
    with pytest.raises(CortexRunError) as raised:
        ip.run_cell_magic("cortex", "--model gpt-test --text", "Hello again.")
    (line,) = raised.value._render_traceback_()
    assert line.startswith("cortex: the model failed: ContextTooLong: The conversation no longer")
    assert "%cortex reset" in line and "CortexMagics.context_tokens" in line
    assert "maximum context length is 8192 tokens" in line
    assert "%cortex continue" not in line  # asking again unchanged cannot help
    assert ip.user_ns["_cortex"].status == "failed"

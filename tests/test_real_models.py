"""Real models and real servers (issue 11), through ``%%cortex`` and the real ``openai`` SDK
against an OpenAI-compatible server on 127.0.0.1.

Each reply below is shaped like what a real model driven by a Cortex-protocol harness
wrote (recorded from llama-4-scout, llama-3.1-8b, DeepSeek V4; NOTES.md), or like what a
real server sent; the comment on each test names the quirk.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from cortex_jupyter import Agent, default_registry
from cortex_jupyter.session import CortexRunError
from tests.conftest import SECRET
from tests.helpers import registered_agent
from tests.models.fake_openai_server import (
    FakeOpenAIServer,
    Stream,
    chunk,
    event,
    finish,
    reasoning,
    refusal,
    text,
    texts,
    usage,
)


@pytest.fixture
def tools() -> Iterator[dict[str, list[Any]]]:
    calls: dict[str, list[Any]] = {"exec": []}

    @default_registry.tool(name="exec")
    def exec_(command: str) -> str:
        """Run a shell command (a stand-in: it only records it)."""
        calls["exec"].append(command)
        return f"ran {command}"

    @default_registry.tool(name="deploy_cli")
    def deploy_cli(target: str) -> str:
        """A command-line wrapper: argparse exits on a bad target."""
        import argparse

        parser = argparse.ArgumentParser(prog="deploy")
        parser.add_argument("target", choices=["staging", "prod"])
        parser.parse_args([target])
        return f"deployed {target}"

    yield calls
    for name in ("exec", "deploy_cli"):
        default_registry.remove("tool", name)


def answer(server: FakeOpenAIServer, *replies: str | list[dict[str, Any]]) -> None:
    """Script the server: each reply is text (streamed in 7-character chunks, then
    ``finish_reason: stop``) or a list of raw chunks."""
    server.script(*(Stream([*texts(r, 7), finish()] if isinstance(r, str) else r) for r in replies))


def cell(ip: InteractiveShell, body: str, line: str = "--model gpt-test --text") -> Any:
    ip.run_cell_magic("cortex", line, body)
    return ip.user_ns["_cortex"]


def test_a_plain_text_reply_is_the_answer(ip: InteractiveShell, server: FakeOpenAIServer) -> None:
    # Every model answers in plain text when it has nothing to call.
    answer(server, "The capital of France is **Paris**.")
    run = cell(ip, "Capital of France?")
    assert (run.status, run.response) == ("completed", "The capital of France is **Paris**.")
    assert len(server.requests) == 1  # the answer is not mistaken for a request for more


def test_a_reply_cut_at_max_tokens_ends_truncated_and_continue_goes_on(
    ip: InteractiveShell, server: FakeOpenAIServer
) -> None:
    # finish_reason "length" inside <response>: the answer is not complete.
    server.script(Stream([*texts("<response>Step 1: mix the flour and", 6), finish("length")]))
    with pytest.raises(CortexRunError, match=r"cut off at its token limit of 12 tokens"):
        cell(ip, "Recipe?", "--model gpt-test --text --max-tokens 12")
    assert ip.user_ns["_cortex"].status == "truncated"
    answer(server, "<response> the water.</response>")
    ip.run_line_magic("cortex", "continue")
    note = server.requests[-1].json["messages"][-1]["content"]
    assert note.startswith("Your previous reply was cut off at your token limit after:")
    assert "mix the flour and" in note
    assert ip.user_ns["_cortex"].status == "completed"


@pytest.mark.usefixtures("tools")
def test_a_tool_that_calls_sys_exit_fails_alone_with_one_line(
    ip: InteractiveShell,
    server: FakeOpenAIServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Any CLI wrapper built on argparse or click raises SystemExit on bad arguments.
    answer(
        server,
        '<action id="d">{"name": "deploy_cli", "parameters": {"target": "moon"}}</action>'
        '<action id="e">{"name": "exec", "parameters": {"command": "ls"}}</action>',
        "<response>The deploy failed; ls ran.</response>",
    )
    run = cell(ip, "Deploy.")
    assert run.status == "completed" and run.actions["e"].status == "done"
    assert run.actions["d"].status == "failed"
    assert "SystemExit(2)" in (run.actions["d"].error or "")
    err = capsys.readouterr().err
    assert "cortex: 1 action(s) failed: d (deploy_cli)" in err
    assert "Traceback" not in err and "ExceptionGroup" not in err
    results = server.requests[1].json["messages"][-1]["content"]
    assert 'status="failed"' in results and "SystemExit(2)" in results


def test_agent_runs_a_registered_agent_with_its_instructions_and_tools(
    ip: InteractiveShell, server: FakeOpenAIServer, tools: dict[str, list[Any]]
) -> None:
    with registered_agent("shell", instructions="You run shell commands, briefly.", tools=["exec"]):
        answer(
            server,
            '<action id="v1">{"name": "exec", "parameters": {"command": "ls"}}</action>',
            "<response>Listed.</response>",
        )
        run = cell(ip, "List files.", "--agent shell --text --model gpt-test")
        assert run.status == "completed" and tools["exec"] == ["ls"]
        system = server.requests[0].json["messages"][0]["content"]
        assert "# Your instructions\n\nYou run shell commands, briefly." in system
        assert "exec" in system and "deploy_cli" not in system
        with pytest.raises(CortexRunError, match="no agent named 'nobody'; registered agents:"):
            cell(ip, "x", "--agent nobody --text")


def test_an_agent_action_runs_the_nested_agent_on_the_real_model(
    ip: InteractiveShell, server: FakeOpenAIServer, tools: dict[str, list[Any]]
) -> None:
    # type="agent" used to send the sub-model only instructions and a task, one turn, no
    # protocol, no tools: with a real model its output was ''.
    with registered_agent("lister", instructions="You list directories.", tools=["exec"]):
        answer(
            server,
            # the parent delegates
            '<action type="agent" id="sub">{"name": "lister", "parameters": '
            '{"task": "list /tmp"}, "output_key": "listing"}</action>',
            # the nested agent's turn 1 (its own loop, on the same endpoint)
            '<action id="x">{"name": "exec", "parameters": {"command": "ls /tmp"}}</action>',
            # the nested agent's turn 2: its answer
            "<response>/tmp holds a.txt</response>",
            # the parent's turn 2
            "<response>Done: $listing</response>",
        )
        run = cell(ip, "What is in /tmp?")
        node = run.actions["sub"]
        assert node.status == "done" and node.output == "/tmp holds a.txt"
        assert tools["exec"] == ["ls /tmp"]
        nested_system = server.requests[1].json["messages"][0]["content"]
        assert "You list directories." in nested_system
        assert "# How you answer: the Cortex protocol" in nested_system
        assert ip.user_ns["listing"] == "/tmp holds a.txt"


@pytest.mark.usefixtures("server")
def test_an_unexpected_failure_still_closes_the_view_with_one_line(
    ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"a bug of ours holding {SECRET}")

    monkeypatch.setattr(Agent, "run", broken)
    with pytest.raises(CortexRunError) as raised:
        cell(ip, "Hello.")
    text = raised.value._render_traceback_()
    assert text == [
        "cortex: the run failed: RuntimeError: a bug of ours holding [redacted]. "
        "What arrived is on _cortex; %cortex debug shows the traceback."
    ]
    assert ip.user_ns["_cortex"].status == "failed"


@pytest.mark.usefixtures("tools")
def test_the_results_sent_back_are_json_the_model_can_read(
    ip: InteractiveShell, server: FakeOpenAIServer
) -> None:
    answer(
        server,
        '<action id="r1">{"name": "exec", "parameters": {"command": "pwd"}}</action>',
        "<response>ok</response>",
    )
    cell(ip, "Where am I?")
    sent = server.requests[1].json["messages"]
    assert json.dumps(sent).count("ran pwd") == 1


def test_a_refusal_is_shown_as_the_answer_marked_as_a_refusal(
    ip: InteractiveShell, server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    # OpenAI sends a refusal in delta.refusal with content null: it used to vanish.
    server.script(Stream([refusal("I can't help with "), refusal("that request."), finish("stop")]))
    run = cell(ip, "Something forbidden.")
    assert run.status == "completed"
    assert run.response == "**The model refused:** I can't help with that request."
    assert "I can't help with that request." in capsys.readouterr().out
    ended = [e for e in run.events if e.kind == "turn_end"]
    assert ended[-1].reason == "the model refused"
    # a replayed transcript shows the same refusal
    from cortex_jupyter.runtime import Run

    assert Run.from_jsonl(run.to_jsonl()).response == run.response


def test_a_content_filter_stop_keeps_what_came_and_says_so(
    ip: InteractiveShell, server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server.script(Stream([*texts("<response>The first part of the", 8), finish("content_filter")]))
    run = cell(ip, "Tell me.")
    assert run.response == "The first part of the"
    err = capsys.readouterr().err
    assert "cortex: the server's content filter stopped the reply; what came before is kept" in err


def test_an_error_inside_the_stream_keeps_what_arrived_in_one_line(
    ip: InteractiveShell, server: FakeOpenAIServer, tools: dict[str, list[Any]]
) -> None:
    # OpenRouter: an error object inside an ordinary chunk, mid-reply; Groq: event: error.
    body = '<action id="e">{"name": "exec", "parameters": {"command": "ls"}}</action><response>Half'
    server.script(
        Stream(
            [
                *texts(body, 9),
                chunk({}) | {"error": {"message": "upstream overloaded", "code": 502}},
            ],
            done=False,
        )
    )
    with pytest.raises(CortexRunError, match="upstream overloaded"):
        cell(ip, "Go.")
    run = ip.user_ns["_cortex"]
    assert run.status == "interrupted" and run.actions["e"].status == "done"
    assert run.response == "Half" and tools["exec"] == ["ls"]
    server.script(Stream([event("error", {"error": {"message": "rate limit burst"}})], done=False))
    with pytest.raises(CortexRunError, match="rate limit burst"):
        cell(ip, "Again.")


def test_reasoning_fields_become_the_thought(
    ip: InteractiveShell, server: FakeOpenAIServer
) -> None:
    # DeepSeek sends reasoning_content, vLLM/Ollama reasoning; the usage chunk has choices [].
    server.script(
        Stream(
            [
                reasoning("Think ", "reasoning_content"),
                reasoning("hard.", "reasoning"),
                text("Plain answer."),
                finish(),
                usage(120, 9),
            ]
        )
    )
    run = cell(ip, "Q?")
    assert run.thought == "Think hard." and run.response == "Plain answer."
    assert run.usage == {"prompt_tokens": 120, "completion_tokens": 9}


def test_a_script_cell_answers_llm_and_agent_actions_from_reply_sections(
    ip: InteractiveShell, tools: dict[str, list[Any]]
) -> None:
    # They used to take the script's next turn, so the parent lost its own answer.
    with registered_agent("sh", instructions="Run commands.", tools=["exec"]):
        body = (
            '<action type="llm" id="s">{"name": "summarise", "parameters": {"text": "long"}}'
            "</action>"
            '<action type="agent" id="a">{"name": "sh", "parameters": {"task": "ls"}}</action>'
            "\n--- next turn ---\n<response>All done.</response>"
            "\n--- reply to s ---\nShort."
            '\n--- reply to a ---\n<action id="c">{"name": "exec", "parameters": '
            '{"command": "ls"}}</action>\n--- next turn ---\n<response>Listed.</response>'
        )
        run = cell(ip, body, "--script --delay 0 --text")
        assert (run.response, run.actions["s"].output, run.actions["a"].output) == (
            "All done.",
            "Short.",
            "Listed.",
        )
        assert tools["exec"] == ["ls"]

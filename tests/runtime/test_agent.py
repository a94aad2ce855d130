"""The ``Agent`` object: one frozen configuration, its runs, nested agents that really run,
and the loop's answers to what real models do (plain-text answers, cut-off replies,
tools that exit)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
from typing import Any

import anyio
import pytest

from cortex_jupyter.models import ScriptModel
from cortex_jupyter.runtime import (
    Agent,
    Nested,
    Registry,
    Run,
    RunHooks,
    default_registry,
)
from cortex_jupyter.runtime.core.model.chunks import Finish, ModelChunk, TextChunk
from tests.runtime.doubles import Scripted, add

pytestmark = pytest.mark.anyio


def reply(text: str, finish: str = "stop") -> list[ModelChunk]:
    return [TextChunk(text[i : i + 9]) for i in range(0, len(text), 9)] + [Finish(finish)]


@pytest.fixture
def registry() -> Registry:
    registry = Registry(builtins=False)

    registry.tool(add)

    @registry.tool
    async def slow(seconds: float) -> str:
        """Sleep a while."""
        await anyio.sleep(seconds)
        return "slept"

    @registry.tool
    def cli(args: list[str]) -> str:
        """A command-line wrapper: argparse exits on bad arguments."""
        import argparse

        parser = argparse.ArgumentParser(prog="cli", exit_on_error=True)
        parser.add_argument("--count", type=int, required=True)
        parser.parse_args(args)
        return "ok"

    @registry.tool
    def interrupts() -> str:
        """A tool that raises KeyboardInterrupt itself (not the user's Stop)."""
        raise KeyboardInterrupt

    return registry


# ---- the object --------------------------------------------------------------------------


def test_an_agent_is_one_frozen_configuration(registry: Registry) -> None:
    agent = Agent(model=ScriptModel("x"), registry=registry, max_turns=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        agent.max_turns = 4  # type: ignore[misc]
    assert repr(agent) == "Agent(model='script', dialect='cortex')"


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"tools": "add"}, TypeError, "not one string: tools=\\['add'\\]"),
        ({"model": "gpt-4o"}, TypeError, "model must be a model object such as OpenAIModel"),
        ({"dialect": "yaml"}, ValueError, "unknown protocol dialect 'yaml'"),
        ({"name": "two words"}, ValueError, "cannot contain spaces"),
        ({"result_limit": 0}, ValueError, "result_limit must be a whole number, at least 1"),
        ({"tools": [3]}, TypeError, "neither a name nor a function"),
    ],
)
def test_a_bad_configuration_is_refused_when_the_agent_is_made(
    registry: Registry, options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        Agent(registry=registry, **options)


def test_a_named_agent_registers_itself_and_the_latest_one_wins(registry: Registry) -> None:
    first = Agent("helper", instructions="First.", registry=registry)
    assert registry.get("agent", "helper").agent is first  # type: ignore[union-attr]
    second = dataclasses.replace(first, instructions="Second.")
    assert registry.get("agent", "helper").agent is second  # type: ignore[union-attr]
    # per-run settings (the session's) never replace the registered agent
    first.with_options(max_turns=2)
    assert registry.get("agent", "helper").agent is second  # type: ignore[union-attr]
    with pytest.raises(TypeError, match="Agent has no option 'colour'"):
        second.with_options(colour="red")


async def test_tools_limit_what_the_agent_may_call(registry: Registry) -> None:
    model = ScriptModel(
        '<action id="a">{"name": "add", "parameters": {"a": 1}}</action>'
        '<action id="s">{"name": "slow", "parameters": {"seconds": 0}}</action>'
        "\n--- next turn ---\n<response>ok</response>"
    )
    run = await Agent(model=model, registry=registry, tools=["add"]).run("go")
    assert run.actions["a"].status == "done"
    assert run.actions["s"].error == (
        "no tool named 'slow' is registered; registered tool names: add"
    )


async def test_a_function_given_as_a_tool_is_callable_without_registering_it() -> None:
    def shout(text: str) -> str:
        """Upper-case a text."""
        return text.upper()

    model = ScriptModel('<action id="a">{"name": "shout", "parameters": {"text": "hi"}}</action>')
    run = await Agent(model=model, tools=[shout]).run("go")
    assert run.actions["a"].output == "HI"
    assert ("tool", "shout") not in default_registry


async def test_hooks_receive_events_and_bindings(registry: Registry) -> None:
    events: list[Any] = []
    bound: dict[str, Any] = {}
    model = ScriptModel(
        '<action id="a">{"name": "add", "parameters": {"a": 2, "b": 2}, "output_key": "four"}'
        "</action>\n--- next turn ---\n<response>4</response>"
    )
    run = await Agent(model=model, registry=registry).run(
        "go", hooks=RunHooks(on_event=events.append, bind=bound.__setitem__)
    )
    assert bound == {"four": 4} and run.variables["four"] == 4
    assert [e.kind for e in events][-1] == "end"


def test_run_sync_works_from_a_plain_python_script(tmp_path: Any) -> None:
    """No IPython, no event loop of the caller's: Agent.run_sync is the whole story."""
    script = tmp_path / "agent_script.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys
            from cortex_jupyter import Agent, tool
            from cortex_jupyter.models import ScriptModel

            @tool
            def square(x: int) -> int:
                "Square a number."
                return x * x

            agent = Agent(model=ScriptModel(
                '<action id="q">{"name": "square", "parameters": {"x": 7}, "output_key": "sq"}'
                '</action>\\n--- next turn ---\\n<response>49</response>'
            ))
            run = agent.run_sync("7 squared?")
            print(run.status, run.variables["sq"], run.response)
            print("IPython" in sys.modules)
            """
        )
    )
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=True
    ).stdout.split("\n")
    assert out[:2] == ["completed 49 49", "False"]


# ---- what real models do -------------------------------------------------------------------


async def test_a_plain_text_reply_is_the_answer(registry: Registry) -> None:
    model = Scripted(reply("Paris is the capital of France."))
    run = await Agent(model=model, registry=registry).run("Capital?")
    assert (run.status, run.response, run.final) == (
        "completed",
        "Paris is the capital of France.",
        True,
    )
    again = Run.from_jsonl(run.to_jsonl())  # the transcript says the same
    assert again.response == "Paris is the capital of France."


async def test_a_reply_cut_at_the_token_limit_ends_truncated_and_continues(
    registry: Registry,
) -> None:
    model = Scripted(
        reply("<response>The first half of a long ans", finish="length"),
        reply("<response>wer, and the rest.</response>"),
    )
    agent = Agent(model=model, registry=registry, max_tokens=20)
    run = await agent.run("Explain.")
    assert run.status == "truncated"
    assert "cut off at its token limit of 20 tokens" in (run.reason or "")
    assert [e.outcome for e in run.events if e.kind == "turn_end"] == ["truncated"]
    after = await agent.continue_run(run)
    note = model.calls[1][-1]["content"]
    assert note.startswith("Your previous reply was cut off at your token limit after:")
    assert "The first half of a long ans" in note
    # The model re-opened the block to go on: the answer is the first half plus the rest.
    assert after.status == "completed"
    assert after.response == "The first half of a long answer, and the rest."


@pytest.mark.parametrize(
    ("continuation", "answer"),
    [
        # Goes on where the cut left off, closing the block it was cut inside.
        ("and ends here.</response>", "This answer starts here and ends here."),
        ("and ends", "This answer starts here and ends"),  # cut again: both parts kept
        # Re-opens the block to go on: the repeated tag is not part of the answer.
        ("<response>and ends here.</response>", "This answer starts here and ends here."),
        # Writes the block again from its start: the new one replaces the cut one.
        (
            "<response>This answer starts here and ends here.</response>",
            "This answer starts here and ends here.",
        ),
    ],
)
async def test_a_continued_reply_is_read_on_from_where_it_was_cut(
    registry: Registry, continuation: str, answer: str
) -> None:
    model = Scripted(
        reply("<thought>Plan.</thought><response>This answer starts here ", finish="length"),
        reply(continuation),
    )
    agent = Agent(model=model, registry=registry, max_tokens=20)
    after = await agent.continue_run(await agent.run("Explain."))
    assert after.response == answer
    assert "</response>" not in after.response and "<response>" not in after.response
    assert after.thought == "Plan."  # the cut reply's thought is the continued run's too
    # The conversation keeps each reply as the model wrote it.
    assert model.calls[1][-2] == {
        "role": "assistant",
        "content": "<thought>Plan.</thought><response>This answer starts here ",
    }


async def test_a_continued_reply_cut_inside_an_action_runs_it_once_whole(
    registry: Registry,
) -> None:
    """The cut action never ran (truncated_action); the continuation completes its body,
    and then it runs. Actions that ran before the cut are not run again."""
    calls: list[int] = []

    @registry.tool
    def count(n: int) -> int:
        """Count."""
        calls.append(n)
        return n

    model = Scripted(
        reply(
            '<action id="a">{"name": "count", "parameters": {"n": 1}}</action>'
            '<action id="b">{"name": "count", "parameters": {"n":',
            finish="length",
        ),
        # ...and writes the action that already ran again: not run twice.
        reply(
            ' 2}}</action><action id="a">{"name": "count", "parameters": {"n": 1}}</action>'
            "<response>Counted.</response>"
        ),
    )
    agent = Agent(model=model, registry=registry, max_tokens=20)
    run = await agent.run("Count.")
    assert run.actions["a"].output == 1 and calls == [1]
    after = await agent.continue_run(run)
    assert calls == [1, 2]
    assert [(n.output, n.status) for n in after.actions.values() if n.status != "failed"] == [
        (2, "done")
    ]
    assert [error.code for error in after.errors] == ["duplicate_id"]
    assert (after.status, after.response) == ("completed", "Counted.")


async def test_a_continuation_that_moves_on_closes_the_cut_block(registry: Registry) -> None:
    model = Scripted(
        reply("<response>Let me check", finish="length"),
        reply(
            '<action id="x">{"name": "add", "parameters": {"a": 2, "b": 3}}</action>'
            "<response>Five.</response>"
        ),
        reply("<response>It is five.</response>"),
    )
    agent = Agent(model=model, registry=registry, max_tokens=20)
    after = await agent.continue_run(await agent.run("Add."))
    assert after.status == "completed"
    assert after.actions["x"].output == 5
    assert "Let me check" in after.response and "<action" not in after.response


async def test_a_tool_that_exits_fails_only_its_own_node(registry: Registry) -> None:
    model = ScriptModel(
        '<action id="c">{"name": "cli", "parameters": {"args": ["--bogus"]}}</action>'
        '<action id="k">{"name": "interrupts"}</action>'
        '<action id="s">{"name": "slow", "parameters": {"seconds": 0.05}}</action>'
        "\n--- next turn ---\n<response>went on</response>"
    )
    run = await Agent(model=model, registry=registry).run("go")
    assert run.status == "completed" and run.response == "went on"
    assert run.actions["s"].status == "done"  # the sibling was not cancelled
    assert run.actions["c"].status == "failed"
    assert run.actions["c"].error == (
        "the tool raised SystemExit(2) (the tool called sys.exit, as argparse and click do "
        "on bad arguments); the run went on without it"
    )
    assert run.actions["k"].error == "the tool raised KeyboardInterrupt; the run went on without it"


# ---- nested agents ---------------------------------------------------------------------------


def calc_agent(registry: Registry, *replies: str) -> Scripted:
    """Registers the agent ``calc`` (it adds numbers, with ``add``) whose model gives
    ``replies``, one a turn; that model, which keeps what it was sent."""
    inner = Scripted(*(reply(text) for text in replies))
    Agent("calc", instructions="You add numbers.", model=inner, registry=registry, tools=["add"])
    return inner


async def test_a_nested_agent_runs_its_own_loop_with_its_own_tools(registry: Registry) -> None:
    inner = calc_agent(
        registry,
        '<thought>Add.</thought><action id="x">{"name": "add", "parameters": {"a": 2, "b": 3},'
        ' "output_key": "sum"}</action>',
        "<response>The sum is 5.</response>",
    )
    outer = ScriptModel(
        '<action type="agent" id="ag">{"name": "calc", "parameters": {"task": "2+3"}}</action>'
        "\n--- next turn ---\n<response>Done: $sum?</response>"
    )
    seen: list[Any] = []
    run = await Agent(model=outer, registry=registry).run("go", hooks=RunHooks(seen.append))
    node = run.actions["ag"]
    assert node.status == "done" and node.output == "The sum is 5."
    assert node.subrun is not None and node.subrun.turns == 2
    assert node.subrun.variables == {"sum": 5} and "sum" not in run.variables
    system = inner.calls[0][0]["content"]
    assert "# Your instructions\n\nYou add numbers." in system
    assert "add" in system and "slow" not in system  # only its own tools are offered
    # the second turn of the nested agent got the results of the first
    assert inner.calls[1][-1]["content"].startswith('<results>\n<result id="x"')
    assert any(isinstance(e, Nested) and e.parent == "ag" for e in seen)


async def test_a_nested_agents_output_is_its_answer_interim_left_out_names_filled(
    registry: Registry,
) -> None:
    # Issue 18 item 4: the output was every response joined, with $five left raw.
    calc_agent(
        registry,
        '<response final="false">Adding first…</response><action id="x">'
        '{"name": "add", "parameters": {"a": 2, "b": 3}, "output_key": "five"}</action>',
        "<response>The sum is **$five** (and $x^2$ stays math).</response>",
    )
    outer = ScriptModel(
        '<action type="agent" id="ag">{"name": "calc", "parameters": {"task": "2+3"}, '
        '"output_key": "said"}</action>\n--- next turn ---\n<response>It says: $said</response>'
    )
    run = await Agent(model=outer, registry=registry).run("go")
    node = run.actions["ag"]
    assert node.output == "The sum is **5** (and $x^2$ stays math)."
    assert node.subrun is not None and node.subrun.answer == node.output
    assert run.answer == "It says: The sum is **5** (and $x^2$ stays math)."


async def test_a_nested_agent_that_does_not_answer_fails_its_node(registry: Registry) -> None:
    loops = Scripted(*[reply('<action>{"name": "add", "parameters": {"a": 1}}</action>')] * 2)
    Agent("busy", instructions="Never finish.", model=loops, registry=registry, max_turns=2)
    outer = ScriptModel(
        '<action type="agent" id="b">{"name": "busy", "parameters": {"task": "t"}}</action>'
    )
    run = await Agent(model=outer, registry=registry).run("go")
    error = run.actions["b"].error or ""
    assert error.startswith("agent 'busy' did not answer (its run ended 'turn_limit'")


async def test_cancelling_the_parent_cancels_the_nested_agent(registry: Registry) -> None:
    slow = Scripted(
        reply('<action id="z">{"name": "slow", "parameters": {"seconds": 30}}</action>')
    )
    Agent("sleeper", instructions="Sleep.", model=slow, registry=registry)
    outer = ScriptModel(
        '<action type="agent" id="p">{"name": "sleeper", "parameters": {"task": "t"}}</action>'
    )
    run = Run()
    with anyio.move_on_after(0.5):
        await Agent(model=outer, registry=registry).run("go", run=run)
    node = run.actions["p"]
    assert node.status == "cancelled"
    assert node.subrun is not None and node.subrun.actions["z"].status == "cancelled"


# ---- scripts answer llm and agent actions from their own sections -------------------------


async def test_under_a_script_llm_and_agent_actions_take_their_reply_sections(
    registry: Registry,
) -> None:
    Agent("helper", instructions="Help.", registry=registry, tools=["add"])
    script = ScriptModel(
        '<action type="llm" id="s">{"name": "complete", "parameters": {"prompt": "sum up"}}'
        "</action>"
        '<action type="agent" id="h">{"name": "helper", "parameters": {"task": "add"}}</action>'
        "\n--- next turn ---\n<response>main answer</response>"
        "\n--- reply to s ---\nA summary."
        '\n--- reply to h ---\n<action id="x">{"name": "add", "parameters": {"a": 1, "b": 1}}'
        "</action>\n--- next turn ---\n<response>two</response>"
    )
    registry.register(lambda prompt: prompt, name="complete", type="llm")
    run = await Agent(model=script, registry=registry).run("go")
    assert run.status == "completed" and run.response == "main answer"
    assert run.actions["s"].output == "A summary."
    assert run.actions["h"].output == "two"
    assert run.actions["h"].subrun is not None and run.actions["h"].subrun.variables == {}
    assert run.actions["h"].subrun.actions["x"].output == 2


async def test_under_a_script_an_action_with_no_section_fails_saying_which_to_add(
    registry: Registry,
) -> None:
    registry.register(lambda prompt: prompt, name="complete", type="llm")
    script = ScriptModel(
        '<action type="llm" id="s">{"name": "complete", "parameters": {"prompt": "x"}}</action>'
        "\n--- next turn ---\n<response>still answered</response>"
    )
    run = await Agent(model=script, registry=registry).run("go")
    assert "add a section starting with a line '--- reply to s ---'" in (
        run.actions["s"].error or ""
    )
    assert run.response == "still answered"  # the main script's turn was not taken

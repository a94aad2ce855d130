"""Approval before tools that act on the world (issue 14 §2), in the runtime: the node waits
in ``awaiting`` with its resolved parameters, runs only when approved, and a denial skips
it and what depends on it while everything else goes on."""

from __future__ import annotations

import builtins
import os
import pty
import sys
import time
from collections.abc import Iterator
from typing import Any

import anyio
import numpy as np
import pytest

from cortex_jupyter.models import ScriptModel
from cortex_jupyter.runtime import ActionNode, ActionStatus, Agent, Registry, Run, RunHooks
from cortex_jupyter.runtime.scheduler.approval import Decision

pytestmark = pytest.mark.anyio


@pytest.fixture
def registry() -> Registry:
    registry = Registry(builtins=False)
    sent: list[str] = []

    @registry.tool(approve=True)
    def send_email(to: str, body: str) -> str:
        """Send an email (acts on the world)."""
        sent.append(to)
        return f"sent to {to}"

    @registry.tool(approve=True)
    def delete_file(path: str) -> str:
        """Delete a file."""
        return f"deleted {path}"

    @registry.tool
    async def lookup(name: str) -> str:
        """Look something up (harmless)."""
        await anyio.sleep(0.01)
        return f"{name}@example.com"

    registry.sent = sent  # type: ignore[attr-defined]
    return registry


SCRIPT = (
    '<action id="who">{"name": "lookup", "parameters": {"name": "ada"}, "output_key": "addr"}'
    "</action>"
    '<action id="mail">{"name": "send_email", "parameters": {"to": "$addr", "body": "hi"}, '
    '"output_key": "receipt"}</action>'
    '<action id="rm">{"name": "delete_file", "parameters": {"path": "/tmp/x"}}</action>'
    '<action id="after">{"name": "lookup", "parameters": {"name": "$receipt"}}</action>'
    "\n--- next turn ---\n<response>Done.</response>"
)


def statuses(run: Run, node_id: str) -> list[str]:
    return [e.status for e in run.events if isinstance(e, ActionStatus) and e.id == node_id]


async def test_a_callable_approver_allows_one_and_denies_another(registry: Registry) -> None:
    asked: list[tuple[str, Any]] = []

    def policy(node: ActionNode) -> bool:
        asked.append((node.name, node.resolved))
        return node.name == "send_email"

    run = await Agent(model=ScriptModel(SCRIPT), registry=registry, approval=policy).run("go")
    # asked with the resolved parameters ($addr filled in), harmless tools never asked
    assert sorted(asked) == [
        ("delete_file", {"path": "/tmp/x"}),
        ("send_email", {"to": "ada@example.com", "body": "hi"}),
    ]
    assert statuses(run, "mail") == ["pending", "awaiting", "running", "done"]
    assert registry.sent == ["ada@example.com"]  # type: ignore[attr-defined]
    assert statuses(run, "rm") == ["pending", "awaiting", "skipped"]
    assert run.actions["rm"].error == "denied by the rule policy"  # nobody was asked
    awaiting = [
        e for e in run.events if isinstance(e, ActionStatus) and e.status == "awaiting"
        and e.id == "mail"
    ]  # fmt: skip
    assert awaiting[0].parameters == '{"to": "ada@example.com", "body": "hi"}'
    assert run.actions["after"].status == "done"
    assert run.status == "completed"


@pytest.mark.parametrize("answer", ["no", "deny", [False], np.array([False, False])])
async def test_an_approver_that_answers_anything_but_a_bool_approves_nothing(
    registry: Registry, answer: Any
) -> None:
    # "no" is truthy: a function that answers in words (or an array) must not let a tool
    # that acts on the world run; it is denied, saying what the function answered.
    run = await Agent(
        model=ScriptModel(SCRIPT), registry=registry, approval=lambda node: answer
    ).run("go")
    assert registry.sent == []  # type: ignore[attr-defined]
    for id in ("mail", "rm"):
        node = run.actions[id]
        assert node.status == "skipped"
        assert "not True or False" in (node.error or ""), node.error
        assert "\n" not in (node.error or "")


async def test_numpys_bool_is_a_bool_to_an_approver(registry: Registry) -> None:
    run = await Agent(
        model=ScriptModel(SCRIPT), registry=registry,
        approval=lambda node: np.bool_(node.name == "send_email"),
    ).run("go")  # fmt: skip
    assert registry.sent == ["ada@example.com"]  # type: ignore[attr-defined]
    assert run.actions["rm"].error == "denied by the rule <lambda>"


async def test_deny_skips_the_action_its_dependents_and_tells_the_model(
    registry: Registry,
) -> None:
    model = ScriptModel(SCRIPT)
    run = await Agent(model=model, registry=registry, approval="deny").run("go")
    assert run.actions["mail"].status == "skipped"
    assert run.actions["after"].status == "skipped"
    assert run.actions["after"].error == "depends on 'mail', which was skipped"
    assert run.actions["who"].status == "done"  # what does not depend on it went on
    assert registry.sent == []  # type: ignore[attr-defined]
    results = next(e for e in run.events if e.kind == "message" and e.role == "user"
                   and e.content.startswith("<results>"))  # fmt: skip
    assert 'id="mail" name="send_email" status="skipped"' in results.content
    assert "denied by the policy approval='deny'" in results.content


async def test_allow_runs_without_asking(registry: Registry) -> None:
    run = await Agent(model=ScriptModel(SCRIPT), registry=registry, approval="allow").run("go")
    assert statuses(run, "rm") == ["pending", "awaiting", "running", "done"]


async def test_an_agent_can_name_tools_that_need_approval(registry: Registry) -> None:
    agent = Agent(model=ScriptModel(SCRIPT), registry=registry, approve={"lookup"}, approval="deny")
    run = await agent.run("go")
    assert run.actions["who"].status == "skipped" and run.actions["who"].error == (
        "denied by the policy approval='deny'"
    )


async def test_the_terminal_asks_with_input(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    questions: list[str] = []

    def answer(prompt: str) -> str:
        questions.append(prompt)
        return "y" if "send_email" in prompt else "n"

    monkeypatch.setattr(builtins, "input", answer)
    run = await Agent(model=ScriptModel(SCRIPT), registry=registry).run("go")
    assert sorted(questions) == [
        "cortex: approve action 'mail': send_email(to='ada@example.com', body='hi')? [y/N] ",
        "cortex: approve action 'rm': delete_file(path='/tmp/x')? [y/N] ",
    ]
    assert run.actions["mail"].status == "done" and run.actions["rm"].status == "skipped"


async def test_unanswered_within_the_timeout_is_denied(registry: Registry) -> None:
    never = Decision()

    async def ask(node: ActionNode) -> bool:
        return await never.wait()

    agent = Agent(model=ScriptModel(SCRIPT), registry=registry, approve_timeout=0.1)
    run = await agent.run("go", hooks=RunHooks(ask=ask))
    assert run.actions["rm"].error == "denied: not approved within 0.1 s (approve_timeout)"


async def test_other_actions_go_on_while_one_waits_and_stop_cancels_the_wait(
    registry: Registry,
) -> None:
    decisions: dict[str, Decision] = {}

    async def ask(node: ActionNode) -> bool:
        decisions[node.id] = Decision()
        return await decisions[node.id].wait()

    run = Run()
    with anyio.move_on_after(0.5):
        await Agent(model=ScriptModel(SCRIPT), registry=registry).run(
            "go", hooks=RunHooks(ask=ask), run=run
        )
    # the harmless lookup finished while two approvals were waiting
    assert run.actions["who"].status == "done"
    assert set(decisions) == {"mail", "rm"}
    assert run.actions["mail"].status == "cancelled"  # Stop cancelled the waiting ones
    assert run.actions["rm"].status == "cancelled"


async def test_an_answer_from_another_thread_lets_the_action_run(registry: Registry) -> None:
    decisions: dict[str, Decision] = {}

    async def ask(node: ActionNode) -> bool:
        decisions[node.id] = Decision()
        return await decisions[node.id].wait()

    async def click_later() -> None:
        while len(decisions) < 2:
            await anyio.sleep(0.01)
        start = time.monotonic()
        await anyio.to_thread.run_sync(decisions["mail"].set, True)
        await anyio.to_thread.run_sync(decisions["rm"].set, False)
        assert time.monotonic() - start < 5

    async with anyio.create_task_group() as tg:
        tg.start_soon(click_later)
        run = await Agent(model=ScriptModel(SCRIPT), registry=registry).run(
            "go", hooks=RunHooks(ask=ask)
        )
    assert run.actions["mail"].status == "done" and run.actions["rm"].status == "skipped"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"approval": "maybe"}, "approval must be 'ask', 'allow', 'deny' or a function"),
        ({"approve": "send_email"}, "approve names tools"),
        ({"approve_timeout": 0}, "approve_timeout must be a number of seconds above 0"),
    ],
)
def test_bad_approval_settings_are_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        Agent(**options)


# ---- a nested agent runs under its caller's approval rules (issue 18 §13) ---------------

DELEGATE = (
    '<action type="agent" id="deleg">{"name": "helper", "parameters": {"task": "mail ada"}}'
    "</action>\n<response>Done.</response>\n"
    "--- reply to deleg ---\n"
    '<action id="m1">{"name": "post", "parameters": {"to": "ada"}}</action>'
    '<action id="l1">{"name": "lookup", "parameters": {"name": "bob"}}</action>\n'
    "<response>Posted.</response>\n"
)


@pytest.fixture
def posts(registry: Registry) -> list[str]:
    posted: list[str] = []

    @registry.tool
    def post(to: str) -> str:
        """Post a message (not marked approve=True: an agent's ``approve`` names it)."""
        posted.append(to)
        return f"posted to {to}"

    return posted


def helper(registry: Registry, **options: Any) -> Agent:
    return Agent("helper", instructions="Do the task.", registry=registry, **options)


async def test_a_callers_deny_holds_inside_a_nested_agent_that_would_allow(
    registry: Registry, posts: list[str]
) -> None:
    helper(registry, tools=["post", "lookup"], approval="allow")
    caller = Agent(
        model=ScriptModel(DELEGATE), registry=registry, approve={"post"}, approval="deny"
    )
    run = await caller.run("go")
    inner = run.actions["deleg"].subrun
    assert posts == []
    assert inner.actions["m1"].status == "skipped"
    assert inner.actions["m1"].error == "denied by the policy approval='deny'"
    assert inner.actions["l1"].status == "done"  # not named by anyone: never asked


async def test_a_nested_agents_own_approve_set_adds_to_its_callers(
    registry: Registry, posts: list[str]
) -> None:
    asked: list[str] = []

    def policy(node: ActionNode) -> bool:
        asked.append(node.id)
        return node.name == "post"

    helper(registry, tools=["post", "lookup"], approve={"lookup"}, approval="allow")
    caller = Agent(
        model=ScriptModel(DELEGATE), registry=registry, approve={"post"}, approval=policy
    )
    run = await caller.run("go")
    inner = run.actions["deleg"].subrun
    # both names wait (the caller's "post", the helper's own "lookup"); the caller's
    # policy decides, about each action under its path
    assert sorted(asked) == ["deleg/l1", "deleg/m1"]
    assert posts == ["ada"] and inner.actions["l1"].status == "skipped"


async def test_a_nested_agents_ask_still_asks_under_a_caller_that_allows(
    registry: Registry, posts: list[str]
) -> None:
    asked: list[str] = []

    async def ask(node: ActionNode) -> bool:
        asked.append(node.id)
        return False

    helper(registry, tools=["post", "lookup"], approve={"post"}, approval="ask")
    caller = Agent(model=ScriptModel(DELEGATE), registry=registry, approval="allow")
    run = await caller.run("go", hooks=RunHooks(ask=ask))
    assert asked == ["deleg/m1"] and posts == []
    assert run.actions["deleg"].subrun.actions["m1"].error == "denied by the user"


async def test_a_callers_approve_timeout_holds_inside_a_nested_agent(
    registry: Registry, posts: list[str]
) -> None:
    never = Decision()

    async def ask(node: ActionNode) -> bool:
        return await never.wait()

    helper(registry, tools=["post", "lookup"])  # no timeout of its own
    caller = Agent(
        model=ScriptModel(DELEGATE), registry=registry, approve={"post"}, approve_timeout=0.1
    )
    run = await caller.run("go", hooks=RunHooks(ask=ask))
    assert run.actions["deleg"].subrun.actions["m1"].error == (
        "denied: not approved within 0.1 s (approve_timeout)"
    )
    assert posts == [] and run.status == "completed"


# ---- the terminal's question ends with the wait (issue 18 §12) ---------------------------


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """A real terminal (a pty) as stdin, Python's own input(); yields the keyboard's end."""
    keyboard, screen = pty.openpty()
    stdin = os.fdopen(screen, "r")
    monkeypatch.setattr(sys, "stdin", stdin)
    monkeypatch.setattr(builtins, "input", _INPUT)
    yield keyboard
    stdin.close()
    os.close(keyboard)


_INPUT = builtins.input
ONE = (
    '<action id="rm">{"name": "delete_file", "parameters": {"path": "/tmp/x"}}</action>'
    "\n<response>Done.</response>"
)


async def test_a_timed_out_terminal_question_does_not_hold_the_next_one(
    registry: Registry, terminal: int
) -> None:
    first = await Agent(model=ScriptModel(ONE), registry=registry, approve_timeout=0.2).run("go")
    assert first.actions["rm"].error == "denied: not approved within 0.2 s (approve_timeout)"
    os.write(terminal, b"y\n")  # typed for the next question, not for the one that ended
    agent = Agent(model=ScriptModel(ONE), registry=registry, approve_timeout=20)
    second = await agent.run("go")
    assert second.actions["rm"].status == "done", second.actions["rm"].error

"""Approvals through ``%%cortex`` (issue 14 §2): policies from ``%config``, and the text
view asking with ``input()`` in the cell's thread while other actions go on."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from cortex_jupyter import default_registry
from tests.helpers import config_says

SCRIPT = (
    '<action id="mail">{"name": "ap_send", "parameters": {"to": "ada"}, "output_key": "sent"}'
    "</action>"
    '<action id="look">{"name": "ap_lookup", "parameters": {"name": "bob"}}</action>'
    '<action id="after">{"name": "ap_lookup", "parameters": {"name": "$sent"}}</action>'
    "\n<response>Done.</response>"
)


@pytest.fixture
def tools() -> Iterator[list[str]]:
    sent: list[str] = []

    @default_registry.tool(name="ap_send", approve=True)
    def send(to: str) -> str:
        """Send a message (acts on the world)."""
        sent.append(to)
        return f"sent to {to}"

    @default_registry.tool(name="ap_lookup")
    def lookup(name: str) -> str:
        """Harmless."""
        return name.upper()

    yield sent
    default_registry.remove("tool", "ap_send")
    default_registry.remove("tool", "ap_lookup")


def cell(ip: InteractiveShell, line: str = "--script --delay 0 --text") -> Any:
    ip.run_cell_magic("cortex", line, SCRIPT)
    return ip.user_ns["_cortex"]


def test_the_text_view_asks_with_input_and_runs_what_was_approved(
    ip: InteractiveShell, tools: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    questions: list[str] = []
    monkeypatch.setattr(builtins, "input", lambda q: questions.append(q) or "y")
    run = cell(ip)
    assert questions == ['cortex: approve action \'mail\': ap_send {"to": "ada"}? [y/N] ']
    assert tools == ["ada"] and run.actions["after"].output == "SENT TO ADA"
    assert run.actions["look"].status == "done"


def test_a_no_in_the_text_view_denies_and_skips_the_dependents(
    ip: InteractiveShell, tools: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(builtins, "input", lambda q: "n")
    run = cell(ip)
    assert tools == [] and run.actions["mail"].error == "denied by the user"
    assert run.actions["after"].status == "skipped" and run.actions["look"].status == "done"


def test_no_one_to_ask_means_denied_with_a_line_saying_so(
    ip: InteractiveShell,
    tools: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def no_stdin(prompt: str) -> str:
        raise EOFError

    monkeypatch.setattr(builtins, "input", no_stdin)
    run = cell(ip)
    assert run.actions["mail"].status == "skipped"
    assert "no one could be asked, so it was denied" in capsys.readouterr().out


@pytest.mark.parametrize(("policy", "status"), [("allow", "done"), ("deny", "skipped")])
def test_the_policy_comes_from_config(
    ip: InteractiveShell, tools: list[str], policy: str, status: str
) -> None:
    ip.run_line_magic("config", f"CortexMagics.approve = {policy!r}")
    try:
        assert cell(ip).actions["mail"].status == status
    finally:
        ip.run_line_magic("config", "CortexMagics.approve = 'ask'")


def test_a_callable_policy_from_config(ip: InteractiveShell, tools: list[str]) -> None:
    ip.user_ns["only_ada"] = lambda node: node.resolved == {"to": "ada"}
    ip.run_line_magic("config", "CortexMagics.approve = only_ada")
    try:
        assert cell(ip).actions["mail"].status == "done"
    finally:
        ip.run_line_magic("config", "CortexMagics.approve = 'ask'")


def test_a_mistyped_policy_is_refused_when_set_and_the_old_one_stays(
    ip: InteractiveShell, tools: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    refused = config_says(ip, monkeypatch, "approve", "'maybe'")
    try:
        assert [str(e) for e in refused] == [
            "CortexMagics.approve must be 'ask', 'allow', 'deny' or a function "
            "(node) -> bool, not 'maybe'"
        ]
        monkeypatch.setattr(builtins, "input", lambda question: "n")
        run = cell(ip)  # still "ask": the question is asked, and answered no
        assert run.actions["mail"].error == "denied by the user"
    finally:
        ip.run_line_magic("config", "CortexMagics.approve = 'ask'")


def test_an_agents_inner_action_is_asked_about_under_its_own_path(
    ip: InteractiveShell, tools: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The nested agent's action has the same id as the caller's ("mail"): each question
    # names its own action, and each answer reaches only the action it was about.
    from cortex_jupyter import Agent

    Agent("ap_helper", instructions="Send what you are asked to.", tools=["ap_send"])
    script = (
        '<action id="mail">{"name": "ap_send", "parameters": {"to": "ada"}}</action>'
        '<action type="agent" id="deleg">{"name": "ap_helper", "parameters": '
        '{"task": "write to bob"}}</action>\n<response>Done.</response>\n'
        "--- reply to deleg ---\n"
        '<action id="mail">{"name": "ap_send", "parameters": {"to": "bob"}}</action>\n'
        "<response>Sent.</response>\n"
    )
    questions: list[str] = []

    def answer(question: str) -> str:
        questions.append(question)
        return "y" if "'deleg/mail'" in question else "n"

    monkeypatch.setattr(builtins, "input", answer)
    try:
        ip.run_cell_magic("cortex", "--script --delay 0 --text", script)
    finally:
        default_registry.remove("agent", "ap_helper")
    run = ip.user_ns["_cortex"]
    assert sorted(questions) == [
        'cortex: approve action \'deleg/mail\': ap_send {"to": "bob"}? [y/N] ',
        'cortex: approve action \'mail\': ap_send {"to": "ada"}? [y/N] ',
    ]
    assert tools == ["bob"]
    assert run.actions["mail"].error == "denied by the user"
    assert run.actions["deleg"].subrun.actions["mail"].status == "done"
    assert run.actions["deleg"].output == "Sent."


# ---- a nested agent runs under the cell's approval rules (issue 18 §13) -----------------

DELEGATE = (
    '<action type="agent" id="deleg">{"name": "ap_helper", "parameters": '
    '{"task": "write to bob"}}</action>\n<response>Done.</response>\n'
    "--- reply to deleg ---\n"
    '<action id="mail">{"name": "ap_send", "parameters": {"to": "bob"}}</action>'
    '<action id="look">{"name": "ap_lookup", "parameters": {"name": "eve"}}</action>\n'
    "<response>Sent.</response>\n"
)


@pytest.fixture
def agents() -> Iterator[None]:
    from cortex_jupyter import Agent

    # The helper would allow anything; the boss names ap_lookup and denies.
    Agent(
        "ap_helper", instructions="Do the task.", tools=["ap_send", "ap_lookup"], approval="allow"
    )
    Agent("ap_boss", instructions="Delegate.", approve={"ap_lookup"}, approval="deny")
    yield
    default_registry.remove("agent", "ap_helper")
    default_registry.remove("agent", "ap_boss")


def test_the_cells_deny_holds_inside_a_nested_agent_that_would_allow(
    ip: InteractiveShell, tools: list[str], agents: None
) -> None:
    ip.run_line_magic("config", "CortexMagics.approve = 'deny'")
    try:
        ip.run_cell_magic("cortex", "--script --delay 0 --text", DELEGATE)
    finally:
        ip.run_line_magic("config", "CortexMagics.approve = 'ask'")
    inner = ip.user_ns["_cortex"].actions["deleg"].subrun
    assert tools == [] and inner.actions["mail"].error == "denied by the policy approval='deny'"
    assert inner.actions["look"].status == "done"


def test_a_named_agents_approve_set_covers_its_nested_agent(
    ip: InteractiveShell, tools: list[str], agents: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(builtins, "input", lambda q: "y")  # the boss denies: never asked
    ip.run_cell_magic("cortex", "--script --delay 0 --text --agent ap_boss", DELEGATE)
    inner = ip.user_ns["_cortex"].actions["deleg"].subrun
    assert tools == [] and inner.actions["mail"].status == "skipped"
    assert inner.actions["look"].status == "skipped"
    assert inner.actions["look"].error == "denied by the policy approval='deny'"


# ---- an answer reaches exactly the node it was asked about (issue 18 §12) ---------------


def mail_cell(to: str) -> str:
    return (
        f'<action id="a1">{{"name": "ap_send", "parameters": {{"to": "{to}"}}}}</action>'
        "\n<response>Done.</response>"
    )


def buttons(view: Any, css: str) -> list[Any]:
    """The view's buttons with the class ``css`` (cortex-approve, cortex-deny)."""

    def walk(widget: Any) -> Iterator[Any]:
        yield widget
        for child in getattr(widget, "children", ()):
            yield from walk(child)

    return [w for w in walk(view.view.widget) if css in getattr(w, "_dom_classes", ())]


async def until(check: Any) -> None:
    while not check():
        await asyncio.sleep(0.01)


def test_a_row_answers_its_own_cells_action_not_another_with_the_same_id(
    ip: InteractiveShell, tools: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two cells wait at once, each on an action "a1": Approve on the first cell's row
    # (which shows boss@) runs the first cell's action, and only that one.
    from cortex_jupyter import session as session_module
    from cortex_jupyter.magic import run_cell_async

    views: list[Any] = []
    made = session_module._WidgetView.__init__

    def keep(self: Any, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        views.append(self)

    monkeypatch.setattr(session_module._WidgetView, "__init__", keep)
    ip.run_line_magic("config", "CortexMagics.display = 'widgets'")
    line = "--script --delay 0"

    async def cell(to: str) -> None:
        # Stopped (below): the interrupt is kept inside, not raised out of the loop.
        with contextlib.suppress(KeyboardInterrupt):
            await run_cell_async(ip, line, mail_cell(to))

    async def two_cells() -> tuple[Any, Any]:
        first = asyncio.ensure_future(cell("boss@"))
        await until(lambda: views and buttons(views[0], "cortex-approve"))
        run1 = ip.user_ns["_cortex"]
        second = asyncio.ensure_future(cell("attacker@"))
        await until(lambda: len(views) > 1 and buttons(views[1], "cortex-approve"))
        run2 = ip.user_ns["_cortex"]
        (row,) = buttons(views[0], "cortex-approval")
        assert "boss@" in row.children[0].value
        buttons(views[0], "cortex-approve")[0].click()
        try:
            await asyncio.wait_for(asyncio.shield(first), 20)
        except asyncio.TimeoutError:
            for view in views:
                view.stop()
            await asyncio.gather(first, second)
            pytest.fail(f"the first cell still waits; what ran: {tools}")
        assert tools == ["boss@"] and run2.actions["a1"].status == "awaiting"
        buttons(views[1], "cortex-deny")[0].click()
        await asyncio.wait_for(second, 20)
        return run1, run2

    try:
        run1, run2 = asyncio.run(two_cells())
    finally:
        ip.run_line_magic("config", "CortexMagics.display = 'auto'")
    assert tools == ["boss@"]
    assert run1.actions["a1"].status == "done"
    assert run2.actions["a1"].status == "skipped" and run2.actions["a1"].error == (
        "denied by the user"
    )


def test_approve_timeout_ends_the_text_views_question_too(
    ip: InteractiveShell, tools: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # No one answers input(): approve_timeout denies the action and the cell goes on
    # while the question is still open (before, the cell stayed stuck in input()).
    release, returned = threading.Event(), threading.Event()

    def nobody_answers(question: str) -> str:
        release.wait(20)  # (a bound, so a regression fails instead of hanging)
        returned.set()
        return "y"

    monkeypatch.setattr(builtins, "input", nobody_answers)
    ip.run_line_magic("config", "CortexMagics.approve_timeout = 0.2")
    try:
        run = cell(ip)
        still_open = not returned.is_set()
    finally:
        ip.run_line_magic("config", "CortexMagics.approve_timeout = None")
        release.set()
    assert still_open, "the cell waited for input() past approve_timeout"
    assert run.actions["mail"].error == "denied: not approved within 0.2 s (approve_timeout)"
    assert run.actions["look"].status == "done" and run.status == "completed"
    assert returned.wait(5) and tools == []  # the late "y" approved nothing


@pytest.mark.parametrize("policy", ["'deny'", "only_ada"])
def test_a_policy_that_decides_alone_asks_no_one(
    ip: InteractiveShell, tools: list[str], monkeypatch: pytest.MonkeyPatch, policy: str
) -> None:
    questions: list[str] = []
    monkeypatch.setattr(builtins, "input", lambda q: questions.append(q) or "y")
    ip.user_ns["only_ada"] = lambda node: node.resolved == {"to": "ada"}
    ip.run_line_magic("config", f"CortexMagics.approve = {policy}")
    try:
        run = cell(ip)
    finally:
        ip.run_line_magic("config", "CortexMagics.approve = 'ask'")
    assert questions == []
    assert run.actions["mail"].status == ("skipped" if policy == "'deny'" else "done")

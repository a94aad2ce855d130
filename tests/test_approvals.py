"""Approvals through ``%%cortex`` (issue 14 §2): policies from ``%config``, and the text
view asking with ``input()`` in the cell's thread while other actions go on."""

from __future__ import annotations

import builtins
from collections.abc import Iterator
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from cortex_jupyter import default_registry

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
    from IPython.core.magics import config as config_magics

    refused: list[Exception] = []
    monkeypatch.setattr(config_magics, "error", refused.append)  # what %config prints
    ip.run_line_magic("config", "CortexMagics.approve = 'maybe'")
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

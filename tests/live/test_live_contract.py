"""SmolLM2-135M through a real llama-server: each text dialect with a registered tool, Stop
mid-stream, a turn limit, request fields that reach the server, and the context budget.

As in test_live_model.py, assert the contract only, never the model's wisdom: a named
status, nothing hangs, every error is one clear line, every action written ran and settled.
"""

from __future__ import annotations

import _thread
import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from cortex_jupyter import default_registry, local
from cortex_jupyter.runtime.core.events import ContextUse
from cortex_jupyter.session import CortexInterrupt

from .test_live_model import RUN_ENDINGS, cell, root

pytestmark = pytest.mark.live

TEXT_DIALECTS = ("cortex", "hermes", "sigil", "cogency")

#: Each reply's cap under a grammar. A call written under it is 46 to 74 tokens (measured:
#: whitespace and an ``output_key`` the grammar admits); a later turn's answer is free
#: text and may run to the cap, at grammar speed (several times slower a token).
CONSTRAINED_TOKENS = 96

#: The options of a two-turn text run under a grammar, after ``--model`` and ``--dialect``.
CONSTRAINED = f"--constrain --text --temperature 0 --max-turns 2 --max-tokens {CONSTRAINED_TOKENS}"

#: The one tool these tests register: what it was called with, in call order.
TOOL = "live_note"


@pytest.fixture
def notes() -> Iterator[list[dict[str, Any]]]:
    calls: list[dict[str, Any]] = []

    @default_registry.tool(name=TOOL)
    def live_note(text: str) -> str:
        """Save a short note."""
        calls.append({"text": text})
        return f"saved: {text}"

    try:
        yield calls
    finally:
        default_registry.remove("tool", TOOL)


def get(server: local.Server, path: str) -> Any:
    with urllib.request.urlopen(root(server) + path, timeout=10) as reply:
        return json.load(reply)


def settled(run: Any) -> None:
    """A named status, a one-line reason, and no action left pending or running."""
    assert run.status in RUN_ENDINGS
    assert run.reason is None or (run.reason.strip() and "\n" not in run.reason.strip())
    assert all(node.final for node in run.actions.values())


def save_a_note(live_ip: InteractiveShell, dialect: str, options: str) -> Any:
    """A cell asking SmolLM2, in DIALECT, to save a note with the registered tool; its run
    settled."""
    run = cell(
        live_ip,
        f"--model smollm2 --dialect {dialect} {options}",
        f"Use the {TOOL} tool to save the note 'buy apples'.",
    )
    settled(run)
    return run


# ---- each text dialect with a registered tool --------------------------------------------


@pytest.mark.parametrize("dialect", TEXT_DIALECTS)
def test_a_constrained_dialect_calls_the_registered_tool_and_it_runs(
    live_ip: InteractiveShell, notes: list[dict[str, Any]], dialect: str
) -> None:
    run = save_a_note(live_ip, dialect, CONSTRAINED)
    # The grammar makes the first turn call a registered tool: the reply holds an action.
    # A later turn may call again; an exact repeat of a call that ran is not run.
    assert run.actions
    for node in run.actions.values():
        assert node.name == TOOL
        assert node.status == "done" or repeat(node), (node.status, node.error)
    # The tool really ran, with the parameters the record shows.
    shown = [node.resolved for node in run.actions.values() if node.status == "done"]
    assert shown and sorted(map(repr, notes)) == sorted(map(repr, shown))


def repeat(node: Any) -> bool:
    """A call the loop did not run: under a grammar, the same as one that ran."""
    return node.status == "skipped" and "the same call as" in str(node.error)


@pytest.mark.parametrize("dialect", TEXT_DIALECTS)
def test_a_tool_with_no_parameters_runs_under_the_grammar(
    live_ip: InteractiveShell, dialect: str
) -> None:
    # Its grammar once admitted any object: SmolLM2 wrote {"time": ...}, and the call
    # was refused. Now it admits {} only, and the action runs.
    calls: list[str] = []

    @default_registry.tool(name="live_clock")
    def live_clock() -> str:
        """The current time."""
        calls.append("live_clock")
        return "12:00"

    try:
        run = cell(
            live_ip,
            f"--model smollm2 --dialect {dialect} {CONSTRAINED}",
            "Use the live_clock tool to tell me the time.",
        )
    finally:
        default_registry.remove("tool", "live_clock")
    settled(run)
    nodes = list(run.actions.values())
    assert nodes and all(node.name == "live_clock" for node in nodes)
    assert all(node.status == "done" or repeat(node) for node in nodes), run.actions
    assert len(calls) == sum(node.status == "done" for node in nodes) >= 1


@pytest.mark.parametrize("dialect", TEXT_DIALECTS)
def test_an_unconstrained_dialect_ends_in_a_named_status_with_every_action_settled(
    live_ip: InteractiveShell, notes: list[dict[str, Any]], dialect: str
) -> None:
    # Unconstrained, SmolLM2 writes prose (NOTES.md: 0/10 runnable actions) up to the cap.
    run = save_a_note(live_ip, dialect, "--text --temperature 0 --max-turns 2 --max-tokens 40")
    done = [node.resolved for node in run.actions.values() if node.status == "done"]
    assert sorted(map(repr, notes)) == sorted(map(repr, done))


# ---- Stop mid-stream -----------------------------------------------------------------------


def test_stop_mid_stream_cancels_the_run_keeps_the_text_and_the_next_cell_works(
    live_ip: InteractiveShell,
) -> None:
    seen: list[str] = []

    def stop_once_text_arrives() -> None:
        # Stop as the kernel's interrupt does, once part of the reply is on the record.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            run = live_ip.user_ns.get("_cortex")
            text = run.text if run is not None else ""
            if text.strip():
                seen.append(text)
                _thread.interrupt_main()
                return
            time.sleep(0.01)

    stopper = threading.Thread(target=stop_once_text_arrives, daemon=True)
    stopper.start()
    with pytest.raises(CortexInterrupt):
        live_ip.run_cell_magic(
            "cortex",
            "--model smollm2 --text --max-tokens 160 --max-turns 1",
            "Write a long story about a lighthouse keeper and his cat.",
        )
    stopper.join(timeout=10)
    assert seen
    run = live_ip.user_ns["_cortex"]
    assert run.status == "cancelled"
    assert run.text.startswith(seen[0])  # what arrived before Stop is kept
    # The next cell works.
    after = cell(live_ip, "--model smollm2 --text --max-tokens 16 --max-turns 1", "Say hello.")
    assert after.status in ("completed", "truncated")
    assert after is not run


# ---- a turn limit ---------------------------------------------------------------------------


def test_one_turn_for_a_tool_task_ends_at_the_turn_limit_naming_the_option(
    live_ip: InteractiveShell, notes: list[dict[str, Any]]
) -> None:
    # Constrained, the first turn must call a tool, so a second turn is always needed.
    run = cell(
        live_ip,
        "--model smollm2 --constrain --text --temperature 0 --max-turns 1 --max-tokens 120",
        f"Use the {TOOL} tool to save the note 'buy apples'.",
    )
    assert run.status == "turn_limit"
    assert run.reason and "\n" not in run.reason.strip()
    assert "--max-turns" in run.reason
    settled(run)


# ---- request fields reach the server --------------------------------------------------------


def test_request_fields_reach_llama_server(
    live_ip: InteractiveShell, live_server: local.Server
) -> None:
    run = cell(
        live_ip,
        "--model smollm2 --text --max-turns 1 --max-tokens 24 "
        """--request '{"temperature": 0, "seed": 1, "top_k": 1}'""",
        "Name one colour.",
    )
    assert run.status in ("completed", "truncated")
    # /slots shows the sampling parameters of the last request the server took.
    params = get(live_server, "/slots")[0]["params"]
    assert (params["top_k"], params["seed"], params["temperature"]) == (1, 1, 0)


# ---- the context budget with the server's real token counts ---------------------------------


def contexts(run: Any) -> list[ContextUse]:
    return [event for event in run.events if isinstance(event, ContextUse)]


def test_the_context_gauge_reads_the_servers_window_and_a_small_budget_fits(
    live_ip: InteractiveShell, live_server: local.Server
) -> None:
    window = get(live_server, "/props")["default_generation_settings"]["n_ctx"]
    # Short replies: what is checked is the prompt (the conversation so far), not the answers.
    line = "--model smollm2 --text --temperature 0 --max-turns 1 --max-tokens 16"
    first = cell(live_ip, line, "Tell me about lighthouses.")
    # No budget set: the gauge's budget is the window the server really serves.
    (start,) = contexts(first)
    assert start.budget == window
    for topic in ("cats", "the sea", "storms"):
        cell(live_ip, line, f"Tell me about {topic}.")
    # A budget far below the window, above what these cells need: when a budget makes the
    # run fold older messages it asks the model for a summary, with no token cap (measured:
    # 35 s and 258 s on a busy 2-core machine), too slow for this suite.
    budget = 3000
    live_ip.run_line_magic("config", f"CortexMagics.context_tokens = {budget}")
    run = cell(live_ip, line, "Tell me about ships.")
    # The server took the request (never "context exceeded") within the budget set.
    assert run.status in ("completed", "truncated")
    (event,) = contexts(run)
    assert (event.budget, event.over) == (budget, False)
    assert event.tokens <= budget
    # The estimate sent with the request is near what the server counted for it.
    counted = run.usage["prompt_tokens"]
    assert counted / 2 <= event.tokens <= counted * 2
    print(f"[live] estimate {event.tokens}, server {counted}, budget {budget}")

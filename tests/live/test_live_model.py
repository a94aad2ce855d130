"""SmolLM2-135M through a real llama-server: the real ``openai`` SDK and real ``%%cortex`` cells.

Assert the contract, never the model's wisdom: every run ends in a named status, nothing
hangs, the figures agree with the server's own counts, and what was written is kept.
Output is not deterministic even at temperature 0 (measured), so nothing here pins the text.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from IPython.core.interactiveshell import InteractiveShell

from cortex_jupyter import default_registry, local
from cortex_jupyter.session import CortexRunError, session_for

pytestmark = pytest.mark.live

#: Every way a run can end (runtime/loop/turns.py and runtime/scheduler/dispatch.py).
RUN_ENDINGS = {"completed", "truncated", "interrupted", "failed", "turn_limit", "cancelled"}


def root(server: local.Server) -> str:
    return server.base_url.removesuffix("/v1")


def post(server: local.Server, path: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        root(server) + path, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as reply:
        return json.load(reply)


def metrics(server: local.Server) -> dict[str, str]:
    with urllib.request.urlopen(root(server) + "/metrics", timeout=10) as reply:
        return dict(
            line.split()[:2] for line in reply.read().decode().splitlines() if line[:1] != "#"
        )


def counts(server: local.Server) -> tuple[int, int, int]:
    """The server's own totals since it started (``/metrics``): prompt tokens (evaluated and
    taken from its cache), the part taken from its cache, and generated tokens. Read once
    the server is idle: a reply an earlier test stopped reading (a turn ended at its
    marker) goes on being generated until the server sees the closed connection, and its
    tokens would count in this test's figures."""
    for _ in range(600):
        figures = metrics(server)
        busy = ("llamacpp:requests_processing", "llamacpp:requests_deferred")
        if all(float(figures.get(name, 0)) == 0 for name in busy):
            break
        time.sleep(0.1)
    else:
        pytest.fail("the live server stayed busy with an earlier request for a minute")
    evaluated, cached, predicted = (
        int(float(figures[f"llamacpp:{name}"]))
        for name in ("prompt_tokens_total", "prompt_tokens_cached_total", "tokens_predicted_total")
    )
    return evaluated + cached, cached, predicted


def used(before: tuple[int, int, int], server: local.Server) -> dict[str, int]:
    """What the server counted since ``before``, named as ``Run.usage`` names it (the
    cached part only when there is one, as ``Run.usage`` has it)."""
    prompt, cached, completion = (a - b for a, b in zip(counts(server), before, strict=True))
    usage = {"prompt_tokens": prompt, "completion_tokens": completion}
    return usage | ({"cached_tokens": cached} if cached else {})


def cell(ip: InteractiveShell, line: str, body: str) -> Any:
    """Run a cell; a run that ends unfinished says why in one line (``CortexRunError``)."""
    try:
        ip.run_cell_magic("cortex", line, body)
    except CortexRunError as error:
        assert str(error).strip() and "\n" not in str(error).strip()
    run = ip.user_ns["_cortex"]
    print(f"[live] {run.status}: {run.reason or ''}")
    return run


# ---- the SDK, straight at the server ---------------------------------------------------


def test_the_sdk_streams_an_answer_whose_usage_matches_the_servers_counts(
    live_server: local.Server,
) -> None:
    client = openai.OpenAI(base_url=live_server.base_url, api_key="local", max_retries=0)
    messages: list[Any] = [{"role": "user", "content": "Name one colour."}]
    before = counts(live_server)
    stream = client.chat.completions.create(
        model=live_server.model,
        messages=messages,
        max_tokens=24,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    text, finish, usage = [], None, None
    for chunk in stream:
        for choice in chunk.choices:
            text.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
        usage = chunk.usage or usage
    assert "".join(text).strip()
    assert finish in ("stop", "length")
    assert usage is not None
    prompt = post(live_server, "/apply-template", {"messages": messages})["prompt"]
    tokens = post(live_server, "/tokenize", {"content": prompt, "add_special": True})["tokens"]
    assert usage.prompt_tokens == len(tokens)
    details = usage.prompt_tokens_details
    cached = (details.cached_tokens if details is not None else None) or 0
    assert used(before, live_server) == {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
    } | ({"cached_tokens": cached} if cached else {})


# ---- %%cortex cells --------------------------------------------------------------------


def test_a_plain_question_completes_with_an_answer_and_the_servers_token_count(
    live_ip: InteractiveShell, live_server: local.Server
) -> None:
    before = counts(live_server)
    run = cell(
        live_ip,
        "--model smollm2 --text --temperature 0 --max-turns 1 --max-tokens 64",
        "What is the capital of France? Answer in one short sentence.",
    )
    assert run.status == "completed"
    assert run.model == "smollm2"
    assert run.response.strip()
    # Every token the server counted for this cell is in the record, and no others.
    assert run.usage == used(before, live_server)


def test_native_tool_calls_end_in_a_named_status(
    live_ip: InteractiveShell, live_server: local.Server
) -> None:
    calls: list[str] = []

    @default_registry.tool(name="get_weather")
    def get_weather(city: str) -> str:
        """The weather in a city today."""
        calls.append(city)
        return f"Sunny and 21 °C in {city}."

    try:
        run = cell(
            live_ip,
            # A tiny model can repeat itself until the context is full: cap each reply. A
            # call (`<tool_call>` and its JSON) is about 30 tokens; without one the reply is
            # prose, cut at the cap all the same (measured: 200 tokens of it at 200).
            "--model smollm2 --native-tools --text --temperature 0 --max-turns 3 --max-tokens 64",
            "Use the get_weather tool for Paris, then tell me the weather there.",
        )
    finally:
        default_registry.remove("tool", "get_weather")
    assert run.status in RUN_ENDINGS
    assert run.reason is None or run.reason.strip()
    # Whatever the model called ran and settled: nothing is left running.
    assert all(node.final for node in run.actions.values())
    assert len(calls) == sum(node.status == "done" for node in run.actions.values())


def test_a_token_limit_ends_the_run_truncated_with_its_text_kept(
    live_ip: InteractiveShell,
) -> None:
    run = cell(
        live_ip,
        "--model smollm2 --text --max-tokens 5 --max-turns 1",
        "Write a long story about a lighthouse keeper.",
    )
    assert run.status == "truncated"
    assert run.text.strip()
    assert run.usage["completion_tokens"] == 5


@pytest.fixture
def doomed_server(live_server: local.Server) -> Iterator[local.Server]:
    """A second server, to be killed mid-stream (the session's one goes on)."""
    server = local.start(name="doomed")
    yield server
    local.stop("doomed")


def test_a_server_killed_mid_stream_ends_the_run_interrupted_keeping_the_text(
    ip: InteractiveShell, doomed_server: local.Server
) -> None:
    session_for(ip).endpoints[doomed_server.model] = (doomed_server.base_url, "local")
    written = threading.Event()

    def kill_once_text_arrives() -> None:
        # Killed as soon as part of the reply is on the record (the run's text), so the
        # reply is cut mid-stream whatever the machine's speed, and the text is kept.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            run = ip.user_ns.get("_cortex")
            if run is not None and run.text.strip():
                os.kill(doomed_server.pid, signal.SIGKILL)
                written.set()
                return
            time.sleep(0.01)

    killer = threading.Thread(target=kill_once_text_arrives, daemon=True)
    killer.start()
    run = cell(
        ip,
        # A story runs to the cap: the kill comes at its first words, and the continued
        # run below (same options) writes at most the cap.
        "--model smollm2 --text --max-tokens 32 --max-turns 1",
        "Write a long story about a lighthouse keeper and his cat.",
    )
    killer.join(timeout=10)
    assert written.is_set()
    assert run.status == "interrupted"
    partial = run.text.strip()
    assert partial  # the partial reply is kept
    assert run.reason and "\n" not in run.reason.strip()
    # The server comes back on the same port: %cortex continue goes on from the partial text.
    local.start(doomed_server.port, name="doomed")
    try:
        ip.run_line_magic("cortex", "continue")
    except CortexRunError as error:
        assert "\n" not in str(error).strip()
    again = ip.user_ns["_cortex"]
    assert again.status in RUN_ENDINGS
    # What the model is asked to go on from holds the partial reply.
    sent = [str(message.get("content")) for message in session_for(ip).conversation.history]
    assert any(partial in content for content in sent)

"""Traces (runtime/integrations/tracing/): the spans a run makes, as a trace viewer gets them.

Runs go through the real parser, scheduler and loop (script models, a real MCP server, a
thread-pool executor, the loopback OpenAI-compatible server through the openai SDK), and
the spans are read from the OpenTelemetry SDK's in-memory exporter (``tests/otel_spans``).
"""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
import textwrap
import time
import types
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from cortex_jupyter import default_registry
from cortex_jupyter.models import OpenAIModel, ScriptModel
from cortex_jupyter.runtime import Agent, Registry
from cortex_jupyter.runtime.integrations import executors
from cortex_jupyter.runtime.integrations.mcp import McpManager
from cortex_jupyter.runtime.integrations.tracing.spans import CAPTURE_CONTENT
from tests.helpers import local_cluster
from tests.mcp_servers.harness import DEMO
from tests.models.fake_openai_server import Stream, finish, role, texts, usage
from tests.otel_spans import by_name, one, parent_of, recorded, strings

ROOT = Path(__file__).resolve().parents[2]
#: Process pools here spawn: this process runs threads (a Dask cluster's, anyio's).
SPAWN = multiprocessing.get_context("spawn")


def attrs(span: ReadableSpan) -> dict[str, object]:
    return dict(span.attributes or {})


def registry_with_tools(dask: bool = False) -> Registry:
    registry = Registry(builtins=False)

    if dask:

        @registry.tool(executor="dask")
        def crunch(x: int) -> int:
            """x + 1, on the Dask cluster, traced by the tool itself."""
            with trace.get_tracer("a user's own code").start_as_current_span("inside crunch"):
                time.sleep(0.02)
                return x + 1

    @registry.tool
    def double(x: int) -> int:
        """Twice x."""
        time.sleep(0.02)
        return 2 * x

    @registry.tool
    def explode(why: str) -> None:
        """Fails."""
        raise ValueError(f"it broke: {why}")

    return registry


SCRIPT = """\
<thought>plan</thought>
<action id="a1">{"name": "double", "parameters": {"x": 2}, "output_key": "y"}</action>
<action id="a2">{"name": "double", "parameters": {"x": "$y"}}</action>
<action id="bad">{"name": "explode", "parameters": {"why": "on purpose"}}</action>
<action type="agent" id="h">{"name": "helper", "parameters": {"task": "help"}}</action>
<action id="d">{"name": "crunch", "parameters": {"x": 41}}</action>
--- next turn ---
<response final="true">all done</response>
--- reply to h ---
<action id="i1">{"name": "double", "parameters": {"x": 5}}</action>
--- next turn ---
<response>helped</response>
"""


@pytest.fixture(scope="module")
def dask_cluster() -> Iterator[str]:
    """A real local Dask cluster the session's ``executor="dask"`` tools go to: one worker
    thread in this process (``processes=False``: its tool shares this test's tracer
    provider, and it starts in a second instead of spawning processes)."""
    with local_cluster() as cluster:
        executors.set_dask_address(cluster.scheduler_address)
        try:
            yield cluster.scheduler_address
        finally:
            executors.close_all()
            executors.set_dask_address(None)


@pytest.fixture(scope="module")
def traced_run(dask_cluster: str) -> Iterator[list[ReadableSpan]]:
    """One run with a dependent pair, a failed action, a nested agent and a Dask tool."""
    registry = registry_with_tools(dask=True)
    Agent("helper", registry=registry, tools=["double"])
    agent = Agent("planner", registry=registry, model=ScriptModel(SCRIPT, chunk_size=40))
    with recorded() as spans:
        run = agent.run_sync("go")
    assert run.status == "completed"
    assert run.actions["d"].output == 42
    return spans


def test_a_run_is_one_trace_rooted_in_invoke_agent(traced_run: list[ReadableSpan]) -> None:
    root = one(traced_run, "invoke_agent planner")
    assert parent_of(root, traced_run) is None
    assert attrs(root)["gen_ai.operation.name"] == "invoke_agent"
    assert attrs(root)["gen_ai.agent.name"] == "planner"
    assert isinstance(attrs(root)["gen_ai.conversation.id"], str)
    assert {s.context.trace_id for s in traced_run} == {root.context.trace_id}
    chats = [s for s in traced_run if s.name == "chat script" and parent_of(s, traced_run) is root]
    assert len(chats) == 2  # the planner's two turns
    for chat in chats:
        assert attrs(chat)["gen_ai.operation.name"] == "chat"
        assert attrs(chat)["gen_ai.request.model"] == "script"
        assert attrs(chat)["gen_ai.provider.name"] == "cortex.script"
        assert "gen_ai.response.model" not in attrs(chat)  # no server named one: none made up
        assert [e.name for e in chat.events] == ["gen_ai.first_token"]


def test_each_action_is_an_execute_tool_span_under_its_run(traced_run: list[ReadableSpan]) -> None:
    root = one(traced_run, "invoke_agent planner")
    a1 = one(traced_run, "execute_tool double", gen_ai__tool__call__id="a1")
    a2 = one(traced_run, "execute_tool double", gen_ai__tool__call__id="a2")
    for span in (a1, a2):
        assert parent_of(span, traced_run) is root
        assert attrs(span)["gen_ai.operation.name"] == "execute_tool"
        assert attrs(span)["gen_ai.tool.name"] == "double"
        assert attrs(span)["gen_ai.tool.type"] == "function"
        assert span.status.status_code is StatusCode.OK
    # a2 needs a1's output: it starts only once a1 has ended
    assert a1.end_time is not None and a2.start_time is not None
    assert a2.start_time >= a1.end_time


def test_a_failed_action_is_an_error_with_its_exception(traced_run: list[ReadableSpan]) -> None:
    bad = one(traced_run, "execute_tool explode")
    assert bad.status.status_code is StatusCode.ERROR
    assert "it broke: on purpose" in (bad.status.description or "")
    assert attrs(bad)["error.type"] == "ValueError"
    (exception,) = [e for e in bad.events if e.name == "exception"]
    assert exception.attributes is not None
    assert exception.attributes["exception.type"] == "ValueError"
    assert exception.attributes["exception.message"] == "it broke: on purpose"


def test_a_nested_agent_is_inside_its_action_span(traced_run: list[ReadableSpan]) -> None:
    action = one(traced_run, "execute_tool helper")
    assert attrs(action)["cortex.action.type"] == "agent"
    inner = one(traced_run, "invoke_agent helper")
    assert parent_of(inner, traced_run) is action
    assert attrs(inner)["cortex.run.depth"] == 1
    i1 = one(traced_run, "execute_tool double", gen_ai__tool__call__id="i1")
    assert parent_of(i1, traced_run) is inner
    inner_chats = [
        s for s in by_name(traced_run, "chat script") if parent_of(s, traced_run) is inner
    ]
    assert len(inner_chats) == 2
    assert action.start_time is not None and inner.start_time is not None
    assert action.start_time <= inner.start_time
    assert inner.end_time is not None and action.end_time is not None
    assert inner.end_time <= action.end_time


def test_a_dask_tool_is_an_execute_tool_span_covering_its_call_on_the_cluster(
    traced_run: list[ReadableSpan],
) -> None:
    tool = one(traced_run, "execute_tool crunch")
    assert parent_of(tool, traced_run) is one(traced_run, "invoke_agent planner")
    assert attrs(tool)["cortex.executor"] == "dask"
    assert tool.status.status_code is StatusCode.OK
    # what the tool traced on the Dask worker's thread is inside its action's span
    inside = one(traced_run, "inside crunch")
    assert parent_of(inside, traced_run) is tool
    assert inside.context.trace_id == tool.context.trace_id
    assert tool.start_time is not None and inside.start_time is not None
    assert inside.end_time is not None and tool.end_time is not None
    assert tool.start_time <= inside.start_time and inside.end_time <= tool.end_time
    # a local tool runs where it was called: no executor to name
    assert "cortex.executor" not in attrs(one(traced_run, "execute_tool explode"))


def test_a_tool_span_starts_before_its_chat_span_ends(
    ip: object, request: pytest.FixtureRequest
) -> None:
    """Eager execution, as a trace shows it: the action starts while the model still
    writes the rest of its reply (a --script cell streamed slowly)."""
    ip.run_cell(  # type: ignore[attr-defined]
        "from cortex_jupyter import tool\n"
        "@tool\n"
        "def traced_count(text: str) -> int:\n"
        "    return len(text)\n"
    )
    request.addfinalizer(lambda: default_registry.remove("tool", "traced_count"))
    cell = (
        '<action id="early">{"name": "traced_count", "parameters": {"text": "abc"}}</action>\n'
        "<response>" + "still writing " * 10 + "</response>\n"
    )
    with recorded() as spans:
        ip.run_cell_magic("cortex", "--script --chunk-size 20 --delay 0.01", cell)  # type: ignore[attr-defined]
    assert ip.user_ns["_cortex"].actions["early"].status == "done"  # type: ignore[attr-defined]
    tool = one(spans, "execute_tool traced_count")
    (chat,) = [s for s in spans if s.name.startswith("chat")]
    assert parent_of(tool, spans) is parent_of(chat, spans)
    assert chat.start_time is not None and tool.start_time is not None
    assert chat.end_time is not None and tool.end_time is not None
    assert chat.start_time < tool.start_time < chat.end_time
    assert tool.end_time < chat.end_time  # it was even done before the reply was


def test_retries_and_approval_waits_are_events() -> None:
    registry = Registry(builtins=False)
    calls: list[int] = []

    @registry.tool(approve=True)
    def flaky() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("try again")
        return "ok"

    script = '<action id="f">{"name": "flaky", "retry": 1}</action>'
    agent = Agent(registry=registry, model=ScriptModel(script), approval="allow")
    with recorded() as spans:
        run = agent.run_sync("go")
    assert run.actions["f"].status == "done"
    span = one(spans, "execute_tool flaky")
    names = [e.name for e in span.events]
    assert names == ["cortex.approval.wait", "cortex.approval.granted", "exception", "cortex.retry"]
    retry = span.events[3].attributes or {}
    assert retry["cortex.attempt"] == 1
    assert retry["error.message"] == "ConnectionError: try again"
    assert span.status.status_code is StatusCode.OK
    assert attrs(span)["cortex.attempts"] == 2


# ---- what the tool calls nests inside its span ------------------------------------------------


def pooled() -> str:
    """A tool for an executor: what it sends there is pickled, so it names its tracer."""
    with trace.get_tracer("a user's own code").start_as_current_span("inside pooled"):
        return "ok"


def test_what_a_tool_traces_in_its_worker_thread_or_executor_nests_inside() -> None:
    tracer = trace.get_tracer("a user's own code")
    registry = Registry(builtins=False)
    pool = ThreadPoolExecutor(max_workers=1)

    @registry.tool
    def local() -> str:
        with tracer.start_as_current_span("inside local"):
            return "ok"

    registry.register(pooled, executor=pool)
    script = '<action id="l">{"name": "local"}</action><action id="p">{"name": "pooled"}</action>'
    with recorded() as spans:
        run = Agent(registry=registry, model=ScriptModel(script)).run_sync("go")
    pool.shutdown()
    assert {n.id: (n.status, n.error) for n in run.actions.values()} == {
        "l": ("done", None),
        "p": ("done", None),
    }
    assert parent_of(one(spans, "inside local"), spans) is one(spans, "execute_tool local")
    assert parent_of(one(spans, "inside pooled"), spans) is one(spans, "execute_tool pooled")


def current_trace() -> bool:
    """Whether a trace's span is current (a tool for a spawned process: no provider there)."""
    return trace.get_current_span().get_span_context().is_valid


def test_a_tool_in_a_process_pool_without_a_tracer_provider_runs_untraced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The span's context is sent along; the spawned process has OpenTelemetry but no
    tracer provider, so nothing is attached there, and the tool runs as it would."""
    # An IPython shell made by an earlier test leaves its own __main__ (no __spec__),
    # which spawning a process cannot read: a plain script's __main__ instead.
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))
    registry = Registry(builtins=False)
    script = '<action id="p">{"name": "current_trace"}</action>'
    with ProcessPoolExecutor(1, mp_context=SPAWN) as pool, recorded() as spans:
        registry.register(current_trace, executor=pool)
        run = Agent(registry=registry, model=ScriptModel(script)).run_sync("go")
    node = run.actions["p"]
    assert (node.status, node.output) == ("done", False), node.error
    tool = one(spans, "execute_tool current_trace")
    assert attrs(tool)["cortex.executor"] == "ProcessPoolExecutor"
    assert tool.status.status_code is StatusCode.OK


def test_an_mcp_call_nests_inside_its_tool_span() -> None:
    manager = McpManager(Registry(builtins=False))
    try:
        manager.add("demo", [sys.executable, DEMO, "--tag", "trace"])
        script = '<action id="m">{"name": "demo.add", "parameters": {"a": 2, "b": 3}}</action>'
        agent = Agent(registry=manager.registry, model=ScriptModel(script))
        with recorded() as spans:
            run = agent.run_sync("go")
    finally:
        manager.close_all()
    assert run.actions["m"].output == 5
    tool = one(spans, "execute_tool demo.add")
    assert attrs(tool)["gen_ai.tool.type"] == "extension"
    calls = [s for s in spans if s.name.startswith("MCP send tools/call")]
    assert calls, [s.name for s in spans]
    assert all(parent_of(call, spans) is tool for call in calls)


# ---- a real model server: the chat span's attributes ------------------------------------------


def answered_by(name: str, chunks: list[dict[str, object]]) -> list[dict[str, object]]:
    """The chunks as a server sends them when ``name`` is the model that answered."""
    return [{**c, "model": name} for c in chunks]


def test_a_chat_span_says_what_was_asked_and_answered(server: object) -> None:
    # Asked for gpt-4o-mini, the server says a dated snapshot of it answered (as OpenAI does).
    reply = [role(), *texts("<response>four</response>", 5), finish("stop"), usage(31, 7)]
    server.script(Stream(answered_by("gpt-4o-mini-2024-07-18", reply)))  # type: ignore[attr-defined]
    model = OpenAIModel("gpt-4o-mini")
    agent = Agent(model=model, temperature=0.25, request={"seed": 7, "top_p": 0.5})
    with recorded() as spans:
        agent.run_sync("2+2?")
    (chat,) = by_name(spans, "chat gpt-4o-mini")
    got = attrs(chat)
    assert got["gen_ai.operation.name"] == "chat"
    assert got["gen_ai.provider.name"] == "127.0.0.1"  # a local OpenAI-compatible server
    assert got["gen_ai.request.model"] == "gpt-4o-mini"
    assert got["gen_ai.response.model"] == "gpt-4o-mini-2024-07-18"
    assert got["gen_ai.usage.input_tokens"] == 31
    assert got["gen_ai.usage.output_tokens"] == 7
    assert got["gen_ai.response.finish_reasons"] == ("stop",)
    assert got["gen_ai.request.temperature"] == 0.25
    assert got["gen_ai.request.seed"] == 7
    assert got["gen_ai.request.top_p"] == 0.5
    sent = server.requests[-1].json  # type: ignore[attr-defined]
    assert sent["temperature"] == 0.25 and sent["seed"] == 7  # what the span says was sent


# ---- content: only when asked, and never a secret ---------------------------------------------

CONTENT_SCRIPT = (
    '<action id="c">{"name": "double", "parameters": {"x": 21}}</action>'
    "<response>the answer is 42</response>"
)
CONTENT_KEYS = {
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
}


def content_run() -> list[ReadableSpan]:
    agent = Agent(registry=registry_with_tools(), model=ScriptModel(CONTENT_SCRIPT))
    with recorded() as spans:
        agent.run_sync("what is 21 doubled?")
    return spans


def test_no_content_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CAPTURE_CONTENT, raising=False)
    spans = content_run()
    assert spans
    assert not {k for s in spans for k in attrs(s)} & CONTENT_KEYS
    assert not any("21 doubled" in str(v) for s in spans for v in attrs(s).values())


def test_content_when_the_switch_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CAPTURE_CONTENT, "true")
    spans = content_run()
    chat = next(s for s in spans if s.name.startswith("chat"))
    inputs = json.loads(str(attrs(chat)["gen_ai.input.messages"]))
    assert inputs[0] == {
        "role": "user",
        "parts": [{"type": "text", "content": "what is 21 doubled?"}],
    }
    outputs = json.loads(str(attrs(chat)["gen_ai.output.messages"]))
    assert outputs[0]["role"] == "assistant"
    assert "the answer is 42" in outputs[0]["parts"][0]["content"]
    assert "gen_ai.system_instructions" in attrs(chat)
    tool = one(spans, "execute_tool double")
    assert json.loads(str(attrs(tool)["gen_ai.tool.call.arguments"])) == {"x": 21}
    assert attrs(tool)["gen_ai.tool.call.result"] == "42"


SECRETISH = st.text(
    alphabet=st.characters(min_codepoint=33, max_codepoint=126, exclude_characters='"\\$<>'),
    min_size=12,
    max_size=30,
).map(lambda s: "sk-" + s)


def traced_texts(secret: str, where: str, known: bool) -> str:
    """Every string of every span of a run that meets ``secret`` at ``where`` (with content
    on), the secret known as one (an environment credential) when ``known``."""
    registry = Registry(builtins=False)

    @registry.tool
    def leak(value: str) -> str:
        if where == "error":
            raise RuntimeError(f"failed with {value}")
        return f"here: {value}" if where == "output" else "fine"

    param = secret if where in ("parameter", "output", "error") else "x"
    body = json.dumps({"name": "leak", "parameters": {"value": param}})
    script = f'<action id="s">{body}</action><response>done {param}</response>'
    prompt = f"use {secret}" if where == "prompt" else "go"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CAPTURE_CONTENT, "true")
        if known:
            patch.setenv("CORTEX_TEST_TOKEN", secret)
        with recorded() as spans:
            Agent(registry=registry, model=ScriptModel(script)).run_sync(prompt)
    assert one(spans, "execute_tool leak")
    return "\n".join(t for s in spans for t in strings(s))


@settings(max_examples=15)
@given(secret=SECRETISH, where=st.sampled_from(["prompt", "parameter", "output", "error"]))
def test_no_secret_in_any_span(secret: str, where: str) -> None:
    """With content on, a secret the run meets anywhere (the prompt, a parameter, a tool's
    output or its exception) reaches no attribute, event or status of any span, whole or
    in part: no 8-character piece of it that the same run with a harmless value instead
    does not show anyway (the system prompt has words a generated secret may share)."""
    shown = traced_texts(secret, where, known=True)
    baseline = traced_texts("sk-" + "Q" * (len(secret) - 3), where, known=False)
    assert secret not in shown
    pieces = {secret[i : i + 8] for i in range(len(secret) - 7)}
    leaked = sorted(p for p in pieces if p in shown and p not in baseline)
    assert not leaked
    # the check can fail: not known as a secret, the same value is there as content
    assert secret in traced_texts(secret, where, known=False)


# ---- off costs nothing --------------------------------------------------------------------------


def test_with_no_provider_a_run_has_no_observer_and_imports_no_opentelemetry() -> None:
    """In a fresh process (a provider, once set, stays set): importing cortex_jupyter does
    not import OpenTelemetry, and a run with OpenTelemetry imported but no provider set
    makes no observer, so it pays nothing per event."""
    code = textwrap.dedent(
        """
        import sys
        from cortex_jupyter.models import ScriptModel
        from cortex_jupyter.runtime import Agent
        from cortex_jupyter.runtime.core.record import observer as observe
        from cortex_jupyter.runtime.core.record.run import Run
        print("imported", "opentelemetry" in sys.modules)
        made = []
        real = observe.observers_for
        observe.observers_for = lambda start: made.append(real(start)) or made[-1]
        import cortex_jupyter.runtime.scheduler.dispatch as dispatch
        dispatch.observers_for = observe.observers_for
        import opentelemetry.trace
        from cortex_jupyter import tool
        @tool
        def two() -> int:
            return 2
        run = Agent(model=ScriptModel('<action id="a">{"name": "two"}</action>')).run_sync("x")
        print("status", run.status, run.actions["a"].output)
        print("observers", made)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout.split("\n")
    assert out[:3] == ["imported False", "status completed 2", "observers [()]"]

"""Traces at their edges: what a hostile model, a broken exception, a user's own span
processor or a stopped run does to the spans (``runtime/integrations/tracing``).

Runs go through the real parser, scheduler and loop with script models; the spans are
read from the OpenTelemetry SDK's in-memory exporter (``tests/otel_spans``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from typing import Any

import anyio
import anyio.to_thread
import pytest
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from cortex_jupyter.models import OpenAIModel, ScriptModel
from cortex_jupyter.runtime import Agent, Registry
from cortex_jupyter.runtime.core.record.observer import Carried, carried, carrying, entered
from cortex_jupyter.runtime.core.record.run import Run
from cortex_jupyter.runtime.integrations.tracing.remote import ATTACHED
from cortex_jupyter.runtime.integrations.tracing.spans import CAPTURE_CONTENT
from cortex_jupyter.runtime.loop.conversation import Conversation
from tests.models.fake_openai_server import (
    FakeOpenAIServer,
    Stream,
    finish,
    role,
    texts,
    tool_call,
)
from tests.otel_spans import recorded, sdk_provider, strings

#: A key the environment holds under a credential's name (so a secret to cortex).
KEY = "sk-edge-0123456789abcdefXYZ"
#: A W3C trace context as a trace sends it with a tool to another process.
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORTEX_EDGE_API_KEY", KEY)
    monkeypatch.setenv(CAPTURE_CONTENT, "true")


def every_text(spans: list[ReadableSpan]) -> str:
    return "\n".join(t for s in spans for t in strings(s))


@pytest.mark.usefixtures("secret_env")
def test_a_tool_or_agent_the_model_names_with_a_secret_shows_no_secret_in_a_span_name() -> None:
    """The model writes a key as a tool's or an agent's name (untrusted text): the actions
    fail as unknown, and the key is in no span, its name included (a span's name is the
    first thing a trace viewer shows)."""
    tool = json.dumps({"name": KEY})
    agent = json.dumps({"name": KEY, "parameters": {"task": "x"}})
    script = (
        f'<action id="t">{tool}</action><action type="agent" id="g">{agent}</action>'
        "<response>ok</response>"
    )
    with recorded() as spans:
        run = Agent(registry=Registry(builtins=False), model=ScriptModel(script)).run_sync("go")
    assert {n.id: n.status for n in run.actions.values()} == {"t": "failed", "g": "failed"}
    names = sorted(s.name for s in spans if s.name.startswith("execute_tool"))
    assert names == ["execute_tool [redacted]", "execute_tool [redacted]"]
    assert KEY not in every_text(spans)


# ---- tracing never breaks the run it watches -----------------------------------------------


class Unprintable(Exception):
    """An exception whose message cannot be read (its ``__str__`` raises)."""

    def __str__(self) -> str:
        raise RuntimeError("no message for you")


def test_a_tool_failing_with_an_unprintable_exception_fails_as_that_exception() -> None:
    """The action fails (the run goes on to its answer), its error and its span's
    exception name the exception the tool raised, not the one its ``__str__`` raised."""
    registry = Registry(builtins=False)

    @registry.tool
    def odd() -> None:
        """Fails oddly."""
        raise Unprintable()

    script = '<action id="o">{"name": "odd"}</action><response>went on</response>'
    with recorded() as spans:
        run = Agent(registry=registry, model=ScriptModel(script)).run_sync("go")
    assert run.status == "completed"
    assert run.answer == "went on"
    node = run.actions["o"]
    assert node.status == "failed"
    assert node.error is not None and node.error.startswith("Unprintable")
    (span,) = [s for s in spans if s.name == "execute_tool odd"]
    (exception,) = [e for e in span.events if e.name == "exception"]
    assert (exception.attributes or {})["exception.type"].endswith("Unprintable")


class Broken(SpanProcessor):
    """A user's own span processor with a bug, while ``where`` is set: it raises when a
    span starts or ends (the SDK calls processors without catching what they raise)."""

    where: str | None = None
    added = False

    def on_start(self, span: Span, parent_context: Any = None) -> None:
        if self.where == "start":
            raise RuntimeError("the user's processor broke")

    def on_end(self, span: ReadableSpan) -> None:
        if self.where == "end":
            raise RuntimeError("the user's processor broke")


_BROKEN = Broken()


@pytest.fixture
def broken() -> Iterator[Broken]:
    """The broken processor on the process's provider (added once: the SDK cannot take
    a processor away), quiet again after the test."""
    if not _BROKEN.added:
        sdk_provider().add_span_processor(_BROKEN)
        _BROKEN.added = True
    try:
        yield _BROKEN
    finally:
        _BROKEN.where = None


@pytest.mark.parametrize("where", ["start", "end"])
def test_a_span_processor_that_raises_never_breaks_the_run(
    broken: Broken, where: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Tracing watches a run and never drives it: a processor raising on every span's
    start or end leaves the run as it would have been (its actions done, its answer),
    and the failure is said once in the log."""
    registry = Registry(builtins=False)

    @registry.tool
    def two() -> int:
        """Two."""
        return 2

    script = [
        '<action id="a">{"name": "two", "output_key": "n"}</action>'
        '<action id="b">{"name": "two"}</action>',
        "<response>both ran</response>",
    ]
    broken.where = where
    with caplog.at_level(logging.WARNING):
        run = Agent(registry=registry, model=ScriptModel(script)).run_sync("go")
    broken.where = None
    assert (run.status, run.answer) == ("completed", "both ran")
    assert {n.id: (n.status, n.output) for n in run.actions.values()} == {
        "a": ("done", 2),
        "b": ("done", 2),
    }
    said = [r.getMessage() for r in caplog.records]
    said = [line for line in said if "the user's processor broke" in line]
    assert len(said) == 1, said


# ---- a huge failure stays a readable span ---------------------------------------------------


def test_a_tool_failing_with_a_huge_message_makes_a_bounded_span() -> None:
    """A tool that fails with a 2 MB message (a dumped frame, a server's page): its span
    says the start of the message and the end of the traceback, bounded (an OTLP
    collector refuses a request over a few MB, and with it every span of the batch),
    with the key at the message's end neither whole nor in part."""
    registry = Registry(builtins=False)
    message = "row " * 500_000 + KEY

    @registry.tool
    def dump() -> None:
        """Fails loudly."""
        raise ValueError(message)

    script = '<action id="d">{"name": "dump"}</action><response>ok</response>'
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CORTEX_EDGE_API_KEY", KEY)
        with recorded() as spans:
            run = Agent(registry=registry, model=ScriptModel(script)).run_sync("go")
    assert run.actions["d"].status == "failed"
    (span,) = [s for s in spans if s.name == "execute_tool dump"]
    texts = strings(span)
    assert max(map(len, texts)) <= 20_000, sorted(map(len, texts))[-3:]
    (exception,) = [e for e in span.events if e.name == "exception"]
    attributes = exception.attributes or {}
    assert str(attributes["exception.message"]).startswith("row row ")
    assert str(attributes["exception.stacktrace"]).startswith("Traceback (most recent call last)")
    assert "raise ValueError(message)" in str(attributes["exception.stacktrace"])
    assert (span.status.description or "").startswith("ValueError: row row ")
    assert not any(KEY[:8] in t or KEY[-8:] in t for t in texts)


# ---- the exporter's own credentials -------------------------------------------------------------


@pytest.mark.parametrize(
    "name, value, key",
    [
        ("OTEL_EXPORTER_OTLP_HEADERS", "x-honeycomb-team=hcK3y0123456789abc", "hcK3y0123456789abc"),
        (
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
            "Authorization=Bearer%20eyJhbGciOi.J9abcdef,x-other=1",
            "eyJhbGciOi.J9abcdef",
        ),
    ],
)
def test_the_collector_key_in_the_otlp_headers_is_a_secret(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, key: str
) -> None:
    """The OTLP recipe's collectors take their key in OTEL_EXPORTER_OTLP_HEADERS (a name
    that does not look like a credential's): a tool that reads it back (a debug dump)
    shows it in no span, even with content on, nor in what goes back to the model."""
    monkeypatch.setenv(name, value)
    monkeypatch.setenv(CAPTURE_CONTENT, "true")
    registry = Registry(builtins=False)

    @registry.tool
    def settings() -> str:
        """The exporter's settings."""
        return f"headers: {value}"

    script = ['<action id="s">{"name": "settings"}</action>', "<response>ok</response>"]
    conversation = Conversation()
    agent = Agent(registry=registry, model=ScriptModel(script))
    with recorded() as spans:
        run = agent.run_sync("go", conversation=conversation)
    assert run.actions["s"].status == "done"
    shown = every_text(spans)
    assert "headers: " in shown  # the result is there, as content
    assert key not in shown
    sent = [m for m in conversation.history if "headers: " in str(m)]
    assert sent and not any(key in str(m) for m in sent)


# ---- a resumed run --------------------------------------------------------------------------


@pytest.mark.parametrize("clock", ["this process", "another boot"])
def test_a_resumed_run_is_a_trace_of_its_own_from_when_it_resumed(clock: str) -> None:
    """Stop a run in its second action, resume it: the resume is a trace of its own
    (the same run id), rooted when the resume began, after the first trace ended, even
    when the record's times come from another clock (a store written before a reboot:
    ``time.monotonic`` readings of another boot mean nothing here)."""
    registry = Registry(builtins=False)
    gate, release = threading.Event(), threading.Event()

    @registry.tool
    def step(n: int = 0) -> int:
        """Waits for the test the first time it is asked for 2."""
        if n == 2 and not gate.is_set():
            gate.set()
            release.wait(30)  # stopped here
        return n

    a = json.dumps({"name": "step", "parameters": {"n": 1}, "output_key": "x"})
    b = json.dumps({"name": "step", "parameters": {"n": 2}, "depends_on": ["a"]})
    first = f'<action id="a">{a}</action><action id="b">{b}</action>'
    script = [first, "<response>done</response>"]
    agent = Agent(registry=registry, model=ScriptModel(script))
    run = Run()

    async def stopped() -> None:
        with anyio.move_on_after(60) as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(functools.partial(agent.run, "go", run=run))
                await anyio.to_thread.run_sync(gate.wait)
                tg.cancel_scope.cancel()
        assert not scope.cancelled_caught

    with recorded() as first:
        anyio.run(stopped)
    release.set()
    assert run.status == "cancelled"
    if clock == "another boot":
        run.started -= 5_000_000.0
    resumed_at = time.time_ns()
    with recorded() as second:
        anyio.run(agent.resume, run)
    assert run.status == "completed"
    (before,) = [s for s in first if s.name == "invoke_agent"]
    (after,) = [s for s in second if s.name == "invoke_agent"]
    assert before.attributes and after.attributes
    assert before.attributes["cortex.run.id"] == after.attributes["cortex.run.id"] == run.id
    assert after.context.trace_id != before.context.trace_id
    assert after.attributes["cortex.run.resumed"] is True
    assert "cortex.run.resumed" not in before.attributes
    assert before.end_time is not None and after.start_time is not None
    assert after.start_time >= resumed_at > before.end_time
    assert all(s.start_time is not None and s.start_time >= after.start_time for s in second)


# ---- native tool calls, as content --------------------------------------------------------------


def test_native_tool_calls_are_in_the_recorded_messages(
    server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With content on and native tool calling, the reply that called a tool says so in
    the chat span's output messages and in the next request's input messages (as the
    conventions' ``tool_call`` parts), beside the tool's response."""
    monkeypatch.setenv(CAPTURE_CONTENT, "true")
    server.script(
        Stream([role(), *tool_call(0, "call_1", "double", '{"x": 21}'), finish("tool_calls")]),
        Stream([role(), *texts("<response>42</response>", 5), finish("stop")]),
    )
    registry = Registry(builtins=False)

    @registry.tool
    def double(x: int) -> int:
        """Twice x."""
        return 2 * x

    agent = Agent(registry=registry, model=OpenAIModel("gpt-4o-mini"), native_tools=True)
    with recorded() as spans:
        run = agent.run_sync("double 21")
    assert run.actions["call_1"].output == 42
    first, second = sorted(
        (s for s in spans if s.name == "chat gpt-4o-mini"), key=lambda s: s.start_time or 0
    )
    call = {"type": "tool_call", "id": "call_1", "name": "double", "arguments": {"x": 21}}
    (reply,) = json.loads(str((first.attributes or {})["gen_ai.output.messages"]))
    assert call in reply["parts"]
    asked = json.loads(str((second.attributes or {})["gen_ai.input.messages"]))
    assert [m["role"] for m in asked] == ["user", "assistant", "tool"]
    assert call in asked[1]["parts"]
    assert asked[2]["parts"] == [{"type": "tool_call_response", "id": "call_1", "response": "42"}]


def test_a_retried_action_ends_with_its_last_attempts_error() -> None:
    """Its first attempt raises, its second times out: the span's error is the timeout
    (its status, error.type and last exception event), and each attempt's failure is
    there once, in order."""
    registry = Registry(builtins=False)
    calls: list[int] = []
    release = threading.Event()

    @registry.tool
    def shaky() -> str:
        """Fails, then hangs."""
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("reset by peer")
        release.wait(30)
        return "late"

    body = json.dumps({"name": "shaky", "retry": 1, "timeout": 0.3})
    script = f'<action id="s">{body}</action><response>ok</response>'
    with recorded() as spans:
        run = Agent(registry=registry, model=ScriptModel(script)).run_sync("go")
    release.set()
    node = run.actions["s"]
    assert node.status == "failed" and "timed out" in (node.error or "")
    (span,) = [s for s in spans if s.name == "execute_tool shaky"]
    assert "timed out" in (span.status.description or "")
    assert (span.attributes or {})["error.type"] != "ConnectionError"
    failures = [
        (e.attributes or {}).get("exception.message") or (e.attributes or {}).get("error.message")
        for e in span.events
        if e.name in ("exception", "cortex.retry")
    ]
    assert len(failures) == 3, failures  # the raise, the retry, the timeout
    assert "reset by peer" in str(failures[0]) and "timed out" in str(failures[2])


# ---- the model a server says answered is its text ----------------------------------------------


@pytest.mark.usefixtures("secret_env")
def test_a_response_model_naming_a_secret_is_redacted(server: FakeOpenAIServer) -> None:
    """A hostile server names the answering model with the key the environment holds: the
    chat span says the name, the key redacted."""
    reply = [role(), *texts("<response>ok</response>", 8), finish()]
    server.script(Stream([{**c, "model": f"router/{KEY}"} for c in reply]))
    with recorded() as spans:
        Agent(model=OpenAIModel("gpt-4o-mini")).run_sync("hi")
    (chat,) = [s for s in spans if s.name.startswith("chat")]
    assert (chat.attributes or {})["gen_ai.response.model"] == "router/[redacted]"
    assert KEY not in every_text(spans) and KEY[:12] not in every_text(spans)


# ---- what travels with a tool to another process -------------------------------------------------


def test_a_worker_without_opentelemetry_runs_the_tool_it_was_sent_with_a_trace_context() -> None:
    """A process that cannot import OpenTelemetry (not installed on a Dask worker) gets
    a tool with its action's trace context: the context is left out, the tool runs."""
    code = textwrap.dedent(
        f"""
        import pickle, sys
        sys.modules["opentelemetry"] = None  # an import of it fails, as when not installed
        from cortex_jupyter.runtime.core.record.observer import Carried
        from cortex_jupyter.runtime.integrations.executors.wire import dumps, loads
        from cortex_jupyter.runtime.integrations.executors.worker import run_remote
        carried = (Carried({ATTACHED!r}, {{"traceparent": {TRACEPARENT!r}}}),)
        outcome = pickle.loads(run_remote(dumps((pow, [2, 10], {{}})), "c", None, carried))
        print(outcome.kind, loads(outcome.blob), "opentelemetry.trace" in sys.modules)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ok", "1024", "False"]


def test_a_carrier_that_raises_sends_nothing_and_one_that_works_is_sent() -> None:
    """An observer's bug while a tool leaves for another process never fails the tool."""

    def broken(executor: str) -> Carried:
        raise RuntimeError("a bug in an observer")

    sent = Carried("json:dumps", {"traceparent": TRACEPARENT})
    with carrying(broken), carrying(lambda executor: sent):
        assert carried("dask") == (sent,)
    assert carried("dask") == ()  # outside an action, nothing is carried
    with entered([Carried("no_such_package_here:attached", {}), sent]):
        pass  # neither an unimportable function nor one that is no context manager stops it


@contextlib.contextmanager
def _fails_on_leaving(values: dict[str, str]) -> Iterator[None]:
    yield
    raise RuntimeError("a bug in an observer's context, on leaving")


class _Swallows:
    def __init__(self, values: dict[str, str]) -> None:
        pass

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return True  # a context that swallows whatever was raised inside it


def test_a_carried_context_that_fails_or_swallows_on_leaving_never_changes_the_tools_outcome() -> (
    None
):
    """``entered`` left out a context that failed to enter, but one failing on leaving
    failed the tool that had just succeeded, and one swallowing exceptions turned a
    tool's failure into a success with no result."""
    here = __name__
    leaving = [Carried(f"{here}:_fails_on_leaving", {}), Carried(f"{here}:_Swallows", {})]
    with entered(leaving):
        result = 2**10
    assert result == 1024
    with pytest.raises(ZeroDivisionError), entered(leaving):
        1 / 0  # noqa: B018

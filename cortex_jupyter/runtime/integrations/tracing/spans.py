"""One run's trace: its events reduced to OpenTelemetry GenAI spans.

The only module (with ``tracing.setup``) that imports ``opentelemetry``. A ``RunTrace``
is a run's observer (``runtime.core.record.observer``): it never drives the run, it reduces the
run's events, each stamped with a ``time.monotonic()`` reading, into spans started and
ended at those times (converted once per process to the epoch nanoseconds OpenTelemetry
wants, so spans of nested runs line up):

- ``invoke_agent {agent}``: the run, from its start to its ``end`` event; a nested agent's
  run is inside its action's span because that span is current while the action runs;
- ``chat {model}``: one model request, from its ``turn`` event to the reply's last chunk;
- ``execute_tool {tool}``: one action, from the moment it starts (so inside its turn's
  chat span when the model was still writing) to its final status; an action's span is
  current while its tool runs (``acting``), so what the tool calls (an MCP server, a
  thread-pool executor, a nested agent) nests inside it; a tool sent to another process
  (a Dask worker, a process pool) takes the span's context along (``tracing.remote``),
  and the span says where it ran (``cortex.executor``).

Names and attributes follow the GenAI semantic conventions. Content (messages, arguments,
results) is recorded only when ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is
true; every text that reaches a span, content or not, is redacted first.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode, Tracer

from cortex_jupyter._version import __version__
from cortex_jupyter.runtime.core.errors import type_label
from cortex_jupyter.runtime.core.events import (
    ActionStatus,
    AnyEvent,
    ChatEntry,
    Chunk,
    End,
    Turn,
    TurnEnd,
)
from cortex_jupyter.runtime.core.record.observer import Carried, RunStart, carrying
from cortex_jupyter.runtime.core.trust.bounded import message
from cortex_jupyter.runtime.core.trust.secrets import head, redact, redact_value, shorten, tail
from cortex_jupyter.runtime.integrations.tracing.remote import ATTACHED, configured, inject

__all__ = ["CAPTURE_CONTENT", "RunTrace", "capture_content", "configured", "observer"]

_log = logging.getLogger("cortex_jupyter.tracing")

#: The conventions' switch for recording prompts, replies, arguments and results.
CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"

# One mapping from monotonic readings to wall-clock nanoseconds for the whole process.
_WALL_NS = time.time_ns()
_MONO = time.monotonic()

#: Hosts of the providers the conventions name (``gen_ai.provider.name``).
_PROVIDERS = {
    "api.openai.com": "openai",
    "api.deepseek.com": "deepseek",
    "api.groq.com": "groq",
    "api.mistral.ai": "mistral_ai",
    "api.x.ai": "x_ai",
    "api.anthropic.com": "anthropic",
    "api.perplexity.ai": "perplexity",
    "generativelanguage.googleapis.com": "gcp.gemini",
    "openrouter.ai": "openrouter",
}
#: Request fields sent with each request, and the attributes the conventions give them.
_SAMPLING = {
    "temperature": "gen_ai.request.temperature",
    "max_tokens": "gen_ai.request.max_tokens",
    "max_completion_tokens": "gen_ai.request.max_tokens",
    "top_p": "gen_ai.request.top_p",
    "top_k": "gen_ai.request.top_k",
    "seed": "gen_ai.request.seed",
    "frequency_penalty": "gen_ai.request.frequency_penalty",
    "presence_penalty": "gen_ai.request.presence_penalty",
    "stop": "gen_ai.request.stop_sequences",
}
#: The longest failure text a span holds (a status, an exception's message, an error);
#: a traceback keeps a quarter of ``4 * TEXT_LIMIT`` from its start and the rest from
#: its end. A huge one (a dumped frame) would make a collector refuse the whole batch.
TEXT_LIMIT = 4096
#: Final statuses of an action and the span status they end with.
_FINAL = {"done", "failed", "skipped", "cancelled"}


def epoch_ns(monotonic: float) -> int:
    """A ``time.monotonic()`` reading as nanoseconds since the epoch."""
    return _WALL_NS + int((monotonic - _MONO) * 1e9)


def capture_content() -> bool:
    """Whether the conventions' switch asks for content (read at each run's start)."""
    return os.environ.get(CAPTURE_CONTENT, "").strip().lower() == "true"


def observer(start: RunStart) -> RunTrace | None:
    """The run's trace, or None when no tracer provider is configured (tracing off)."""
    provider = trace.get_tracer_provider()
    if not configured(provider):
        return None
    try:
        return RunTrace(provider.get_tracer("cortex_jupyter", __version__), start)
    except Exception as exc:  # a provider or processor that raises: the run goes on untraced
        _gave_up(start.run.id, exc)
        return None


def _gave_up(run_id: str, exc: Exception) -> None:
    _log.warning(
        "cortex: run %s is not traced from here on: the tracer provider raised %s",
        run_id, _short(f"{type(exc).__name__}: {message(exc)}"),
    )  # fmt: skip


@contextmanager
def grouping(name: str, attributes: Mapping[str, Any]) -> Iterator[None]:
    """``tracing.group_span``: a span named ``name`` current in the block (none when no
    provider is configured). A failure of the SDK leaves the block untraced, never broken."""
    provider = trace.get_tracer_provider()
    if not configured(provider):
        yield
        return
    try:
        tracer = provider.get_tracer("cortex_jupyter", __version__)
        span = tracer.start_span(_span_name(name, None), attributes=_attributes(attributes))
        token = otel_context.attach(trace.set_span_in_context(span))
    except Exception as exc:
        _log.warning("cortex: a span %s was not made: %s", name, _short(message(exc)))
        yield
        return
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            otel_context.detach(token)
            span.end()


def provider_name(model: object) -> str:
    """``gen_ai.provider.name`` for ``model``: the well-known name of its endpoint's host,
    else the host itself; ``cortex.script`` for a model with no endpoint (a script)."""
    endpoint = getattr(model, "endpoint", None)
    if not isinstance(endpoint, str):
        return "cortex.script" if hasattr(model, "for_action") else type(model).__name__
    host = urlsplit(endpoint).hostname or endpoint
    return _PROVIDERS.get(host, host)


def _clean(value: Any) -> Any:
    """An attribute value as a span may hold it, redacted (never a secret, whatever the
    content switch says)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, bool | int | float):
        return value
    if isinstance(value, list | tuple) and all(
        isinstance(v, str | bool | int | float) for v in value
    ):
        return [_clean(v) for v in value]
    # Structured values (messages) as the conventions record them on a span: JSON text.
    return redact(json.dumps(redact_value(value), default=str, ensure_ascii=False))


def _attributes(values: Mapping[str, Any]) -> dict[str, Any]:
    return {key: _clean(value) for key, value in values.items() if value is not None}


def _short(text: str | None) -> str | None:
    """A failure text as a span holds it: redacted, then cut (``TEXT_LIMIT``)."""
    return shorten(text, TEXT_LIMIT) if text else text


def _stack(text: str) -> str:
    """A traceback as a span holds it: its start and its end, redacted, then cut."""
    if len(text) <= 4 * TEXT_LIMIT:
        return redact(text)
    return f"{head(text, TEXT_LIMIT)}\n…\n{tail(text, 3 * TEXT_LIMIT)}"


def _span_name(operation: str, name: object) -> str:
    """A span's name as the conventions write it (``{operation} {name}``), redacted: a
    tool's name is the model's text, and a viewer shows the name first."""
    return shorten(f"{operation} {name}", TEXT_LIMIT) if name else operation


class _Chat:
    """The span of one model request, and what the reply's chunks said."""

    def __init__(self, span: Span, start: float) -> None:
        self.span = span
        self.start = start
        self.last = start
        self.first: float | None = None
        self.finish: str | None = None


class RunTrace:
    """One run's spans (see the module docstring); made at the run's start."""

    def __init__(self, tracer: Tracer, start: RunStart) -> None:
        self.tracer = tracer
        self.content = capture_content()
        self.model = getattr(start.model, "name", None) or getattr(start.model, "model", None)
        self.provider = provider_name(start.model)
        self.request = dict(start.request)
        name = start.agent
        self.root = tracer.start_span(
            _span_name("invoke_agent", name),
            context=otel_context.get_current(),
            kind=trace.SpanKind.INTERNAL,
            start_time=epoch_ns(_started(start)),
            attributes=_attributes(
                {
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.name": name,
                    "gen_ai.conversation.id": start.conversation,
                    "gen_ai.provider.name": self.provider,
                    "gen_ai.request.model": self.model,
                    "cortex.run.id": start.run.id,
                    "cortex.run.depth": start.depth,
                    "cortex.run.resumed": True if start.run.events else None,
                }
            ),
        )
        self._root_context = trace.set_span_in_context(self.root)
        self._chat: _Chat | None = None
        self._tools: dict[str, Span] = {}
        self._nodes: dict[str, ActionStatus] = {}
        self._awaited: set[str] = set()
        self._failures: dict[str, str] = {}
        self._messages: list[dict[str, Any]] = []
        self._system: str | None = None
        self.run_id = start.run.id
        self._off = False

    # ---- the observer's two doors ----------------------------------------------------

    def on_event(self, event: AnyEvent) -> None:
        """Reduce one of the run's events (a nested run's are its own trace's). Tracing
        never breaks the run it watches: when the SDK raises (a user's span processor
        with a bug), the failure is logged once and the run is not traced further."""
        self._safely(self._reduce, event)

    def _safely(self, step: Callable[..., object], *args: object) -> None:
        if self._off:
            return
        try:
            step(*args)
        except Exception as exc:
            self._off = True
            _gave_up(self.run_id, exc)

    def _reduce(self, event: AnyEvent) -> None:
        if isinstance(event, ActionStatus):
            self._action(event)
        elif isinstance(event, Chunk):
            self._chunk(event)
        elif isinstance(event, Turn):
            self._turn(event)
        elif isinstance(event, TurnEnd):
            self._turn_end(event)
        elif isinstance(event, ChatEntry):
            self._entry(event)
        elif isinstance(event, End):
            self._end(event)

    @contextmanager
    def acting(self, action_id: str) -> Iterator[None]:
        """The action's span current while its tool runs (worker threads, executors and
        MCP calls inherit it); an exception the tool raises is recorded on it, redacted."""
        span = self._tools.get(action_id)
        if span is None:
            yield
            return
        with (
            trace.use_span(
                span, end_on_exit=False, record_exception=False, set_status_on_exception=False
            ),
            carrying(functools.partial(self._carry, span)),
        ):
            try:
                yield
            except Exception as exc:
                self._failures[action_id] = type_label(exc)
                self._safely(span.add_event, "exception", _exception_attributes(exc))
                raise

    def _carry(self, span: Span, executor: str) -> Carried:
        """What a tool sent to ``executor`` takes along: the span's context, so the tool's
        own spans there are its children (``tracing.remote``); the span says where."""
        span.set_attribute("cortex.executor", shorten(executor, 256))
        return Carried(ATTACHED, inject(span))

    # ---- turns -------------------------------------------------------------------------

    def _turn(self, event: Turn) -> None:
        self._end_chat(None)
        model = event.model or self.model
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": self.provider,
            "gen_ai.request.model": model,
            "cortex.turn": event.number,
        }
        for field, key in _SAMPLING.items():
            value = self.request.get(field)
            if field == "stop" and isinstance(value, str):
                value = [value]
            attributes.setdefault(key, value)
        if self.content:
            attributes["gen_ai.input.messages"] = list(self._messages)
            if self._system is not None:
                attributes["gen_ai.system_instructions"] = [
                    {"type": "text", "content": self._system}
                ]
        span = self.tracer.start_span(
            _span_name("chat", model),
            context=self._root_context,
            kind=trace.SpanKind.CLIENT,
            start_time=epoch_ns(event.time),
            attributes=_attributes(attributes),
        )
        self._chat = _Chat(span, event.time)

    def _chunk(self, event: Chunk) -> None:
        chat = self._chat
        if chat is None:
            return
        chat.last = max(chat.last, event.time)
        if chat.first is None and event.type in ("text", "reasoning", "refusal", "tool_call_start"):
            # A coalesced text chunk is stamped with its last piece: the first piece came
            # no later, so this is an upper bound on the time to the first token.
            chat.first = event.time
            chat.span.add_event("gen_ai.first_token", timestamp=epoch_ns(event.time))
            chat.span.set_attribute(
                "gen_ai.response.time_to_first_chunk", max(0.0, event.time - chat.start)
            )
        if event.type == "usage":
            chat.span.set_attribute("gen_ai.usage.input_tokens", event.prompt_tokens or 0)
            chat.span.set_attribute("gen_ai.usage.output_tokens", event.completion_tokens or 0)
        elif event.type == "finish":
            if event.reason:
                chat.finish = event.reason
                chat.span.set_attribute("gen_ai.response.finish_reasons", [redact(event.reason)])
            if event.model:  # the server's text: redacted, and only when it said one
                chat.span.set_attribute("gen_ai.response.model", shorten(event.model, 256))

    def _entry(self, event: ChatEntry) -> None:
        if event.role == "system":
            self._system = event.content
            return
        message = {"role": event.role, "parts": _parts(event)}
        self._messages.append(message)
        chat = self._chat
        if chat is not None and event.role == "assistant" and self.content:
            reply = {**message, "finish_reason": chat.finish or "stop"}
            chat.span.set_attribute("gen_ai.output.messages", _clean([reply]))

    def _turn_end(self, event: TurnEnd) -> None:
        chat = self._chat
        if chat is not None and event.outcome in ("interrupted", "failed"):
            chat.span.set_status(Status(StatusCode.ERROR, _short(event.reason)))
            chat.span.set_attribute("error.type", event.outcome)
        self._end_chat(None)

    def _end_chat(self, at: float | None) -> None:
        chat, self._chat = self._chat, None
        if chat is not None:
            chat.span.end(end_time=epoch_ns(at if at is not None else chat.last))

    # ---- actions -----------------------------------------------------------------------

    def _action(self, event: ActionStatus) -> None:
        if event.name is not None:
            self._nodes.setdefault(event.id, event)
        span = self._tools.get(event.id)
        if event.status == "pending":
            return
        if span is None:
            if event.status == "skipped" and event.id not in self._awaited:
                return  # never started (a dependency failed): no span, its status says why
            span = self._tools[event.id] = self._start_tool(event)
        if event.status == "awaiting":
            self._awaited.add(event.id)
            span.add_event("cortex.approval.wait", timestamp=epoch_ns(event.time))
        elif event.status == "running":
            self._running(span, event)
        elif event.status in _FINAL:
            self._settle(span, event)

    def _start_tool(self, event: ActionStatus) -> Span:
        first = self._nodes.get(event.id, event)
        name = shorten(first.name or event.id, TEXT_LIMIT)  # the model's text: any length
        parent = self._tools.get(first.parent) if first.parent else None
        mcp = "." in name and first.type in (None, "tool")
        return self.tracer.start_span(
            _span_name("execute_tool", name),
            context=trace.set_span_in_context(parent) if parent else self._root_context,
            kind=trace.SpanKind.INTERNAL,
            start_time=epoch_ns(event.time),
            attributes=_attributes(
                {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": name,
                    "gen_ai.tool.call.id": event.id,
                    "gen_ai.tool.type": "extension" if mcp else "function",
                    "cortex.action.type": first.type,
                }
            ),
        )

    def _running(self, span: Span, event: ActionStatus) -> None:
        at = epoch_ns(event.time)
        if event.id in self._awaited:
            self._awaited.discard(event.id)
            span.add_event("cortex.approval.granted", timestamp=at)
        if event.retry_in is not None:
            self._failures.pop(event.id, None)  # the next attempt's failure is its own
            span.add_event(
                "cortex.retry",
                _attributes(
                    {
                        "cortex.attempt": event.attempt,
                        "cortex.retry_in": event.retry_in,
                        "error.message": _short(event.error),
                    }
                ),
                timestamp=at,
            )
        if self.content and event.parameters is not None:
            span.set_attribute("gen_ai.tool.call.arguments", redact(event.parameters))
        span.set_attribute("cortex.attempts", max(event.attempt, 1))

    def _settle(self, span: Span, event: ActionStatus) -> None:
        at = epoch_ns(event.time)
        if event.status == "done":
            if self.content and event.output is not None:
                span.set_attribute("gen_ai.tool.call.result", redact(event.output))
            span.set_status(Status(StatusCode.OK))
        elif event.status == "skipped":  # denied when asked
            denied = _attributes({"reason": _short(event.error)})
            span.add_event("cortex.approval.denied", denied, at)
        else:
            why = _short(event.error) or event.status
            span.set_status(Status(StatusCode.ERROR, why))
            span.set_attribute("error.type", self._failures.get(event.id, event.status))
            if event.id not in self._failures:
                span.add_event("exception", {"exception.message": why}, timestamp=at)
        span.end(end_time=at)
        self._awaited.discard(event.id)

    # ---- the end -----------------------------------------------------------------------

    def _end(self, event: End) -> None:
        # A fire_and_forget action may still run: its span ends with its own status.
        chat = self._chat
        if chat is not None and event.status != "completed":  # the stream broke off
            chat.span.set_status(Status(StatusCode.ERROR, event.status))
            chat.span.set_attribute("error.type", event.status)
        self._end_chat(None)
        if event.status != "completed":
            self.root.set_status(Status(StatusCode.ERROR, redact(event.status)))
            self.root.set_attribute("error.type", event.status)
        self.root.set_attribute("cortex.run.status", event.status)
        self.root.end(end_time=epoch_ns(event.time))


def _started(start: RunStart) -> float:
    """When the run's trace starts: the run's start, or now for a run resumed (its record
    holds events already: its first part was a trace of its own, and its times may be
    another boot's ``time.monotonic`` readings, read back from the store)."""
    return time.monotonic() if start.run.events else start.run.started


def _parts(entry: ChatEntry) -> list[dict[str, Any]]:
    """A message's parts as the conventions write them: its text, the tool calls it made
    (native tool calling), or the response to one."""
    if entry.tool_call_id is not None:
        return [{"type": "tool_call_response", "id": entry.tool_call_id, "response": entry.content}]
    parts: list[dict[str, Any]] = []
    if entry.content or not entry.tool_calls:
        parts.append({"type": "text", "content": entry.content})
    for call in entry.tool_calls or ():
        function = call["function"]
        arguments: Any = function["arguments"]
        with contextlib.suppress(TypeError, ValueError):
            arguments = json.loads(arguments)
        parts.append(
            {"type": "tool_call", "id": call["id"], "name": function["name"],
             "arguments": arguments}
        )  # fmt: skip
    return parts


def _exception_attributes(exc: BaseException) -> dict[str, Any]:
    """The conventions' exception event, every text redacted (a message or a traceback
    may quote a key)."""
    stack = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return {
        "exception.type": type_label(exc),
        "exception.message": _short(message(exc)),
        "exception.stacktrace": _stack(stack),
    }

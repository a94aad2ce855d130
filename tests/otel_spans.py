"""The spans a test's runs make, through the OpenTelemetry SDK's in-memory exporter.

OpenTelemetry's global tracer provider can be set once per process, and every test runs
in one pytest process: the first test that asks sets an SDK provider (or reuses the SDK
provider something else set) and adds one processor to it that keeps spans only while a
test listens. A run takes its tracer from the global provider at its start, so tests that
never ask are traced too once a provider is set, and keep nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, Span, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


class _Listening(SimpleSpanProcessor):
    """Exports ended spans to the in-memory exporter while a test listens."""

    def __init__(self, exporter: InMemorySpanExporter) -> None:
        super().__init__(exporter)
        self.on = False

    def on_end(self, span: ReadableSpan) -> None:
        if self.on:
            super().on_end(span)

    def on_start(self, span: Span, parent_context: Any = None) -> None:
        return None


_EXPORTER = InMemorySpanExporter()
_PROCESSOR = _Listening(_EXPORTER)
_ATTACHED = False


def sdk_provider() -> TracerProvider:
    """The process's SDK tracer provider (set here the first time), with our processor."""
    global _ATTACHED
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        trace.set_tracer_provider(TracerProvider())
        provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider), "another provider was set: not an SDK one"
    if not _ATTACHED:
        provider.add_span_processor(_PROCESSOR)
        _ATTACHED = True
    return provider


@contextmanager
def recorded() -> Iterator[list[ReadableSpan]]:
    """The spans that end inside the block (the list fills when the block ends)."""
    sdk_provider()
    _EXPORTER.clear()
    _PROCESSOR.on = True
    spans: list[ReadableSpan] = []
    try:
        yield spans
    finally:
        _PROCESSOR.on = False
        spans.extend(_EXPORTER.get_finished_spans())
        _EXPORTER.clear()


def by_name(spans: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def one(spans: list[ReadableSpan], name: str, **attributes: Any) -> ReadableSpan:
    """The one span named ``name`` whose attributes include ``attributes``."""
    found = [
        s
        for s in by_name(spans, name)
        if all((s.attributes or {}).get(k.replace("__", ".")) == v for k, v in attributes.items())
    ]
    assert len(found) == 1, f"{len(found)} spans {name!r} {attributes}: {[s.name for s in spans]}"
    return found[0]


def parent_of(span: ReadableSpan, spans: list[ReadableSpan]) -> ReadableSpan | None:
    """The span's parent among ``spans`` (None: a root, or a parent not recorded)."""
    if span.parent is None:
        return None
    for other in spans:
        if other.context is not None and other.context.span_id == span.parent.span_id:
            return other
    return None


def strings(span: ReadableSpan) -> list[str]:
    """Every string in the span: its name, its status, its attributes' and events'."""
    out = [span.name, span.status.description or ""]
    values: list[Any] = list((span.attributes or {}).values())
    for event in span.events:
        out.append(event.name)
        values.extend((event.attributes or {}).values())
    for value in values:
        if isinstance(value, str):
            out.append(value)
        elif isinstance(value, tuple | list):
            out.extend(v for v in value if isinstance(v, str))
    return out

"""The other process's side of a trace: a tool sent to a Dask worker or a process pool
runs inside its action's span there.

While an action's tool runs, its trace carries the span's context as W3C trace context
text (``traceparent``, through the globally configured propagator) to the executors,
which send it with the tool (``runtime.core.record.observer.Carried``) and enter ``attached``
around the call on the worker. There the tool's own spans are children of the action's
``execute_tool`` span, provided the worker can import OpenTelemetry and has a tracer
provider configured (else nothing is attached, and the tool runs as it would untraced).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from opentelemetry import context, propagate, trace

__all__ = ["ATTACHED", "attached", "configured", "inject"]

#: How a ``Carried`` names ``attached`` (imported by the process that runs the tool).
ATTACHED = f"{__name__}:attached"


def configured(provider: object) -> bool:
    """Whether ``provider`` sends spans anywhere: not the API's no-op or its proxy (the
    stand-in the API returns while no provider is set)."""
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def inject(span: trace.Span) -> dict[str, str]:
    """``span``'s context as the text that travels (``traceparent``, ``tracestate``)."""
    values: dict[str, str] = {}
    propagate.inject(values, context=trace.set_span_in_context(span))
    return values


@contextmanager
def attached(values: Mapping[str, str]) -> Iterator[None]:
    """The trace context in ``values`` current within the block, when this process has a
    tracer provider (else the block runs as it is)."""
    if not configured(trace.get_tracer_provider()):
        yield
        return
    token = context.attach(propagate.extract(dict(values)))
    try:
        yield
    finally:
        context.detach(token)

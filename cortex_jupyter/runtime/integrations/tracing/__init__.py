"""Every run as an OpenTelemetry trace (GenAI semantic conventions), sent wherever the
process's tracer provider sends spans: Phoenix, Logfire, any OTLP collector.

Tracing is an observer of run events, like the display: it reduces a run's events into
spans and never drives the run. The core defines the seam (``runtime.core.record.observer``):
this package registers a factory the scheduler asks at each run's start, and the hook the
scheduler enters around an action's tool keeps that action's span current, so what the
tool calls (MCP servers, executors, nested agents) nests inside it.

- ``spans``: one run's trace (``RunTrace``), from its events; with ``setup`` and
  ``remote`` the only modules that import ``opentelemetry``;
- ``remote``: the side of a trace in the process that runs a tool sent elsewhere (a Dask
  worker): the action's span context attached around the tool;
- ``setup``: where spans go (``describe``, for ``%cortex trace``) and a local Phoenix
  started and registered in one call (``start_phoenix``).

Off costs nothing: no tracer provider configured, no observer is made. The factory looks
for a provider only once ``opentelemetry.trace`` has been imported by someone (a provider
cannot be configured without importing it), so importing cortex_jupyter never imports
OpenTelemetry, and a run with tracing off pays one dictionary lookup at its start. The
tracer is taken from the global provider at each run's start, never at import, so a
provider set after ``%load_ext`` is used from the next cell on.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from cortex_jupyter.runtime.core.record.observer import RunObserver, RunStart, add_observer

__all__ = ["group_span", "run_observer"]


def run_observer(start: RunStart) -> RunObserver | None:
    """The run's trace, or None when nothing would receive its spans."""
    if "opentelemetry.trace" not in sys.modules:
        return None
    from cortex_jupyter.runtime.integrations.tracing.spans import observer

    return observer(start)


@contextmanager
def group_span(name: str, attributes: Mapping[str, Any]) -> Iterator[None]:
    """One span around several runs started inside the block (a ``%%cortex --compare``
    cell's columns): current in the block, so each run's ``invoke_agent`` span, made at
    its start in a task the block starts, is its child. Nothing when tracing is off."""
    if "opentelemetry.trace" not in sys.modules:
        yield
        return
    from cortex_jupyter.runtime.integrations.tracing.spans import grouping

    with grouping(name, attributes):
        yield


add_observer(run_observer)

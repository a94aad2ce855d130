"""Observers of a run: what the store and tracing plug into, and the one hook the
scheduler gives them.

An observer reduces a run's events, as the display does, and never drives the run. The
scheduler hands each of its run's events to every observer of that run as it happens
(after the run's record has it). A run has observers of two kinds, through the one
interface ``RunObserver``:

- those its host passes in (``RunHooks.observers``): a store keeping the run is one
  (``RunStore.record`` returns a ``Recording``, an observer the host tells when the run
  has ended);
- those registered for every run: an observer package registers a factory with
  ``add_observer`` (as integrations pass themselves into the registry), and each
  scheduler asks the factories at its run's start (``observers_for``). A factory with
  nothing to do (tracing with no tracer provider configured) returns ``None``, so a run
  with no observer pays one call per factory at its start and nothing after.

Besides the events, an observer may need something to be current while an action's tool
runs (a trace's span, so the calls the tool makes nest inside it): ``acting`` is the
context manager the scheduler enters around each attempt of an action, in the task that
calls the tool, before the call reaches a worker thread, an executor or an MCP server.

An action whose tool runs in another process (a Dask worker, a process pool's) cannot
take what is current with it. While acting, an observer may be ``carrying`` a function
the executors ask, with the executor's name, for a ``Carried``: opaque text (a trace's
W3C ``traceparent``) and the import path of a function that, on the process that runs
the tool, makes a context manager of it (``entered``). The executors send it along and
never know what it holds; a process that cannot import the function runs the tool
without it.

The core imports no observer: the store sits above the loop, beside the session, and
tracing is an integration; the loop knows them only by these shapes.
"""

from __future__ import annotations

import functools
import importlib
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol

from cortex_jupyter.runtime.core.events import AnyEvent
from cortex_jupyter.runtime.core.record.run import Run

__all__ = [
    "Carried",
    "Recording",
    "RunObserver",
    "RunStart",
    "RunStore",
    "acting",
    "add_observer",
    "carried",
    "carrying",
    "entered",
    "notify",
    "observers_for",
]


log = logging.getLogger("cortex_jupyter.observers")


@dataclass(frozen=True)
class RunStart:
    """What an observer is told when a run starts: its record, the agent's name (None:
    the session's default agent), the model object, the extra fields every request
    sends, the conversation it continues, and how deep it is nested (0: a cell's run)."""

    run: Run
    agent: str | None = None
    model: Any = field(default=None, repr=False)
    request: Mapping[str, Any] = field(default_factory=dict)
    conversation: str | None = None
    depth: int = 0


class RunObserver(Protocol):
    """One run's observer: ``on_event`` gets each of the run's own events as it is
    emitted (a nested agent's run has observers of its own); ``acting(id)`` is entered
    around each attempt of the action ``id``, in the task that calls its tool."""

    def on_event(self, event: AnyEvent) -> None: ...

    def acting(self, action_id: str) -> AbstractContextManager[object]: ...


ObserverFactory = Callable[[RunStart], "RunObserver | None"]

_factories: list[ObserverFactory] = []


def add_observer(factory: ObserverFactory) -> None:
    """Register ``factory``: called at every run's start, it returns that run's observer
    or ``None``. Registering the same factory twice keeps one."""
    if factory not in _factories:
        _factories.append(factory)


def observers_for(start: RunStart) -> tuple[RunObserver, ...]:
    """The observers of the run ``start`` describes (empty: nobody is watching). A
    factory that raises is logged and gives none: watching never breaks a run."""
    found = []
    for factory in _factories:
        try:
            observer = factory(start)
        except Exception:
            log.warning("a run observer could not start; the run goes on without it", exc_info=True)
            continue
        if observer is not None:
            found.append(observer)
    return tuple(found)


def notify(observers: tuple[RunObserver, ...], event: AnyEvent) -> tuple[RunObserver, ...]:
    """Give ``event`` to each of ``observers``; returns those still watching. One that
    raises is logged once and dropped for the rest of the run (its record or trace of
    the run stops there), and the run goes on."""
    failed = []
    for observer in observers:
        try:
            observer.on_event(event)
        except Exception:
            log.warning(
                "a run observer (%s) failed and stops watching this run",
                type(observer).__name__,
                exc_info=True,
            )
            failed.append(observer)
    return tuple(o for o in observers if o not in failed) if failed else observers


@contextmanager
def acting(observers: tuple[RunObserver, ...], action_id: str) -> Iterator[None]:
    """Every observer's ``acting(action_id)`` entered, innermost last."""
    with ExitStack() as stack:
        for observer in observers:
            stack.enter_context(observer.acting(action_id))
        yield


@dataclass(frozen=True)
class Carried:
    """What an observer sends with a tool to the process that runs it: ``enter`` names a
    function (``"package.module:name"``) that the process imports and calls with
    ``values`` (opaque text) for a context manager to enter around the tool."""

    enter: str
    values: dict[str, str]


#: Asked, with the executor's name, for what to send with the tool (None: nothing).
Carrier = Callable[[str], "Carried | None"]

_carriers: ContextVar[tuple[Carrier, ...]] = ContextVar("cortex_carriers", default=())


@contextmanager
def carrying(carrier: Carrier) -> Iterator[None]:
    """Within the block (an observer's ``acting``), a tool sent to another process asks
    ``carrier`` what to send with it (``carried``)."""
    token = _carriers.set((*_carriers.get(), carrier))
    try:
        yield
    finally:
        _carriers.reset(token)


def carried(executor: str) -> tuple[Carried, ...]:
    """What the observers of the acting action send with its tool to ``executor`` (empty
    when none watch). An observer that raises sends nothing: its bug never fails a tool."""
    out: list[Carried] = []
    for carrier in _carriers.get():
        try:
            found = carrier(executor)
        except Exception:
            continue
        if found is not None:
            out.append(found)
    return tuple(out)


@contextmanager
def entered(carried: Sequence[Carried]) -> Iterator[None]:
    """On the process that runs a tool: each ``Carried``'s context entered around it.
    One whose function cannot be imported here (its package is not installed) or fails
    to make or enter its context is left out; the tool runs all the same. Leaving a
    context never changes the tool's outcome: an error there is dropped, and a context
    cannot swallow the tool's own exception."""
    with ExitStack() as stack:
        for item in carried:
            try:
                module, _, name = item.enter.partition(":")
                make = getattr(importlib.import_module(module), name)
                context = make(item.values)
                context.__enter__()
            except Exception:
                continue
            stack.push(functools.partial(_leave, context))
        yield


def _leave(context: Any, *exc_info: Any) -> bool:
    """Leave ``context``; False: whatever the tool raised goes on (never swallowed)."""
    try:
        context.__exit__(*exc_info)
    except Exception:
        log.debug("leaving a carried context failed", exc_info=True)
    return False


class Recording(RunObserver, Protocol):
    """One run being kept (``RunStore.record``'s answer): an observer of the run (cheap:
    it only queues each event), then ``finish()`` once the run has ended (its answer,
    status, cost)."""

    def finish(self) -> None: ...


class RunStore(Protocol):
    """Somewhere runs are kept: ``record`` starts keeping ``run`` (asked ``prompt``, with
    the settings in ``options``) and returns the observer its events go to.
    ``Agent.run(..., store=...)`` takes any object of this shape."""

    def record(
        self, run: Run, prompt: str, options: Mapping[str, Any] | None = None
    ) -> Recording: ...

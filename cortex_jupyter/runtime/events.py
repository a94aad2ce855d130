"""The events the runtime adds to the parser's: what happened to actions and to the run.

Frozen dataclasses with a class-level ``kind``, like the parser's events, so a consumer
(the display, a transcript) reduces one stream of events without calling the runtime.
Every event carries ``time``, a ``time.monotonic()`` reading.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from cortex_jupyter.protocol.events import Event


@dataclass(frozen=True, slots=True)
class ActionStatus:
    """A node changed status, or an attempt failed and will be retried.

    ``attempt`` counts from 1 (0 before the first attempt). ``error`` is the failure
    text: on a ``failed`` or ``skipped`` node the reason, on a ``running`` event the
    error of the attempt that failed just before (``retry_in`` is then the backoff in
    seconds before the next attempt). ``output`` is a short text summary of a ``done``
    node's output. ``name``/``type``/``parent`` describe the node on its first event
    (workflow steps have a ``parent``).
    """

    id: str
    status: str
    time: float
    attempt: int = 0
    error: str | None = None
    output: str | None = None
    name: str | None = None
    type: str | None = None
    parent: str | None = None
    retry_in: float | None = None
    note: str | None = None
    kind: ClassVar[str] = "action_status"


@dataclass(frozen=True, slots=True)
class Metric:
    """A measured figure about the run (``unit`` e.g. ``"s"``, ``"count"``)."""

    name: str
    value: float
    time: float
    unit: str = ""
    id: str | None = None
    kind: ClassVar[str] = "metric"


@dataclass(frozen=True, slots=True)
class Interrupt:
    """The run was stopped before its end: cancelled (Stop) or its stream failed."""

    reason: str
    time: float
    error: str | None = None
    kind: ClassVar[str] = "interrupt"


@dataclass(frozen=True, slots=True)
class End:
    """The run ended: ``status`` is ``completed``, ``cancelled`` or ``failed``.

    ``fire_and_forget`` actions may still be running; their nodes report later.
    """

    status: str
    time: float
    kind: ClassVar[str] = "end"


@dataclass(frozen=True, slots=True)
class Nested:
    """An event of an agent's nested run, forwarded under its parent node ``parent``."""

    parent: str
    event: AnyEvent
    kind: ClassVar[str] = "nested"


RunEvent = ActionStatus | Metric | Interrupt | End | Nested
AnyEvent = Event | RunEvent

RUN_EVENT_TYPES: dict[str, type[Any]] = {
    cls.kind: cls for cls in (ActionStatus, Metric, Interrupt, End, Nested)
}

"""Where a run may be kept as it happens: the interface the loop knows a store by.

A run store (``cortex_jupyter.store``) is an observer of run events, like the display:
it is handed every event as it happens and never drives the run. The loop must not
import it (it sits above the loop, beside the session), so the core says here what one
looks like: ``Agent.run(..., store=...)`` takes any object of this shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from cortex_jupyter.runtime.core.events import AnyEvent
    from cortex_jupyter.runtime.core.record import Run

__all__ = ["Recording", "RunStore"]


class Recording(Protocol):
    """One run being kept: called with each event as it happens (cheap: it only queues
    the event), then ``finish()`` once the run has ended (its answer, status, cost)."""

    def __call__(self, event: AnyEvent) -> None: ...

    def finish(self) -> None: ...


class RunStore(Protocol):
    """Somewhere runs are kept: ``record`` starts keeping ``run`` (asked ``prompt``, with
    the settings in ``options``) and returns what its events are given to."""

    def record(
        self, run: Run, prompt: str, options: Mapping[str, Any] | None = None
    ) -> Recording: ...

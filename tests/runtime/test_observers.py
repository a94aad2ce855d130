"""A run's observers (runtime/core/record/observer.py: the store's recording, tracing, any
registered factory) watch and never break it: one that raises is dropped, logged, and
the run ends as it would have."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext

import pytest

from cortex_jupyter.models import ScriptModel
from cortex_jupyter.runtime import Agent, Registry, RunHooks
from cortex_jupyter.runtime.core.events import AnyEvent
from cortex_jupyter.runtime.core.record import observer

SCRIPT = (
    '<action id="a">{"name": "two", "parameters": {}, "output_key": "x"}</action>'
    "\n--- next turn ---\n<response>got $x</response>"
)


def agent() -> Agent:
    registry = Registry(builtins=False)

    @registry.tool
    def two() -> int:
        """Two."""
        return 2

    return Agent(model=ScriptModel(SCRIPT), registry=registry)


class Breaks:
    """An observer that fails on its ``after``-th event."""

    def __init__(self, after: int) -> None:
        self.seen = 0
        self.after = after

    def on_event(self, event: AnyEvent) -> None:
        self.seen += 1
        if self.seen == self.after:
            raise RuntimeError("the observer broke")

    def acting(self, action_id: str) -> AbstractContextManager[object]:
        return nullcontext()


@pytest.fixture
def factories() -> Iterator[list[observer.ObserverFactory]]:
    before = list(observer._factories)
    yield observer._factories
    observer._factories[:] = before


@pytest.mark.parametrize("after", [1, 3, 8])
def test_an_observer_that_raises_is_dropped_and_the_run_ends_as_it_would(
    after: int, caplog: pytest.LogCaptureFixture
) -> None:
    broken = Breaks(after)
    run = agent().run_sync("go", hooks=RunHooks(observers=(broken,)))
    assert run.status == "completed", run.reason
    assert run.answer == "got 2" and run.variables["x"] == 2
    assert broken.seen == after  # told nothing after it failed
    assert "failed and stops watching this run" in caplog.text


def test_a_factory_that_raises_gives_no_observer_and_the_run_goes_on(
    factories: list[observer.ObserverFactory], caplog: pytest.LogCaptureFixture
) -> None:
    def broken(start: observer.RunStart) -> observer.RunObserver | None:
        raise RuntimeError("no")

    observer.add_observer(broken)
    run = agent().run_sync("go")
    assert run.status == "completed", run.reason
    assert run.answer == "got 2"
    assert "could not start" in caplog.text

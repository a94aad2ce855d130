"""``Agent.compare``: one prompt by several agents at once, from Python (issue 35)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from cortex_jupyter.models import ScriptModel
from cortex_jupyter.runtime import Agent, Registry, RunHooks
from cortex_jupyter.runtime.core.events import Chunk


class Gated(ScriptModel):
    """A script that waits for ``gate`` after its first chunk."""

    def __init__(self, text: str, gate: anyio.Event) -> None:
        super().__init__(text, chunk_size=4, delay=0)
        self.gate = gate

    async def stream(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        first = True
        async for piece in super().stream(*args, **kwargs):
            yield piece
            if first:
                first = False
                await self.gate.wait()


class Broken(ScriptModel):
    async def stream(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise AssertionError("a bug in this column's model")
        yield  # an async generator


@pytest.mark.anyio
async def test_columns_run_at_once_and_each_is_its_own_run() -> None:
    gate = anyio.Event()
    registry = Registry()
    a = Agent(model=Gated("<response>Paris.</response>", gate), registry=registry)
    b = Agent(model=ScriptModel("<response>Lyon.</response>", delay=0), registry=registry)

    def b_event(event: Any) -> None:
        if isinstance(event, Chunk):
            gate.set()  # a goes on only once b's stream arrived

    runs = await Agent.acompare(
        "Capital of France?", {"a": a, "b": b}, hooks={"b": RunHooks(on_event=b_event)}
    )
    assert list(runs) == ["a", "b"]
    assert runs["a"].answer == "Paris." and runs["b"].answer == "Lyon."
    assert runs["a"].id != runs["b"].id


def test_a_failing_column_stays_in_its_column_from_a_script() -> None:
    good = Agent(model=ScriptModel("<response>fine</response>", delay=0), registry=Registry())
    bad = Agent(model=Broken("x"), registry=Registry())
    runs = Agent.compare("hi", {"good": good, "bad": bad})
    assert runs["good"].status == "completed" and runs["good"].answer == "fine"
    assert runs["bad"].status in ("failed", "interrupted")
    assert "a bug in this column's model" in (runs["bad"].reason or "")


def test_a_list_of_agents_is_named_by_their_models_and_a_name_twice_is_refused() -> None:
    one = Agent(model=ScriptModel("<response>1</response>", delay=0), registry=Registry())
    runs = Agent.compare("hi", [one])
    assert list(runs) == ["script"]
    with pytest.raises(ValueError, match="twice"):
        Agent.compare("hi", [one, one])
    with pytest.raises(TypeError, match="compare takes Agents"):
        Agent.compare("hi", {"x": "gpt-4o"})  # type: ignore[dict-item]

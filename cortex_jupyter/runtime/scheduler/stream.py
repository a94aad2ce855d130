"""A whole stream at once: parse protocol text chunks (``parse_chunks``) and run a
stream of parser events to the end (``run_stream``). For scripts, tests and benchmarks;
the agent loop drives a ``Scheduler`` turn by turn instead."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterable, Iterable
from typing import Any

import anyio
import anyio.lowlevel

from cortex_jupyter.protocol import Parser
from cortex_jupyter.protocol.events import Event
from cortex_jupyter.runtime.core.record.run import Run
from cortex_jupyter.runtime.scheduler.dispatch import Scheduler

__all__ = ["parse_chunks", "run_stream"]


async def parse_chunks(
    chunks: AsyncIterable[str], dialect: str = "cortex"
) -> AsyncGenerator[Event, None]:
    """The parser's events for a stream of protocol text chunks, as they arrive."""
    parser = Parser(dialect=dialect)
    async for chunk in chunks:
        for event in parser.feed(chunk):
            yield event
    for event in parser.close():
        yield event


async def run_stream(
    events: AsyncIterable[Event] | Iterable[Event],
    **options: Any,
) -> Run:
    """Run a whole stream of parser events and return the run record.

    ``options`` are ``Scheduler``'s keyword arguments (``RunSpec``'s fields: ``registry``,
    ``namespace``, ``model``, ``on_event``, ``bind``...; and ``run``). Returns when the
    run has ended and its ``fire_and_forget`` actions too (unless ``background`` owns those). If the
    stream raises, running actions are cancelled and the error propagates; pass
    ``run=Run()`` to keep a handle on the record.
    """
    scheduler = Scheduler(**options)
    async with scheduler:
        if isinstance(events, AsyncIterable):
            async for event in events:
                scheduler.submit(event)
        else:
            for event in events:
                scheduler.submit(event)
                await anyio.lowlevel.checkpoint()
    return scheduler.run

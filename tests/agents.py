"""A test helper: run an ``Agent`` made from keyword options, in one call.

Most loop tests vary one setting at a time; this keeps each of them one line while
exercising the real API (``Agent(...)`` then ``.run(...)`` / ``.continue_run(...)``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from anyio.abc import TaskGroup

from cortex_jupyter.runtime import Agent, Conversation, Run, RunHooks
from cortex_jupyter.runtime.loop.transcript import RunSource


def _split(
    on_event: Callable[[Any], None] | None,
    bind: Callable[[str, Any], None] | None,
    background: TaskGroup | None,
) -> RunHooks:
    return RunHooks(on_event=on_event, bind=bind, background=background)


async def run_agent(
    prompt: str,
    *,
    namespace: Mapping[str, Any] | None = None,
    conversation: Conversation | None = None,
    on_event: Callable[[Any], None] | None = None,
    bind: Callable[[str, Any], None] | None = None,
    background: TaskGroup | None = None,
    run: Run | None = None,
    variables: Iterable[str] | None = None,
    taken_ids: Iterable[str] = (),
    **agent: Any,
) -> Run:
    """``Agent(**agent).run(prompt, ...)``."""
    return await Agent(**agent).run(
        prompt,
        namespace=namespace,
        conversation=conversation,
        hooks=_split(on_event, bind, background),
        run=run,
        variables=variables,
        taken_ids=taken_ids,
    )


async def continue_run(
    previous: RunSource,
    *,
    namespace: Mapping[str, Any] | None = None,
    conversation: Conversation | None = None,
    on_event: Callable[[Any], None] | None = None,
    run: Run | None = None,
    **agent: Any,
) -> Run:
    """``Agent(**agent).continue_run(previous, ...)``."""
    return await Agent(**agent).continue_run(
        previous,
        namespace=namespace,
        conversation=conversation,
        hooks=_split(on_event, None, None),
        run=run,
    )

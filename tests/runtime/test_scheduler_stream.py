"""End to end: protocol text, chunked as a model streams it, through the real parser."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cortex_jupyter.protocol.events import ResponseEnd
from cortex_jupyter.runtime import Registry, Run, parse_chunks, run_stream

Chunks = Callable[..., AsyncIterator[str]]


async def text_chunks(text: str, size: int, gap: float) -> AsyncIterator[str]:
    for start in range(0, len(text), size):
        await anyio.sleep(gap)
        yield text[start : start + size]


PROTOCOL = """<thought>Let me look at the data.
<action id="load" mode="sync">{"name": "sleep", "parameters": {"seconds": 0.05, "value": [3, 1, 2]}, "output_key": "rows"}</action>
While that loads I keep thinking.
<action id="count">{"name": "echo", "parameters": {"value": "$rows"}}</action>
<action id="sum" type="tool">```json
{"name": "add", "parameters": {"a": 1, "b": 2}, "depends_on": ["count"]}
```</action>
<action id="broken">{"name": "add", "parameters": {"a": 1,</action>
<action id="after_broken">{"name": "add", "parameters": {"a": 1}, "depends_on": ["broken"]}</action>
<action id="tricky">{"name": "echo", "parameters": {"value": "</action> is data"}}</action>
</thought>
<response>Done: $rows</response>"""  # noqa: E501


async def run_text(text: str, registry: Registry, size: int = 16, gap: float = 0.0) -> Run:
    return await run_stream(parse_chunks(text_chunks(text, size, gap)), registry=registry)


@pytest.mark.anyio
async def test_protocol_text_end_to_end(registry: Registry) -> None:
    run = await run_text(PROTOCOL, registry, size=16, gap=0.002)
    assert {n.id: n.status for n in run.actions.values()} == {
        "load": "done",
        "count": "done",
        "sum": "done",
        "broken": "failed",
        "after_broken": "skipped",
        "tricky": "done",
    }
    assert run.actions["count"].output is run.actions["load"].output
    assert run.actions["count"].depends_on == ("load",)
    assert run.actions["sum"].output == 3
    assert run.actions["tricky"].output == "</action> is data"
    assert run.actions["broken"].error is not None
    assert run.actions["after_broken"].error == "depends on 'broken', which failed"
    assert "While that loads I keep thinking." in run.thought
    assert run.response == "Done: $rows"


@pytest.mark.anyio
async def test_actions_start_before_the_stream_ends(registry: Registry) -> None:
    text = (
        '<thought><action id="early">{"name": "sleep", "parameters": {"seconds": 0.01}}</action>'
        + "more thinking " * 40
        + "</thought><response>ok</response>"
    )
    run = await run_text(text, registry, size=8, gap=0.003)
    end = next(
        t for e, t in zip(run.events, run.event_times, strict=True) if isinstance(e, ResponseEnd)
    )
    assert run.actions["early"].finished is not None
    assert run.actions["early"].finished < end


@pytest.mark.anyio
async def test_truncated_stream_marks_the_open_action_failed(registry: Registry) -> None:
    run = await run_text('<action id="cut">{"name": "add", "param', registry)
    assert run.actions["cut"].status == "failed"
    assert [e.code for e in run.errors] == ["truncated_action"]


def _outcome(run: Run) -> dict[str, Any]:
    return {
        "nodes": {n.id: (n.status, n.output, n.error) for n in run.actions.values()},
        "thought": run.thought,
        "response": run.response,
    }


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(size=st.integers(min_value=1, max_value=200))
def test_any_chunking_gives_the_same_run(
    size: int, registry_factory: Callable[[], Registry]
) -> None:
    text = PROTOCOL.replace('"seconds": 0.05', '"seconds": 0')

    async def both() -> tuple[dict[str, Any], dict[str, Any]]:
        whole = await run_text(text, registry_factory(), size=len(text))
        chunked = await run_text(text, registry_factory(), size=size)
        return _outcome(whole), _outcome(chunked)

    whole, chunked = anyio.run(both)
    assert chunked == whole

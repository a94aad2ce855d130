"""The core's plug points: what an integration passes in, and a clear message without it.

The loop and the scheduler never import MCP or the executors; those integrations pass
their readers and runners into the core's ``Registry`` when they are loaded.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from cortex_jupyter.runtime import FeedSet, FeedSpec, Registry, Run, Scheduler
from cortex_jupyter.runtime.integrations import executors, mcp

pytestmark = pytest.mark.anyio


def test_the_integrations_pass_their_reader_and_runner_in_when_loaded() -> None:
    assert Registry.read_resource is mcp.read_resource
    assert Registry.run_elsewhere is executors.run_elsewhere


async def test_an_mcp_feed_reads_through_the_reader_passed_in(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[tuple[str, str]] = []

    async def read(server: str, uri: str) -> str:
        asked.append((server, uri))
        return "the resource"

    monkeypatch.setattr(Registry, "read_resource", read)
    feeds = FeedSet()
    feeds.add(FeedSpec("doc", source="mcp", name="fs", params={"uri": "file:///a"}))
    assert await feeds.refresh("doc") == "the resource"
    assert asked == [("fs", "file:///a")]


async def test_an_mcp_feed_without_the_integration_says_no_server_was_added(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(Registry, "read_resource", None)
    feeds = FeedSet()
    feeds.add(FeedSpec("doc", source="mcp", name="fs", params={"uri": "file:///a"}))
    with pytest.raises(Exception, match=r"no MCP server named 'fs' was added"):
        await feeds.refresh("doc")


async def test_a_tool_with_an_executor_fails_clearly_without_the_integration(
    monkeypatch: pytest.MonkeyPatch, act: Any
) -> None:
    monkeypatch.setattr(Registry, "run_elsewhere", None)
    registry = Registry(builtins=False)
    with ThreadPoolExecutor(1) as pool:

        @registry.tool(executor=pool)
        def one() -> int:
            return 1

        run = Run()
        async with Scheduler(registry=registry, run=run) as scheduler:
            scheduler.submit(act("a", "one"))
    assert run.actions["a"].status == "failed"
    assert "executor= needs cortex_jupyter.runtime.integrations.executors" in str(
        run.actions["a"].error
    )


def test_add_agent_makes_an_agent_of_the_loop() -> None:
    registry = Registry(builtins=False)
    spec = registry.add_agent("helper", "You help.")
    assert type(spec.agent).__name__ == "Agent"
    assert registry.get("agent", "helper") is spec

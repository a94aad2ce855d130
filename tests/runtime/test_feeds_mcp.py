"""Context feeds from MCP resources (``source: {type: mcp, server: NAME, uri: URI}``),
read from the demo server (``tests/mcp_servers/demo.py``) over stdio."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import cortex_jupyter.mcp as facade
from cortex_jupyter.protocol.events import Action, ActionReady
from cortex_jupyter.runtime import Registry, run_stream
from cortex_jupyter.runtime.loop.feeds import FeedError, FeedSet, FeedSpec, FeedUnavailable

from .conftest import paced

DEMO = str(Path(__file__).resolve().parents[1] / "mcp_servers" / "demo.py")
README = "# Demo\nA server for tests."

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """The demo server, added to the default manager (what feeds read from)."""
    name = "feeds" + uuid.uuid4().hex[:8]
    facade.add(name, [sys.executable, DEMO])
    yield name
    facade.remove(name)


def feed(server: str, uri: str = "demo://readme", **fields: Any) -> FeedSet:
    source = {"type": "mcp", "server": server, "uri": uri}
    return FeedSet.from_manifest([{"id": "readme", "source": source, **fields}])


async def test_a_resource_is_a_feed_in_the_prompt(server: str) -> None:
    feeds = feed(server)
    spec = feeds.specs["readme"]
    assert (spec.source, spec.name, dict(spec.params)) == ("mcp", server, {"uri": "demo://readme"})
    await feeds.refresh_due()
    assert feeds["readme"] == README
    assert feeds.to_prompt() == f'<context_feed id="readme">{README}</context_feed>'


async def test_a_yaml_manifest_and_max_tokens(server: str) -> None:
    feeds = FeedSet.from_yaml(
        "feeds:\n"
        "  - id: readme\n"
        f"    source: {{type: mcp, server: {server}, uri: 'demo://readme'}}\n"
        "    max_tokens: 2\n"
    )
    await feeds.refresh_due()
    assert feeds.text("readme").startswith("# Demo\nA\n[truncated to about 2 tokens: ")


async def test_dollar_id_passes_the_resource_text_to_an_action(server: str) -> None:
    registry = Registry(builtins=False)

    @registry.tool
    def first_line(text: str) -> str:
        """The first line of a text."""
        return text.splitlines()[0]

    feeds = feed(server)
    await feeds.refresh_due()
    action = Action(id="a", name="first_line", parameters={"text": "$readme"})
    run = await run_stream(paced([ActionReady(action)]), registry=registry, feeds=feeds)
    assert run.actions["a"].output == "# Demo"


@pytest.mark.parametrize(
    ("uri", "server_name", "reason"),
    [
        ("demo://nowhere", None, "could not read 'demo://nowhere'"),
        ("demo://readme", "nobody", "no MCP server named 'nobody' was added"),
    ],
)
async def test_a_failing_read_is_kept_on_the_feed_and_never_breaks_the_turn(
    server: str, uri: str, server_name: str | None, reason: str
) -> None:
    feeds = feed(server_name or server, uri)
    await feeds.refresh_due()  # does not raise
    assert reason in (feeds.error("readme") or "")
    assert feeds.text("readme").startswith("[unavailable: ")
    with pytest.raises(FeedUnavailable, match="has no value: its refresh failed"):
        feeds["readme"]


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ({"type": "mcp", "server": "x"}, "an mcp feed needs a uri"),
        ({"type": "mcp", "uri": "demo://readme"}, "an mcp feed needs a server name"),
        ("mcp:x", "an mcp feed needs a uri"),
    ],
)
def test_bad_mcp_feeds_say_what_is_missing(source: Any, message: str) -> None:
    with pytest.raises(FeedError, match=message):
        FeedSpec.from_dict({"id": "f", "source": source})


def test_name_is_the_servers_other_spelling() -> None:
    spec = FeedSpec.from_dict({"id": "f", "source": {"type": "mcp", "name": "fs", "uri": "u://"}})
    assert (spec.name, dict(spec.params)) == ("fs", {"uri": "u://"})

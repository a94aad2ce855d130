"""Context feeds: declaration (Python and YAML), sources, refresh policy, the mapping."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import pytest

from cortex_jupyter.protocol.events import Action, ActionReady
from cortex_jupyter.runtime import Registry, run_stream
from cortex_jupyter.runtime.core.model.chunks import ModelChunk, TextChunk
from cortex_jupyter.runtime.core.model.client import Message
from cortex_jupyter.runtime.loop.feeds import FeedError, FeedSet, FeedSpec, FeedUnavailable


def counting_registry() -> tuple[Registry, dict[str, int]]:
    registry = Registry(builtins=False)
    calls = {"n": 0}

    @registry.tool
    def tick(step: int = 1) -> int:
        """Count."""
        calls["n"] += step
        return calls["n"]

    @registry.tool
    def broken() -> None:
        """Fail."""
        raise OSError("disk on fire")

    @registry.tool(type="relic", name="store.read")
    def read(key: str) -> dict[str, str]:
        """Read."""
        return {"key": key}

    registry.add_workflow("twice", [{"name": "tick"}, {"name": "tick"}])

    @registry.tool(type="llm")
    def headline(topic: str) -> str:
        """Prompt for a headline."""
        return f"A headline about {topic}"

    return registry, calls


class EchoModel:
    name = "echo"

    async def stream(self, messages: Sequence[Message], **_: Any) -> AsyncIterator[ModelChunk]:
        yield TextChunk("model says: " + messages[-1]["content"])


# ---- declaring --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"id": ""}, "the id must be a non-empty string"),
        ({"id": "a", "type": "hourly"}, "type must be on_demand or periodic, not 'hourly'"),
        ({"id": "a", "source": "web"}, "source must be one of internal, tool, relic"),
        ({"id": "a", "type": "periodic"}, "a periodic feed needs an interval"),
        ({"id": "a", "interval": 0}, "interval must be a positive number of seconds, not 0"),
        ({"id": "a", "cache_ttl": -1}, "cache_ttl must be a number >= 0 of seconds, not -1"),
        ({"id": "a", "max_tokens": 0}, "max_tokens must be a whole number >= 1, not 0"),
        ({"id": "a", "enabled": "yes"}, "enabled must be true or false, not 'yes'"),
        ({"id": "a", "name": "weather"}, "internal source 'weather' does not exist"),
        ({"id": "a", "name": "env"}, "an env feed needs params.name"),
        (
            {"id": "k", "name": "env", "params": {"name": "OPENAI_API_KEY"}},
            "environment variable 'OPENAI_API_KEY' looks like a credential",
        ),
        ({"id": "a", "params": [1]}, "params must be a mapping"),
    ],
)
def test_bad_declarations_say_what_is_wrong(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(FeedError, match=re.escape(message)):
        FeedSpec(**fields)


MANIFEST = """
feeds:
  - id: now
    type: periodic
    interval: 30
    source: clock
  - id: weather
    source: {type: tool, name: get_weather, params: {city: Paris}}
    cache_ttl: 60
    max_tokens: 100
  - id: lookup
    source: relic:store.read
    params: {key: k}
  - id: home
    source: internal
    name: env
    params: {name: HOME}
    enabled: false
"""


def test_yaml_manifest_forms(tmp_path: Path) -> None:
    feeds = FeedSet.from_yaml(MANIFEST)
    now, weather, lookup, home = feeds.specs.values()
    assert (now.type, now.interval, now.source, now.name) == ("periodic", 30.0, "internal", "clock")
    assert (weather.source, weather.name, dict(weather.params)) == (
        "tool", "get_weather", {"city": "Paris"},
    )  # fmt: skip
    assert (weather.cache_ttl, weather.max_tokens) == (60, 100)
    assert (lookup.source, lookup.name, dict(lookup.params)) == (
        "relic",
        "store.read",
        {"key": "k"},
    )
    assert home.enabled is False and list(feeds) == ["now", "weather", "lookup"]
    path = tmp_path / "feeds.yaml"
    path.write_text(MANIFEST, encoding="utf-8")
    assert list(FeedSet.from_yaml(path).specs) == list(FeedSet.from_yaml(str(path)).specs)
    assert len(FeedSet.from_yaml("- {id: a}\n- {id: b, params: {text: hi}}")) == 2
    assert len(FeedSet.from_yaml("")) == 0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("feeds: [{id: a, every: 3}]", "unknown field(s) every; the fields are cache_ttl"),
        ("other: 1", "a manifest has one key, feeds; found other"),
        ("feeds: {id: a}", "a manifest is a list of feeds"),
        ("feeds: [3]", "a feed must be a mapping of fields, not 3"),
        ("feeds: [id: a\n  - x", "the manifest is not valid YAML"),
        ("missing/feeds.yaml", "no manifest file 'missing/feeds.yaml'"),
    ],
)
def test_bad_manifests(text: str, message: str) -> None:
    with pytest.raises(FeedError, match=re.escape(message)):
        FeedSet.from_yaml(text)


# ---- sources ----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_internal_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORTEX_TEST_CITY", "Lyon")
    feeds = FeedSet(
        [
            FeedSpec("now", name="clock"),
            FeedSpec("utc", name="clock", params={"utc": True, "format": "%Y"}),
            FeedSpec("city", name="env", params={"name": "CORTEX_TEST_CITY"}),
            FeedSpec("none", name="env", params={"name": "CORTEX_TEST_UNSET", "default": "-"}),
            FeedSpec("dice", name="random", params={"min": 1, "max": 6}),
            FeedSpec("pick", name="random", params={"choices": ["a", "b"]}),
            FeedSpec("unit", name="random"),
            FeedSpec("motto", params={"text": "be kind"}),
        ]
    )
    await feeds.refresh_due()
    assert datetime.fromisoformat(feeds["now"]).tzinfo is not None
    assert feeds["utc"] == str(datetime.now().year) or feeds["utc"].isdigit()
    assert (feeds["city"], feeds["none"]) == ("Lyon", "-")
    assert 1 <= feeds["dice"] <= 6 and feeds["pick"] in ("a", "b") and 0 <= feeds["unit"] < 1
    assert feeds["motto"] == "be kind"


@pytest.mark.anyio
async def test_registered_sources_tool_relic_workflow_llm() -> None:
    registry, calls = counting_registry()
    feeds = FeedSet(
        [
            FeedSpec("count", source="tool", name="tick", params={"step": 5}),
            FeedSpec("stored", source="relic", name="store.read", params={"key": "$count"}),
            FeedSpec("two", source="workflow", name="twice"),
            FeedSpec("title", source="llm", name="headline", params={"topic": "rain"}),
        ],
        registry=registry,
        model=EchoModel(),
    )
    assert await feeds.refresh("count") == 5
    # other feeds are reachable as $id (an int to a str parameter arrives as its text)
    assert await feeds.refresh("stored") == {"key": "5"}
    assert await feeds.refresh("two") == 7
    assert await feeds.refresh("title") == "model says: A headline about rain"
    assert calls["n"] == 7


@pytest.mark.anyio
async def test_a_failing_source_keeps_the_last_value_and_says_why() -> None:
    registry, _ = counting_registry()
    feeds = FeedSet([FeedSpec("bad", source="tool", name="broken")], registry=registry)
    await feeds.refresh_due()  # never raises
    assert feeds.error("bad") == "tool 'broken' failed: OSError: disk on fire"
    assert feeds.text("bad") == "[unavailable: tool 'broken' failed: OSError: disk on fire]"
    with pytest.raises(FeedUnavailable, match="context feed 'bad' has no value"):
        feeds["bad"]
    with pytest.raises(Exception, match="disk on fire"):
        await feeds.refresh("bad")
    # an action reading it fails, naming the feed
    run = await run_stream(
        [ActionReady(Action("r", "tick", parameters={"step": "$bad"}))],
        registry=registry,
        feeds=feeds,
    )
    assert "context feed 'bad' has no value" in (run.actions["r"].error or "")


# ---- refresh policy ---------------------------------------------------------------------


@pytest.mark.anyio
async def test_on_demand_feeds_respect_their_cache_ttl() -> None:
    registry, calls = counting_registry()
    feeds = FeedSet(
        [
            FeedSpec("every", source="tool", name="tick", params={"step": 1}),
            FeedSpec("cached", source="tool", name="tick", params={"step": 100}, cache_ttl=60),
            FeedSpec("zero", source="tool", name="tick", params={"step": 10}, cache_ttl=0),
            FeedSpec("off", source="tool", name="tick", params={"step": 1000}, enabled=False),
        ],
        registry=registry,
    )
    await feeds.refresh_due()
    await feeds.refresh_due()
    await feeds.refresh_due()
    # every: 3 refreshes, zero: 3, cached: 1, off: none
    assert calls["n"] == 3 * 1 + 3 * 10 + 100


@pytest.mark.anyio
async def test_periodic_feeds_refresh_in_the_background_only_while_active() -> None:
    # An async tool: a sync tool's worker thread is abandoned when its refresh is cancelled
    # (as Stop must be immediate), so a tick already handed to a thread could land after
    # ``remove``. What is checked here is that no refresh *starts* after it.
    registry = Registry(builtins=False)
    calls = {"n": 0}

    @registry.tool
    async def tick(step: int = 1) -> int:
        """Count."""
        await anyio.sleep(0)
        calls["n"] += step
        return calls["n"]

    feeds = FeedSet(
        [FeedSpec("p", source="tool", name="tick", type="periodic", interval=0.02)],
        registry=registry,
    )
    await anyio.sleep(0.05)
    assert calls["n"] == 0
    async with feeds.active():
        await anyio.sleep(0.11)
        during = calls["n"]
        assert 3 <= during <= 7
        feeds.add(FeedSpec("late", source="tool", name="tick", params={"step": 100},
                           type="periodic", interval=0.02))  # fmt: skip
        await anyio.sleep(0.05)
        assert calls["n"] >= during + 100
        feeds.remove("p")
        feeds.remove("late")
        stopped = calls["n"]
        await anyio.sleep(0.05)
        assert calls["n"] == stopped
        feeds.add(FeedSpec("q", source="tool", name="tick", type="periodic", interval=0.02))
    after = calls["n"]
    await anyio.sleep(0.06)
    assert calls["n"] == after


# ---- the mapping ------------------------------------------------------------------------


def test_feeds_as_the_schedulers_mapping() -> None:
    feeds = FeedSet([FeedSpec("a", params={"text": "A"}), FeedSpec("off", enabled=False)])
    feeds["b"] = "B"  # what add_feed and <context_feed> blocks do
    assert feeds.specs["b"].static and dict(feeds) == {"a": "A", "b": "B"}
    feeds["a"] = "A2"
    assert feeds["a"] == "A2" and "off" not in feeds and len(feeds) == 2
    assert feeds.pop("b") == "B" and feeds.pop("b", None) is None
    del feeds["a"]
    with pytest.raises(KeyError):
        del feeds["a"]
    with pytest.raises(KeyError):
        feeds["off"]
    feeds.enable("off")
    assert "off" in feeds
    assert repr(feeds) == "<FeedSet off (on_demand, internal:static)>"


def test_text_is_cut_to_max_tokens_with_a_marker() -> None:
    feeds = FeedSet([FeedSpec("log", params={"text": "abcdefghij" * 10}, max_tokens=3)])
    assert feeds.text("log") == "abcdefghijab\n[truncated to about 3 tokens: 88 more characters]"
    assert feeds["log"] == "abcdefghij" * 10  # $log is the whole value
    feeds["short"] = {"rows": [1, 2]}
    assert feeds.text("short") == '{"rows": [1, 2]}'
    assert '<context_feed id="short">{"rows": [1, 2]}</context_feed>' in feeds.to_prompt()


@pytest.mark.anyio
async def test_dollar_id_reads_the_feed_value_itself() -> None:
    registry = Registry(builtins=False)

    @registry.tool
    def echo(value: Any) -> Any:
        """Echo."""
        return value

    data = {"temp": 18}
    feeds = FeedSet([FeedSpec("weather", params={"text": data})])
    run = await run_stream(
        [
            ActionReady(Action("a", "echo", parameters={"value": "$weather"})),
            ActionReady(Action("b", "echo", parameters={"value": "$weather.temp C"})),
        ],
        registry=registry,
        feeds=feeds,
    )
    assert run.actions["a"].output is data and run.actions["b"].output == "18 C"

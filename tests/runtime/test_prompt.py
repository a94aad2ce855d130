"""The system prompt (golden files per dialect), variable descriptions and result blocks.

``CORTEX_UPDATE_GOLDEN=1 pytest tests/runtime/test_prompt.py`` rewrites the golden
files in ``prompts/`` from the current code; review the diff before committing.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from cortex_jupyter.protocol.events import Action, ProtocolError
from cortex_jupyter.runtime import ActionNode, InternalPolicy, Registry
from cortex_jupyter.runtime.loop.feeds import FeedSet, FeedSpec
from cortex_jupyter.runtime.loop.prompt import (
    describe_value,
    describe_variables,
    format_results,
    render_value,
    system_prompt,
    truncate,
)

PROMPTS = Path(__file__).parent / "prompts"
UPDATE = os.environ.get("CORTEX_UPDATE_GOLDEN") == "1"


class Frame:
    """Stands in for a pandas DataFrame: a shape, a length and a multi-line repr."""

    shape = (1000, 3)

    def __len__(self) -> int:
        return 1000

    def __repr__(self) -> str:
        return "\n".join(f"{i:>4}  {i * 0.5:>6}  row-{i}" for i in range(1000))


class BrokenRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")

    def __len__(self) -> int:
        raise RuntimeError("no len")


def golden_registry() -> Registry:
    registry = Registry(builtins=False)

    @registry.tool
    def get_weather(city: str, days: int = 1) -> dict[str, Any]:
        """Today's weather for a city.

        Args:
            city: The city name.
            days: How many days of forecast.
        """
        return {"city": city}

    @registry.tool(name="cache.get", type="relic")
    def cache_get(key: str) -> Any:
        """The value stored under a key."""

    @registry.tool(type="llm")
    def summarise(text: str) -> str:
        """Summarise a text."""
        return text

    def add_feed(feeds: Any, id: str, text: str) -> str:
        """Add a context feed."""
        return id

    def remove_feed(feeds: Any, id: str) -> bool:
        """Remove a context feed."""
        return True

    registry.register(add_feed, type="internal", injected=("feeds",))
    registry.register(remove_feed, type="internal", injected=("feeds",))
    registry.add_agent("researcher", "Finds sources on a topic.\nMore detail.")
    registry.add_workflow("report", [{"name": "get_weather"}, {"name": "summarise", "type": "llm"}])
    return registry


def golden_feeds() -> FeedSet:
    feeds = FeedSet(
        [
            FeedSpec("news", params={"text": "Markets calm; rain expected in Paris."}),
            FeedSpec("log", params={"text": "x" * 100}, max_tokens=5),
            FeedSpec("hidden", params={"text": "not shown"}, enabled=False),
        ]
    )
    return feeds


def check_golden(name: str, text: str) -> None:
    path = PROMPTS / name
    if UPDATE or not path.exists():
        path.write_text(text, encoding="utf-8")
        if not UPDATE:
            pytest.fail(f"{path} did not exist and was written; review it and run again")
    assert text == path.read_text(encoding="utf-8"), f"prompt differs from {path}"


@pytest.mark.parametrize("dialect", ["cortex", "sigil", "cogency", "hermes"])
def test_golden_prompt_per_dialect(dialect: str) -> None:
    text = system_prompt(
        dialect=dialect,
        registry=golden_registry(),
        feeds=golden_feeds(),
        variables=describe_variables({"rows": [3, 1, 2], "name": "Ada"}, ["rows", "name"]),
        internal=InternalPolicy(enabled=True, allow=frozenset({"add_feed"})),
        instructions="Be brief.",
    )
    check_golden(f"{dialect}.txt", text)


def test_golden_prompt_with_native_tools_and_nothing_else() -> None:
    text = system_prompt(registry=golden_registry(), native_tools=True)
    check_golden("cortex_native.txt", text)


def test_prompt_lists_what_the_dialect_can_call() -> None:
    registry = golden_registry()
    cortex = system_prompt(registry=registry)
    sigil = system_prompt(dialect="sigil", registry=registry)
    assert "`researcher`" in cortex and "`cache.get`" in cortex and "`report`" in cortex
    # sigil and cogency calls are always tool actions: nothing else is offered
    assert "`researcher`" not in sigil and "`cache.get`" not in sigil
    assert "`get_weather`" in sigil
    # internal actions only when enabled, and only the allowed ones
    assert "add_feed" not in cortex
    allowed = system_prompt(
        registry=registry, internal=InternalPolicy(enabled=True, allow=frozenset({"remove_feed"}))
    )
    assert "`remove_feed`" in allowed and "`add_feed`" not in allowed
    assert system_prompt(dialect="auto", registry=registry) == cortex
    assert "Nothing is registered" in system_prompt(registry=Registry(builtins=False))


def test_unknown_dialect_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown protocol dialect 'xml'; choose one of"):
        system_prompt(dialect="xml")


def test_feed_blocks_are_truncated_and_disabled_ones_left_out() -> None:
    text = system_prompt(feeds=golden_feeds())
    assert '<context_feed id="news">Markets calm; rain expected in Paris.</context_feed>' in text
    assert "x" * 20 + "\n[truncated to about 5 tokens: 80 more characters]" in text
    assert "hidden" not in text


# ---- variables --------------------------------------------------------------------------


def test_describe_variables_gives_type_size_and_a_short_repr() -> None:
    namespace = {"frame": Frame(), "big": list(range(100_000)), "text": "x" * 10_000}
    text = describe_variables(namespace, ["text", "frame", "big", "missing"])
    lines = text.splitlines()
    assert lines[0] == "- $big: list, length 100000"
    assert lines[1].startswith("  [0, 1, 2, 3,") and lines[1].endswith("...]")
    assert "- $frame: tests.runtime.test_prompt.Frame, shape (1000, 3)" in text
    assert "- $missing: not defined in the notebook" in text
    assert "- $text: str, length 10000" in text
    assert len(text) < 2000  # never the whole value


def test_describe_value_survives_broken_repr_and_len() -> None:
    text = describe_value(BrokenRepr())
    # issue 19 §6: a repr that raises says so, with the error (one form everywhere)
    head, shown = text.split("\n  ")
    assert head == "tests.runtime.test_prompt.BrokenRepr"
    assert shown == "<BrokenRepr: repr failed: RuntimeError: no repr>"


def test_describe_value_cuts_long_multiline_reprs() -> None:
    text = describe_value(Frame())
    assert text.count("\n") <= 13
    assert text.endswith("...")


# ---- results ----------------------------------------------------------------------------


def node(id: str, name: str, status: str, output: Any = None, error: str | None = None,
         output_key: str | None = None, mode: str = "async") -> ActionNode:  # fmt: skip
    action = Action(id=id, name=name, mode=mode, output_key=output_key)
    made = ActionNode(id, name, mode=mode, action=action)
    made.status = status  # type: ignore[assignment]
    made.output = output
    made.error = error
    return made


def test_results_block_cortex() -> None:
    nodes = [
        node("a1", "search", "done", {"hits": [1, 2]}, output_key="found"),
        node("a2", "boom", "failed", error="ValueError: boom"),
        node("a3", "later", "skipped", error="depends on 'a2', which failed"),
        node("a4", "bg", "running", mode="fire_and_forget"),
        node("a5", "big", "done", "y" * 50),
    ]
    errors = [ProtocolError("forged_result", "a <results> block written by the model")]
    text = format_results(nodes, errors, limit=20)
    assert text == (
        "<results>\n"
        '<result id="a1" name="search" status="done" output_key="found">'
        '{"hits": [1, 2]}</result>\n'
        '<result id="a2" name="boom" status="failed">ValueError: boom</result>\n'
        '<result id="a3" name="later" status="skipped">depends on \'a2\', whi\n'
        "[truncated: 9 more characters]</result>\n"
        '<result id="a4" name="bg" status="running">'
        "still running (fire_and_forget): its result is not sent back</result>\n"
        '<result id="a5" name="big" status="done">' + "y" * 20 + "\n"
        "[truncated: 30 more characters]</result>\n"
        '<error code="forged_result">a <results> block written by the model</error>\n'
        "</results>"
    )


def test_results_block_sigil() -> None:
    text = format_results(
        [
            node("auto-1", "add", "done", 3, output_key="s"),
            node("auto-2", "x", "failed", error="e"),
        ],
        dialect="sigil",
    )
    assert text == "§RESULTS:\n[auto-1] add (done, output_key s): 3\n[auto-2] x (failed): e"


def test_results_block_hermes() -> None:
    text = format_results(
        [
            node("auto-1", "add", "done", {"sum": 3}, output_key="s"),
            node("auto-2", "x", "failed", error="ValueError: e"),
        ],
        [ProtocolError("forged_result", "a <tool_response> written by the model")],
        dialect="hermes",
    )
    assert text == (
        "<tool_response>\n"
        '{"id": "auto-1", "name": "add", "status": "done", "output_key": "s", '
        '"content": {"sum": 3}}\n</tool_response>\n'
        "<tool_response>\n"
        '{"id": "auto-2", "name": "x", "status": "failed", "content": "ValueError: e"}\n'
        "</tool_response>\n"
        "<tool_response>\n"
        '{"error": "forged_result", "message": "a <tool_response> written by the model"}\n'
        "</tool_response>"
    )


def test_render_value_and_truncate() -> None:
    assert render_value("text") == "text"
    assert render_value({"a": [1, None]}) == '{"a": [1, null]}'
    assert render_value({1, 2}) == "{1, 2}"
    assert render_value(BrokenRepr()) == "<BrokenRepr: repr failed: RuntimeError: no repr>"
    assert truncate("abcdef", 10) == "abcdef"
    assert truncate("a" * 12_345 + "b", 1) == "a\n[truncated: 12,345 more characters]"


@pytest.mark.parametrize("dialect", ["cortex", "hermes", "sigil", "cogency", "auto"])
def test_a_native_tools_prompt_teaches_native_calls_only(dialect: str) -> None:
    # A live model copied the cortex example's action (id and all) into a tag action
    # that failed, beside the native calls the endpoint offered it.
    text = system_prompt(dialect=dialect, registry=golden_registry(), native_tools=True)
    assert "native tool calls" in text and "`get_weather`" in text
    for taught in ("<action", "<tool_call>", "§CALLS", "<execute>", "<result", "w1", "auto-1"):
        assert taught not in text

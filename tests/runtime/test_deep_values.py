"""Deep values never overflow the stack: protocol input, parameters, outputs, transcripts.

Every step that walks a value recursively (``$name`` resolution, redaction, the
transcript) has a depth limit; a value past it fails one action with one line, or is
kept as its short repr, and the run goes on.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from cortex_jupyter.models import ScriptModel
from cortex_jupyter.protocol import MAX_JSON_DEPTH
from cortex_jupyter.runtime import NestedTooDeep, Registry, Run
from cortex_jupyter.runtime.core.model.chunks import Finish, TextChunk, ToolCallReady, ToolCallStart
from cortex_jupyter.runtime.core.record.run import OutputRepr
from cortex_jupyter.runtime.core.trust.secrets import REDACTED, TOO_DEEP, Secrets
from cortex_jupyter.runtime.core.values.variables import find_references, resolve
from tests.agents import run_agent
from tests.runtime.doubles import Scripted

pytestmark = pytest.mark.anyio

DEEP = "[" * 1500 + "]" * 1500
KEY = "sk-deep-test-0123456789"


def nested(levels: int, inner: Any = None) -> Any:
    value = [] if inner is None else inner
    for _ in range(levels - (inner is None)):
        value = [value]
    return value


def registry() -> Registry:
    tools = Registry(builtins=False)

    @tools.tool
    def echo(value: Any) -> Any:
        """Return the value."""
        return value

    @tools.tool
    def deep(levels: int, secret: str = "") -> Any:
        """A list nested ``levels`` deep, ``secret`` at its bottom and its top."""
        return [secret, nested(levels, [secret])]

    return tools


REPLIES = {
    "cortex": '<action id="a">{"name": "echo", "parameters": {"value": %s}}</action>'
    '<action id="b">{"name": "echo", "parameters": {"value": 2}, "output_key": "two"}'
    "</action><response>two is $two</response>",
    "hermes": '<tool_call>{"name": "echo", "arguments": {"value": %s}}</tool_call>'
    '<tool_call>{"name": "echo", "arguments": {"value": 2}}</tool_call>',
    "sigil": '§CALLS:\n[{"name": "echo", "args": {"value": %s}}, '
    '{"name": "echo", "args": {"value": 2}}]\n§EXECUTE:\n--- next turn ---\n'
    "§RESPOND:\ndone\n§END:",
    "cogency": '<execute>[{"name": "echo", "args": {"value": %s}}, '
    '{"name": "echo", "args": {"value": 2}}]</execute>\n--- next turn ---\n'
    "<respond>done</respond>",
}


@pytest.mark.parametrize("dialect", sorted(REPLIES))
async def test_an_action_nested_too_deep_fails_alone_and_the_run_goes_on(dialect: str) -> None:
    model = ScriptModel(REPLIES[dialect] % DEEP, chunk_size=64)
    run = await run_agent("go", model=model, registry=registry(), dialect=dialect)
    assert run.status == "completed"
    failed = [node for node in run.actions.values() if node.status == "failed"]
    done = [node for node in run.actions.values() if node.status == "done"]
    assert len(failed) == 1 and [node.output for node in done] == [2]
    assert f"nested too deep (over {MAX_JSON_DEPTH} levels" in (failed[0].error or "")
    assert [error.code for error in run.errors] == ["too_large"]
    assert run.to_jsonl()  # the transcript can be written


async def test_a_native_tool_call_nested_too_deep_fails_alone() -> None:
    model = Scripted(
        [
            ToolCallStart(0, "call_1", "echo"),
            ToolCallReady(0, "call_1", "echo", '{"value": ' + DEEP + "}"),
            ToolCallStart(1, "call_2", "echo"),
            ToolCallReady(1, "call_2", "echo", '{"value": 2}'),
            Finish("tool_calls"),
        ],
        [TextChunk("<response>done</response>"), Finish("stop")],
    )
    run = await run_agent("go", model=model, registry=registry(), native_tools=True)
    assert run.status == "completed" and run.response == "done"
    assert run.actions["call_1"].status == "failed"
    assert "nested too deep" in (run.actions["call_1"].error or "")
    assert run.actions["call_2"].output == 2
    # The model is told why, in one short result.
    result = model.calls[1][-2]
    assert result["tool_call_id"] == "call_1" and "nested too deep" in result["content"]


@pytest.mark.parametrize("levels", [600, 1500])
async def test_a_deep_output_is_kept_and_its_transcript_written_and_read_back(
    levels: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEEP_TEST_API_KEY", KEY)
    params = json.dumps({"levels": levels, "secret": KEY})
    model = ScriptModel(
        f'<action id="d">{{"name": "deep", "parameters": {params}, "output_key": "d"}}'
        "</action><response>ok</response>"
    )
    run = await run_agent("go", model=model, registry=registry())
    assert run.status == "completed" and run.actions["d"].status == "done"
    output = run.actions["d"].output
    assert output[0] == KEY and run.variables["d"] is output  # the user's data stays exact
    text = run.to_jsonl()
    assert KEY not in text
    back = Run.from_jsonl(text)
    assert isinstance(back.actions["d"].output, OutputRepr)  # too deep for JSON: its repr
    assert back.actions["d"].status == "done" and back.status == "completed"


def test_redact_value_replaces_what_is_too_deep_to_walk_and_leaks_nothing() -> None:
    secrets = Secrets({"DEEP_TEST_API_KEY": KEY})
    value = {"top": KEY, "deep": nested(600, [KEY])}
    redacted = secrets.redact_value(value)
    assert redacted["top"] == REDACTED
    assert KEY not in repr(redacted)
    inner = redacted["deep"]
    while isinstance(inner, list):
        inner = inner[0]
    assert inner == TOO_DEEP
    assert secrets.redact_value({"shallow": nested(50, [KEY])})["shallow"] == nested(50, [REDACTED])


def test_resolving_parameters_nested_too_deep_is_one_clear_error() -> None:
    params = {"x": nested(MAX_JSON_DEPTH + 5, ["$name"])}
    assert find_references(params) == set()  # looked no deeper than the limit, no crash
    with pytest.raises(NestedTooDeep, match=f"nested too deep \\(over {MAX_JSON_DEPTH} levels"):
        resolve(params, [{"name": 1}])
    fits = {"x": nested(MAX_JSON_DEPTH - 2, ["$name"])}
    assert find_references(fits) == {"name"}
    assert resolve(fits, [{"name": 1}]) == {"x": nested(MAX_JSON_DEPTH - 2, [1])}

"""JSON nested too deep: the action it is in is refused with one error, the rest is read.

A body nested a thousand levels deep used to raise ``RecursionError`` out of the
parser (``json.loads`` overflows Python's stack), ending the whole run with a traceback.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cortex_jupyter.protocol import MAX_JSON_DEPTH, ActionReady, ProtocolError, parse
from cortex_jupyter.protocol.actions import too_deep

DEEP = "[" * 1500 + "]" * 1500

#: dialect -> a reply whose first call holds ``{x}`` as a parameter value and whose
#: second call is fine, then an answer.
REPLIES = {
    "cortex": '<action id="a">{{"name": "f", "parameters": {{"x": {x}}}}}</action>'
    '<action id="b">{{"name": "g"}}</action><response>done</response>',
    "cortex-name-attribute": '<action id="a" name="f">{{"x": {x}}}</action>'
    '<action id="b" name="g"></action><response>done</response>',
    "hermes": '<tool_call>{{"name": "f", "arguments": {{"x": {x}}}}}</tool_call>'
    '<tool_call>{{"name": "g", "arguments": {{}}}}</tool_call>done',
    "hermes-string-arguments": '<tool_call>{{"name": "f", "arguments": {xs}}}</tool_call>'
    '<tool_call>{{"name": "g", "arguments": {{}}}}</tool_call>done',
    "sigil": '§CALLS:\n[{{"name": "f", "args": {{"x": {x}}}}}, {{"name": "g", "args": {{}}}}]\n'
    "§RESPOND:\ndone\n§END:",
    "cogency": '<execute>[{{"name": "f", "args": {{"x": {x}}}}}, {{"name": "g", "args": {{}}}}]'
    "</execute><respond>done</respond>",
}


def _reply(case: str, value: str) -> tuple[str, str]:
    dialect = case.partition("-")[0]
    return dialect, REPLIES[case].format(x=value, xs=json.dumps('{"x": ' + value + "}"))


def _nested(levels: int) -> str:
    return "[" * levels + "]" * levels


@pytest.mark.parametrize("case", sorted(REPLIES))
def test_json_nested_too_deep_refuses_its_action_and_the_rest_runs(case: str) -> None:
    dialect, text = _reply(case, DEEP)
    events = parse(text, dialect)
    errors = [e for e in events if isinstance(e, ProtocolError)]
    assert [e.code for e in errors] == ["too_large"]
    assert f"nested too deep (over {MAX_JSON_DEPTH} levels" in errors[0].message
    assert "It was not run." in errors[0].message
    assert len(errors[0].message) < 400  # one line, the body quoted short
    assert errors[0].id is not None and errors[0].source  # the refused text is kept
    actions = [e.action for e in events if isinstance(e, ActionReady)]
    assert [a.name for a in actions] == ["g"]
    answer = "".join(getattr(e, "text", "") for e in events if e.kind == "response")
    assert answer.strip() == "done"


def test_nesting_up_to_the_limit_is_read_and_one_more_level_is_refused() -> None:
    # The body's own object and "parameters" are two of the levels.
    body = '<action id="a">{{"name": "f", "parameters": {{"x": {x}}}}}</action>'
    fits = parse(body.format(x=_nested(MAX_JSON_DEPTH - 2)))
    assert [e.kind for e in fits] == ["action_start", "action"]
    over = parse(body.format(x=_nested(MAX_JSON_DEPTH - 1)))
    assert [e.kind for e in over] == ["action_start", "error"]


def test_brackets_inside_strings_are_data_not_depth() -> None:
    text = '<action id="a">{"name": "f", "parameters": {"x": "%s"}}</action>' % ("[{" * 900)
    events = parse(text)
    assert [e.kind for e in events] == ["action_start", "action"]
    ready = events[1]
    assert isinstance(ready, ActionReady) and ready.action.parameters == {"x": "[{" * 900}


@pytest.mark.parametrize(
    ("text", "deep"),
    [
        ("[]", False),
        (_nested(MAX_JSON_DEPTH), False),
        (_nested(MAX_JSON_DEPTH + 1), True),
        ("[" * 101 + "1, {" + "}" + "]" * 101, True),
        ('{"a": "\\"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}' + "[]" * 200, False),
        ("[" * 300, False),  # unbalanced: json.loads says what is wrong
    ],
)
def test_too_deep_counts_levels_not_brackets(text: str, deep: bool) -> None:
    assert too_deep(text) is deep


def _depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


_TEXT = st.text(alphabet='[]{}"\\ab', max_size=4)
_VALUES = st.recursive(
    st.integers() | _TEXT,
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(_TEXT, kids, max_size=3),
    max_leaves=30,
)


@given(_VALUES, st.integers(0, 8))
def test_too_deep_agrees_with_the_depth_of_any_value(value: object, limit: int) -> None:
    assert too_deep(json.dumps(value), limit) is (_depth(value) > limit)

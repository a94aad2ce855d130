"""Grammars for protocol-constrained decoding: what they admit, checked by a GBNF
recognizer (tests/runtime/gbnf.py), and that what they admit is what the runtime runs."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cortex_jupyter.protocol import Parser
from cortex_jupyter.protocol.events import ActionReady, ProtocolError
from cortex_jupyter.runtime.loop.grammar import Constraint, _Rules, reply_grammar, schema_rules

from .gbnf import accepts, parse

WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "units": {"enum": ["c", "f"]},
            "days": {"type": "integer"},
        },
        "required": ["city"],
    },
}
ADD = {
    "name": "add",
    "description": "Add numbers.",
    "parameters": {
        "type": "object",
        "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
        "required": ["a", "b"],
    },
}
TOOLS = [WEATHER, ADD]


def cortex_action(body: dict[str, Any] | str, id: str = "w1") -> str:
    text = body if isinstance(body, str) else json.dumps(body)
    return f'<action type="tool" mode="async" id="{id}">{text}</action>'


def runs(dialect: str, reply: str) -> list[ActionReady | ProtocolError]:
    parser = Parser(dialect)
    events = [*parser.feed(reply), *parser.close()]
    return [e for e in events if isinstance(e, ActionReady | ProtocolError)]


@pytest.mark.parametrize(
    "body",
    [
        {"name": "get_weather", "parameters": {"city": "Paris"}},
        {"name": "get_weather", "parameters": {"city": "Paris", "units": "c", "days": 3}},
        {"name": "get_weather", "parameters": {"city": "Paris", "days": 2}, "output_key": "w"},
        {"name": "get_weather", "parameters": {"city": "$town", "days": "$n"}},
        {"name": "add", "parameters": {"a": 1.5, "b": -2}, "depends_on": ["w0", "s9"]},
        {"name": "add", "parameters": {"a": 1, "b": 2}, "output_key": "s", "depends_on": []},
    ],
)
def test_cortex_action_grammar_admits_calls_that_fit_and_they_run(body: dict[str, Any]) -> None:
    grammar = reply_grammar("cortex", TOOLS, known_ids=["w0", "s9"])
    reply = "\n" + cortex_action(body)
    assert accepts(grammar, reply)
    [event] = runs("cortex", reply)
    assert isinstance(event, ActionReady) and event.action.name == body["name"]


@pytest.mark.parametrize(
    "reply",
    [
        cortex_action({"name": "get_wether", "parameters": {"city": "Paris"}}),  # unknown tool
        cortex_action({"name": "get_weather", "parameters": {}}),  # required city missing
        cortex_action({"name": "get_weather", "parameters": {"city": 3}}),  # not a string
        cortex_action({"name": "get_weather", "parameters": {"city": "P", "units": "k"}}),
        cortex_action({"name": "get_weather", "parameters": {"city": "P", "days": "3"}}),
        cortex_action({"name": "add", "parameters": {"a": 1, "b": 2, "c": 3}}),  # unknown
        cortex_action({"name": "add", "parameters": {"a": 1}}),
        cortex_action({"name": "add", "parameters": {"a": 1, "b": 2}, "output_key": 4}),
        cortex_action({"name": "add", "parameters": {"a": 1, "b": 2}, "depends_on": "w1"}),
        "It is 18 degrees in Paris.",  # an answer where a call is due
        "<response>It is 18 degrees.</response>",
        '<action type="tool" mode="async" id="w1">{"name": "add"',  # cut off
    ],
)
def test_cortex_action_grammar_refuses_what_would_not_run(reply: str) -> None:
    assert not accepts(reply_grammar("cortex", TOOLS), reply)


def test_depends_on_names_only_ids_of_earlier_actions() -> None:
    # SmolLM2 wrote "depends_on": ["city"] when any id was admitted: the call then
    # waited for an action that does not exist, and never ran.
    call = {"name": "add", "parameters": {"a": 1, "b": 2}}
    made_up = cortex_action({**call, "depends_on": ["city"]})
    assert not accepts(reply_grammar("cortex", TOOLS), made_up)
    assert not accepts(reply_grammar("cortex", TOOLS, known_ids=["w0"]), made_up)
    earlier = cortex_action({**call, "depends_on": ["w0"]})
    assert accepts(reply_grammar("cortex", TOOLS, known_ids=["w0"]), earlier)
    assert not accepts(reply_grammar("cortex", TOOLS), earlier)


def test_only_registered_tool_names_are_admitted() -> None:
    grammar = reply_grammar("cortex", [ADD])
    ok = cortex_action({"name": "add", "parameters": {"a": 1, "b": 2}})
    assert accepts(grammar, ok)
    assert not accepts(grammar, ok.replace('"add"', '"get_weather"'))
    assert not accepts(grammar, ok.replace('"add"', '"ad"'))


def test_hermes_action_grammar_admits_tool_calls_of_known_tools_only() -> None:
    grammar = reply_grammar("hermes", TOOLS)
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    assert accepts(grammar, call)
    [event] = runs("hermes", call)
    assert isinstance(event, ActionReady) and event.action.parameters == {"city": "Oslo"}
    assert not accepts(grammar, call.replace("get_weather", "get_time"))
    assert not accepts(grammar, call.replace('"arguments"', '"parameters"'))
    assert not accepts(grammar, "It is cold in Oslo.")


def test_an_action_turn_holds_at_most_max_actions_calls() -> None:
    one = cortex_action({"name": "add", "parameters": {"a": 1, "b": 2}})
    two = one + "\n" + one.replace("w1", "w2")
    assert accepts(reply_grammar("cortex", TOOLS), one)
    assert not accepts(reply_grammar("cortex", TOOLS), two)
    assert accepts(reply_grammar("cortex", TOOLS, max_actions=2), two)
    assert not accepts(reply_grammar("cortex", TOOLS, max_actions=2), two + "\n" + one)


def test_the_answer_grammar_admits_a_response_and_no_action() -> None:
    cortex = reply_grammar("cortex", TOOLS, "answer")
    assert accepts(cortex, "<response>It is 18 °C in Paris.</response>")
    assert not accepts(cortex, cortex_action({"name": "add", "parameters": {"a": 1, "b": 2}}))
    hermes = reply_grammar("hermes", TOOLS, "answer")
    assert accepts(hermes, "It is 18 °C in Paris.")
    assert not accepts(hermes, '<tool_call>{"name": "add", "arguments": {}}</tool_call>')
    events = runs("cortex", "<response>It is 18 °C.</response>")
    assert events == []


def test_either_admits_an_action_or_an_answer() -> None:
    grammar = reply_grammar("cortex", TOOLS, "either")
    assert accepts(grammar, cortex_action({"name": "add", "parameters": {"a": 1, "b": 2}}))
    assert accepts(grammar, "<response>Done.</response>")
    assert not accepts(grammar, "Done.")


def test_sigil_and_cogency_grammars_admit_call_lists_that_run() -> None:
    sigil = '§CALLS: [{"name": "add", "args": {"a": 1, "b": 2}}]\n§EXECUTE:'
    assert accepts(reply_grammar("sigil", TOOLS), sigil)
    assert isinstance(runs("sigil", sigil)[0], ActionReady)
    cogency = '<execute>[{"name": "add", "args": {"a": 1, "b": 2}}]</execute>'
    assert accepts(reply_grammar("cogency", TOOLS), cogency)
    assert isinstance(runs("cogency", cogency)[0], ActionReady)
    assert not accepts(reply_grammar("cogency", TOOLS), cogency.replace("add", "sub"))


def expression(schema: Any, *, references: bool = False) -> str:
    rules = _Rules()
    root = schema_rules(schema, rules, "value", references=references)
    rules.rules = {"root": root, **rules.rules}
    base = reply_grammar("cortex", [], "answer").split("\n", 1)[1]
    return rules.text() + "\n" + base


@pytest.mark.parametrize(
    ("schema", "good", "bad"),
    [
        ({"type": "boolean"}, ["true", "false"], ["1", '"true"']),
        ({"type": "integer"}, ["0", "-12"], ["1.5", "01", '"3"']),
        ({"type": "number"}, ["1.5", "-2e3", "7"], ["1.", "abc"]),
        ({"type": "null"}, ["null"], ["None"]),
        ({"type": "array", "items": {"type": "integer"}}, ["[]", "[1, 2]"], ['["a"]', "[1,]"]),
        ({"enum": ["a", 1, None]}, ['"a"', "1", "null"], ['"b"', "2"]),
        ({"const": "x"}, ['"x"'], ['"y"']),
        ({"anyOf": [{"type": "string"}, {"type": "integer"}]}, ['"s"', "3"], ["true"]),
        ({"type": ["string", "null"]}, ['"s"', "null"], ["3"]),
        (
            {
                "type": "object",
                "properties": {"p": {"type": "object", "properties": {"q": {"type": "boolean"}}}},
            },
            ["{}", '{"p": {}}', '{"p": {"q": true}}'],
            ['{"p": {"q": 1}}', '{"r": 1}'],
        ),
        (
            {"type": "object", "properties": {"x": {}, "y": {}}},
            ['{"y": 1}', '{"x": [], "y": 2}'],
            ['{"y": 1, "x": 2}'],
        ),
        ({"format": "something-unknown"}, ['{"any": [1, "json"]}', "3"], ["{bad}"]),
        ({"type": "object"}, ['{"k": 1}', "{}"], ["[]"]),
    ],
)
def test_json_schema_to_gbnf(schema: Any, good: list[str], bad: list[str]) -> None:
    grammar = expression(schema)
    for text in good:
        assert accepts(grammar, text), text
    for text in bad:
        assert not accepts(grammar, text), text


def test_a_reference_stands_for_any_typed_parameter() -> None:
    assert accepts(expression({"type": "integer"}, references=True), '"$count"')
    assert accepts(expression({"type": "integer"}, references=True), '"$run.total"')
    assert not accepts(expression({"type": "integer"}, references=False), '"$count"')


def test_tool_names_that_gbnf_cannot_name_still_make_valid_rules() -> None:
    odd = [{**ADD, "name": "fs.read_file"}, {**ADD, "name": "fs-read-file"}]
    grammar = reply_grammar("cortex", odd)
    assert len(parse(grammar)) == len(grammar.strip().splitlines())  # no rule lost
    ok = cortex_action({"name": "fs.read_file", "parameters": {"a": 1, "b": 2}})
    assert accepts(grammar, ok)
    assert accepts(grammar, ok.replace("fs.read_file", "fs-read-file"))


def test_bad_requests_are_one_clear_line() -> None:
    with pytest.raises(ValueError, match="no grammar for the 'auto' dialect") as info:
        reply_grammar("auto", TOOLS)
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="no tools are registered"):
        reply_grammar("cortex", [])


def test_the_request_fields_for_each_server() -> None:
    assert Constraint("root ::= x").body() == {"grammar": "root ::= x"}
    assert Constraint("root ::= x", "vllm").body() == {
        "structured_outputs": {"grammar": "root ::= x"}
    }

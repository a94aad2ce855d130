"""Grammars for protocol-constrained decoding: what they admit, checked by a GBNF
recognizer (tests/runtime/gbnf.py), and that what they admit is what the runtime runs."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cortex_jupyter.protocol import Parser
from cortex_jupyter.protocol.events import ActionReady, ProtocolError, ResponseDelta, TextDelta
from cortex_jupyter.runtime import Registry
from cortex_jupyter.runtime.core.values.variables import REFERENCE
from cortex_jupyter.runtime.loop.grammar import (
    GRAMMAR_DIALECTS,
    ORDER_LIMIT,
    Constraint,
    Stage,
    _Rules,
    reply_grammar,
    schema_rules,
)

from .gbnf import accepts, left_recursive, parse, sampler

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


BOX = {
    "type": "object",
    "properties": {"w": {"type": "number"}, "tag": {"type": "string"}},
    "required": ["w"],
    "additionalProperties": False,
}
MCP_SCHEMAS = {
    # FastMCP writes a pydantic model parameter as a $ref into $defs.
    "ref": {
        "type": "object",
        "properties": {"box": {"$ref": "#/$defs/Box"}},
        "required": ["box"],
        "$defs": {"Box": BOX},
    },
    "recursive-ref": {
        "type": "object",
        "properties": {"node": {"$ref": "#/$defs/Node"}},
        "required": ["node"],
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {
                    "v": {"type": "integer"},
                    "kids": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                },
                "required": ["v"],
                "additionalProperties": False,
            }
        },
    },
    # Older pydantic wraps a $ref in a one-item allOf to give it a description.
    "allOf-ref": {
        "type": "object",
        "properties": {"box": {"allOf": [{"$ref": "#/definitions/Box"}], "description": "A box"}},
        "required": ["box"],
        "definitions": {"Box": BOX},
    },
    "allOf": {
        "type": "object",
        "properties": {"n": {"allOf": [{"type": "integer"}, {"description": "a count"}]}},
        "required": ["n"],
    },
    "items-bounds": {
        "type": "object",
        "properties": {
            "xs": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 3}
        },
        "required": ["xs"],
    },
}


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
            # Any order (the schema names none), each property once, no other key.
            {"type": "object", "properties": {"x": {}, "y": {}}},
            ['{"y": 1}', '{"x": [], "y": 2}', '{"y": 1, "x": 2}', '{\n  "y": 1,\n  "x": 2\n}'],
            ['{"x": 1, "x": 2}', '{"z": 1}', '{"y": 1,}'],
        ),
        (
            {"type": "object", "properties": {}, "additionalProperties": False},
            ["{}", "{ }", "{\n}"],
            ['{"time": 1}', '{"": 1}'],
        ),
        (
            {
                "type": "object",
                "properties": {"a": {"type": "integer"}},
                "required": ["a"],
                "additionalProperties": True,
            },
            ['{"a": 1}', '{"b": "x", "a": 1, "c": [1]}', '{"ab": 2, "a": 1}'],
            ['{"b": 1}', '{"a": "x"}', '{"a": 1, "a": 2}'],
        ),
        (
            # A declared name JSON must escape: another key is still never that name.
            {"type": "object", "properties": {'a"b': {}, "ab": {}}, "additionalProperties": True},
            ['{"a\\"b": 1, "ac": 2}', '{"a": 1, "ab": 2}'],
            ['{"ab": 1, "ab": 2}', '{"a"b": 1}'],
        ),
        (
            {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 3},
            ["[1, 2]", '[1, "$n", 3]'],
            ["[]", "[1]", "[1, 2, 3, 4]"],
        ),
        ({"type": "array", "minItems": 1}, ["[1]", '[1, "a", null, 4]'], ["[]"]),
        ({"type": "array", "maxItems": 0}, ["[]", "[ ]"], ["[1]"]),
        (
            {
                "$ref": "#/$defs/Node",
                "$defs": {"Node": MCP_SCHEMAS["recursive-ref"]["$defs"]["Node"]},
            },
            ['{"v": 1}', '{"kids": [{"v": 2, "kids": []}], "v": 1}'],
            ['{"v": 1, "kids": [{}]}', '{"v": 1, "kids": [3]}', "null"],
        ),
        ({"allOf": [{"type": "integer"}, {"minimum": 0}]}, ["3"], ['"3"', "1.5"]),
        (
            # A required name the properties leave out is still required (any value).
            {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a", "b"]},
            ['{"a": 1, "b": "x"}', '{"b": null, "a": 2}'],
            ['{"a": 1}', '{"b": 1}'],
        ),
        (
            # Draft 3 wrote "required": true (on a property, so an object may hold it too).
            {"type": "object", "properties": {"a": {"type": "integer"}}, "required": True},
            ['{"a": 1}', "{}"],
            ['{"a": "x"}'],
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
    # Inside arrays and nested objects too: the runtime resolves a reference anywhere.
    ints = {"type": "array", "items": {"type": "integer"}}
    assert accepts(expression(ints), '[1, "$n", "$run.total"]')
    nested = {"type": "object", "properties": {"p": {"type": "object", "properties": {
        "q": {"type": "boolean"}, "r": ints}}}}  # fmt: skip
    assert accepts(expression(nested), '{"p": {"r": ["$n"], "q": "$flag"}}')
    assert accepts(expression(nested), '{"p": "$box"}')
    # ... written as the runtime reads one: "$a.b" reaches inside, "$a." and "$1" are text.
    for text in ('"$a."', '"$1"', '"$a..b"', '"$"'):
        assert not accepts(expression({"type": "integer"}, references=True), text)


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


# ---- what a grammar admits is what runs, both ways ----------------------------------
# Sampling 400 texts from each dialect's grammar found calls that did not run (a tool
# with no parameters got any object) and calls that run but were refused (properties
# out of order, newlines, "$name" as an array item, a **kwargs tool's other keys).

SAMPLES = 400


@dataclass
class Box:
    width: float
    height: float
    label: str = ""


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def sampling_registry() -> Registry:
    """Tools of every shape a schema takes: no parameters, optional ones, an enum, a
    union with null, a **kwargs tool, arrays, a nested object, more properties than
    ``ORDER_LIMIT`` (two required), more required ones than it. Each checks the types it
    was given, so a call that ran with a wrong value fails its node."""
    registry = Registry(builtins=False)

    def now() -> str:
        """The time."""
        return "12:00"

    def weather(city: str, units: Literal["c", "f"] = "c", days: int | None = None) -> str:
        """The weather."""
        assert isinstance(city, str) and units in ("c", "f")
        assert days is None or (isinstance(days, int) and not isinstance(days, bool))
        return "sunny"

    def tag(label: str, **extra: Any) -> str:
        """Tag something."""
        assert isinstance(label, str)
        return label

    def total(values: list[float], weights: list[int] | None = None) -> float:
        """A weighted total."""
        assert all(_is_number(v) for v in values)
        assert weights is None or all(_is_number(w) and isinstance(w, int) for w in weights)
        return float(len(values))

    def area(box: Box, scale: float = 1.0) -> float:
        """A box's area."""
        assert isinstance(box, dict) and set(box) <= {"width", "height", "label"}
        assert _is_number(box["width"]) and _is_number(box["height"]) and _is_number(scale)
        assert isinstance(box.get("label", ""), str)
        return 1.0

    def wide(
        a: int, b: str, c: int = 0, d: str = "", e: bool = False, f: float = 0.0, g: str = ""
    ) -> str:
        """Seven properties, two required."""
        assert isinstance(a, int) and isinstance(b, str) and isinstance(e, bool)
        return "ok"

    def strict(p1: int, p2: int, p3: int, p4: int, p5: int, p6: int, p7: int) -> int:
        """Seven required properties."""
        assert all(isinstance(p, int) for p in (p1, p2, p3, p4, p5, p6, p7))
        return p1

    for function in (now, weather, tag, total, area, wide, strict):
        registry.tool(function)
    return registry


def fits(value: Any, schema: Any) -> bool:
    """Whether ``value`` fits JSON schema ``schema`` as the runtime reads it: a string
    that is a whole ``$name`` reference stands for any value (it is resolved before the
    call); an object that declares properties takes no others unless it says so."""
    if isinstance(value, str) and REFERENCE.fullmatch(value) and not value.startswith("$$"):
        return True
    if not isinstance(schema, Mapping) or not schema:
        return True
    if "const" in schema:
        return bool(value == schema["const"])
    if "enum" in schema:
        return any(value == e and type(value) is type(e) for e in schema["enum"])
    options = schema.get("anyOf") or schema.get("oneOf")
    if options:
        return any(fits(value, o) for o in options)
    kind = schema.get("type")
    if isinstance(kind, list):
        return any(fits(value, {**schema, "type": k}) for k in kind)
    checks = {
        "string": lambda: isinstance(value, str),
        "integer": lambda: isinstance(value, int) and not isinstance(value, bool),
        "number": lambda: _is_number(value),
        "boolean": lambda: isinstance(value, bool),
        "null": lambda: value is None,
        "array": lambda: (
            isinstance(value, list) and all(fits(v, schema.get("items")) for v in value)
        ),
        "object": lambda: isinstance(value, dict) and _fits_object(value, schema),
    }
    if kind is None and "properties" in schema:
        kind = "object"
    return checks[kind]() if kind in checks else True


def _fits_object(value: dict[str, Any], schema: Mapping[str, Any]) -> bool:
    props = schema.get("properties") or {}
    extra = schema.get("additionalProperties", not props)
    if any(name not in value for name in schema.get("required") or ()):
        return False
    for key, item in value.items():
        if key in props:
            if not fits(item, props[key]):
                return False
        elif extra is False or (isinstance(extra, Mapping) and not fits(item, extra)):
            return False
    return True


def assert_runs(dialect: str, text: str, registry: Registry, known: set[str]) -> int:
    """``text`` read by the dialect's parser is either calls that pass the registry's
    checks and fit their tool's schema, or a non-blank answer; the number of calls."""
    parser = Parser(dialect)
    events = [*parser.feed(text), *parser.close()]
    assert not [e for e in events if isinstance(e, ProtocolError)], (text, events)
    calls = [e.action for e in events if isinstance(e, ActionReady)]
    for call in calls:
        spec = registry.get("tool", call.name)
        spec.check(call.parameters)  # raises InvalidArguments
        assert fits(call.parameters, spec.parameters), (text, call.parameters)
        assert call.output_key is None or call.output_key.isidentifier(), text
        assert set(call.depends_on) <= known, text
    if not calls:
        answer = "".join(e.text for e in events if isinstance(e, ResponseDelta | TextDelta))
        assert answer.strip(), text
    return len(calls)


@pytest.mark.parametrize("stage", ["actions", "either", "answer"])
@pytest.mark.parametrize("dialect", GRAMMAR_DIALECTS)
def test_every_text_a_grammar_admits_runs(dialect: str, stage: Stage) -> None:
    registry = sampling_registry()
    tools = registry.schemas(("tool",))
    grammar = reply_grammar(dialect, tools, stage, max_actions=2, known_ids=["w0"])
    assert left_recursive(grammar) == []  # llama.cpp refuses a grammar with one
    sample, rng = sampler(grammar), random.Random(f"{dialect} {stage}")
    calls = [assert_runs(dialect, sample(rng), registry, {"w0"}) for _ in range(SAMPLES)]
    if stage == "actions":
        assert min(calls) >= 1
    if stage == "answer":
        assert max(calls) == 0
    if stage == "either":
        assert min(calls) == 0 and max(calls) >= 1


# -- the converse: every call that runs, in any order and spacing, is admitted


def whitespace() -> st.SearchStrategy[str]:
    return st.sampled_from(["", "", " ", "\n", "\n    ", "\t", "\r\n  ", "  "])


REFERENCES = st.from_regex(
    r"\$[A-Za-z_][A-Za-z0-9_]{0,4}(\.[A-Za-z0-9_]{1,3}){0,2}", fullmatch=True
)
KEYS = st.text(st.characters(exclude_characters='"\\', exclude_categories=("Cc", "Cs")), max_size=6)


def values(schema: Any, *, references: bool = True) -> st.SearchStrategy[Any]:
    """Values that fit ``schema`` (``fits``), references among them where allowed."""
    plain = _values(schema)
    return st.one_of(plain, REFERENCES) if references else plain


def _values(schema: Any) -> st.SearchStrategy[Any]:
    if not isinstance(schema, Mapping) or not schema:
        return st.one_of(st.integers(), st.text(max_size=5), st.none())
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "anyOf" in schema:
        return st.one_of([_values(o) for o in schema["anyOf"]])
    kind = schema.get("type")
    if isinstance(kind, list):
        return st.one_of([_values({**schema, "type": k}) for k in kind])
    simple: dict[str, st.SearchStrategy[Any]] = {
        "string": st.text(max_size=8),
        "integer": st.integers(-(10**6), 10**6),
        "number": st.one_of(st.integers(-99, 99), st.floats(-1e6, 1e6, allow_nan=False)),
        "boolean": st.booleans(),
        "null": st.none(),
    }
    if kind in simple:
        return simple[kind]
    if kind == "array":
        return st.lists(values(schema.get("items")), max_size=3)
    return objects(schema)


@st.composite
def objects(draw: st.DrawFn, schema: Mapping[str, Any], *, references: bool = True) -> Any:
    props = schema.get("properties") or {}
    required = list(schema.get("required") or ())
    chosen = required + [n for n in props if n not in required and draw(st.booleans())]
    pairs = [(n, draw(values(props[n], references=references))) for n in chosen]
    if schema.get("additionalProperties", not props) is not False:
        others = draw(
            st.dictionaries(KEYS.filter(lambda k: k not in props), _values({}), max_size=2)
        )
        pairs += list(others.items())
    order = draw(st.permutations(pairs))
    if len(required) > ORDER_LIMIT:  # the stated bound: then they come in declared order
        slots = iter(p for p in pairs if p[0] in required)
        order = [next(slots) if p[0] in required else p for p in order]
    return dict(order)


def dump(draw: st.DrawFn, value: Any) -> str:
    """``value`` as JSON, in its dicts' order, with whitespace between the tokens."""
    ws = lambda: draw(whitespace())  # noqa: E731
    if isinstance(value, dict):
        items = [f"{ws()}{json.dumps(k, ensure_ascii=False)}{ws()}:{ws()}{dump(draw, v)}{ws()}"
                 for k, v in value.items()]  # fmt: skip
        return "{" + (",".join(items) or ws()) + "}"
    if isinstance(value, list):
        return "[" + (",".join(f"{ws()}{dump(draw, v)}{ws()}" for v in value) or ws()) + "]"
    return json.dumps(value, ensure_ascii=False)


ARGS = {"cortex": "parameters", "hermes": "arguments", "sigil": "args", "cogency": "args"}


@st.composite
def calls(draw: st.DrawFn, dialect: str, tools: list[dict[str, Any]]) -> str:
    tool = draw(st.sampled_from(tools))
    args = draw(objects(tool["parameters"], references=True))
    envelope = [("name", tool["name"])]
    if args or tool["parameters"].get("required") or draw(st.booleans()):
        envelope.append((ARGS[dialect], args))
    if draw(st.booleans()):
        envelope.append(
            ("output_key", draw(st.from_regex(r"[a-z_][a-z0-9_]{0,5}", fullmatch=True)))
        )
    if draw(st.booleans()):
        envelope.append(("depends_on", draw(st.lists(st.just("w0"), max_size=2))))
    body = dump(draw, dict(draw(st.permutations(envelope))))
    ws = lambda: draw(whitespace())  # noqa: E731
    if dialect == "cortex":
        return f'{ws()}<action type="tool" mode="async" id="a1">{ws()}{body}{ws()}</action>'
    if dialect == "hermes":
        return f"{ws()}<tool_call>{ws()}{body}{ws()}</tool_call>"
    if dialect == "sigil":
        return f"{ws()}§CALLS: [{ws()}{body}{ws()}]\n§EXECUTE:"
    return f"{ws()}<execute>[{ws()}{body}{ws()}]</execute>"


@pytest.mark.parametrize("dialect", GRAMMAR_DIALECTS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_call_that_runs_is_admitted(dialect: str, data: st.DataObject) -> None:
    registry = sampling_registry()
    tools = registry.schemas(("tool",))
    text = data.draw(calls(dialect, tools))
    assert assert_runs(dialect, text, registry, {"w0"}) == 1  # the call is valid...
    grammar = reply_grammar(dialect, tools, known_ids=["w0"])
    assert accepts(grammar, text), text  # ...and admitted


def test_a_tool_with_no_parameters_takes_an_empty_object_only() -> None:
    # SmolLM2 wrote {"time": ...} for `def now() -> str` when any object was admitted:
    # the call was then refused (no parameter "time").
    [now] = [t for t in sampling_registry().schemas(("tool",)) if t["name"] == "now"]
    grammar = reply_grammar("hermes", [now])
    for args in ("{}", "{ }", "{\n}"):
        assert accepts(grammar, f'<tool_call>{{"name": "now", "arguments": {args}}}</tool_call>')
    assert accepts(grammar, '<tool_call>{"name": "now"}</tool_call>')
    assert not accepts(grammar, '<tool_call>{"name": "now", "arguments": {"time": 1}}</tool_call>')


@pytest.mark.parametrize("dialect", GRAMMAR_DIALECTS)
def test_answer_grammars_refuse_a_blank_answer(dialect: str) -> None:
    blank = {
        "cortex": "<response> \n </response>",
        "hermes": " \n\t",
        "sigil": "§RESPOND:  \n§END:",
        "cogency": "<respond> </respond><end>",
    }[dialect]
    grammar = reply_grammar(dialect, [ADD], "answer")
    assert not accepts(grammar, blank)
    assert accepts(
        grammar, blank.replace(" \n", " 42\n", 1).replace("> <", ">42<").replace(" \n\t", "42")
    )


# ---- MCP schemas: what the server's schema check (jsonschema) refuses is not admitted


def _mcp_tool(schema: dict[str, Any]) -> Any:
    from cortex_jupyter.runtime.integrations.mcp.schema import McpTool

    return McpTool("srv.t", "tool", None, "A tool.", schema, server="srv", tool="t")


def _schema_problems(value: Any, schema: Mapping[str, Any]) -> list[str]:
    """What jsonschema refuses in ``value``, leaving out ``"$name"`` references (the
    runtime resolves them before the check)."""
    from jsonschema import Draft202012Validator

    def reference(error: Any) -> bool:
        inst = error.instance
        return isinstance(inst, str) and bool(REFERENCE.fullmatch(inst))

    errors = Draft202012Validator(schema).iter_errors(value)
    return [e.message for e in errors if not reference(e)]


@pytest.mark.parametrize("dialect", GRAMMAR_DIALECTS)
@pytest.mark.parametrize("shape", MCP_SCHEMAS)
def test_mcp_schemas_admit_only_what_the_schema_check_passes(dialect: str, shape: str) -> None:
    schema = MCP_SCHEMAS[shape]
    tool = _mcp_tool(schema)
    grammar = reply_grammar(dialect, [tool.schema()])
    assert left_recursive(grammar) == []  # llama.cpp refuses a grammar with one
    sample, rng = sampler(grammar), random.Random(f"{dialect} {shape}")
    for _ in range(150):
        text = sample(rng)
        parser = Parser(dialect)
        events = [*parser.feed(text), *parser.close()]
        [call] = [e.action for e in events if isinstance(e, ActionReady)]
        assert call.name == "srv.t"
        assert not _schema_problems(dict(call.parameters), schema), (text, call.parameters)


ANSWER_FORMS = {
    "cortex": "<response>{}</response>",
    "hermes": "{}",
    "sigil": "§RESPOND: {}§END:",
    "cogency": "<respond>{}</respond><end>",
}


def _answer(dialect: str, text: str) -> str:
    parser = Parser(dialect)
    events = [*parser.feed(text), *parser.close()]
    return "".join(e.text for e in events if isinstance(e, ResponseDelta | TextDelta))


@pytest.mark.parametrize("dialect", GRAMMAR_DIALECTS)
def test_an_answer_of_unicode_whitespace_is_blank_too(dialect: str) -> None:
    # The parser strips what str.strip() strips: a no-break or ideographic space, a line
    # separator, a form feed make an answer as blank as a space does.
    grammar = reply_grammar(dialect, [ADD], "either")
    for blank in ("\u00a0", "\u3000", "\u2028", "\x0b", "\x0c", " \u00a0\u2003 ", "\x85"):
        text = ANSWER_FORMS[dialect].format(blank)
        assert not _answer(dialect, text).strip()
        assert not accepts(grammar, text), repr(text)
    for answer in ("\u00a0 42", "42\u3000", "\u2003x\u2003"):
        text = ANSWER_FORMS[dialect].format(answer)
        assert _answer(dialect, text).strip() == answer.strip()
        assert accepts(grammar, text), repr(text)


@pytest.mark.parametrize("dialect", GRAMMAR_DIALECTS)
def test_an_answer_may_compare_numbers(dialect: str) -> None:
    # "<" that starts no tag is text to the parser: an answer holding one is admitted.
    grammar = reply_grammar(dialect, [ADD], "answer")
    for answer in ("3 < 4", "x<3 and y <= 2", "a <- b", "1 <2"):
        text = ANSWER_FORMS[dialect].format(answer)
        assert _answer(dialect, text) == answer
        assert accepts(grammar, text), repr(text)


def test_one_schema_used_many_times_is_written_once() -> None:
    # An object of six optional properties is 64 rules (one per set written so far);
    # six parameters of the same model wrote them six times, and a tool or two of such
    # models made a grammar of megabytes for the server to read on every request.
    point = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(6)}}

    def grammar(count: int) -> str:
        props = {f"q{i}": point for i in range(count)}
        tool = {"name": "t", "parameters": {"type": "object", "properties": props}}
        return reply_grammar("cortex", [tool])

    one, six = grammar(1), grammar(6)
    assert len(six) < 2 * len(one)
    text = cortex_action({"name": "t", "parameters": {"q5": {"p5": 1, "p0": 2}, "q0": {}}})
    assert accepts(six, text)
    assert not accepts(six, text.replace('"p5"', '"p6"'))


@pytest.mark.parametrize(
    ("defs", "good", "bad"),
    [
        ({"N": {"$ref": "#/$defs/N"}}, ["3", '{"a": 1}'], []),  # only itself: anything
        ({"N": {"$ref": "#/$defs/M"}, "M": {"$ref": "#/$defs/N"}}, ["3"], []),
        # A union that names itself among its options is the other options (or any value).
        ({"N": {"anyOf": [{"$ref": "#/$defs/N"}, {"type": "integer"}]}}, ["3"], []),
        (
            {"N": {"allOf": [{"$ref": "#/$defs/M"}]}, "M": {"allOf": [{"$ref": "#/$defs/N"}]}},
            ["3"],
            [],
        ),
        (  # Past a bracket it is structure: a list of lists of ... integers.
            {
                "N": {
                    "anyOf": [
                        {"type": "integer"},
                        {"type": "array", "items": {"$ref": "#/$defs/N"}},
                    ]
                }
            },
            ["3", "[1, [2, [3]], []]"],
            ['"a"', '[1, ["a"]]'],
        ),
    ],
)
def test_a_ref_that_reaches_itself_makes_no_left_recursion(
    defs: dict[str, Any], good: list[str], bad: list[str]
) -> None:
    # llama.cpp refuses a grammar with a rule that reaches itself before reading a
    # character ("left recursion detected"): the whole request failed, every turn.
    schema = {"type": "object", "properties": {"x": {"$ref": "#/$defs/N"}}, "required": ["x"]}
    grammar = reply_grammar("cortex", [{"name": "t", "parameters": {**schema, "$defs": defs}}])
    assert left_recursive(grammar) == []
    for value in good:
        assert accepts(
            grammar, cortex_action({"name": "t", "parameters": {"x": json.loads(value)}})
        )
    for value in bad:
        text = cortex_action({"name": "t", "parameters": {"x": json.loads(value)}})
        assert not accepts(grammar, text), value


@pytest.mark.parametrize(
    ("shape", "params"),
    [
        ("ref", {"box": {"tag": "a", "w": 2}}),
        ("ref", {"box": {"w": "$width"}}),
        ("ref", {"box": "$box"}),
        ("recursive-ref", {"node": {"kids": [{"v": 2}, {"kids": [], "v": 3}], "v": 1}}),
        ("allOf-ref", {"box": {"tag": "b", "w": -1.5e3}}),
        ("allOf", {"n": 4}),
        ("items-bounds", {"xs": [1, "$n", 3]}),
    ],
)
@pytest.mark.parametrize("dialect", GRAMMAR_DIALECTS)
def test_mcp_calls_that_pass_the_schema_check_are_admitted(
    dialect: str, shape: str, params: dict[str, Any]
) -> None:
    schema = MCP_SCHEMAS[shape]
    assert not _schema_problems(params, schema)
    body = json.dumps({"name": "srv.t", ARGS[dialect]: params}, indent=1)
    text = {
        "cortex": cortex_action(body),
        "hermes": f"<tool_call>{body}</tool_call>",
        "sigil": f"§CALLS: [{body}]\n§EXECUTE:",
        "cogency": f"<execute>[{body}]</execute>",
    }[dialect]
    assert accepts(reply_grammar(dialect, [_mcp_tool(schema).schema()]), text)

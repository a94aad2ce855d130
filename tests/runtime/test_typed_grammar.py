"""Grammars for typed answers (``reply_grammar(typed=...)``): every dialect's answer block
holds JSON of the type's schema only. Checked with the GBNF recognizer both ways: what the
grammar admits is read by the dialect's parser as JSON that pydantic's ``TypeAdapter``
accepts, and the JSON of every value of the type is admitted (generated with hypothesis)."""

from __future__ import annotations

import enum
import json
import random
from dataclasses import dataclass
from typing import Any, Literal, Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError
from typing_extensions import NotRequired, TypedDict  # pydantic's TypedDict on 3.11

from cortex_jupyter.protocol import Parser
from cortex_jupyter.protocol.events import ActionReady, ResponseDelta, TextDelta
from cortex_jupyter.runtime.core.values.typed import OutputType
from cortex_jupyter.runtime.loop.grammar import GRAMMAR_DIALECTS, TypedAnswer, reply_grammar

from .gbnf import accepts, left_recursive, parse, sampler

# ---- the types: one of each kind a user may give ``output_type``


class Weather(BaseModel):
    city: str
    temp_c: int


class Sky(enum.Enum):
    CLEAR = "clear"
    RAIN = "rain"


class Report(BaseModel):  # nested models and an enum: $defs and $ref
    place: Weather
    sky: Sky
    note: str | None = None


class Node(BaseModel):  # recursive: a $ref to itself inside $defs
    v: int
    kids: list[Node] = []


@dataclass
class Point:
    x: float
    y: float
    label: str = ""


class Movie(TypedDict):
    title: str
    year: int
    rating: NotRequired[float]


TEXT = st.text(max_size=12)
#: Keys of a ``dict[str, ...]``: the grammar admits other keys unescaped only (its stated
#: bound, as for a call's ``**kwargs``), so no quote, backslash, control character, ``<``
#: or ``§`` (a key may not end the answer block early).
KEYS = st.text(
    st.characters(exclude_characters='"\\<§', exclude_categories=("Cc", "Cs")), max_size=8
)
INTS = st.integers(-(10**9), 10**9)
FLOATS = st.floats(allow_nan=False, allow_infinity=False)


def _nodes() -> st.SearchStrategy[Node]:
    return st.recursive(
        st.builds(Node, v=INTS, kids=st.just([])),
        lambda kids: st.builds(Node, v=INTS, kids=st.lists(kids, max_size=3)),
        max_leaves=8,
    )


#: (name, type, values of it, JSON texts of the wrong shape)
KINDS: list[tuple[str, Any, st.SearchStrategy[Any], list[str]]] = [
    (
        "model",
        Weather,
        st.builds(Weather, city=TEXT, temp_c=INTS),
        [
            '{"city": "Oslo"}',
            '{"city": 3, "temp_c": 4}',
            '{"city": "a", "temp_c": 4.5}',
            "[]",
            '"Oslo"',
        ],
    ),
    (
        "nested-enum",
        Report,
        st.builds(
            Report,
            place=st.builds(Weather, city=TEXT, temp_c=INTS),
            sky=st.sampled_from(Sky),
            note=st.none() | TEXT,
        ),
        [
            '{"place": {"city": "a", "temp_c": 1}, "sky": "snow"}',
            '{"place": {"city": "a"}, "sky": "rain"}',
            '{"sky": "rain"}',
        ],
    ),
    (
        "recursive",
        Node,
        _nodes(),
        ['{"v": 1, "kids": [{}]}', '{"v": 1, "kids": [3]}', '{"kids": []}', "null"],
    ),
    (
        "dataclass",
        Point,
        st.builds(Point, x=FLOATS, y=INTS, label=TEXT),
        ['{"x": 1}', '{"x": "1", "y": 2}', '{"x": 1, "y": null}'],
    ),
    (
        "typeddict",
        Movie,
        st.fixed_dictionaries({"title": TEXT, "year": INTS}, optional={"rating": FLOATS}),
        ['{"title": "Up"}', '{"title": "Up", "year": "2009"}', '{"year": 2009}'],
    ),
    ("list", list[int], st.lists(INTS, max_size=5), ['["1"]', "[1.5]", "{}", "1"]),
    ("dict", dict[str, int], st.dictionaries(KEYS, INTS, max_size=4), ['{"a": "1"}', "[]"]),
    ("literal", Literal["yes", "no"], st.sampled_from(["yes", "no"]), ['"maybe"', "true"]),
    ("literal-one", Literal["<ok>"], st.just("<ok>"), ['"ok"', '"<ok"']),
    ("optional", Optional[int], st.none() | INTS, ['"1"', "[]"]),  # noqa: UP045
    ("union", int | list[str], INTS | st.lists(TEXT, max_size=3), ['"a"', "[1]", "1.5"]),
    ("int", int, INTS, ["1.5", '"1"', "null"]),
    ("float", float, FLOATS | INTS, ['"1.5"', "null"]),
    ("str", str, TEXT, ["1", "null", "[]"]),
    ("bool", bool, st.booleans(), ["1", '"true"']),
    # A tuple's places each have their own type (``prefixItems``), not any value.
    ("tuple", tuple[int, str], st.tuples(INTS, TEXT), ["[1, 2]", '["a", "b"]', '[1, "a", 2]']),
    ("tuple-tail", tuple[int, ...], st.lists(INTS, max_size=4).map(tuple), ['["a"]', "[1.5]"]),
]
KIND_IDS = [kind[0] for kind in KINDS]

#: A typed answer in each dialect's answer block.
FORMS = {
    "cortex": "<response>{}</response>",
    "hermes": "{}",
    "sigil": "§RESPOND: {}§END:",
    "cogency": "<respond>{}</respond><end>",
}
#: What may end a dialect's answer block early, written ``\\uXXXX`` inside the JSON.
STOPS = {"cortex": "<", "hermes": "<", "cogency": "<", "sigil": "§"}


def grammar_for(dialect: str, kind: Any, names: list[str] | None = None) -> str:
    schema = TypeAdapter(kind).json_schema()
    return reply_grammar(dialect, [], "answer", typed=TypedAnswer(schema, names or []))


def answer_text(dialect: str, reply: str) -> str:
    """The answer the dialect's parser reads from ``reply`` (and no action)."""
    parser = Parser(dialect)
    events = [*parser.feed(reply), *parser.close()]
    assert not [e for e in events if isinstance(e, ActionReady)], reply
    return "".join(e.text for e in events if isinstance(e, ResponseDelta | TextDelta))


def as_json(dialect: str, kind: Any, value: Any) -> str:
    """``value``'s JSON as pydantic writes it, the dialect's stop character escaped."""
    text = TypeAdapter(kind).dump_json(value).decode()
    stop = STOPS[dialect]
    return text.replace(stop, f"\\u{ord(stop):04x}")


# ---- what a grammar admits is a valid object, read as the runtime reads the answer


@dataclass(frozen=True)
class Case:
    """A kind of typed answer (its values and wrong shapes) in one dialect, and its grammar."""

    dialect: str
    name: str
    kind: Any
    values: st.SearchStrategy[Any]
    bad: list[str]
    grammar: str


@pytest.fixture(scope="module", params=GRAMMAR_DIALECTS)
def grammar_dialect(request: pytest.FixtureRequest) -> str:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(scope="module", params=KINDS, ids=KIND_IDS)
def case(request: pytest.FixtureRequest, grammar_dialect: str) -> Case:
    """Every kind in every dialect (module-scoped: hypothesis tests take it too)."""
    name, kind, values, bad = request.param
    return Case(grammar_dialect, name, kind, values, bad, grammar_for(grammar_dialect, kind))


def test_every_answer_a_typed_grammar_admits_validates(case: Case) -> None:
    grammar = case.grammar
    assert left_recursive(grammar) == []  # llama.cpp refuses a grammar with one
    assert len(parse(grammar)) == len(grammar.strip().splitlines())  # every rule reads
    adapter, sample = TypeAdapter(case.kind), sampler(grammar)
    rng = random.Random(f"{case.dialect} {case.name}")
    for _ in range(60):
        reply = sample(rng)
        adapter.validate_json(answer_text(case.dialect, reply).strip())


def test_a_typed_grammar_refuses_wrong_shapes_and_plain_text(case: Case) -> None:
    for text in [*case.bad, "It is 4 degrees in Oslo.", "```json\n1\n```"]:
        with pytest.raises(ValidationError):
            # Wrong, or not JSON at all. (Strict: in lax mode pydantic also takes "1" for
            # 1; the grammar admits the JSON the schema describes, which is what it writes.)
            TypeAdapter(case.kind).validate_json(text, strict=True)
        assert not accepts(case.grammar, FORMS[case.dialect].format(text)), text


def test_a_model_takes_no_key_it_does_not_declare() -> None:
    # pydantic would ignore it; the grammar leaves it out, as for a call's parameters
    # (a small model's made-up key is never the field it should have written).
    grammar = grammar_for("cortex", Weather)
    assert not accepts(grammar, '<response>{"city": "a", "temp_c": 4, "x": 1}</response>')
    assert accepts(grammar, '<response>{"temp_c": 4, "city": "a"}</response>')


# ---- the converse: the JSON of every value of the type is admitted


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_json_of_every_value_of_the_type_is_admitted(case: Case, data: st.DataObject) -> None:
    dialect, kind = case.dialect, case.kind
    value = data.draw(case.values)
    text = as_json(dialect, kind, value)
    indent = data.draw(st.sampled_from([None, 1, 2]))
    spaced = json.dumps(json.loads(text), indent=indent, ensure_ascii=False)
    for body in (text, spaced.replace(STOPS[dialect], f"\\u{ord(STOPS[dialect]):04x}")):
        reply = FORMS[dialect].format(f"\n{body}\n")
        assert accepts(case.grammar, reply), reply
        # ...and the runtime reads it back as the same value.
        read = TypeAdapter(kind).validate_json(answer_text(dialect, reply).strip())
        assert TypeAdapter(kind).dump_python(read) == TypeAdapter(kind).dump_python(value)


# ---- what would end the answer block early is admitted only escaped


@pytest.mark.parametrize("dialect", ["cortex", "hermes", "cogency"])
def test_a_string_that_would_end_the_block_early_is_admitted_only_escaped(dialect: str) -> None:
    grammar = grammar_for(dialect, Weather)
    close = {"cortex": "</response>", "hermes": "<tool_call>", "cogency": "</respond>"}[dialect]
    raw = FORMS[dialect].format(json.dumps({"city": f"a{close}b", "temp_c": 1}))
    assert not accepts(grammar, raw)
    escaped = raw.replace(close, "\\u003c" + close[1:], 1)
    assert accepts(grammar, escaped)
    assert Weather.model_validate_json(answer_text(dialect, escaped)).city == f"a{close}b"
    # A "<" that starts no tag is text, as in a text answer.
    assert accepts(grammar, FORMS[dialect].format('{"city": "3 < 4 <= 5", "temp_c": 1}'))


def test_sigil_strings_hold_no_raw_section_sign() -> None:
    grammar = grammar_for("sigil", Weather)
    raw = '§RESPOND: {"city": "a§END:", "temp_c": 1}§END:'
    assert not accepts(grammar, raw)
    assert accepts(grammar, raw.replace("a§", "a\\u00a7"))
    assert accepts(grammar, '§RESPOND: {"city": "<b>", "temp_c": 1}§END:')  # no tags here


def test_a_literal_holding_a_tag_is_written_escaped() -> None:
    grammar = grammar_for("cortex", Literal["</response>"])
    assert not accepts(grammar, '<response>"</response>"</response>')
    assert accepts(grammar, '<response>"\\u003c/response>"</response>')


# ---- "$name" references


def test_a_reference_is_admitted_for_the_names_the_run_can_resolve_only() -> None:
    grammar = grammar_for("cortex", Weather, ["w", "town"])
    for answer in (
        '{"city": "$town", "temp_c": "$w.temp_c"}',
        '{"temp_c": "$w"}'.replace("}", ', "city": "Oslo"}'),
        '"$w"',  # the whole answer may be a bound object
    ):
        assert accepts(grammar, f"<response>{answer}</response>"), answer
    # A name nothing binds is refused where the schema wants a number...
    assert not accepts(grammar, '<response>{"city": "a", "temp_c": "$temp"}</response>')
    assert not accepts(grammar, '<response>"$weather"</response>')
    # ...a string is any string (the runtime says what an unknown "$name" in one is).
    assert accepts(grammar, '<response>{"city": "$nowhere", "temp_c": 1}</response>')
    # With no name bound, no reference at all.
    bare = grammar_for("cortex", Weather)
    assert not accepts(bare, '<response>{"city": "a", "temp_c": "$w"}</response>')


@pytest.mark.parametrize("dialect", GRAMMAR_DIALECTS)
def test_references_reach_inside_arrays_and_nested_models(dialect: str) -> None:
    grammar = grammar_for(dialect, Node, ["n", "tree"])
    answer = '{"v": "$n", "kids": ["$tree.kids.0", {"v": 2, "kids": "$tree.kids"}]}'
    assert accepts(grammar, FORMS[dialect].format(answer))
    assert not accepts(grammar, FORMS[dialect].format('{"v": "$m"}'))


def test_names_that_are_not_identifiers_are_left_out() -> None:
    grammar = grammar_for("cortex", int, ["ok", "not a name", "1st", 'q"uote'])
    assert accepts(grammar, '<response>"$ok"</response>')
    assert not accepts(grammar, '<response>"$1st"</response>')
    assert left_recursive(grammar) == []


# ---- a reply that may act, or answer


TOOL = {
    "name": "lookup",
    "description": "Look an item up.",
    "parameters": {
        "type": "object",
        "properties": {"item": {"$ref": "#/$defs/Item"}},
        "required": ["item"],
        "$defs": {
            "Item": {
                "type": "object",
                "properties": {"sku": {"type": "integer"}},
                "required": ["sku"],
                "additionalProperties": False,
            }
        },
    },
}


class Item(BaseModel):  # the same $defs name as the tool's, another shape
    label: str


class Basket(BaseModel):
    items: list[Item]


def test_either_admits_a_call_or_the_typed_answer_and_no_text_answer() -> None:
    typed = TypedAnswer(TypeAdapter(Basket).json_schema())
    grammar = reply_grammar("cortex", [TOOL], "either", typed=typed)
    call = '{"name": "lookup", "parameters": {"item": {"sku": 3}}}'
    assert accepts(grammar, f'<action type="tool" mode="async" id="a1">{call}</action>')
    assert accepts(grammar, '<response>{"items": [{"label": "tea"}]}</response>')
    assert not accepts(grammar, "<response>A basket of tea.</response>")
    # Each "Item" keeps its own shape: the tool's and the answer's rules are apart.
    assert not accepts(grammar, '<response>{"items": [{"sku": 3}]}</response>')
    wrong = '{"name": "lookup", "parameters": {"item": {"label": "tea"}}}'
    assert not accepts(grammar, f'<action type="tool" mode="async" id="a1">{wrong}</action>')
    assert left_recursive(grammar) == []


def test_an_untyped_answer_grammar_is_unchanged_by_the_typed_one() -> None:
    plain = reply_grammar("cortex", [TOOL], "either")
    assert accepts(plain, "<response>A basket of tea.</response>")
    assert "answer-value" not in plain and "answer-string" not in plain


def test_a_python_object_field_admits_only_a_bound_name() -> None:
    """A DataFrame field (``arbitrary_types_allowed``) is a string in the schema the model
    reads, but no text fits it: under the grammar it is only a ``"$name"`` the run bound,
    so every answer sampled validates with the frame itself in it."""
    pd = pytest.importorskip("pandas")

    class Report(BaseModel):
        model_config = ConfigDict(arbitrary_types_allowed=True)
        table: pd.DataFrame
        rows: int

    typed = OutputType.of(Report)
    frame = pd.DataFrame({"a": [1, 2]})
    for dialect in GRAMMAR_DIALECTS:
        grammar = reply_grammar(dialect, [], "answer", typed=TypedAnswer(typed.schema, ["frame"]))
        sample, rng = sampler(grammar), random.Random(dialect)
        for _ in range(40):
            text = answer_text(dialect, sample(rng)).strip()
            checked = typed.check(text, [{"frame": frame}])
            if checked.ok:
                assert checked.value.table is frame
            else:  # "$frame.a" is a Series, "$frame" in rows is not an int: never text
                assert "table: Input should be an instance of DataFrame (got '" not in checked.first
        assert not accepts(grammar, FORMS[dialect].format('{"table": "x", "rows": 1}'))
        assert accepts(grammar, FORMS[dialect].format('{"table": "$frame", "rows": 1}'))

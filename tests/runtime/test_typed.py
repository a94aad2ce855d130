"""Typed answers (issue 26, items 1-4): ``runtime.core.values.typed`` read directly, and the
loop's answer turn (retries, failure, ``"$name"``, transcripts) through ``Agent.run``."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel
from typing_extensions import TypedDict

from cortex_jupyter.models import ScriptModel
from cortex_jupyter.runtime import Agent, Registry, Run
from cortex_jupyter.runtime.core.errors import BadOutputType
from cortex_jupyter.runtime.core.events import ChatEntry, OutputChecked, OutputExpected, Turn
from cortex_jupyter.runtime.core.record.run import decode_event, encode_event
from cortex_jupyter.runtime.core.trust.scope import Scope
from cortex_jupyter.runtime.core.trust.secrets import secrets
from cortex_jupyter.runtime.core.values.typed import OutputType, read_json, type_from_text
from cortex_jupyter.runtime.loop.prompt import system_prompt
from tests.agents import run_agent


class Weather(BaseModel):
    city: str
    temp: int


@dataclasses.dataclass
class Point:
    x: float
    y: float = 0.0


class Movie(TypedDict):
    title: str
    year: int


class Item(BaseModel):
    name: str
    price: float


class Order(BaseModel):
    items: list[Item]


# ---- each kind of type ---------------------------------------------------------------

KINDS: list[tuple[Any, str, Any]] = [
    (Weather, '{"city": "Paris", "temp": 18}', Weather(city="Paris", temp=18)),
    (Point, '{"x": 1.5}', Point(1.5, 0.0)),
    (Movie, '{"title": "Alien", "year": 1979}', {"title": "Alien", "year": 1979}),
    (list[int], "[1, 2, 3]", [1, 2, 3]),
    (dict[str, float], '{"a": 1, "b": 2.5}', {"a": 1.0, "b": 2.5}),
    (Literal["yes", "no"], '"no"', "no"),
    (int | None, "null", None),
    (int | str, '"x"', "x"),
    (int, "42", 42),
    (float, "2.5", 2.5),
    (str, '"hello"', "hello"),
    (bool, "false", False),
]


@pytest.mark.parametrize(("kind", "text", "expected"), KINDS, ids=[str(k[0]) for k in KINDS])
def test_each_kind_of_type_validates_its_answer(kind: Any, text: str, expected: Any) -> None:
    checked = OutputType.of(kind).check(text)
    assert checked.ok, checked.errors
    assert checked.value == expected
    assert type(checked.value) is type(expected)


@pytest.mark.parametrize(("kind", "text", "expected"), KINDS, ids=[str(k[0]) for k in KINDS])
def test_each_kind_shows_a_schema_and_an_example_that_fits(
    kind: Any, text: str, expected: Any
) -> None:
    typed = OutputType.of(kind)
    assert json.dumps(typed.schema)  # JSON the prompt can carry
    assert typed.check(json.dumps(typed.example)).ok, typed.example


def test_an_answer_in_one_json_fence_is_read_and_prose_around_it_is_tolerated() -> None:
    typed = OutputType.of(Weather)
    text = 'Here it is:\n```json\n{"city": "Oslo", "temp": -3}\n```\nHope that helps.'
    assert typed.check(text).value == Weather(city="Oslo", temp=-3)
    assert typed.check('```\n{"city": "Oslo", "temp": -3}\n```').ok  # a bare fence too


@pytest.mark.parametrize(
    ("text", "wrong"),
    [
        ('It is {"city": "Oslo", "temp": 1}', "not JSON"),  # prose around bare JSON
        ('```json\n{"city": 1}\n```\n```json\n{"temp": 2}\n```', "2 code blocks"),
        ("```json\n{city: Oslo}\n```", "the ```json block is not JSON"),
        ("   ", "empty"),
        ('{"city": "Oslo", "temp": 1', "not JSON"),
    ],
)
def test_what_is_not_one_json_value_says_why(text: str, wrong: str) -> None:
    checked = OutputType.of(Weather).check(text)
    assert not checked.ok
    assert checked.first.startswith("(answer): ") and wrong in checked.first


def test_errors_name_the_field_by_its_path() -> None:
    checked = OutputType.of(Order).check(
        '{"items": [{"name": "a", "price": 1}, {"name": "b", "price": 2},'
        ' {"name": "c", "price": "cheap"}]}'
    )
    assert not checked.ok
    assert checked.first.startswith("items[2].price: ")
    assert "'cheap'" in checked.first


def test_a_missing_field_is_named() -> None:
    checked = OutputType.of(Weather).check('{"city": "Paris"}')
    assert checked.errors == ("temp: Field required",)


def test_a_plain_text_answer_is_the_string_when_the_type_is_a_string() -> None:
    assert OutputType.of(str).check("Just words.").value == "Just words."
    assert OutputType.of(Literal["yes", "no"]).check(" yes ").value == "yes"
    assert not OutputType.of(Literal["yes", "no"]).check("maybe").ok
    assert not OutputType.of(int).check("forty-two").ok


@pytest.mark.parametrize("bad", [None, 3, "Weather"])
def test_a_value_instead_of_a_type_is_refused(bad: Any) -> None:
    with pytest.raises(BadOutputType, match="not a type"):
        OutputType.of(bad)


def test_a_type_pydantic_cannot_use_is_refused_when_the_agent_is_made() -> None:
    class Opaque:
        pass

    with pytest.raises(BadOutputType, match=r"the answer type Opaque cannot be used: .*Opaque"):
        Agent(model=ScriptModel("x"), output_type=Opaque)
    with pytest.raises(TypeError):  # it is a TypeError, as a wrong argument type is
        Agent(model=ScriptModel("x"), output_type=list[Opaque])


@pytest.mark.parametrize("retries", [-1, 1.5, True, "2"])
def test_output_retries_must_be_a_whole_number_of_zero_or_more(retries: Any) -> None:
    with pytest.raises(ValueError, match="output_retries must be a whole number, 0 or more"):
        Agent(model=ScriptModel("x"), output_type=int, output_retries=retries)


def test_with_options_checks_a_new_type_too() -> None:
    agent = Agent(model=ScriptModel("x"), output_type=int)
    assert agent.with_options(output_type=list[str]).typed is not None
    assert agent.with_options(output_type=None).typed is None
    with pytest.raises(BadOutputType):
        agent.with_options(output_type=3)


# ---- the type as written on a cell line -------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("list[int]", list[int]),
        ('Literal["a", "b"]', Literal["a", "b"]),
        ("int | None", int | None),
        ("Optional[Weather]", Weather | None),
        ("Weather", Weather),
    ],
)
def test_a_typing_expression_evaluates_in_the_namespace(text: str, expected: Any) -> None:
    assert type_from_text(text, {"Weather": Weather}) == expected


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("lst[int]", "name 'lst' is not defined"),
        ("list[int", "not a Python expression"),
        ("x = 1", "not a Python expression"),
        ("1/0", "division by zero"),
    ],
)
def test_a_bad_expression_is_one_sentence_naming_it(text: str, why: str) -> None:
    with pytest.raises(BadOutputType) as caught:
        type_from_text(text, {})
    message = str(caught.value)
    assert message.startswith(f"the answer type {text} cannot be used: ") and why in message
    assert "\n" not in message


# ---- "$name" inside the answer ----------------------------------------------------------


def test_a_dollar_name_string_is_the_object_itself_and_an_int_stays_an_int() -> None:
    weather = {"temp": 18, "sky": "sunny"}
    checked = OutputType.of(dict[str, Any]).check(
        '{"temp": "$weather.temp", "all": "$weather", "text": "$weather.temp degrees"}',
        [{"weather": weather}],
    )
    assert checked.ok
    assert checked.value["temp"] == 18 and type(checked.value["temp"]) is int
    assert checked.value["all"] is weather  # the object, not a copy
    assert checked.value["text"] == "$weather.temp degrees"  # only whole strings


def test_a_dollar_name_fills_a_typed_field_before_validation() -> None:
    checked = OutputType.of(Weather).check(
        '{"city": "Paris", "temp": "$reading"}', [{"reading": 18}]
    )
    assert checked.value == Weather(city="Paris", temp=18)


def test_an_unknown_name_is_an_error_for_its_field() -> None:
    checked = OutputType.of(Order).check(
        '{"items": [{"name": "a", "price": "$nope"}]}', [{"price": 3}]
    )
    assert not checked.ok
    assert checked.first.startswith("items[0].price: unknown variable $nope")
    assert len(checked.errors) == 1  # not also "not a valid number" for the same field


def test_a_hidden_notebook_name_follows_the_scope_rules_and_its_secret_stays_out() -> None:
    key = "sk-typed-HIDDEN0123456789abcdef"
    secrets.add(key)
    namespace = {"creds": {"key": key}, "shown": 5}
    scope = Scope(namespace, prompt=["shown"])
    checked = OutputType.of(dict[str, Any]).check('{"a": "$shown", "b": "$creds.key"}', [scope])
    assert not checked.ok
    assert checked.first.startswith("b: $creds is a notebook variable the model may not see")
    assert key not in " ".join(checked.errors)


def test_a_visible_secret_reaches_the_object_but_not_its_json_form() -> None:
    key = "sk-typed-VISIBLE0123456789abcdef"
    secrets.add(key)
    typed = OutputType.of(dict[str, str])
    checked = typed.check(
        '{"token": "$creds.key"}', [Scope({"creds": {"key": key}}, prompt=["creds"])]
    )
    assert checked.value == {"token": key}  # the user's own object, in their notebook
    assert key not in json.dumps(typed.json_form(checked.value))  # events, transcripts


# ---- the native response_format ----------------------------------------------------------


def test_response_format_carries_the_schema_and_wraps_a_non_object_root() -> None:
    fmt = OutputType.of(Weather).response_format()
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["schema"] == Weather.model_json_schema()
    wrapped = OutputType.of(list[Item]).response_format()["json_schema"]
    assert wrapped["schema"]["properties"]["response"]["items"] == {"$ref": "#/$defs/Item"}
    assert "Item" in wrapped["schema"]["$defs"]  # the references still resolve
    checked = OutputType.of(list[int]).check('{"response": [1, 2]}', wrapped=True)
    assert checked.value == [1, 2]


# ---- never a traceback, whatever the text ------------------------------------------------

JSONISH = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=8)
    | st.sampled_from(["$x", "$x.a", "$nope", "$$", "$x.__class__", "$x.0"]),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)


@given(
    body=st.one_of(
        st.text(max_size=200),
        JSONISH.map(json.dumps),
        JSONISH.map(lambda v: f"Sure:\n```json\n{json.dumps(v)}\n```"),
    ),
    kind=st.sampled_from([Weather, Order, list[int], dict[str, Any], Literal["a", "b"], int, str]),
)
def test_any_answer_text_gives_an_object_or_errors(body: str, kind: Any) -> None:
    checked = OutputType.of(kind).check(body, [{"x": {"a": 1}}])
    if checked.ok:
        assert checked.errors == ()
    else:
        assert checked.value is None and 1 <= len(checked.errors) <= 8
        assert all(": " in line and "\n" not in line for line in checked.errors)


@given(st.text(max_size=300))
def test_read_json_never_raises(text: str) -> None:
    value, problem = read_json(text)
    assert (problem is None) or value is None


# ---- the loop: the answer turn ------------------------------------------------------------


def script(*turns: str) -> ScriptModel:
    return ScriptModel("\n--- next turn ---\n".join(turns), chunk_size=7)


@pytest.mark.anyio
async def test_interim_replies_are_not_the_answer() -> None:
    run = await run_agent(
        "weather?",
        model=script(
            '<response final="false">{"city": "Wrong", "temp": 0}</response>'
            '<action id="a">{"name": "noop"}</action>',
            '<response>{"city": "Paris", "temp": 18}</response>',
        ),
        output_type=Weather,
        registry=_noop_registry(),
    )
    assert run.status == "completed"
    assert run.output == Weather(city="Paris", temp=18)
    assert run.answer == '{"city": "Paris", "temp": 18}'
    checks = [e for e in run.events if isinstance(e, OutputChecked)]
    assert [(c.attempt, c.ok, c.turn) for c in checks] == [(1, True, 2)]


@pytest.mark.anyio
async def test_a_plain_text_reply_with_bare_json_is_the_answer() -> None:
    run = await run_agent("n?", model=script("[1, 2, 3]"), output_type=list[int])
    assert (run.status, run.output) == ("completed", [1, 2, 3])


@pytest.mark.anyio
async def test_output_expected_comes_once_before_the_first_turn_with_the_schema() -> None:
    run = await run_agent("w?", model=script('{"city": "P", "temp": 1}'), output_type=Weather)
    kinds = [type(e) for e in run.events if isinstance(e, OutputExpected | Turn)]
    assert kinds[:2] == [OutputExpected, Turn] and kinds.count(OutputExpected) == 1
    expected = next(e for e in run.events if isinstance(e, OutputExpected))
    assert (expected.type, expected.schema) == ("Weather", Weather.model_json_schema())


@pytest.mark.anyio
async def test_a_bad_answer_is_sent_back_with_its_errors_and_the_next_one_fits() -> None:
    run = await run_agent(
        "w?",
        model=script(
            '<response>{"city": "Paris", "temp": "warm"}</response>',
            '<response>{"city": "Paris", "temp": 18}</response>',
        ),
        output_type=Weather,
    )
    assert (run.status, run.output) == ("completed", Weather(city="Paris", temp=18))
    assert run.answer == '{"city": "Paris", "temp": 18}'  # the sent-back answer is not it
    told = [e.content for e in run.events if isinstance(e, ChatEntry) and e.role == "user"]
    assert told[-1].startswith("Your final answer did not fit the type Weather:\n- temp: ")
    checks = [(c.attempt, c.ok) for c in run.events if isinstance(c, OutputChecked)]
    assert checks == [(1, False), (2, True)]


@pytest.mark.anyio
async def test_an_answer_that_never_fits_fails_the_run_and_keeps_the_text() -> None:
    run = await run_agent(
        "w?",
        model=script('{"city": "Paris"}', '{"city": "Paris", "temp": "x"}', "never read"),
        output_type=Weather,
        output_retries=1,
    )
    assert run.status == "failed" and run.output is None
    assert run.reason is not None and run.reason.startswith(
        "the answer did not fit Weather: temp: Input should be a valid integer"
    )
    assert "(2 tries)" in run.reason
    assert run.answer == '{"city": "Paris", "temp": "x"}'
    assert run.turns == 2


@pytest.mark.anyio
async def test_zero_retries_fails_at_the_first_bad_answer() -> None:
    run = await run_agent(
        "w?", model=script("[1, 'x']", "[1]"), output_type=list[int], output_retries=0
    )
    assert (run.status, run.turns) == ("failed", 1)


@pytest.mark.anyio
async def test_a_retry_counts_as_a_turn_and_the_turn_limit_says_so() -> None:
    run = await run_agent(
        "w?", model=script("nope", "[1]"), output_type=list[int], output_retries=3, max_turns=1
    )
    assert run.status == "failed" and run.turns == 1
    assert (
        run.reason is not None and "no turn was left for another try (max_turns=...)" in run.reason
    )


@pytest.mark.anyio
async def test_dollar_name_of_an_action_output_keeps_the_object() -> None:
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"a": [1, 2]})
    registry = Registry()

    @registry.tool
    def table() -> Any:
        return frame

    @registry.tool
    def count() -> int:
        return 7

    class Report(BaseModel, arbitrary_types_allowed=True):
        rows: int
        data: pd.DataFrame

    run = await run_agent(
        "report",
        registry=registry,
        model=script(
            '<action id="t">{"name": "table", "output_key": "df"}</action>'
            '<action id="c">{"name": "count", "output_key": "n"}</action>',
            '<response>{"rows": "$n", "data": "$df"}</response>',
        ),
        output_type=Report,
    )
    assert run.status == "completed", run.reason
    assert run.output.rows == 7 and type(run.output.rows) is int
    assert run.output.data is frame


@pytest.mark.anyio
async def test_a_typed_nested_agent_hands_its_caller_the_object() -> None:
    registry = Registry()
    Agent("pricer", registry=registry, output_type=Item, instructions="price things")
    run = await run_agent(
        "price",
        registry=registry,
        model=ScriptModel(
            '<action type="agent" id="p">{"name": "pricer", "parameters": {"task": "tea"},'
            ' "output_key": "item"}</action>'
            "\n--- next turn ---\n<response>done</response>"
            '\n--- reply to p ---\n{"name": "tea", "price": "2.5"}'
        ),
    )
    assert run.status == "completed", run.reason
    assert run.actions["p"].output == Item(name="tea", price=2.5)
    assert run.variables["item"] == Item(name="tea", price=2.5)


@pytest.mark.anyio
async def test_a_transcript_of_a_typed_run_reads_back_with_the_json_form() -> None:
    run = await run_agent(
        "w?",
        model=script('{"city": "P", "temp": "hot"}', '{"city": "P", "temp": 3}'),
        output_type=Weather,
    )
    again = Run.from_jsonl(run.to_jsonl())
    assert again.output == {"city": "P", "temp": 3}  # the type is not in the transcript
    assert again.answer == run.answer == '{"city": "P", "temp": 3}'
    checks = [e for e in again.events if isinstance(e, OutputChecked)]
    assert [c.ok for c in checks] == [False, True]
    assert isinstance(checks[0].errors, tuple) and checks[0].errors[0].startswith("temp: ")
    for event in run.events:
        if isinstance(event, OutputChecked | OutputExpected):
            assert decode_event(json.loads(json.dumps(encode_event(event)))) == event


def test_the_system_prompt_shows_the_schema_and_an_example_per_dialect() -> None:
    typed = OutputType.of(Weather)
    example = '{"city": "text", "temp": 0}'
    answers = {
        "cortex": f"<response>{example}</response>",
        "sigil": f"§RESPOND: {example}\n§END:",
        "cogency": f"<respond>{example}</respond>\n<end>",
        "hermes": f"\n\n{example}\n\n",
    }
    schema = json.dumps(Weather.model_json_schema(), separators=(",", ":"))
    for dialect, answer in answers.items():
        prompt = system_prompt(dialect=dialect, output=typed)
        assert "# Your answer's type: Weather" in prompt and schema in prompt
        assert answer in prompt, dialect
    assert "Your answer's type" not in system_prompt(dialect="cortex")


def _noop_registry() -> Registry:
    registry = Registry()

    @registry.tool
    def noop() -> str:
        return "ok"

    return registry


def test_an_agents_repr_names_its_answer_type() -> None:
    agent = Agent(model=ScriptModel("x"), output_type=list[Weather])
    assert repr(agent) == "Agent(model='script', dialect='cortex', output_type=list[Weather])"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("dialect", "reply"),
    [
        ("cortex", '<thought>Easy.</thought><response>{"city": "Rome", "temp": 25}</response>'),
        ("sigil", '§THINK: Easy.\n§RESPOND: {"city": "Rome", "temp": 25}\n§END:'),
        ("cogency", '<think>Easy.</think><respond>{"city": "Rome", "temp": 25}</respond><end>'),
        ("hermes", '<think>Easy.</think>{"city": "Rome", "temp": 25}'),
    ],
)
async def test_the_answer_written_as_each_dialect_shows_it_is_read(
    dialect: str, reply: str
) -> None:
    run = await run_agent("w?", model=script(reply), output_type=Weather, dialect=dialect)
    assert (run.status, run.output) == ("completed", Weather(city="Rome", temp=25))
    assert run.thought.strip() == "Easy."  # the thought is not the answer


# ---- sloppy model text (the attack on issue 26) --------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        '```json\n{"city": "Oslo", "temp": 1}',  # the reply stopped before the closing fence
        'Here:\n```json\n{"city": "Oslo", "temp": 1}\n',
        '```\n{"city": "Oslo", "temp": 1}  ',
    ],
)
def test_a_fence_never_closed_is_read_to_the_end_as_the_view_shows_it(text: str) -> None:
    assert OutputType.of(Weather).check(text).value == Weather(city="Oslo", temp=1)


@pytest.mark.anyio
async def test_a_response_block_that_closes_before_its_fence_is_the_answer() -> None:
    run = await run_agent(
        "w?",
        model=script('<response>```json\n{"city": "Oslo", "temp": 1}</response>'),
        output_type=Weather,
        output_retries=0,
    )
    assert (run.status, run.output) == ("completed", Weather(city="Oslo", temp=1)), run.reason


def test_a_numpy_number_reached_by_dollar_name_is_a_number_in_the_json_form() -> None:
    """``"$n"`` of a numpy int64 (a DataFrame's sum...) into an ``object`` field keeps the
    object; the form the view, the static copy and the transcript show is the number, not
    the text ``np.int64(4)``. A DataFrame stays its short repr."""
    np = pytest.importorskip("numpy")
    pd = pytest.importorskip("pandas")
    typed = OutputType.of(dict[str, object])
    scope = [{"n": np.int64(4), "x": np.float32(2.5), "f": pd.DataFrame({"a": [1]})}]
    checked = typed.check('{"n": "$n", "x": "$x", "f": "$f"}', scope)
    assert checked.ok and type(checked.value["n"]) is np.int64
    form = typed.json_form(checked.value)
    assert (form["n"], form["x"]) == (4, 2.5) and type(form["n"]) is int
    assert isinstance(form["f"], str) and "a" in form["f"]
    assert json.loads(json.dumps(form)) == form


class Tree(BaseModel):
    kids: list[Tree] = []
    size: int = 0


def test_an_error_deep_in_a_recursive_model_still_says_what_was_wrong() -> None:
    """The path of a field nested 60 deep is longer than an error line: its end (the bad
    field) and the message are kept, not the path's start alone."""
    text = '{"kids": [' * 60 + '{"size": "big"}' + "]}" * 60
    first = OutputType.of(Tree).check(text).first
    assert first.startswith("…") and ".kids[0].size: Input should be a valid integer" in first
    assert "(got 'big')" in first and len(first) <= 240


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("NaN", "NaN is not JSON"),
        ('{"x": Infinity}', "Infinity is not JSON"),
        ("[1.5, -Infinity]", "-Infinity is not JSON"),
        ('{"x": 1e999}', "the number 1e999 is too large"),
    ],
)
def test_nan_and_infinity_are_not_json_and_say_so(text: str, why: str) -> None:
    """Python's json reads NaN/Infinity (and 1e999 as inf), and a float field takes them:
    the answer would be nan, shown as the text "nan". It is JSON the model is asked for."""
    checked = OutputType.of(float | dict[str, float] | list[float]).check(text)
    assert not checked.ok and checked.first.startswith("(answer): the answer is not JSON (")
    assert why in checked.first
    assert OutputType.of(float).check("1e300").value == 1e300

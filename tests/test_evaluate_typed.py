"""evaluate()'s typed tasks (issue 26, item 7): ``Task(..., output_type=T)``, the built-in
``TYPED_TASKS``, and the ``valid`` / ``valid 1st`` shares per dialect and grammar.

Replies are scripted on the loopback OpenAI server (through the real openai SDK) or a
``ScriptModel``, so every share below is known in advance; nothing here judges a model."""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass
from typing import Any, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from pydantic import BaseModel
from typing_extensions import TypedDict  # pydantic takes typing's only on Python 3.12+

from cortex_jupyter import Task, evaluate
from cortex_jupyter.evaluation import TASKS, TYPED_TASKS, Row, Try
from cortex_jupyter.evaluation.tasks import CityTemperature
from cortex_jupyter.models import ScriptModel
from tests.models.fake_openai_server import FakeOpenAIServer, Stream, finish, role, texts, usage

ADD = TASKS[0]
WEATHER, NUMBERS = TYPED_TASKS
WEATHER_JSON = '{"city": "Lisbon", "temperature": 23}'
NUMBERS_JSON = "[7, 3, 45]"
PROSE = "It was a warm afternoon in Lisbon, about 23 degrees."
CORRECT_ACTION = (
    '<action type="tool" id="a1">{"name": "add", "parameters": {"a": 1234, "b": 5678}}</action>'
)


def reply(text: str) -> Stream:
    return Stream([role(), *texts(text, 7), finish(), usage(50, 10)])


def quiet(done: int, total: int, note: str) -> None:
    pass


def cells(result: Any, line: int) -> dict[str, str]:
    """The summary's line ``line`` (0: the caption) by column, read at the header's
    positions (a column's cell starts where its name does)."""
    lines = result.summary().splitlines()
    header = lines[1]
    names = ["dialect", "constrain", "replies", "runnable", "malformed", "correct", "valid 1st"]
    names += ["valid", "tokens"]
    starts = {name: re.search(rf"(?<!\S){name}(?!\S| 1st)", header) for name in names}
    spots = sorted((m.start(), name) for name, m in starts.items() if m)
    row = lines[line].ljust(len(header))
    out = {}
    for (start, name), (end, _) in zip(spots, [*spots[1:], (len(row), "")], strict=True):
        out[name] = row[start:end].strip()
    return out


# ---- the share of valid typed answers ---------------------------------------------------


def test_a_model_that_answers_valid_json_is_all_valid(server: FakeOpenAIServer) -> None:
    server.script(reply(WEATHER_JSON), reply("```json\n" + NUMBERS_JSON + "\n```"))
    result = evaluate("fake-model", ["cortex"], n=1, tasks=TYPED_TASKS, progress=quiet)
    (row,) = result.rows
    assert (row.valid, row.valid_first, row.correct) == (1.0, 1.0, 1.0)
    weather, numbers = result.tries
    assert weather.output == CityTemperature(city="Lisbon", temperature=23)
    assert numbers.output == [7, 3, 45]
    assert [(t.valid, t.attempts, t.retried) for t in result.tries] == [(True, 1, False)] * 2
    assert len(server.requests) == 2  # no retry asked
    # No tool task ran: the runnable share is blank, the typed shares are figures.
    shown = cells(result, 2)
    assert (shown["runnable"], shown["valid"], shown["valid 1st"]) == ("-", "100%", "100%")


def test_a_model_that_answers_prose_is_never_valid(server: FakeOpenAIServer) -> None:
    server.script(*(reply(PROSE) for _ in range(4)))  # each task: the answer and one retry
    result = evaluate("fake-model", ["cortex"], n=1, tasks=TYPED_TASKS, progress=quiet)
    (row,) = result.rows
    assert (row.valid, row.valid_first, row.correct) == (0.0, 0.0, 0.0)
    assert [(t.valid, t.attempts, t.output) for t in result.tries] == [(False, 2, None)] * 2
    assert len(server.requests) == 4
    shown = cells(result, 2)
    assert (shown["valid"], shown["valid 1st"]) == ("0%", "0%")  # 0%, not blank: it was tried
    # The wrong answer shown per setting says why the object never fit.
    weather = result.tries[0]
    assert weather.reason is not None
    assert weather.reason.startswith("the answer did not fit CityTemperature: (answer)")
    page = result._repr_html_()
    assert f"{PROSE} ({html.escape(weather.reason)})" in page


def test_a_retry_that_fixes_it_is_valid_but_not_first_time(server: FakeOpenAIServer) -> None:
    server.script(reply(PROSE), reply(WEATHER_JSON))
    result = evaluate("fake-model", ["cortex"], n=1, tasks=[WEATHER], progress=quiet)
    (tried,) = result.tries
    assert (tried.valid, tried.attempts, tried.retried, tried.correct) == (True, 2, True, True)
    (row,) = result.rows
    assert (row.valid, row.valid_first) == (1.0, 0.0)
    # The retry request told the model what was wrong with its first answer.
    retry = server.requests[1].json["messages"][-1]["content"]
    assert "did not fit the type CityTemperature" in retry and "not JSON" in retry
    shown = cells(result, 2)
    assert (shown["valid"], shown["valid 1st"]) == ("100%", "0%")


def test_a_row_per_dialect_and_grammar_each_with_its_share(server: FakeOpenAIServer) -> None:
    dialects = ["cortex", "sigil", "cogency", "hermes", "native"]
    # Unconstrained, every dialect answers with bare JSON; constrained (cortex only, to
    # keep it short) the model's first answer is prose, then it fits.
    server.script(*(reply(NUMBERS_JSON) for _ in dialects))
    result = evaluate("fake-model", dialects, n=1, tasks=[NUMBERS], progress=quiet)
    assert [(row.dialect, row.valid) for row in result.rows] == [(d, 1.0) for d in dialects]
    # native: the endpoint's own structured answer (response_format), not only the prompt
    assert "response_format" in server.requests[-1].json
    server.script(reply(PROSE), reply(PROSE), reply(PROSE), reply(NUMBERS_JSON))
    both = evaluate(
        "fake-model", ["cortex"], n=1, tasks=[NUMBERS], constrain=(False, True), progress=quiet
    )
    assert [(r.constrain, r.valid, r.valid_first) for r in both.rows] == [
        (False, 0.0, 0.0),
        (True, 1.0, 0.0),
    ]
    assert [t.constrain for t in both.tries] == [False, True]
    assert ["grammar" in r.json for r in server.requests[-4:]] == [False, False, True, True]


def test_the_shares_count_only_their_own_tasks(server: FakeOpenAIServer) -> None:
    # One tool task and one typed task in a row: the typed task writes no action, and the
    # runnable share is still 100% (it counts tool tasks); the valid share counts the typed
    # task alone, so the tool task's plain answer does not make it 50%.
    server.script(
        reply(CORRECT_ACTION),
        reply('<response final="true">The sum is 6912.</response>'),
        reply(NUMBERS_JSON),
    )
    result = evaluate("fake-model", ["cortex"], n=1, tasks=[ADD, NUMBERS], progress=quiet)
    (row,) = result.rows
    assert (row.replies, row.runnable, row.valid, row.correct) == (2, 1.0, 1.0, 1.0)
    add, numbers = result.tries
    assert (add.tool_task, add.valid) == (True, None)
    assert (numbers.tool_task, numbers.valid, numbers.actions) == (False, True, 0)


def test_rows_without_a_typed_task_show_blank_in_the_table_and_the_chart(
    server: FakeOpenAIServer,
) -> None:
    server.script(reply("6912"), reply(NUMBERS_JSON))
    untyped = evaluate("fake-model", ["cortex"], n=1, tasks=[ADD], progress=quiet)
    typed = evaluate("fake-model", ["hermes"], n=1, tasks=[NUMBERS], progress=quiet)
    assert (untyped.rows[0].valid, untyped.rows[0].valid_first) == (None, None)
    assert (cells(untyped, 2)["valid"], cells(untyped, 2)["valid 1st"]) == ("-", "-")
    # The chart draws a valid bar only where there is a valid share: none for the row of
    # tool tasks (no "valid" in its legend either), one at 100% for the typed row.
    plain, svg = chart(untyped), chart(typed)
    assert "valid" not in plain and plain.count("<rect") == 3 + 3
    assert 'alt="runnable, malformed, correct and valid shares"' in typed._repr_html_()
    assert ">valid</text>" in svg and ">100%</text>" in svg
    assert svg.count("<rect") == 3 + 4  # malformed, correct, valid bars; runnable blank


def chart(result: Any) -> str:
    found = re.search(r'src="data:image/svg\+xml;base64,([^"]+)"', result._repr_html_())
    assert found is not None
    return base64.b64decode(found.group(1)).decode()


def test_the_default_tasks_are_the_tool_tasks_then_the_typed_ones(
    server: FakeOpenAIServer,
) -> None:
    server.script(*(reply("6912") for _ in TASKS), reply(WEATHER_JSON), reply(NUMBERS_JSON))
    result = evaluate("fake-model", ["cortex"], n=1, progress=quiet)
    assert [t.task for t in result.tries] == [t.name for t in (*TASKS, *TYPED_TASKS)]
    assert result.caption.startswith("model fake-model · 12 tasks × 1 tries")
    (row,) = result.rows
    assert row.valid == 1.0 and row.runnable == 0.0  # "6912" with no action: not runnable


# ---- user tasks of every type kind --------------------------------------------------------


@dataclass
class Point:
    x: int
    y: int


class Reading(TypedDict):
    city: str
    temp: int


class Weather(BaseModel):
    city: str
    temp: int


@pytest.mark.parametrize(
    ("output_type", "answer", "expected"),
    [
        (Weather, '{"city": "Oslo", "temp": 13}', Weather(city="Oslo", temp=13)),
        (Point, '{"x": 1, "y": 2}', Point(1, 2)),
        (Reading, '{"city": "Oslo", "temp": 13}', {"city": "Oslo", "temp": 13}),
        (list[int], "[1, 2, 3]", [1, 2, 3]),
        (dict[str, float], '{"a": 1.5}', {"a": 1.5}),
        (Literal["yes", "no"], '"yes"', "yes"),
        (int | str, "42", 42),
        (int | None, "null", None),  # valid, though the object is None
        (bool, "true", True),
    ],
)
def test_a_user_task_of_any_type_kind_checks_the_object(
    output_type: Any, answer: str, expected: Any
) -> None:
    seen: list[Any] = []

    def check(found: Any) -> bool:
        seen.append(found)
        return bool(found == expected)

    task = Task("Answer.", [], check, name="kind", output_type=output_type)
    result = evaluate(ScriptModel([answer]), ["cortex"], n=1, tasks=[task], progress=quiet)
    (tried,) = result.tries
    assert seen == [expected] and type(seen[0]) is type(expected)
    assert (tried.valid, tried.correct) == (True, True)


def test_a_typed_task_may_use_tools_and_dollar_names() -> None:
    def get_weather(city: str) -> dict[str, Any]:
        """The weather in a city."""
        return {"city": city, "temp": 13}

    task = Task(
        "Weather in Oslo?", [get_weather], lambda w: w.temp == 13, output_type=Weather
    )  # fmt: skip
    script = ScriptModel(
        [
            '<action type="tool" id="w">{"name": "get_weather", "parameters": {"city": "Oslo"},'
            ' "output_key": "weather"}</action>',
            '{"city": "$weather.city", "temp": "$weather.temp"}',
        ]
    )
    (tried,) = evaluate(script, ["cortex"], n=1, tasks=[task], progress=quiet).tries
    assert (tried.runnable, tried.valid, tried.correct) == (True, True, True)
    assert tried.output == Weather(city="Oslo", temp=13)


def test_a_regex_check_on_a_typed_task_reads_the_text_and_needs_a_valid_object() -> None:
    task = Task("How many?", [], r"\b3\b", name="count", output_type=int)
    fits = evaluate(ScriptModel(["3"]), ["cortex"], n=1, tasks=[task], progress=quiet)
    never = evaluate(
        ScriptModel(["three, or 3", "about 3"]), ["cortex"], n=1, tasks=[task], progress=quiet
    )
    assert [(t.valid, t.correct) for t in fits.tries] == [(True, True)]
    # The text matches the regex, but the answer never fit int: not correct.
    assert [(t.valid, t.correct) for t in never.tries] == [(False, False)]


def test_a_check_that_raises_on_the_object_is_said() -> None:
    def check(found: Any) -> bool:
        raise KeyError("temp")

    task = Task("Weather?", [], check, name="bad", output_type=Weather)
    result = evaluate(
        ScriptModel(['{"city": "Oslo", "temp": 13}']), ["cortex"], n=1, tasks=[task],
        progress=quiet,
    )  # fmt: skip
    (tried,) = result.tries
    assert (tried.valid, tried.correct) == (True, False)
    assert tried.reason == "the task's check raised KeyError: 'temp'"


def test_a_task_with_a_type_no_answer_can_have_is_refused_in_one_line() -> None:
    with pytest.raises(TypeError, match=r"^a Task's output_type: the answer type 3 cannot be used"):
        Task("p", [], lambda x: True, output_type=3)
    with pytest.raises(TypeError, match=r"^a Task's output_type: the answer type .*object"):
        Task("p", [], lambda x: True, output_type=object())


def test_output_retries_go_through_options() -> None:
    script = ScriptModel(["not json", '{"city": "Oslo", "temp": 13}'])
    task = Task("Weather?", [], lambda w: True, name="w", output_type=Weather)
    result = evaluate(
        script, ["cortex"], n=1, tasks=[task], options={"output_retries": 0}, progress=quiet
    )
    (tried,) = result.tries
    assert (tried.valid, tried.attempts) == (False, 1)  # no second chance given


# ---- %cortex eval -------------------------------------------------------------------------


def test_magic_eval_typed_tasks_only(ip: InteractiveShell, server: FakeOpenAIServer) -> None:
    server.script(reply(WEATHER_JSON), reply(PROSE), reply(PROSE))
    result: Any = ip.run_line_magic("cortex", "eval --dialects cortex --n 1 --tasks typed")
    assert [t.task for t in result.tries] == ["extract_weather", "list_numbers"]
    (row,) = result.rows
    assert (row.valid, row.valid_first, row.runnable) == (0.5, 0.5, None)


def test_magic_eval_unknown_task_kind_is_a_usage_error(
    ip: InteractiveShell, server: FakeOpenAIServer
) -> None:
    with pytest.raises(UsageError, match=r"--tasks: invalid choice: 'typd'.*'typed'"):
        ip.run_line_magic("cortex", "eval --tasks typd")
    assert server.requests == []


# ---- the shares as a property --------------------------------------------------------------


def a_try(tool_task: bool, valid: bool | None, attempts: int, runnable: bool) -> Try:
    return Try(
        "t", "cortex", False, "completed", int(runnable), runnable and tool_task, False,
        bool(valid), "", 1, 1, None, 0.0, 1, tool_task=tool_task, valid=valid,
        attempts=attempts,
    )  # fmt: skip


TRIES = st.lists(
    st.builds(
        a_try,
        st.booleans(),
        st.one_of(st.none(), st.booleans()),
        st.integers(0, 3),
        st.booleans(),
    ),
    max_size=12,
)


@given(TRIES)
def test_row_shares_are_over_their_own_tries(tries: list[Try]) -> None:
    row = Row.of("cortex", False, tries)
    typed = [t for t in tries if t.valid is not None]
    tooled = [t for t in tries if t.tool_task]
    if typed:
        assert row.valid == sum(bool(t.valid) for t in typed) / len(typed)
        assert row.valid_first is not None and 0.0 <= row.valid_first <= row.valid
        fixed = [t for t in typed if t.valid and t.attempts > 1]
        assert row.valid - row.valid_first == pytest.approx(len(fixed) / len(typed))
    else:
        assert row.valid is None and row.valid_first is None
    if tooled:
        assert row.runnable == sum(t.runnable for t in tooled) / len(tooled)
    elif tries:
        assert row.runnable is None

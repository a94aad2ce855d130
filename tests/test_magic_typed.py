"""Typed answers through the magic (issue 26, items 1-4): ``--output T``,
``--output-retries N``, ``--output-key NAME``, in a real IPython shell, with ``--script``
cells and with the fake OpenAI server through the real openai SDK."""

from __future__ import annotations

import _thread
import json
import threading
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from cortex_jupyter import Agent, Run, default_registry
from cortex_jupyter.magic import CortexMagics
from cortex_jupyter.runtime.core.events import OutputChecked
from cortex_jupyter.session import CortexRunError
from tests.conftest import SECRET
from tests.models.fake_openai_server import FakeOpenAIServer, Stream, finish, texts, tool_call

TURN = "\n--- next turn ---\n"

DEFINE = """
from pydantic import BaseModel
from dataclasses import dataclass
from typing_extensions import TypedDict

class Weather(BaseModel):
    city: str
    temp: int

@dataclass
class Point:
    x: float
    y: float

class Movie(TypedDict):
    title: str
    year: int
"""


@pytest.fixture
def typed(ip: InteractiveShell) -> InteractiveShell:
    ip.run_cell(DEFINE)
    return ip


def shown(capsys: pytest.CaptureFixture[str]) -> tuple[list[str], str]:
    out = capsys.readouterr()
    text = out.out + out.err
    return [line for line in text.splitlines() if line.startswith("cortex:")], text


def reply(text: str) -> Stream:
    return Stream([*texts(text, 9), finish()])


# ---- each kind, from the cell line --------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "answer", "expected"),
    [
        ("Weather", '{"city": "Paris", "temp": 18}', "Weather(city='Paris', temp=18)"),
        ("Point", '{"x": 1, "y": 2}', "Point(x=1.0, y=2.0)"),
        ("Movie", '{"title": "Alien", "year": 1979}', "{'title': 'Alien', 'year': 1979}"),
        ("list[int]", "[1, 2]", "[1, 2]"),
        ("dict[str, float]", '{"a": 1}', "{'a': 1.0}"),
        ('Literal["yes", "no"]', '"yes"', "'yes'"),
        ("'int | None'", "null", "None"),
        ("bool", "true", "True"),
    ],
)
def test_output_makes_the_validated_object_and_the_answer_stays_text(
    typed: InteractiveShell, output: str, answer: str, expected: str
) -> None:
    typed.run_cell_magic("cortex", f"--script --text --delay 0 --output {output}", answer)
    run = typed.user_ns["_cortex"]
    assert run.status == "completed", run.reason
    assert repr(run.output) == expected
    assert run.answer == answer


def test_the_fenced_answer_after_an_interim_reply_is_the_output(typed: InteractiveShell) -> None:
    typed.run_cell_magic(
        "cortex",
        "--script --text --delay 0 --output Weather --output-key w",
        '<response final="false">{"city": "Nowhere", "temp": 0}</response>'
        + TURN
        + 'Here you are:\n```json\n{"city": "Paris", "temp": 18}\n```',
    )
    run = typed.user_ns["_cortex"]
    assert (run.status, repr(typed.user_ns["w"])) == ("completed", "Weather(city='Paris', temp=18)")
    assert typed.user_ns["w"] is run.output


def test_dollar_name_in_the_answer_keeps_the_object(typed: InteractiveShell) -> None:
    typed.run_cell("import pandas as pd\nframe = pd.DataFrame({'a': [1, 2]})\nn = 3")
    typed.run_cell_magic(
        "cortex",
        "--script --text --delay 0 --output dict[str,object]",
        '{"rows": "$n", "table": "$frame", "label": "$n rows"}',
    )
    output = typed.user_ns["_cortex"].output
    assert output["rows"] == 3 and type(output["rows"]) is int
    assert output["table"] is typed.user_ns["frame"]
    assert output["label"] == "$n rows"


def test_a_name_the_model_may_not_see_is_a_field_error_and_no_secret_leaks(
    ip: InteractiveShell, server: FakeOpenAIServer
) -> None:
    """With a real model, ``$name`` in the answer reaches only what the model may reach:
    the hidden variable is refused for that field, and the retry request says why
    without its value."""
    ip.user_ns["creds"] = {"key": SECRET}
    server.script(reply('{"token": "$creds.key"}'), reply('{"token": "none"}'))
    ip.run_cell_magic("cortex", "--model m --text --output dict[str,str]", "Give the token.")
    run = ip.user_ns["_cortex"]
    assert run.output == {"token": "none"}
    retry = server.requests[1].json["messages"][-1]["content"]
    assert "- token: $creds is a notebook variable the model may not see" in retry
    assert SECRET not in json.dumps(server.requests[1].json)
    assert SECRET not in run.to_jsonl()


# ---- retries, through the real SDK ----------------------------------------------------------


def test_the_second_request_names_the_bad_field(
    typed: InteractiveShell, server: FakeOpenAIServer
) -> None:
    server.script(
        reply('<response>{"city": "Paris", "temp": "warm"}</response>'),
        reply('<response>{"city": "Paris", "temp": 18}</response>'),
    )
    typed.run_cell_magic("cortex", "--model m --text --output Weather", "Weather in Paris?")
    run = typed.user_ns["_cortex"]
    assert (run.status, run.output.temp) == ("completed", 18)
    first, second = (request.json for request in server.requests)
    system = first["messages"][0]["content"]
    assert "# Your answer's type: Weather" in system
    assert '<response>{"city": "text", "temp": 0}</response>' in system
    told = second["messages"][-1]
    assert told["role"] == "user"
    assert told["content"].startswith(
        "Your final answer did not fit the type Weather:\n- temp: Input should be a valid "
        "integer, unable to parse string as an integer (got 'warm')"
    )
    assert second["messages"][-2] == {
        "role": "assistant",
        "content": '<response>{"city": "Paris", "temp": "warm"}</response>',
    }


def test_an_answer_that_never_fits_is_one_line_and_keeps_everything(
    typed: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    result = typed.run_cell(
        "%%cortex --script --text --delay 0 --output Weather --output-retries 2 --output-key w\n"
        + TURN.join(['{"city": "A"}', '{"city": "B", "temp": "x"}', '{"temp": 3}'])
    )
    assert isinstance(result.error_in_exec, CortexRunError)
    lines, text = shown(capsys)
    assert "Traceback" not in text
    assert lines == ["cortex: the answer did not fit Weather: city: Field required (3 tries)"]
    run = typed.user_ns["_cortex"]
    assert (run.status, run.output, run.answer) == ("failed", None, '{"temp": 3}')
    assert "w" not in typed.user_ns  # nothing bound
    assert "[failed] the answer did not fit Weather" in text
    # The kernel goes on: the next cell runs.
    typed.run_cell_magic("cortex", "--script --text --delay 0 --output int", "5")
    assert typed.user_ns["_cortex"].output == 5


def test_output_retries_must_be_a_whole_number(typed: InteractiveShell) -> None:
    with pytest.raises(UsageError, match="--output-retries must be 0 or more"):
        typed.run_cell_magic("cortex", "--script --output int --output-retries -1", "1")
    with pytest.raises(UsageError, match="--output-retries must be a whole number"):
        typed.run_cell_magic("cortex", "--script --output int --output-retries two", "1")


# ---- the type expression -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "why"),
    [
        ("lst[int]", "the answer type lst[int] cannot be used: name 'lst' is not defined"),
        ("'list[int'", "the answer type list[int cannot be used: it is not a Python expression"),
        ("42", "the answer type 42 cannot be used: it is a value, not a type"),
        ("Opaque", "the answer type Opaque cannot be used: "),
    ],
)
def test_a_bad_output_expression_is_one_cortex_line_naming_it(
    typed: InteractiveShell, capsys: pytest.CaptureFixture[str], output: str, why: str
) -> None:
    typed.run_cell("class Opaque: pass")
    result = typed.run_cell(f"%%cortex --script --text --output {output}\n1")
    assert isinstance(result.error_in_exec, CortexRunError)
    lines, text = shown(capsys)
    assert "Traceback" not in text
    assert len(lines) == 1 and lines[0].startswith(f"cortex: {why}")


def test_output_is_not_a_setting(ip: InteractiveShell) -> None:
    assert not CortexMagics.class_traits().get("output")
    with pytest.raises(UsageError, match="not name=value"):
        ip.run_line_magic("cortex", "config output=int")


# ---- --output-key ---------------------------------------------------------------------------


def test_output_key_refuses_a_name_the_user_owns_before_the_run(
    typed: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    typed.run_cell("mine = 'keep me'")
    result = typed.run_cell("%%cortex --script --text --output int --output-key mine\n5")
    assert isinstance(result.error_in_exec, CortexRunError)
    lines, _ = shown(capsys)
    assert lines == [
        "cortex: --output-key 'mine' cannot be bound: the notebook already has 'mine', which "
        "cortex did not bind (%%cortex --overwrite replaces it on purpose)"
    ]
    assert typed.user_ns["mine"] == "keep me"
    typed.run_cell_magic(
        "cortex", "--script --text --output int --output-key mine --overwrite", "5"
    )
    assert typed.user_ns["mine"] == 5


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("print", "it would shadow Python's builtin 'print'"),
        ("2x", "it is not a Python identifier"),
    ],
)
def test_output_key_follows_the_output_key_rules(
    typed: InteractiveShell, capsys: pytest.CaptureFixture[str], key: str, why: str
) -> None:
    result = typed.run_cell(
        f"%%cortex --script --text --output int --output-key {key} --overwrite\n5"
    )
    assert isinstance(result.error_in_exec, CortexRunError)
    assert shown(capsys)[0] == [f"cortex: --output-key {key!r} cannot be bound: {why}"]


def test_a_name_a_run_bound_may_be_bound_again_and_is_visible_to_the_next_run(
    typed: InteractiveShell,
) -> None:
    typed.run_cell_magic("cortex", "--script --text --output int --output-key n", "5")
    typed.run_cell_magic("cortex", "--script --text --output int --output-key n", "6")
    assert typed.user_ns["n"] == 6
    typed.run_cell_magic("cortex", "--script --text --output int", '"$n"')
    assert typed.user_ns["_cortex"].output == 6


def test_output_key_without_output_says_what_is_missing(
    typed: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    typed.run_cell("%%cortex --script --text --output-key k\nhello")
    assert shown(capsys)[0] == [
        "cortex: --output-key k binds a typed answer: give its type with --output T"
    ]


# ---- agents ---------------------------------------------------------------------------------


def test_a_named_agent_with_an_output_type_gets_its_type(typed: InteractiveShell) -> None:
    Agent("typed_weather", output_type=typed.user_ns["Weather"], instructions="weather")
    try:
        typed.run_cell_magic(
            "cortex", "--script --text --delay 0 --agent typed_weather", '{"city": "P", "temp": 1}'
        )
        assert typed.user_ns["_cortex"].output == typed.user_ns["Weather"](city="P", temp=1)
        typed.run_cell_magic(  # the cell's --output goes over the agent's own
            "cortex", "--script --text --delay 0 --agent typed_weather --output list[int]", "[1]"
        )
        assert typed.user_ns["_cortex"].output == [1]
    finally:
        default_registry.remove("agent", "typed_weather")


# ---- native tools: response_format ------------------------------------------------------------


def test_native_tools_send_the_schema_as_response_format(
    typed: InteractiveShell, server: FakeOpenAIServer, request: pytest.FixtureRequest
) -> None:
    typed.run_cell(
        "import cortex_jupyter\n"
        "@cortex_jupyter.tool\n"
        "def typed_reading(city: str) -> int:\n"
        "    return 18\n"
    )
    request.addfinalizer(lambda: default_registry.remove("tool", "typed_reading"))
    server.script(
        Stream(
            [*tool_call(0, "call_1", "typed_reading", '{"city": "Paris"}'), finish("tool_calls")]
        ),
        reply('{"response": [18, 19]}'),
    )
    typed.run_cell_magic("cortex", "--model m --text --native-tools --output list[int]", "Go.")
    run = typed.user_ns["_cortex"]
    assert (run.status, run.output) == ("completed", [18, 19])
    for sent in server.requests:
        fmt = sent.json["response_format"]
        assert fmt["type"] == "json_schema"
        assert fmt["json_schema"]["schema"]["properties"]["response"] == {
            "items": {"type": "integer"},
            "type": "array",
        }
        assert fmt["json_schema"]["strict"] is False
        assert [t["function"]["name"] for t in sent.json["tools"]] == ["typed_reading"]


def test_continue_after_a_typed_run_keeps_the_type(
    typed: InteractiveShell, server: FakeOpenAIServer
) -> None:
    server.script(
        Stream([*texts('<response>{"city": "Pa', 5), finish("length")]),
        Stream([*texts('ris", "temp": 18}</response>', 5), finish()]),
    )
    with pytest.raises(CortexRunError, match="token limit"):
        typed.run_cell_magic("cortex", "--model m --text --output Weather", "Weather?")
    typed.run_line_magic("cortex", "continue")
    run = typed.user_ns["_cortex"]
    assert (run.status, repr(run.output)) == ("completed", "Weather(city='Paris', temp=18)")


def test_a_saved_typed_run_loads_and_replays(typed: InteractiveShell, tmp_path: Path) -> None:
    """``Run.load`` gives the answer's JSON form (the type is not in the transcript);
    replayed with ``--output`` the same text validates again, the retry included."""
    typed.run_cell_magic(
        "cortex",
        "--script --text --delay 0 --output Weather",
        '{"city": "Oslo", "temp": "cold"}' + TURN + '{"city": "Oslo", "temp": -2}',
    )
    path = tmp_path / "typed.jsonl"
    typed.run_line_magic("cortex", f"save {path}")
    loaded = Run.load(path)
    assert (loaded.status, loaded.output) == ("completed", {"city": "Oslo", "temp": -2})
    assert loaded.answer == '{"city": "Oslo", "temp": -2}'
    typed.run_cell_magic(
        "cortex", f"--replay {path} --speed 1000 --text --output Weather", "(replay)"
    )
    replayed = typed.user_ns["_cortex"]
    assert replayed.status == "completed", replayed.reason
    assert repr(replayed.output) == "Weather(city='Oslo', temp=-2)"
    checks = [(e.attempt, e.ok) for e in replayed.events if isinstance(e, OutputChecked)]
    assert checks == [(1, False), (2, True)]


# ---- resumed (the attack on issue 26) ------------------------------------------------------


def test_a_typed_run_resumed_keeps_its_type_and_binds_its_output_key(
    typed: InteractiveShell, server: FakeOpenAIServer
) -> None:
    """Stopped in its action, then ``%cortex resume ID``: the resumed run is still typed
    (``--output``, ``--output-key`` are its cell's, as its model and dialect are), so the
    answer is validated into ``_cortex.output`` and bound, and the system prompt still
    shows the schema."""
    release, stop = threading.Event(), [True]

    def zz_reading(x: int) -> int:
        """A reading."""
        if stop.pop() if stop else False:
            _thread.interrupt_main()
            release.wait(5)
        return x * 6

    default_registry.tool(name="zz_reading")(zz_reading)
    act = '<action id="a1">{"name": "zz_reading", "parameters": {"x": 3}, "output_key": "t"}'
    server.script(
        Stream([*texts(act + "</action>", 9), finish()]),
        reply('<response>{"city": "Paris", "temp": "$t"}</response>'),
    )
    try:
        with pytest.raises(KeyboardInterrupt):
            typed.run_cell_magic(
                "cortex", "--model m --text --output Weather --output-key w", "Weather?"
            )
        stopped = typed.user_ns["_cortex"]
        release.set()
        typed.run_line_magic("cortex", f"resume {stopped.id}")
    finally:
        release.set()
        default_registry.remove("tool", "zz_reading")
    run = typed.user_ns["_cortex"]
    assert (run.id, run.status) == (stopped.id, "completed"), run.reason
    assert repr(run.output) == "Weather(city='Paris', temp=18)"
    assert typed.user_ns["w"] is run.output
    system = server.requests[-1].json["messages"][0]["content"]
    assert '"temp"' in system and "Weather" in system


@pytest.mark.parametrize("flags", ["--text", "--text --native-tools"])
def test_a_secret_in_the_types_schema_never_reaches_the_model(
    ip: InteractiveShell, server: FakeOpenAIServer, flags: str
) -> None:
    """A default or a field's description holding a secret is in the type's JSON schema:
    neither the system prompt nor ``response_format`` (native tools) carries it, nor the
    transcript; the validated object, the user's own, keeps the default."""
    ip.user_ns["K"] = SECRET
    ip.run_cell(
        "from pydantic import BaseModel, Field\n"
        "class Cfg(BaseModel):\n"
        "    key: str = K\n"
        "    n: int = Field(description='how many, for ' + K)\n"
    )
    server.script(reply('{"n": 1}'))
    ip.run_cell_magic("cortex", f"--model m {flags} --output Cfg", "Config?")
    run = ip.user_ns["_cortex"]
    assert (run.status, run.output.key) == ("completed", SECRET)
    sent = json.dumps(server.requests[-1].json)
    assert SECRET not in sent and "[redacted]" in sent
    assert SECRET not in run.to_jsonl()

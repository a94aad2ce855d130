"""Typed answers under ``--constrain`` (issue 26, item 5), end to end: what the fake
OpenAI-compatible server received through the real openai SDK, from ``%%cortex --constrain
--output T`` cells and from ``Agent(output_type=T, constrain=True).run``. The grammar in each
request admits the answer only as JSON of the type, in the dialect's answer block; a reply
that may act admits a call or that answer."""

from __future__ import annotations

import json
from functools import partial
from typing import Any

import anyio
import pytest
from IPython.core.interactiveshell import InteractiveShell
from pydantic import BaseModel, Field

from cortex_jupyter.models import OpenAIModel
from cortex_jupyter.runtime import Registry
from tests.agents import run_agent
from tests.models.fake_openai_server import FakeOpenAIServer, Stream, finish, texts
from tests.runtime.gbnf import accepts, left_recursive

DEFINE = """
from pydantic import BaseModel

class Weather(BaseModel):
    city: str
    temp: int

class Node(BaseModel):
    v: int
    kids: list["Node"] = []
"""

#: A typed answer in each dialect's answer block, and a text answer there.
FORMS = {
    "cortex": "<response>{}</response>",
    "hermes": "{}",
    "sigil": "§RESPOND: {}§END:",
    "cogency": "<respond>{}</respond><end>",
}


class Weather(BaseModel):
    city: str
    temp: int = Field(ge=-90)  # a bound the grammar does not write: validation says it


def reply(text: str) -> Stream:
    return Stream([*texts(text, 9), finish()])


def weather_registry() -> Registry:
    registry = Registry(builtins=False)

    @registry.tool
    def get_weather(city: str) -> dict[str, Any]:
        """The weather in a city."""
        return {"city": city, "temp_c": 4}

    return registry


def run(server: FakeOpenAIServer, prompt: str = "Weather in Oslo?", **options: Any) -> Any:
    model = OpenAIModel("smollm2", base_url=server.url, api_key="none", max_retries=0)
    return anyio.run(partial(run_agent, prompt, model=model, **options))


def action(call: dict[str, Any], id: str = "w1") -> str:
    return f'<action type="tool" mode="async" id="{id}">{json.dumps(call)}</action>'


# ---- a cell: --constrain --output T, every dialect


@pytest.mark.parametrize("dialect", list(FORMS))
def test_a_constrained_typed_cell_sends_the_types_grammar_in_every_dialect(
    ip: InteractiveShell, server: FakeOpenAIServer, dialect: str
) -> None:
    ip.run_cell(DEFINE)
    answer = FORMS[dialect].format('{"city": "Oslo", "temp": 4}')
    server.script(reply(answer))
    ip.run_cell_magic(
        "cortex", f"--model m --text --constrain --dialect {dialect} --output Weather", "Oslo?"
    )
    run = ip.user_ns["_cortex"]
    assert run.status == "completed", run.reason
    assert (run.output.city, run.output.temp) == ("Oslo", 4)
    [request] = server.requests
    grammar = request.json["grammar"]
    assert left_recursive(grammar) == []
    assert accepts(grammar, answer)
    assert accepts(grammar, FORMS[dialect].format('{\n  "temp": -3,\n  "city": "Oslo"\n}'))
    for wrong in (
        "It is 4 degrees in Oslo.",  # a text answer
        '{"city": "Oslo"}',  # a field missing
        '{"city": "Oslo", "temp": "4"}',  # a string for an int
        '{"city": "Oslo", "temp": 4, "wind": 3}',  # a key it does not declare
        '```json\n{"city": "Oslo", "temp": 4}\n```',  # the fence: only the bare JSON
    ):
        assert not accepts(grammar, FORMS[dialect].format(wrong)), wrong


def test_a_recursive_type_compiles_to_a_grammar_the_server_is_sent(
    ip: InteractiveShell, server: FakeOpenAIServer
) -> None:
    ip.run_cell(DEFINE)
    answer = '<response>{"v": 1, "kids": [{"v": 2, "kids": [{"v": 3}]}]}</response>'
    server.script(reply(answer))
    ip.run_cell_magic("cortex", "--model m --text --constrain --output Node", "A tree.")
    run = ip.user_ns["_cortex"]
    assert run.output.kids[0].kids[0].v == 3
    grammar = server.requests[0].json["grammar"]
    assert left_recursive(grammar) == []
    assert accepts(grammar, answer)
    assert not accepts(grammar, '<response>{"v": 1, "kids": [{"kids": []}]}</response>')


# ---- a reply that may act, or answer


def test_a_question_that_needs_no_tool_is_answered_in_the_first_reply(
    server: FakeOpenAIServer,
) -> None:
    answer = '<response>{"city": "Oslo", "temp": 4}</response>'
    server.script(reply(answer))
    record = run(server, registry=weather_registry(), constrain=True, output_type=Weather)
    assert record.status == "completed" and record.output == Weather(city="Oslo", temp=4)
    [request] = server.requests
    grammar = request.json["grammar"]
    # The first reply may call a tool (today's action grammar) or give the typed answer.
    assert accepts(grammar, action({"name": "get_weather", "parameters": {"city": "Oslo"}}))
    assert accepts(grammar, answer)
    assert not accepts(grammar, "<response>It is 4 degrees.</response>")
    assert not accepts(grammar, action({"name": "get_time", "parameters": {}}))


def test_an_untyped_run_still_calls_a_tool_first(server: FakeOpenAIServer) -> None:
    server.script(reply("<response>Cold.</response>"))
    run(server, registry=weather_registry(), constrain=True, max_turns=1)
    grammar = server.requests[0].json["grammar"]
    assert not accepts(grammar, "<response>Cold.</response>")
    assert accepts(grammar, action({"name": "get_weather", "parameters": {"city": "Oslo"}}))


def test_after_results_the_answer_may_name_the_tools_output_and_an_int_stays_an_int(
    server: FakeOpenAIServer,
) -> None:
    call = {"name": "get_weather", "parameters": {"city": "Oslo"}, "output_key": "w"}
    answer = '<response>{"city": "$w.city", "temp": "$w.temp_c"}</response>'
    server.script(reply(action(call)), reply(answer))
    record = run(server, registry=weather_registry(), constrain=True, output_type=Weather)
    assert record.status == "completed", record.reason
    assert record.output == Weather(city="Oslo", temp=4)
    second = server.requests[1].json["grammar"]
    assert accepts(second, answer)
    # Only a name the run can resolve: "$temp" was never bound.
    assert not accepts(second, '<response>{"city": "Oslo", "temp": "$temp"}</response>')
    # The first reply had nothing bound: no reference where the schema wants an int.
    first = server.requests[0].json["grammar"]
    assert not accepts(first, '<response>{"city": "Oslo", "temp": "$w.temp_c"}</response>')


def test_a_retry_after_a_failed_validation_admits_the_typed_answer_again(
    server: FakeOpenAIServer,
) -> None:
    # ge=-90 is not in the grammar (it writes no bound on numbers): the first answer is
    # admitted and refused by the validation; the retry's request has the grammar again.
    server.script(
        reply('<response>{"city": "Oslo", "temp": -300}</response>'),
        reply('<response>{"city": "Oslo", "temp": -3}</response>'),
    )
    record = run(server, registry=weather_registry(), constrain=True, output_type=Weather)
    assert record.status == "completed" and record.output.temp == -3
    first, second = (r.json for r in server.requests)
    assert first["grammar"] == second["grammar"]  # no tool ran: the same answer is due
    assert "temp" in second["messages"][-1]["content"]  # the errors went back
    assert accepts(second["grammar"], '<response>{"city": "Oslo", "temp": -3}</response>')
    assert not accepts(second["grammar"], "<response>-3 degrees.</response>")


def test_the_vllm_form_carries_the_typed_grammar_in_structured_outputs(
    server: FakeOpenAIServer,
) -> None:
    answer = '{"city": "Oslo", "temp": 4}'
    server.script(reply(answer))
    record = run(server, constrain="vllm", output_type=Weather, dialect="hermes")
    assert record.output == Weather(city="Oslo", temp=4)
    body = server.requests[0].json
    assert "grammar" not in body and "response_format" not in body
    assert accepts(body["structured_outputs"]["grammar"], answer)
    assert not accepts(body["structured_outputs"]["grammar"], "Oslo, 4 degrees.")

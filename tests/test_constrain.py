"""constrain=True end to end against the loopback OpenAI-compatible server: the request
bodies carry the turn's grammar, never beside tools=, and a refusal is one clear line."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import anyio
import pytest
from IPython.core.interactiveshell import InteractiveShell

from cortex_jupyter.models import OpenAIModel, ScriptModel
from cortex_jupyter.runtime import Registry
from cortex_jupyter.runtime.core.calls.registry import default_registry
from cortex_jupyter.runtime.core.model.chunks import Finish, TextChunk
from tests.agents import run_agent
from tests.models.fake_openai_server import Error, FakeOpenAIServer, Stream, finish, texts
from tests.runtime.gbnf import accepts, sampler
from tests.runtime.test_grammar import sampling_registry

ACTION = (
    '<action type="tool" mode="async" id="w1">'
    '{"name": "get_weather", "parameters": {"city": "Oslo"}}</action>'
)
ANSWER = "<response>It is 4 degrees in Oslo.</response>"


def weather_registry() -> Registry:
    registry = Registry(builtins=False)

    @registry.tool
    def get_weather(city: str) -> dict[str, Any]:
        """The weather in a city."""
        return {"city": city, "temp_c": 4}

    @registry.tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    return registry


def run(server: FakeOpenAIServer, *replies: str, **options: Any) -> Any:
    """The agent's run against ``server``, whose model writes ``replies``, one a turn."""
    server.script(*(Stream([*texts(reply, 7), finish()]) for reply in replies))
    model = OpenAIModel("smollm2", base_url=server.url, api_key="none", max_retries=0)
    return anyio.run(partial(run_agent, "Use get_weather for Oslo.", model=model, **options))


def test_first_turn_grammar_calls_known_tools_and_the_later_turn_answers(
    server: FakeOpenAIServer,
) -> None:
    record = run(server, ACTION, ANSWER, registry=weather_registry(), constrain=True)
    assert record.status == "completed" and record.answer == "It is 4 degrees in Oslo."
    assert record.actions["w1"].status == "done"
    first, second = (request.json for request in server.requests)
    assert "tools" not in first and "tools" not in second
    assert accepts(first["grammar"], ACTION)
    assert not accepts(first["grammar"], ACTION.replace("get_weather", "get_time"))
    assert not accepts(first["grammar"], ANSWER)
    # After the results come back, the grammar lets the model answer, or call a tool
    # again (a task may need a second tool after the first one's result; an exact
    # repeat is not run: test_a_repeated_call_is_not_run_and_the_next_turn_answers).
    assert accepts(second["grammar"], ANSWER)
    again = '{"name": "add", "parameters": {"b": 2, "a": 1}}'
    assert accepts(
        second["grammar"], ACTION.replace("w1", "w2").split(">")[0] + f">{again}</action>"
    )
    assert not accepts(second["grammar"], "<response> \n </response>")  # a blank answer


def test_vllm_form_sends_structured_outputs_and_no_grammar_field(
    server: FakeOpenAIServer,
) -> None:
    record = run(server, ACTION, ANSWER, registry=weather_registry(), constrain="vllm")
    assert record.status == "completed"
    body = server.requests[0].json
    assert "grammar" not in body
    assert accepts(body["structured_outputs"]["grammar"], ACTION)


def test_hermes_turns_are_constrained_to_tool_calls_then_an_answer(
    server: FakeOpenAIServer,
) -> None:
    call = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 40}}</tool_call>'
    record = run(
        server, call, "It is 42.", registry=weather_registry(), constrain=True, dialect="hermes"
    )
    assert record.status == "completed" and record.answer == "It is 42."
    assert [node.output for node in record.actions.values()] == [42]
    first, second = (request.json["grammar"] for request in server.requests)
    assert accepts(first, call) and not accepts(first, "It is 42.")
    assert accepts(second, "It is 42.")


def test_without_constrain_no_grammar_is_sent(server: FakeOpenAIServer) -> None:
    server.script(Stream([*texts(ANSWER, 9), finish()]))
    run(server, registry=weather_registry())
    assert "grammar" not in server.requests[0].json


@pytest.mark.parametrize(
    "message",
    [
        "grammar is not supported by this server",
        "Extra inputs are not permitted: structured_outputs",
    ],
)
def test_a_server_that_refuses_the_grammar_gives_one_clear_line(
    server: FakeOpenAIServer, message: str
) -> None:
    server.script(Error(400, {"error": {"message": message, "type": "invalid_request_error"}}))
    record = run(server, registry=weather_registry(), constrain=True)
    assert record.status == "failed"
    assert "refused the grammar sent for constrained decoding" in record.reason
    assert "constrain='vllm'" in record.reason and message.split(":")[0] in record.reason
    assert "\n" not in record.reason
    assert len(server.requests) == 1  # not retried without it: the user asked for it


def test_a_400_for_another_reason_is_not_blamed_on_the_grammar(
    server: FakeOpenAIServer,
) -> None:
    server.script(Error(400, {"error": {"message": "messages: field required"}}))
    record = run(server, registry=weather_registry(), constrain=True)
    assert record.status == "failed" and "grammar" not in record.reason


def test_constrain_never_goes_with_native_tools() -> None:
    with pytest.raises(ValueError, match="constrain and native_tools cannot go together") as e:
        run_agent_sync(constrain=True, native_tools=True)
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="constrain must be True, False, 'gbnf', 'vllm'"):
        run_agent_sync(constrain="lark")
    with pytest.raises(ValueError, match="no grammar for the 'auto' dialect"):
        run_agent_sync(constrain=True, dialect="auto")


def run_agent_sync(**options: Any) -> Any:
    model = ScriptModel([ANSWER])
    return anyio.run(partial(run_agent, "hi", model=model, **options))


def test_a_model_that_takes_no_grammar_runs_unconstrained_and_says_so() -> None:
    record = anyio.run(
        partial(
            run_agent, "hi", model=ScriptModel([ANSWER]), registry=weather_registry(),
            constrain=True,
        )
    )  # fmt: skip
    assert record.status == "completed"
    assert any("takes no grammar" in note for note in record.notes)


# ---- the magic ------------------------------------------------------------------------


@pytest.fixture
def weather_tool() -> Any:
    @default_registry.tool(name="constrain_weather")
    def weather(city: str) -> str:
        """The weather in a city."""
        return f"4 degrees in {city}"

    yield
    default_registry.remove("tool", "constrain_weather")


def test_cell_option_constrain_sends_a_grammar(
    ip: InteractiveShell, server: FakeOpenAIServer, weather_tool: None
) -> None:
    action = ACTION.replace("get_weather", "constrain_weather")
    server.script(Stream([*texts(action, 9), finish()]), Stream([*texts(ANSWER, 9), finish()]))
    ip.run_cell_magic("cortex", "--model smollm2 --constrain --text", "Weather in Oslo?")
    assert ip.user_ns["_cortex"].status == "completed"
    assert accepts(server.requests[0].json["grammar"], action)
    assert "tools" not in server.requests[0].json


def test_config_constrain_vllm_and_a_bad_form(
    ip: InteractiveShell, server: FakeOpenAIServer, weather_tool: None
) -> None:
    action = ACTION.replace("get_weather", "constrain_weather")
    server.script(Stream([*texts(action, 9), finish()]), Stream([*texts(ANSWER, 9), finish()]))
    ip.run_line_magic("config", "CortexMagics.constrain = 'vllm'")
    try:
        ip.run_cell_magic("cortex", "--model smollm2 --text", "Weather in Oslo?")
    finally:
        ip.run_line_magic("config", "CortexMagics.constrain = False")
    assert "structured_outputs" in server.requests[0].json
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match="--constrain must be gbnf or vllm"):
        ip.run_cell_magic("cortex", "--model smollm2 --constrain lark", "x")


def test_cell_constrain_beside_native_tools_is_refused_before_any_request(
    ip: InteractiveShell, server: FakeOpenAIServer, weather_tool: None
) -> None:
    from cortex_jupyter.session import CortexRunError

    with pytest.raises(CortexRunError, match="constrain and native_tools cannot go together"):
        ip.run_cell_magic("cortex", "--model smollm2 --constrain --native-tools --text", "x")
    assert server.requests == []


# ---- multi-step tasks under a grammar --------------------------------------------------


def city_registry(calls: list[str]) -> Registry:
    registry = Registry(builtins=False)

    @registry.tool
    def get_city() -> str:
        """Where the user is."""
        calls.append("get_city")
        return "Oslo"

    @registry.tool
    def get_weather(city: str) -> dict[str, Any]:
        """The weather in a city."""
        calls.append(f"get_weather {city}")
        return {"city": city, "temp_c": 4}

    return registry


def action(id: str, body: str) -> str:
    return f'<action type="tool" mode="async" id="{id}">{body}</action>'


CITY = action("c1", '{"name": "get_city"}')
WEATHER = action("w1", '{"name": "get_weather", "parameters": {"city": "Oslo"}}')


def test_a_second_tool_can_follow_the_first_ones_result(server: FakeOpenAIServer) -> None:
    # Under the old grammar the reply after results could only answer: a task needing
    # get_weather after get_city's result could never call it with --constrain.
    calls: list[str] = []
    record = run(server, CITY, WEATHER, ANSWER, registry=city_registry(calls), constrain=True)
    assert record.status == "completed" and record.answer == "It is 4 degrees in Oslo."
    assert calls == ["get_city", "get_weather Oslo"]
    first, second, third = (request.json["grammar"] for request in server.requests)
    assert accepts(first, CITY) and not accepts(first, ANSWER)
    assert accepts(second, WEATHER) and accepts(second, ANSWER)
    # get_city takes nothing and ran: calling it again can only repeat it.
    assert not accepts(second, CITY.replace("c1", "c2"))
    assert accepts(third, ANSWER) and accepts(third, WEATHER.replace("w1", "w2"))


def test_a_repeated_call_is_not_run_and_the_next_turn_answers(server: FakeOpenAIServer) -> None:
    calls: list[str] = []
    again = action("w2", '{\n  "parameters": {"city": "Oslo"},\n  "name": "get_weather"\n}')
    record = run(server, WEATHER, again, ANSWER, registry=city_registry(calls), constrain=True)
    assert record.status == "completed" and record.answer == "It is 4 degrees in Oslo."
    assert calls == ["get_weather Oslo"]  # once
    repeat = record.actions["w2"]
    assert repeat.status == "skipped" and "the same call as 'w1'" in str(repeat.error)
    # The model is told, and the turn after a reply of repeats only may only answer.
    told = json.dumps(server.requests[2].json["messages"])
    assert "not run: the same call as 'w1'" in told
    third = server.requests[2].json["grammar"]
    assert accepts(third, ANSWER) and not accepts(third, WEATHER.replace("w1", "w3"))


def test_without_a_grammar_a_repeated_call_runs_again(server: FakeOpenAIServer) -> None:
    calls: list[str] = []
    record = run(
        server, WEATHER, WEATHER.replace("w1", "w2"), ANSWER, registry=city_registry(calls)
    )
    assert record.status == "completed" and calls == ["get_weather Oslo"] * 2


class GrammarModel:
    """A model that writes, each turn, a random text the request's grammar admits: what
    constrained decoding lets a model write at its worst. Texts naming a ``$`` reference
    are drawn again (no names are bound in these runs)."""

    name = "grammar-sampler"

    def __init__(self, seed: str) -> None:
        self.rng = random.Random(seed)

    async def stream(
        self, messages: Any, *, constraint: dict[str, Any], **options: Any
    ) -> AsyncIterator[Any]:
        sample = sampler(constraint["grammar"])
        text = next(t for t in (sample(self.rng) for _ in range(500)) if "$" not in t)
        yield TextChunk(text)
        yield Finish("stop")


@pytest.mark.parametrize("dialect", ["cortex", "hermes", "sigil", "cogency"])
def test_whatever_a_grammar_lets_a_model_write_runs(dialect: str) -> None:
    for i in range(12):
        record = anyio.run(
            partial(
                run_agent, "go", model=GrammarModel(f"{dialect} {i}"),
                registry=sampling_registry(), dialect=dialect, constrain=True, max_turns=4,
            )
        )  # fmt: skip
        assert not record.errors, record.errors
        for node in record.actions.values():
            skipped = node.status == "skipped" and "the same call as" in str(node.error)
            assert node.status == "done" or skipped, (node.name, node.status, node.error)
        assert record.status in ("completed", "turn_limit"), record.reason


def test_a_model_that_takes_no_grammar_runs_a_repeated_call_again() -> None:
    # No grammar was sent (the model takes none): the run is as without --constrain.
    calls: list[str] = []
    model = ScriptModel([WEATHER, WEATHER.replace("w1", "w2"), ANSWER])
    record = anyio.run(
        partial(run_agent, "go", model=model, registry=city_registry(calls), constrain=True)
    )
    assert record.status == "completed" and calls == ["get_weather Oslo"] * 2
    assert record.actions["w2"].status == "done"


def test_a_call_that_failed_may_be_tried_again_under_a_grammar(server: FakeOpenAIServer) -> None:
    # The first try failed (a flaky service): its result is an error, not an answer, so
    # the model's retry runs.
    tries: list[str] = []
    registry = Registry(builtins=False)

    @registry.tool
    def get_weather(city: str) -> dict[str, Any]:
        """The weather in a city."""
        tries.append(city)
        if len(tries) == 1:
            raise ConnectionError("the weather service did not answer")
        return {"city": city, "temp_c": 4}

    record = run(
        server, WEATHER, WEATHER.replace("w1", "w2"), ANSWER, registry=registry, constrain=True
    )
    assert tries == ["Oslo", "Oslo"]
    assert record.actions["w1"].status == "failed" and record.actions["w2"].status == "done"
    assert record.status == "completed"


def test_the_same_number_written_another_way_is_a_repeat(server: FakeOpenAIServer) -> None:
    calls: list[str] = []
    registry = Registry(builtins=False)

    @registry.tool
    def scale(x: float) -> float:
        """Scale a number."""
        calls.append(repr(x))
        return x * 2

    one = action("s1", '{"name": "scale", "parameters": {"x": 1}}')
    again = action("s2", '{"name": "scale", "parameters": {"x": 1.0}}')
    record = run(server, one, again, ANSWER, registry=registry, constrain=True)
    assert len(calls) == 1 and record.actions["s2"].status == "skipped"


def test_a_tool_with_no_parameters_that_failed_may_be_called_again(
    server: FakeOpenAIServer,
) -> None:
    tries: list[int] = []
    registry = Registry(builtins=False)

    @registry.tool
    def get_city() -> str:
        """Where the user is."""
        tries.append(1)
        if len(tries) == 1:
            raise ConnectionError("the location service did not answer")
        return "Oslo"

    record = run(server, CITY, CITY.replace("c1", "c2"), ANSWER, registry=registry, constrain=True)
    second = server.requests[1].json["grammar"]
    assert accepts(second, CITY.replace("c1", "c2"))
    assert len(tries) == 2 and record.actions["c2"].status == "done"


@pytest.mark.parametrize("dialect", ["cortex", "hermes", "sigil", "cogency"])
def test_a_number_of_more_digits_than_python_reads_is_a_refused_call(dialect: str) -> None:
    # The grammar admits any number of digits, and a small model may write digits until
    # its token limit: Python's int() refuses over 4,300 of them with a ValueError.
    huge = "9" * 5000
    call = {
        "cortex": action("w1", f'{{"name": "add", "parameters": {{"a": {huge}, "b": 1}}}}'),
        "hermes": f'<tool_call>{{"name": "add", "arguments": {{"a": {huge}, "b": 1}}}}</tool_call>',
        "sigil": f'§CALLS: [{{"name": "add", "args": {{"a": {huge}, "b": 1}}}}]\n§EXECUTE:',
        "cogency": f'<execute>[{{"name": "add", "args": {{"a": {huge}, "b": 1}}}}]</execute>',
    }[dialect]
    answer = {"cortex": ANSWER, "hermes": "It is 4 degrees.", "sigil": "§RESPOND: 4§END:"}
    model = ScriptModel([call, answer.get(dialect, "<respond>4</respond><end>")])
    record = anyio.run(
        partial(run_agent, "go", model=model, registry=weather_registry(), dialect=dialect)
    )
    assert record.status == "completed", record.reason
    [error] = record.errors
    assert "4300 digits" in error.message and "\n" not in error.message

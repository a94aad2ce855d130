"""ScriptModel: a hand-written reply streamed like a model's, one turn per call."""

from __future__ import annotations

import time
from contextlib import aclosing
from typing import Any

import anyio
import pytest

from cortex_jupyter.models import (
    ModelError,
    NoReplyScripted,
    ScriptExhausted,
    ScriptModel,
    split_replies,
    split_turns,
)
from cortex_jupyter.protocol import Parser
from cortex_jupyter.runtime.core.model.chunks import (
    Finish,
    Message,
    ModelChunk,
    TextChunk,
    text_client,
)
from cortex_jupyter.runtime.core.model.client import complete

ASK: list[Message] = [{"role": "user", "content": "go"}]

SCRIPT = """\
<thought>Look it up.</thought>
<action type="tool" id="a1">{"name": "search", "parameters": {"q": "cats"}}</action>
--- next turn ---
<response>Cats sleep a lot.</response>
"""


async def reply(model: ScriptModel, **kw: Any) -> list[ModelChunk]:
    async with aclosing(model.stream(ASK, **kw)) as chunks:
        return [c async for c in chunks]


def text_of(chunks: list[ModelChunk]) -> str:
    return "".join(c.text for c in chunks if isinstance(c, TextChunk))


@pytest.mark.anyio
async def test_streams_the_text_in_chunks_of_chunk_size_then_finishes() -> None:
    chunks = await reply(ScriptModel("abcdefghij", chunk_size=4))
    assert chunks == [TextChunk("abcd"), TextChunk("efgh"), TextChunk("ij"), Finish("stop")]


@pytest.mark.anyio
@pytest.mark.parametrize("size", [1, 3, 16, 1000])
async def test_any_chunk_size_gives_the_same_text(size: int) -> None:
    chunks = await reply(ScriptModel(SCRIPT, chunk_size=size))
    first_turn = SCRIPT.split("\n--- next turn ---\n")[0]
    assert text_of(chunks) == first_turn
    assert all(len(c.text) <= size for c in chunks if isinstance(c, TextChunk))


@pytest.mark.anyio
async def test_an_empty_script_is_an_empty_reply() -> None:
    assert await reply(ScriptModel("")) == [Finish("stop")]


@pytest.mark.anyio
async def test_the_delay_is_waited_between_chunks() -> None:
    model = ScriptModel("x" * 4, chunk_size=1, delay=0.1)
    started = time.monotonic()
    arrivals = []
    async with aclosing(model.stream(ASK)) as chunks:
        async for c in chunks:
            if isinstance(c, TextChunk):
                arrivals.append(time.monotonic() - started)
    assert len(arrivals) == 4
    assert arrivals[0] < 0.08  # no wait before the first chunk
    assert 0.29 <= arrivals[3] < 0.9  # three gaps of 0.1 s


@pytest.mark.anyio
async def test_each_call_streams_the_next_turn() -> None:
    model = ScriptModel(SCRIPT, chunk_size=7)
    first = text_of(await reply(model))
    second = text_of(await reply(model))
    assert first.endswith("</action>")  # the line break before the separator is dropped
    assert second == "<response>Cats sleep a lot.</response>\n"
    assert model.turns_used == 2


@pytest.mark.anyio
async def test_turns_can_be_given_as_a_list() -> None:
    model = ScriptModel(["one", "two"])
    assert [text_of(await reply(model)) for _ in range(2)] == ["one", "two"]


@pytest.mark.parametrize(
    ("script", "turns"),
    [
        ("a\n--- next turn ---\nb", ["a", "b"]),
        ("a\n\n--- next turn ---\nb\n", ["a\n", "b\n"]),
        ("a\r\n  --- next turn ---  \r\nb", ["a", "b"]),  # spaces and CRLF are fine
        ("--- next turn ---\nb", ["", "b"]),
        ("a\n--- next turn --- please\nb", ["a\n--- next turn --- please\nb"]),  # not alone
        ('{"x": "--- next turn ---"}', ['{"x": "--- next turn ---"}']),  # inside a line
        ("no separator", ["no separator"]),
    ],
)
def test_split_turns(script: str, turns: list[str]) -> None:
    assert split_turns(script) == turns


@pytest.mark.anyio
async def test_running_out_of_turns_says_which_turn_and_how_many_there_are() -> None:
    model = ScriptModel(SCRIPT)
    await reply(model)
    await reply(model)
    with pytest.raises(ScriptExhausted) as caught:
        await reply(model)
    assert isinstance(caught.value, ModelError)
    assert (caught.value.turn, caught.value.turns) == (3, 2)
    assert str(caught.value) == (
        "The script has no turn 3; it has only 2 turns. Each reply the run asks the model for "
        "takes the next turn (the agent asks again after action results): add turn 3 after a "
        "line '--- next turn ---', or pass a list with one text per turn."
    )


@pytest.mark.anyio
async def test_a_one_turn_script_says_turn_in_the_singular() -> None:
    model = ScriptModel("only")
    await reply(model)
    with pytest.raises(ScriptExhausted, match=r"no turn 2; it has only 1 turn\. "):
        await reply(model)


@pytest.mark.anyio
async def test_reset_starts_again_from_the_first_turn() -> None:
    model = ScriptModel(["one", "two"])
    await reply(model)
    model.reset()
    assert text_of(await reply(model)) == "one"


@pytest.mark.anyio
async def test_turns_are_taken_in_call_order() -> None:
    model = ScriptModel(["one", "two"])
    first, second = model.stream(ASK), model.stream(ASK)
    async with aclosing(second), aclosing(first):
        assert await anext(second) == TextChunk("two")
        assert await anext(first) == TextChunk("one")


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"chunk_size": 0}, ValueError, "chunk_size must be at least 1 character; got 0"),
        ({"chunk_size": -3}, ValueError, "chunk_size must be at least 1 character; got -3"),
        ({"chunk_size": 2.5}, TypeError, "chunk_size must be a whole number of characters"),
        ({"chunk_size": True}, TypeError, "chunk_size must be a whole number of characters"),
        ({"delay": -0.1}, ValueError, "delay must be 0 or more seconds; got -0.1"),
        ({"delay": float("nan")}, ValueError, "delay must be 0 or more seconds; got nan"),
        ({"delay": "1"}, TypeError, "delay must be a number of seconds; got '1'"),
    ],
)
def test_bad_options_are_refused(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        ScriptModel("text", **options)


def test_an_empty_list_of_turns_is_refused() -> None:
    with pytest.raises(ValueError, match="a script needs at least one turn; got an empty list"):
        ScriptModel([])


def test_repr_and_name() -> None:
    model = ScriptModel(SCRIPT, chunk_size=8, delay=0.5)
    assert repr(model) == "ScriptModel(turns=2, chunk_size=8, delay=0.5)"
    assert model.name == "script"
    assert ScriptModel("x", name="demo").name == "demo"


@pytest.mark.anyio
async def test_cancelling_mid_script_stops_it_promptly() -> None:
    model = ScriptModel("x" * 100, chunk_size=1, delay=0.02)
    got: list[ModelChunk] = []
    started = time.monotonic()
    with anyio.move_on_after(0.1) as scope:
        async with aclosing(model.stream(ASK)) as chunks:
            async for c in chunks:
                got.append(c)
    assert scope.cancelled_caught
    assert time.monotonic() - started < 0.5
    assert 1 <= len(got) < 50


@pytest.mark.anyio
async def test_with_no_delay_other_tasks_still_run_between_chunks() -> None:
    model = ScriptModel("x" * 50, chunk_size=1)
    ticks = 0

    async def count() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await anyio.sleep(0)

    async with anyio.create_task_group() as tg:
        tg.start_soon(count)
        await reply(model)
        tg.cancel_scope.cancel()
    assert ticks >= 25


@pytest.mark.anyio
async def test_the_script_parses_as_the_protocol_it_holds() -> None:
    parser = Parser()
    events = []
    async with aclosing(ScriptModel(SCRIPT, chunk_size=5).stream(ASK)) as chunks:
        async for c in chunks:
            if isinstance(c, TextChunk):
                events += parser.feed(c.text)
    events += parser.close()
    assert [e.action.name for e in events if e.kind == "action"] == ["search"]


@pytest.mark.anyio
async def test_text_client_reads_a_script() -> None:
    assert await complete(text_client(ScriptModel("abc", chunk_size=1)), ASK) == "abc"


# ---- reply sections: what llm and agent actions are answered -------------------------------

REPLIES = """<action type="llm" id="sum">{"name": "complete", "parameters": {"p": "x"}}</action>
--- next turn ---
<response>main turn 2</response>
--- reply to sum ---
A short summary.
--- reply to helper ---
<action id="x">{"name": "tool"}</action>
--- next turn ---
<response>helper done</response>"""


def test_reply_sections_are_split_from_the_main_script() -> None:
    main, sections = split_replies(REPLIES)
    assert main.endswith("<response>main turn 2</response>")
    assert sections == {
        "sum": "A short summary.",
        "helper": '<action id="x">{"name": "tool"}</action>\n--- next turn ---\n'
        "<response>helper done</response>",
    }
    model = ScriptModel(REPLIES)
    assert len(model.turns) == 2  # sections are not turns of the main script


@pytest.mark.anyio
async def test_for_action_answers_from_its_section_and_leaves_the_main_turns_alone() -> None:
    model = ScriptModel(REPLIES, chunk_size=4)
    assert await complete(text_client(model.for_action("sum")), ASK) == "A short summary."
    helper = model.for_action("helper")
    assert helper.turns == (
        '<action id="x">{"name": "tool"}</action>',
        "<response>helper done</response>",
    )
    # a renamed id (the runtime's r1~2 for a reused r1) finds the section written for it
    assert model.for_action("sum~2").turns == ("A short summary.",)
    assert model.remaining_turns == 2  # nothing above took a main turn


@pytest.mark.anyio
async def test_an_action_without_a_section_fails_naming_the_section_to_add() -> None:
    model = ScriptModel(REPLIES)
    with pytest.raises(
        NoReplyScripted, match=r"add a section starting with a line '--- reply to nope ---'"
    ):
        await complete(text_client(model.for_action("nope")), ASK)

"""ReplayModel: a saved run streamed again, chunk for chunk, with its timing.

The recorded runs here are real ones: the OpenAI client talking to the fake server over
HTTP, through the agent loop, so what is replayed is what a transcript really holds.
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from cortex_jupyter.models import OpenAIModel, ScriptModel, StreamDropped
from cortex_jupyter.models.replay import ReplayExhausted, ReplayModel
from cortex_jupyter.runtime import Registry, Run
from cortex_jupyter.runtime.core.model.chunks import (
    Finish,
    ModelChunk,
    TextChunk,
    ToolCallReady,
    Usage,
)
from cortex_jupyter.runtime.core.record.run import decode_event
from cortex_jupyter.runtime.loop.conversation import Conversation
from cortex_jupyter.runtime.loop.transcript import turns_of
from tests.agents import run_agent

from .fake_openai_server import (
    FakeOpenAIServer,
    Stream,
    finish,
    reasoning,
    role,
    texts,
    tool_call,
    usage,
)

pytestmark = pytest.mark.anyio

KEY = "sk-proj-REPLAYKEYREPLAYKEY0123456789abcdef"


def make_registry() -> Registry:
    registry = Registry(builtins=False)

    @registry.tool
    def add(a: int, b: int = 0) -> int:
        """Add two numbers."""
        return a + b

    return registry


async def collect(chunks: AsyncIterator[ModelChunk]) -> list[ModelChunk]:
    return [chunk async for chunk in chunks]


async def record_real_run(server: FakeOpenAIServer, *, cut: bool = False) -> Run:
    server.script(
        Stream(
            [
                role(),
                reasoning("Adding. "),
                *tool_call(0, "call_a", "add", '{"a": 2, "b": 3}', pieces=3),
                finish("tool_calls"),
                usage(50, 9),
            ],
            gap=0.01,
        ),
        Stream(
            [role(), *texts("<response>It is 5.</response>", 6)[:3]]
            if cut
            else [role(), *texts("<response>It is 5.</response>", 6), finish(), usage(70, 7)],
            gap=0.01,
            cut=cut,
        ),
    )
    model = OpenAIModel("fake-model", api_key=KEY, base_url=server.url, max_retries=0)
    return await run_agent("2 + 3?", model=model, registry=make_registry(), native_tools=True)


async def test_a_real_run_replays_chunk_for_chunk(server: FakeOpenAIServer) -> None:
    run = await record_real_run(server)
    assert run.status == "completed" and run.actions["call_a"].output == 5
    saved = run.to_jsonl()
    assert KEY not in saved and "REPLAYKEY" not in saved
    replay = ReplayModel(saved, speed=math.inf)
    assert replay.name == "fake-model" and len(replay.turns) == 2
    for turn in turns_of(run):
        assert await collect(replay.stream([])) == [chunk for _, chunk in turn.chunks]
    first = [chunk for _, chunk in turns_of(run)[0].chunks]
    assert ToolCallReady(0, "call_a", "add", '{"a": 2, "b": 3}') in first
    assert Usage(50, 9) in first
    # the model the server said answered is in the transcript, and replayed with its Finish
    replayed = await collect(ReplayModel(saved, speed=math.inf).stream([]))
    assert isinstance(replayed[-1], Finish) and replayed[-1].model == "fake-model"

    again = await run_agent("2 + 3?", model=ReplayModel(saved, speed=math.inf),
                            registry=make_registry(), native_tools=True)  # fmt: skip
    assert again.status == "completed" and again.actions["call_a"].output == 5
    assert again.response == "It is 5." and again.thought == "Adding. "
    assert Conversation.from_run(again).history == Conversation.from_run(run).history


async def test_a_cut_stream_replays_as_cut(server: FakeOpenAIServer) -> None:
    run = await record_real_run(server, cut=True)
    assert run.status == "interrupted"
    assert run.reason is not None and KEY not in run.reason
    assert KEY not in run.to_jsonl()
    replay = ReplayModel(run, speed=math.inf)
    await collect(replay.stream([]))
    received: list[ModelChunk] = []
    with pytest.raises(StreamDropped, match="broke off after"):
        async for chunk in replay.stream([]):
            received.append(chunk)
    assert "".join(c.text for c in received if isinstance(c, TextChunk)) == run_text(run, 2)


def run_text(run: Run, number: int) -> str:
    turn = turns_of(run)[number - 1]
    return "".join(c.text for _, c in turn.chunks if isinstance(c, TextChunk))


async def script_run(text: str, delay: float) -> Run:
    return await run_agent(
        "go", model=ScriptModel(text, chunk_size=4, delay=delay), registry=make_registry()
    )


async def test_pauses_follow_the_recording_divided_by_speed() -> None:
    run = await script_run("<response>" + "x" * 60 + "</response>", delay=0.01)
    recorded = turns_of(run)[0]
    span = recorded.chunks[-1][0] - recorded.started
    started = time.monotonic()
    await collect(ReplayModel(run).stream([]))
    assert time.monotonic() - started >= 0.9 * span
    started = time.monotonic()
    await collect(ReplayModel(run, speed=10).stream([]))
    assert time.monotonic() - started < 0.5 * span


async def test_turns_of_several_runs_follow_each_other_and_run_out() -> None:
    first = await script_run("<response>one</response>", delay=0)
    second = await script_run("<response>two</response>", delay=0)
    replay = ReplayModel([first, second.to_jsonl()], speed=math.inf, name="again")
    assert replay.name == "again"
    texts_seen = []
    for _ in range(2):
        chunks = await collect(replay.stream([]))
        texts_seen.append("".join(c.text for c in chunks if isinstance(c, TextChunk)))
    assert texts_seen == ["<response>one</response>", "<response>two</response>"]
    with pytest.raises(
        ReplayExhausted, match="The replay has no turn 3; its transcripts hold only 2"
    ):
        await collect(replay.stream([]))
    replay.reset()
    assert await collect(replay.stream([])) != []


@pytest.mark.parametrize("speed", [0, -1, True, "fast"])
async def test_speed_must_be_positive(speed: Any) -> None:
    run = await script_run("<response>x</response>", delay=0)
    with pytest.raises(ValueError, match="speed must be a number above 0"):
        ReplayModel(run, speed=speed)


async def test_a_run_without_model_turns_cannot_be_replayed() -> None:
    with pytest.raises(ValueError, match="no model turns to replay"):
        ReplayModel(Run())


def test_a_transcript_from_before_response_models_still_replays_its_finish() -> None:
    """A chunk event saved before ``model`` was recorded decodes, with no model."""
    event = decode_event({"kind": "chunk", "type": "finish", "time": 1.5, "reason": "length"})
    finished = event.to_chunk()  # type: ignore[union-attr]
    assert finished == Finish("length") and finished.model is None  # type: ignore[union-attr]

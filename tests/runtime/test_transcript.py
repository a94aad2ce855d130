"""Transcripts of agent runs: written, read back, the conversation rebuilt, replayed, continued."""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from cortex_jupyter.models import OpenAIModel, ScriptModel
from cortex_jupyter.models.replay import ReplayModel
from cortex_jupyter.runtime import Registry, Run
from cortex_jupyter.runtime.core.model.chunks import Message, ModelChunk, TextChunk
from cortex_jupyter.runtime.loop.conversation import Conversation
from cortex_jupyter.runtime.loop.transcript import (
    continue_note,
    cut_reply,
    load_run,
    run_messages,
    turns_of,
)
from tests.agents import continue_run, run_agent

pytestmark = pytest.mark.anyio

SCRIPT = """<thought>First the data.</thought>
<action id="load">{"name": "load", "parameters": {"n": 3}, "output_key": "rows"}</action>
<response final="false">Loading.</response>
--- next turn ---
<action id="total">{"name": "total", "parameters": {"rows": "$rows"}}</action>
--- next turn ---
<response>The total is 3.</response>"""


def make_registry() -> Registry:
    registry = Registry(builtins=False)

    @registry.tool
    async def load(n: int) -> list[int]:
        """Rows."""
        await anyio.sleep(0.02)
        return [1] * n

    @registry.tool
    def total(rows: list[int]) -> int:
        """Sum rows."""
        return sum(rows)

    return registry


@pytest.fixture
def registry() -> Registry:
    return make_registry()


async def test_round_trip_keeps_turns_conversation_and_text(registry: Registry) -> None:
    conversation = Conversation()
    model = ScriptModel(SCRIPT, chunk_size=9, delay=0.002)
    run = await run_agent("sum the rows", model=model, registry=registry,
                          conversation=conversation)  # fmt: skip
    back = Run.from_jsonl(run.to_jsonl())
    assert (back.status, back.model, back.turns, back.reason) == ("completed", "script", 3, None)
    assert back.thought == run.thought and back.response == run.response
    assert back.response == "Loading.\n\nThe total is 3."
    assert Conversation.from_run(back).history == conversation.history
    assert run_messages(back)[0] == {"role": "user", "content": "sum the rows"}
    assert [m["role"] for m in run_messages(back)] == [
        "user", "assistant", "user", "assistant", "user", "assistant",
    ]  # fmt: skip
    turns, again = turns_of(run), turns_of(back)
    assert [(t.number, t.actions, t.outcome) for t in again] == [
        (1, ["load"], "results"),
        (2, ["total"], "results"),
        (3, [], "final"),
    ]
    assert [t.chunks for t in again] == [t.chunks for t in turns]
    joined = "".join(c.text for _, c in again[0].chunks if isinstance(c, TextChunk))
    assert joined == SCRIPT.split("\n--- next turn ---\n")[0]
    assert again[0].assistant == joined


async def test_conversation_from_saved_transcripts(registry: Registry, tmp_path: Path) -> None:
    conversation = Conversation()
    first = await run_agent("one", model=ScriptModel("<response>1</response>"),
                            registry=registry, conversation=conversation)  # fmt: skip
    second = await run_agent("two", model=ScriptModel("<response>2</response>"),
                             registry=registry, conversation=conversation)  # fmt: skip
    paths = [first.save(tmp_path / "1.jsonl"), second.save(tmp_path / "2.jsonl")]
    rebuilt = Conversation.from_transcript(*paths)
    assert rebuilt.history == conversation.history
    assert Conversation.from_transcript(first.to_jsonl()).history == conversation.history[:2]
    assert load_run(str(paths[0])).id == first.id


async def test_replay_streams_a_saved_run_again_with_its_timing(
    registry: Registry, tmp_path: Path
) -> None:
    started = time.monotonic()
    original = await run_agent(
        "sum the rows", model=ScriptModel(SCRIPT, chunk_size=8, delay=0.01), registry=registry
    )
    took = time.monotonic() - started
    path = original.save(tmp_path / "run.jsonl")

    started = time.monotonic()
    same_pace = await run_agent("sum the rows", model=ReplayModel(path), registry=registry)
    assert time.monotonic() - started > 0.7 * took  # pauses are never shorter than recorded

    started = time.monotonic()
    fast = await run_agent("sum the rows", model=ReplayModel(path, speed=20), registry=registry)
    assert time.monotonic() - started < 0.5 * took
    for replayed in (same_pace, fast):
        assert replayed.status == "completed" and replayed.model == "script"
        assert replayed.response == original.response
        assert {k: (n.status, n.output) for k, n in replayed.actions.items()} == {
            k: (n.status, n.output) for k, n in original.actions.items()
        }
        assert Conversation.from_run(replayed).history == Conversation.from_run(original).history


class Breaks:
    """Writes a long thought, starts an action, then the connection drops."""

    name = "flaky"

    def stream(self, messages: Sequence[Message], **options: Any) -> AsyncIterator[ModelChunk]:
        return self._play()

    async def _play(self) -> AsyncIterator[ModelChunk]:
        yield TextChunk("<thought>" + "I am thinking hard about this. " * 10)
        yield TextChunk('</thought><action id="l">{"name": "load", "parameters": {"n": 2}}')
        yield TextChunk("</action><response>Half an ans")
        raise ConnectionResetError("peer reset")


async def test_an_interrupted_run_is_continued_from_its_transcript(
    registry: Registry, tmp_path: Path
) -> None:
    run = await run_agent("go", model=Breaks(), registry=registry)
    assert run.status == "interrupted"
    path = run.save(tmp_path / "broken.jsonl")
    note = continue_note(load_run(path))
    tail = note.split("\n\n")[1]
    assert tail.startswith("…") and tail.endswith("</action><response>Half an ans")
    assert len(tail) == 201
    assert '<result id="l" name="load" status="done">[1, 1]</result>' in note

    replay = ReplayModel(path, speed=100)
    again = await run_agent("go", model=replay, registry=registry)
    assert again.status == "interrupted"  # the replay breaks off where the original did
    assert again.response == run.response and again.actions["l"].output == [1, 1]

    model = ScriptModel("<response>Half an answer, now whole.</response>")
    after = await continue_run(path, model=model, registry=registry)
    assert after.status == "completed"
    assert Conversation.from_run(after).history[0]["content"] == note
    # Written again from its start: the new block replaces the cut one (not doubled).
    assert after.response == "Half an answer, now whole."
    assert cut_reply(load_run(path)).endswith("<response>Half an ans")


async def test_only_a_reply_that_was_cut_is_read_on_from(registry: Registry) -> None:
    whole = await run_agent(
        "go", model=ScriptModel("<response>Done.</response>"), registry=registry
    )
    assert whole.status == "completed" and cut_reply(whole) == ""
    assert turns_of(whole)[-1].assistant == "<response>Done.</response>"
    whole.status = "cancelled"  # stopped while its actions ran: the reply itself was whole
    assert cut_reply(whole) == ""


async def test_the_api_key_never_appears_in_a_run(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "sk-proj-SECRETSECRETSECRET0123456789abcdef"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    url = f"http://127.0.0.1:{closed_port()}/v1"
    model = OpenAIModel("gpt-test", base_url=url, max_retries=0, timeout=5)
    run = await run_agent("hello", model=model, registry=registry)
    assert run.status == "interrupted"
    assert run.reason is not None and "Cannot connect" in run.reason
    for text in (run.to_jsonl(), repr(run), run.reason, str(Conversation.from_run(run))):
        assert key not in text and "SECRET" not in text


def closed_port() -> int:
    """A local port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])

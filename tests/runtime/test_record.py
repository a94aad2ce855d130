"""The run record: text, nodes, JSONL transcript and replay."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from cortex_jupyter.protocol.events import (
    ResponseDelta,
    ResponseEnd,
    TextDelta,
    ThoughtDelta,
    ThoughtEnd,
)
from cortex_jupyter.runtime import (
    Nested,
    Registry,
    Run,
    TranscriptError,
    load_events,
    run_stream,
)
from cortex_jupyter.runtime.core.events import Turn, TurnEnd
from cortex_jupyter.runtime.core.model.client import Message
from cortex_jupyter.runtime.core.record.run import OutputRepr, summarize, to_json_value
from cortex_jupyter.runtime.core.values.answer import VALUE_LIMIT
from tests.runtime.fixture_types import Act

pytestmark = pytest.mark.anyio


class Opaque:
    def __repr__(self) -> str:
        return "Opaque(rows=3)"


class BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no")


@pytest.fixture
async def finished_run(act: Act, registry: Registry, fake_model: Any) -> Run:
    def reply(messages: Sequence[Message]) -> str:
        return '<action id="in">{"name": "add", "parameters": {"a": 1}}</action><response>ok'

    registry.add_agent("helper", "Help.", model=fake_model(reply))
    return await run_stream(
        [
            ThoughtDelta("thinking "),
            ThoughtDelta("hard"),
            act("json", "echo", parameters={"value": {"a": [1, 2]}}, output_key="data"),
            act("opaque", "echo", parameters={"value": "$obj"}, output_key="thing"),
            act("bad", "boom", retry=1),
            act("skip", "echo", parameters={"value": 1}, depends_on=["bad"]),
            act("agent", "helper", type="agent", parameters={"task": "x"}),
            ThoughtEnd(),
            TextDelta("between"),
            ResponseDelta("the "),
            ResponseDelta("answer"),
            ResponseEnd(final=True),
        ],
        registry=registry,
        namespace={"obj": Opaque()},
    )


async def test_text_fields(finished_run: Run) -> None:
    assert finished_run.thought == "thinking hard"
    assert finished_run.response == "the answer"
    assert finished_run.text == "between"
    assert finished_run.final is True
    assert repr(finished_run).endswith("completed: 3 done, 1 failed, 1 skipped>")


async def test_transcript_round_trip(finished_run: Run) -> None:
    text = finished_run.to_jsonl()
    lines = [json.loads(line) for line in text.splitlines()]
    assert lines[0]["record"] == "cortex_jupyter.run"
    assert {line["record"] for line in lines} == {
        "cortex_jupyter.run",
        "event",
        "node",
        "variables",
    }
    again = Run.from_jsonl(text)
    assert again.to_jsonl() == text
    assert (again.id, again.status, again.started, again.ended) == (
        finished_run.id,
        finished_run.status,
        finished_run.started,
        finished_run.ended,
    )
    assert (again.thought, again.response, again.text) == ("thinking hard", "the answer", "between")
    assert again.events == finished_run.events
    assert again.event_times == finished_run.event_times
    for id, node in finished_run.actions.items():
        copy = again.actions[id]
        for name in ("name", "type", "mode", "status", "error", "started", "finished", "attempts"):
            assert getattr(copy, name) == getattr(node, name), (id, name)
        assert copy.depends_on == node.depends_on
        assert copy.action == node.action
    assert again.actions["json"].output == {"a": [1, 2]}
    assert again.actions["opaque"].output == "Opaque(rows=3)"
    assert isinstance(again.actions["opaque"].output, OutputRepr)
    assert again.variables == {"data": {"a": [1, 2]}, "thing": "Opaque(rows=3)"}
    assert any(isinstance(e, Nested) and e.parent == "agent" for e in again.events)


async def test_save_load_and_timed_events(finished_run: Run, tmp_path: Path) -> None:
    path = finished_run.save(tmp_path / "run.jsonl")
    assert Run.load(path).to_jsonl() == finished_run.to_jsonl()
    timed = load_events(path.read_text())
    assert [e for _, e in timed] == finished_run.events
    assert [t for t, _ in timed] == finished_run.event_times


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "transcript line 0: the transcript is empty"),
        ("not json\n", "transcript line 1: not JSON"),
        ("[1]\n", "transcript line 1: not a JSON object"),
        ('{"record": "other"}\n', "transcript line 1: not a cortex_jupyter.run transcript"),
        ('{"record": "cortex_jupyter.run", "version": 9}\n', "unsupported version 9"),
    ],
)
def test_bad_transcripts(text: str, message: str) -> None:
    with pytest.raises(TranscriptError, match=message):
        Run.from_jsonl(text)


def test_bad_lines_after_the_header() -> None:
    header = Run().to_jsonl().splitlines()[0]
    with pytest.raises(TranscriptError, match="line 2: bad event"):
        Run.from_jsonl(header + '\n{"record": "event", "t": 1, "kind": "nope"}\n')
    with pytest.raises(TranscriptError, match="line 2: unknown status 'weird'"):
        Run.from_jsonl(header + '\n{"record": "node", "id": "a", "name": "x", "status": "weird"}\n')
    with pytest.raises(TranscriptError, match="line 2: unknown record type 'x'"):
        Run.from_jsonl(header + '\n{"record": "x"}\n')


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"a": (1, 2)}, ({"a": [1, 2]}, False)),
        (float("nan"), ("nan", True)),
        (Opaque(), ("Opaque(rows=3)", True)),
        ("x" * 2_000_000, (summarize("x" * 2_000_000), True)),
    ],
)
def test_to_json_value(value: Any, expected: tuple[Any, bool]) -> None:
    assert to_json_value(value) == expected


def test_summary_is_short_and_survives_a_broken_repr() -> None:
    assert len(summarize(list(range(1000)))) < 200
    assert summarize(BadRepr()).startswith("<BadRepr")
    assert "\n" not in summarize("a\nb")


async def test_each_node_keeps_the_exact_text_the_model_wrote_for_it() -> None:
    from cortex_jupyter.models import ScriptModel
    from cortex_jupyter.runtime import Agent

    registry = Registry(builtins=False)
    registry.register(lambda x: x, name="echo")
    written = '<action id="e" mode="sync">\n  {"name": "echo", "parameters": {"x": 1}}\n</action >'
    run = await Agent(
        model=ScriptModel(written + "\n<response>ok</response>"), registry=registry
    ).run("go")
    assert run.actions["e"].source == written
    assert Run.from_jsonl(run.to_jsonl()).actions["e"].source == written


# ---- the answer (issue 18 items 1, 2 and 7g) -----------------------------------------------


def record_all(run: Run, *events: Any) -> Run:
    for event in events:
        run.record(event)
    return run


def test_the_answer_leaves_out_interim_replies_and_fills_names() -> None:
    run = Run(variables={"fiveA": 5})
    run.reach = {"sevenB": 7, "nope_": "never shown: not named"}
    record_all(
        run,
        Turn(1, 0.0),
        ResponseDelta("Checking the totals first…", False),
        ResponseEnd(False),
        TurnEnd(1, 0.1, "results", "a response with final=false"),
        Turn(2, 0.2),
        ResponseDelta("Totals: $fiveA and ", True),
        ResponseDelta("**$sevenB**, unknown $gone, math $x^2$.", True),
        ResponseEnd(True),
        TurnEnd(2, 0.3, "final", "a final response"),
    )
    assert run.answer == "Totals: 5 and **7**, unknown $gone, math $x^2$."
    # ``response`` stays the raw text of every block, interim ones too.
    assert run.response == (
        "Checking the totals first…\n\nTotals: $fiveA and **$sevenB**, unknown $gone, math $x^2$."
    )


def test_a_response_followed_by_actions_in_the_same_reply_is_not_the_answer() -> None:
    run = record_all(
        Run(),
        Turn(1, 0.0),
        ResponseDelta("Let me look.", False),
        ResponseEnd(False),
        TurnEnd(1, 0.1, "results", "actions"),
        Turn(2, 0.2),
        ResponseDelta("Found it.", False),
        ResponseEnd(True),
    )
    assert run.answer == "Found it."


def test_two_response_blocks_are_separate_paragraphs() -> None:
    run = record_all(
        Run(),
        ResponseDelta("First part.", True),
        ResponseEnd(True),
        ResponseDelta("Second part.", True),
        ResponseEnd(True),
    )
    assert run.response == "First part.\n\nSecond part."
    assert run.answer == "First part.\n\nSecond part."


def test_a_plain_text_answer_counts_and_is_filled() -> None:
    run = record_all(
        Run(variables={"n": 3}),
        Turn(1, 0.0),
        TextDelta("There are $n rows."),
        TurnEnd(1, 0.1, "final", "plain text", None, True),
    )
    assert run.answer == "There are 3 rows."


def test_a_value_is_filled_whole_up_to_a_generous_limit() -> None:
    words = " ".join(f"word{i}" for i in range(120))
    huge = "z" * (VALUE_LIMIT + 10)
    run = record_all(
        Run(variables={"summary": words, "huge": huge}),
        ResponseDelta("Summary: $summary\n\nAll: $huge", True),
        ResponseEnd(True),
    )
    summary, rest = run.answer.split("\n\n")
    assert summary == f"Summary: {words}"
    assert rest == f"All: {'z' * VALUE_LIMIT}… [10 more characters; the whole value is huge]"

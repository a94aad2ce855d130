"""The reducer: realistic event sequences in, view state out; odd input never raises."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from cortex_jupyter import Agent
from cortex_jupyter.display import PARTS, ViewState, from_run, reduce
from cortex_jupyter.display.nodes import KEEP_LOG_LINES, KEEP_TEXT
from cortex_jupyter.models import ScriptModel
from cortex_jupyter.protocol import ActionStart, ProtocolError, ResponseDelta, ThoughtDelta
from cortex_jupyter.runtime import End, Interrupt, Metric, Nested, Run
from cortex_jupyter.runtime.core.events import ActionOutput, ContextUse, Progress

from .helpers import PROTOCOL, feed, finished_run, parse, status


def test_text_accumulates_and_body_is_the_response() -> None:
    state = ViewState()
    feed(state, parse())
    assert state.thought.startswith("I will look up cats and dogs")
    assert "Waiting for results." in state.thought
    assert state.response.lstrip().startswith("# Cats and dogs")
    assert state.body.strip() == state.response.strip()
    assert state.final is True


@pytest.mark.parametrize("chunk", [1, 3, 9, 64, len(PROTOCOL)])
def test_any_chunking_gives_the_same_state(chunk: int) -> None:
    reference, state = ViewState(), ViewState()
    feed(reference, parse(chunk=len(PROTOCOL)))
    feed(state, parse(chunk=chunk))
    assert state.thought == reference.thought
    assert state.body == reference.body
    assert [(n.id, n.name, n.depends_on, n.layer, n.slot) for n in state.nodes.values()] == [
        (n.id, n.name, n.depends_on, n.layer, n.slot) for n in reference.nodes.values()
    ]


def test_nodes_from_parser_events() -> None:
    state = ViewState()
    feed(state, parse())
    assert state.order == ["a1", "a2", "a3"]
    a3 = state.nodes["a3"]
    assert (a3.name, a3.type, a3.mode, a3.status) == ("compare", "llm", "sync", "pending")
    # depends_on first, then the $dogs reference (a $cats one is already explicit)
    assert a3.depends_on == ("a1", "a2")
    assert a3.references == ("a2",)
    assert state.edges() == [("a1", "a3", "depends_on"), ("a2", "a3", "reference")]
    assert state.phase == "running actions"  # the final response closed the stream


def test_action_start_shows_a_starting_node_before_its_body() -> None:
    state = ViewState()
    state.apply(ActionStart(id="x", type="agent", mode="sync"), 1.0)
    node = state.nodes["x"]
    assert node.shown_status == "starting"
    assert (node.type, node.mode, node.name) == ("agent", "sync", "")
    assert node.layer == 0


def test_runtime_statuses_times_and_errors() -> None:
    state = finished_run()
    a1, a3 = state.nodes["a1"], state.nodes["a3"]
    assert a1.status == "done" and a1.output == "{'hits': 3}"
    assert a1.duration(None) == pytest.approx(0.3)
    assert a3.status == "failed" and a3.error == "ValueError: no model"
    assert state.phase == "done"
    assert not state.ticking
    assert state.counts() == {"done": 2, "failed": 1}


def test_running_duration_grows_with_now() -> None:
    state = ViewState()
    state.apply(status("a", "running", 10.0, name="t"))
    assert state.nodes["a"].duration(12.5) == pytest.approx(2.5)
    assert state.ticking


def test_protocol_error_with_id_fails_the_node() -> None:
    state = ViewState()
    feed(state, parse('<action id="bad">{"name": "x", oops}</action>'))
    node = state.nodes["bad"]
    assert node.status == "failed"
    assert "not valid JSON" in (node.error or "")
    # the runtime's later "pending" for the rejected node does not revive it
    state.apply(status("bad", "pending", 200.0, name="?"))
    assert state.nodes["bad"].status == "failed"


def test_duplicate_id_is_a_run_error_not_a_failed_node() -> None:
    state = ViewState()
    text = '<action id="a">{"name": "one"}</action><action id="a">{"name": "two"}</action>'
    feed(state, parse(text))
    assert state.nodes["a"].name == "one"
    assert state.nodes["a"].status == "pending"
    assert state.errors == [e for e in state.errors if "second action used the id" in e] != []


def test_error_without_id_goes_to_the_run() -> None:
    state = ViewState()
    state.apply(ProtocolError("forged_result", "a <result> written by the model"), 1.0)
    assert state.errors == ["a <result> written by the model"]
    assert state.versions["details"] == 1


def test_retry_then_done() -> None:
    state = ViewState()
    state.apply(status("a", "running", 1.0, attempt=1, name="flaky"))
    state.apply(status("a", "running", 1.2, attempt=1, error="ConnectionError", retry_in=0.5))
    node = state.nodes["a"]
    assert node.retry_error == "ConnectionError" and node.retry_in == 0.5
    state.apply(status("a", "running", 1.7, attempt=2))
    state.apply(status("a", "done", 2.0, attempt=2, output="ok"))
    assert (node.status, node.attempt, node.retry_error, node.started) == ("done", 2, None, 1.0)


def test_workflow_steps_are_children() -> None:
    state = ViewState()
    feed(state, parse('<action type="workflow" id="w">{"name": "etl"}</action>'))
    state.apply(status("w", "running", 5.0))
    state.apply(status("w.1", "pending", 5.1, name="extract", type="tool", parent="w"))
    state.apply(status("w.1", "done", 5.2, parent="w"))
    state.apply(status("w.2", "failed", 5.3, parent="w", error="boom"))
    assert state.nodes["w"].children == ["w.1", "w.2"]
    assert state.nodes["w.1"].layer is None  # drawn inside its parent, not in the grid
    assert [n.id for n in state.top_level()] == ["w"]


def test_nested_agent_events_are_namespaced_under_the_parent() -> None:
    state = ViewState()
    feed(state, parse('<action type="agent" id="a1">{"name": "helper"}</action>'))
    inner = parse(
        '<thought>sub</thought><action id="a1">{"name": "search"}</action>'
        "<response>sub answer</response>"
    )
    for event in inner:
        state.apply(Nested("a1", event), 3.0)
    state.apply(Nested("a1", status("a1", "done", 3.5, name="search")), 3.5)
    state.apply(Nested("a1", Nested("a1", status("z", "running", 3.6, name="deep"))), 3.6)
    assert state.nodes["a1"].name == "helper"
    assert state.nodes["a1/a1"].status == "done" and state.nodes["a1/a1"].parent == "a1"
    assert state.nodes["a1/a1/z"].parent == "a1/a1"
    assert state.nodes["a1"].response == "sub answer"
    assert state.thought == ""  # a sub-run's text stays on its node


def test_two_response_blocks_are_separate_paragraphs_in_the_view_and_a_nested_node() -> None:
    # Issue 18 item 7g: two blocks were glued together ("One.Two.") on a nested node.
    state = ViewState()
    feed(state, parse('<action type="agent" id="a1">{"name": "helper"}</action>'))
    two = "<thought>a</thought><thought>b</thought>"
    two += "<response>One.</response><response>Two.</response>"
    for event in parse(two):
        state.apply(Nested("a1", event), 3.0)
    assert state.nodes["a1"].response == "One.\n\nTwo."
    assert state.nodes["a1"].thought == "a\n\nb"
    feed(state, parse(two))
    assert state.body == "One.\n\nTwo."


def test_metrics_turn_interrupt() -> None:
    state = ViewState(model="m")
    state.apply(Metric("prompt_tokens", 100, 1.0))
    state.apply(Metric("completion_tokens", 40, 1.0))

    class Turn:  # the runtime's Turn event is not written yet: any shape with .turn works
        kind = "turn"
        turn = 2
        time = 2.0
        model = "m2"

    state.apply(Turn())
    state.apply(Metric("completion_tokens", 10, 3.0))
    assert (state.turn, state.model, state.prompt_tokens, state.tokens) == (2, "m2", 100, 50)
    assert not state.estimated
    state.apply(Interrupt("cancelled", 4.0))
    assert state.phase == "interrupted"


@pytest.mark.parametrize(
    ("reason", "status", "phase"),
    [("token limit", "truncated", "truncated"), ("turn limit", "turn_limit", "turn limit")],
)
def test_a_run_a_limit_stopped_is_not_called_interrupted(
    reason: str, status: str, phase: str
) -> None:
    state = ViewState()
    state.apply(Interrupt(reason, 4.0))
    assert state.phase == phase  # as soon as the limit stops it
    state.apply(End(status, 5.0))
    assert state.phase == phase


def test_the_runtime_turn_events() -> None:
    from cortex_jupyter.runtime.core.events import Turn, TurnEnd

    state = ViewState()
    state.apply(Turn(1, 1.0, "gpt-x"))
    state.apply(ResponseDelta("first", final=False), 1.5)
    state.apply(TurnEnd(1, 2.0, "results"))
    assert state.phase == "running actions"
    state.apply(Turn(2, 3.0, "gpt-x"))
    assert (state.turn, state.model, state.phase) == (2, "gpt-x", "streaming")


def test_estimated_tokens_and_rate_before_usage() -> None:
    state = ViewState()
    state.apply(ThoughtDelta("x" * 400), 1.0)
    state.apply(ResponseDelta("y" * 400), 3.0)
    assert state.estimated and state.tokens == 200
    assert state.tokens_per_second(3.0) == pytest.approx(100)


def test_versions_move_only_for_changed_parts() -> None:
    state = ViewState()
    seen = dict(state.versions)
    state.apply(ThoughtDelta("hm"), 1.0)
    assert state.changed_since(seen) == {"thought", "header"}
    seen = dict(state.versions)
    state.apply(status("a", "running", 2.0, name="t"))
    assert state.changed_since(seen) == {"graph", "header"}
    seen = dict(state.versions)
    state.apply(status("a", "failed", 2.5, error="no"))
    assert state.changed_since(seen) == {"graph", "header", "details"}
    assert set(PARTS) == set(state.versions)


def test_body_separates_blocks_and_outside_text() -> None:
    state = ViewState()
    text = 'Sure.\n<response final="false">part one</response>\n<response>part two</response>'
    feed(state, parse(text, chunk=4))
    assert state.body == "Sure.\n\npart one\n\npart two"


def test_stream_segments_for_the_timeline() -> None:
    state = ViewState()
    feed(state, parse(), start=0.0, step=0.1)
    kinds = [s.kind for s in state.segments]
    assert kinds[0] == "thought"
    assert "action" in kinds and "response" in kinds
    assert all(s.end >= s.start for s in state.segments)
    tags = [s for s in state.segments if s.kind == "action"]
    assert [s.id for s in tags] == ["a1", "a2", "a3"]


@pytest.mark.parametrize(
    "event",
    [
        object(),
        None,
        ProtocolError("invalid_json", "x", id="never-started"),
        End("completed", float("nan")),
        Nested("ghost", None),  # type: ignore[arg-type]
        Metric("weird", float("inf"), 1.0, id="nobody"),
        type("Odd", (), {"kind": "action_status", "id": "q", "status": "running", "time": "t"})(),
        type("Odd", (), {"kind": "action"})(),
    ],
)
def test_odd_events_never_raise(event: Any) -> None:
    state = ViewState()
    reduce(state, event, 1.0)
    reduce(state, ThoughtDelta("still fine"), 2.0)
    assert state.thought == "still fine"


def test_from_run_replays_a_record() -> None:
    run = Run(started=50.0)
    for i, event in enumerate(parse()):
        run.record(event, 50.0 + i * 0.01)
    run.record(status("a1", "running", 51.0), 51.0)
    state = from_run(run, model="m")
    assert state.started == 50.0
    assert state.nodes["a1"].status == "running"
    assert state.response.strip().startswith("# Cats and dogs")


# ---- issue 12: what a tool wrote, approvals, context, what the model wrote -------------


def output(id: str, time: float, **fields: Any) -> ActionOutput:
    return ActionOutput(id=id, time=time, **fields)


def test_captured_output_is_kept_on_the_node_bounded_and_newest_first() -> None:
    state = ViewState()
    feed(state, parse('<action id="a1">{"name": "fetch"}</action>'))
    state.apply(status("a1", "running", 1.0))
    before = state.versions["graph"]
    state.apply(output("a1", 1.1, stdout="fetching page 1\n", stderr="warn: slow\n"))
    state.apply(output("a1", 1.2, logs=("INFO fetch: got 200",)))
    node = state.nodes["a1"]
    assert node.stdout == "fetching page 1\n" and node.stderr == "warn: slow\n"
    assert node.logs == ["INFO fetch: got 200"]
    assert node.last_line == "INFO fetch: got 200"  # what the box shows
    assert state.versions["graph"] > before
    # A flood keeps the newest KEEP_TEXT characters and counts the rest.
    state.apply(output("a1", 1.3, stdout="x" * (KEEP_TEXT + 500) + "\nlast\n"))
    assert len(node.stdout) == KEEP_TEXT and node.stdout.endswith("last\n")
    assert node.dropped["stdout"] == len("fetching page 1\n") + 500 + len("\nlast\n")
    state.apply(output("a1", 1.4, logs=tuple(f"line {i}" for i in range(KEEP_LOG_LINES + 5))))
    assert len(node.logs) == KEEP_LOG_LINES and node.logs[-1] == f"line {KEEP_LOG_LINES + 4}"
    assert node.dropped["logs"] == 6


def test_progress_and_partial_values_and_versions() -> None:
    state = ViewState()
    feed(state, parse('<action id="g">{"name": "count"}</action>'))
    node = state.nodes["g"]
    version, graph = node.version, state.versions["graph"]
    state.apply(output("g", 1.0, progress=Progress(3, 5, "pages")))
    assert node.progress == Progress(3, 5, "pages") and str(node.progress) == "3/5 pages"
    assert node.version > version and state.versions["graph"] > graph
    graph = state.versions["graph"]
    state.apply(output("g", 1.1, partial="[1, 2]"))
    assert node.partial == "[1, 2]" and node.last_line == "[1, 2]"
    # Output for an id nobody announced still lands somewhere visible.
    state.apply(output("ghost", 1.2, stdout="hello\n"))
    assert state.nodes["ghost"].stdout == "hello\n"


def test_awaiting_parameters_attempts_and_refs() -> None:
    state = ViewState()
    feed(
        state,
        parse(
            '<action id="f">{"name": "fetch", "output_key": "page"}</action>'
            '<action id="m">{"name": "mail", "parameters": {"body": "$page"}}</action>'
        ),
    )
    assert state.nodes["m"].refs == (("page", "f"),)
    state.apply(status("m", "awaiting", 2.0, parameters='{"body": "<html>"}'))
    node = state.nodes["m"]
    assert node.status == "awaiting" and node.awaited == 2.0
    assert node.resolved == '{"body": "<html>"}'
    assert state.counts() == {"pending": 1, "awaiting": 1}
    state.apply(status("m", "running", 3.0, attempt=1))
    state.apply(status("m", "running", 3.5, attempt=1, error="TimeoutError", retry_in=0.5))
    state.apply(status("m", "failed", 4.5, attempt=2, error="ConnectionError: reset"))
    assert node.attempts == [(1, "TimeoutError"), (2, "ConnectionError: reset")]


def test_the_text_the_model_wrote_is_kept_accepted_or_refused() -> None:
    state = ViewState()
    text = '<action id="ok">{"name": "search"}</action><action id="bad">{"name": 3}</action>'
    feed(state, parse(text))
    assert state.nodes["ok"].source == '<action id="ok">{"name": "search"}</action>'
    assert state.nodes["bad"].status == "failed" and '"name": 3' in state.nodes["bad"].source
    state.apply(ProtocolError("forged_result", "a forged result", source="<result>x</result>"))
    assert state.refused == {len(state.errors) - 1: "<result>x</result>"}


def test_context_use_prefers_the_servers_count() -> None:
    state = ViewState()
    assert state.context() is None
    state.apply(ContextUse(turn=1, time=1.0, tokens=20_500, budget=32_000))
    assert state.context() == (20_500, 32_000, True)
    state.apply(Metric("context_tokens", 21_100, 2.0))
    assert state.context() == (21_100, 32_000, False)
    state.apply(ContextUse(turn=2, time=3.0, tokens=24_000, budget=32_000, over=False))
    assert state.context() == (24_000, 32_000, True)  # a new turn: its estimate first
    state.apply(Nested("a1", ContextUse(turn=1, time=4.0, tokens=1, budget=2)))
    assert state.context() == (24_000, 32_000, True)  # a sub-run's is its own


def test_the_rate_counts_only_turns_that_streamed_text_and_their_time() -> None:
    from cortex_jupyter.runtime.core.events import Turn, TurnEnd

    state = ViewState()
    # Turn 1: native tool calls only (no text), 50 tokens; then tools run for 10 s.
    state.apply(Turn(1, 0.0, "m"))
    state.apply(Metric("completion_tokens", 50, 1.0, "tokens"))
    state.apply(TurnEnd(1, 1.0, "results"))
    # Turn 2: 100 tokens of text streamed over 2 s.
    state.apply(Turn(2, 11.0, "m"))
    state.apply(ResponseDelta("x" * 40), 12.0)
    state.apply(ResponseDelta("y" * 360), 14.0)
    state.apply(Metric("completion_tokens", 100, 14.0, "tokens"))
    state.apply(TurnEnd(2, 14.0, "final"))
    assert state.tokens == 150  # the header's total still counts every token
    assert state.tokens_per_second(20.0) == pytest.approx(50)  # 100 tokens / 2 s


def test_the_rate_leaves_out_the_wait_between_two_turns_of_text() -> None:
    from cortex_jupyter.runtime.core.events import Turn

    state = ViewState()
    state.apply(Turn(1, 0.0, "m"))
    state.apply(ThoughtDelta("x" * 40), 1.0)
    state.apply(ThoughtDelta("x" * 360), 2.0)  # 100 tokens over 1 s
    state.apply(Turn(2, 30.0, "m"))
    state.apply(ResponseDelta("y" * 40), 31.0)
    state.apply(ResponseDelta("y" * 360), 32.0)  # 100 more over 1 s
    assert state.tokens_per_second(32.0) == pytest.approx(100)


def test_a_nodes_edges_are_the_ones_the_runtime_waited_on() -> None:
    """The view draws the scheduler's own edges (explicit ids, and the latest earlier
    action whose output a ``$name`` uses), read from the runtime's graph, not its own."""

    def echo(text: str = "", other: str = "") -> str:
        """Return the text."""
        return text + other

    script = (
        '<action id="a">{"name": "echo", "parameters": {"text": "1"}, "output_key": "x"}</action>'
        '<action id="b">{"name": "echo", "parameters": {"text": "$x"}, "output_key": "x"}</action>'
        '<action id="c">{"name": "echo", "parameters": {"text": "$x", "other": "$y"},'
        ' "output_key": "y", "depends_on": ["a"]}</action>'
        '<action id="d">{"name": "echo", "parameters": {"text": "$x.z", "other": "$y"},'
        ' "depends_on": ["b"]}</action><response>done</response>'
    )
    run = anyio.run(Agent(model=ScriptModel(script), tools=[echo]).run, "go")
    state = from_run(run)
    for node_id in "abcd":
        assert set(state.nodes[node_id].depends_on) == set(run.actions[node_id].depends_on)
    assert state.nodes["b"].depends_on == ("a",)
    assert state.nodes["c"].depends_on == ("a", "b") and state.nodes["c"].references == ("b",)
    assert state.nodes["d"].references == ("c",)
    assert state.nodes["d"].refs == (("x", "b"), ("y", "c"))


def test_an_action_taken_out_of_the_thought_leaves_no_empty_line() -> None:
    # issue 37: the thought box kept a gap where each action was
    from cortex_jupyter.protocol import Parser

    state = ViewState()
    parser = Parser()
    text = (
        '<thought>I will check.\n<action id="a">{"name": "x"}</action>\n'
        "Then answer.\n\nA new paragraph stays one.</thought>"
    )
    for chunk in [text[i : i + 7] for i in range(0, len(text), 7)]:
        for event in parser.feed(chunk):
            state.apply(event, 1.0)
    assert state.thought == "I will check.\nThen answer.\n\nA new paragraph stays one."

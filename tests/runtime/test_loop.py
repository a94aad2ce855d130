"""The agent loop end to end: turns, results fed back, limits, memory, feeds, boundaries,
native tool calls, interrupted and continued runs."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
import pytest

from cortex_jupyter.models import (
    AuthenticationFailed,
    RateLimited,
    ScriptModel,
    ServerError,
    StreamDropped,
    UnknownModel,
)
from cortex_jupyter.runtime import Agent, End, InternalPolicy, Interrupt, Metric, Registry, Run
from cortex_jupyter.runtime.core.events import ChatEntry, Chunk, Turn, TurnEnd
from cortex_jupyter.runtime.core.model.chunks import (
    Finish,
    Message,
    ModelChunk,
    ReasoningChunk,
    TextChunk,
    ToolCallReady,
    ToolCallStart,
    Usage,
)
from cortex_jupyter.runtime.loop.conversation import Conversation
from cortex_jupyter.runtime.loop.feeds import FeedSet, FeedSpec
from tests.agents import continue_run, run_agent
from tests.runtime.doubles import Scripted, add

pytestmark = pytest.mark.anyio


class Recording:
    """Wraps a model: keeps the messages and options of every call, counts chunks read."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.name = model.name
        self.calls: list[list[Message]] = []
        self.options: list[dict[str, Any]] = []
        self.chunks_read = 0

    def stream(self, messages: Sequence[Message], **options: Any) -> AsyncIterator[ModelChunk]:
        self.calls.append(list(messages))
        self.options.append(options)
        return self._count(self.model.stream(messages, **options))

    async def _count(self, chunks: AsyncIterator[ModelChunk]) -> AsyncIterator[ModelChunk]:
        async for chunk in chunks:
            self.chunks_read += 1
            yield chunk


def make_registry() -> Registry:
    registry = Registry(builtins=False)

    registry.tool(add)

    @registry.tool
    async def echo(value: Any) -> Any:
        """Return the value."""
        return value

    @registry.tool
    async def slow(seconds: float, value: Any = "slow") -> Any:
        """Sleep, then return the value."""
        await anyio.sleep(seconds)
        return value

    @registry.tool
    async def big(n: int) -> str:
        """A long text."""
        return "z" * n

    return registry


@pytest.fixture
def registry() -> Registry:
    return make_registry()


def user_messages(messages: list[Message]) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "user"]


def kinds(run: Run, cls: type[Any]) -> list[Any]:
    return [e for e in run.events if isinstance(e, cls)]


# ---- turns and results ------------------------------------------------------------------

TWO_TURNS = """<thought>Add first.</thought>
<action id="a1">{"name": "add", "parameters": {"a": 1, "b": 2}, "output_key": "s"}</action>
<response final="false">Adding.</response>
--- next turn ---
<action id="a2">{"name": "add", "parameters": {"a": "$s", "b": 10}}</action>
<response>The sum is 3, plus ten is 13.</response>"""


async def test_results_go_back_and_final_false_continues(registry: Registry) -> None:
    model = Recording(ScriptModel(TWO_TURNS, chunk_size=7))
    run = await run_agent("add 1 and 2", model=model, registry=registry)
    assert run.status == "completed" and run.reason is None
    assert run.turns == 2 and run.model == "script"
    assert run.actions["a1"].output == 3 and run.actions["a2"].output == 13
    assert run.response == "Adding.\n\nThe sum is 3, plus ten is 13."
    assert run.final is True
    first, second = model.calls
    assert first[0]["role"] == "system" and first[1:] == [
        {"role": "user", "content": "add 1 and 2"}
    ]
    assert second[-1] == {
        "role": "user",
        "content": '<results>\n<result id="a1" name="add" status="done" output_key="s">3'
        "</result>\n</results>",
    }
    assert second[-2]["role"] == "assistant"
    assert second[-2]["content"] == TWO_TURNS.split("\n--- next turn ---\n")[0]
    assert [(t.number, t.model) for t in kinds(run, Turn)] == [(1, "script"), (2, "script")]
    ends = kinds(run, TurnEnd)
    assert [(e.outcome, e.reason) for e in ends] == [
        ("results", 'a response with final="false"'),
        ("final", "a final response"),
    ]
    assert kinds(run, End)[-1].status == "completed"


async def test_a_turn_of_only_actions_continues(registry: Registry) -> None:
    model = Recording(
        ScriptModel(
            [
                '<action id="x">{"name": "echo", "parameters": {"value": "hi"}}</action>'
                '<action id="y">{"name": "nope"}</action>',
                "<response>done</response>",
            ]
        )
    )
    run = await run_agent("go", model=model, registry=registry)
    assert run.status == "completed" and run.turns == 2
    results = user_messages(model.calls[1])[-1]
    assert '<result id="x" name="echo" status="done">hi</result>' in results
    assert '<result id="y" name="nope" status="failed">no tool named \'nope\'' in results


async def test_final_false_without_actions_asks_to_continue(registry: Registry) -> None:
    model = Recording(ScriptModel(['<response final="false">Hmm.</response>', "Answer."]))
    run = await run_agent("go", model=model, registry=registry)
    assert user_messages(model.calls[1])[-1] == (
        'No actions ran in your last turn (a response with final="false"). Continue the task.'
    )
    # text outside any block, no actions: that text is the answer
    assert run.status == "completed" and run.text == "Answer."
    assert kinds(run, TurnEnd)[-1].reason == "no actions and no response: the text is the answer"


async def test_results_are_truncated_with_a_note(registry: Registry) -> None:
    model = Recording(
        ScriptModel(['<action id="b">{"name": "big", "parameters": {"n": 5000}}</action>', "ok"])
    )
    await run_agent("go", model=model, registry=registry, result_limit=100)
    results = user_messages(model.calls[1])[-1]
    assert "z" * 100 + "\n[truncated: 4,900 more characters]</result>" in results
    assert "z" * 101 not in results


async def test_ids_stay_unique_across_turns(registry: Registry) -> None:
    model = ScriptModel(
        [
            '<action id="a">{"name": "add", "parameters": {"a": 1}}</action>',
            '<action id="a">{"name": "add", "parameters": {"a": 2}}</action>'
            '<action>{"name": "add", "parameters": {"a": 3}}</action>',
            "<response>ok</response>",
        ]
    )
    run = await run_agent("go", model=model, registry=registry)
    # Real models reuse ids in every turn: the later one runs under a new id, with a note.
    assert run.actions["a"].output == 1 and run.actions["a~2"].output == 2
    assert run.actions["a~2"].note == (
        "the model reused id 'a' from an earlier turn; it runs as 'a~2'"
    )
    assert run.errors == []
    assert run.actions["auto-1"].output == 3


async def test_the_turn_limit_stops_the_run_and_says_so(registry: Registry) -> None:
    step = '<action>{"name": "add", "parameters": {"a": 1}}</action>'
    model = Recording(ScriptModel([step, step, step]))
    conversation = Conversation()
    run = await run_agent(
        "loop", model=model, registry=registry, max_turns=2, conversation=conversation
    )
    assert run.status == "turn_limit" and run.turns == 2 and len(model.calls) == 2
    assert run.reason == (
        "stopped after 2 turns without a final response; continue it with "
        "Agent.continue_run(...), or allow more turns (max_turns=...)"
    )
    assert [e.outcome for e in kinds(run, TurnEnd)] == ["results", "limit"]
    assert kinds(run, Interrupt)[-1].reason == "turn limit"
    assert kinds(run, End)[-1].status == "turn_limit"
    # the last results are in the conversation, so a continuation can go on from there
    assert conversation.history[-1]["content"].startswith('<results>\n<result id="auto-2"')
    more = Recording(ScriptModel("<response>Finally.</response>"))
    after = await continue_run(run, model=more, conversation=conversation, registry=registry)
    assert after.status == "completed" and after.response == "Finally."
    assert user_messages(more.calls[0])[-1] == (
        "The run stopped at its limit of 2 turns before you gave a final response; the "
        "results of your last actions are above. Continue the task."
    )


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_max_turns_must_be_a_positive_whole_number(registry: Registry, bad: Any) -> None:
    # refused when the Agent is made, not at its first run
    with pytest.raises(
        ValueError, match=f"max_turns must be a whole number, at least 1; got {bad!r}"
    ):
        Agent(model=ScriptModel("x"), registry=registry, max_turns=bad)


# ---- memory -----------------------------------------------------------------------------


async def test_runs_continue_one_conversation_until_reset(registry: Registry) -> None:
    conversation = Conversation()
    model = Recording(ScriptModel(["<response>Hi Ada.</response>"] * 3))
    await run_agent("I am Ada.", model=model, conversation=conversation, registry=registry)
    await run_agent("Who am I?", model=model, conversation=conversation, registry=registry)
    assert model.calls[1][1:] == [
        {"role": "user", "content": "I am Ada."},
        {"role": "assistant", "content": "<response>Hi Ada.</response>"},
        {"role": "user", "content": "Who am I?"},
    ]
    assert len(conversation) == 4
    branch = conversation.fork()
    conversation.reset()
    assert conversation.history == [] and len(branch) == 4
    await run_agent("Fresh?", model=model, conversation=conversation, registry=registry)
    assert model.calls[2][1:] == [{"role": "user", "content": "Fresh?"}]
    assert "[user]\nI am Ada.\n\n[assistant]\n<response>Hi Ada.</response>" in str(branch)
    # history gives copies
    branch.history[0]["content"] = "changed"
    assert branch.history[0]["content"] == "I am Ada."


async def test_without_a_conversation_each_run_starts_fresh(registry: Registry) -> None:
    model = Recording(ScriptModel(["<response>1</response>", "<response>2</response>"]))
    await run_agent("a", model=model, registry=registry)
    await run_agent("b", model=model, registry=registry)
    assert model.calls[1][1:] == [{"role": "user", "content": "b"}]


# ---- the prompt: variables and feeds ----------------------------------------------------


async def test_referenced_notebook_variables_are_described(registry: Registry) -> None:
    model = Recording(ScriptModel("<response>ok</response>"))
    namespace = {"rows": list(range(500)), "other": 1}
    await run_agent("sum $rows please, not $$5", model=model, registry=registry,
                    namespace=namespace)  # fmt: skip
    system = model.calls[0][0]["content"]
    assert "- $rows: list, length 500\n  [0, 1, 2," in system
    assert "$other" not in system
    assert "499" not in system  # never the whole value


def add_tick(registry: Registry) -> dict[str, int]:
    """Registers ``tick()``, which counts its calls; the count, as ``["n"]``."""
    counter = {"n": 0}

    @registry.tool
    def tick() -> int:
        """Count calls."""
        counter["n"] += 1
        return counter["n"]

    return counter


async def test_feeds_are_refreshed_shown_and_readable(registry: Registry) -> None:
    counter = add_tick(registry)

    feeds = FeedSet(
        [
            FeedSpec("ticks", source="tool", name="tick"),
            FeedSpec("cached", source="tool", name="tick", cache_ttl=60),
            FeedSpec("motto", params={"text": "be kind"}),
        ]
    )
    model = Recording(
        ScriptModel(
            [
                '<action id="r">{"name": "echo", "parameters": {"value": "$ticks / $motto"}}'
                "</action>",
                "<response>ok</response>",
            ]
        )
    )
    run = await run_agent("go", model=model, registry=registry, feeds=feeds)
    first, second = (call[0]["content"] for call in model.calls)
    # both tool feeds refresh for turn 1 (values 1 and 2 in some order); only the
    # on_demand one without a cache_ttl refreshes again for turn 2
    assert counter["n"] == 3
    assert feeds.value("ticks") == 3 and feeds.value("cached") in (1, 2)
    assert f'<context_feed id="cached">{feeds.value("cached")}</context_feed>' in second
    assert '<context_feed id="ticks">3</context_feed>' in second
    assert '<context_feed id="ticks">3</context_feed>' not in first
    assert '<context_feed id="motto">be kind</context_feed>' in first
    assert run.actions["r"].output in ("1 / be kind", "2 / be kind")
    system_entries = [e for e in kinds(run, ChatEntry) if e.role == "system"]
    assert len(system_entries) == 2  # recorded again because it changed


async def test_periodic_feeds_refresh_only_while_a_run_is_active(registry: Registry) -> None:
    counter = add_tick(registry)

    feeds = FeedSet([FeedSpec("ticks", source="tool", name="tick", type="periodic",
                              interval=0.02)])  # fmt: skip
    model = ScriptModel("<response>" + "w" * 40 + "</response>", chunk_size=2, delay=0.01)
    await run_agent("go", model=model, registry=registry, feeds=feeds)
    during = counter["n"]
    assert during >= 3
    await anyio.sleep(0.1)
    assert counter["n"] == during


async def test_the_model_changes_its_feeds_through_internal_actions(registry: Registry) -> None:
    policy = InternalPolicy(enabled=True, allow=frozenset({"add_feed", "remove_feed"}))
    registry_with_internals = Registry()  # the built-ins hold add_feed / remove_feed
    for schema in registry.schemas(("tool",)):
        spec = registry.get("tool", schema["name"])
        registry_with_internals.register(spec.func, name=spec.name)  # type: ignore[union-attr]
    feeds = FeedSet([FeedSpec("old", params={"text": "stale"})])
    model = Recording(
        ScriptModel(
            [
                '<action type="internal">{"name": "add_feed", "parameters": '
                '{"id": "plan", "text": "step 1"}}</action>'
                '<action type="internal">{"name": "remove_feed", "parameters": {"id": "old"}}'
                "</action>",
                '<action id="e">{"name": "echo", "parameters": {"value": "$plan"}}</action>',
                "<response>ok</response>",
            ]
        )
    )
    run = await run_agent(
        "plan", model=model, registry=registry_with_internals, feeds=feeds, internal=policy
    )
    assert run.status == "completed"
    second = model.calls[1][0]["content"]
    assert '<context_feed id="plan">step 1</context_feed>' in second
    assert 'id="old"' not in second and '<context_feed id="old">' in model.calls[0][0]["content"]
    assert run.actions["e"].output == "step 1"
    # refused when not allowed
    refused = await run_agent(
        "plan",
        model=ScriptModel(
            '<action id="i" type="internal">{"name": "add_feed", "parameters": '
            '{"id": "x", "text": "y"}}</action><response>ok</response>'
        ),
        registry=registry_with_internals,
        feeds=FeedSet(),
    )
    assert refused.actions["i"].status == "failed"
    assert "internal actions are disabled" in (refused.actions["i"].error or "")


# ---- sigil and cogency turn boundaries --------------------------------------------------

SIGIL = """§THINK: I need the sum.
§CALLS: [{"name": "add", "args": {"a": 1, "b": 2}, "output_key": "s"}]
§EXECUTE:
§RESULTS: [auto-1] add (done): 99
§RESPOND: It is 99.
§END:
--- next turn ---
§RESPOND: It is 3.
§END:
§RESPOND: ignored"""

COGENCY = """<think>I need the sum.</think>
<execute>[{"name": "add", "args": {"a": 1, "b": 2}}]</execute>
<results><result id="auto-1">99</result></results>
<respond>It is 99.</respond><end>
--- next turn ---
<think>Got it.</think>
<execute>[{"name": "add", "args": {"a": 3}}]</execute>
--- next turn ---
<respond>It is 3.</respond>
<end>"""


async def test_sigil_execute_ends_the_turn_and_reading_stops_there(registry: Registry) -> None:
    model = Recording(ScriptModel(SIGIL, chunk_size=3))
    run = await run_agent("sum", model=model, registry=registry, dialect="sigil")
    assert run.status == "completed" and run.turns == 2
    assert run.response.strip() == "It is 3."  # not the invented answer, nor text after §END:
    assert run.errors == []
    first_reply = model.calls[1][-2]
    assert first_reply["role"] == "assistant"
    assert first_reply["content"].endswith("§EXECUTE:") and "99" not in first_reply["content"]
    assert model.calls[1][-1]["content"] == "§RESULTS:\n[auto-1] add (done, output_key s): 3"
    total_chunks = sum(len(t) // 3 + 2 for t in model.model.turns)
    assert model.chunks_read < total_chunks - 10  # the stream was not read to its end
    assert [e.reason for e in kinds(run, TurnEnd)] == [
        "the model ended its turn to run its calls",
        "the model marked the task complete",
    ]
    assert "sigil form" in model.calls[0][0]["content"]


async def test_cogency_execute_ends_the_turn(registry: Registry) -> None:
    model = Recording(ScriptModel(COGENCY, chunk_size=5))
    run = await run_agent("sum", model=model, registry=registry, dialect="cogency")
    assert run.status == "completed" and run.turns == 3
    assert run.response == "It is 3."
    assert [n.id for n in run.actions.values()] == ["auto-1", "auto-2"]  # ids go on
    assert model.calls[1][-1]["content"] == (
        '<results>\n<result id="auto-1" name="add" status="done">3</result>\n</results>'
    )
    assert "forged" not in str([e.code for e in run.errors])
    assert run.errors == []
    assert model.calls[1][-2]["content"].endswith("</execute>")


# ---- native tool calls ------------------------------------------------------------------


async def test_native_tool_calls_run_as_they_arrive_and_answer_by_id(registry: Registry) -> None:
    model = Scripted(
        [
            ReasoningChunk("Let me add. "),
            ToolCallStart(0, "call_1", "slow"),
            ToolCallReady(0, "call_1", "slow", '{"seconds": 0.05, "value": 5}'),
            ToolCallStart(1, "call_2", "add"),
            ToolCallReady(1, "call_2", "add", '{"a": 1,'),
            0.1,
            Usage(120, 30),
            Finish("tool_calls"),
        ],
        [TextChunk("<response>It is 5.</response>"), Usage(200, 8), Finish("stop")],
    )
    run = await run_agent("go", model=model, registry=registry, native_tools=True)
    assert run.status == "completed" and run.turns == 2
    slow = run.actions["call_1"]
    assert slow.status == "done" and slow.output == 5 and slow.type == "tool"
    finished_stream = next(t for t, e in zip(run.event_times, run.events, strict=True)
                           if isinstance(e, Chunk) and e.type == "finish")  # fmt: skip
    assert slow.finished is not None and slow.finished < finished_stream  # ran while streaming
    assert run.actions["call_2"].status == "failed"
    assert "not valid JSON" in (run.actions["call_2"].error or "")
    second = model.calls[1]
    slow_call = {"name": "slow", "arguments": '{"seconds": 0.05, "value": 5}'}
    add_call = {"name": "add", "arguments": '{"a": 1,'}
    assert second[-3] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": slow_call},
            {"id": "call_2", "type": "function", "function": add_call},
        ],
    }
    assert second[-2] == {"role": "tool", "tool_call_id": "call_1", "content": "5"}
    assert second[-1]["role"] == "tool" and second[-1]["tool_call_id"] == "call_2"
    assert second[-1]["content"].startswith("failed: action 'call_2': the body is not valid JSON")
    assert run.thought == "Let me add. "
    assert run.usage == {"prompt_tokens": 320, "completion_tokens": 38}
    tools = model.tools[0]
    assert tools is not None
    assert {t["function"]["name"] for t in tools} == {"add", "echo", "slow", "big"}
    assert model.tools[0] == model.tools[1]


async def test_tools_are_not_offered_natively_unless_asked(registry: Registry) -> None:
    model = Scripted([TextChunk("<response>hi</response>"), Finish("stop")])
    await run_agent("go", model=model, registry=registry)
    assert model.tools == [None]


# ---- interruptions ----------------------------------------------------------------------

PARTIAL = [
    TextChunk('<thought>Start.</thought><action id="a1">{"name": "slow", "parameters": '),
    TextChunk('{"seconds": 0.05, "value": "kept"}}</action><response>The answer '),
    TextChunk("is forty"),
    StreamDropped("m", "http://127.0.0.1:1", 3, 120),
]


async def test_a_dropped_stream_keeps_text_and_actions_and_can_be_continued(
    registry: Registry,
) -> None:
    conversation = Conversation()
    model = Scripted(PARTIAL)
    run = await run_agent("what?", model=model, registry=registry, conversation=conversation)
    assert run.status == "interrupted"
    assert run.reason is not None and run.reason.startswith(
        "the model's stream failed: StreamDropped: The reply of model 'm' from "
        "http://127.0.0.1:1 broke off"
    )
    assert run.actions["a1"].status == "done" and run.actions["a1"].output == "kept"
    assert run.thought == "Start." and run.response == "The answer is forty"
    assert kinds(run, Interrupt)[-1].reason == "stream failed"
    assert kinds(run, End)[-1].status == "interrupted"
    assert [e.outcome for e in kinds(run, TurnEnd)] == ["interrupted"]
    assert conversation.history[-1]["role"] == "assistant"
    assert conversation.history[-1]["content"].endswith("<response>The answer is forty")

    more = Recording(ScriptModel("<response> two.</response>"))
    after = await continue_run(run, model=more, conversation=conversation, registry=registry)
    note = more.calls[0][-1]["content"]
    assert note.startswith("Your previous reply was interrupted after:\n\n<thought>Start.")
    assert 'kept"}}</action><response>The answer is forty\n\nContinue from there' in note
    assert note.endswith(
        "These actions of that reply already ran; do not run them again:\n\n"
        '<results>\n<result id="a1" name="slow" status="done">kept</result>\n</results>'
    )
    # Read on inside the response the drop left open: the answer is whole.
    assert after.status == "completed" and after.response == "The answer is forty two."


async def test_a_model_error_asking_again_cannot_fix_fails_the_run(registry: Registry) -> None:
    refused = AuthenticationFailed("m", "http://127.0.0.1:1")
    partial = [TextChunk("<thought>Let me see.</thought>"), refused]
    run = await run_agent("hi", model=Scripted(partial), registry=registry)
    assert run.status == "failed" and run.thought == "Let me see."  # what arrived is kept
    assert run.reason == f"the model failed: AuthenticationFailed: {refused}"
    assert kinds(run, Interrupt)[-1].reason == "model failed"
    assert kinds(run, End)[-1].status == "failed"
    assert [e.outcome for e in kinds(run, TurnEnd)] == ["failed"]


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (RateLimited("m", "http://h", 3, quota=True), "failed"),
        (RateLimited("m", "http://h", 3, retry_after=20.0), "interrupted"),
        (ServerError("m", "http://h", 503, tries=3), "interrupted"),
        (UnknownModel("m", "http://h"), "failed"),
    ],
)
async def test_only_errors_that_may_pass_leave_a_run_to_continue(
    registry: Registry, error: Exception, status: str
) -> None:
    run = await run_agent("hi", model=Scripted([error]), registry=registry)
    assert run.status == status


async def test_a_stream_that_fails_at_once_is_interrupted_with_nothing_to_keep(
    registry: Registry,
) -> None:
    conversation = Conversation()
    run = await run_agent(
        "hi",
        model=Scripted([ConnectionError("refused")]),
        registry=registry,
        conversation=conversation,
    )
    assert run.status == "interrupted" and run.reason == (
        "the model's stream failed: ConnectionError: refused"
    )
    assert conversation.history == [{"role": "user", "content": "hi"}]
    more = Recording(ScriptModel("<response>ok</response>"))
    await continue_run(run, model=more, conversation=conversation, registry=registry)
    assert more.calls[0][-1]["content"] == (
        "Your previous reply was interrupted before you wrote anything. Answer again."
    )


async def test_continue_run_reaches_earlier_outputs_and_keeps_ids_taken(
    registry: Registry,
) -> None:
    first = Scripted(
        [
            TextChunk('<action id="a1">{"name": "slow", "parameters": {"seconds": 0.01}}</action>'),
            Finish("stop"),
        ],
        [TextChunk("<response>The answer "), PARTIAL[-1]],
    )
    run = await run_agent("x", model=first, registry=registry)
    assert run.status == "interrupted" and run.actions["a1"].status == "done"
    model = ScriptModel(
        '<action id="a1">{"name": "echo", "parameters": {"value": 1}}</action>'
        '<action id="b">{"name": "echo", "parameters": {"value": "$a1_out"}}</action>'
        "<response>ok</response>"
    )
    run.variables["a1_out"] = "from before"
    after = await continue_run(run, model=model, registry=registry)
    # the earlier run's id stays taken: the continuation's a1 runs as a1~2
    assert after.errors == [] and after.actions["a1~2"].output == 1
    assert after.actions["b"].output == "from before"


async def test_cancelling_keeps_the_conversation_valid(registry: Registry) -> None:
    conversation = Conversation()
    model = Scripted(
        [ToolCallReady(0, "call_9", "slow", '{"seconds": 5}'), 5.0, Finish("tool_calls")]
    )
    record = Run()
    with anyio.move_on_after(0.1):
        await run_agent("go", model=model, registry=registry, conversation=conversation,
                        run=record, native_tools=True)  # fmt: skip
    assert record.status == "cancelled"
    assert record.actions["call_9"].status == "cancelled"
    history = conversation.history
    assert history[-2]["tool_calls"][0]["id"] == "call_9"
    assert history[-1] == {
        "role": "tool",
        "tool_call_id": "call_9",
        "content": "cancelled: the run was stopped",
    }


# ---- the record ---------------------------------------------------------------------------


async def test_chunks_are_recorded_coalesced_with_usage_metrics(registry: Registry) -> None:
    items: list[Any] = [TextChunk("<response>")]
    items += [TextChunk("ab") for _ in range(30)]
    items += [0.06, TextChunk("cd"), TextChunk("</response>"), Usage(5, 6), Finish("stop")]
    run = await run_agent("go", model=Scripted(items), registry=registry)
    chunks = kinds(run, Chunk)
    texts = [c.text for c in chunks if c.type == "text"]
    assert texts == ["<response>" + "ab" * 30, "cd</response>"]
    assert [c.type for c in chunks][-2:] == ["usage", "finish"]
    metrics = {m.name: m.value for m in kinds(run, Metric)}
    assert metrics["prompt_tokens"] == 5 and metrics["completion_tokens"] == 6
    assert metrics["turns"] == 1


async def test_on_event_sees_turns_and_messages(registry: Registry) -> None:
    seen: list[str] = []
    await run_agent(
        "go",
        model=ScriptModel("<response>ok</response>"),
        registry=registry,
        on_event=lambda e: seen.append(e.kind),
    )
    assert seen[:3] == ["message", "message", "turn"]
    assert seen[-1] == "end" and "turn_end" in seen and "chunk" in seen


async def test_timing_a_run_of_many_turns_is_quick(registry: Registry) -> None:
    step = '<action>{"name": "add", "parameters": {"a": 1}}</action>'
    started = time.monotonic()
    run = await run_agent("go", model=ScriptModel([step] * 9 + ["<response>ok</response>"]),
                          registry=registry)  # fmt: skip
    assert run.status == "completed" and run.turns == 10
    assert time.monotonic() - started < 2.0


class _Refused(Exception):
    """A model failure asking again cannot fix (as a refused key)."""

    continuable = False


async def test_a_prompt_the_model_never_answered_is_sent_once_by_the_next_run(
    registry: Registry,
) -> None:
    """A failed run's prompt was left dangling: tried again, the request held it twice.
    An exchange the model never answered is dropped when the next prompt starts; one it
    answered, even in part, is kept whole."""
    conversation = Conversation()
    model = Scripted(
        [TextChunk("<response>Hi.</response>"), Finish("stop")],
        [_Refused("the key was refused")],
        [TextChunk("<response>Done.</response>"), Finish("stop")],
    )
    agent = Agent(model=model, registry=registry)
    await agent.run("Hello", conversation=conversation)
    failed = await agent.run("Go", conversation=conversation)
    assert failed.status == "failed"
    again = await agent.run("Go", conversation=conversation)
    assert again.status == "completed"
    sent = [(m["role"], m["content"]) for m in model.calls[-1] if m["role"] != "system"]
    assert sent == [
        ("user", "Hello"),
        ("assistant", "<response>Hi.</response>"),
        ("user", "Go"),
    ]
    assert conversation.starts == [0, 2]


async def test_continuing_a_run_that_got_no_reply_keeps_its_prompt(registry: Registry) -> None:
    conversation = Conversation()
    model = Scripted(
        [StreamDropped("m", "http://127.0.0.1:1", 0, 0)],
        [TextChunk("<response>Done.</response>"), Finish("stop")],
    )
    agent = Agent(model=model, registry=registry)
    first = await agent.run("Go", conversation=conversation)
    assert first.status == "interrupted"
    after = await agent.continue_run(first, conversation=conversation)
    assert after.status == "completed"
    users = [m["content"] for m in model.calls[-1] if m["role"] == "user"]
    assert users[0] == "Go" and len(users) == 2  # the prompt, then the note that goes on

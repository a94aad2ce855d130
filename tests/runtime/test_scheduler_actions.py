"""The six action types through the scheduler: tool, relic, workflow, llm, agent, internal."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from cortex_jupyter.runtime import (
    ActionStatus,
    CacheRelic,
    InternalPolicy,
    Nested,
    Registry,
    Run,
    Step,
    run_stream,
)
from cortex_jupyter.runtime.core.model.chunks import TextChunk
from cortex_jupyter.runtime.core.model.client import Message
from tests.runtime.fixture_types import Act

pytestmark = pytest.mark.anyio


# ---- relic -------------------------------------------------------------------------------


async def test_cache_relic_through_actions(act: Act, tmp_path: Path) -> None:
    cache = CacheRelic(tmp_path / "cache.sqlite3")
    registry = Registry(cache=cache)
    sets = [
        act(f"s{i}", "cache.set", type="relic", parameters={"key": f"k{i}", "value": {"n": i}})
        for i in range(20)
    ]
    run = await run_stream(
        [
            *sets,
            act("g", "cache.get", type="relic", parameters={"key": "k7"}, depends_on=["s7"]),
            act("d", "cache.delete", type="relic", parameters={"key": "k1"}, depends_on=["s1"]),
            act("ttl", "cache.set", type="relic", parameters={"key": "t", "value": 1, "ttl": 60}),
            act("bad", "cache.set", type="relic", parameters={"key": "x", "value": "$obj"}),
        ],
        registry=registry,
        namespace={"obj": object()},
    )
    assert run.actions["g"].output == {"n": 7}
    assert run.actions["d"].output is True
    assert run.actions["bad"].error is not None
    assert "a value of type object cannot be stored" in run.actions["bad"].error
    assert cache.get("k19") == {"n": 19}
    assert cache.get("k1") is None
    cache.close()


# ---- workflow ----------------------------------------------------------------------------


@pytest.fixture
def workflow_registry(registry: Registry) -> Registry:
    @registry.tool
    def upper(text: str) -> str:
        return text.upper()

    registry.add_workflow(
        "shout",
        [
            Step("echo", {"value": "$greeting, $name"}, output_key="line"),
            Step("upper", {"text": "$line"}),
        ],
    )
    registry.add_workflow(
        "broken",
        [
            Step("echo", {"value": 1}),
            Step("boom", {"message": "step two"}),
            Step("echo", {"value": 3}),
        ],
    )

    @registry.tool(type="workflow")
    async def pipeline(n: int) -> int:
        """A workflow written as a function."""
        await anyio.sleep(0)
        return n * 10

    return registry


async def test_list_workflow_runs_steps_in_order_under_the_parent(
    act: Act, workflow_registry: Registry
) -> None:
    run = await run_stream(
        [act("w", "shout", type="workflow", parameters={"name": "ada"}, output_key="out")],
        registry=workflow_registry,
        namespace={"greeting": "hello"},
    )
    assert run.actions["w"].output == "HELLO, ADA"
    steps = [n for n in run.actions.values() if n.parent == "w"]
    assert [(s.id, s.name, s.status) for s in steps] == [
        ("w.1", "echo", "done"),
        ("w.2", "upper", "done"),
    ]
    assert steps[0].finished <= steps[1].started  # type: ignore[operator]
    first = next(e for e in run.events if isinstance(e, ActionStatus) and e.id == "w.1")
    assert (first.status, first.parent, first.name) == ("pending", "w", "echo")
    assert run.variables == {"out": "HELLO, ADA"}


async def test_a_failed_step_fails_the_workflow_and_skips_the_rest(
    act: Act, workflow_registry: Registry
) -> None:
    run = await run_stream([act("w", "broken", type="workflow")], registry=workflow_registry)
    assert run.actions["w"].status == "failed"
    assert run.actions["w"].error == (
        "workflow 'broken' stopped at step 'w.2' (boom): ValueError: step two"
    )
    assert [run.actions[f"w.{i}"].status for i in (1, 2, 3)] == ["done", "failed", "skipped"]
    assert run.actions["w.3"].error == "workflow 'broken' stopped before it"


@pytest.mark.parametrize("model_first", [False, True])
async def test_an_action_with_a_workflow_steps_id_shows_and_runs_too(
    act: Act, workflow_registry: Registry, model_first: bool
) -> None:
    """A model may call an action ``w.2``, the id a workflow ``w`` gives its second step:
    neither the step nor the model's action is lost (the later one takes a free id)."""
    mine = act("w.2", "echo", parameters={"value": "mine"}, depends_on=[] if model_first else ["w"])
    flow = act("w", "shout", type="workflow", parameters={"name": "ada"})
    run = await run_stream(
        [mine, flow] if model_first else [flow, mine],
        registry=workflow_registry,
        namespace={"greeting": "hi"},
    )
    assert run.errors == []
    assert run.actions["w"].output == "HI, ADA"
    steps = [n for n in run.actions.values() if n.parent == "w"]
    assert [(s.name, s.status) for s in steps] == [("echo", "done"), ("upper", "done")]
    (own,) = [n for n in run.actions.values() if n.output == "mine"]
    assert own.parent is None and own.status == "done" and own.name == "echo"
    assert len({s.id for s in steps} | {own.id, "w"}) == 4  # every node has its own id
    assert own.note is None if model_first else "w.2" in (own.note or "")


async def test_function_workflow(act: Act, workflow_registry: Registry) -> None:
    run = await run_stream(
        [act("w", "pipeline", type="workflow", parameters={"n": 4})], registry=workflow_registry
    )
    assert run.actions["w"].output == 40


# ---- llm ---------------------------------------------------------------------------------


async def test_llm_action_sends_the_built_prompt_to_the_model(
    act: Act, fake_model: Any, tmp_path: Path
) -> None:
    model = fake_model(lambda messages: f"summary of {len(messages[0]['content'])} chars")
    registry = Registry(cache=CacheRelic(tmp_path / "c.sqlite3"))
    run = await run_stream(
        [
            act("s", "summarise", type="llm", parameters={"text": "$doc", "focus": "costs"}),
            act("c", "classify", type="llm", parameters={"text": "hi", "labels": ["a", "b"]}),
        ],
        registry=registry,
        model=model,
        namespace={"doc": "long text " * 10},
    )
    assert run.actions["s"].status == "done"
    # Both are async actions: the model may be called for either first.
    prompts = [call[0]["content"] for call in model.calls]
    assert len(prompts) == 2
    summarise = "Summarise the following text in a few sentences. Concentrate on: costs."
    (prompt,) = [p for p in prompts if p.startswith(summarise)]
    assert run.actions["s"].output == f"summary of {len(prompt)} chars"
    assert any("Answer with exactly one of these labels: a, b." in p for p in prompts)


async def test_llm_prompt_builder_may_return_messages(
    act: Act, registry: Registry, fake_model: Any
) -> None:
    @registry.tool(type="llm")
    def translate(text: str, to: str) -> list[Message]:
        return [
            {"role": "system", "content": f"Translate to {to}."},
            {"role": "user", "content": text},
        ]

    model = fake_model(lambda messages: json.dumps(list(messages)))
    run = await run_stream(
        [act("t", "translate", type="llm", parameters={"text": "hi", "to": "fr"})],
        registry=registry,
        model=model,
    )
    assert json.loads(run.actions["t"].output)[0] == {
        "role": "system",
        "content": "Translate to fr.",
    }


async def test_llm_without_a_model_says_so(act: Act, registry: Registry) -> None:
    registry.register(lambda prompt: prompt, name="complete", type="llm")
    run = await run_stream(
        [act("l", "complete", type="llm", parameters={"prompt": "x"})], registry=registry
    )
    assert run.actions["l"].error == (
        "llm action 'complete' needs a model, but no model is configured for this run; "
        "pass model=... to the runtime (or register the agent with its own model)"
    )


# ---- agent ---------------------------------------------------------------------------------


def agent_reply(messages: Sequence[Message]) -> str:
    task = messages[-1]["content"]
    return (
        f"<thought>working on {task}</thought>"
        '<action id="x">{"name": "add", "parameters": {"a": 2, "b": 3}, "output_key": "sum"}'
        "</action>"
        "<response>the sum is $sum</response>"
    )


async def test_agent_runs_a_nested_run_under_its_node(
    act: Act, registry: Registry, fake_model: Any
) -> None:
    registry.add_agent("calc", "You add numbers.", model=fake_model(agent_reply))
    seen: list[Any] = []
    run = await run_stream(
        [act("ag", "calc", type="agent", parameters={"task": "2+3", "context": {"hint": 1}})],
        registry=registry,
        on_event=seen.append,
    )
    node = run.actions["ag"]
    assert node.status == "done", node.error
    assert node.output == "the sum is 5"  # its answer, $sum filled (issue 18 §4)
    assert node.subrun is not None
    assert node.subrun.thought.startswith("working on 2+3")
    assert node.subrun.actions["x"].output == 5
    nested = [e for e in seen if isinstance(e, Nested)]
    assert nested and all(e.parent == "ag" for e in nested)
    assert any(
        isinstance(e.event, ActionStatus) and e.event.id == "x" and e.event.status == "done"
        for e in nested
    )
    assert "x" not in run.actions


async def test_agent_uses_the_session_model_and_says_when_there_is_none(
    act: Act, registry: Registry, fake_model: Any
) -> None:
    registry.add_agent("calc", "You add numbers.")
    run = await run_stream(
        [act("a", "calc", type="agent", parameters={"task": "t"})], registry=registry
    )
    assert run.actions["a"].error is not None
    assert "agent action 'calc' needs a model, but no model is configured" in run.actions["a"].error
    model = fake_model(agent_reply)
    run = await run_stream(
        [act("a", "calc", type="agent", parameters={"task": "t"})], registry=registry, model=model
    )
    assert run.actions["a"].status == "done"
    system = model.calls[0][0]
    # the nested agent's own loop: its instructions, and the protocol taught to its model
    assert system["role"] == "system"
    assert "# Your instructions\n\nYou add numbers." in system["content"]
    assert "# How you answer: the Cortex protocol" in system["content"]
    assert model.calls[0][1] == {"role": "user", "content": "t"}


async def test_agents_cannot_nest_without_limit(
    act: Act, registry: Registry, fake_model: Any
) -> None:
    model = fake_model(
        '<action type="agent" id="again">{"name": "loop", "parameters": {"task": "t"}}</action>'
    )
    registry.add_agent("loop", "Call yourself.", model=model)
    run: Run = await run_stream(
        [act("a", "loop", type="agent", parameters={"task": "t"})], registry=registry, max_depth=2
    )
    inner = run.actions["a"].subrun.actions["again"].subrun  # type: ignore[union-attr]
    assert inner is not None
    assert inner.actions["again"].error == (
        "agent 'loop' was not started: agents are already nested 2 deep, which is the limit"
    )


# ---- internal ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        (None, "internal action 'add_feed' was refused: internal actions are disabled"),
        (
            InternalPolicy(enabled=True, allow=frozenset({"remove_feed"})),
            "internal action 'add_feed' was refused: it is not on the allowlist (remove_feed)",
        ),
    ],
)
async def test_internal_actions_need_enabling_and_the_allowlist(
    act: Act, tmp_path: Path, policy: InternalPolicy | None, message: str
) -> None:
    feeds: dict[str, str] = {}
    run = await run_stream(
        [act("i", "add_feed", type="internal", parameters={"id": "f", "text": "t"})],
        registry=Registry(cache=CacheRelic(tmp_path / "c.sqlite3")),
        internal=policy,
        feeds=feeds,
    )
    assert run.actions["i"].status == "failed"
    assert run.actions["i"].error is not None and run.actions["i"].error.startswith(message)
    assert feeds == {}


async def test_allowed_internal_actions_change_the_context(act: Act, tmp_path: Path) -> None:
    feeds = {"old": "x"}
    run = await run_stream(
        [
            act("add", "add_feed", type="internal", parameters={"id": "plan", "text": "step 1"}),
            act(
                "upd",
                "update_feed",
                type="internal",
                parameters={"id": "plan", "text": "step 2"},
                depends_on=["add"],
            ),
            act("rm", "remove_feed", type="internal", parameters={"id": "old"}),
            act("bad", "update_feed", type="internal", parameters={"id": "zz", "text": ""}),
            act("use", "complete", type="llm", parameters={"prompt": "$plan"}, depends_on=["upd"]),
        ],
        registry=Registry(cache=CacheRelic(tmp_path / "c.sqlite3")),
        internal=InternalPolicy(
            enabled=True, allow=frozenset({"add_feed", "update_feed", "remove_feed"})
        ),
        feeds=feeds,
        model=_Echo(),
    )
    assert feeds == {"plan": "step 2"}
    assert run.actions["rm"].output is True
    assert run.actions["bad"].error is not None
    assert run.actions["bad"].error.startswith("no context feed 'zz'; feeds: ")
    assert run.actions["use"].output == "step 2"


class _Echo:
    name = "echo"

    async def stream(self, messages: Sequence[Message], **_: Any) -> Any:
        yield TextChunk(messages[-1]["content"])

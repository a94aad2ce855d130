"""What a preset built on the runner may change (``running.Hooks``, ``order=``): an agent
per case, a stop that cancels the rest, the order tries start in. ``evaluate()`` is built
on these (tests/test_evaluate_preset.py)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from cortex_jupyter.experiments import expect
from cortex_jupyter.experiments.cases import Case, Dataset
from cortex_jupyter.experiments.results import Try
from cortex_jupyter.experiments.running import Hooks, Watched
from cortex_jupyter.models import ScriptModel
from cortex_jupyter.runtime import Agent, Registry


def calling(tool: str) -> ScriptModel:
    """A model that calls ``tool`` with the prompt's last word, then answers with it."""

    def script(prompt: str) -> str:
        word = prompt.split()[-1]
        return (
            f'<action id="t1">{{"name": "{tool}", "parameters": {{"word": "{word}"}},'
            f' "output_key": "said"}}</action>\n--- next turn ---\n'
            f'<response final="true">$said</response>'
        )

    return ScriptModel(script)


def registry_of(name: str, seen: list[str], column: str = "") -> Registry:
    registry = Registry(builtins=False)

    async def tool(word: str) -> str:
        """Say the word."""
        seen.append(f"in {column}{word}")
        await anyio.sleep(0.01)  # room for another try to start, were two allowed
        seen.append(f"out {column}{word}")
        return f"{name}:{word}"

    tool.__name__ = name
    registry.register(tool)
    return registry


def test_a_hook_gives_each_case_its_own_agent() -> None:
    seen: list[str] = []
    dataset = Dataset([
        Case("shout hi", name="shout", expect=[expect.answer(equals="shout:hi")]),
        Case("whisper ho", name="whisper", expect=[expect.answer(equals="whisper:ho")]),
    ])  # fmt: skip
    model = ScriptModel(lambda p: "unused")
    agents = {
        "shout": Agent(model=calling("shout"), registry=registry_of("shout", seen)),
        "whisper": Agent(model=calling("whisper"), registry=registry_of("whisper", seen)),
    }
    column = Agent(model=model, registry=Registry(builtins=False))  # has neither tool
    asked: list[tuple[str, str]] = []

    def agent_for(case: str, column: str) -> Agent:
        asked.append((case, column))
        return agents[case]

    experiment = dataset.run(
        {"own": column}, store=None, progress=False, view=False,
        hooks=Hooks(agent_for=agent_for),
    )  # fmt: skip
    assert [(t.case, t.passed) for t in experiment.tries] == [("shout", True), ("whisper", True)]
    assert sorted(asked) == [("shout", "own"), ("whisper", "own")]
    # Without the hook, the column's agent runs each case (and has no such tool).
    plain = dataset.run({"own": column}, store=None, progress=False, view=False)
    assert [t.passed for t in plain.tries] == [False, False]


@pytest.mark.parametrize(
    ("order", "expected"),
    [
        ("repeat", ["a:x", "b:x", "a:y", "b:y", "a:x", "b:x", "a:y", "b:y"]),
        ("agent", ["a:x", "a:y", "a:x", "a:y", "b:x", "b:y", "b:x", "b:y"]),
    ],
)
def test_at_a_concurrency_of_one_tries_run_one_by_one_in_order(
    order: str, expected: list[str]
) -> None:
    seen: list[str] = []
    dataset = Dataset([Case("say x", name="x"), Case("say y", name="y")])
    agents = {
        column: Agent(model=calling("say"), registry=registry_of("say", seen, f"{column}:"))
        for column in ("a", "b")
    }
    experiment = dataset.run(
        agents, repeat=2, concurrency=1, order=order, store=None, progress=False, view=False
    )
    assert all(t.passed for t in experiment.tries)
    # one at a time: each try's tool ends before the next try's starts
    assert seen == [f"{way} {key}" for key in expected for way in ("in", "out")]
    assert [f"{t.agent}:{t.case}" for t in experiment.tries] == expected


def test_a_stop_hook_cancels_every_try_not_yet_ended() -> None:
    seen: list[str] = []
    dataset = Dataset([Case(f"say w{i}", name=f"c{i}") for i in range(4)])
    agent = Agent(model=calling("say"), registry=registry_of("say", seen))
    watched: list[Watched] = []

    def stop_when(tried: Try, model: Watched) -> str | None:
        watched.append(model)
        return "the second try said enough" if tried.case == "c1" else None

    ended: list[str] = []
    experiment = dataset.run(
        {"one": agent}, concurrency=1, store=None, progress=False, view=False,
        hooks=Hooks(stop_when=stop_when, ended=lambda t: ended.append(t.case)),
    )  # fmt: skip
    assert [t.status for t in experiment.tries] == ["completed", "completed", "pending", "pending"]
    assert ended == ["c0", "c1"]  # the stopping try is reported too
    assert seen == ["in w0", "out w0", "in w1", "out w1"]
    assert (experiment.status, experiment.note) == ("stopped", "the second try said enough")
    assert [(w.failure, w.constrained) for w in watched] == [(None, False), (None, False)]


def test_an_unknown_order_is_refused() -> None:
    dataset = Dataset([Case("say x")])
    agent: Any = Agent(model=calling("say"))
    with pytest.raises(ValueError, match="order is 'repeat' or 'agent'; got 'sideways'"):
        dataset.run(agent, order="sideways", store=None, progress=False)

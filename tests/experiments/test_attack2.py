"""A second fresh-eye attack on experiments (issue 34): hostile files and checks, a judge
budget under concurrency, resuming and rescoring what the store does not fully hold."""

from __future__ import annotations

import _thread
import sqlite3
import threading
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest

from cortex_jupyter.experiments import expect
from cortex_jupyter.experiments.cases import Case, Dataset
from cortex_jupyter.experiments.experiment import Experiment
from cortex_jupyter.experiments.running import Hooks
from cortex_jupyter.models import OpenAIModel, ScriptModel
from cortex_jupyter.runtime import Agent, Registry
from cortex_jupyter.runtime.core.model.chunks import TextChunk, Usage
from tests.models.fake_openai_server import Error, FakeOpenAIServer, Stream, finish, text, usage


def _says(text: str) -> Agent:
    return Agent(model=ScriptModel(lambda prompt: f'<response final="true">{text}</response>'))


def test_a_check_answering_with_numpy_values_is_read_as_their_python_values() -> None:
    checks = [
        expect.answer(check=lambda a: np.float64(a) == 42.0),  # np.bool_
        expect.answer(check=lambda a: np.int64(1)),
        expect.answer(check=lambda a: (np.bool_(True), "close enough")),
        expect.answer(check=lambda a: np.float32(0.25)),
    ]
    experiment = Dataset([Case("Six times seven?", name="mul", expect=checks)]).run(
        {"a": _says("42")}, store=None, progress=False
    )
    verdicts = experiment.tries[0].verdicts
    assert [verdicts[k].passed for k in ("answer", "answer#2", "answer#3", "answer#4")] == [
        True, True, True, False,
    ]  # fmt: skip
    assert verdicts["answer#4"].score == 0.25


@pytest.mark.parametrize("name", ["[1, 2]", "{a: 1}", "5", "''"])
def test_an_expectation_named_by_anything_but_text_in_a_file_is_refused_on_loading(
    tmp_path: Path, name: str
) -> None:
    path = tmp_path / "cases.yaml"
    path.write_text(
        f"cases:\n- name: one\n  prompt: q\n  expect:\n  - {{kind: answer, contains: '4', "
        f"name: {name}}}\n",
        encoding="utf-8",
    )
    with pytest.raises(ValueError, match=r"cases.yaml, line 2: case \('one'\): expectation 1: "
                                         r"an expectation's name is text"):  # fmt: skip
        Dataset.load(path)


def test_a_failure_inside_the_runner_is_raised_as_itself() -> None:
    def broken(case: str, column: str) -> Agent | None:
        raise RuntimeError("the preset broke")

    with pytest.raises(BaseException) as raised:  # a group holding the error, or the error
        Dataset([Case("q", name="one")]).run(
            {"a": _says("42")}, store=None, progress=False, hooks=Hooks(agent_for=broken)
        )
    seen, found = [raised.value], []
    while seen:
        error = seen.pop()
        found.append(error)
        seen += list(getattr(error, "exceptions", ()))
    assert any(isinstance(e, RuntimeError) and "the preset broke" in str(e) for e in found), found


def test_a_slow_check_does_not_hold_the_other_tries() -> None:
    # A check that waits for another try's check: the event loop must not be held by it.
    release = threading.Event()

    def waits(answer: str) -> bool:
        return release.wait(timeout=20)

    def releases(answer: str) -> bool:
        release.set()
        return True

    script = {  # the second try ends later: the first one's check is asked first
        "first": '<response final="true">42</response>',
        "second": '<action id="a1">{"name": "nothing", "parameters": {}}</action>\n'
        '--- next turn ---\n<response final="true">42</response>',
    }
    dataset = Dataset([
        Case("first", name="first", expect=[expect.answer(check=waits)]),
        Case("second", name="second", expect=[expect.answer(check=releases)]),
    ])  # fmt: skip
    registry = Registry()

    @registry.tool
    def nothing() -> str:
        """Nothing."""
        return "done"

    agents = {"a": Agent(model=ScriptModel(lambda p: script[p]), registry=registry)}
    experiment = dataset.run(agents, store=None, progress=False, concurrency=2)
    assert {t.case: t.verdicts["answer"].passed for t in experiment.tries} == {
        "first": True, "second": True,
    }  # fmt: skip


def test_a_stop_while_a_check_hangs_returns_and_leaves_that_try_pending(tmp_path: Path) -> None:
    gate = threading.Event()

    def hangs(answer: str) -> bool:
        _thread.interrupt_main()  # the Stop button, while this check still runs
        gate.wait(timeout=20)
        return True

    store = str(tmp_path / "runs.db")
    try:
        experiment = Dataset([Case("q", name="hangs", expect=[expect.answer(check=hangs)])]).run(
            {"a": _says("42")}, store=store, progress=False
        )
        assert experiment.status == "stopped"
        assert [t.status for t in experiment.tries] == ["pending"]  # not stored: resume runs it
        assert Experiment.load(experiment.id, store=store).tries == []
    finally:
        gate.set()


class _Judge:
    """A judge model: each request costs 110 tokens."""

    name = "judge"
    endpoint = "http://127.0.0.1:9"

    def __init__(self) -> None:
        self.requests = 0

    async def stream(self, messages: Any, **options: Any) -> Any:
        self.requests += 1
        await anyio.sleep(0.01)
        yield TextChunk('{"pass": true, "score": 1, "reason": "fine"}')
        yield Usage(prompt_tokens=100, completion_tokens=10)


def test_a_judge_budget_holds_with_many_tries_at_once() -> None:
    judge = _Judge()
    dataset = Dataset([Case(f"q{i}", expect=[expect.judge("Says 42.")]) for i in range(8)])
    experiment = dataset.run(
        {"a": _says("42")}, store=None, progress=False, judge=judge,
        judge_budget="150tok", concurrency=8,
    )  # fmt: skip
    # The second request found 110 of 150 left and went; none after it.
    assert judge.requests == 2
    reasons = [t.verdicts["judge"].reason for t in experiment.tries]
    assert reasons.count("fine") == 2
    assert all("the judge's budget of 150 tokens is spent" in r for r in reasons if r != "fine")


def _unsaved(prompts: list[str]) -> tuple[Dataset, Agent]:
    def script(prompt: str) -> str:
        prompts.append(prompt)
        return '<response final="true">42</response>'

    dataset = Dataset(
        [Case("Six times seven?", name=n, expect=[expect.answer(check=lambda a: a == "42")])
         for n in ("mul", "again")],
        name="arith",
    )  # fmt: skip
    return dataset, Agent(model=ScriptModel(script))


def test_resuming_an_experiment_whose_dataset_was_not_saved_asks_for_the_dataset(
    tmp_path: Path,
) -> None:
    store = str(tmp_path / "runs.db")
    prompts: list[str] = []
    dataset, agent = _unsaved(prompts)
    experiment = dataset.run({"a": agent}, store=store, progress=False, repeat=2)
    with sqlite3.connect(store) as db:  # the kernel died before the second repeats ended
        db.execute("DELETE FROM tries WHERE repeat = 1")
    db.close()
    prompts.clear()
    with pytest.raises(ValueError, match=r"its dataset was not saved .*dataset=\.\.\."):
        Experiment.resume(experiment.id, {"a": agent}, store=store, progress=False)
    assert prompts == []  # no stand-in prompt reached the agent
    resumed = Experiment.resume(
        experiment.id, {"a": agent}, store=store, progress=False, dataset=dataset
    )
    assert prompts == ["Six times seven?"] * 2
    assert resumed.status == "completed" and all(t.passed for t in resumed.tries)


def test_rescoring_a_try_whose_run_is_not_in_the_store_fails_that_try_alone(
    tmp_path: Path,
) -> None:
    store = str(tmp_path / "runs.db")
    dataset = Dataset([Case("q", name="a"), Case("q2", name="b")])
    experiment = dataset.run({"a": _says("42")}, store=store, progress=False)
    loaded = Experiment.load(experiment.id, store=store)
    lost = loaded.tries[0].run_id
    with sqlite3.connect(store) as db:  # a kill between the try's row and the run's writer
        for table in ("events", "nodes", "outputs"):
            db.execute(f"DELETE FROM {table} WHERE run = ?", (lost,))
        db.execute("DELETE FROM runs WHERE id = ?", (lost,))
    db.close()
    again = loaded.rescore([expect.answer(contains="4")])
    first, second = again.tries
    assert not first.passed and first.error is not None and lost in first.error
    assert second.passed and set(second.verdicts) == {"protocol", "answer"}


NOT_FRACTIONS = [
    {"min_rate": float("nan")},
    {"per_case": float("nan")},
    {"min_rate": 90},
    {"min_rate": "0.9"},
    {"min_rate": None},
]


@pytest.mark.parametrize("rule", NOT_FRACTIONS)
def test_assert_passes_refuses_a_threshold_that_is_no_fraction(rule: dict[str, Any]) -> None:
    experiment = Dataset([Case("q", name="a", expect=[expect.answer(contains="no")])]).run(
        {"a": _says("42")}, store=None, progress=False
    )
    with pytest.raises(ValueError, match="is a fraction from 0 to 1"):
        experiment.assert_passes(**rule)


REFUND = '<action id="r">{"name": "refund", "parameters": {"amount": 20}}</action>'
SLOW_DOWN = Error(429, {"error": {"message": "slow down"}}, {"Retry-After": "0"})


def refund_a7(server: FakeOpenAIServer, *replies: Any, llm: bool = False) -> tuple[Any, list[int]]:
    """The experiment of one try ("Refund A7") of an agent with a ``refund`` tool (and an
    ``llm`` action, ``summary``), on ``server`` scripted with ``replies``; the refunds made."""
    refunds: list[int] = []
    registry = Registry()

    @registry.tool
    def refund(amount: int) -> str:
        """Refund an amount."""
        refunds.append(amount)
        return "refunded"

    if llm:
        registry.register(lambda prompt: prompt, name="summary", type="llm")
    server.script(*replies)
    agent = Agent(model=OpenAIModel("fake-model", max_retries=0), registry=registry)
    experiment = Dataset([Case("Refund A7", expect=[expect.answer(contains="Refunded")])]).run(
        {"m": agent}, store=None, progress=False
    )
    return experiment, refunds


def test_a_try_that_completed_is_not_run_again_for_a_rate_limited_llm_action(
    server: FakeOpenAIServer,
) -> None:
    summary = '<action type="llm" id="s">{"name": "summary", "parameters": {"prompt": "sum up"}}'
    experiment, refunds = refund_a7(
        server,
        Stream([text(REFUND + summary + "</action>"), finish(), usage(3, 4)]),
        SLOW_DOWN,  # the llm action
        Stream([text('<response final="true">Refunded.</response>'), finish(), usage(3, 4)]),
        llm=True,
    )
    assert [(t.status, t.verdicts["answer"].passed) for t in experiment.tries] == [
        ("completed", True)
    ]
    assert len(server.requests) == 3 and refunds == [20]  # the try was not made again


def test_a_try_whose_tools_ran_is_not_run_again_when_a_later_turn_is_rate_limited(
    server: FakeOpenAIServer,
) -> None:
    experiment, refunds = refund_a7(
        server,
        Stream([text(REFUND), finish(), usage(3, 4)]),
        SLOW_DOWN,  # turn 2
        Stream([text(REFUND), finish(), usage(3, 4)]),
        Stream([text('<response final="true">Refunded.</response>'), finish(), usage(3, 4)]),
    )
    (tried,) = experiment.tries
    assert refunds == [20] and len(server.requests) == 2  # the refund did not run twice
    assert tried.status == "interrupted" and not tried.passed
    assert "HTTP 429" in (tried.run.reason or ""), tried.run.reason


def test_an_expectation_named_like_a_numbered_label_keeps_its_own_verdict() -> None:
    checks = [
        expect.answer(contains="42"),
        expect.answer(contains="nope", name="answer#2"),  # fails
        expect.answer(contains="4"),  # numbered answer#2 too, before
    ]
    experiment = Dataset([Case("q", name="c", expect=checks)]).run(
        {"gpt": _says("42")}, store=None, progress=False
    )
    verdicts = experiment.tries[0].verdicts
    assert {k: v.passed for k, v in verdicts.items()} == {
        "protocol": True, "answer": True, "answer#2": False, "answer#3": True,
    }  # fmt: skip
    assert not experiment.tries[0].passed


def test_assert_passes_takes_one_agent_named_as_text() -> None:
    experiment = Dataset([Case("q", name="c")]).run(
        {"gpt": _says("42")}, store=None, progress=False
    )
    experiment.assert_passes(agents="gpt")  # not the agents "g", "p" and "t"

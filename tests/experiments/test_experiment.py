"""Experiments run end to end: each (case, agent, repeat) an ordinary stored run, judged,
bounded per server and by a budget, stopped, resumed after a killed kernel, compared and
scored again without asking the model."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from cortex_jupyter import store
from cortex_jupyter.experiments import expect
from cortex_jupyter.experiments.cases import Case, Dataset
from cortex_jupyter.experiments.experiment import Experiment
from cortex_jupyter.models import OpenAIModel, ScriptModel
from cortex_jupyter.runtime import Agent, Registry
from tests.models.fake_openai_server import Error, FakeOpenAIServer, Stream, finish, text, usage

ROOT = Path(__file__).resolve().parents[2]

CAPITALS = {"France": "Paris", "Italy": "Rome", "Spain": "Madrid"}


def capital_script(prompt: str) -> str:
    country = prompt.rsplit(" ", 1)[-1].rstrip("?")
    return (
        f'<action id="c1">{{"name": "capital", "parameters": {{"country": "{country}"}},'
        f' "output_key": "cap"}}</action>\n--- next turn ---\n'
        f'<response final="true">The capital is $cap.</response>'
    )


def tools() -> Registry:
    registry = Registry()

    @registry.tool
    def capital(country: str) -> str:
        """The capital of a country."""
        return CAPITALS.get(country, "unknown")

    return registry


def dataset() -> Dataset:
    return Dataset(
        [
            Case(f"What is the capital of {country}?", name=country.lower(),
                 expect=[expect.answer(contains=city), expect.tools(["capital"])])
            for country, city in CAPITALS.items()
        ],
        name="capitals",
    )  # fmt: skip


def agent(script: Any = capital_script) -> Agent:
    return Agent(model=ScriptModel(script), registry=tools())


def test_each_try_is_a_stored_run_tagged_with_its_experiment() -> None:
    wrong = ScriptModel(lambda p: '<response final="true">Lyon</response>')
    experiment = dataset().run(
        {"good": agent(), "bad": Agent(model=wrong, registry=tools())}, repeat=2, progress=False
    )
    assert len(experiment.tries) == 3 * 2 * 2
    assert {t.agent for t in experiment.tries if t.passed} == {"good"}
    frame = experiment.to_pandas()
    assert {"case", "agent", "repeat", "passed", "score", "protocol", "answer", "tools",
            "cost", "tokens", "seconds", "run_id"} <= set(frame.columns)  # fmt: skip
    assert frame.groupby("agent")["passed"].mean().to_dict() == {"bad": 0.0, "good": 1.0}
    one = frame[(frame.agent == "good") & (frame.case == "italy")].iloc[0]
    stored = store.open_run(one.run_id)
    assert stored.answer == "The capital is Rome."
    assert stored.options["experiment"] == experiment.id and stored.options["case"] == "italy"
    again = Experiment.load(experiment.id)
    assert {(t.key, t.passed) for t in again.tries} == {(t.key, t.passed) for t in experiment.tries}
    bad = next(t for t in again.tries if t.agent == "bad")
    assert "lacks 'Paris'" in " ".join(bad.reasons()) or bad.case != "france"


def test_assert_passes_names_the_failing_cases_and_why() -> None:
    half = ScriptModel({"What is the capital of France?": capital_script("France"),
                        "What is the capital of Italy?": '<response final="true">Milan</response>',
                        "What is the capital of Spain?": capital_script("Spain")})  # fmt: skip
    experiment = dataset().run({"a": Agent(model=half, registry=tools())}, progress=False)
    with pytest.raises(AssertionError) as failed:
        experiment.assert_passes()
    said = str(failed.value)
    assert "italy" in said and "Rome" in said and "france" not in said
    experiment.assert_passes(min_rate=0.6)


def test_repeats_that_disagree_are_flaky() -> None:
    answers = itertools.cycle(["Paris", "Lyon"])
    lock = threading.Lock()

    def sometimes(prompt: str) -> str:
        with lock:
            return f'<response final="true">{next(answers)}</response>'

    cases = Dataset(
        [Case("capital of France?", name="fr", expect=[expect.answer(contains="Paris")])]
    )
    experiment = cases.run({"a": Agent(model=ScriptModel(sometimes))}, repeat=4, progress=False)
    cell = experiment.matrix().cells[("fr", "a")]
    assert (cell.passed, cell.total, cell.flaky) == (2, 4, True)


def test_tries_at_once_are_bounded_per_server() -> None:
    running, most, lock = [0], [0], threading.Lock()
    both = threading.Barrier(2, timeout=10)
    registry = Registry()

    @registry.tool
    def capital(country: str) -> str:
        """The capital."""
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        with contextlib.suppress(threading.BrokenBarrierError):
            both.wait()  # two run at once, or this breaks
        with lock:
            running[0] -= 1
        return CAPITALS[country]

    experiment = dataset().run(
        {"a": Agent(model=ScriptModel(capital_script), registry=registry)},
        repeat=2, concurrency=2, progress=False,
    )  # fmt: skip
    assert most[0] == 2
    assert all(t.passed for t in experiment.tries)


def _paid(server: FakeOpenAIServer, replies: int) -> None:
    # 1,520 tokens a try: a real request's size (the system prompt alone is about 1,100).
    server.script(*[Stream([text("Paris"), finish(), usage(1500, 20)]) for _ in range(replies)])


def test_a_budget_stops_scheduling_before_it_would_be_passed(server: FakeOpenAIServer) -> None:
    _paid(server, 10)
    cases = Dataset([Case(f"q{i}", expect=[expect.answer(contains="Paris")]) for i in range(6)])
    model = OpenAIModel("fake-model", max_retries=0)
    experiment = cases.run({"m": Agent(model=model)}, budget="3500tok", progress=False)
    ran = [t for t in experiment.tries if t.status == "completed"]
    refused = [t for t in experiment.tries if t.status == "budget"]
    assert len(ran) == 2 and len(refused) == 4
    assert len(server.requests) == 2
    assert sum(t.tokens for t in ran) <= 3500
    assert "budget" in (experiment.note or "") and "3,500" in (refused[0].error or "")


def test_a_rate_limited_server_is_waited_for_and_the_try_made_again(
    server: FakeOpenAIServer,
) -> None:
    server.script(
        Error(429, {"error": {"message": "slow down"}}, {"Retry-After": "0"}),
        Stream([text("Paris"), finish(), usage(3, 4)]),
    )
    cases = Dataset([Case("q", expect=[expect.answer(contains="Paris")])])
    experiment = cases.run({"m": Agent(model=OpenAIModel("fake-model", max_retries=0))},
                           progress=False)  # fmt: skip
    assert [t.passed for t in experiment.tries] == [True]
    assert len(server.requests) == 2


def test_rescore_reads_the_runs_and_asks_no_model(server: FakeOpenAIServer) -> None:
    _paid(server, 2)
    cases = Dataset([Case("a", expect=[expect.answer(contains="Rome")]), Case("b")])
    experiment = cases.run({"m": Agent(model=OpenAIModel("fake-model", max_retries=0))},
                           progress=False)  # fmt: skip
    asked = len(server.requests)
    assert [t.passed for t in experiment.tries] == [False, True]
    again = experiment.rescore([expect.answer(contains="Paris")])
    assert [t.passed for t in again.tries] == [True, True]
    assert len(server.requests) == asked
    later = Experiment.load(experiment.id).rescore({"a": [expect.answer(equals="Paris")]})
    assert [t.passed for t in later.tries] == [True, True]
    assert len(server.requests) == asked


def test_compare_names_what_regressed_and_what_improved() -> None:
    before = dataset().run({"a": agent()}, name="nightly", progress=False)

    def changed(prompt: str) -> str:
        if "Italy" in prompt:
            return '<response final="true">Milan</response>'
        return capital_script(prompt.rsplit(" ", 1)[-1].rstrip("?"))

    after = dataset().run({"a": agent(changed)}, name="nightly", progress=False)
    comparison = after.compare("last")
    assert comparison.regressed == [("italy", "a")] and comparison.improved == []
    assert after.compare(before).regressed == [("italy", "a")]
    assert before.compare(after).improved == [("italy", "a")]


def test_a_stop_keeps_the_tries_that_ended() -> None:
    from cortex_jupyter.experiments import running

    calls = [0]
    real = running.drive

    def stop_after_first(plan: Any, on_try: Any, on_idle: Any) -> Any:
        def idle() -> None:
            if any(t.done for t in plan.tries):
                calls[0] += 1
                raise KeyboardInterrupt
            on_idle()

        return real(plan, on_try, idle)

    gate = threading.Event()
    registry = Registry()

    @registry.tool
    def capital(country: str) -> str:
        """The capital."""
        if country != "France":
            gate.wait(10)
        return CAPITALS[country]

    import cortex_jupyter.experiments.experiment as module

    original = module.drive
    module.drive = stop_after_first
    try:
        experiment = dataset().run(
            {"a": Agent(model=ScriptModel(capital_script), registry=registry)},
            concurrency=1, progress=False,
        )  # fmt: skip
    finally:
        module.drive = original
        gate.set()
    assert experiment.status == "stopped" and "Stop" in (experiment.note or "")
    ended = [t for t in experiment.tries if t.done]
    assert [t.case for t in ended] == ["france"]
    assert [t.case for t in Experiment.load(experiment.id).tries] == ["france"]


CHILD = r"""
import os, sys, time
from pathlib import Path
from cortex_jupyter.experiments import expect
from cortex_jupyter.experiments.cases import Case, Dataset
from cortex_jupyter.models import ScriptModel
from cortex_jupyter.runtime import Agent, Registry
log = Path(sys.argv[1])
registry = Registry()

@registry.tool
def capital(country: str) -> str:
    "The capital."
    with log.open("a") as f:
        f.write(country + "\n")
    if country == "Spain":
        os.write(1, b"HOLDING\n")  # past the tool's captured stdout
        time.sleep(600)
    return {"France": "Paris", "Italy": "Rome", "Spain": "Madrid"}[country]

def script(prompt):
    country = prompt.rsplit(" ", 1)[-1].rstrip("?")
    return ('<action id="c1">{"name": "capital", "parameters": {"country": "%s"}, '
            '"output_key": "cap"}</action>\n--- next turn ---\n'
            '<response final="true">The capital is $cap.</response>' % country)

cases = Dataset([Case("What is the capital of %s?" % c, name=c.lower(),
                      expect=[expect.answer(contains=city)])
                 for c, city in [("France", "Paris"), ("Italy", "Rome"), ("Spain", "Madrid")]],
                name="killed")
cases.run({"a": Agent(model=ScriptModel(script), registry=registry)}, concurrency=1,
          progress=False)
"""


def test_a_killed_kernel_resumes_without_running_ended_tries_again(tmp_path: Path) -> None:
    log = tmp_path / "calls.txt"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(log)], env=env, cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.strip() == "HOLDING", child.stderr.read() if child.stderr else ""
    finally:
        child.send_signal(signal.SIGKILL)
        child.communicate()
    assert log.read_text().split() == ["France", "Italy", "Spain"]
    calls: list[str] = []
    registry = Registry()

    @registry.tool
    def capital(country: str) -> str:
        """The capital."""
        calls.append(country)
        return CAPITALS[country]

    resumed = Experiment.resume(
        "killed", {"a": Agent(model=ScriptModel(capital_script), registry=registry)},
        progress=False,
    )  # fmt: skip
    assert calls == ["Spain"]
    assert [t.passed for t in sorted(resumed.tries, key=lambda t: t.case)] == [True] * 3
    assert resumed.status == "completed"
    assert {t.case for t in Experiment.load(resumed.id).tries} == {"france", "italy", "spain"}


def test_resume_without_the_agents_says_which_columns_to_give() -> None:
    experiment = dataset().run({"mine": agent()}, name="needs-agents", progress=False)
    with pytest.raises(ValueError, match="column 'mine'"):
        Experiment.resume(experiment.id)


def test_bad_arguments_are_one_clear_line() -> None:
    cases = dataset()
    with pytest.raises(TypeError, match="not an Agent"):
        cases.run({"a": "gpt-4o"}, progress=False)
    with pytest.raises(ValueError, match="repeat"):
        cases.run({"a": agent()}, repeat=0, progress=False)
    with pytest.raises(ValueError, match="budget"):
        cases.run({"a": agent()}, budget="lots", progress=False)


def test_the_store_never_holds_a_secret_from_an_experiment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    secret = "sk-live-EXPERIMENT0123456789abcd"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    leaky = ScriptModel(lambda p: f'<response final="true">key {secret}</response>')
    cases = Dataset([Case(f"say {secret}", name=f"case {secret}",
                          expect=[expect.answer(equals="nothing")])])  # fmt: skip
    # A store of its own, closed before its bytes are read: a plain open() and close() of a
    # file SQLite holds drops this process's locks on it (POSIX), which would let another
    # process take the session's store for unused and lose what it writes.
    path = tmp_path / "runs.db"
    experiment = cases.run({secret[:12]: Agent(model=leaky)}, store=path, progress=False)
    store.open_store(path).close()
    for suffix in ("", "-wal"):
        file = Path(f"{path}{suffix}")
        if file.exists():
            assert secret.encode() not in file.read_bytes()
    db = sqlite3.connect(path)
    try:
        rows = db.execute("SELECT * FROM tries WHERE experiment = ?", (experiment.id,)).fetchall()
    finally:
        db.close()
    assert rows and secret not in json.dumps(rows)


def test_the_judge_is_counted_and_budgeted_apart_from_the_agents(
    server: FakeOpenAIServer,
) -> None:
    server.script(
        Stream(
            [
                text('{"pass": true, "score": 0.9, "reason": "names Paris"}'),
                finish(),
                usage(400, 30),
            ]
        ),
    )
    judge = expect.judge("The answer names the capital of France.")
    cases = Dataset([Case("capital of France?", name=f"q{i}", expect=[judge]) for i in range(2)])
    paris = ScriptModel(lambda p: '<response final="true">Paris</response>')
    experiment = cases.run(
        {"a": Agent(model=paris)}, judge=OpenAIModel("fake-model", max_retries=0),
        judge_budget="300tok", concurrency=1, progress=False,
    )  # fmt: skip
    verdicts = [t.verdicts["judge"] for t in experiment.tries]
    assert verdicts[0].passed and verdicts[0].score == 0.9
    assert not verdicts[1].passed and "judge's budget of 300 tokens is spent" in verdicts[1].reason
    assert len(server.requests) == 1
    assert [counts for counts, _ in experiment.judge_spend] == [
        {"prompt_tokens": 400, "completion_tokens": 30}
    ]
    assert all(t.tokens == 0 for t in experiment.tries)  # the agents spent nothing

"""evaluate() as a preset of the experiments (issue 34, item 8): the tasks are the
conformance dataset, each dialect and constraint setting an agent column, the tries run
one at a time setting by setting, and the experiment underneath is on the result. The
table itself is tested in tests/test_evaluate.py and tests/test_evaluate_typed.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from cortex_jupyter import evaluate, open_run, runs
from cortex_jupyter.evaluation import TASKS, EndpointUnusable, conformance_dataset
from tests.models.fake_openai_server import (
    FakeOpenAIServer,
    Stream,
    finish,
    role,
    texts,
    unreachable,
    usage,
)

ADD, SECOND = TASKS[0], TASKS[1]


def reply(text: str) -> Stream:
    return Stream([role(), *texts(text, 9), finish(), usage(100, 10)])


def quiet(done: int, total: int, note: str) -> None:
    pass


def asked(request: object) -> str:
    messages = request.json["messages"]  # type: ignore[attr-defined]
    return str([m for m in messages if m["role"] == "user"][-1]["content"])


def test_tries_run_setting_by_setting_repeat_by_repeat_task_by_task(
    server: FakeOpenAIServer,
) -> None:
    server.script(*(reply("6912") for _ in range(8)))
    result = evaluate("fake-model", ["cortex", "native"], n=2, tasks=[ADD, SECOND], progress=quiet)
    prompts = [asked(r) for r in server.requests]
    natives = ["tools" in r.json for r in server.requests]
    assert prompts == [ADD.prompt, SECOND.prompt] * 4
    assert natives == [False] * 4 + [True] * 4
    assert [(t.dialect, t.task) for t in result.tries] == [
        (dialect, task.name) for dialect in ("cortex", "native") for _ in range(2)
        for task in (ADD, SECOND)
    ]  # fmt: skip


def test_the_experiment_underneath_is_on_the_result(server: FakeOpenAIServer) -> None:
    server.script(reply("The sum is 6912."), reply("no idea"))
    result = evaluate("fake-model", ["cortex", "hermes"], n=1, tasks=[ADD], progress=quiet)
    experiment = result.experiment
    assert experiment.columns == ["cortex", "hermes"]
    frame = experiment.to_pandas()
    assert list(zip(frame.agent, frame.case, frame.passed, strict=True)) == [
        ("cortex", ADD.name, True),
        ("hermes", ADD.name, False),
    ]
    assert {"protocol", "task"} <= set(frame.columns)
    # the table's correct share and the experiment's verdicts agree
    assert [row.correct for row in result.rows] == [1.0, 0.0]
    matrix = experiment.matrix()
    assert (matrix.cases, matrix.agents) == ((ADD.name,), ("cortex", "hermes"))


def test_runs_are_kept_only_when_asked(
    server: FakeOpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    current = tmp_path / "current.db"
    monkeypatch.setenv("CORTEX_STORE", str(current))
    server.script(reply("6912"), reply("6912"), reply("6912"))
    evaluate("fake-model", ["cortex"], n=1, tasks=[ADD], progress=quiet)
    assert not current.exists()  # as before: evaluate() keeps no run by default
    where = tmp_path / "eval.db"
    kept = evaluate("fake-model", ["cortex"], n=1, tasks=[ADD], progress=quiet, store=where)
    (tried,) = kept.experiment.tries
    stored = open_run(tried.run_id, store=where)
    assert (stored.prompt, stored.answer) == (ADD.prompt, "6912")
    # store=True: the current run store
    evaluate("fake-model", ["cortex"], n=1, tasks=[ADD], progress=quiet, store=True)
    assert [run.prompt for run in runs()] == [ADD.prompt]


def test_a_dead_endpoint_leaves_the_rest_of_the_experiment_pending(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = unreachable(monkeypatch)
    with pytest.raises(EndpointUnusable) as caught:
        evaluate("smollm2", ["cortex", "hermes"], n=2, tasks=[ADD], base_url=url, progress=quiet)
    experiment = caught.value.result.experiment
    assert [t.status for t in experiment.tries] == ["interrupted", "pending", "pending", "pending"]
    assert experiment.status == "stopped"
    assert experiment.note.startswith("Cannot connect to 127.0.0.1:")
    assert [row.dialect for row in caught.value.result.rows] == ["cortex"]


def test_the_conformance_dataset_is_a_case_per_task_and_is_not_saved(tmp_path: Path) -> None:
    dataset = conformance_dataset([ADD, SECOND, ADD])
    assert dataset.names == [ADD.name, SECOND.name, f"{ADD.name}#2"]
    assert dataset[ADD.name].prompt == ADD.prompt
    with pytest.raises(ValueError, match=f"the task {ADD.name!r}'s check is code"):
        dataset.save(tmp_path / "tasks.yaml")

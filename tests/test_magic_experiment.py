"""``%cortex experiment DATASET --agents a,b [--repeat N]`` in a real IPython shell (issue
34, item 8): a notebook Dataset or a saved file run by notebook Agents, a model name or
``dialect:model`` with the session's model settings; what cannot be had is one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from cortex_jupyter.experiments.experiment import Experiment
from tests.models.fake_openai_server import FakeOpenAIServer, Stream, finish, texts

DEFINE = """
from cortex_jupyter import Agent, Case, Dataset, expect
from cortex_jupyter.models import ScriptModel

capitals = Dataset(
    [Case("What is the capital of France?", name="france", expect=expect.answer(contains="Paris")),
     Case("What is the capital of Italy?", name="italy", expect=expect.answer(contains="Rome"))],
    name="capitals",
)
right = Agent(model=ScriptModel(
    lambda p: '<response final="true">The capital is '
    + ("Paris" if "France" in p else "Rome") + ".</response>"))
wrong = Agent(model=ScriptModel(lambda p: '<response final="true">Lyon.</response>'))
not_a_dataset = [1, 2, 3]
"""


@pytest.fixture
def shell(ip: InteractiveShell) -> InteractiveShell:
    result = ip.run_cell(DEFINE)
    assert result.success, result.error_in_exec
    return ip


def experiment(ip: InteractiveShell, line: str) -> Experiment:
    found = ip.run_line_magic("cortex", f"experiment {line}")
    assert isinstance(found, Experiment), found
    return found


def outcomes(found: Experiment) -> set[tuple[str, str, int, bool]]:
    return {(t.case, t.agent, t.repeat, t.passed) for t in found.tries}


def test_a_notebook_dataset_run_by_two_notebook_agents_with_repeats(
    shell: InteractiveShell,
) -> None:
    found = experiment(shell, "capitals --agents right,wrong --repeat 2")
    assert found.columns == ["right", "wrong"] and found.name == "capitals"
    assert outcomes(found) == {
        (case, agent, repeat, agent == "right")
        for case in ("france", "italy")
        for agent in ("right", "wrong")
        for repeat in (0, 1)
    }
    assert found.status == "completed" and all(t.run_id for t in found.tries)
    frame = found.to_pandas()
    assert frame.groupby("agent")["passed"].mean().to_dict() == {"right": 1.0, "wrong": 0.0}


def test_a_saved_dataset_file_is_a_dataset(shell: InteractiveShell, tmp_path: Path) -> None:
    path = tmp_path / "capitals.yaml"
    shell.user_ns["capitals"].save(path)
    found = experiment(shell, f"{path} --agents right --name from-file")
    assert found.name == "from-file"
    assert outcomes(found) == {("france", "right", 0, True), ("italy", "right", 0, True)}


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("nowhere --agents right", "no dataset 'nowhere'"),
        ("not_a_dataset --agents right", "not_a_dataset is a list, not a Dataset"),
        ("capitals --agents right,telepathy:gpt-4o", "'telepathy' is not a dialect"),
        ("capitals --agents right,right", "--agents names 'right' twice"),
        ("capitals --agents right --budget lots", "budget"),
        ("capitals --agents right --repeat 0", "repeat"),
    ],
    ids=["missing", "not-a-dataset", "unknown-dialect", "duplicate", "bad-budget", "repeat-0"],
)
def test_what_cannot_be_had_is_one_line(shell: InteractiveShell, line: str, said: str) -> None:
    with pytest.raises(UsageError) as refused:
        shell.run_line_magic("cortex", f"experiment {line}")
    message = str(refused.value)
    assert message.startswith("%cortex experiment: ") and said in message
    assert "\n" not in message and "Traceback" not in message


def reply(text: str) -> Stream:
    return Stream([*texts(text, 7), finish()])


def test_a_dialect_and_model_column_uses_the_sessions_model_settings(
    shell: InteractiveShell, server: FakeOpenAIServer
) -> None:
    shell.run_line_magic("config", "CortexMagics.temperature = 0.25")
    shell.run_line_magic("config", "CortexMagics.request = {'seed': 7}")
    server.script(
        reply("<response>The capital is Paris.</response>"),
        reply("<response>Rome, I think.</response>"),
    )
    found = experiment(shell, "capitals --agents cortex:fake-model --concurrency 1")
    assert found.columns == ["cortex:fake-model"]
    assert outcomes(found) == {
        ("france", "cortex:fake-model", 0, True),
        ("italy", "cortex:fake-model", 0, True),
    }
    sent = [request.json for request in server.requests]
    assert [body["model"] for body in sent] == ["fake-model", "fake-model"]
    # The session's settings: its temperature and extra request fields, and the cortex
    # dialect's system prompt.
    assert all(body["temperature"] == 0.25 and body["seed"] == 7 for body in sent)
    assert all("<action" in body["messages"][0]["content"] for body in sent)

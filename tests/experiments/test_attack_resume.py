"""Two kernels and one experiment: a resume never runs a try that another kernel runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cortex_jupyter.experiments.experiment import Experiment
from cortex_jupyter.models import ScriptModel
from cortex_jupyter.runtime import Agent, Registry
from tests.experiments.test_experiment import CAPITALS, CHILD, ROOT, capital_script


def _agent(calls: list[str]) -> Agent:
    registry = Registry()

    @registry.tool
    def capital(country: str) -> str:
        """The capital."""
        calls.append(country)
        return CAPITALS[country]

    return Agent(model=ScriptModel(capital_script), registry=registry)


def test_an_experiment_running_in_another_kernel_is_not_resumed(tmp_path: Path) -> None:
    log = tmp_path / "calls.txt"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(log)], env=env, cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    calls: list[str] = []
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.strip() == "HOLDING", child.stderr.read() if child.stderr else ""
        # The other kernel is alive, running "spain": resuming here would run it twice.
        with pytest.raises(RuntimeError, match=rf"running in another kernel \(process {child.pid}"):
            Experiment.resume("killed", {"a": _agent(calls)}, progress=False)
        assert calls == []
    finally:
        child.send_signal(signal.SIGKILL)
        child.communicate()
    # Once that kernel is gone, the experiment is resumed, and the resume holds it.
    resumed = Experiment.resume("killed", {"a": _agent(calls)}, progress=False)
    assert calls == ["Spain"] and resumed.status == "completed"


def test_an_experiment_that_failed_is_not_left_running_in_the_store(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from cortex_jupyter.experiments import experiment as module
    from tests.experiments.test_experiment import dataset

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the event loop broke")

    monkeypatch.setattr(module, "drive", broken)
    with pytest.raises(RuntimeError, match="broke"):
        dataset().run({"a": _agent([])}, name="broken", progress=False)
    stored = Experiment.load("broken")
    assert stored.status == "stopped" and "the event loop broke" in (stored.note or "")

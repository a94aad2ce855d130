"""The dialect-conformance dataset: ``evaluate()``'s tasks as an experiment's cases.

Each ``Task`` is one ``Case`` (its prompt, named by the task) holding one expectation,
``TaskCheck``: the task's own check on the answer (a regex, or a function of the text or
of the typed object), passed only by a run that completed and, for a typed task, whose
answer fit its type. The runner adds the always-on ``protocol`` check. A task's check is
code, so this dataset is not saved with an experiment (``to_data`` says so).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from cortex_jupyter.evaluation.tasks import Task
from cortex_jupyter.experiments.cases import Case, Dataset
from cortex_jupyter.experiments.results import Expectation, Verdict
from cortex_jupyter.runtime.core.events import OutputChecked
from cortex_jupyter.runtime.core.trust.secrets import redact, shorten

__all__ = ["TaskCheck", "checked", "conformance_dataset", "task_of"]


def checked(run: Any) -> tuple[bool, int]:
    """(whether the typed answer fit, how many typed answers were checked), from the
    run's ``OutputChecked`` events: the attempt that fit, or the last one tried."""
    checks = [event for event in run.events if isinstance(event, OutputChecked)]
    fit = next((check for check in checks if check.ok), None)
    if fit is not None:
        return True, fit.attempt
    return False, max((check.attempt for check in checks), default=0)


@dataclass(frozen=True)
class TaskCheck(Expectation):
    """The task's own check (``Task.passes``) on a run that completed; a typed task's
    answer must also have fit its type. Not saveable: the check is code."""

    kind = "task"
    task: Task
    name: str | None = None

    def check(self, run: Any) -> Verdict:
        if run.status != "completed":
            return Verdict.of(False, f"the run ended {run.status}")
        if self.task.typed and not checked(run)[0]:
            return Verdict.of(False, "the answer did not fit the task's type")
        try:
            passed = self.task.passes(run.answer, run.output)
        except Exception as exc:  # the user's check failed: said, as a failed check
            return Verdict.of(False, f"the task's check raised {type(exc).__name__}: {exc}",
                              raised=True)  # fmt: skip
        if passed:
            return Verdict.of(True)
        return Verdict.of(False, "wrong answer: " + shorten(redact(run.answer), 80))

    def to_data(self) -> dict[str, Any]:
        raise ValueError(f"the task {self.task.name!r}'s check is code: it cannot be saved")

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> NoReturn:
        raise ValueError("a task's check is code: a saved dataset cannot hold one")


def conformance_dataset(tasks: Sequence[Task], name: str = "conformance") -> Dataset:
    """One case per task, named by the task (a name met again is numbered: ``add#2``),
    expecting the task's check to pass."""
    seen: dict[str, int] = {}
    cases = []
    for task in tasks:
        seen[task.name] = seen.get(task.name, 0) + 1
        named = task.name if seen[task.name] == 1 else f"{task.name}#{seen[task.name]}"
        cases.append(Case(task.prompt, name=named, expect=[TaskCheck(task)]))
    return Dataset(cases, name=name)


def task_of(case: Case) -> Task:
    """The task a case of ``conformance_dataset`` was made from."""
    found = next((item for item in case.expect if isinstance(item, TaskCheck)), None)
    if found is None:
        raise LookupError(f"case {case.name!r} is not a task of the conformance dataset")
    return found.task

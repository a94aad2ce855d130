"""``evaluate()``: which protocol dialect does this model follow, and how well?

A small built-in set of tool tasks (deterministic tools, answers a function or a regex
can check) is run on any OpenAI-compatible endpoint, ``n`` times per task, once for each
dialect (and constraint setting) asked. Every try is an ordinary ``Agent`` run on a fresh
conversation, so what is measured is what a user of that dialect gets; the figures are
read from the run record: its status, its protocol error events, its nodes' statuses,
its usage, and the times of its events (``Turn`` and the first ``chunk`` of a reply).

It is a preset of the experiments (``cortex_jupyter.experiments``): the tasks are the
dialect-conformance dataset (``evaluation.conformance``: a case per task, checked by the
task's own check), each (dialect, constraint) setting is an agent column, and the tries
run one at a time (timings are measured), setting by setting, repeat by repeat, task by
task. Each try's run is then measured into the table's rows (``measure``); the
experiment itself is ``Evaluation.experiment`` (``to_pandas()``, the matrix).

It sits above the runtime, the models and the experiments, like ``session`` does, and
imports no IPython. The tasks are in ``evaluation.tasks``; the result (``Try``, ``Row``,
``Evaluation``: a text table, or an HTML table with a bar chart in a notebook) in
``evaluation.table``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import tqdm.auto  # type: ignore[import-untyped]  # tqdm ships no type hints

from cortex_jupyter.evaluation.conformance import TaskCheck, checked, conformance_dataset, task_of
from cortex_jupyter.evaluation.table import Evaluation, Row, Try
from cortex_jupyter.evaluation.tasks import TASKS, TYPED_TASKS, Task
from cortex_jupyter.experiments import results as _results
from cortex_jupyter.experiments.experiment import run_dataset
from cortex_jupyter.experiments.results import Verdict
from cortex_jupyter.experiments.running import Hooks, Watched
from cortex_jupyter.protocol.events import ActionStart, ResponseDelta, TextDelta
from cortex_jupyter.protocol.events import ThoughtDelta as _ThoughtDelta
from cortex_jupyter.runtime import Agent, Run
from cortex_jupyter.runtime.core.events import Chunk, Turn

__all__ = [
    "DIALECTS",
    "TASKS",
    "TYPED_TASKS",
    "EndpointUnusable",
    "Evaluation",
    "Row",
    "Task",
    "Try",
    "conformance_dataset",
    "evaluate",
    "measure",
    "supports_constrain",
]

#: What ``dialects=`` may name: the text dialects, and ``native`` (the endpoint's own
#: tool calls, ``native_tools=True``, beside the cortex prompt).
DIALECTS = ("cortex", "sigil", "cogency", "hermes", "auto", "native")
_DEFAULT_DIALECTS = ("cortex", "sigil", "cogency", "hermes", "native")
# The first text of a reply, in the run's events (parser events are recorded as they come).
_FIRST_TEXT = (_ThoughtDelta, ResponseDelta, TextDelta, ActionStart)
_CONTENT_CHUNKS = ("text", "reasoning", "refusal", "tool_call_start", "tool_call_ready")
#: The bounds of an evaluation a user need not know about (both overridable, both in the
#: table's caption): most tokens per reply, so a model that never stops (SmolLM2 once
#: wrote 6,500 tokens, four minutes, to the end of its window) cannot hold a try up; and
#: seconds per try (all its turns and actions), after which the try is cut and counted.
MAX_TOKENS = 512
TIME_LIMIT = 120.0
#: ``Try.status`` of a try cut at the time limit.
TIMED_OUT = "timeout"
# Failures of the endpoint itself: every further try would fail the same way.
_FATAL = frozenset(
    ("CannotConnect", "MissingAPIKey", "AuthenticationFailed", "PermissionDenied", "UnknownModel")
)


class EndpointUnusable(RuntimeError):
    """Raised when the endpoint cannot be used at all (unreachable, key refused, no such
    model): the evaluation stops at once. ``result`` holds the tries made before."""

    def __init__(self, message: str, result: Evaluation) -> None:
        self.result = result
        super().__init__(f"evaluate: {message}")


# --------------------------------------------------------------------------- measuring


def measure(
    run: Run, task: Task, dialect: str, constrain: bool, verdict: Verdict | None = None
) -> Try:
    """The ``Try`` a finished run makes, read from its record alone. ``verdict`` is the
    task's check already made on it (``TaskCheck``'s, by the experiment), so a check is
    called once a try; without it the check is made here."""
    nodes = [node for node in run.actions.values() if node.parent is None]
    action_errors = [e for e in run.errors if e.id is not None]
    runnable = bool(nodes) and not action_errors and all(n.status == "done" for n in nodes)
    answer = run.answer
    valid, attempts = checked(run) if task.typed else (None, 0)
    if verdict is None:
        verdict = TaskCheck(task).check(run)
    correct = verdict.passed
    # the user's check failed: say so, keep the rest
    reason = verdict.reason if verdict.details.get("raised") else run.reason
    usage = run.usage
    first, generating = _timings(run)
    return Try(
        task.name, dialect, constrain, run.status, len(nodes), runnable, bool(run.errors),
        correct, answer, usage["completion_tokens"], usage["prompt_tokens"], first,
        generating, run.turns, reason, tool_task=bool(task.tools), valid=valid,
        attempts=attempts, output=run.output,
    )  # fmt: skip


def _timings(run: Run) -> tuple[float | None, float]:
    """(first-token seconds of the first reply, seconds generating over all replies),
    from the run's events: each ``Turn``'s time, and per reply its first content (a
    ``chunk`` event's time, or the time the first parser event was recorded: text
    chunks are coalesced for up to 50 ms, so the earlier of the two) and its last chunk."""
    first_token: float | None = None
    generating = 0.0
    turn = 0
    asked = 0.0
    start: float | None = None
    last: float | None = None
    for event, at in zip(run.events, run.event_times, strict=True):
        if isinstance(event, Turn):
            if start is not None and last is not None:
                generating += max(0.0, last - start)
            turn, asked, start, last = turn + 1, event.time, None, None
            continue
        seen: float | None = None
        if isinstance(event, Chunk):
            last = event.time if last is None else max(last, event.time)
            if event.type in _CONTENT_CHUNKS:
                seen = event.time
        elif isinstance(event, _FIRST_TEXT):
            seen = at
        if turn and seen is not None and (start is None or seen < start):
            start = seen
            if turn == 1:
                first_token = seen - asked
    if start is not None and last is not None:
        generating += max(0.0, last - start)
    return first_token, generating


# --------------------------------------------------------------------------- running


def supports_constrain() -> bool:
    """Whether this cortex_jupyter's ``Agent`` takes ``constrain=`` (constrained decoding)."""
    return any(f.name == "constrain" for f in dataclasses.fields(Agent))


def _settings(dialects: Iterable[str], constrain: bool | Sequence[bool]) -> list[tuple[str, bool]]:
    if isinstance(dialects, str):
        dialects = [d.strip() for d in dialects.split(",") if d.strip()]
    chosen = [d.lower() for d in dialects]
    unknown = [d for d in chosen if d not in DIALECTS]
    if unknown or not chosen:
        raise ValueError(
            f"evaluate: unknown dialect {', '.join(map(repr, unknown)) or '(none given)'}; "
            f"choose from {', '.join(DIALECTS)}"
        )
    flags = [bool(constrain)] if isinstance(constrain, bool) else [bool(c) for c in constrain]
    if True in flags and not supports_constrain():
        raise ValueError(
            "evaluate: constrain=True needs constrained decoding (Agent(constrain=...)), "
            "which this cortex_jupyter does not have yet; use constrain=False"
        )
    return [(d, c) for d in dict.fromkeys(chosen) for c in dict.fromkeys(flags)]


def _model(model: Any, base_url: str | None, api_key: str | None) -> Any:
    if not isinstance(model, str):
        if not hasattr(model, "stream"):
            raise TypeError(
                f"evaluate: model must be a model name or a model object; got {model!r}"
            )
        if base_url is not None or api_key is not None:
            raise ValueError(
                "evaluate: base_url and api_key go with a model name; a model object "
                "already has its endpoint"
            )
        return model
    from cortex_jupyter.models import ModelError, OpenAIModel

    try:
        return OpenAIModel(model, base_url=base_url, api_key=api_key, max_retries=0)
    except (ModelError, ValueError) as exc:
        raise ValueError(f"evaluate: {exc}") from None


def _agent(
    model: Any, task: Task, dialect: str, constrain: bool, options: Mapping[str, Any]
) -> Agent:
    settings: dict[str, Any] = {
        "model": model,
        "registry": task.registry(),
        "dialect": "cortex" if dialect == "native" else dialect,
        "native_tools": dialect == "native",
        **options,
    }
    if supports_constrain():
        settings["constrain"] = constrain
    if task.typed:
        settings["output_type"] = task.output_type
    return Agent(**settings)


class _Bar:
    """The default progress: tqdm's bar with the time left (a widget in a notebook, text
    on stderr in a terminal)."""

    def __init__(self, total: int) -> None:
        self._bar = tqdm.auto.tqdm(total=total, desc="evaluate", unit="try", dynamic_ncols=True)

    def __call__(self, done: int, total: int, note: str) -> None:
        self._bar.set_postfix_str(note, refresh=False)
        self._bar.update(done - self._bar.n)

    def close(self) -> None:
        self._bar.close()


def _whole(value: Any) -> int | None:
    """``value`` as a Python int when it is a whole number (numpy's too), else None."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        return None
    return int(value)


def _bounds(max_tokens: Any, time_limit: Any) -> tuple[int | None, float | None]:
    """The bounds as Python numbers (numpy's are numbers too), or a one-line refusal."""
    tokens = _whole(max_tokens)
    if max_tokens is not None and (tokens is None or tokens < 1):
        raise ValueError(
            f"evaluate: max_tokens must be a whole number, at least 1, or None; got {max_tokens!r}"
        )
    seconds = None
    if time_limit is not None and not isinstance(time_limit, bool):
        with contextlib.suppress(TypeError, ValueError, OverflowError):
            seconds = float(time_limit) if isinstance(time_limit, numbers.Real) else None
    if time_limit is not None and (seconds is None or not math.isfinite(seconds) or seconds <= 0):
        raise ValueError(
            f"evaluate: time_limit must be a number of seconds above 0, or None; got {time_limit!r}"
        )
    return tokens, seconds


def evaluate(
    model: Any,
    dialects: Iterable[str] | str = _DEFAULT_DIALECTS,
    n: int = 3,
    tasks: Sequence[Task] | None = None,
    constrain: bool | Sequence[bool] = False,
    base_url: str | None = None,
    api_key: str | None = None,
    *,
    max_turns: int = 4,
    max_tokens: int | None = MAX_TOKENS,
    time_limit: float | None = TIME_LIMIT,
    temperature: float | None = None,
    options: Mapping[str, Any] | None = None,
    progress: Callable[[int, int, str], None] | bool | None = None,
    store: Any = None,
) -> Evaluation:
    """Run each task ``n`` times in each dialect (and constraint setting) and sum up.

    ``model`` is a model name on the OpenAI-compatible endpoint at ``base_url`` (default
    ``OPENAI_BASE_URL``) with ``api_key`` (default ``OPENAI_API_KEY``), or any model
    object (a ``ScriptModel`` starts its script again for each try). ``dialects`` are
    names from ``DIALECTS`` (``"native"``: the endpoint's own tool calls). ``tasks``
    default to ``TASKS`` and then ``TYPED_TASKS`` (answers typed with ``output_type``:
    their rows' ``valid`` share says how many fit the type). ``constrain`` is a bool or
    both (``(False, True)``): one row per setting; a model that takes no grammar gives an
    unconstrained row saying so.
    Each reply is bounded to ``max_tokens`` (512) and each try to ``time_limit`` seconds
    (120; a try cut there counts as ``timeout``); ``None`` lifts a bound. The table's
    caption shows both. ``options`` are further ``Agent`` settings. ``progress`` is
    called after each try with (done, total, note); by default a bar shows how far it got
    and the time left (``False``: silent). ``store`` keeps every try's run (a store's
    path or a ``Store``; ``True``: the current run store); by default none is kept.
    An endpoint that cannot be used at all raises ``EndpointUnusable`` with one line,
    its ``result`` holding what was done before.

    It runs the conformance dataset (``conformance_dataset(tasks)``) as an experiment,
    one agent column per setting: ``Evaluation.experiment`` is that ``Experiment``
    (``to_pandas()``, its matrix).
    """
    tries = _whole(n)
    if tries is None or tries < 1:
        raise ValueError(f"evaluate: n must be a whole number, at least 1; got {n!r}")
    chosen = list((*TASKS, *TYPED_TASKS) if tasks is None else tasks)
    if not chosen or not all(isinstance(t, Task) for t in chosen):
        raise TypeError("evaluate: tasks must be a non-empty list of cortex_jupyter.Task")
    settings = _settings(dialects, constrain)
    used = _model(model, base_url, api_key)
    extra: dict[str, Any] = {
        "max_turns": _whole(max_turns) or max_turns, "temperature": temperature
    }  # fmt: skip
    extra.update(options or {})
    # options= may carry max_tokens too
    extra["max_tokens"], time_limit = _bounds(extra.get("max_tokens", max_tokens), time_limit)
    name = str(getattr(used, "name", "model"))
    result = Evaluation(
        name, len(chosen), tries, max_tokens=extra["max_tokens"], time_limit=time_limit
    )
    preset = _Preset(result, conformance_dataset(chosen), settings)
    preset.agents(used, extra)
    bar = _Bar(preset.total) if progress is None or progress is True else None
    preset.report = bar if bar is not None or isinstance(progress, bool) else progress
    try:
        if preset.columns:
            result.experiment = run_dataset(
                preset.dataset, preset.columns, repeat=tries, concurrency=1,
                name=f"evaluate {name}", store=_store(store), time_limit=time_limit,
                progress=False, view=False, order="agent", hooks=preset.hooks(),
            )  # fmt: skip
    finally:
        if bar is not None:
            bar.close()
    preset.rows()
    if preset.fatal is not None:
        raise EndpointUnusable(preset.fatal, result)
    return result


def _store(store: Any) -> Any:
    if store is not True:
        return None if store is False else store
    from cortex_jupyter.store import current_path

    where = current_path()
    if where is None:
        raise ValueError("evaluate: store=True, but the run store is off (CortexMagics.store)")
    return where


_Setting = tuple[str, bool]


class _Preset:
    """One ``evaluate()`` as an experiment: a column per setting, an agent per (task,
    setting), and the hooks that measure each try into the table as it ends and stop
    everything at a failure of the endpoint itself."""

    def __init__(self, result: Evaluation, dataset: Any, settings: list[_Setting]) -> None:
        self.result = result
        self.dataset = dataset
        self.settings = settings
        self.columns: dict[str, Agent] = {}
        self.setting_of: dict[str, _Setting] = {}
        self.notes: dict[_Setting, str] = {}
        self.per_case: dict[tuple[str, str], Agent] = {}
        self.tries: dict[_Setting, list[Try]] = {setting: [] for setting in settings}
        self.constrained: dict[tuple[str, str, int], bool] = {}
        self.fatal: str | None = None
        self.report: Callable[[int, int, str], None] | None = None

    @property
    def total(self) -> int:
        return len(self.settings) * len(self.dataset) * self.result.n

    def agents(self, model: Any, extra: Mapping[str, Any]) -> None:
        """The column of each setting the ``Agent`` takes (a refused one is a noted row)."""
        for dialect, constrained in self.settings:
            column = dialect + (" constrained" if constrained else "")
            try:
                made = {
                    case.name: _agent(model, task_of(case), dialect, constrained, extra)
                    for case in self.dataset
                }
            except (TypeError, ValueError) as exc:
                self.notes[(dialect, constrained)] = str(exc)
                continue
            self.columns[column] = next(iter(made.values()))
            self.setting_of[column] = (dialect, constrained)
            self.per_case.update({(case, column): agent for case, agent in made.items()})

    def hooks(self) -> Hooks:
        return Hooks(
            agent_for=lambda case, column: self.per_case[(case, column)],
            stop_when=self.stop_when,
            ended=self.ended,
        )

    def stop_when(self, tried: _results.Try, watched: Watched) -> str | None:
        """Keep whether a grammar went out; a failure of the endpoint itself stops it all."""
        self.constrained[tried.key] = watched.constrained
        if type(watched.failure).__name__ in _FATAL:
            self.fatal = str(watched.failure)
            return self.fatal
        return None

    def ended(self, tried: _results.Try) -> None:
        """The experiment's try measured into the table's ``Try``, and the progress."""
        setting = self.setting_of[tried.agent]
        task = task_of(self.dataset[tried.case])
        run = tried.run
        if run is None:  # it could not run at all: the runtime failed
            run = Run()
            run.status, run.reason = tried.status, tried.error
        constrained = self.constrained.get(tried.key, False)
        measured = measure(run, task, setting[0], constrained, tried.verdicts.get("task"))
        self.tries[setting].append(measured)
        self.result.tries.append(measured)
        if self.report is not None and self.fatal is None:
            note = _progress_note(*setting, self.tries[setting])
            self.report(len(self.result.tries), self.total, note)

    def rows(self) -> None:
        """A row per setting, in order, up to the one a fatal failure (or a Stop: the
        tries that ended are kept) stopped in."""
        last = self.result.tries[-1] if self.result.tries else None
        for setting in self.settings:
            if setting in self.notes:
                self.result.rows.append(Row.of(*setting, [], note=self.notes[setting]))
                continue
            tried = self.tries[setting]
            if not tried:  # never reached: stopped (an unusable endpoint, a Stop) before it
                break
            self.result.rows.append(Row.of(*setting, tried))
            if self.fatal is not None and any(t is last for t in tried):
                break


def _progress_note(dialect: str, constrained: bool, tries: Sequence[Try]) -> str:
    """``cortex constrained: 7/10 runnable, 2/2 valid``: the setting's tries so far."""
    tooled = [t for t in tries if t.tool_task]
    typed = [t for t in tries if t.valid is not None]
    counts = [f"{sum(t.runnable for t in tooled)}/{len(tooled)} runnable"] if tooled else []
    if typed:
        counts.append(f"{sum(bool(t.valid) for t in typed)}/{len(typed)} valid")
    return dialect + (" constrained" if constrained else "") + ": " + ", ".join(counts)

"""``Experiment``: a dataset's cases run by one or more agents, judged, kept, compared.

An experiment is a view over ordinary runs plus their scores (STYLE.md, fifth round):
``dataset.run(agents)`` makes one try per (case, agent column, repeat), each an
``Agent.run`` kept in the run store under the experiment's id (``store.experiments``);
the results are read back as ``Try`` rows, so ``rescore`` is reading, ``compare`` is two
experiments' rows side by side, and ``Experiment.resume(id)`` runs only the tries that
never ended (a killed kernel loses only those that were running).
"""

from __future__ import annotations

import contextlib
import math
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from cortex_jupyter.experiments import report as _report
from cortex_jupyter.experiments.results import Expectation, JudgeContext, Try, Verdict
from cortex_jupyter.experiments.running import Hooks, Plan, drive, judge, try_row
from cortex_jupyter.experiments.schedule import Allowance, Gates
from cortex_jupyter.runtime import Agent
from cortex_jupyter.runtime.core.cost.budget import Budget
from cortex_jupyter.runtime.core.trust.secrets import redact, shorten

if TYPE_CHECKING:
    from cortex_jupyter.experiments.cases import Case, Dataset
    from cortex_jupyter.store.experiments import StoredExperiment, TryRow

__all__ = ["Experiment", "run_dataset", "try_row"]

_KEEP = object()
_Expectations = (
    Sequence[Expectation] | Mapping[str, Sequence[Expectation]] | None
)  # store=: the current run store (CortexMagics.store / CORTEX_STORE)


def _from_row(row: TryRow) -> Try:
    verdicts = {
        label: Verdict(
            bool(v.get("passed")),
            float(v.get("score", 0.0)),
            str(v.get("reason", "")),
            v.get("details") or {},
        )
        for label, v in row.verdicts.items()
        if isinstance(v, Mapping)
    }
    return Try(
        row.case, row.agent, int(row.repeat), row.run_id, row.status, verdicts, row.cost,
        int(row.tokens or 0), row.seconds, row.first_action, row.error,
    )  # fmt: skip


class Experiment:
    """A dataset's tries by each agent column (see the module docstring).

    ``tries`` are its ``Try`` rows (case, agent, repeat, run_id, status, verdicts...);
    ``to_pandas()`` makes a DataFrame of them; ``matrix()`` the cases-by-agents view a
    notebook shows; ``compare(baseline)``, ``rescore(expectations)`` and
    ``assert_passes(...)`` are read from them, never by asking a model again.
    """

    def __init__(
        self,
        experiment_id: str,
        name: str,
        dataset: Dataset,
        agents: Mapping[str, Agent] | Sequence[str],
        repeat: int,
        tries: list[Try],
        *,
        store: str | None = None,
        created: float | None = None,
        status: str = "running",
        note: str | None = None,
    ) -> None:
        self.id = experiment_id
        self.name = name
        self.dataset = dataset
        self.agents: dict[str, Agent | None] = (
            dict(agents) if isinstance(agents, Mapping) else dict.fromkeys(agents)
        )
        self.repeat = repeat
        self.tries = tries
        self.store = store
        self.created = time.time() if created is None else created
        self.status = status
        self.note = note
        self.judge_spend: list[tuple[dict[str, int], float | None]] = []

    # ---- what it shows -----------------------------------------------------------

    @property
    def columns(self) -> list[str]:
        return list(self.agents)

    @property
    def labels(self) -> list[str]:
        """Every expectation label its tries were judged on, in first-seen order."""
        seen: dict[str, None] = {}
        for tried in self.tries:
            seen.update(dict.fromkeys(tried.verdicts))
        return list(seen)

    def matrix(self, baseline: Experiment | None = None) -> Any:
        cases = self.dataset.names
        title = f"experiment {self.name} ({self.id})"
        if baseline is None:
            return _report.matrix(title, self.tries, cases, self.columns)
        return _report.compare(self.tries, baseline.tries).matrix

    def to_pandas(self) -> Any:
        """One row a try: ``case``, ``agent``, ``repeat``, ``passed``, ``score``, one column
        per expectation (its score), ``cost``, ``tokens``, ``seconds``, ``run_id``..."""
        import pandas as pd  # type: ignore[import-untyped]  # users bring pandas

        return pd.DataFrame(_report.rows(self.tries, self.labels))

    def assert_passes(
        self,
        min_rate: float = 1.0,
        per_case: float | None = None,
        agents: Iterable[str] | None = None,
    ) -> None:
        """Raise ``AssertionError`` listing the failing cases and why, unless each agent's
        pass rate is at least ``min_rate`` (and each case's, when ``per_case``)."""
        for label, value in (("min_rate", min_rate), ("per_case", per_case)):
            if label == "per_case" and value is None:
                continue
            # NaN compares false with every rate: the assertion held whatever failed.
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
                raise ValueError(f"{label} is a fraction from 0 to 1; got {value!r:.40}")
        if isinstance(agents, str):  # one agent, not its letters
            agents = [agents]
        message = _report.failures_message(
            self.tries, min_rate=min_rate, per_case=per_case,
            agents=None if agents is None else list(agents),
        )  # fmt: skip
        if message is not None:
            raise AssertionError(f"experiment {self.name} ({self.id}): {message}")

    def compare(self, baseline: Experiment | str = "last") -> Any:
        """What changed from ``baseline`` (an experiment, its id or name, or ``"last"``: the
        newest stored experiment made before this one): ``.regressed`` and ``.improved``
        are (case, agent) pairs; it shows as the matrix with the changes marked."""
        if isinstance(baseline, str):
            baseline = self._stored(baseline)
        return _report.compare(self.tries, baseline.tries)

    def _stored(self, given: str) -> Experiment:
        rows = self._rows()
        found = rows.find("last", before=self.created) if given == "last" else rows.find(given)
        return Experiment.load(found, store=self.store)

    def _rows(self) -> Any:
        from cortex_jupyter.store import current_path
        from cortex_jupyter.store.experiments import ExperimentRows

        where = self.store or current_path()
        if where is None:
            raise ValueError(
                "the run store is off (CortexMagics.store is None): no stored experiment"
            )
        return ExperimentRows(where)

    def open(self, case: str, agent: str, repeat: int = 0) -> Any:
        """The run of one try: the live record while this process holds it, else the stored
        one (``open_run``)."""
        for tried in self.tries:
            if tried.key == (case, agent, repeat):
                if tried.run is not None:
                    return tried.run
                if tried.run_id is None:
                    raise LookupError(f"try {tried.key} never ran: {tried.error or tried.status}")
                from cortex_jupyter.store import open_run

                return open_run(tried.run_id, store=self.store)
        raise LookupError(f"no try ({case!r}, {agent!r}, {repeat}) in experiment {self.name}")

    def rescore(
        self, expectations: _Expectations = None,
        *, judge_model: Any = None,
    ) -> Experiment:  # fmt: skip
        """The same tries judged again, without asking the agents' models anything: each
        try's run is read (from this process or the store) and judged on ``expectations``
        (a list for every case, a mapping of case name to list, or None: the cases' own,
        as the dataset now has them). Returns a new ``Experiment`` (the stored one keeps
        its verdicts)."""
        import anyio.from_thread

        fresh = Experiment(
            self.id, self.name, self.dataset, list(self.agents), self.repeat, [],
            store=self.store, created=self.created, status=self.status, note="rescored",
        )  # fmt: skip
        cases = dict(zip(self.dataset.names, self.dataset.cases, strict=True))
        with anyio.from_thread.start_blocking_portal() as portal:
            for tried in self.tries:
                again = Try(tried.case, tried.agent, tried.repeat, tried.run_id, tried.status,
                            {}, tried.cost, tried.tokens, tried.seconds, tried.first_action,
                            tried.error, tried.run)  # fmt: skip
                fresh.tries.append(again)
                if tried.run_id is None and tried.run is None:
                    continue
                case = cases.get(tried.case)
                chosen = _chosen(expectations, tried.case, case)
                try:
                    run = self.open(*tried.key)
                except LookupError as exc:  # its run never reached the store (a kill
                    # between the try's row and the writer), or another store was given
                    again.error = shorten(redact(f"its run cannot be read: {exc}"), 300)
                    continue
                context = JudgeContext(case, judge_model, fresh.judge_spend)
                again.verdicts = portal.call(judge, run, chosen, context)
        return fresh

    def __repr__(self) -> str:
        from cortex_jupyter.display.matrix import matrix_text

        return str(matrix_text(self.matrix()))

    def _repr_html_(self) -> str:
        from cortex_jupyter.display.matrix import matrix_html

        return str(matrix_html(self.matrix()))

    # ---- made again from the store ----------------------------------------------

    @classmethod
    def load(
        cls, given: str, *, store: str | None = None, dataset: Dataset | None = None
    ) -> Experiment:
        """The stored experiment ``given`` (id, start of one, name, or ``"last"``), read
        only: its tries and verdicts (to compare, rescore, show)."""
        stored = _rows_at(store).load(given)
        return cls._of(stored, store, dataset, None)

    @classmethod
    def _of(
        cls, stored: StoredExperiment, store: str | None, dataset: Dataset | None,
        agents: Mapping[str, Agent] | None,
    ) -> Experiment:  # fmt: skip
        from cortex_jupyter.experiments.cases import Dataset

        if dataset is None:
            if stored.dataset is None:
                names = sorted({row.case for row in stored.tries})
                from cortex_jupyter.experiments.cases import Case

                dataset = Dataset([Case(f"(case {n} was not saved)", name=n) for n in names])
            else:
                dataset = Dataset.from_data(stored.dataset)
        columns: Mapping[str, Agent] | list[str] = (
            agents if agents is not None else list(stored.agents)
        )
        tries = [_from_row(row) for row in stored.tries]
        if agents is not None:  # resuming: every try of the grid, those that ended as kept
            kept = {t.key: t for t in tries}
            grid = [(case, column, r) for r in range(stored.repeat)
                    for case in dataset.names for column in agents]  # fmt: skip
            tries = [kept.pop(key) if key in kept else Try(*key) for key in grid]
            tries += kept.values()
        return cls(stored.id, stored.name, dataset, columns, stored.repeat, tries, store=store,
                   created=stored.created, status=stored.status, note=stored.note)  # fmt: skip

    @classmethod
    def resume(
        cls,
        given: str,
        agents: Mapping[str, Agent] | None = None,
        *,
        dataset: Dataset | None = None,
        store: str | None = None,
        force: bool = False,
        **options: Any,
    ) -> Experiment:
        """Go on with the stored experiment ``given`` where it stopped: its ended tries are
        kept (never run again) and the rest are run. ``agents`` are the columns' agents
        (needed unless each column was a named ``Agent`` this session has registered);
        ``dataset`` the cases (by default the saved copy); ``options`` as ``Dataset.run``.
        One still running in another kernel is refused (``ExperimentTaken``): its tries
        would run twice; ``force=True`` takes over one marked running on another machine."""
        rows = _rows_at(store)
        stored = rows.load(given)
        if dataset is None and stored.dataset is None:
            # Its cases are known only by name: the tries left would ask the agent a
            # stand-in prompt, judged on nothing, and cases with no ended try are lost.
            raise ValueError(
                f"experiment {stored.name} ({stored.id}): its dataset was not saved (an "
                "expectation holds a function): give it again, Experiment.resume("
                f"{stored.id!r}, agents={{...}}, dataset=...)"
            )
        columns = _columns(stored, agents)
        experiment = cls._of(stored, store, dataset, columns)
        rows.take(stored.id, force=force)
        return _go(experiment, rows, options)


def _rows_at(store: str | None) -> Any:
    from cortex_jupyter.store import current_path
    from cortex_jupyter.store.experiments import ExperimentRows

    where = store or current_path()
    if where is None:
        raise ValueError(
            "the run store is off (CortexMagics.store is None): experiments are not kept"
        )
    return ExperimentRows(where)


def _chosen(
    expectations: _Expectations,
    name: str, case: Case | None,
) -> Sequence[Expectation]:  # fmt: skip
    if expectations is None:
        return () if case is None else case.expect
    if isinstance(expectations, Mapping):
        return expectations.get(name, ())
    return expectations


def _columns(stored: StoredExperiment, agents: Mapping[str, Agent] | None) -> dict[str, Agent]:
    from cortex_jupyter.runtime import default_registry

    found: dict[str, Agent] = {}
    missing = []
    for column, settings in stored.agents.items():
        if agents is not None and column in agents:
            found[column] = agents[column]
            continue
        named = str(settings.get("agent") or "")
        known = bool(named) and named in default_registry.names("agent")
        spec = default_registry.get("agent", named) if known else None
        agent = getattr(spec, "agent", None)
        if isinstance(agent, Agent):
            found[column] = agent
        else:
            missing.append(column)
    if missing:
        raise ValueError(
            f"experiment {stored.name} ({stored.id}): give the agent of column "
            f"{', '.join(map(repr, missing))}: Experiment.resume({stored.id!r}, agents={{...}})"
        )
    return found


def run_dataset(
    dataset: Dataset,
    agents: Mapping[str, Agent] | Agent,
    *,
    repeat: int = 1,
    concurrency: int | Mapping[str, int] | None = None,
    budget: Any = None,
    executor: Any = None,
    name: str | None = None,
    store: Any = _KEEP,
    judge: Any = None,
    judge_budget: Any = None,
    time_limit: float | None = None,
    progress: bool = True,
    view: bool | None = None,
    order: str = "repeat",
    hooks: Hooks | None = None,
) -> Experiment:
    """``Dataset.run``: see its docstring. ``order`` is the order the tries start in:
    ``"repeat"`` (every case by every agent, then again) or ``"agent"`` (one column's
    tries, repeat by repeat, before the next column's). ``hooks`` (``running.Hooks``) is
    what a preset such as ``evaluate()`` changes: a per-case agent, a stop, a callback."""
    columns = _agents(agents)
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise ValueError(f"repeat must be a whole number, at least 1; got {repeat!r}")
    if order not in ("repeat", "agent"):
        raise ValueError(f"order is 'repeat' or 'agent'; got {order!r}")
    Allowance.of(budget)  # a bad budget is refused before anything runs
    Budget.parse(judge_budget)
    where = _store_path(store)
    experiment_id = uuid.uuid4().hex[:12]
    name = name or dataset.name or "experiment"
    tries = [Try(case, column, r) for r in range(repeat) for case in dataset.names
             for column in columns]  # fmt: skip
    if order == "agent":
        tries = [Try(case, column, r) for column in columns for r in range(repeat)
                 for case in dataset.names]  # fmt: skip
    experiment = Experiment(experiment_id, name, dataset, columns, repeat, tries, store=where)
    rows = None
    if where is not None:
        from cortex_jupyter.store.experiments import ExperimentRows

        rows = ExperimentRows(where)
        rows.create(experiment_id, name, repeat, _saved(dataset), {
            column: {**agent.settings(), "model": getattr(agent.model, "name", None)}
            for column, agent in columns.items()
        })  # fmt: skip
    options = {
        "concurrency": concurrency, "budget": budget, "executor": executor, "judge": judge,
        "judge_budget": judge_budget, "time_limit": time_limit, "progress": progress,
        "view": view,
    }  # fmt: skip
    return _go(experiment, rows, options, hooks or Hooks())


def _go(
    experiment: Experiment, rows: Any, options: Mapping[str, Any], hooks: Hooks | None = None
) -> Experiment:
    from cortex_jupyter.experiments.live import Watching

    unknown = set(options) - {"concurrency", "budget", "executor", "judge", "judge_budget",
                              "time_limit", "progress", "view"}  # fmt: skip
    if unknown:
        raise TypeError(f"unknown option {', '.join(sorted(unknown))}")
    concurrency = options.get("concurrency")
    gates = Gates(dict(concurrency) if isinstance(concurrency, Mapping) else concurrency)
    store = None
    if experiment.store is not None:
        from cortex_jupyter.store import open_store

        store = open_store(experiment.store)
    runner = None
    if options.get("executor") is not None:
        from cortex_jupyter.experiments.cluster import ClusterRunner

        runner = ClusterRunner(options["executor"])
    plan = Plan(
        experiment.id, dict(zip(experiment.dataset.names, experiment.dataset.cases, strict=True)),
        {k: v for k, v in experiment.agents.items() if v is not None}, experiment.tries, gates,
        Allowance.of(options.get("budget")), store=store, rows=rows,
        judge_model=options.get("judge"), judge_budget=Budget.parse(options.get("judge_budget")),
        time_limit=_limit(options.get("time_limit")), runner=runner,
        judge_spend=experiment.judge_spend, hooks=hooks or Hooks(),
    )  # fmt: skip
    watching = Watching(
        experiment, progress=options.get("progress", True), view=options.get("view")
    )
    on_try: Callable[[Try], None] = watching.ended
    if plan.hooks.ended is not None:
        on_try = _both(watching.ended, plan.hooks.ended)
    try:
        stopped = drive(plan, on_try, watching.idle)
    except BaseException as exc:  # not left "running" in the store: nothing runs it now
        if rows is not None:
            with contextlib.suppress(Exception):
                why = shorten(redact(f"{type(exc).__name__}: {exc}"), 200)
                rows.status(experiment.id, "stopped", f"the experiment failed: {why}")
        raise
    finally:
        watching.close()
        if runner is not None:
            runner.close()
        if store is not None:
            store.flush()
    pending = [t for t in experiment.tries if not t.done]
    experiment.status = "stopped" if stopped or pending else "completed"
    experiment.note = stopped or plan.stopped or plan.allowance.stopped or None
    if rows is not None:
        rows.status(experiment.id, experiment.status, experiment.note)
    return experiment


def _both(first: Callable[[Try], None], then: Callable[[Try], None]) -> Callable[[Try], None]:
    def ended(tried: Try) -> None:
        first(tried)
        then(tried)

    return ended


def _limit(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"time_limit must be a number of seconds above 0, or None; got {value!r}")
    return float(value) if math.isfinite(value) else None


def _agents(agents: Mapping[str, Agent] | Agent) -> dict[str, Agent]:
    if isinstance(agents, Agent):
        return {agents.name or getattr(agents.model, "name", None) or "agent": agents}
    if not isinstance(agents, Mapping) or not agents:
        raise TypeError(
            "agents must be an Agent, or a mapping of column name to Agent "
            f"({{'gpt': agent, 'local': agent.with_options(...)}}); got {shorten(repr(agents), 80)}"
        )
    for column, agent in agents.items():
        if not isinstance(column, str) or not column.strip():
            raise TypeError(f"a column name is a non-empty string; got {column!r}")
        if not isinstance(agent, Agent):
            raise TypeError(f"column {column!r} is not an Agent: {shorten(repr(agent), 80)}")
        if agent.model is None:
            raise ValueError(f"column {column!r}: the agent has no model (Agent(model=...))")
    return dict(agents)


def _store_path(store: Any) -> str | None:
    from cortex_jupyter.store import current_path, open_store

    if store is _KEEP:
        where = current_path()
    elif store is None:
        return None
    else:
        where = getattr(store, "path", None) or str(store)
    if where is not None:
        where = open_store(where).path  # made (and checked) now, not at the first try
    return where


def _saved(dataset: Dataset) -> dict[str, Any] | None:
    """The dataset as plain data, or None when it cannot be saved (a function in it)."""
    try:
        return dict(dataset.to_data())
    except (ValueError, TypeError):
        return None

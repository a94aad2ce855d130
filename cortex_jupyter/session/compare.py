"""``%%cortex --compare a,b,c``: one prompt by several columns at once, side by side.

Each name is a model, ``dialect:model``, a registered agent or a notebook ``Agent``
(``experiments.columns`` decides, as for ``%cortex experiment --agents``). The cell's
other options (``--output T``, ``--constrain``, ``--budget``, ``--max-turns``...) apply to
every column. All columns run in one bridge job, each its own ``agent.run`` in one task
group, so their streams interleave; a ``--repeat N`` column runs N times one after
another. Its own module, called once by the session's coordinator (STYLE.md).

What a comparison keeps to:

- **Names.** ``_compare`` is the ``Comparison``: column name -> ``Column`` with ``.run``
  (its last run), ``.runs`` (all of ``--repeat``), ``.output`` and ``.answer``. A
  column's ``output_key`` values stay on its run's ``variables``: nothing is bound over a
  notebook name, and ``_cortex`` stays the last ordinary cell's run.
- **Failure and Stop.** A column's failure is that column's run ``failed``; the others
  go on. Stop cancels every column.
- **Budget.** ``--budget`` holds for each run of each column (its own spend): a cell
  spends at most columns × repeats × budget. ``--compare-budget`` is split evenly into
  each run's budget (``budget_share``; the smaller of it and ``--budget``), so the cell's
  runs together spend at most it.
- **Diff and keep.** The views show the diff of the columns (``display.compare_diff``);
  a column's keep button (and ``%cortex keep``) makes its run a test case
  (``session.keep``).
- **Store and trace.** Each run is stored with ``compare`` (the comparison's id),
  ``column`` and ``repeat`` among its options; traced as its own ``invoke_agent`` span
  under one ``compare`` span for the cell.
- **Conversation.** Each run is a conversation of its own: a comparison neither reads
  nor extends the notebook's.
- **Approvals.** A column's view asks as a single run's does; ``--text`` cannot ask while
  the columns run, so an action that waits for "ask" approval is denied there.
"""

from __future__ import annotations

import dataclasses
import sys
import time
import uuid
from collections import ChainMap
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from cortex_jupyter import store
from cortex_jupyter._bridge import Bridge, Emit
from cortex_jupyter.display.compare import ColumnFacts, answer_groups, facts
from cortex_jupyter.runtime import Agent, RunHooks
from cortex_jupyter.runtime.core.cost.budget import Budget
from cortex_jupyter.runtime.core.errors import BadOutputType
from cortex_jupyter.runtime.core.record.observer import Recording
from cortex_jupyter.runtime.core.trust.scope import Scope
from cortex_jupyter.runtime.core.trust.secrets import redact, redact_value
from cortex_jupyter.runtime.core.values.typed import OutputType, type_from_text
from cortex_jupyter.runtime.integrations.tracing import group_span
from cortex_jupyter.runtime.loop.conversation import Conversation
from cortex_jupyter.session.cell import CellOptions, cell_model, model_name
from cortex_jupyter.session.compare_views import CompareText, CompareWidgets
from cortex_jupyter.session.experiments import ExperimentRefused, columns
from cortex_jupyter.session.notebook import Session
from cortex_jupyter.session.record import (
    CortexInterrupt,
    CortexRunError,
    NotebookRun,
    failure_line,
    say,
)
from cortex_jupyter.session.views import CellView, close_quietly, close_view

__all__ = [
    "COMPARE_VARIABLE",
    "Column",
    "Comparison",
    "comparison",
    "run_compare",
    "run_compare_async",
]

#: A column's options, from the words ``experiments.columns`` gives it (``--model M``...).
ColumnOptions = Callable[[str], CellOptions]
#: The notebook name a comparison is bound to.
COMPARE_VARIABLE = "_compare"


@dataclass
class Column:
    """One column of a comparison: its agent, and its runs as they come."""

    name: str
    agent: Agent
    options: CellOptions
    runs: list[NotebookRun] = field(default_factory=list)
    repeats: int = 1
    #: Where each run is being kept (None: not stored).
    recordings: list[Recording | None] = field(default_factory=list, repr=False)

    @property
    def model(self) -> str:
        return model_name(self.agent)

    @property
    def run(self) -> NotebookRun | None:
        """The column's latest run (None before it starts)."""
        return self.runs[-1] if self.runs else None

    @property
    def output(self) -> Any:
        """The latest run's output (the validated object under ``--output T``)."""
        return None if self.run is None else self.run.output

    @property
    def answer(self) -> str:
        return "" if self.run is None else self.run.answer

    @property
    def groups(self) -> list[tuple[int, str]]:
        """Its runs' identical answers counted (``--repeat``), the commonest first."""
        return answer_groups([run.answer for run in self.runs if run.status == "completed"])

    def facts(self, index: int | None = None, state: Any = None) -> ColumnFacts:
        """What its header says of its latest run (or of run ``index``); ``state`` is
        that run's live view state, when there is one (``display.compare.facts``)."""
        if not self.runs:
            return ColumnFacts(self.name, self.model, "waiting", None, None, None, None,
                               1, self.repeats)  # fmt: skip
        at = len(self.runs) - 1 if index is None else index
        run = self.runs[at]
        return facts(self.name, run, self.model, at + 1, self.repeats, state)

    def __repr__(self) -> str:
        status = "waiting" if self.run is None else self.run.status
        # Shown in a cell's output and saved with the notebook: a name may be a key.
        return redact(f"<column {self.name!r}: {self.model}, {len(self.runs)} run(s), {status}>")


class Comparison(Mapping[str, Column]):
    """``_compare``: column name -> ``Column`` (see the module docstring)."""

    def __init__(self, session: Session, prompt: str, options: CellOptions,
                 agents: Mapping[str, tuple[Agent, CellOptions]]) -> None:  # fmt: skip
        #: Stored runs carry it as their ``compare`` option (``%cortex runs`` finds them).
        self.id = uuid.uuid4().hex[:12]
        self.prompt = prompt
        self.options = options
        self.repeat = options.repeat
        self._session = session
        self._columns = {
            name: Column(name, agent, opts, repeats=options.repeat)
            for name, (agent, opts) in agents.items()
        }
        self._scope: Scope = session.names.scope(prompt, script=options.script)
        self.view: CellView | None = None

    # ---- the mapping ------------------------------------------------------------

    def __getitem__(self, name: str) -> Column:
        return self._columns[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._columns)

    def __len__(self) -> int:
        return len(self._columns)

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{c.name}: {c.run.status if c.run else 'waiting'}" for c in self.values()
        )
        return redact(f"<comparison {self.id}: {shown}>")  # as Column's

    @property
    def groups(self) -> dict[str, list[tuple[int, str]]]:
        """Column name -> its identical answers counted (``--repeat``)."""
        return {column.name: column.groups for column in self.values()}

    def facts(self) -> list[ColumnFacts]:
        """Every run's header facts, column by column (the summary table's rows)."""
        return [column.facts(i) for column in self.values() for i in range(len(column.runs))]

    def summary(self) -> str:
        """The summary table ``--text`` prints, as text."""
        from cortex_jupyter.display.compare import summary_text

        return summary_text(self.facts())

    def metadata(self) -> dict[str, Any]:
        """What the cell output's metadata records (JSON-ready; saved with the notebook,
        so a column or model named like a secret is redacted)."""
        shown: dict[str, Any] = redact_value(
            {
                "compare": self.id,
                "columns": [dataclasses.asdict(f) for f in self.facts()],
                "runs": {c.name: [run.id for run in c.runs] for c in self.values()},
            }
        )
        return shown

    # ---- running ----------------------------------------------------------------

    def run(self) -> Comparison:
        """Run every column (a synchronous cell); returns the comparison."""
        failure: BaseException | None = None
        try:
            self._prepare().run()
        except (KeyboardInterrupt, Exception) as exc:
            failure = exc
        return self._outcome(failure)

    async def run_async(self) -> Comparison:
        """``run`` as an async cell on the kernel's loop (buttons work meanwhile)."""
        failure: BaseException | None = None
        try:
            await self._prepare().run_async()
        except (KeyboardInterrupt, Exception) as exc:
            failure = exc
        return self._outcome(failure)

    def _prepare(self) -> Bridge[Comparison]:
        session = self._session
        session.shell.user_ns[COMPARE_VARIABLE] = self
        self.view = view = self._open_view()
        loop = session._background_loop()
        bridge: Bridge[Comparison] = Bridge(
            self._job, view.deliver, loop=None if loop.is_current() else loop
        )
        view.stop = bridge.request_stop
        return bridge

    def _open_view(self) -> CellView:
        session, display = self._session, self.options.display
        if display == "text" or (display == "auto" and not session.live._has_widgets()):
            return CompareText(self)
        cell, label = session.live.place()
        view = CompareWidgets(self, session.approvals, self._reach, self._keep, cell, label)
        session.live.add(view)  # a view a column, let go as a run's views are
        return view

    def _keep(self, column: str) -> str:
        """A column's keep button: this comparison's column into the notebook's ``kept``."""
        from cortex_jupyter.session.keep import BUTTON_DATASET, KeepRefused, keep_column

        try:
            return keep_column(self._session.shell.user_ns, self, column, BUTTON_DATASET)
        except KeepRefused as exc:
            return redact(str(exc))

    def _reach(self, column: Column) -> Mapping[str, Any]:
        feeds = self._session.feeds
        return ChainMap(self._scope, feeds) if feeds is not None else self._scope  # type: ignore[arg-type]

    async def _job(self, emit: Emit) -> Comparison:
        attributes = {"cortex.compare.id": self.id,
                      "cortex.compare.columns": list(self._columns)}  # fmt: skip
        with group_span("compare", attributes):
            async with anyio.create_task_group() as group:
                for index, column in enumerate(self.values()):
                    group.start_soon(self._column, index, column, emit)
        return self

    async def _column(self, index: int, column: Column, emit: Emit) -> None:
        for repeat in range(self.repeat):
            run = NotebookRun()
            tags = {"compare": self.id, "column": column.name, "repeat": repeat + 1}
            recording = self._session._recording(run, self.prompt, column.options,
                                                 column.agent, tags)  # fmt: skip
            column.runs.append(run)
            column.recordings.append(recording)
            emit((index, repeat, None))
            hooks = RunHooks(
                on_event=self._tagged(emit, index, repeat),
                observers=(recording,) if recording is not None else (),
                bind=None,  # output_key values stay on the run: never over notebook names
                ask=self._asker(run),
            )
            agent = column.agent
            if self.options.script:  # a script stands in for the model: a fresh one a run
                session = self._session
                script = cell_model(self.prompt, self.options, session.registry, {})
                agent = agent.with_options(model=script)
            try:
                await agent.run(
                    "" if self.options.script else self.prompt, namespace=self._scope,
                    conversation=Conversation(), hooks=hooks, run=run,
                )  # fmt: skip
            except Exception as exc:  # this column's failure stays in this column
                run.fail(exc)
            finally:
                if run.status == "running":  # stopped: every column is
                    run.status, run.ended = "cancelled", run.ended or time.monotonic()
                if recording is not None:
                    recording.finish()

    @staticmethod
    def _tagged(emit: Emit, index: int, repeat: int) -> Callable[[Any], None]:
        """A column's ``on_event``: its events tagged with the column and the repeat."""
        return lambda event: emit((index, repeat, event))

    def _asker(self, run: NotebookRun) -> Any:
        if isinstance(self.view, CompareText):

            async def deny(node: Any) -> bool:  # no one can be asked while columns run
                return False

            return deny
        return self._session.approvals.asker(run.id)

    def _outcome(self, failure: BaseException | None) -> Comparison:
        """End the cell however the columns ended (``Session._outcome``'s rules)."""
        view = self.view
        if isinstance(failure, KeyboardInterrupt):
            close_quietly(view)
            self._store_problem()
            print("cortex: interrupted: every column was stopped; what arrived is on "
                  "_compare.", file=sys.stderr)  # fmt: skip
            raise CortexInterrupt()
        if failure is None:
            failure = close_view(view)
        else:
            close_quietly(view)
        self._session.live.release()  # older finished views let go, this one counted
        self._store_problem()
        if failure is not None:
            raise CortexRunError(f"the comparison failed: {failure_line(failure)}; what "
                                 "arrived is on _compare.")  # fmt: skip
        self._report()
        return self

    def _store_problem(self) -> None:
        problem = store.take_problem()
        if problem is not None:
            print(f"cortex: %%cortex: {problem}", file=sys.stderr)

    def _report(self) -> None:
        """One line for each run that did not answer; an error when none did."""
        answered = 0
        for column in self.values():
            for number, run in enumerate(column.runs, 1):
                which = column.name if self.repeat == 1 else f"{column.name} #{number}"
                for note in run.notes:
                    say(f"cortex: column {which}: {note}")
                if run.status == "completed":
                    answered += 1
                else:
                    say(f"cortex: column {which} ended {run.status!r}: "
                        f"{run.reason or 'no answer'}")  # fmt: skip
        if not answered:
            raise CortexRunError("no column answered; each column's view says why, and "
                                 "_compare holds their runs.")  # fmt: skip


def run_compare(
    session: Session, prompt: str, options: CellOptions, options_for: ColumnOptions | None
) -> None:
    """A ``%%cortex --compare`` cell, from the magic's options to its end (``_compare``
    holds the comparison)."""
    comparison(session, prompt, options, options_for).run()


async def run_compare_async(
    session: Session, prompt: str, options: CellOptions, options_for: ColumnOptions | None
) -> None:
    """``run_compare`` as an async cell on the kernel's loop."""
    await comparison(session, prompt, options, options_for).run_async()


def comparison(
    session: Session, prompt: str, options: CellOptions, options_for: ColumnOptions | None
) -> Comparison:
    """The comparison a ``--compare`` cell asks for, its columns' agents made (a name
    that cannot be had, or an option that cannot go with ``--compare``, is one line)."""
    if options.output_key is not None:
        raise CortexRunError(
            "--output-key binds one answer; a --compare cell's answers are on "
            "_compare[column].output"
        )
    if options.replay is not None:
        raise CortexRunError("--compare runs models (or a --script); it cannot replay a transcript")
    assert options.compare is not None
    given = options_for or _options_for(options)
    output_type = None
    if options.output is not None:
        try:  # evaluated once, in the notebook; refused before any column starts
            output_type = type_from_text(options.output, session.shell.user_ns)
            OutputType.of(output_type)  # one pydantic cannot use is refused here
        except (ValueError, BadOutputType) as exc:
            raise CortexRunError(redact(str(exc))) from None
    try:
        found = columns(session, options.compare, given, option="--compare")
    except ExperimentRefused as exc:
        raise CortexRunError(redact(str(exc))) from None
    agents: dict[str, tuple[Agent, CellOptions]] = {}
    share = budget_share(options.compare_budget, len(found) * options.repeat)
    for name, agent in found.items():
        if output_type is not None:
            agent = agent.with_options(output_type=output_type)
        budget = options.budget
        if share is not None:  # each run's share (or its own budget, when smaller)
            budget = run_budget(Budget.parse(agent.budget), share)
            agent = agent.with_options(budget=budget)
        # What its stored run keeps as its cell's options: its own model and dialect.
        kept = dataclasses.replace(
            options, model=model_name(agent), dialect=agent.dialect, agent=agent.name,
            budget=budget,
        )  # fmt: skip
        agents[name] = (agent, kept)
    return Comparison(session, prompt, options, agents)


def budget_share(whole: Budget | None, runs: int) -> Budget | None:
    """``--compare-budget`` split evenly into ``runs`` run budgets (columns × repeats):
    each run's budget holds, so the cell's runs together spend at most ``whole``. Tokens
    are whole (rounded down); a share under one token is refused."""
    if whole is None:
        return None
    if whole.unit == "tok":
        tokens = int(whole.limit) // runs
        if tokens < 1:
            raise CortexRunError(f"--compare-budget {whole} is under a token for each of its "
                                 f"{runs} runs")  # fmt: skip
        return Budget(float(tokens), "tok")
    return Budget(whole.limit / runs, "usd")


def run_budget(own: Budget | None, share: Budget) -> Budget:
    """A run's budget under ``--compare-budget``: its share, or its own ``--budget`` (or
    its agent's) when that is smaller; two budgets in different units are refused (a
    run holds to one)."""
    if own is None:
        return share
    if own.unit != share.unit:
        raise CortexRunError(
            f"--budget {own} and --compare-budget {share} count in different units (dollars "
            "and tokens); give both in one"
        )
    return own if own.limit < share.limit else share


def _options_for(options: CellOptions) -> ColumnOptions:
    """A column's options without the magic (``Session.run_cell`` from Python): the
    cell's, with the words ``experiments.columns`` gives (``--model M``, ``--dialect
    D --model M``, ``--agent NAME``)."""

    def given(line: str) -> CellOptions:
        words = line.split()
        pairs = zip(words[::2], words[1::2], strict=False)
        changes: dict[str, Any] = {flag.lstrip("-"): value for flag, value in pairs}
        return dataclasses.replace(options, **changes, given=options.given | set(changes))

    return given

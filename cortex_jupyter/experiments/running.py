"""Running an experiment's tries: ordinary ``Agent.run``s, bounded per endpoint and by the
experiment's budget, each judged when it ends and kept in the store.

The experiment grows no loop of its own: a try is ``agent.run(case.prompt,
namespace=case.vars, store=...)`` with the agent's model made fresh for the case (a
script starts at its first turn), and what the run leaves (its record) is what the
expectations read. The store is handed a thin wrapper that adds the experiment, case,
agent and repeat to the run's stored options, so ``%cortex runs`` finds the tries too.

``drive`` runs them from a notebook cell (or a script): the tries run on a worker
thread's event loop while the calling thread takes each ended try from a queue and
updates the progress bar and the live matrix (widgets are updated only from the kernel's
main thread, NOTES.md). A Stop (``KeyboardInterrupt``) cancels the tries still running;
the ended ones are kept, in the returned experiment and in the store.
"""

from __future__ import annotations

import functools
import math
import queue
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.from_thread

from cortex_jupyter.experiments.results import Expectation, JudgeContext, Try, Verdict
from cortex_jupyter.experiments.schedule import Allowance, Gates, endpoint_of
from cortex_jupyter.runtime import Agent, Run
from cortex_jupyter.runtime.core.trust.secrets import redact, shorten

__all__ = [
    "Hooks",
    "Plan",
    "Watched",
    "drive",
    "first_action",
    "judge",
    "labelled",
    "measure_try",
    "try_row",
]

#: How often one try is asked again after the server rate-limited it (HTTP 429).
RATE_LIMIT_TRIES = 3


class Watched:
    """A model, with the last failure of its stream kept (``failure``): a 429 (or an
    endpoint that cannot be reached at all) is told from a model that merely answers
    badly; and whether a grammar went with any of its requests (``constrained``).
    Everything else is the model's own (its ``stream`` signature shows through: the loop
    asks it whether the model takes a grammar)."""

    def __init__(self, model: Any) -> None:
        self._model = self.model = model
        self.failure: BaseException | None = None
        self.constrained = False

        @functools.wraps(model.stream)
        def stream(messages: Any, **options: Any) -> AsyncIterator[Any]:
            self.constrained = self.constrained or options.get("constraint") is not None
            return self._watch(model.stream(messages, **options))

        self.stream: Callable[..., AsyncIterator[Any]] = stream

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    @property
    def name(self) -> str:
        return str(getattr(self._model, "name", "model"))

    async def _watch(self, chunks: AsyncIterator[Any]) -> AsyncIterator[Any]:
        try:
            async for chunk in chunks:
                yield chunk
        except Exception as exc:
            self.failure = exc
            raise
        finally:
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                await aclose()


class _Tagged:
    """The store, with each run's stored options saying which try it is."""

    def __init__(self, store: Any, tags: Mapping[str, Any]) -> None:
        self._store = store
        self._tags = dict(tags)

    def record(self, run: Run, prompt: str, options: Mapping[str, Any] | None = None) -> Any:
        return self._store.record(run, prompt, {**(options or {}), **self._tags})

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def labelled(expectations: Sequence[Expectation]) -> list[tuple[str, Expectation]]:
    """Each expectation with its column label: ``protocol`` first (always on), then the
    case's own; a label used twice is numbered (``tools``, ``tools#2``)."""
    from cortex_jupyter.experiments import expect

    out: list[tuple[str, Expectation]] = [("protocol", expect.protocol())]
    seen = {"protocol": 1}
    taken = {"protocol"}
    for item in expectations:
        label = item.label
        seen[label] = seen.get(label, 0) + 1
        given = label if seen[label] == 1 else f"{label}#{seen[label]}"
        # A name of the numbered form ("answer#2") given to another expectation: the
        # later verdict took its key and a failed one vanished, the try passing.
        while given in taken:
            seen[label] += 1
            given = f"{label}#{seen[label]}"
        taken.add(given)
        out.append((given, item))
    return out


async def judge(
    run: Run, expectations: Sequence[Expectation], context: JudgeContext
) -> dict[str, Verdict]:
    """Every verdict on ``run``; an expectation that raises fails with the reason, and the
    rest are still judged."""
    verdicts: dict[str, Verdict] = {}
    for label, item in labelled(expectations):
        try:
            verdicts[label] = await item.acheck(run, context)
        except Exception as exc:
            said = shorten(redact(f"{type(exc).__name__}: {exc}"), 120)
            verdicts[label] = Verdict.of(False, f"the expectation raised {said}")
    return verdicts


def first_action(run: Run) -> float | None:
    """Seconds from the run's start to its first action's start (None: none started)."""
    starts = [n.started for n in run.actions.values() if n.started is not None]
    return None if not starts else max(0.0, min(starts) - run.started)


def tokens_of(run: Run) -> int:
    """Every token the run's requests took (prompt and completion)."""
    usage = run.usage
    return int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0))


def measure_try(tried: Try, run: Run) -> None:
    """Fill ``tried``'s figures from its ended run."""
    tried.run, tried.run_id, tried.status = run, run.id, run.status
    tried.cost = run.cost
    tried.tokens = tokens_of(run)
    tried.seconds = None if run.ended is None else max(0.0, run.ended - run.started)
    tried.first_action = first_action(run)


@dataclass(frozen=True)
class Hooks:
    """What a preset built on the runner (``evaluate()``) may change of a plain experiment;
    each is None for the plain way.

    - ``agent_for(case, column)``: the agent of that column's tries of that case (a case
      needing tools or an answer type of its own); None, or a None answer: the column's;
    - ``stop_when(tried, watched)``: called as each try's run ends, with its ``Watched``
      model (its ``failure``, whether a grammar went out); a reason (one line) stops the
      experiment at once: tries not yet ended are cancelled and stay pending, and the
      reason is the experiment's ``note``;
    - ``ended(tried)``: called in the calling thread as each try ends (after the
      progress bar and the live matrix).
    """

    agent_for: Callable[[str, str], Agent | None] | None = None
    stop_when: Callable[[Try, Watched], str | None] | None = None
    ended: Callable[[Try], None] | None = None


@dataclass
class Plan:
    """What one experiment run does: the tries to make, and with what (``hooks``: what a
    preset changes, see ``Hooks``; ``stopped``: the reason a hook stopped it)."""

    experiment_id: str
    cases: Mapping[str, Any]  # case name -> Case
    agents: Mapping[str, Agent]
    tries: list[Try]
    gates: Gates
    allowance: Allowance
    store: Any = None  # a Store, or None: the tries are not kept
    rows: Any = None  # store.experiments.ExperimentRows, or None
    judge_model: Any = None
    judge_budget: Any = None  # a Budget for the judge's own requests
    time_limit: float | None = None
    runner: Any = None  # experiments.cluster.ClusterRunner, or None: in this process
    judge_spend: list[tuple[dict[str, int], float | None]] = field(default_factory=list)
    hooks: Hooks = field(default_factory=Hooks)
    stopped: str | None = None
    _changed: anyio.Event | None = None
    _group: Any = None
    _judge_lock: anyio.Lock | None = None

    def agent_for(self, case: str, column: str) -> Agent:
        """The agent of ``column``'s tries of ``case``: the column's, unless a hook says."""
        given = None if self.hooks.agent_for is None else self.hooks.agent_for(case, column)
        return self.agents[column] if given is None else given

    def stop_when(self, tried: Try, watched: Watched) -> str | None:
        """Why the experiment stops after ``tried`` (None: it goes on; see ``Hooks``)."""
        return None if self.hooks.stop_when is None else self.hooks.stop_when(tried, watched)

    def _told_to_stop(self) -> bool:
        return self.stopped is not None

    async def go(self, report: Callable[[Try], None]) -> None:
        """Run every pending try; ``report`` is called with each as it ends. Tries start in
        ``tries`` order, each as its endpoint's limiter lets it (first come, first
        served: at a concurrency of 1 they run one by one in that order)."""
        self._changed = anyio.Event()
        self._judge_lock = anyio.Lock()
        async with anyio.create_task_group() as group:
            self._group = group
            for tried in self.tries:
                if not tried.done:
                    group.start_soon(self._one, tried, report)

    async def _one(self, tried: Try, report: Callable[[Try], None]) -> None:
        agent = self.agent_for(tried.case, tried.agent)
        endpoint = endpoint_of(agent.model)
        async with self.gates.limiter(endpoint):
            if self._told_to_stop():
                return  # a hook stopped the experiment: the try stays pending
            while not self.allowance.may_start():
                if self.allowance.stopped is not None:
                    tried.status, tried.error = "budget", self.allowance.stopped
                    await self._ended(tried, report)
                    return
                await self._wait_change()
            share = self.allowance.grant()
            spent: tuple[float | None, int] = (None, 0)
            try:
                spent = await self._attempts(tried, agent, endpoint, share)
            finally:
                self.allowance.ended(share, *spent)
                self._change()
            # Kept before the next try may start: a kernel killed from then on loses
            # only tries that were running.
            await self._ended(tried, report)
            if self._told_to_stop():  # the rest are cancelled, left pending
                self._group.cancel_scope.cancel()

    async def _attempts(
        self, tried: Try, agent: Agent, endpoint: str, share: Any
    ) -> tuple[float | None, int]:
        case = self.cases[tried.case]
        cost: float | None = 0.0
        tokens = 0
        for attempt in range(RATE_LIMIT_TRIES + 1):
            await self.gates.wait_open(endpoint)
            watched, run = await self._run(tried, agent, case, share)
            if run is None:
                return cost, tokens
            cost = None if cost is None or run.cost is None else cost + run.cost
            tokens += tokens_of(run)
            failure = watched.failure
            limited = type(failure).__name__ == "RateLimited" and not getattr(failure, "quota", 0)
            # Only a run the 429 ended before any of its actions started is made again:
            # one that completed anyway (an llm action's request was refused, the agent
            # answered without it), or whose tools already ran (a refund), is the try's
            # result. Running it again would run those tools again.
            again = run.status != "completed" and not any(
                node.started is not None for node in run.actions.values()
            )
            if limited and again and attempt < RATE_LIMIT_TRIES:
                self.gates.back_off(endpoint, getattr(failure, "retry_after", None), attempt)
                continue
            # The judge asks the experiment's judge model, else the agent's own (a model
            # that asks a server: a script is no judge).
            own = agent.model if endpoint_of(agent.model) != "script" else None
            context = JudgeContext(
                case, self.judge_model or own, self.judge_spend, self.judge_budget,
                self._judge_lock,
            )  # fmt: skip
            verdicts = await judge(run, case.expect, context)
            # Only now: a Stop while judging leaves the try pending (it is not stored, so a
            # resume runs it), not "completed" with no verdict.
            measure_try(tried, run)
            tried.verdicts = verdicts
            said = self.stop_when(tried, watched)
            if said is not None and self.stopped is None:
                self.stopped = said
            break
        return cost, tokens

    async def _run(
        self, tried: Try, agent: Agent, case: Any, share: Any
    ) -> tuple[Watched, Run | None]:
        model = agent.model
        fresh = getattr(model, "fresh", None)
        watched = Watched(fresh(case.prompt) if callable(fresh) else model)
        # A worker gets the model itself (what it does there is read from the run).
        changes: dict[str, Any] = {"model": watched if self.runner is None else watched.model}
        if share is not None:
            changes["budget"] = share
        run = Run()
        tags = {"experiment": self.experiment_id, "case": tried.case, "column": tried.agent,
                "repeat": tried.repeat}  # fmt: skip
        store = None if self.store is None else _Tagged(self.store, tags)
        limit = math.inf if self.time_limit is None else self.time_limit
        try:
            with anyio.move_on_after(limit) as scope:
                if self.runner is not None:
                    await self._remote(tried, agent.with_options(**changes), case, run, store)
                else:
                    await agent.with_options(**changes).run(
                        case.prompt, namespace=dict(case.vars or {}), run=run, store=store
                    )
            if scope.cancel_called:
                run.status = "timeout"
                run.reason = f"cut at the time limit of {self.time_limit:g} s a try"
        except Exception as exc:
            tried.status = "error"
            tried.error = shorten(
                redact(f"the try could not run: {type(exc).__name__}: {exc}"), 300
            )
            return watched, None
        return watched, run

    async def _remote(self, tried: Try, agent: Agent, case: Any, run: Run, store: Any) -> None:
        """The try on a cluster's worker (``experiments.cluster``): its events come back
        here, to the store as a local run's would."""
        recording = None if store is None else store.record(run, case.prompt, agent.settings())
        label = f"{tried.case} / {tried.agent} #{tried.repeat + 1}"
        try:
            await self.runner.run_try(
                agent, case.prompt, dict(case.vars or {}),
                None if recording is None else recording.on_event, run=run, label=label,
            )  # fmt: skip
        finally:
            if recording is not None:
                recording.finish()

    async def _ended(self, tried: Try, report: Callable[[Try], None]) -> None:
        if self.rows is not None:
            row = try_row(tried)
            try:
                await anyio.to_thread.run_sync(self.rows.put_try, self.experiment_id, row)
            except Exception as exc:  # a full disk, a held store: the try is still shown
                note = shorten(redact(f"its row was not stored: {exc}"), 200)
                tried.error = note if tried.error is None else f"{tried.error}; {note}"
        report(tried)

    async def _wait_change(self) -> None:
        assert self._changed is not None
        await self._changed.wait()

    def _change(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = anyio.Event()


def try_row(tried: Try) -> Any:
    from cortex_jupyter.store.experiments import TryRow

    verdicts = {
        label: {
            "passed": v.passed,
            "score": v.score,
            "reason": v.reason,
            "details": dict(v.details),
        }
        for label, v in tried.verdicts.items()
    }
    return TryRow(
        tried.case, tried.agent, tried.repeat, tried.run_id, tried.status, verdicts,
        tried.cost, tried.tokens, tried.seconds, tried.first_action, tried.error,
    )  # fmt: skip


def drive(plan: Plan, on_try: Callable[[Try], None], on_idle: Callable[[], None]) -> str | None:
    """Run ``plan`` from a synchronous caller (a notebook cell): ``on_try`` is called in
    the calling thread with each ended try, ``on_idle`` about ten times a second. Returns
    None, or why it stopped early (a Stop)."""
    ended: queue.SimpleQueue[Try] = queue.SimpleQueue()
    stopped = None
    with anyio.from_thread.start_blocking_portal() as portal:
        future = portal.start_task_soon(plan.go, ended.put)
        try:
            while not future.done():
                _take(ended, on_try, 0.1)
                on_idle()
        except KeyboardInterrupt:
            stopped = "stopped (Stop / KeyboardInterrupt): the tries that ended are kept"
            future.cancel()
        try:
            future.result()
        except BaseException as exc:  # cancelled by the Stop above, or a runtime failure
            if stopped is None and not _cancelled(exc):
                raise
        finally:
            _take(ended, on_try, 0)
    return stopped


def _take(ended: queue.SimpleQueue[Try], on_try: Callable[[Try], None], wait: float) -> None:
    deadline = time.monotonic() + wait
    while True:
        left = deadline - time.monotonic()
        try:
            tried = ended.get(timeout=left) if left > 0 else ended.get_nowait()
        except queue.Empty:
            return
        on_try(tried)


def _cancelled(exc: BaseException) -> bool:
    """Whether ``exc`` is the portal's task being cancelled. Asked in the calling thread,
    outside any event loop (``anyio.get_cancelled_exc_class()`` raises there, which hid the
    runner's own failure); the portal turns a cancellation inside into a cancelled future."""
    import concurrent.futures

    return isinstance(exc, concurrent.futures.CancelledError)

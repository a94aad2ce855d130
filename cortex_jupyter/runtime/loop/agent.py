"""The ``Agent``: one frozen configuration of a model loop, and the runtime's public face.

Before it existed, ``run_agent`` took twenty keyword parameters and handed most of them on,
again by keyword, to the loop and the scheduler, and the session kept a dict of a dozen
more. An ``Agent`` holds what describes an agent (instructions, the tools it may call, its
model, dialect, turn limit, feeds, sampling settings) and every layer reads it; what
changes from one run to the next (the prompt, the notebook namespace, the conversation to
continue, where events go) is passed to ``run``.

A named ``Agent`` registers itself as the ``type="agent"`` action of that name: a model
that writes ``<action type="agent">{"name": "researcher", "parameters": {"task": ...}}``
runs that agent's own loop (its instructions, the protocol taught in its system prompt,
its tools, up to its own ``max_turns``, on its own model or the caller's), nested under
the calling node. The latest Agent created under a name is the one that runs (like
re-running a cell that defines a tool).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections import ChainMap
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import TYPE_CHECKING, Any

import anyio
import anyio.from_thread
from anyio.abc import TaskGroup

from cortex_jupyter.runtime.core.calls.registry import AgentSpec, Registry, default_registry
from cortex_jupyter.runtime.core.cost.budget import Budget, Spend
from cortex_jupyter.runtime.core.errors import AgentDidNotAnswer, NoModelConfigured
from cortex_jupyter.runtime.core.events import AnyEvent, Nested
from cortex_jupyter.runtime.core.model.chunks import StreamingModel
from cortex_jupyter.runtime.core.record.observer import RunObserver, RunStore
from cortex_jupyter.runtime.core.record.run import Run
from cortex_jupyter.runtime.core.trust.secrets import shorten
from cortex_jupyter.runtime.core.values.typed import OutputType
from cortex_jupyter.runtime.core.values.variables import find_references
from cortex_jupyter.runtime.loop.conversation import Conversation
from cortex_jupyter.runtime.loop.feeds import FeedSet
from cortex_jupyter.runtime.loop.grammar import CONSTRAIN_FORMS, GRAMMAR_DIALECTS
from cortex_jupyter.runtime.loop.pickup import plan
from cortex_jupyter.runtime.loop.prompt import describe_variables
from cortex_jupyter.runtime.loop.request import check_request, request_fields
from cortex_jupyter.runtime.loop.transcript import RunSource, continue_note, cut_reply, load_runs
from cortex_jupyter.runtime.loop.turns import MAX_TURNS, RESULT_LIMIT, Loop
from cortex_jupyter.runtime.scheduler.approval import Approver, Rules
from cortex_jupyter.runtime.scheduler.dispatch import Scheduler
from cortex_jupyter.runtime.scheduler.spec import InternalPolicy, RetryPolicy, RunSpec

if TYPE_CHECKING:
    from cortex_jupyter.runtime.core.record.graph import ActionNode

__all__ = ["Agent", "RunHooks"]

#: The dialects an agent can be taught; checked when the Agent is made, not at its first run.
_DIALECTS = ("cortex", "sigil", "cogency", "hermes", "auto")


@dataclass(frozen=True)
class RunHooks:
    """How a run reports to whoever hosts it (a notebook session, a test).

    ``on_event`` receives every event as it happens; ``bind`` is called with each
    ``output_key`` and its value when an action finishes (a notebook binds it as a
    variable); ``background`` is the task group that owns ``fire_and_forget`` actions
    when they may outlive the run (``None``: the run waits for them); ``ask`` asks a
    person to approve an action.
    """

    on_event: Callable[[AnyEvent], None] | None = None
    bind: Callable[[str, Any], None] | None = None
    background: TaskGroup | None = None
    #: How the host asks a person to approve an action (buttons, a prompt); ``None``: the
    #: terminal's ``input()``. Used when the agent's ``approval`` is ``"ask"``.
    ask: Approver | None = None
    #: Who else watches the run (``runtime.core.record.observer``): a store's ``Recording``.
    observers: tuple[RunObserver, ...] = ()


@dataclass(frozen=True)
class Agent:
    """An agent: a model, what it is told, and what it may call (see the module docstring).

    ``tools`` are the entries it may call: names (``"get_weather"``, ``"cache.get"``, an
    agent's name) or registered functions; ``None`` means everything in ``registry``
    (the default registry unless given). ``model`` is any ``StreamingModel``; ``None``
    means the caller's (the session's, or the parent run's for a nested agent).
    ``max_depth`` limits how deep agents may call agents. ``approve`` names tools that
    wait for approval (see ``runtime.scheduler.approval``) under the ``approval`` policy; run as a
    nested agent, its caller's ``approve``, ``approval`` and ``approve_timeout`` hold for
    it too, and its own can only add to them. ``output_type`` (a pydantic model, a
    dataclass, ``list[int]``...) makes the answer data: ``run.output`` is the validated
    object, an answer that does not fit is sent back up to ``output_retries`` times, and
    as a nested agent its action's output is that object (``runtime.core.values.typed``).
    """

    name: str | None = None
    instructions: str | None = None
    tools: Sequence[str | Callable[..., Any]] | None = None
    model: StreamingModel | None = None
    dialect: str = "cortex"
    max_turns: int = MAX_TURNS
    feeds: FeedSet | None = None
    native_tools: bool = False
    temperature: float | None = None
    max_tokens: int | None = None
    result_limit: int = RESULT_LIMIT
    registry: Registry | None = field(default=None, repr=False)
    internal: InternalPolicy | None = None
    retry: RetryPolicy | None = None
    description: str = ""
    max_depth: int = 3
    #: Names of tools this agent must get approval for, besides those marked approve=True.
    approve: Collection[str] = frozenset()
    #: The approval policy: "ask", "allow", "deny", or a function (node) -> bool.
    approval: str | Callable[[ActionNode], Any] = "ask"
    #: Seconds to wait for an approval before it counts as denied (None: no limit).
    approve_timeout: float | None = None
    #: The context budget in tokens (None: the model's window where known, else 32,000).
    context_tokens: int | None = None
    #: Extra fields sent with every request (``runtime.loop.request``: temperature, seed,
    #: top_k, grammar...); ``temperature``/``max_tokens`` above win over the same here.
    request: Mapping[str, Any] | None = field(default=None, repr=False)
    #: Protocol-constrained decoding (``runtime.loop.grammar``): True or "gbnf" sends a
    #: llama.cpp GBNF grammar, "vllm" vLLM's structured-output grammar; False: none.
    constrain: bool | str = False
    #: The answer's type (``runtime.core.values.typed``): a pydantic model, dataclass, TypedDict,
    #: ``list[...]``, ``Literal[...]``, a union, ``int``...; ``run.output`` is then the
    #: validated object. ``None``: the answer is text only.
    output_type: Any = None
    #: How many times a typed answer that does not validate is sent back to the model
    #: with the errors before the run fails (each retry is a turn of ``max_turns``).
    output_retries: int = 1
    #: The most a run may spend (``runtime.core.cost.budget.Budget``): US dollars (``0.05``,
    #: ``"$0.05"``) or tokens (``"20000tok"``); None: no limit. Checked before each
    #: request; a run it stops ends ``budget``. A nested agent spends its caller's budget.
    budget: float | str | Budget | None = None

    def __post_init__(self) -> None:
        _check(self)
        if self.tools is not None and not isinstance(self.tools, tuple):
            object.__setattr__(self, "tools", tuple(self.tools))
        if not isinstance(self.approve, frozenset):
            object.__setattr__(self, "approve", frozenset(self.approve))
        if self.name is not None:
            self.home.add(AgentSpec(self.name, self, self.description))

    # ---- configuration --------------------------------------------------------------

    @property
    def home(self) -> Registry:
        """The registry its tools are looked up in (and where a named agent is registered)."""
        return self.registry if self.registry is not None else default_registry

    def callable(self) -> Registry:
        """What this agent may call: its ``tools`` out of ``home``, or all of ``home``."""
        if self.tools is None:
            return self.home
        return self.home.subset(self.tools)

    def with_options(self, **changes: Any) -> Agent:
        """A copy with ``changes`` applied that is not registered under its name (the
        session's per-cell settings, which must not replace the registered agent)."""
        known = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise TypeError(f"Agent has no option {', '.join(map(repr, unknown))}")
        copy = object.__new__(Agent)
        for f in fields(self):
            object.__setattr__(copy, f.name, changes.get(f.name, getattr(self, f.name)))
        _check(copy)
        return copy

    def settings(self) -> dict[str, Any]:
        """The settings a stored run keeps beside its prompt (plain values only)."""
        return {
            "agent": self.name,
            "model": getattr(self.model, "name", None),
            "dialect": self.dialect,
            "max_turns": self.max_turns,
            "native_tools": self.native_tools,
            "constrain": self.constrain,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }

    @cached_property
    def typed(self) -> OutputType | None:
        """The answer type made ready (``runtime.core.values.typed``), or None for a text answer;
        made once, when the Agent is made (``_check`` refuses a type pydantic cannot use)."""
        return None if self.output_type is None else OutputType.of(self.output_type)

    # ---- running --------------------------------------------------------------------

    async def run(
        self,
        prompt: str,
        *,
        namespace: Mapping[str, Any] | None = None,
        conversation: Conversation | None = None,
        hooks: RunHooks | None = None,
        run: Run | None = None,
        variables: Iterable[str] | None = None,
        taken_ids: Iterable[str] = (),
        resume: str | None = None,
        store: RunStore | None = None,
    ) -> Run:
        """Run ``prompt``: turns of model replies and actions until a final answer.

        ``namespace`` is what ``$name`` may reach beyond the run's own outputs and feeds
        (a notebook session passes only the names the model may see). ``conversation``
        is the memory to continue (a fresh one when ``None``); the prompt, the replies
        and the results are appended to it. ``variables`` are the names described in
        the system prompt (by default those the prompt refers to as ``$name`` that
        exist in ``namespace``). ``taken_ids`` are action ids of earlier runs. An
        exchange of ``conversation`` the model never answered (its run failed before
        any reply) is dropped first, so a prompt tried again is sent once.

        Returns the run record; a failing model does not raise (the run then ends
        ``interrupted``, ``failed`` or ``truncated``; ``run.reason`` says why), only a
        failing runtime or a cancelled run. Pass ``run=Run()`` to keep a handle.
        ``resume`` is set by ``continue_run``: the text of the cut reply to read on from
        ("" when there is none; see ``Loop.go``). ``store`` keeps the run as it happens
        (``cortex_jupyter.store.Store``): it is given every event, then the ended run.
        """
        if store is not None:
            run = run if run is not None else Run()
            recording = store.record(run, prompt, self.settings())
            hooks = _observed(hooks or RunHooks(), recording)
            try:
                return await self.run(
                    prompt, namespace=namespace, conversation=conversation, hooks=hooks,
                    run=run, variables=variables, taken_ids=taken_ids, resume=resume,
                )  # fmt: skip
            finally:
                recording.finish()
        loop = self._loop(prompt, namespace, conversation, hooks, run, variables, taken_ids)
        return await self._drive(loop, functools.partial(loop.go, prompt, resume=resume))

    async def resume(
        self,
        run: Run,
        *,
        prompt: str = "",
        namespace: Mapping[str, Any] | None = None,
        conversation: Conversation | None = None,
        hooks: RunHooks | None = None,
        store: RunStore | None = None,
    ) -> Run:
        """Go on with ``run``, a run that did not finish (its kernel died, it was
        stopped, its stream dropped, it reached its turn limit), as itself: the same
        record and id, its events kept and the new ones after them
        (``runtime.loop.pickup``). Actions that ended are restored, their outputs bound
        again under their ``output_key``; those the stop caught run again with the
        tools as they are now; turns the model answered are not asked again; the run
        then goes on to the end it would have had. ``prompt`` is the run's prompt, sent
        only when the record stopped before it; ``conversation`` receives the run's
        messages as recorded (a fresh one when ``None``); ``store`` goes on keeping it
        (where its rows end). Returns ``run``.
        """
        if store is not None:
            recording = store.record(run, prompt, self.settings())
            try:
                return await self.resume(
                    run, prompt=prompt, namespace=namespace, conversation=conversation,
                    hooks=_observed(hooks or RunHooks(), recording),
                )  # fmt: skip
            finally:
                recording.finish()
        state = plan(run)
        run.status, run.ended, run.reason = "running", None, None
        run.variables.clear()  # bound again as each output is restored or made again
        loop = self._loop(prompt, namespace, conversation, hooks, run, None, ())
        loop.scheduler.spec.spend.spent_before(run.costs)  # the budget is the whole run's
        return await self._drive(loop, functools.partial(loop.pick_up, state, prompt))

    def _loop(
        self,
        prompt: str,
        namespace: Mapping[str, Any] | None,
        conversation: Conversation | None,
        hooks: RunHooks | None,
        run: Run | None,
        variables: Iterable[str] | None,
        taken_ids: Iterable[str],
    ) -> Loop:
        model = self._model(None)
        space: Mapping[str, Any] = namespace if namespace is not None else {}
        feeds = self.feeds if self.feeds is not None else FeedSet()
        names = variables
        if names is None:
            names = [n for n in find_references(prompt) if n in space and n not in feeds]
        if conversation is None:
            conversation = Conversation()
        scheduler = self._scheduler(model, space, feeds, hooks or RunHooks(), run, conversation)
        scheduler.run.reach = ChainMap(feeds, space)  # type: ignore[arg-type]
        return Loop(
            self,
            model=model,
            conversation=conversation,
            scheduler=scheduler,
            feeds=feeds,
            variables=describe_variables(space, names),
            taken_ids=taken_ids,
        )

    @staticmethod
    async def _drive(loop: Loop, turns: Callable[[], Awaitable[None]]) -> Run:
        scheduler = loop.scheduler
        active = loop.feeds.active(
            registry=scheduler.registry, namespace=scheduler.namespace, model=loop.model
        )
        async with scheduler, active:
            await turns()
        return scheduler.run

    async def continue_run(
        self,
        previous: RunSource,
        *,
        namespace: Mapping[str, Any] | None = None,
        conversation: Conversation | None = None,
        hooks: RunHooks | None = None,
        run: Run | None = None,
    ) -> Run:
        """Go on with a run that stopped (interrupted, cancelled, truncated, turn limit)
        as a new run.

        The model is told where its reply stopped and is given the results of the actions
        that already ran, so it neither repeats text nor actions. A reply that was cut
        off is read on from where it stopped: the continuation's text goes on inside the
        block the cut left open, so the answer is the first part plus the rest
        (``runtime.loop.resume``). ``conversation`` is the
        memory the earlier run used (rebuilt from ``previous`` when ``None``). The earlier
        run's outputs stay reachable as ``$name`` and its action ids stay taken.
        """
        (before,) = load_runs([previous])
        if conversation is None:
            conversation = Conversation.from_run(before)
        note = continue_note(before, dialect=self.dialect, limit=self.result_limit)
        # The notebook first: a value the user changed since wins over the earlier output.
        notebook: Mapping[str, Any] = namespace if namespace is not None else {}
        space = ChainMap(dict(notebook), dict(before.variables))
        return await self.run(
            note,
            namespace=space,
            conversation=conversation,
            hooks=hooks,
            run=run,
            taken_ids=set(before.actions),
            resume=cut_reply(before),
        )

    def run_sync(self, prompt: str, **options: Any) -> Run:
        """``run`` for plain scripts (no event loop of your own): blocks until the run ends.

        Works inside a running event loop too (a notebook cell): the run then goes to a
        worker thread with its own loop, so the caller's loop is not re-entered.
        """
        with anyio.from_thread.start_blocking_portal() as portal:
            return portal.call(functools.partial(self.run, prompt, **options))

    @staticmethod
    async def acompare(
        prompt: str,
        agents: Mapping[str, Agent] | Sequence[Agent],
        *,
        namespace: Mapping[str, Any] | None = None,
        hooks: Mapping[str, RunHooks] | None = None,
        store: RunStore | None = None,
    ) -> dict[str, Run]:
        """Run ``prompt`` by each of ``agents`` at once, each its own run (its own
        conversation, actions and budget); returns column name -> run, in the order
        given. ``agents`` is a mapping name -> Agent, or a list (each named by its name,
        else its model's). ``hooks`` gives a column its own hooks (its events, binds).
        A column that fails is that column's run ``failed`` (its ``reason`` says why);
        the others go on. Cancelling it cancels every column."""
        columns = compare_columns(agents)
        stray = sorted(str(name) for name in hooks or {} if name not in columns)
        if stray:  # a typo would run that column without its hooks, silently
            raise ValueError(f"hooks name no column: {', '.join(stray)}; the columns are "
                             f"{', '.join(map(str, columns))}")  # fmt: skip
        runs = {name: Run() for name in columns}

        async def one(name: str, agent: Agent) -> None:
            given = (hooks or {}).get(name)
            try:
                await agent.run(prompt, namespace=namespace, hooks=given, run=runs[name],
                                store=store)  # fmt: skip
            except Exception as exc:  # this column's failure stays in this column
                failed(runs[name], exc)

        async with anyio.create_task_group() as group:
            for name, agent in columns.items():
                group.start_soon(one, name, agent)
        return runs

    @staticmethod
    def compare(
        prompt: str, agents: Mapping[str, Agent] | Sequence[Agent], **options: Any
    ) -> dict[str, Run]:
        """``acompare`` for plain scripts and notebook cells (as ``run_sync``)."""
        with anyio.from_thread.start_blocking_portal() as portal:
            return portal.call(functools.partial(Agent.acompare, prompt, agents, **options))

    async def run_nested(self, task: str, *, scheduler: Scheduler, node: ActionNode) -> Any:
        """Run as the ``agent`` action ``node`` of ``scheduler``'s run: its own loop, its
        events forwarded under ``node`` (``Nested``); its answer is the action's output
        (the validated object when it has an ``output_type``: a typed sub-agent hands
        its caller data, not text) and its run is ``node.subrun``."""
        model = self._model(scheduler.model, node.id)
        conversation = Conversation()
        child = Run()
        node.subrun = child
        space = scheduler.namespace
        feeds = self.feeds if self.feeds is not None else FeedSet()
        child.reach = ChainMap(feeds, space)  # type: ignore[arg-type]
        spec = scheduler.spec.nested(
            registry=self.callable(),
            model=model,
            on_event=lambda event: scheduler.emit(Nested(node.id, event)),
            feeds=feeds,
            internal=self.internal if self.internal is not None else InternalPolicy(),
            retry=self.retry if self.retry is not None else RetryPolicy(),
            max_depth=min(self.max_depth, scheduler.max_depth),
            # The caller's approval rules hold inside, with this agent's own added; its
            # questions name ``parent/inner`` (an inner "a1" is not the caller's "a1").
            rules=scheduler.rules.within(
                node.id, self.approval, names=self.approve, timeout=self.approve_timeout
            ),
            request=request_fields(self, scheduler.request),
            agent=self.name,
            conversation=conversation.id,
            sampling=self._sampling(),
        )
        nested = Scheduler(spec, run=child, limiter=scheduler.limiter)
        loop = Loop(
            self,
            model=model,
            conversation=conversation,
            scheduler=nested,
            feeds=feeds,
            variables=describe_variables(space, [n for n in find_references(task) if n in space]),
            taken_ids=(),
        )
        active = feeds.active(registry=nested.registry, namespace=space, model=model)
        async with nested, active:
            await loop.go(task)
        if child.status != "completed":
            raise AgentDidNotAnswer(self.name or "agent", child.status, child.reason)
        if self.typed is not None:
            return child.output
        return child.answer  # as the caller's run is answered: final reply, $name filled

    # ---- helpers ----------------------------------------------------------------------

    def _model(self, fallback: StreamingModel | None, action_id: str | None = None) -> Any:
        model = self.model if self.model is not None else fallback
        if model is None:
            raise NoModelConfigured("agent", self.name or "(unnamed)")
        if action_id is not None and self.model is None:
            # A nested agent on the caller's model: a script answers it from its own
            # "--- reply to ID ---" section, never with the caller's next turn.
            sub = getattr(model, "for_action", None)
            if sub is not None:
                model = sub(action_id)
        return model

    def _scheduler(
        self,
        model: StreamingModel,
        space: Mapping[str, Any],
        feeds: FeedSet,
        hooks: RunHooks,
        run: Run | None,
        conversation: Conversation,
    ) -> Scheduler:
        spec = RunSpec(
            registry=self.callable(),
            namespace=space,
            model=model,
            feeds=feeds,
            internal=self.internal if self.internal is not None else InternalPolicy(),
            retry=self.retry if self.retry is not None else RetryPolicy(),
            rules=Rules.of(
                self.approval, names=self.approve, timeout=self.approve_timeout, ask=hooks.ask
            ),
            request=dict(request_fields(self)),
            on_event=hooks.on_event,
            bind=hooks.bind,
            background=hooks.background,
            observers=hooks.observers,
            max_depth=self.max_depth,
            agent=self.name,
            conversation=conversation.id,
            sampling=self._sampling(),
            spend=Spend(Budget.parse(self.budget)),
        )
        return Scheduler(spec, run=run)

    def _sampling(self) -> dict[str, Any]:
        settings = {"temperature": self.temperature, "max_tokens": self.max_tokens}
        return {name: value for name, value in settings.items() if value is not None}

    def __repr__(self) -> str:
        shown = [repr(self.name)] if self.name is not None else []
        if self.model is not None:
            shown.append(f"model={getattr(self.model, 'name', self.model)!r}")
        if self.tools is not None:
            shown.append(f"tools={[_tool_name(t) for t in self.tools]!r}")
        shown.append(f"dialect={self.dialect!r}")
        if self.typed is not None:
            shown.append(f"output_type={self.typed.name}")
        return f"Agent({', '.join(shown)})"


def _check(agent: Agent) -> None:
    """Refuse a configuration that could only fail later, with a sentence saying why."""
    if agent.name is not None and (not isinstance(agent.name, str) or not agent.name.strip()):
        raise ValueError(f"an agent's name must be a non-empty string; got {agent.name!r}")
    if agent.name is not None and any(c.isspace() for c in agent.name):
        raise ValueError(f"an agent's name cannot contain spaces; got {agent.name!r}")
    if agent.dialect not in _DIALECTS:
        raise ValueError(
            f"unknown protocol dialect {agent.dialect!r}; choose one of: {', '.join(_DIALECTS)}"
        )
    for label, value in (("max_turns", agent.max_turns), ("result_limit", agent.result_limit)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{label} must be a whole number, at least 1; got {value!r}")
    if agent.tools is not None:
        if isinstance(agent.tools, str):
            raise TypeError(
                "tools must be a list of names or functions, not one string: "
                f"tools=[{agent.tools!r}]"
            )
        for entry in agent.tools:
            if not isinstance(entry, str) and not callable(entry):
                raise TypeError(f"tools holds {entry!r}, which is neither a name nor a function")
    if isinstance(agent.approve, str):
        raise TypeError(f"approve names tools: approve={{{agent.approve!r}}}, not one string")
    if not callable(agent.approval) and agent.approval not in ("ask", "allow", "deny"):
        raise ValueError(
            "approval must be 'ask', 'allow', 'deny' or a function (node) -> bool; "
            f"got {agent.approval!r}"
        )
    budget = agent.context_tokens
    if budget is not None and (
        isinstance(budget, bool) or not isinstance(budget, int) or budget < 256
    ):
        raise ValueError(
            f"context_tokens must be a whole number of tokens, at least 256; got {budget!r}"
        )
    timeout = agent.approve_timeout
    if timeout is not None and (isinstance(timeout, bool) or not timeout > 0):
        raise ValueError(f"approve_timeout must be a number of seconds above 0; got {timeout!r}")
    check_request(agent.request, "Agent(request=...)")
    _check_budget(agent)
    _check_constrain(agent)
    _check_output(agent)
    model = agent.model
    if model is not None and (isinstance(model, str) or not hasattr(model, "stream")):
        raise TypeError(
            f"model must be a model object such as OpenAIModel({model!r}) from "
            f"cortex_jupyter.models, not {type(model).__name__} {model!r}"
        )


Registry.make_agent = Agent  # ``Registry.add_agent`` makes agents of this loop


def compare_columns(agents: Mapping[str, Agent] | Sequence[Agent]) -> dict[str, Agent]:
    """``Agent.compare``'s columns: name -> agent (a list's agents by their names, else
    their models' names); a name twice, or no agent at all, is refused."""
    if isinstance(agents, Mapping):
        pairs = list(agents.items())
    else:
        pairs = [(a.name or str(getattr(a.model, "name", "") or f"agent {i + 1}"), a)
                 for i, a in enumerate(agents)]  # fmt: skip
    columns: dict[str, Agent] = {}
    for name, agent in pairs:
        if not isinstance(agent, Agent):
            raise TypeError(f"compare takes Agents; column {name!r} is {type(agent).__name__}")
        if name in columns:
            raise ValueError(f"compare names the column {name!r} twice; give a mapping of names")
        columns[name] = agent
    if not columns:
        raise ValueError("compare needs at least one agent")
    return columns


def failed(run: Run, exc: BaseException) -> None:
    """Mark ``run`` failed by ``exc`` (an unexpected error, not the model's): its status,
    end and one line of reason."""
    run.status = "failed"
    run.ended = run.ended or time.monotonic()
    text = shorten(" ".join(str(exc).split()), 300)  # redacted, then cut
    run.reason = run.reason or (f"{type(exc).__name__}: {text}" if text else type(exc).__name__)


def _observed(hooks: RunHooks, recording: RunObserver) -> RunHooks:
    """``hooks`` with ``recording`` (a store keeping the run) among the run's observers."""
    return dataclasses.replace(hooks, observers=(*hooks.observers, recording))


def _tool_name(entry: str | Callable[..., Any]) -> str:
    return entry if isinstance(entry, str) else getattr(entry, "__name__", repr(entry))


def _check_budget(agent: Agent) -> None:
    try:
        Budget.parse(agent.budget)
    except ValueError as exc:
        raise ValueError(f"Agent(budget=...): {exc}") from None


def _check_output(agent: Agent) -> None:
    retries = agent.output_retries
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ValueError(f"output_retries must be a whole number, 0 or more; got {retries!r}")
    agent.__dict__.pop("typed", None)  # a copy (``with_options``) makes its own
    _ = agent.typed  # made now, so a type pydantic cannot use is refused here


def _check_constrain(agent: Agent) -> None:
    constrain = agent.constrain
    if constrain is False:
        return
    if constrain is not True and constrain not in CONSTRAIN_FORMS:
        forms = ", ".join(repr(f) for f in CONSTRAIN_FORMS)
        raise ValueError(f"constrain must be True, False, {forms}; got {constrain!r}")
    if agent.native_tools:
        raise ValueError(
            "constrain and native_tools cannot go together (servers refuse a grammar beside "
            "tools=): use one or the other"
        )
    if agent.dialect not in GRAMMAR_DIALECTS:
        raise ValueError(
            f"constrain has no grammar for the {agent.dialect!r} dialect; use one of: "
            f"{', '.join(GRAMMAR_DIALECTS)}"
        )

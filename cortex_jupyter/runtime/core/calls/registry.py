"""Registries of what actions can call: tools, relics, workflows, llm tasks, agents, internals.

``@tool`` registers a function on the module's default registry (re-exported as
``cortex_jupyter.tool``); a ``Registry`` of your own keeps tests and sessions apart.
Each entry knows its schema (shown to the model) and checks an action's parameters
against its signature before the call, so a wrong call fails with a message that
lists what the function takes.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar, overload

from cortex_jupyter.runtime.core.calls.relics import CacheRelic
from cortex_jupyter.runtime.core.errors import (
    InvalidArguments,
    RegistrationError,
    UnknownAction,
    UnknownFeed,
)
from cortex_jupyter.runtime.core.trust.secrets import safe_repr
from cortex_jupyter.runtime.core.values.schema import (
    Kinds,
    function_schema,
    hint_kinds,
    resolved_hints,
    schema_kinds,
)

REGISTRY_TYPES: tuple[str, ...] = ("tool", "agent", "relic", "workflow", "llm", "internal")
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class ToolSpec:
    """A registered function (a tool, relic method, workflow function, llm task or internal).

    For ``llm`` entries the function builds the prompt; the model's answer is the output.
    ``injected`` names parameters the runtime fills itself (hidden from the model).
    """

    name: str
    type: str
    func: Callable[..., Any]
    description: str
    parameters: dict[str, Any]
    injected: tuple[str, ...] = ()
    #: Ask before it runs (it acts on the world): see ``runtime.scheduler.approval``.
    approve: bool = False
    #: Where a sync tool runs instead of a kernel thread: ``"dask"`` (the session's
    #: cluster) or any ``concurrent.futures.Executor``; see ``runtime.integrations.executors``.
    executor: Any = None

    @functools.cached_property
    def is_async(self) -> bool:
        """Called on the run's loop (a coroutine or async generator function); anything
        else runs in a worker thread."""
        return inspect.iscoroutinefunction(self.func) or inspect.isasyncgenfunction(self.func)

    @functools.cached_property
    def signature(self) -> inspect.Signature:
        return inspect.signature(self.func)

    @functools.cached_property
    def hints(self) -> dict[str, Any]:
        return resolved_hints(self.func)

    def wants(self, name: str) -> Kinds | None:
        """The classes parameter ``name`` accepts by its annotation (None: any value);
        a ``$name`` value is fitted to them (``runtime.core.values.coerce``)."""
        hint = self.hints.get(name)
        return None if hint is None else hint_kinds(hint)

    def takes(self) -> str:
        """The parameters as the model passes them, e.g. ``a: int, b: int = 0``."""
        shown = [p for p in self.signature.parameters.values() if p.name not in self.injected]
        return ", ".join(_describe_param(p) for p in shown) or "no parameters"

    def check(self, params: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        """(args, kwargs) for calling with ``params``; raises ``InvalidArguments``."""
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        missing: list[str] = []
        accepts_extra = False
        names: set[str] = set()
        for param in self.signature.parameters.values():
            if param.name in self.injected:
                continue
            if param.kind is param.VAR_KEYWORD:
                accepts_extra = True
                continue
            if param.kind is param.VAR_POSITIONAL:
                continue
            names.add(param.name)
            if param.name in params:
                if param.kind is param.POSITIONAL_ONLY:
                    args.append(params[param.name])
                else:
                    kwargs[param.name] = params[param.name]
            elif param.default is param.empty:
                missing.append(param.name)
        unexpected = [] if accepts_extra else [k for k in params if k not in names]
        if accepts_extra:
            kwargs.update({k: v for k, v in params.items() if k not in names})
        if missing or unexpected:
            raise InvalidArguments(self.type, self.name, missing, unexpected, self.takes())
        return args, kwargs

    def schema(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
        }


def _describe_param(param: inspect.Parameter) -> str:
    """``a: int = 0``. A default is shown by a bounded repr that never raises and hides
    secrets (a key read from the environment; a repr that raises broke the listing)."""
    empty = inspect.Parameter.empty
    text = str(param.replace(annotation=empty, default=empty))
    default = "" if param.default is empty else safe_repr(param.default, limit=80, items=4)
    if param.annotation is not empty:
        hint = param.annotation
        label = hint if isinstance(hint, str) else inspect.formatannotation(hint)
        return f"{text}: {label}" + (f" = {default}" if default else "")
    return f"{text}={default}" if default else text


@dataclass(frozen=True)
class AgentSpec:
    """A named agent as an action: ``type="agent"`` actions of this name run ``agent``.

    ``agent`` is a ``runtime.loop.agent.Agent`` (typed loosely here: the agent loop sits
    above the registry). The scheduler calls its ``run_nested(task, scheduler=..., node=...)``.
    """

    name: str
    agent: Any
    description: str = ""
    type: str = "agent"

    @property
    def instructions(self) -> str:
        return str(getattr(self.agent, "instructions", None) or "")

    @property
    def parameters(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {
                "task": {"type": "string", "description": "What the agent should do."},
                "context": {"description": "Data the agent may use (shown as text)."},
            },
            "required": ["task"],
            "additionalProperties": False,
        }

    def wants(self, name: str) -> Kinds | None:
        """The JSON types parameter ``name`` declares (``task`` is a string)."""
        return schema_kinds(self.parameters["properties"].get(name))

    def check(self, params: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        missing = [] if "task" in params else ["task"]
        unexpected = [k for k in params if k not in ("task", "context")]
        if missing or unexpected:
            raise InvalidArguments("agent", self.name, missing, unexpected, "task: str, context")
        return [], dict(params)

    def schema(self) -> dict[str, Any]:
        first_line = self.instructions.strip().split("\n", 1)[0]
        return {
            "type": "agent",
            "name": self.name,
            "description": self.description or first_line,
            "parameters": self.parameters,
        }


@dataclass(frozen=True)
class Step:
    """One step of a list workflow: an action without an id.

    ``parameters`` may use ``$name`` for the workflow's own parameters and for the
    ``output_key`` of earlier steps, besides everything an action can reach.
    """

    name: str
    parameters: Mapping[str, Any] = field(default_factory=dict)
    type: str = "tool"
    output_key: str | None = None
    timeout: float | None = None
    retry: int = 0


@dataclass(frozen=True)
class WorkflowSpec:
    """A named list of steps run in order; its output is the last step's output."""

    name: str
    steps: tuple[Step, ...]
    description: str = ""
    type: str = "workflow"

    @property
    def parameters(self) -> dict[str, Any]:
        return {"type": "object", "additionalProperties": True}

    def check(self, params: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        return [], dict(params)

    def schema(self) -> dict[str, Any]:
        steps = " -> ".join(step.name for step in self.steps)
        return {
            "type": "workflow",
            "name": self.name,
            "description": self.description or f"Runs {steps}.",
            "parameters": self.parameters,
        }


Spec = ToolSpec | AgentSpec | WorkflowSpec


class Registry:
    """Everything actions may call, by action type and name."""

    #: Makes an agent for ``add_agent`` (``Agent`` of the agent loop, which sits above the
    #: registry and passes itself in when it is imported).
    make_agent: ClassVar[Callable[..., Any] | None] = None
    #: Reads an MCP resource's text (server, uri) for a ``source: mcp`` context feed: the
    #: MCP integration passes its reader in when it is loaded (no server, no reader).
    read_resource: ClassVar[Callable[[str, str], Awaitable[str]] | None] = None
    #: Runs a tool's function off the kernel's process (executor, func, args, kwargs) for a
    #: tool registered with ``executor=``: the executors integration passes it in.
    run_elsewhere: ClassVar[Callable[..., Awaitable[Any]] | None] = None

    def __init__(self, *, builtins: bool = True, cache: CacheRelic | None = None) -> None:
        self._entries: dict[str, dict[str, Spec]] = {t: {} for t in REGISTRY_TYPES}
        if builtins:
            _add_builtins(self, cache if cache is not None else CacheRelic())

    @overload
    def tool(self, func: F, /) -> F: ...

    @overload
    def tool(
        self,
        /,
        *,
        name: str | None = None,
        type: str = "tool",
        description: str | None = None,
        approve: bool = False,
        executor: Any = None,
    ) -> Callable[[F], F]: ...

    def tool(
        self,
        func: F | None = None,
        /,
        *,
        name: str | None = None,
        type: str = "tool",
        description: str | None = None,
        approve: bool = False,
        executor: Any = None,
    ) -> F | Callable[[F], F]:
        """Register a function, bare (``@tool``) or configured (``@tool(name=..., type=...)``).

        ``approve=True``: its actions wait for approval before they run (a tool that
        sends, deletes or spends). ``executor="dask"`` (or any
        ``concurrent.futures.Executor``) runs it off the kernel's process. The function is
        returned unchanged, so it stays callable as before.
        """

        def decorate(fn: F) -> F:
            self.register(
                fn, name=name, type=type, description=description, approve=approve,
                executor=executor,
            )  # fmt: skip
            return fn

        return decorate(func) if func is not None else decorate

    def register(
        self,
        func: Callable[..., Any],
        *,
        name: str | None = None,
        type: str = "tool",
        description: str | None = None,
        injected: Sequence[str] = (),
        approve: bool = False,
        executor: Any = None,
    ) -> ToolSpec:
        """Register ``func`` as an action of ``type`` (replacing one of the same name)."""
        if not callable(func):
            raise RegistrationError(repr(func), "it is not callable")
        if type not in ("tool", "relic", "workflow", "llm", "internal"):
            raise RegistrationError(
                repr(func),
                f"type {type!r} is not one of tool, relic, workflow, llm, internal "
                "(register agents with add_agent)",
            )
        label = name if name is not None else getattr(func, "__name__", "")
        if not label or label == "<lambda>":
            raise RegistrationError(repr(func), "it has no usable name; pass name=...")
        if executor is not None and (
            inspect.iscoroutinefunction(func) or inspect.isasyncgenfunction(func)
        ):
            raise RegistrationError(
                label, "executor= runs sync functions elsewhere; this one is async"
            )
        if executor is not None and executor != "dask" and not hasattr(executor, "submit"):
            raise RegistrationError(
                label, f"executor must be 'dask' or a concurrent.futures.Executor, not {executor!r}"
            )
        try:
            doc, params = function_schema(func, skip=injected)
        except (TypeError, ValueError) as exc:
            raise RegistrationError(label, f"its signature cannot be read ({exc})") from exc
        spec = ToolSpec(
            name=label,
            type=type,
            func=func,
            description=description if description is not None else doc,
            parameters=params,
            injected=tuple(injected),
            approve=approve,
            executor=executor,
        )
        self._entries[type][label] = spec
        return spec

    def add_relic(
        self, name: str, relic: object, methods: Iterable[str] | None = None
    ) -> list[ToolSpec]:
        """Register a relic object's public methods as relic actions ``name.method``."""
        chosen = (
            list(methods)
            if methods is not None
            else [m for m in dir(relic) if not m.startswith("_") and m != "close"]
        )
        specs = []
        for method in chosen:
            func = getattr(relic, method, None)
            if callable(func):
                specs.append(self.register(func, name=f"{name}.{method}", type="relic"))
        if not specs:
            raise RegistrationError(name, "the relic has no public methods to register")
        return specs

    def add_agent(
        self,
        name: str,
        instructions: str,
        *,
        model: Any = None,
        description: str = "",
        tools: Sequence[str | Callable[..., Any]] | None = None,
    ) -> AgentSpec:
        """Register an agent (a shortcut for ``Agent(name, ..., registry=this)``):
        ``type="agent"`` actions named ``name`` run its own loop, nested."""
        make = Registry.make_agent
        if make is None:
            raise RegistrationError(name, "no agent loop is loaded: import cortex_jupyter first")
        make(
            name, instructions=instructions, model=model, description=description,
            tools=tools, registry=self,
        )  # fmt: skip
        spec = self.get("agent", name)
        assert isinstance(spec, AgentSpec)
        return spec

    def add_workflow(
        self, name: str, steps: Sequence[Step | Mapping[str, Any]], *, description: str = ""
    ) -> WorkflowSpec:
        """Register a list workflow; steps are ``Step``s or dicts of the same fields."""
        parsed = tuple(s if isinstance(s, Step) else Step(**s) for s in steps)
        if not parsed:
            raise RegistrationError(f"workflow {name!r}", "it has no steps")
        spec = WorkflowSpec(name, parsed, description)
        self._entries["workflow"][name] = spec
        return spec

    def add(self, spec: Spec) -> Spec:
        """Register a ready-made entry under ``spec.type`` and ``spec.name`` (replacing one
        of the same name): for tools that are not Python functions, such as an MCP
        server's, whose schema comes with them and whose ``check`` validates against it."""
        if spec.type not in REGISTRY_TYPES:
            raise RegistrationError(spec.name, f"type {spec.type!r} is not a registry type")
        if not spec.name:
            raise RegistrationError(repr(spec), "it has no name")
        self._entries[spec.type][spec.name] = spec
        return spec

    def subset(self, entries: Iterable[str | Callable[..., Any]]) -> Registry:
        """A registry of just ``entries``: names of registered entries (of any type) or
        functions (registered ones by their entry; others are registered here as tools).
        What an ``Agent(tools=[...])`` may call. Raises ``UnknownAction`` for a name
        nothing is registered under."""
        out = Registry(builtins=False)
        for entry in entries:
            if isinstance(entry, str):
                found = [kinds[entry] for kinds in self._entries.values() if entry in kinds]
                if not found:
                    raise UnknownAction("tool", entry, self.names("tool"))
                for spec in found:
                    out.add(spec)
                continue
            spec_for = [
                spec
                for kinds in self._entries.values()
                for spec in kinds.values()
                if isinstance(spec, ToolSpec) and spec.func is entry
            ]
            if spec_for:
                out.add(spec_for[0])
            else:
                out.register(entry)
        return out

    def get(self, type: str, name: str) -> Spec:
        """The entry for an action; raises ``UnknownAction`` listing the names that exist."""
        entries = self._entries.get(type, {})
        if name not in entries:
            raise UnknownAction(type, name, entries)
        return entries[name]

    def names(self, type: str) -> list[str]:
        return sorted(self._entries.get(type, {}))

    def remove(self, type: str, name: str) -> None:
        self._entries.get(type, {}).pop(name, None)

    def schemas(self, types: Iterable[str] = REGISTRY_TYPES) -> list[dict[str, Any]]:
        """What the model is shown: one schema per entry, by type then name."""
        return [
            self._entries[t][n].schema() for t in types for n in sorted(self._entries.get(t, {}))
        ]

    def __contains__(self, item: object) -> bool:
        return (
            isinstance(item, tuple) and len(item) == 2 and item[1] in self._entries.get(item[0], {})
        )


# ---- built-in entries -------------------------------------------------------------


def _complete(prompt: str) -> str:
    """Send a prompt to the model and return its answer.

    Args:
        prompt: The whole prompt.
    """
    return prompt


def _summarise(text: str, focus: str | None = None) -> str:
    """Summarise a text in a few sentences.

    Args:
        text: The text to summarise.
        focus: What the summary should concentrate on.
    """
    extra = f" Concentrate on: {focus}." if focus else ""
    return f"Summarise the following text in a few sentences.{extra}\n\n{text}"


def _classify(text: str, labels: list[str]) -> str:
    """Classify a text into one of the given labels; the answer is the label.

    Args:
        text: The text to classify.
        labels: The labels to choose from.
    """
    options = ", ".join(labels)
    return f"Answer with exactly one of these labels: {options}.\n\nText:\n{text}"


def _add_feed(feeds: MutableMapping[str, str], id: str, text: str) -> str:
    """Add a context feed the agent sees from now on.

    Args:
        id: The feed's id.
        text: Its content.
    """
    feeds[id] = text
    return id


def _update_feed(feeds: MutableMapping[str, str], id: str, text: str) -> str:
    """Replace the content of an existing context feed.

    Args:
        id: The feed's id.
        text: Its new content.
    """
    if id not in feeds:
        raise UnknownFeed(id, feeds)
    feeds[id] = text
    return id


def _remove_feed(feeds: MutableMapping[str, str], id: str) -> bool:
    """Remove a context feed.

    Args:
        id: The feed's id.
    """
    return feeds.pop(id, None) is not None


def _add_builtins(registry: Registry, cache: CacheRelic) -> None:
    registry.add_relic("cache", cache, methods=("get", "set", "delete"))
    registry.register(_complete, name="complete", type="llm")
    registry.register(_summarise, name="summarise", type="llm")
    registry.register(_classify, name="classify", type="llm")
    for func, name in ((_add_feed, "add_feed"), (_update_feed, "update_feed")):
        registry.register(func, name=name, type="internal", injected=("feeds",))
    registry.register(_remove_feed, name="remove_feed", type="internal", injected=("feeds",))


default_registry = Registry()
tool = default_registry.tool

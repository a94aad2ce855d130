"""What one ``%%cortex`` cell asked for, and which agent and model answer it.

Its own module because the choice is pure: given the cell's options, the session's
registry, feeds and endpoints, it says which ``Agent`` runs (the session's defaults, or
a registered agent with the options the cell gave over its own) and which model that
agent asks. Nothing here runs anything or touches the notebook.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from cortex_jupyter import models
from cortex_jupyter.runtime import Agent, Registry
from cortex_jupyter.runtime.core.calls.registry import AgentSpec
from cortex_jupyter.runtime.core.cost.budget import Budget
from cortex_jupyter.runtime.core.errors import TranscriptError
from cortex_jupyter.runtime.core.model.chunks import StreamingModel
from cortex_jupyter.runtime.core.trust.secrets import REDACTED, redact
from cortex_jupyter.runtime.loop.feeds import FeedSet
from cortex_jupyter.runtime.loop.request import merge_requests
from cortex_jupyter.session.record import CortexRunError

#: Model name -> (base URL, API key) of a server that answers for it.
Endpoints = Mapping[str, tuple[str, str]]
#: The API key ``%cortex local start`` registers its endpoint with: the model that server
#: serves runs on this machine and costs nothing.
LOCAL_KEY = "local"
LOCAL_MODEL = "the local model (%cortex local start)"
#: A cell's options that are the ``Agent`` settings of the same name.
AGENT_SETTINGS = (
    "dialect",
    "max_turns",
    "native_tools",
    "constrain",
    "context_tokens",
    "approval",
    "approve_timeout",
    "budget",
)
#: Of those, the ones a cell's line may give over a named agent's own (``--agent``).
LINE_SETTINGS = ("dialect", "max_turns", "native_tools", "constrain", "budget")


@dataclass(frozen=True)
class CellOptions:
    """What one ``%%cortex`` cell asked for (already checked by the magic)."""

    model: str
    dialect: str = "cortex"
    script: bool = False
    chunk_size: int = 16
    delay: float = 0.0
    replay: str | None = None
    speed: float = 1.0
    fresh: bool = False
    max_turns: int = 10
    temperature: float | None = None
    max_tokens: int | None = None
    native_tools: bool = False
    #: ``--constrain``: False, or the grammar form ("gbnf", "vllm"; ``runtime.loop.grammar``).
    constrain: bool | str = False
    display: str = "auto"
    #: ``--agent NAME``: run a registered ``Agent`` instead of the session's defaults.
    agent: str | None = None
    #: The options the cell's line gave explicitly (they override a named agent's own).
    given: frozenset[str] = frozenset()
    #: ``--overwrite``: an ``output_key`` may replace a notebook name cortex did not bind.
    overwrite: bool = False
    #: The context budget in tokens (None: the model's window, else 32,000).
    context_tokens: int | None = None
    #: Approval policy for tools marked approve=True, and how long to wait for it.
    approval: Any = "ask"
    approve_timeout: float | None = None
    #: Extra request fields: ``CortexMagics.request``, and the cell's ``--request`` (which
    #: goes over the agent's own; see ``runtime.loop.request`` for the whole order).
    request_default: Mapping[str, Any] = field(default_factory=dict)
    request: Mapping[str, Any] = field(default_factory=dict)
    #: ``--budget`` or ``CortexMagics.budget``: the most the run may spend (None: no limit).
    budget: Budget | None = None
    #: ``--output T``: the answer's type as written on the line (evaluated in the
    #: notebook when the cell runs: ``session.notebook``); None: a text answer.
    output: str | None = None
    #: ``--output-retries N``: how often an answer that does not fit is sent back.
    output_retries: int = 1
    #: ``--output-key NAME``: the notebook name the validated answer is bound to.
    output_key: str | None = None
    #: ``--compare a,b,c``: the columns of a side-by-side cell (``session.compare``).
    compare: str | None = None
    #: ``--repeat N``: how often each column of a ``--compare`` cell runs.
    repeat: int = 1
    #: ``--compare-budget``: the most a ``--compare`` cell spends, all its runs together.
    compare_budget: Budget | None = None


def cell_agent(
    body: str,
    options: CellOptions,
    registry: Registry,
    feeds: FeedSet | None,
    endpoints: Endpoints,
    output_type: Any = None,
) -> Agent:
    """The agent a cell runs: the session's defaults (the cell's options, the
    session's registry and feeds) or, with ``--agent NAME``, that registered agent
    with the options the cell gave explicitly (and the cell's model unless it has
    its own; a script or replay always stands in for the model). ``output_type`` is
    the type ``--output`` named (a named agent keeps its own without one)."""
    model = cell_model(body, options, registry, endpoints)
    if options.agent is None:
        return Agent(
            model=model,
            registry=registry,
            feeds=feeds,
            request=merge_requests(options.request_default, options.request),
            output_type=output_type,
            output_retries=options.output_retries,
            **{name: getattr(options, name) for name in AGENT_SETTINGS},
            **sampling(options, None),
        )
    agent = named_agent(registry, options.agent)
    offline = options.script or options.replay is not None
    changes: dict[str, Any] = {
        "model": model if offline or agent.model is None or "model" in options.given
        else agent.model,
    }  # fmt: skip
    if agent.feeds is None:
        changes["feeds"] = feeds
    for name in LINE_SETTINGS:
        if name in options.given:
            changes[name] = getattr(options, name)
    if agent.budget is None and "budget" not in changes:
        changes["budget"] = options.budget  # CortexMagics.budget holds for it too
    if options.output is not None:
        changes["output_type"] = output_type
    if "output_retries" in options.given:
        changes["output_retries"] = options.output_retries
    changes["request"] = merge_requests(options.request_default, agent.request, options.request)
    changes.update(sampling(options, agent))
    return agent.with_options(**changes)


def named_agent(registry: Registry, name: str) -> Agent:
    """The agent registered as ``name``; ``CortexRunError`` naming the known ones."""
    names = registry.names("agent")
    if name not in names:
        known = ", ".join(names) or "none yet"
        raise CortexRunError(
            f"no agent named {name!r}; registered agents: {known}. Create one with "
            f"cortex_jupyter.Agent({name!r}, instructions=...)."
        )
    spec = registry.get("agent", name)
    assert isinstance(spec, AgentSpec)
    return cast(Agent, spec.agent)


def cell_model(
    body: str, options: CellOptions, registry: Registry, endpoints: Endpoints
) -> StreamingModel:
    """The model a cell's agent asks: a script or replay stands in for any; a named
    agent's own model unless the cell gave ``--model``; else the model named, at the
    endpoint that answers for it."""
    if options.agent is not None and not (options.script or options.replay):
        agent = named_agent(registry, options.agent)
        if agent.model is not None and "model" not in options.given:
            return agent.model  # its own model: no key needed for the session's
    try:
        if options.script:
            return models.ScriptModel(body, chunk_size=options.chunk_size, delay=options.delay)
        if options.replay is not None:
            return _replay(options.replay, options.speed)
        # ``models.OpenAIModel`` imports openai on first use: only a real model needs it.
        base_url, api_key = endpoints.get(options.model, (None, None))
        free = LOCAL_MODEL if api_key == LOCAL_KEY else None
        return models.OpenAIModel(options.model, base_url=base_url, api_key=api_key, free=free)
    except (models.ModelError, OSError, ValueError) as exc:
        raise CortexRunError(str(exc)) from None


def _replay(path: str, speed: float) -> StreamingModel:
    """The model that streams the transcript at ``path`` again; a transcript that cannot
    be read (cut short, edited by hand, another version's) is one line naming it."""
    try:
        return models.ReplayModel(path, speed=speed)
    except TranscriptError as exc:
        raise CortexRunError(redact(f"the transcript {path} cannot be replayed: {exc}")) from None


def sampling(options: CellOptions, agent: Agent | None) -> dict[str, Any]:
    """``temperature`` and ``max_tokens`` for a cell's agent (``agent``: the named one).

    Typed on the line, they win over everything. A field of the same name in the cell's
    ``--request`` wins over a default (``CortexMagics.temperature``) or the agent's own
    (the cell is more specific); so does ``CortexMagics.request`` over the trait.
    """
    chosen: dict[str, Any] = {}
    for name in ("temperature", "max_tokens"):
        if name in options.given:
            chosen[name] = getattr(options, name)
        elif name in options.request or (agent is None and name in options.request_default):
            chosen[name] = None  # the request's field goes through
        elif agent is None:
            chosen[name] = getattr(options, name)
    return chosen


def model_name(agent: Agent) -> str:
    """The model's name as a view's header shows it."""
    return str(getattr(agent.model, "name", "") or "model")


#: The cell options a stored run keeps (``CortexMagics.store``), beside the agent's.
STORED_OPTIONS = (
    "model", "dialect", "script", "replay", "fresh", "max_turns", "temperature", "max_tokens",
    "native_tools", "constrain", "agent", "overwrite", "context_tokens", "request",
    "output", "output_retries", "output_key", "budget",
)  # fmt: skip


def stored_cell(defaults: CellOptions, settings: Mapping[str, Any]) -> CellOptions:
    """The options of a stored run's cell (``cell_settings`` read back), ``defaults``
    (today's settings) for what the store does not keep (chunk size, display...)."""
    changes = {name: settings[name] for name in STORED_OPTIONS if name in settings}
    if "budget" in changes:  # kept as typed ("2000tok", 0.05): a resumed run keeps it
        changes["budget"] = Budget.parse(changes["budget"])
    changes.update(fresh=False, request_default={}, given=frozenset(settings.get("given", ())))
    return dataclasses.replace(defaults, **changes)


def cell_settings(options: CellOptions) -> dict[str, Any]:
    """The cell's options as a stored run keeps them (plain values; the store redacts)."""
    settings = {name: getattr(options, name) for name in STORED_OPTIONS}
    settings["request"] = dict(merge_requests(options.request_default, options.request))
    settings["given"] = sorted(options.given)
    budget = options.budget
    if budget is not None:
        settings["budget"] = budget.limit if budget.unit == "usd" else f"{budget.limit:.0f}tok"
    return settings


def redacted_fields(request: Mapping[str, Any]) -> list[str]:
    """The fields of a stored run's request the store kept redacted (a credential, or a
    text holding one, in a value or in a key at any depth, the field's own name too):
    what it holds now is the placeholder, never to be sent."""
    return [
        name
        for name, value in request.items()
        if _holds_placeholder(name) or _holds_placeholder(value)
    ]


def _holds_placeholder(value: Any) -> bool:
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str) and REDACTED in item:
            return True
        if isinstance(item, Mapping):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            pending.extend(item)
    return False


def live_request(
    run_id: str,
    options: CellOptions,
    live: Mapping[str, Any],
    agent: Mapping[str, Any],
    environ: Mapping[str, str],
) -> CellOptions:
    """A resumed run's ``options`` with every field its store kept redacted given again
    from this session: ``live`` (``CortexMagics.request`` now), else the ``--agent``'s own
    ``Agent(request=...)`` (``agent``), else the environment variable of the field's name
    in capitals (``api_token``: ``API_TOKEN``; a field that held an object or a list read
    from it as JSON). A field whose name was a secret is the one of ``live`` or ``agent``
    that the store would name so. A field none of them gives is refused in one sentence
    naming it and how to give it (``CortexRunError``): the placeholder is never sent."""
    request = dict(options.request)
    missing = []
    for name in redacted_fields(request):
        kept = request.pop(name)
        given = _given_name(name, live)
        if given is not None:
            request[given] = live[given]
        elif _given_name(name, agent) is not None:
            continue  # the agent's own value goes through (cell_agent merges it)
        elif REDACTED not in name and name.upper() in environ:
            request[name] = _from_environment(run_id, name, kept, environ[name.upper()])
        else:
            missing.append(name)
    if missing:
        raise CortexRunError(_not_given(run_id, missing))
    return dataclasses.replace(options, request=request)


def _given_name(stored: str, source: Mapping[str, Any]) -> str | None:
    """The field of ``source`` the store kept as ``stored``: the same name, or, when the
    name itself was redacted, the one that redacts to it now."""
    if stored in source:
        return stored
    if REDACTED in stored:
        return next((k for k in source if isinstance(k, str) and redact(k) == stored), None)
    return None


def _from_environment(run_id: str, name: str, kept: Any, text: str) -> Any:
    """Field ``name`` given again by its environment variable's ``text``: as it is for a
    field that held a text, read as JSON for one that held an object or a list."""
    if isinstance(kept, str):
        return text
    want = "an object" if isinstance(kept, Mapping) else "a list"
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if isinstance(value, dict if isinstance(kept, Mapping) else list):
        return value
    raise CortexRunError(
        f"%cortex resume {run_id}: the request field {name!r} of its cell held {want}, "
        f"and the environment variable {name.upper()} is not {want} in JSON; set it to "
        "one, or give the field with %config CortexMagics.request, then resume again"
    )


def _not_given(run_id: str, missing: list[str]) -> str:
    many = len(missing) > 1
    fields = ", ".join(repr(name) for name in missing)
    example = ", ".join(f"{name!r}: ..." for name in missing)
    named = [name.upper() for name in missing if REDACTED not in name]
    environment = f" (or the environment variable {', '.join(named)})" if named else ""
    return (
        f"%cortex resume {run_id}: the request field{'s' if many else ''} "
        f"{fields} of its cell {'were' if many else 'was'} kept redacted in "
        f"the store and {'are' if many else 'is'} not sent as the placeholder; "
        f"give {'them' if many else 'it'} again with "
        f"%config CortexMagics.request = {{{example}}}{environment}, then resume again"
    )

"""The work of the ``%cortex`` line commands: the reports they print and what they change.

The magic parses a command's words and calls one function here, so the magic stays a
list of commands and their arguments (STYLE.md: parse, call, return). Each function
prints what a person asked to see (secrets redacted, long values bounded) or does what
they asked, and says so in one line; a problem with what was asked for is a
``UsageError`` that reads like a sentence, a problem out in the world (a server that
did not start) one ``cortex:`` line on stderr. ``%cortex mcp`` is a small command line
of its own, parsed here as a whole.

The live model (``local``) and the evaluation are imported by the command that uses
them: together they would add about 0.05 s to ``%load_ext`` (of about 0.55 s).
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic_arguments import MagicArgumentParser

from cortex_jupyter import mcp, store
from cortex_jupyter.runtime import Registry
from cortex_jupyter.runtime.core.calls.registry import REGISTRY_TYPES
from cortex_jupyter.runtime.core.cost.budget import Budget
from cortex_jupyter.runtime.core.errors import CortexRuntimeError
from cortex_jupyter.runtime.core.trust.secrets import redact, safe_repr, shorten
from cortex_jupyter.runtime.integrations import executors
from cortex_jupyter.runtime.integrations.mcp import DEFAULT_TIMEOUT
from cortex_jupyter.runtime.loop.conversation import Conversation
from cortex_jupyter.runtime.loop.prompt import system_prompt
from cortex_jupyter.session import (
    RUN_VARIABLE,
    CellOptions,
    CortexRunError,
    NotebookRun,
    Session,
)
from cortex_jupyter.session.cell import LOCAL_KEY, live_request, named_agent, stored_cell

if TYPE_CHECKING:
    from cortex_jupyter.display.listing import ToolLine
    from cortex_jupyter.runtime.integrations.mcp import ServerStatus

MCP_COMMANDS = ("add", "list", "remove")
MCP_USAGE = (
    "%cortex mcp add NAME -- COMMAND [ARG ...]   start a stdio server\n"
    "%cortex mcp add NAME URL [--header 'Authorization: Bearer $VAR' ...]   "
    "connect to a streamable-HTTP server\n"
    "%cortex mcp add --config FILE   every server of an mcpServers file (JSON or YAML)\n"
    "%cortex mcp list [NAME]   servers, state and tools (with NAME: its stderr too)\n"
    "%cortex mcp remove NAME   close a server and unregister its tools"
)
#: ``$NAME`` in a header or env value: the environment variable, read when connecting.
_ENV_REFERENCE = re.compile(r"\$(?=[A-Za-z_])([A-Za-z_][A-Za-z0-9_]*)")


def complain(text: str) -> None:
    """One ``cortex:`` line on stderr: the cell goes on, the kernel keeps working."""
    print(redact(f"cortex: {text}"), file=sys.stderr)


# ---- the run store ------------------------------------------------------------------

RUNS_HEADINGS = ("id", "when", "model", "status", "turns", "actions", "tokens", "cost", "prompt")


def show_runs(
    text: str | None, limit: int, *, session: Session | None = None, as_text: bool = False
) -> None:
    """``%cortex runs [TEXT] [--limit N] [--text]``: the stored runs, newest first. In a
    notebook a table whose ids open each run in place (``display.runs_widget``), with a
    static copy for saved notebooks; in a terminal, or with ``as_text``, text."""
    from cortex_jupyter.display.listing import runs_html, runs_text
    from cortex_jupyter.display.static import STATIC_CLASS, SWITCH_CSS

    try:
        found = store.runs(text, limit)
    except store.StoreUnavailable as exc:
        complain(f"%cortex runs: {exc}")
        return
    if as_text or not found:
        print(runs_text(found, query=text, more=found.more))
        return
    from IPython.display import display

    copy = runs_html(found, query=text, more=found.more)
    bundle = {
        "text/html": f'<style>{SWITCH_CSS}</style><div class="{STATIC_CLASS}">{copy}</div>',
        "text/plain": runs_text(found, query=text, more=found.more),
    }
    if session is not None and getattr(session.shell, "kernel", None) is not None:
        from cortex_jupyter.display.runs_widget import runs_view

        live = runs_html(found, query=text, more=found.more, buttons=True)
        opened = [row.id for row in found]
        display(runs_view(live, lambda run_id: _open_in_place(session, run_id), opened))
    display(bundle, raw=True)


def _open_in_place(session: Session, run_id: str) -> None:
    """A run's id clicked in ``%cortex runs``: its view (``%cortex open ID``)."""
    open_stored(session, run_id)


def open_stored(session: Session, run_id: str) -> store.StoredRun | None:
    """``%cortex open ID``: the stored run's static view (graph, actions with their
    details, answer); ``_cortex`` is the run from now on. None (and one line) when it
    cannot be opened."""
    from IPython.display import display

    from cortex_jupyter.display import from_run
    from cortex_jupyter.display.static import saved_bundle

    try:
        run = store.open_run(run_id)
    except (store.StoreUnavailable, store.UnknownRun) as exc:
        complain(f"%cortex open {run_id}: {exc}")
        return None
    state = from_run(run, model=run.model or "")
    end = run.ended if run.ended is not None else max(run.event_times, default=run.started)
    data, metadata = saved_bundle(state, run.variables, end)
    display(data, metadata=metadata, raw=True)
    session.shell.user_ns[RUN_VARIABLE] = run
    return run


def resume(
    session: Session,
    run_id: str,
    defaults: CellOptions,
    *,
    force: bool = False,
    budget: Budget | None = None,
) -> NotebookRun | None:
    """``%cortex resume ID [--force]``: go on with a stored run that did not finish, as
    itself (its cell's options over ``defaults``); one line, and None, when there is
    nothing to resume or the run is still going on (in this kernel, or in another that
    still lives). The run is taken for this kernel first (``Store.claim``), then read:
    what another kernel wrote before it let go is part of it. ``force`` takes a run
    marked running on another machine, which cannot be checked; ``budget`` replaces
    its cell's (it holds over the whole run, what it spent before counted)."""
    try:
        kept = store.open_store()
        taken = kept.claim(run_id, force=force)  # a finished run is refused too, in one line
    except (store.StoreUnavailable, store.UnknownRun, store.RunTaken) as exc:
        complain(f"%cortex resume {run_id}: {exc}")
        return None
    try:
        try:
            stored = store.open_run(taken)
        except (store.StoreUnavailable, store.UnknownRun) as exc:
            complain(f"%cortex resume {run_id}: {exc}")
            return None
        options = _with_live_request(
            session, taken, stored_cell(defaults, stored.options), defaults
        )
        if options is None:
            return None
        if budget is not None:
            options = dataclasses.replace(options, budget=budget, given=options.given | {"budget"})
        return session.resume(stored, stored.prompt, options)
    finally:
        kept.release(taken)  # taken but never recorded (its options were refused...)


def _with_live_request(
    session: Session, run_id: str, options: CellOptions, defaults: CellOptions
) -> CellOptions | None:
    """``options`` with the request fields the store kept redacted given again from this
    session (``session.cell.live_request``); None, and one line, when one is not."""
    agent: Mapping[str, Any] = {}
    if options.agent is not None and options.agent in session.registry.names("agent"):
        agent = named_agent(session.registry, options.agent).request or {}
    try:
        return live_request(run_id, options, defaults.request_default, agent, os.environ)
    except CortexRunError as exc:
        complain(str(exc))
        return None


# ---- what models may reach -------------------------------------------------------------


def show_tools(registry: Registry, *, as_text: bool = False) -> None:
    """Every registered tool, agent, relic and workflow: name, kind, the description's
    first line and the parameters the model passes; cortex's own built-ins last, folded
    under one line in a notebook (HTML), under one heading in text."""
    from cortex_jupyter.display.listing import tools_html, tools_text

    lines = tool_lines(registry)
    if as_text:
        print(tools_text(lines))
        return
    from IPython.display import display

    display({"text/html": tools_html(lines), "text/plain": tools_text(lines)}, raw=True)


def tool_lines(registry: Registry) -> list[ToolLine]:
    """``registry``'s entries as ``%cortex tools`` lists them, the user's first."""
    from cortex_jupyter.display.listing import ToolLine

    builtin = _builtin_names()
    lines = []
    for kind in ("tool", "relic", "workflow", "agent", "llm", "internal"):
        for name in registry.names(kind):
            spec = registry.get(kind, name)
            takes = getattr(spec, "takes", None)
            lines.append(
                ToolLine(
                    name, kind, str(getattr(spec, "description", "") or ""),
                    str(takes()) if callable(takes) else _parameters(spec),
                    builtin=(kind, name) in builtin,
                )
            )  # fmt: skip
    return sorted(lines, key=lambda line: line.builtin)


def _parameters(spec: object) -> str:
    """The parameters of an entry that is not a function (an agent): their names."""
    schema = getattr(spec, "parameters", None)
    properties = schema.get("properties") if isinstance(schema, dict) else None
    return ", ".join(properties) if isinstance(properties, dict) and properties else "prompt"


def _builtin_names() -> set[tuple[str, str]]:
    """The ``(kind, name)`` of what every registry starts with (cortex's own)."""
    fresh = Registry()
    return {(kind, name) for kind in REGISTRY_TYPES for name in fresh.names(kind)}


def show_vars(session: Session) -> None:
    """What a model may reach with $name and why; what it may not (hidden, yours)."""
    scope = session.names.scope("")
    namespace = session.shell.user_ns

    def show(name: str, why: str) -> None:
        # Bounded (never the full repr of a huge value), on one line, secrets
        # redacted before the cut; a repr that raises says so.
        text = " ".join(safe_repr(namespace.get(name), limit=400, items=8).split())
        print(f"  {name} = {shorten(text, 70)}  ({why})")

    visible = scope.reasons()
    if visible:
        print("A model may reach these notebook names (and any a cell writes as $name):")
        for name, why in visible.items():
            show(name, why)
    else:
        print(
            "A model reaches no notebook name but those a cell writes as $name (and the "
            "outputs of its own run). %cortex expose NAME gives it more."
        )
    withheld = scope.withheld()
    if withheld:
        print("Not visible to models (unless a cell writes them as $name):")
        for name, why in withheld.items():
            show(name, why)
    if session.names.rules:
        rules = ", ".join(str(rule) for rule in session.names.rules)
        print(f"Expose and hide, oldest first (the latest match decides): {rules}")


def expose(session: Session, names: list[str]) -> None:
    """Let models reach ``names``; one line for each that can never be exposed."""
    refused = session.names.expose(names)
    for why in refused:
        print(f"cortex: not exposed: {why}.")
    taken = [a for a in names if not any(w.startswith(f"${a} ") for w in refused)]
    if taken:
        print(f"Exposed to models: {', '.join(taken)} (%cortex hide NAME takes it back).")


def hide(session: Session, names: list[str]) -> None:
    """Take ``names`` out of what models may reach."""
    session.names.hide(names)
    print(
        f"Hidden from models: {', '.join(names)} (a prompt that writes $name still "
        "passes it: you wrote it there)."
    )


# ---- the conversation, the runs and their views -----------------------------------------


def show_history(conversation: Conversation) -> None:
    """The conversation so far (what the model will see next time)."""
    print(redact(str(conversation)) if len(conversation) else "The conversation is empty.")


def reset(conversation: Conversation) -> None:
    """Forget the conversation; the next %%cortex starts fresh."""
    conversation.reset()
    print("Conversation reset: the next %%cortex cell starts a new conversation.")


def stop(session: Session) -> None:
    """Cancel the fire_and_forget actions that outlived their cells."""
    stopped = session.stop_background()
    if stopped:
        print(f"Cancelled {len(stopped)} running action(s): {', '.join(stopped)}.")
    else:
        print("No fire_and_forget action is running.")


def close_views(session: Session) -> None:
    """Let every finished live view go (each shows its static copy)."""
    released = session.live.release(keep=0)
    kept = len(session.live.views)
    print(
        f"Closed {released} view(s): they show their static copy; _cortex and the "
        "variables are kept."
        + (f" {kept} still running stay(s) live until the run ends." if kept else "")
    )


def show_views(session: Session) -> None:
    """The live views (clickable widgets): their cell, model, phase and actions."""
    views = [(view.label, state) for view in session.live.views for state in view.states]
    if not views:
        print("No live view: finished runs show their static copy.")
        return
    print(
        f"{len(views)} live view(s) (the newest {session.live.keep} finished ones stay "
        "live: CortexMagics.live_views; a compare cell's columns are a view each):"
    )
    for label, state in views:
        actions = len(state.nodes)
        print(f"  {label:<9} {state.model}  {state.phase}, {actions} action(s)")
    print("%cortex views close lets them go (each shows its static copy).")


def show_prompt(session: Session, dialect: str, native_tools: bool) -> None:
    """The system prompt the model is given (dialect, tools, feeds)."""
    print(
        system_prompt(
            dialect=dialect,
            registry=session.registry,
            feeds=session.feeds,
            native_tools=native_tools,
        )
    )


def save(run: NotebookRun, path: str) -> None:
    """Save ``run``'s transcript (JSON lines) to ``path``."""
    try:
        written = run.save(path)
    # a directory, a missing folder, no permission, a full disk, a name too long or
    # holding a NUL byte (ValueError)
    except (OSError, ValueError) as exc:
        raise UsageError(f"%cortex save: {_write_problem(exc, path)}.") from None
    print(f"Saved the run's transcript to {written} ({len(run.events)} events).")


def _write_problem(exc: OSError | ValueError, path: str) -> str:
    """Why ``path`` could not be written, in a sentence naming what is wrong."""
    if not isinstance(exc, OSError):
        return f"cannot write {path!r}: {exc}"
    target = Path(exc.filename) if exc.filename else Path(path)
    if isinstance(exc, IsADirectoryError) or _is_folder(target):
        return f"{target} is a folder; give a file in it, e.g. {target / 'run.jsonl'}"
    if isinstance(exc, FileNotFoundError) and not _is_folder(target.parent):
        return f"the folder {target.parent} does not exist; create it first or pick another"
    if isinstance(exc, PermissionError):
        return f"no permission to write {target}"
    why = exc.strerror or str(exc) or type(exc).__name__
    return f"cannot write {target}: {why}"


def _is_folder(path: Path) -> bool:
    """``path.is_dir()``, False where asking fails too (a name too long to look up)."""
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def debug(run: NotebookRun, action: str | None) -> None:
    """The full traceback of ``run.error`` (an unexpected failure), or of an action's."""
    if action is not None:
        node = run.actions.get(action)
        if node is None:
            known = ", ".join(run.actions) or "none"
            raise UsageError(f"%cortex debug: the last run has no action {action!r} ({known}).")
        error, what = node.exception, f"action {node.id!r} ({node.status})"
    else:
        error, what = run.error, f"the last run ({run.status})"
    if error is None:
        failed = [n.id for n in run.actions.values() if n.exception is not None]
        hint = f"; %cortex debug ID shows an action's: {', '.join(failed)}" if failed else ""
        print(f"cortex: {what} raised no exception to show{hint}.")
        return
    print(redact("".join(traceback.format_exception(error))).rstrip())


# ---- tool sources, the live model and the evaluation ------------------------------------


def show_cluster() -> None:
    """The Dask cluster executor="dask" tools run on: address, workers, dashboard."""
    print(executors.cluster_info())


def show_trace() -> None:
    """Whether runs' spans go anywhere: the tracer provider and its exporters."""
    from cortex_jupyter.runtime.integrations.tracing import setup

    print(setup.describe())


def trace_phoenix() -> None:
    """Start a local Phoenix (or find one running) and send every run's spans to it."""
    from cortex_jupyter.runtime.integrations.tracing import setup

    try:
        print(setup.start_phoenix())
    except (
        setup.PhoenixMissing,
        setup.PhoenixDidNotStart,
        setup.PhoenixCouldNotStart,
        setup.PhoenixCannotJoin,
        setup.PhoenixNeedsExporter,
    ) as exc:
        complain(f"trace: {exc}")


def local_start(session: Session, port: int | None) -> str | None:
    """Start the live model on this machine; its model name, or None if it did not start
    (one ``cortex:`` line says why). ``--model NAME`` asks it from now on."""
    from cortex_jupyter import local

    try:
        server = local.start(port, progress=print)
    except local.LocalServerError as exc:
        complain(f"local: {exc}")
        return None
    session.endpoints[server.model] = (server.base_url, LOCAL_KEY)
    print(f"{server}\n%%cortex cells now ask {server.model} there.")
    return server.model


def local_stop(session: Session) -> str | None:
    """Stop the live model; the name of the model it served, if one ran."""
    from cortex_jupyter import local

    try:
        stopped = local.stop()
    except local.LocalServerError as exc:
        complain(f"local: {exc}")
        return None
    if stopped is not None:
        session.endpoints.pop(stopped.model, None)
    print(f"Stopped {stopped}." if stopped else "No local server was running.")
    return stopped.model if stopped is not None else None


def local_status() -> None:
    """Whether the live model runs, and where."""
    from cortex_jupyter import local

    try:
        running = local.status()
    except local.LocalServerError as exc:
        complain(f"local: {exc}")
        return
    print(f"running: {running}" if running else "stopped")


def evaluate_dialects(
    session: Session,
    model: str,
    dialects: str,
    *,
    n: int,
    constrain: bool,
    tasks: str = "all",
    max_turns: int,
    temperature: float | None,
    max_tokens: int | None,
    time_limit: float | None,
) -> Any:
    """``%cortex eval``: score ``model`` on the built-in tasks in each dialect
    (constrained as well, with ``constrain``); the result, or None if nothing ran.
    ``tasks`` picks them: ``tools`` (``TASKS``), ``typed`` (``TYPED_TASKS``) or ``all``.

    The model is asked where a ``%%cortex`` cell would ask it: at the endpoint the session
    knows for that name (``%cortex local start``'s server), else ``OPENAI_BASE_URL``."""
    from cortex_jupyter import evaluation

    base_url, api_key = session.endpoints.get(model, (None, None))
    chosen = {
        "tools": evaluation.TASKS,
        "typed": evaluation.TYPED_TASKS,
        "all": (*evaluation.TASKS, *evaluation.TYPED_TASKS),
    }[tasks]
    given: dict[str, Any] = {
        "max_tokens": max_tokens,
        "time_limit": time_limit,
    }  # unset: evaluate()'s bounds
    try:
        return evaluation.evaluate(
            model, dialects, n=n, tasks=chosen, constrain=(False, True) if constrain else False,
            base_url=base_url, api_key=api_key, max_turns=max_turns, temperature=temperature,
            **{name: value for name, value in given.items() if value is not None},
        )  # fmt: skip
    except (TypeError, ValueError) as exc:
        raise UsageError(f"%cortex eval: {str(exc).removeprefix('evaluate: ')}") from None
    except evaluation.EndpointUnusable as exc:
        complain(str(exc))
        return exc.result if exc.result.tries else None


def run_experiment(session: Session, given: Any, options_for: Callable[[str], Any]) -> Any:
    """``%cortex experiment``: the dataset run by the named columns (``session.experiments``);
    a name that cannot be had is one line."""
    from cortex_jupyter.runtime.core.cost.budget import Budget
    from cortex_jupyter.session.experiments import ExperimentRefused, columns, dataset_named

    try:
        dataset = dataset_named(session.shell.user_ns, given.dataset)
        agents = columns(session, given.agents, options_for)
        Budget.parse(given.budget)
        return dataset.run(
            agents, repeat=given.repeat, concurrency=given.concurrency, budget=given.budget,
            name=given.name,
        )  # fmt: skip
    except (ExperimentRefused, ValueError, TypeError) as exc:
        raise UsageError(f"%cortex experiment: {exc}") from None


def keep(session: Session, given: Any) -> None:
    """``%cortex keep COLUMN --to DATASET``: the last comparison's column kept as a case
    (``session.keep``); what cannot be kept is one line."""
    from cortex_jupyter.session.compare import COMPARE_VARIABLE, Comparison
    from cortex_jupyter.session.keep import KeepRefused, keep_column

    namespace = session.shell.user_ns
    found = namespace.get(COMPARE_VARIABLE)
    try:
        line = keep_column(
            namespace, found if isinstance(found, Comparison) else None, given.column, given.to
        )
    except KeepRefused as exc:
        raise UsageError(f"%cortex keep: {redact(str(exc))}") from None
    print(f"cortex: {redact(line)}")


def mcp_command(args: list[str]) -> None:
    """MCP servers' tools as NAME.TOOL: %cortex mcp add|list|remove (%cortex mcp help)."""
    command, rest = (args[0], args[1:]) if args else ("list", [])
    if command in ("help", "-h", "--help"):
        print(MCP_USAGE)
        return
    if command not in MCP_COMMANDS:
        complain(
            f"mcp: unknown command {command!r}; use add, list or remove "
            "(%cortex mcp help shows how)"
        )
        return
    try:
        _MCP[command](rest)
    except UsageError as exc:
        complain(f"mcp {command}: {exc}")
    except CortexRuntimeError as exc:  # what went wrong, with the server's name
        complain(str(exc))


def _mcp_add(args: list[str]) -> None:
    cut = args.index("--") if "--" in args else len(args)
    options = _MCP_ADD.parse_intermixed_args(args[:cut])
    command = args[cut + 1 :]
    if options.config is not None:
        if options.name or options.url or command or options.header or options.env:
            raise UsageError("give --config FILE alone (the file names its servers)")
        for status in mcp.load_config(options.config):
            _show_added(status)
        return
    if options.name is None:
        raise UsageError(
            "name the server first: %cortex mcp add NAME -- COMMAND [ARG ...] (stdio), "
            "%cortex mcp add NAME URL (streamable HTTP) or %cortex mcp add --config FILE"
        )
    if bool(command) == bool(options.url):
        raise UsageError(
            f"give the command after -- (stdio) or a URL (streamable HTTP) for server "
            f"{options.name!r}, e.g. %cortex mcp add {options.name} -- npx -y PACKAGE"
        )
    if options.url is not None and not options.url.startswith(("http://", "https://")):
        raise UsageError(
            f"{options.url!r} is not an http(s) URL; a command goes after --, e.g. "
            f"%cortex mcp add {options.name} -- {options.url}"
        )
    _show_added(
        mcp.add(
            options.name,
            command or None,
            url=options.url,
            env=_pairs(options.env, "=", "--env NAME=VALUE"),
            headers=_pairs(options.header, ":", "--header 'Name: value'"),
            timeout=options.timeout,
        )
    )


def _mcp_list(args: list[str]) -> None:
    if len(args) > 1:
        raise UsageError("give at most one server name")
    if args:
        status = mcp.status(args[0])
        print(redact(status.details()))
        kept = len(mcp.stderr(args[0]).splitlines())
        if kept > len(status.stderr):
            print(f"({kept} lines of stderr kept: cortex_jupyter.mcp.stderr({args[0]!r}))")
        return
    servers = mcp.servers()
    if not servers:
        print(
            "No MCP servers yet: %cortex mcp add NAME -- COMMAND (stdio) or "
            "%cortex mcp add NAME URL (streamable HTTP)."
        )
    for status in servers:
        print(redact(status.summary()))
        if status.tools:
            print("  tools: " + ", ".join(status.tools))


def _mcp_remove(args: list[str]) -> None:
    if len(args) != 1:
        raise UsageError("name one server, e.g. %cortex mcp remove fs")
    count = len(mcp.status(args[0]).tools)
    mcp.remove(args[0])
    print(f"Removed MCP server {args[0]!r} and its {count} tool{'' if count == 1 else 's'}.")


_MCP = {"add": _mcp_add, "list": _mcp_list, "remove": _mcp_remove}


def _mcp_add_parser() -> MagicArgumentParser:
    parser = MagicArgumentParser(prog="%cortex mcp add", add_help=False)
    parser.add_argument("name", nargs="?")
    parser.add_argument("url", nargs="?")
    parser.add_argument("--header", action="append", default=[], metavar="'NAME: VALUE'")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS")
    parser.add_argument("--config", metavar="FILE")
    return parser


_MCP_ADD = _mcp_add_parser()


def _pairs(items: list[str], sep: str, shape: str) -> dict[str, str]:
    """``NAME: value`` headers or ``NAME=value`` env entries; ``$VAR`` in a value is the
    environment variable (``${VAR}``, read when connecting, so it is never written out)."""
    pairs = {}
    for item in items:
        key, found, value = item.partition(sep)
        if not found or not key.strip():  # not echoed: it may hold a token
            raise UsageError(f"each {shape.partition(' ')[0]} is {shape}; one has no {sep!r}")
        pairs[key.strip()] = _ENV_REFERENCE.sub(r"${\1}", value.strip())
    return pairs


def _show_added(status: ServerStatus) -> None:
    if status.state != "ready":  # a server of a config file that did not start
        complain(f"MCP server {status.name!r} did not start: {status.error or status.state}")
        return
    count = len(status.tools)
    print(
        redact(
            f"MCP server {status.name!r} is ready ({status.transport}: {status.target}); "
            f"{count} tool{'' if count == 1 else 's'}: {', '.join(status.tools) or 'none'}"
        )
    )


def close_tool_sources() -> None:
    """Close the MCP servers and the Dask cluster cortex started (``%unload_ext``; at
    interpreter exit each module closes its own)."""
    mcp.close_all()
    executors.close_all()

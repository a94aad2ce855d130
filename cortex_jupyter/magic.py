"""The ``%%cortex`` cell magic and the ``%cortex`` line commands.

The magic stays thin: it parses its arguments into ``CellOptions`` (a bad option is a
``UsageError`` that reads like a sentence, with no traceback) and calls the session.
The cell body is the prompt, passed as it is: ``{`` and ``}`` in pasted code are never
interpreted, and ``$name`` refers to notebook objects (described to the model, and
passed as the object itself to action parameters).
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import sys
import traceback
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import (
    MagicArgumentParser,
    argument,
    magic_arguments,
    parse_argstring,
)
from traitlets import Any as AnyTrait
from traitlets import (
    Bool,
    CaselessStrEnum,
    Dict,
    Float,
    Int,
    TraitError,
    Unicode,
    observe,
    validate,
)
from traitlets.config.loader import LazyConfigValue

from cortex_jupyter.runtime.core.errors import CortexRuntimeError
from cortex_jupyter.runtime.core.secrets import Repr, redact, shorten
from cortex_jupyter.runtime.integrations.mcp import DEFAULT_TIMEOUT
from cortex_jupyter.runtime.loop.request import check_request
from cortex_jupyter.session import CellOptions, Session, forget, session_for

if TYPE_CHECKING:
    from traitlets.utils.bunch import Bunch

    from cortex_jupyter.runtime.integrations.mcp import ServerStatus

DIALECTS = ("cortex", "sigil", "cogency", "hermes", "auto")
APPROVALS = ("ask", "allow", "deny")
COMMANDS = (
    "tools",
    "vars",
    "expose",
    "hide",
    "history",
    "reset",
    "prompt",
    "continue",
    "stop",
    "views",
    "replay",
    "save",
    "debug",
    "config",
    "mcp",
    "cluster",
    "local",
    "eval",
    "help",
)
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
#: What ``%cortex vars`` shows of a value: bounded, secrets redacted before its cuts.
_SHORT = Repr(limit=400, items=8)
_ENV_REFERENCE = re.compile(r"\$(?=[A-Za-z_])([A-Za-z_][A-Za-z0-9_]*)")


@magics_class
class CortexMagics(Magics):
    """``%%cortex`` runs a cell as an agent; ``%cortex COMMAND`` inspects and steers.

    Defaults are configurable: ``%config CortexMagics.model = "gpt-4o-mini"``.
    """

    model = Unicode("gpt-4o-mini", help="Model name sent to the OpenAI-compatible endpoint.").tag(
        config=True
    )
    dialect = CaselessStrEnum(DIALECTS, "cortex", help="Protocol dialect the model writes.").tag(
        config=True
    )
    max_turns = Int(10, min=1, help="Most model turns one cell may take.").tag(config=True)
    temperature = Float(
        None, allow_none=True, min=0.0, help="Sampling temperature (server default)."
    ).tag(config=True)
    chunk_size = Int(16, min=1, help="Characters per chunk in --script mode.").tag(config=True)
    delay = Float(0.02, min=0.0, help="Seconds between chunks in --script mode.").tag(config=True)
    native_tools = Bool(False, help="Also offer tools as the endpoint's native tools=.").tag(
        config=True
    )
    constrain = AnyTrait(
        False,
        help="Protocol-constrained decoding: True or 'gbnf' (llama.cpp), 'vllm', False.",
    ).tag(config=True)
    context_tokens = Int(
        None,
        allow_none=True,
        min=256,
        help="Context budget in tokens (default: the model's window where known, else 32,000).",
    ).tag(config=True)
    approve = AnyTrait(
        "ask",
        help="Approval before tools marked approve=True: 'ask', 'allow', 'deny' or a "
        "function (node) -> bool.",
    ).tag(config=True)
    approve_timeout = Float(
        None, allow_none=True, help="Seconds to wait for an approval before denying it."
    ).tag(config=True)
    overwrite = Bool(
        False,
        help="Let an action's output_key replace a notebook name cortex did not bind.",
    ).tag(config=True)
    display = CaselessStrEnum(
        ("auto", "widgets", "text"), "auto", help="How runs are shown: widgets, text or auto."
    ).tag(config=True)
    live_views = Int(
        10,
        min=0,
        help="How many finished views stay live (clickable); older ones show their static "
        "copy and close their widgets, which frees what they held.",
    ).tag(config=True)
    request = Dict(
        help="Extra fields sent with every request (temperature, seed, top_k, grammar...); "
        "a cell's --request goes over them (see %%cortex?).",
    ).tag(config=True)
    dask_address = Unicode(
        None,
        allow_none=True,
        help='Dask scheduler for executor="dask" tools (tcp://host:8786); None: '
        "DASK_SCHEDULER_ADDRESS, or else a local cluster started on first use.",
    ).tag(config=True)

    @validate("approve")
    def _check_approve(self, proposal: Bunch) -> Any:
        value = proposal["value"]
        if callable(value) or value in APPROVALS:
            return value
        raise TraitError(
            f"CortexMagics.approve must be 'ask', 'allow', 'deny' or a function "
            f"(node) -> bool, not {value!r}"
        )

    @validate("request")
    def _check_request(self, proposal: Bunch) -> Any:
        try:
            return check_request(proposal["value"], "CortexMagics.request")
        except ValueError as error:
            raise TraitError(str(error)) from None

    @validate("approve_timeout")
    def _check_approve_timeout(self, proposal: Bunch) -> Any:
        value = proposal["value"]
        if value is None or value > 0:
            return value
        raise TraitError(
            f"CortexMagics.approve_timeout must be a number of seconds above 0, or None "
            f"(wait as long as it takes), not {value!r}"
        )

    @validate("max_turns", "chunk_size", "context_tokens")
    def _check_whole_number(self, proposal: Bunch) -> Any:
        value = proposal["value"]
        if isinstance(value, bool):  # an int to traitlets, never a count to a person
            name = proposal["trait"].name
            raise TraitError(f"CortexMagics.{name} must be a whole number, not {value!r}")
        return value

    @validate("model")
    def _check_model(self, proposal: Bunch) -> Any:
        value = proposal["value"]
        if value.strip():
            return value
        raise TraitError(f"CortexMagics.model must name a model, not {value!r}")

    @observe("dask_address")
    def _dask_address_changed(self, change: Bunch) -> None:
        # Imported here: the executors module is light, but what it connects with is not.
        from cortex_jupyter.runtime.integrations.executors import set_dask_address

        set_dask_address(change["new"] or None)

    @property
    def session(self) -> Session:
        assert self.shell is not None
        return session_for(self.shell)

    @magic_arguments()
    @argument("--model", metavar="NAME", help="Model to ask (default: CortexMagics.model).")
    @argument(
        "--agent",
        metavar="NAME",
        help="Run a registered cortex_jupyter.Agent (its instructions, tools and settings).",
    )
    @argument("--dialect", metavar="NAME", help="cortex (default), sigil, cogency, hermes or auto.")
    @argument(
        "--script",
        action="store_true",
        help="Stream the cell body itself as the model's output: no model needed. "
        "Separate turns with a line '--- next turn ---'.",
    )
    @argument("--chunk-size", metavar="N", help="Characters per chunk with --script.")
    @argument("--delay", metavar="SECONDS", help="Pause between chunks with --script.")
    @argument("--replay", metavar="PATH", help="Stream a saved transcript again.")
    @argument("--speed", metavar="X", default="1", help="Replay speed-up (default 1).")
    @argument("--fresh", action="store_true", help="Start a new conversation first.")
    @argument("--max-turns", metavar="N", help="Most model turns (default 10).")
    @argument("--temperature", metavar="T", help="Sampling temperature.")
    @argument("--max-tokens", metavar="N", help="Most tokens per reply.")
    @argument(
        "--request",
        metavar="JSON",
        help='Extra request fields as a JSON object, e.g. \'{"temperature": 0, "seed": 1}\'. '
        "Later wins: CortexMagics.request < the agent's request < --request < "
        "--temperature/--max-tokens.",
    )
    @argument("--native-tools", action="store_true", help="Offer tools as native tools=.")
    @argument(
        "--constrain",
        nargs="?",
        const="gbnf",
        metavar="FORM",
        help="Constrain replies with a grammar the runtime can run: gbnf (llama.cpp, the "
        "default) or vllm.",
    )
    @argument("--text", action="store_true", help="Show the run as plain text, not widgets.")
    @argument(
        "--overwrite",
        action="store_true",
        help="Let output_key replace notebook names cortex did not bind (not builtins).",
    )
    @cell_magic
    def cortex(self, line: str, cell: str) -> None:
        """Send the cell to a model and stream its thought, actions and answer live.

        Actions start the moment their closing tag arrives; each ``output_key`` becomes
        a notebook variable; ``_cortex`` is the run record. ``$name`` in the cell refers
        to notebook objects. ``--script`` streams the cell itself as the model's output.

        Extra request fields go with every request of the run (its turns, its ``llm``
        actions, its nested agents); later wins: ``CortexMagics.request`` < the
        ``--agent``'s ``Agent(request=...)`` < ``--request`` < ``--temperature`` /
        ``--max-tokens``. ``--model`` beside ``--agent NAME`` wins over the agent's own
        model, and the header names the model asked.
        """
        self.session.run_cell(cell, self._options(line))

    @line_magic("cortex")  # type: ignore[arg-type]  # IPython types the named form as Never
    def cortex_line(self, line: str) -> Any:
        """``%cortex COMMAND``: tools, vars, expose, hide, history, reset, prompt,
        continue, stop, replay, save, debug, config, mcp, cluster; ``%cortex help`` says
        what each does.

        ``expose`` and ``hide`` take names or glob patterns (``data_*``); a pattern covers
        every name it matches, and the latest expose or hide that matches a name decides
        (``expose data_*`` then ``hide data_b`` leaves data_b hidden). A name a run bound
        is visible while it holds what the run bound; once you assign it, it is yours."""
        words = shlex.split(line)
        if not words or words[0] not in COMMANDS:
            given = f" {words[0]!r}" if words else ""
            raise UsageError(
                f"%cortex: unknown command{given}. Use one of: {', '.join(COMMANDS)} "
                "(%cortex help says what each does; the cell magic %%cortex runs a prompt)."
            )
        command, args = words[0], words[1:]
        return getattr(self, f"_cmd_{command}")(args)

    # ---- cell options -------------------------------------------------------------

    def _options(self, line: str, **overrides: Any) -> CellOptions:
        try:
            args = parse_argstring(CortexMagics.cortex, line)
        except UsageError as error:
            raise UsageError(f"%%cortex: {error}. See %%cortex? for the options.") from None
        dialect = (args.dialect or self.dialect).lower()
        if dialect not in DIALECTS:
            raise UsageError(
                f"%%cortex: unknown dialect {dialect!r}; use one of: {', '.join(DIALECTS)}."
            )
        if args.script and args.replay:
            raise UsageError("%%cortex: use --script or --replay, not both.")
        options = CellOptions(
            model=args.model or self.model,
            dialect=dialect,
            script=bool(args.script),
            chunk_size=_number(args.chunk_size, "--chunk-size", int, self.chunk_size, low=1),
            delay=_number(args.delay, "--delay", float, self.delay, low=0),
            replay=args.replay,
            speed=_number(args.speed, "--speed", float, 1.0, low=0, strict=True),
            fresh=bool(args.fresh),
            max_turns=_number(args.max_turns, "--max-turns", int, self.max_turns, low=1),
            temperature=_number(args.temperature, "--temperature", float, self.temperature, low=0),
            max_tokens=_number(args.max_tokens, "--max-tokens", int, None, low=1),
            native_tools=bool(args.native_tools) or self.native_tools,
            constrain=_constrain(args.constrain, self.constrain),
            display="text" if args.text else self.display,
            agent=args.agent,
            overwrite=bool(args.overwrite) or self.overwrite,
            context_tokens=self.context_tokens,
            approval=_approval(self.approve),
            approve_timeout=self.approve_timeout,
            request_default=dict(self.request),
            request=_request(args.request),
            given=frozenset(
                name
                for name in ("model", "dialect", "max_turns", "temperature", "max_tokens")
                if getattr(args, name) is not None
            )
            | ({"native_tools"} if args.native_tools else set())
            | ({"request"} if args.request is not None else set())
            | ({"constrain"} if args.constrain is not None else set()),
        )
        return dataclasses.replace(options, **overrides) if overrides else options

    # ---- line commands ------------------------------------------------------------

    def _cmd_tools(self, args: list[str]) -> None:
        """Every registered tool, agent, relic and workflow with its JSON schema."""
        registry = self.session.registry
        for kind in ("tool", "relic", "workflow", "agent", "llm", "internal"):
            names = registry.names(kind)
            if not names:
                continue
            print(f"{kind}s:")
            for name in names:
                spec = registry.get(kind, name)
                description = getattr(spec, "description", "") or ""
                print(f"  {name}: {description}".rstrip())
                parameters = getattr(spec, "parameters", None)
                if parameters:
                    print("    " + json.dumps(parameters, ensure_ascii=False))

    def _cmd_vars(self, args: list[str]) -> None:
        """What a model may reach with $name and why; what it may not (hidden, yours)."""
        session = self.session
        scope = session.scope("")
        namespace = session.shell.user_ns

        def show(name: str, why: str) -> None:
            # Bounded (never the full repr of a huge value), on one line, secrets
            # redacted before the cut; a repr that raises says so.
            text = " ".join(_SHORT.repr(namespace.get(name)).split())
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
        if session.rules:
            rules = ", ".join(str(rule) for rule in session.rules)
            print(f"Expose and hide, oldest first (the latest match decides): {rules}")

    def _cmd_expose(self, args: list[str]) -> None:
        """Let models reach notebook names: %cortex expose NAME|PATTERN [...] (e.g. df_*).

        A pattern covers every name it matches. Expose and hide apply in order: the latest
        one whose name or pattern matches a name decides (expose data_* then hide data_b
        leaves data_b hidden; hide data_* then expose data_a shows data_a)."""
        if not args:
            raise UsageError("%cortex expose: name the variables, e.g. %cortex expose df report")
        refused = self.session.expose(args)
        for why in refused:
            print(f"cortex: not exposed: {why}.")
        taken = [a for a in args if not any(w.startswith(f"${a} ") for w in refused)]
        if taken:
            print(f"Exposed to models: {', '.join(taken)} (%cortex hide NAME takes it back).")

    def _cmd_hide(self, args: list[str]) -> None:
        """Take names out of what models may reach: %cortex hide NAME|PATTERN [...].

        A pattern hides every name it matches: exposed ones and ones cortex runs bound,
        also those bound later, until a later expose matches them (the latest expose or
        hide that matches a name decides). A cell that writes $name still passes it."""
        if not args:
            raise UsageError("%cortex hide: name the variables, e.g. %cortex hide df")
        self.session.hide(args)
        print(
            f"Hidden from models: {', '.join(args)} (a prompt that writes $name still "
            "passes it: you wrote it there)."
        )

    def _cmd_history(self, args: list[str]) -> None:
        """The conversation so far (what the model will see next time)."""
        conversation = self.session.conversation
        print(redact(str(conversation)) if len(conversation) else "The conversation is empty.")

    def _cmd_reset(self, args: list[str]) -> None:
        """Forget the conversation; the next %%cortex starts fresh."""
        self.session.conversation.reset()
        print("Conversation reset: the next %%cortex cell starts a new conversation.")

    def _cmd_stop(self, args: list[str]) -> None:
        """Cancel the fire_and_forget actions that outlived their cells."""
        stopped = self.session.stop_background()
        if stopped:
            print(f"Cancelled {len(stopped)} running action(s): {', '.join(stopped)}.")
        else:
            print("No fire_and_forget action is running.")

    def _cmd_views(self, args: list[str]) -> None:
        """The live views (clickable widgets); %cortex views close lets them all go."""
        session = self.session
        if args not in ([], ["close"]):
            raise UsageError("%cortex views: use %cortex views, or %cortex views close.")
        if args == ["close"]:
            released = session.release_views(keep=0)
            kept = len(session.views)
            print(
                f"Closed {released} view(s): they show their static copy; _cortex and the "
                "variables are kept."
                + (f" {kept} still running stay(s) live until the run ends." if kept else "")
            )
            return
        views = session.views
        if not views:
            print("No live view: finished runs show their static copy.")
            return
        print(
            f"{len(views)} live view(s) (the newest {self.live_views} finished ones stay "
            "live: CortexMagics.live_views):"
        )
        for view in views:
            state = view.view.state
            actions = len(state.nodes)
            print(f"  {view.label:<9} {state.model}  {state.phase}, {actions} action(s)")
        print("%cortex views close lets them go (each shows its static copy).")

    def _cmd_prompt(self, args: list[str]) -> None:
        """The system prompt the model is given (dialect, tools, feeds)."""
        from cortex_jupyter.runtime.loop.prompt import system_prompt

        dialect = args[0] if args else self.dialect
        if dialect not in DIALECTS:
            raise UsageError(f"%cortex prompt: unknown dialect {dialect!r}.")
        print(
            system_prompt(
                dialect=dialect,
                registry=self.session.registry,
                feeds=self.session.feeds,
                native_tools=self.native_tools,
            )
        )

    def _cmd_continue(self, args: list[str]) -> None:
        """Continue the last interrupted run where it stopped."""
        self.session.continue_last()

    def _cmd_replay(self, args: list[str]) -> None:
        """Stream a saved transcript again: %cortex replay PATH [SPEED]."""
        if not 1 <= len(args) <= 2:
            raise UsageError(
                "%cortex replay: give a transcript path, e.g. %cortex replay run.jsonl 5"
            )
        speed = _number(
            args[1] if len(args) == 2 else None, "speed", float, 1.0, low=0, strict=True
        )
        self.session.run_cell("", self._options(f"--replay {shlex.quote(args[0])}", speed=speed))

    def _cmd_save(self, args: list[str]) -> None:
        """Save the last run's transcript (JSON lines) to PATH."""
        if len(args) != 1:
            raise UsageError("%cortex save: give one path, e.g. %cortex save run.jsonl")
        run = self.session.last
        if run is None:
            raise UsageError("%cortex save: there is no run to save yet.")
        try:
            path = run.save(args[0])
        except OSError as exc:  # a directory, a missing folder, no permission, a full disk
            why = exc.strerror or str(exc) or type(exc).__name__
            raise UsageError(f"%cortex save: cannot write {args[0]!r}: {why}.") from None
        print(f"Saved the run's transcript to {path} ({len(run.events)} events).")

    def _cmd_debug(self, args: list[str]) -> None:
        """Full traceback: of _cortex.error (an unexpected failure), or %cortex debug ID."""
        if len(args) > 1:
            raise UsageError("%cortex debug: give at most one action id, e.g. %cortex debug a1")
        run = self.session.last
        if run is None:
            raise UsageError("%cortex debug: there is no run yet.")
        if args:
            node = run.actions.get(args[0])
            if node is None:
                known = ", ".join(run.actions) or "none"
                raise UsageError(
                    f"%cortex debug: the last run has no action {args[0]!r} ({known})."
                )
            error, what = node.exception, f"action {node.id!r} ({node.status})"
        else:
            error, what = run.error, f"the last run ({run.status})"
        if error is None:
            failed = [n.id for n in run.actions.values() if n.exception is not None]
            hint = f"; %cortex debug ID shows an action's: {', '.join(failed)}" if failed else ""
            print(f"cortex: {what} raised no exception to show{hint}.")
            return
        print(redact("".join(traceback.format_exception(error))).rstrip())

    def _cmd_config(self, args: list[str]) -> None:
        """Show the defaults, or set some: %cortex config model=gpt-4o max_turns=5."""
        for item in args:
            key, sep, value = item.partition("=")
            if not sep or not self.has_trait(key) or key in ("config", "parent", "shell"):
                known = ", ".join(self._config_names())
                raise UsageError(f"%cortex config: {item!r} is not name=value; names: {known}.")
            try:
                setattr(self, key, _coerce(self.traits()[key], value))
            except (TraitError, ValueError) as exc:  # the message says what was wrong
                raise UsageError(
                    f"%cortex config: {key}={value!r} was refused: {exc} (it stays "
                    f"{getattr(self, key)!r})."
                ) from None
        for name in self._config_names():
            print(f"{name} = {getattr(self, name)!r}")

    def _config_names(self) -> list[str]:
        return sorted(self.class_own_traits(config=True))

    def _cmd_help(self, args: list[str]) -> None:
        """What each %cortex command does."""
        for command in COMMANDS:
            doc = getattr(self, f"_cmd_{command}").__doc__ or ""
            print(f"%cortex {command:<9} {doc.strip().splitlines()[0]}")
        print("%%cortex           run a cell: %%cortex? lists its options")

    def _cmd_cluster(self, args: list[str]) -> None:
        """The Dask cluster executor="dask" tools run on: address, workers, dashboard."""
        from cortex_jupyter.runtime.integrations.executors import cluster_info

        print(cluster_info())

    def _cmd_local(self, args: list[str]) -> None:
        """A live model on this machine: %cortex local start [--port N] | stop | status."""
        from cortex_jupyter import local

        command = args[0] if args else "status"
        try:
            if command == "start" and len(args) in (1, 3) and args[1:2] in ([], ["--port"]):
                port = _number(args[2] if len(args) == 3 else None, "--port", int, None, low=1)
                server = local.start(port, progress=print)
                self.session.endpoints[server.model] = (server.base_url, "local")
                self.model = server.model
                print(f"{server}\n%%cortex cells now ask {server.model} there.")
            elif command == "stop" and len(args) == 1:
                stopped = local.stop()
                if stopped is not None:
                    self.session.endpoints.pop(stopped.model, None)
                    if self.model == stopped.model:
                        self.model = self.traits()["model"].default_value
                print(f"Stopped {stopped}." if stopped else "No local server was running.")
            elif command == "status" and len(args) <= 1:
                running = local.status()
                print(f"running: {running}" if running else "stopped")
            else:
                raise UsageError(
                    f"%cortex local: {' '.join(args)!r} is not a command here; "
                    "use %cortex local start [--port N], stop or status."
                )
        except local.LocalServerError as exc:
            _complain(f"local: {exc}")

    def _cmd_eval(self, args: list[str]) -> Any:
        """Score how well the model follows each dialect (%cortex eval --help)."""
        from cortex_jupyter.evaluation import EndpointUnusable, evaluate

        if {"-h", "--help"} & set(args):
            return print(_EVAL.format_help())
        given = _EVAL.parse_args(args)
        constrain = (False, True) if given.constrain else False
        try:
            return evaluate(
                given.model or self.model, given.dialects, n=given.n, constrain=constrain,
                max_turns=given.max_turns, temperature=self.temperature,
            )  # fmt: skip
        except (TypeError, ValueError) as exc:
            raise UsageError(f"%cortex eval: {str(exc).removeprefix('evaluate: ')}") from None
        except EndpointUnusable as exc:
            _complain(str(exc))
            return exc.result if exc.result.tries else None

    def _cmd_mcp(self, args: list[str]) -> None:
        """MCP servers' tools as NAME.TOOL: %cortex mcp add|list|remove (%cortex mcp help)."""
        command, rest = (args[0], args[1:]) if args else ("list", [])
        if command in ("help", "-h", "--help"):
            print(MCP_USAGE)
            return
        if command not in MCP_COMMANDS:
            _complain(
                f"mcp: unknown command {command!r}; use add, list or remove "
                "(%cortex mcp help shows how)"
            )
            return
        try:
            getattr(self, f"_mcp_{command}")(rest)
        except UsageError as exc:
            _complain(f"mcp {command}: {exc}")
        except CortexRuntimeError as exc:  # what went wrong, with the server's name
            _complain(str(exc))

    def _mcp_add(self, args: list[str]) -> None:
        from cortex_jupyter import mcp

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

    def _mcp_list(self, args: list[str]) -> None:
        from cortex_jupyter import mcp

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

    def _mcp_remove(self, args: list[str]) -> None:
        from cortex_jupyter import mcp

        if len(args) != 1:
            raise UsageError("name one server, e.g. %cortex mcp remove fs")
        count = len(mcp.status(args[0]).tools)
        mcp.remove(args[0])
        print(f"Removed MCP server {args[0]!r} and its {count} tool{'' if count == 1 else 's'}.")


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
_EVAL = MagicArgumentParser(
    prog="%cortex eval", add_help=False, description="Score the model on the built-in tool tasks."
)
_EVAL.add_argument("--model", metavar="NAME", help="Model (default: CortexMagics.model).")
_EVAL.add_argument(
    "--dialects", default="cortex,sigil,cogency,hermes,native", help="Comma-separated."
)
_EVAL.add_argument("--n", "-n", type=int, default=3, help="Tries per task (default 3).")
_EVAL.add_argument("--constrain", action="store_true", help="Constrained as well.")
_EVAL.add_argument("--max-turns", type=int, default=4, metavar="N", help="Default 4.")


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
        _complain(f"MCP server {status.name!r} did not start: {status.error or status.state}")
        return
    count = len(status.tools)
    print(
        redact(
            f"MCP server {status.name!r} is ready ({status.transport}: {status.target}); "
            f"{count} tool{'' if count == 1 else 's'}: {', '.join(status.tools) or 'none'}"
        )
    )


def _complain(text: str) -> None:
    """One ``cortex:`` line on stderr: the cell goes on, the kernel keeps working."""
    print(redact(f"cortex: {text}"), file=sys.stderr)


def _number(
    raw: str | None,
    flag: str,
    kind: type[int] | type[float],
    default: Any,
    *,
    low: float,
    strict: bool = False,
) -> Any:
    """A numeric option, checked: a clear sentence for anything else."""
    if raw is None:
        return default
    try:
        value = kind(raw)
    except ValueError:
        noun = "whole number" if kind is int else "number"
        raise UsageError(f"%%cortex: {flag} must be a {noun}, not {raw!r}.") from None
    if value < low or (strict and value == low):
        bound = f"more than {low:g}" if strict else f"{low:g} or more"
        raise UsageError(f"%%cortex: {flag} must be {bound}, not {raw!r}.")
    return value


def _request(raw: str | None) -> dict[str, Any]:
    """``--request JSON``, checked: a clear sentence for anything else."""
    if raw is None:
        return {}
    if len(raw) >= 2 and raw[0] == raw[-1] == "'":
        raw = raw[1:-1]  # IPython's argument splitting keeps the quotes around JSON
    try:
        value = json.loads(raw)
    except ValueError as error:
        raise UsageError(
            f"%%cortex: --request must be a JSON object such as "
            f'\'{{"temperature": 0, "seed": 1}}\'; {raw!r} is not JSON ({error}).'
        ) from None
    try:
        return check_request(value, "--request")
    except ValueError as error:
        raise UsageError(f"%%cortex: {error}.") from None


_BOOLEANS = {"1": True, "true": True, "yes": True, "on": True}
_BOOLEANS.update({"0": False, "false": False, "no": False, "off": False})


def _coerce(trait: Any, value: str) -> Any:
    """The text of ``%cortex config name=value`` as the trait's type; ``ValueError``
    saying what the trait takes."""
    if getattr(trait, "allow_none", False) and value.lower() in ("", "none"):
        return None
    if isinstance(trait, Dict):
        try:
            return json.loads(value)
        except ValueError:
            raise ValueError(
                """it takes a JSON object, e.g. request='{"temperature": 0}'"""
            ) from None
    if isinstance(trait, Bool):
        if value.lower() not in _BOOLEANS:
            raise ValueError("it takes true or false")
        return _BOOLEANS[value.lower()]
    kind = int if isinstance(trait, Int) else float if isinstance(trait, Float) else None
    if kind is None:
        return value
    try:
        return kind(value)
    except ValueError:
        noun = "a whole number" if kind is int else "a number"
        empty = " or none" if getattr(trait, "allow_none", False) else ""
        raise ValueError(f"it takes {noun}{empty}") from None


def register(shell: InteractiveShell) -> None:
    """Add the ``%%cortex`` magics to a shell; in a kernel, ``%%cortex`` cells also run as
    async cells (see ``as_async_cell``)."""
    _drop_refused_settings(shell)
    shell.register_magics(CortexMagics)
    if getattr(shell, "kernel", None) is not None and as_async_cell not in (
        shell.input_transformers_cleanup
    ):
        shell.input_transformers_cleanup.append(as_async_cell)


def _drop_refused_settings(shell: InteractiveShell) -> None:
    """Take out of the shell's config the ``CortexMagics`` settings the magics refuse,
    with one line each, so that loading the extension never fails on them.

    ``%config`` keeps a value it refused in the shell's config (only the magics refused
    it), as may an ``ipython_config.py``; without this, the next ``%reload_ext`` would
    fail on it with a traceback.
    """
    section = shell.config.get(CortexMagics.__name__)
    if not section:
        return
    probe = CortexMagics()  # defaults, no shell: each setting is tried on it alone
    for name, value in list(section.items()):
        if name not in probe.traits(config=True) or isinstance(value, LazyConfigValue):
            continue  # traitlets reports unknown names itself
        try:
            setattr(probe, name, value)
        except TraitError as exc:
            del section[name]
            _complain(f"a setting was ignored: {exc}")


def as_async_cell(lines: list[str]) -> list[str]:
    """An input transformer: a ``%%cortex`` cell becomes a top-level ``await`` of the same
    run (``run_cell_async``).

    A synchronous cell keeps the kernel's event loop blocked while it runs, so the
    widgets' buttons (approve, deny, stop) could not be clicked until it ended; an async
    cell lets ipykernel (>= 7.4) dispatch their messages meanwhile, and the kernel's Stop
    reaches it as a cancellation (NOTES.md, "Running async work from a cell magic").
    ``%%cortex?`` (help) and anything else are left as they are.
    """
    if not lines:
        return lines
    first = lines[0].strip()
    head, _, line = first.partition(" ")
    if head != "%%cortex" or first.endswith("?"):
        return lines
    body = "".join(lines[1:])
    # ``{var}`` and ``$var`` on the line are expanded as IPython expands a magic's line
    # (``run_cell_magic``): in the user's namespace, from the cell's own frame.
    return [
        "await __import__('cortex_jupyter.magic', fromlist=['_']).run_cell_async("
        f"get_ipython(), get_ipython().var_expand({line!r}), {body!r})\n"
    ]


async def run_cell_async(shell: InteractiveShell, line: str, cell: str) -> None:
    """What an async ``%%cortex`` cell runs: the magic's options, the session's run."""
    magics = shell.magics_manager.registry.get(CortexMagics.__name__)
    if not isinstance(magics, CortexMagics):
        raise UsageError("%%cortex: the extension is not loaded; run %load_ext cortex_jupyter")
    await magics.session.run_cell_async(cell, magics._options(line))


def close_tool_sources() -> None:
    """Close the MCP servers and the Dask cluster cortex started (``%unload_ext``; at
    interpreter exit each module closes its own). Only what was imported is touched."""
    if "cortex_jupyter.runtime.integrations.mcp" in sys.modules:
        from cortex_jupyter import mcp

        mcp.close_all()
    if "cortex_jupyter.runtime.integrations.executors" in sys.modules:
        from cortex_jupyter.runtime.integrations import executors

        executors.close_all()


def unregister(shell: InteractiveShell) -> None:
    """Take the magics out of a shell again (for ``%unload_ext``)."""
    forget(shell)
    if as_async_cell in shell.input_transformers_cleanup:
        shell.input_transformers_cleanup.remove(as_async_cell)
    manager = shell.magics_manager
    magics = manager.registry.pop(CortexMagics.__name__, None)
    if magics is None:
        return
    for kind in ("cell", "line"):
        table = manager.magics[kind]
        if getattr(table.get("cortex"), "__self__", None) is magics:
            del table["cortex"]
    if magics in shell.configurables:
        shell.configurables.remove(magics)


def _approval(value: Any) -> Any:
    """The approval policy, checked: a mistyped word must not quietly mean "ask"."""
    if callable(value) or value in APPROVALS:
        return value
    raise UsageError(
        f"CortexMagics.approve must be 'ask', 'allow', 'deny' or a function (node) -> bool, "
        f"not {value!r}."
    )


def _constrain(given: str | None, default: Any) -> bool | str:
    """``--constrain [FORM]`` or ``CortexMagics.constrain``: False, or a grammar form."""
    from cortex_jupyter.runtime.loop.grammar import CONSTRAIN_FORMS

    value = default if given is None else given.lower()
    if value is True or value is False:
        return "gbnf" if value else False
    if value in CONSTRAIN_FORMS:
        return str(value)
    where = "--constrain" if given is not None else "CortexMagics.constrain"
    raise UsageError(
        f"%%cortex: {where} must be {' or '.join(CONSTRAIN_FORMS)} (or True/False for "
        f"CortexMagics.constrain); got {value!r}."
    )

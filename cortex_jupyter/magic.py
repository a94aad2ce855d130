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
import shlex
from typing import Any

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from traitlets import Any as AnyTrait
from traitlets import Bool, CaselessStrEnum, Float, Int, Unicode

from cortex_jupyter.runtime.secrets import redact
from cortex_jupyter.session import CellOptions, Session, forget, session_for

DIALECTS = ("cortex", "sigil", "cogency", "hermes", "auto")
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
    "replay",
    "save",
    "config",
)


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
    max_turns = Int(10, help="Most model turns one cell may take.").tag(config=True)
    temperature = Float(None, allow_none=True, help="Sampling temperature (server default).").tag(
        config=True
    )
    chunk_size = Int(16, help="Characters per chunk in --script mode.").tag(config=True)
    delay = Float(0.02, help="Seconds between chunks in --script mode.").tag(config=True)
    native_tools = Bool(False, help="Also offer tools as the endpoint's native tools=.").tag(
        config=True
    )
    context_tokens = Int(
        None,
        allow_none=True,
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
    @argument("--native-tools", action="store_true", help="Offer tools as native tools=.")
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
        """
        self.session.run_cell(cell, self._options(line))

    @line_magic("cortex")  # type: ignore[arg-type]  # IPython types the named form as Never
    def cortex_line(self, line: str) -> Any:
        """``%cortex tools|vars|history|reset|prompt|continue|stop|replay|save|config``."""
        words = shlex.split(line)
        if not words or words[0] not in COMMANDS:
            given = f" {words[0]!r}" if words else ""
            raise UsageError(
                f"%cortex: unknown command{given}. Use one of: {', '.join(COMMANDS)} "
                "(or the cell magic %%cortex to run a prompt)."
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
            display="text" if args.text else self.display,
            agent=args.agent,
            overwrite=bool(args.overwrite) or self.overwrite,
            context_tokens=self.context_tokens,
            approval=_approval(self.approve),
            approve_timeout=self.approve_timeout,
            given=frozenset(
                name
                for name in ("model", "dialect", "max_turns", "temperature", "max_tokens")
                if getattr(args, name) is not None
            )
            | ({"native_tools"} if args.native_tools else set()),
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
        """What a model may reach with $name, and why (besides what a cell's prompt names)."""
        session = self.session
        visible = session.scope("").reasons()
        namespace = session.shell.user_ns
        if visible:
            print("A model may reach these notebook names (and any a cell writes as $name):")
            for name, why in visible.items():
                text = redact(repr(namespace.get(name)))
                text = text if len(text) <= 70 else text[:67] + "..."
                run = session.bound.get(name)
                where = f", run {run}" if run and why.startswith("bound") else ""
                print(f"  {name} = {text}  ({why}{where})")
        else:
            print(
                "A model reaches no notebook name but those a cell writes as $name (and the "
                "outputs of its own run). %cortex expose NAME gives it more."
            )
        patterns = [p for p in session.exposed if any(c in p for c in "*?[")]
        if patterns:
            print(f"Exposed patterns: {', '.join(patterns)}")
        if session.hidden:
            print(f"Hidden: {', '.join(sorted(session.hidden))}")

    def _cmd_expose(self, args: list[str]) -> None:
        """Let models reach notebook names: %cortex expose NAME [NAME ...] (patterns: df_*)."""
        if not args:
            raise UsageError("%cortex expose: name the variables, e.g. %cortex expose df report")
        refused = self.session.expose(args)
        for why in refused:
            print(f"cortex: not exposed: {why}.")
        taken = [a for a in args if not any(w.startswith(f"${a} ") for w in refused)]
        if taken:
            print(f"Exposed to models: {', '.join(taken)} (%cortex hide NAME takes it back).")

    def _cmd_hide(self, args: list[str]) -> None:
        """Take names out of what models may reach: %cortex hide NAME [NAME ...]."""
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

    def _cmd_prompt(self, args: list[str]) -> None:
        """The system prompt the model is given (dialect, tools, feeds)."""
        from cortex_jupyter.runtime.prompt import system_prompt

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
        path = run.save(args[0])
        print(f"Saved the run's transcript to {path} ({len(run.events)} events).")

    def _cmd_config(self, args: list[str]) -> None:
        """Show the defaults, or set some: %cortex config model=gpt-4o max_turns=5."""
        for item in args:
            key, sep, value = item.partition("=")
            if not sep or not self.has_trait(key) or key in ("config", "parent", "shell"):
                known = ", ".join(self._config_names())
                raise UsageError(f"%cortex config: {item!r} is not name=value; names: {known}.")
            try:
                setattr(self, key, _coerce(self.traits()[key], value))
            except Exception as exc:  # traitlets' own message says what was wrong
                raise UsageError(f"%cortex config: {key}={value!r} was refused: {exc}") from None
        for name in self._config_names():
            print(f"{name} = {getattr(self, name)!r}")

    def _config_names(self) -> list[str]:
        return sorted(self.class_own_traits(config=True))


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


def _coerce(trait: Any, value: str) -> Any:
    if isinstance(trait, Bool):
        return value.lower() in ("1", "true", "yes", "on")
    if isinstance(trait, Int):
        return int(value)
    if isinstance(trait, Float):
        return None if value.lower() == "none" else float(value)
    return value


def register(shell: InteractiveShell) -> None:
    """Add the ``%%cortex`` magics to a shell; in a kernel, ``%%cortex`` cells also run as
    async cells (see ``as_async_cell``)."""
    shell.register_magics(CortexMagics)
    if getattr(shell, "kernel", None) is not None and as_async_cell not in (
        shell.input_transformers_cleanup
    ):
        shell.input_transformers_cleanup.append(as_async_cell)


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
    return [
        "await __import__('cortex_jupyter.magic', fromlist=['_']).run_cell_async("
        f"get_ipython(), {line!r}, {body!r})\n"
    ]


async def run_cell_async(shell: InteractiveShell, line: str, cell: str) -> None:
    """What an async ``%%cortex`` cell runs: the magic's options, the session's run."""
    magics = shell.magics_manager.registry.get(CortexMagics.__name__)
    if not isinstance(magics, CortexMagics):
        raise UsageError("%%cortex: the extension is not loaded; run %load_ext cortex_jupyter")
    await magics.session.run_cell_async(cell, magics._options(line))


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
    if callable(value) or value in ("ask", "allow", "deny"):
        return value
    raise UsageError(
        f"CortexMagics.approve must be 'ask', 'allow', 'deny' or a function (node) -> bool, "
        f"not {value!r}."
    )

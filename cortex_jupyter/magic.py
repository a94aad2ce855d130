"""The ``%%cortex`` cell magic and the ``%cortex`` line commands.

The magic stays thin: it parses its arguments into ``CellOptions`` (a bad option is a
``UsageError`` that reads like a sentence, with no traceback) and calls the session; a
``%cortex`` command checks its words and calls one function of ``commands``.
The cell body is the prompt, passed as it is: ``{`` and ``}`` in pasted code are never
interpreted, and ``$name`` refers to notebook objects (described to the model, and
passed as the object itself to action parameters).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import shlex
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import (
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
    TraitType,
    Unicode,
    Union,
    default,
    observe,
    validate,
)
from traitlets.config.loader import LazyConfigValue

from cortex_jupyter import arguments, commands
from cortex_jupyter import store as run_store
from cortex_jupyter.commands import complain
from cortex_jupyter.runtime.core.cost.budget import Budget
from cortex_jupyter.runtime.core.trust.secrets import redact
from cortex_jupyter.runtime.integrations.executors import set_dask_address
from cortex_jupyter.runtime.loop.grammar import CONSTRAIN_FORMS
from cortex_jupyter.runtime.loop.request import check_request
from cortex_jupyter.session import CellOptions, Session, forget, session_for

if TYPE_CHECKING:
    from traitlets.utils.bunch import Bunch

DIALECTS = ("cortex", "sigil", "cogency", "hermes", "auto")
APPROVALS = arguments.APPROVALS
COMMANDS = (
    "tools",
    "vars",
    "expose",
    "hide",
    "history",
    "reset",
    "prompt",
    "continue",
    "resume",
    "stop",
    "views",
    "replay",
    "save",
    "runs",
    "open",
    "debug",
    "config",
    "mcp",
    "cluster",
    "local",
    "trace",
    "eval",
    "experiment",
    "keep",
    "help",
)


class _Finite(Float):  # type: ignore[type-arg]
    """A ``Float`` setting a person types: a bool, NaN or infinity is refused with
    ``allowed`` (what it takes) rather than taken as 1.0 or as no limit at all."""

    def __init__(self, default: float | None, allowed: str, **kwargs: Any) -> None:
        super().__init__(default, **kwargs)
        self.allowed = allowed

    def validate(self, obj: Any, value: Any) -> Any:
        if isinstance(value, bool):
            self.error(obj, value, info=self.allowed)
        if isinstance(value, numbers.Real):  # numpy's float32 and int64 are numbers too
            try:
                number = float(value)
            except (OverflowError, ValueError):  # an int too large for a float
                number = math.inf
            if not math.isfinite(number):
                self.error(obj, value, info=self.allowed)
            value = number
        return super().validate(obj, value)


def _described(trait: TraitType[Any, Any], allowed: str) -> Any:
    """``trait``, its refusals saying ``allowed`` (what it takes) in words."""
    trait.info_text = allowed
    return trait


def _refused(name: str, wants: str, value: Any) -> TraitError:
    """A setting's refusal of ``value``, in one line: ``CortexMagics.<name> must <wants>``."""
    return TraitError(f"CortexMagics.{name} must {wants}, not {value!r}")


def _not_a_command(command: str, args: list[str], use: str) -> UsageError:
    """``%cortex <command>`` given words it does not take: what was typed, and ``use``."""
    return UsageError(f"%cortex {command}: {' '.join(args)!r} is not a command here; use {use}.")


def _flag(name: str, text: str) -> argument:
    """An on/off option of ``%%cortex``: off unless the line names it."""
    return argument(name, action="store_true", help=text)


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
    temperature = _Finite(
        None,
        "a finite number, 0 or more, or None (the server's default)",
        allow_none=True,
        min=0.0,
        help="Sampling temperature (server default).",
    ).tag(config=True)
    chunk_size = Int(16, min=1, help="Characters per chunk in --script mode.").tag(config=True)
    delay = _Finite(
        0.02, "a finite number, 0 or more", min=0.0, help="Seconds between chunks in --script mode."
    ).tag(config=True)
    native_tools = Bool(False, help="Also offer tools as the endpoint's native tools=.").tag(
        config=True
    )
    constrain = _described(
        Union(
            [Bool(), CaselessStrEnum(CONSTRAIN_FORMS)],
            default_value=False,
            help="Protocol-constrained decoding: True or 'gbnf' (llama.cpp), 'vllm', False.",
        ),
        "True, False, " + " or ".join(map(repr, CONSTRAIN_FORMS)),
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
    approve_timeout = _Finite(
        None,
        "a number of seconds above 0, or None (wait as long as it takes)",
        allow_none=True,
        help="Seconds to wait for an approval before denying it.",
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
    budget = AnyTrait(
        None,
        allow_none=True,
        help="Most a cell's run may spend: US dollars (0.05) or tokens ('20000tok'); None: "
        "no limit. A cell's --budget goes over it.",
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

    store = Unicode(
        None,
        allow_none=True,
        help="The SQLite file every run is kept in (%cortex runs, %cortex open); None or '' "
        "turns it off. Default: $CORTEX_STORE, else runs.db in the user data directory.",
    ).tag(config=True)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        run_store.configure(self.store)  # a default or a config value fires no observer

    @default("store")
    def _default_store(self) -> str | None:
        return run_store.default_path()

    @validate("store")
    def _check_store(self, proposal: Bunch) -> Any:
        value = proposal["value"]
        return value if value is None or value.strip() else None  # "" is off, as None

    @observe("store")
    def _store_changed(self, change: Bunch) -> None:
        run_store.configure(change["new"] or None)

    @validate("approve")
    def _check_approve(self, proposal: Bunch) -> Any:
        value = proposal["value"]
        if callable(value) or value in APPROVALS:
            return value
        raise _refused("approve", "be 'ask', 'allow', 'deny' or a function (node) -> bool", value)

    @validate("request")
    def _check_request(self, proposal: Bunch) -> Any:
        try:
            return check_request(proposal["value"], "CortexMagics.request")
        except ValueError as error:
            raise TraitError(str(error)) from None

    @validate("budget")
    def _check_budget(self, proposal: Bunch) -> Any:
        try:
            return Budget.parse(proposal["value"])
        except ValueError as error:
            raise TraitError(f"CortexMagics.budget: {error}") from None

    @validate("approve_timeout")
    def _check_approve_timeout(self, proposal: Bunch) -> Any:
        value = proposal["value"]
        if value is None or value > 0:
            return value
        wants = "be a number of seconds above 0, or None (wait as long as it takes)"
        raise _refused("approve_timeout", wants, value)

    @validate("max_turns", "chunk_size", "context_tokens", "live_views")
    def _check_whole_number(self, proposal: Bunch) -> Any:
        value = proposal["value"]
        if isinstance(value, bool):  # an int to traitlets, never a count to a person
            raise _refused(proposal["trait"].name, "be a whole number", value)
        return value

    @validate("model")
    def _check_model(self, proposal: Bunch) -> Any:
        value = proposal["value"]
        if value.strip():
            return value
        raise _refused("model", "name a model", value)

    @validate("dask_address")
    def _check_dask_address(self, proposal: Bunch) -> Any:
        value = proposal["value"]
        if not value:  # "" as None: what DASK_SCHEDULER_ADDRESS says, or a local cluster
            return None
        if value.strip() and not any(c.isspace() for c in value):
            return value
        wants = "be a scheduler address such as tcp://host:8786, or None"
        raise _refused("dask_address", wants, value)

    @observe("dask_address")
    def _dask_address_changed(self, change: Bunch) -> None:
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
    @_flag(
        "--script",
        "Stream the cell body itself as the model's output: no model needed. "
        "Separate turns with a line '--- next turn ---'.",
    )
    @argument("--chunk-size", metavar="N", help="Characters per chunk with --script.")
    @argument("--delay", metavar="SECONDS", help="Pause between chunks with --script.")
    @argument("--replay", metavar="PATH", help="Stream a saved transcript again.")
    @argument("--speed", metavar="X", default="1", help="Replay speed-up (default 1).")
    @_flag("--fresh", "Start a new conversation first.")
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
    @argument(
        "--budget",
        metavar="USD",
        help="Most the run may spend: US dollars (0.05) or tokens (20000tok); a request that "
        "would pass it is not sent and the run ends 'budget'.",
    )
    @_flag("--native-tools", "Offer tools as native tools=.")
    @argument(
        "--constrain",
        nargs="?",
        const="gbnf",
        metavar="FORM",
        help="Constrain replies with a grammar the runtime can run: gbnf (llama.cpp, the "
        "default) or vllm.",
    )
    @argument(
        "--output",
        nargs="+",
        metavar="T",
        help="The answer's type, evaluated in the notebook: a class (a pydantic model, "
        "dataclass, TypedDict) or a typing expression such as list[int], "
        'Literal["a", "b"], int | None. _cortex.output is then the validated object.',
    )
    @argument(
        "--output-retries",
        metavar="N",
        help="How often an answer that does not fit --output is sent back (default 1).",
    )
    @argument(
        "--output-key",
        metavar="NAME",
        help="Bind the validated answer to this notebook name (the output_key rules).",
    )
    @argument(
        "--compare",
        metavar="A,B,C",
        help="Run the cell by several columns at once, side by side: each a model, "
        "dialect:model, a registered agent or a notebook Agent. _compare holds their runs.",
    )
    @argument(
        "--repeat",
        metavar="N",
        help="With --compare: each column runs N times; identical answers are counted.",
    )
    @argument(
        "--compare-budget",
        metavar="USD",
        help="With --compare: the most the whole cell may spend (USD or Ntok), split evenly "
        "into each run's budget (columns × repeats shares).",
    )
    @_flag("--text", "Show the run as plain text, not widgets.")
    @_flag(
        "--overwrite",
        "Let output_key replace notebook names cortex did not bind (not builtins).",
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
        options = self._options(line)
        if options.compare is not None:  # side by side: its own module (session.compare)
            from cortex_jupyter.session.compare import comparison

            comparison(self.session, cell, options, self._columns(line)).run()
            return
        self.session.run_cell(cell, options)

    def _columns(self, line: str) -> Callable[[str], CellOptions]:
        """A ``--compare`` column's options: the cell's line with the column's own
        ``--model``/``--dialect``/``--agent`` after it (the later option wins)."""
        return lambda extra: self._options(f"{line} {extra}")

    @line_magic("cortex")  # type: ignore[arg-type]  # IPython types the named form as Never
    def cortex_line(self, line: str) -> Any:
        """``%cortex COMMAND``: tools, vars, expose, hide, history, reset, prompt,
        continue, stop, replay, save, debug, config, mcp, cluster; ``%cortex help`` says
        what each does.

        ``expose`` and ``hide`` take names or glob patterns (``data_*``); a pattern covers
        every name it matches, and the latest expose or hide that matches a name decides
        (``expose data_*`` then ``hide data_b`` leaves data_b hidden). A name a run bound
        is visible while it holds what the run bound; once you assign it, it is yours."""
        try:
            words = shlex.split(line)
        except ValueError:  # an unbalanced quote (``runs don't``): the words as written
            words = line.split()
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
        alone = "--repeat N" if args.repeat is not None else "--compare-budget"
        if args.compare is None and (args.repeat or args.compare_budget) is not None:
            raise UsageError(f"%%cortex: {alone} goes with --compare a,b (its columns).")
        options = CellOptions(
            model=args.model or self.model,
            dialect=dialect,
            script=bool(args.script),
            chunk_size=arguments.number(
                args.chunk_size, "--chunk-size", int, self.chunk_size, low=1
            ),
            delay=arguments.number(args.delay, "--delay", float, self.delay, low=0),
            replay=arguments.unquote(args.replay),
            speed=arguments.number(args.speed, "--speed", float, 1.0, low=0, strict=True),
            fresh=bool(args.fresh),
            max_turns=arguments.number(args.max_turns, "--max-turns", int, self.max_turns, low=1),
            temperature=arguments.number(
                args.temperature, "--temperature", float, self.temperature, low=0
            ),
            max_tokens=arguments.number(args.max_tokens, "--max-tokens", int, None, low=1),
            native_tools=bool(args.native_tools) or self.native_tools,
            constrain=arguments.constrain(args.constrain, self.constrain),
            display="text" if args.text else self.display,
            agent=args.agent,
            overwrite=bool(args.overwrite) or self.overwrite,
            context_tokens=self.context_tokens,
            approval=arguments.approval(self.approve),
            approve_timeout=self.approve_timeout,
            request_default=dict(self.request),
            request=arguments.request(args.request),
            budget=arguments.budget(args.budget, self.budget),
            output=arguments.unquote(" ".join(args.output)) if args.output else None,
            output_retries=arguments.number(args.output_retries, "--output-retries", int, 1, low=0),
            output_key=args.output_key,
            compare=arguments.unquote(args.compare),
            repeat=arguments.number(args.repeat, "--repeat", int, 1, low=1),
            compare_budget=arguments.budget(args.compare_budget, None, "--compare-budget"),
            given=frozenset(
                name
                for name in ("model", "dialect", "max_turns", "temperature", "max_tokens")
                if getattr(args, name) is not None
            )
            | ({"native_tools"} if args.native_tools else set())
            | ({"request"} if args.request is not None else set())
            | ({"budget"} if args.budget is not None else set())
            | ({"constrain"} if args.constrain is not None else set())
            | ({"output_retries"} if args.output_retries is not None else set()),
        )
        return dataclasses.replace(options, **overrides) if overrides else options

    # ---- line commands: each checks its words and calls ``commands`` ---------------

    def _cmd_tools(self, args: list[str]) -> None:
        """Every registered tool, agent, relic and workflow: a table (--text: text)."""
        if [a for a in args if a != "--text"]:
            raise UsageError("%cortex tools takes only --text (a plain-text list)")
        commands.show_tools(self.session.registry, as_text="--text" in args)

    def _cmd_vars(self, args: list[str]) -> None:
        """What a model may reach with $name and why; what it may not (hidden, yours)."""
        commands.show_vars(self.session)

    def _cmd_expose(self, args: list[str]) -> None:
        """Let models reach notebook names: %cortex expose NAME|PATTERN [...] (e.g. df_*).

        A pattern covers every name it matches. Expose and hide apply in order: the latest
        one whose name or pattern matches a name decides (expose data_* then hide data_b
        leaves data_b hidden; hide data_* then expose data_a shows data_a)."""
        if not args:
            raise UsageError("%cortex expose: name the variables, e.g. %cortex expose df report")
        commands.expose(self.session, args)

    def _cmd_hide(self, args: list[str]) -> None:
        """Take names out of what models may reach: %cortex hide NAME|PATTERN [...].

        A pattern hides every name it matches: exposed ones and ones cortex runs bound,
        also those bound later, until a later expose matches them (the latest expose or
        hide that matches a name decides). A cell that writes $name still passes it."""
        if not args:
            raise UsageError("%cortex hide: name the variables, e.g. %cortex hide df")
        commands.hide(self.session, args)

    def _cmd_history(self, args: list[str]) -> None:
        """The conversation so far (what the model will see next time)."""
        commands.show_history(self.session.conversation)

    def _cmd_reset(self, args: list[str]) -> None:
        """Forget the conversation; the next %%cortex starts fresh."""
        commands.reset(self.session.conversation)

    def _cmd_stop(self, args: list[str]) -> None:
        """Cancel the fire_and_forget actions that outlived their cells."""
        commands.stop(self.session)

    def _cmd_views(self, args: list[str]) -> None:
        """The live views (clickable widgets); %cortex views close lets them all go."""
        if args not in ([], ["close"]):
            raise UsageError("%cortex views: use %cortex views, or %cortex views close.")
        if args == ["close"]:
            commands.close_views(self.session)
        else:
            commands.show_views(self.session)

    def _cmd_prompt(self, args: list[str]) -> None:
        """The system prompt the model is given (dialect, tools, feeds)."""
        dialect = args[0] if args else self.dialect
        if dialect not in DIALECTS:
            raise UsageError(f"%cortex prompt: unknown dialect {dialect!r}.")
        commands.show_prompt(self.session, dialect, self.native_tools)

    def _cmd_continue(self, args: list[str]) -> None:
        """Continue the last interrupted run where it stopped: %cortex continue
        [--budget USD] (a run its budget stopped goes on under a larger one)."""
        if args and (args[0] != "--budget" or len(args) != 2):
            raise UsageError("%cortex continue: it takes only --budget USD, e.g. --budget 0.10")
        budget = arguments.budget(args[1], None) if args else None
        self.session.continue_last(budget)

    def _cmd_resume(self, args: list[str]) -> None:
        """Go on with a stored run that did not finish, as itself: %cortex resume ID
        [--force] [--budget USD|Ntok] (--force: one marked running on another machine;
        --budget: a new budget over the whole run, for one its budget stopped)."""
        run_id, force, budget = arguments.resume(args)
        commands.resume(self.session, run_id, self._options(""), force=force, budget=budget)

    def _cmd_replay(self, args: list[str]) -> None:
        """Stream a saved transcript again: %cortex replay PATH [SPEED]."""
        if not 1 <= len(args) <= 2:
            raise UsageError(
                "%cortex replay: give a transcript path, e.g. %cortex replay run.jsonl 5"
            )
        speed = arguments.number(
            args[1] if len(args) == 2 else None, "speed", float, 1.0, low=0, strict=True
        )
        # The path as given, not through the cell's option line, which keeps quotes.
        self.session.run_cell("", self._options("", replay=args[0], speed=speed))

    def _cmd_save(self, args: list[str]) -> None:
        """Save the last run's transcript (JSON lines) to PATH."""
        if len(args) != 1:
            raise UsageError("%cortex save: give one path, e.g. %cortex save run.jsonl")
        run = self.session.last
        if run is None:
            raise UsageError("%cortex save: there is no run to save yet.")
        commands.save(run, args[0])

    def _cmd_runs(self, args: list[str]) -> None:
        """Stored runs, newest first: %cortex runs [TEXT] [--limit N] [--text] (TEXT
        searches them; --text: a plain-text table)."""
        as_text = "--text" in args
        words, limit = [a for a in args if a != "--text"], 20
        if "--limit" in words:
            at = words.index("--limit")
            if at + 1 >= len(words):
                raise UsageError("%cortex runs: --limit takes a number, e.g. --limit 50")
            limit = arguments.limit(words[at + 1], "%cortex runs")
            del words[at : at + 2]
        commands.show_runs(" ".join(words) or None, limit, session=self.session, as_text=as_text)

    def _cmd_open(self, args: list[str]) -> None:
        """Show a stored run and make it _cortex: %cortex open ID (an id's start will do)."""
        if len(args) != 1:
            raise UsageError(
                "%cortex open: give one run id, e.g. %cortex open 3f2a (see %cortex runs)"
            )
        commands.open_stored(self.session, args[0])

    def _cmd_debug(self, args: list[str]) -> None:
        """Full traceback: of _cortex.error (an unexpected failure), or %cortex debug ID."""
        if len(args) > 1:
            raise UsageError("%cortex debug: give at most one action id, e.g. %cortex debug a1")
        run = self.session.last
        if run is None:
            raise UsageError("%cortex debug: there is no run yet.")
        commands.debug(run, args[0] if args else None)

    def _cmd_config(self, args: list[str]) -> None:
        """Show the defaults, or set some: %cortex config model=gpt-4o max_turns=5."""
        for item in args:
            key, sep, value = item.partition("=")
            if not sep or not self.has_trait(key) or key in ("config", "parent", "shell"):
                known = ", ".join(self._config_names())
                raise UsageError(f"%cortex config: {item!r} is not name=value; names: {known}.")
            try:
                setattr(self, key, arguments.coerce(self.traits()[key], value))
            except (TraitError, ValueError) as exc:  # the message says what was wrong
                raise UsageError(
                    f"%cortex config: {key}={value!r} was refused: {exc} (it stays "
                    f"{getattr(self, key)!r})."
                ) from None
        for name in self._config_names():  # request defaults may hold a key
            print(redact(f"{name} = {getattr(self, name)!r}"))

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
        commands.show_cluster()

    def _cmd_local(self, args: list[str]) -> None:
        """A live model on this machine: %cortex local start [--port N] | stop | status."""
        command = args[0] if args else "status"
        if command == "start" and len(args) in (1, 3) and args[1:2] in ([], ["--port"]):
            port = arguments.number(args[2] if len(args) == 3 else None, "--port", int, None, low=1)
            if (model := commands.local_start(self.session, port)) is not None:
                self.model = model
        elif command == "stop" and len(args) == 1:
            if commands.local_stop(self.session) == self.model:
                self.model = self.traits()["model"].default_value
        elif command == "status" and len(args) <= 1:
            commands.local_status()
        else:
            raise _not_a_command("local", args, "%cortex local start [--port N], stop or status")

    def _cmd_trace(self, args: list[str]) -> None:
        """Where runs' traces go: %cortex trace | trace phoenix (start a local Phoenix)."""
        if args == ["phoenix"]:
            commands.trace_phoenix()
        elif not args:
            commands.show_trace()
        else:
            use = "%cortex trace (where spans go) or %cortex trace phoenix"
            raise _not_a_command("trace", args, use)

    def _cmd_eval(self, args: list[str]) -> Any:
        """Score how well the model follows each dialect (%cortex eval --help)."""
        if {"-h", "--help"} & set(args):
            return print(arguments.EVAL.format_help())
        given = arguments.EVAL.parse_args(args)
        return commands.evaluate_dialects(
            self.session,
            given.model or self.model, given.dialects, n=given.n, constrain=given.constrain,
            tasks=given.tasks, max_turns=given.max_turns, temperature=self.temperature,
            max_tokens=given.max_tokens, time_limit=given.time_limit,
        )  # fmt: skip

    def _cmd_experiment(self, args: list[str]) -> Any:
        """Run a dataset by agents: %cortex experiment DATASET --agents a,b [--repeat N]."""
        if {"-h", "--help"} & set(args):
            return print(arguments.EXPERIMENT.format_help())
        return commands.run_experiment(
            self.session, arguments.EXPERIMENT.parse_args(args), self._options
        )

    def _cmd_keep(self, args: list[str]) -> None:
        """Keep a compare cell's column as a test case: %cortex keep COLUMN --to DATASET."""
        commands.keep(self.session, arguments.KEEP.parse_args(args))

    def _cmd_mcp(self, args: list[str]) -> None:
        """MCP servers' tools as NAME.TOOL: %cortex mcp add|list|remove (%cortex mcp help)."""
        commands.mcp_command(args)


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
            complain(f"a setting was ignored: {exc}")


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
    options = magics._options(line)
    if options.compare is not None:
        from cortex_jupyter.session.compare import comparison

        await comparison(magics.session, cell, options, magics._columns(line)).run_async()
        return
    await magics.session.run_cell_async(cell, options)


def unregister(shell: InteractiveShell) -> None:
    """Take the magics out of a shell again (for ``%unload_ext``)."""
    forget(shell)
    run_store.configure_default()
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

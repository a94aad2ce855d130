"""Errors of the runtime layer: one class per way an action can fail.

Each message is built from typed fields, says what happened with the offending value,
and what to do about it. The scheduler records ``str(error)`` on the failed node, so
these messages are what a person reads in the action graph.

``CortexError`` is the shape every cortex error shares, the model clients' included
(``models.errors`` builds on it): a dataclass of the fields the message names, and a
``template`` that says how the message reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar


def _names(names: Iterable[str], *, empty: str = "none") -> str:
    listed = sorted(names)
    return ", ".join(listed) if listed else empty


def count(n: int, one: str, many: str) -> str:
    """``n`` with its noun: ``1 try``, ``3 tries``."""
    return f"1 {one}" if n == 1 else f"{n} {many}"


class CortexError(Exception):
    """Raised when cortex cannot do what was asked (the base of every cortex error).

    A subclass is a ``@dataclass(eq=False, repr=False)`` whose fields are what its message
    names, and whose ``template`` is ``str.format`` text that reaches them (and any property
    the class adds for a phrase that depends on them) as ``{e.name}``. The message is built
    once, when the error is made: it is ``str(error)``, as for any exception. An error
    pickles with its fields, whatever its constructor takes.
    """

    #: How the message reads: ``str.format`` text with the error as ``e``.
    template: ClassVar[str] = ""

    def __post_init__(self) -> None:
        super().__init__(self.template.format(e=self))

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restore, (type(self), self.args, self.__dict__))


def _restore(cls: type[CortexError], args: tuple[Any, ...], fields: dict[str, Any]) -> CortexError:
    """An unpickled error: its message and its fields, without calling its constructor."""
    error = cls.__new__(cls, *args)
    error.args = args
    error.__dict__.update(fields)
    return error


class CortexRuntimeError(CortexError):
    """Raised when the runtime cannot do what an action or a caller asked (base class)."""


@dataclass(eq=False, repr=False)
class UnknownVariable(CortexRuntimeError):
    """Raised when a ``$name`` names nothing in the run, the context feeds or the namespace."""

    name: str
    suggestions: Sequence[str] = ()
    template = (
        "unknown variable ${e.name}: it is not an output of this run, a context feed or a "
        "notebook variable ({e.hint}); write $$ for a literal dollar sign"
    )

    def __post_init__(self) -> None:
        self.suggestions = tuple(self.suggestions)
        super().__post_init__()

    @property
    def hint(self) -> str:
        if not self.suggestions:
            return "no similar name exists"
        return "did you mean " + ", ".join(f"${s}" for s in self.suggestions) + "?"


@dataclass(eq=False, repr=False)
class BadReference(CortexRuntimeError):
    """Raised when ``$name.part`` reaches for a key or attribute the value does not have,
    or one a model may not reach (``why`` says which rule)."""

    reference: str
    part: str
    value_type: str
    why: str = ""
    template = "${e.reference}{e.problem}"

    @property
    def problem(self) -> str:
        if self.why:
            return f" is not reachable: {self.why}"
        return f": a {self.value_type} has no key or attribute {self.part!r}"


@dataclass(eq=False, repr=False)
class NestedTooDeep(CortexRuntimeError):
    """Raised when an action's parameters nest lists and mappings deeper than ``limit``
    levels (walking them would overflow Python's stack)."""

    limit: int
    template = (
        "its parameters are nested too deep (over {e.limit} levels of lists and "
        "mappings), so it was not run"
    )


@dataclass(eq=False, repr=False)
class NotVisible(CortexRuntimeError):
    """Raised when a ``$name`` names a notebook object the model may not see (a variable
    the prompt never mentioned, IPython's history, a module)."""

    name: str
    why: str
    template = "{e.why}. The action was not run."


@dataclass(eq=False, repr=False)
class InvalidVariableName(CortexRuntimeError):
    """Raised when an ``output_key`` cannot be bound as a notebook variable."""

    name: str
    reason: str
    template = (
        "output_key {e.name!r} was not bound in the notebook: {e.reason}; "
        "the value stays reachable as _cortex.variables[{e.name!r}]"
    )


@dataclass(eq=False, repr=False)
class UnknownAction(CortexRuntimeError):
    """Raised when an action names nothing registered for its type."""

    type: str
    name: str
    registered: Iterable[str]
    template = "no {e.type} named {e.name!r} is registered; registered {e.type} names: {e.listed}"

    def __post_init__(self) -> None:
        self.registered = tuple(sorted(self.registered))
        super().__post_init__()

    @property
    def listed(self) -> str:
        return _names(self.registered)


@dataclass(eq=False, repr=False)
class InvalidArguments(CortexRuntimeError):
    """Raised when an action's parameters do not fit the registered function's signature."""

    type: str
    name: str
    missing: Sequence[str]
    unexpected: Sequence[str]
    takes: str
    template = "{e.type} {e.name!r} cannot be called: {e.faults}; it takes ({e.takes})"

    def __post_init__(self) -> None:
        self.missing = tuple(self.missing)
        self.unexpected = tuple(self.unexpected)
        super().__post_init__()

    @property
    def faults(self) -> str:
        problems = []
        if self.missing:
            problems.append(_plural("missing parameter", self.missing))
        if self.unexpected:
            problems.append(_plural("unexpected parameter", self.unexpected))
        return ", ".join(problems)


def _plural(label: str, names: Sequence[str]) -> str:
    quoted = ", ".join(repr(n) for n in names)
    return f"{label}{'s' if len(names) > 1 else ''} {quoted}"


@dataclass(eq=False, repr=False)
class RegistrationError(CortexRuntimeError):
    """Raised when something cannot be registered as an action (not callable, bad name...)."""

    what: str
    reason: str
    template = "cannot register {e.what}: {e.reason}"


@dataclass(eq=False, repr=False)
class ActionTimeout(CortexRuntimeError):
    """Raised when one attempt of an action runs longer than its ``timeout``."""

    id: str
    timeout: float
    attempt: int
    template = (
        "action {e.id!r} timed out after {e.timeout:g} s (attempt {e.attempt}); "
        "raise its timeout or make it faster"
    )


@dataclass(eq=False, repr=False)
class NoModelConfigured(CortexRuntimeError):
    """Raised when an ``llm`` or ``agent`` action runs and no model client is configured."""

    type: str
    name: str
    template = (
        "{e.type} action {e.name!r} needs a model, but no model is configured for this run; "
        "pass model=... to the runtime (or register the agent with its own model)"
    )


@dataclass(eq=False, repr=False)
class BudgetReached(CortexRuntimeError):
    """Raised when an ``llm`` action's request would pass the run's budget: it is not
    sent (the run's next turn then stops the run with status ``budget``)."""

    why: str
    template = "not sent: {e.why}"


@dataclass(eq=False, repr=False)
class InternalActionRefused(CortexRuntimeError):
    """Raised when an ``internal`` action is disabled or not on the allowlist."""

    name: str
    enabled: bool
    allowlist: Iterable[str]
    template = (
        "internal action {e.name!r} was refused: {e.why}; enable it with "
        "InternalPolicy(enabled=True, allow={{{e.name!r}}})"
    )

    def __post_init__(self) -> None:
        self.allowlist = tuple(sorted(self.allowlist))
        super().__post_init__()

    @property
    def why(self) -> str:
        if not self.enabled:
            return "internal actions are disabled"
        return f"it is not on the allowlist ({_names(self.allowlist, empty='empty')})"


@dataclass(eq=False, repr=False)
class UnknownFeed(CortexRuntimeError):
    """Raised when an internal action names a context feed that does not exist."""

    id: str
    feeds: Iterable[str]
    template = "no context feed {e.id!r}; feeds: {e.listed} (use add_feed to create it)"

    def __post_init__(self) -> None:
        self.feeds = tuple(sorted(self.feeds))
        super().__post_init__()

    @property
    def listed(self) -> str:
        return _names(self.feeds)


@dataclass(eq=False, repr=False)
class AgentDepthExceeded(CortexRuntimeError):
    """Raised when agents nest deeper than the runtime allows (an agent calling itself...)."""

    name: str
    depth: int
    template = (
        "agent {e.name!r} was not started: agents are already nested {e.depth} deep, "
        "which is the limit"
    )


@dataclass(eq=False, repr=False)
class WorkflowStepFailed(CortexRuntimeError):
    """Raised when a step of a list workflow fails, failing the workflow."""

    workflow: str
    step_id: str
    step_name: str
    error: str
    template = "workflow {e.workflow!r} stopped at step {e.step_id!r} ({e.step_name}): {e.error}"


@dataclass(eq=False, repr=False)
class CacheValueError(CortexRuntimeError):
    """Raised when a value given to the cache relic cannot be stored as JSON."""

    key: str
    value_type: str
    template = (
        "cache key {e.key!r}: a value of type {e.value_type} cannot be stored; the cache holds "
        "JSON values (str, int, float, bool, None, lists and dicts of them)"
    )


@dataclass(eq=False, repr=False)
class TranscriptError(CortexRuntimeError):
    """Raised when a JSONL transcript cannot be read back into a run record."""

    line: int
    reason: str
    template = "transcript line {e.line}: {e.reason}"


@dataclass(eq=False, repr=False)
class SchedulerNotRunning(CortexRuntimeError):
    """Raised when a scheduler is used outside its ``async with`` block."""

    what: str
    template = (
        "cannot {e.what}: the scheduler is not running; use it inside "
        "'async with Scheduler(...) as scheduler:'"
    )


@dataclass(eq=False, repr=False)
class AgentDidNotAnswer(CortexRuntimeError):
    """Raised when a nested agent's run ends without a final answer (its model failed,
    it hit its turn limit, its reply was cut off)."""

    name: str
    status: str
    reason: str | None
    template = (
        "agent {e.name!r} did not answer (its run ended {e.status!r}{e.why}); "
        "its actions and text are on this node's subrun"
    )

    @property
    def why(self) -> str:
        return f": {self.reason}" if self.reason else ""


@dataclass(eq=False, repr=False)
class ToolExited(CortexRuntimeError):
    """Raised when a tool raised ``SystemExit``, ``KeyboardInterrupt`` or another
    ``BaseException`` that is not an ``Exception`` (a command-line wrapper built on
    argparse or click exits this way): the action fails, the run goes on."""

    exc: BaseException
    template = "the tool raised {e.what}{e.hint}; the run went on without it"

    @property
    def what(self) -> str:
        kind = type(self.exc).__name__
        detail = str(self.exc)
        return f"{kind}({detail})" if detail else kind

    @property
    def hint(self) -> str:
        if isinstance(self.exc, SystemExit):
            return " (the tool called sys.exit, as argparse and click do on bad arguments)"
        return ""


@dataclass(eq=False, repr=False)
class ParameterTypeError(CortexRuntimeError):
    """Raised when a ``$name`` value does not have the type its parameter declares and
    cannot be converted to it without losing information (see ``runtime.core.values.coerce``)."""

    tool: str
    parameter: str
    reference: str
    #: What the parameter takes, as read: ``an int``, ``a string or null``.
    wants: str
    #: What the value is, as read: ``a str``, ``a float64 (nan)``, ``None``.
    got: str
    #: Why it was not converted, when that is not simply that something would be lost.
    why: str = "which cannot become one without loss"
    template = (
        "parameter {e.parameter!r} of {e.tool!r} wants {e.wants}, but {e.reference} is "
        "{e.got}, {e.why}; the action was not run"
    )


@dataclass(eq=False, repr=False)
class BadOutputType(CortexRuntimeError, TypeError):
    """Raised when an answer type (``Agent(output_type=T)``, ``--output T``) cannot be
    used: pydantic makes no validator or JSON schema for it, or the text naming it on a
    cell line is not a type that evaluates."""

    type_name: str
    why: str
    template = "the answer type {e.type_name} cannot be used: {e.why}"


def type_label(value: object) -> str:
    """The type of ``value`` as a person names it: ``int``, ``sqlite3.Connection``,
    ``numpy.float64`` (a builtin by its name, any other class with its module)."""
    kind = type(value)
    module = getattr(kind, "__module__", "") or ""
    name = getattr(kind, "__qualname__", kind.__name__)
    return name if module == "builtins" else f"{module}.{name}"

"""Errors of the runtime layer: one class per way an action can fail.

Each message is built from typed fields, says what happened with the offending value,
and what to do about it. The scheduler records ``str(error)`` on the failed node, so
these messages are what a person reads in the action graph.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def _names(names: Iterable[str], *, empty: str = "none") -> str:
    listed = sorted(names)
    return ", ".join(listed) if listed else empty


class CortexRuntimeError(Exception):
    """Raised when the runtime cannot do what an action or a caller asked (base class)."""


class UnknownVariable(CortexRuntimeError):
    """Raised when a ``$name`` names nothing in the run, the context feeds or the namespace."""

    def __init__(self, name: str, suggestions: Sequence[str] = ()) -> None:
        self.name = name
        self.suggestions = tuple(suggestions)
        hint = (
            "did you mean " + ", ".join(f"${s}" for s in self.suggestions) + "?"
            if self.suggestions
            else "no similar name exists"
        )
        super().__init__(
            f"unknown variable ${name}: it is not an output of this run, a context feed or a "
            f"notebook variable ({hint}); write $$ for a literal dollar sign"
        )


class BadReference(CortexRuntimeError):
    """Raised when ``$name.part`` reaches for a key or attribute the value does not have,
    or one a model may not reach (``why`` says which rule)."""

    def __init__(self, reference: str, part: str, value_type: str, why: str = "") -> None:
        self.reference = reference
        self.part = part
        self.value_type = value_type
        self.why = why
        if why:
            super().__init__(f"${reference} is not reachable: {why}")
        else:
            super().__init__(f"${reference}: a {value_type} has no key or attribute {part!r}")


class NestedTooDeep(CortexRuntimeError):
    """Raised when an action's parameters nest lists and mappings deeper than ``limit``
    levels (walking them would overflow Python's stack)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(
            f"its parameters are nested too deep (over {limit} levels of lists and "
            "mappings), so it was not run"
        )


class NotVisible(CortexRuntimeError):
    """Raised when a ``$name`` names a notebook object the model may not see (a variable
    the prompt never mentioned, IPython's history, a module)."""

    def __init__(self, name: str, why: str) -> None:
        self.name = name
        self.why = why
        super().__init__(f"{why}. The action was not run.")


class InvalidVariableName(CortexRuntimeError):
    """Raised when an ``output_key`` cannot be bound as a notebook variable."""

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        self.reason = reason
        super().__init__(
            f"output_key {name!r} was not bound in the notebook: {reason}; "
            f"the value stays reachable as _cortex.variables[{name!r}]"
        )


class UnknownAction(CortexRuntimeError):
    """Raised when an action names nothing registered for its type."""

    def __init__(self, type: str, name: str, registered: Iterable[str]) -> None:
        self.type = type
        self.name = name
        self.registered = tuple(sorted(registered))
        super().__init__(
            f"no {type} named {name!r} is registered; registered {type} names: "
            f"{_names(self.registered)}"
        )


class InvalidArguments(CortexRuntimeError):
    """Raised when an action's parameters do not fit the registered function's signature."""

    def __init__(
        self, type: str, name: str, missing: Sequence[str], unexpected: Sequence[str], takes: str
    ) -> None:
        self.type = type
        self.name = name
        self.missing = tuple(missing)
        self.unexpected = tuple(unexpected)
        self.takes = takes
        problems = []
        if self.missing:
            problems.append(_plural("missing parameter", self.missing))
        if self.unexpected:
            problems.append(_plural("unexpected parameter", self.unexpected))
        super().__init__(
            f"{type} {name!r} cannot be called: {', '.join(problems)}; it takes ({takes})"
        )


def _plural(label: str, names: Sequence[str]) -> str:
    quoted = ", ".join(repr(n) for n in names)
    return f"{label}{'s' if len(names) > 1 else ''} {quoted}"


class RegistrationError(CortexRuntimeError):
    """Raised when something cannot be registered as an action (not callable, bad name...)."""

    def __init__(self, what: str, reason: str) -> None:
        self.what = what
        self.reason = reason
        super().__init__(f"cannot register {what}: {reason}")


class ActionTimeout(CortexRuntimeError):
    """Raised when one attempt of an action runs longer than its ``timeout``."""

    def __init__(self, id: str, timeout: float, attempt: int) -> None:
        self.id = id
        self.timeout = timeout
        self.attempt = attempt
        super().__init__(
            f"action {id!r} timed out after {timeout:g} s (attempt {attempt}); "
            "raise its timeout or make it faster"
        )


class NoModelConfigured(CortexRuntimeError):
    """Raised when an ``llm`` or ``agent`` action runs and no model client is configured."""

    def __init__(self, type: str, name: str) -> None:
        self.type = type
        self.name = name
        super().__init__(
            f"{type} action {name!r} needs a model, but no model is configured for this run; "
            "pass model=... to the runtime (or register the agent with its own model)"
        )


class InternalActionRefused(CortexRuntimeError):
    """Raised when an ``internal`` action is disabled or not on the allowlist."""

    def __init__(self, name: str, enabled: bool, allowlist: Iterable[str]) -> None:
        self.name = name
        self.enabled = enabled
        self.allowlist = tuple(sorted(allowlist))
        why = (
            f"it is not on the allowlist ({_names(self.allowlist, empty='empty')})"
            if enabled
            else "internal actions are disabled"
        )
        super().__init__(
            f"internal action {name!r} was refused: {why}; enable it with "
            f"InternalPolicy(enabled=True, allow={{{name!r}}})"
        )


class UnknownFeed(CortexRuntimeError):
    """Raised when an internal action names a context feed that does not exist."""

    def __init__(self, id: str, feeds: Iterable[str]) -> None:
        self.id = id
        self.feeds = tuple(sorted(feeds))
        super().__init__(
            f"no context feed {id!r}; feeds: {_names(self.feeds)} (use add_feed to create it)"
        )


class AgentDepthExceeded(CortexRuntimeError):
    """Raised when agents nest deeper than the runtime allows (an agent calling itself...)."""

    def __init__(self, name: str, depth: int) -> None:
        self.name = name
        self.depth = depth
        super().__init__(
            f"agent {name!r} was not started: agents are already nested {depth} deep, "
            "which is the limit"
        )


class WorkflowStepFailed(CortexRuntimeError):
    """Raised when a step of a list workflow fails, failing the workflow."""

    def __init__(self, workflow: str, step_id: str, step_name: str, error: str) -> None:
        self.workflow = workflow
        self.step_id = step_id
        self.step_name = step_name
        self.error = error
        super().__init__(
            f"workflow {workflow!r} stopped at step {step_id!r} ({step_name}): {error}"
        )


class CacheValueError(CortexRuntimeError):
    """Raised when a value given to the cache relic cannot be stored as JSON."""

    def __init__(self, key: str, value_type: str) -> None:
        self.key = key
        self.value_type = value_type
        super().__init__(
            f"cache key {key!r}: a value of type {value_type} cannot be stored; the cache holds "
            "JSON values (str, int, float, bool, None, lists and dicts of them)"
        )


class TranscriptError(CortexRuntimeError):
    """Raised when a JSONL transcript cannot be read back into a run record."""

    def __init__(self, line: int, reason: str) -> None:
        self.line = line
        self.reason = reason
        super().__init__(f"transcript line {line}: {reason}")


class SchedulerNotRunning(CortexRuntimeError):
    """Raised when a scheduler is used outside its ``async with`` block."""

    def __init__(self, what: str) -> None:
        self.what = what
        super().__init__(
            f"cannot {what}: the scheduler is not running; use it inside "
            "'async with Scheduler(...) as scheduler:'"
        )


class AgentDidNotAnswer(CortexRuntimeError):
    """Raised when a nested agent's run ends without a final answer (its model failed,
    it hit its turn limit, its reply was cut off)."""

    def __init__(self, name: str, status: str, reason: str | None) -> None:
        self.name = name
        self.status = status
        self.reason = reason
        why = f": {reason}" if reason else ""
        super().__init__(
            f"agent {name!r} did not answer (its run ended {status!r}{why}); "
            "its actions and text are on this node's subrun"
        )


class ToolExited(CortexRuntimeError):
    """Raised when a tool raised ``SystemExit``, ``KeyboardInterrupt`` or another
    ``BaseException`` that is not an ``Exception`` (a command-line wrapper built on
    argparse or click exits this way): the action fails, the run goes on."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc
        kind = type(exc).__name__
        detail = str(exc)
        what = f"{kind}({detail})" if detail else kind
        hint = ""
        if isinstance(exc, SystemExit):
            hint = " (the tool called sys.exit, as argparse and click do on bad arguments)"
        super().__init__(f"the tool raised {what}{hint}; the run went on without it")


class ParameterTypeError(CortexRuntimeError):
    """Raised when a ``$name`` value does not have the type its parameter declares and
    cannot be converted to it without losing information (see ``runtime.core.coerce``)."""

    def __init__(self, tool: str, parameter: str, reference: str, wants: str, got: str) -> None:
        self.tool = tool
        self.parameter = parameter
        self.reference = reference
        self.wants = wants
        self.got = got
        super().__init__(
            f"parameter {parameter!r} of {tool!r} wants {wants}, but {reference} is a {got} "
            "that cannot become one without loss; the action was not run"
        )

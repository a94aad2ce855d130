"""What a run is, as one value the scheduler reads: ``RunSpec``.

A run needs its registry (what actions may call), the names ``$name`` may reach, a
model for ``llm`` actions, its approval rules, the host's hooks (where events go, how
outputs become variables, which task group owns ``fire_and_forget`` actions) and its
limits (threads, nesting depth). These used to be seventeen keyword arguments handed on
by every caller; now an ``Agent`` builds one ``RunSpec`` and a nested agent derives its
own from its caller's (``nested``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from anyio.abc import TaskGroup

from cortex_jupyter.protocol.events import Action
from cortex_jupyter.runtime.core.calls.registry import Registry, default_registry
from cortex_jupyter.runtime.core.cost.budget import Spend
from cortex_jupyter.runtime.core.errors import InternalActionRefused
from cortex_jupyter.runtime.core.events import AnyEvent
from cortex_jupyter.runtime.core.model.chunks import StreamingModel
from cortex_jupyter.runtime.core.record.observer import RunObserver
from cortex_jupyter.runtime.scheduler.approval import Approver, Rules

__all__ = ["BindCallback", "EventCallback", "InternalPolicy", "RetryPolicy", "RunSpec"]

EventCallback = Callable[[AnyEvent], None]
BindCallback = Callable[[str, Any], None]


@dataclass(frozen=True)
class InternalPolicy:
    """Which ``internal`` actions (changes to the agent's own context) may run."""

    enabled: bool = False
    allow: frozenset[str] = field(default_factory=frozenset)

    def check(self, name: str) -> None:
        if not self.enabled or name not in self.allow:
            raise InternalActionRefused(name, self.enabled, self.allow)


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff between attempts: ``base * factor ** (n - 1)`` seconds, at most ``max_delay``.

    ``default_retries`` is used by ``on_error: "retry"`` when the action sets no ``retry``.
    """

    base: float = 0.5
    factor: float = 2.0
    max_delay: float = 10.0
    default_retries: int = 2

    def delay(self, failed_attempt: int) -> float:
        return float(min(self.max_delay, self.base * self.factor ** (failed_attempt - 1)))

    def retries(self, action: Action) -> int:
        if action.retry:
            return action.retry
        return self.default_retries if action.on_error == "retry" else 0


@dataclass(frozen=True)
class RunSpec:
    """One run: what it may call and reach, its rules, the host's hooks and its limits.

    ``feeds`` are the context feeds' current values (``$id`` reaches them); ``request``
    the extra fields every model request of the run sends (``runtime.loop.request``);
    ``rules`` the approval rules (``Rules.of("ask")`` unless given); ``on_event`` gets
    every run event, ``bind`` makes an output a notebook variable, ``background`` owns
    ``fire_and_forget`` actions that may outlive the run (``None``: the run waits).
    """

    registry: Registry = field(default=default_registry, repr=False)
    namespace: Mapping[str, Any] = field(default_factory=dict, repr=False)
    model: StreamingModel | None = None
    feeds: MutableMapping[str, str] = field(default_factory=dict, repr=False)
    internal: InternalPolicy = InternalPolicy()
    retry: RetryPolicy = RetryPolicy()
    rules: Rules = field(default_factory=lambda: Rules.of("ask"))
    request: Mapping[str, Any] = field(default_factory=dict)
    #: What the run spent, against its budget: one object shared by the runs nested in
    #: it, so a nested agent's requests count against its caller's budget.
    spend: Spend = field(default_factory=Spend, repr=False, compare=False)
    # the host's hooks
    on_event: EventCallback | None = field(default=None, repr=False)
    bind: BindCallback | None = field(default=None, repr=False)
    background: TaskGroup | None = field(default=None, repr=False)
    #: The host's observers of the run (a store's ``Recording``), beside those every run
    #: gets (``runtime.core.record.observer.observers_for``).
    observers: tuple[RunObserver, ...] = field(default=(), repr=False)
    # limits
    depth: int = 0
    max_depth: int = 3
    #: For the run's observers (traces): the agent's name, its conversation's id, and the
    #: sampling settings it sends beside ``request`` (temperature, max_tokens).
    agent: str | None = None
    conversation: str | None = None
    sampling: Mapping[str, Any] = field(default_factory=dict)
    max_threads: int = 32

    @classmethod
    def of(
        cls,
        *,
        approve: Approver | None = None,
        approve_names: frozenset[str] = frozenset(),
        approve_timeout: float | None = None,
        **options: Any,
    ) -> RunSpec:
        """A spec from keyword arguments, as ``Scheduler(registry=..., run=...)`` takes
        them: ``None`` means the default, and ``approve`` (an approver; ``None``: the
        terminal), ``approve_names`` and ``approve_timeout`` make the rules unless
        ``rules`` is given. An unknown keyword is a ``TypeError`` naming it."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise TypeError(f"unexpected keyword argument(s) for a run: {', '.join(unknown)}")
        given = {name: value for name, value in options.items() if value is not None}
        if "rules" not in given:
            fixed = (approve,) if approve is not None else ()
            given["rules"] = Rules(approve_names, fixed, approve is None, approve_timeout)
        if "request" in given:
            given["request"] = dict(given["request"])
        return cls(**given)

    def nested(self, **changes: Any) -> RunSpec:
        """The spec of a run nested one level deeper (an ``agent`` action's), with
        ``changes``: the names it reaches and its limit on depth stay the caller's
        unless changed, and the host's bind and background hooks and its observers are
        never inherited (the nested run's events reach them through the caller's run)."""
        changes = {"bind": None, "background": None, "observers": (), **changes}
        return replace(self, depth=self.depth + 1, **changes)

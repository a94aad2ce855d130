"""How many tries run at once, and when an experiment stops starting them.

- ``endpoint_of(model)``: the server a model reaches (its ``endpoint``), ``"script"`` for a
  model that asks no server, so limits hold per server, not per agent column;
- ``Gates``: one ``anyio.CapacityLimiter`` per endpoint (one at a time for a local
  server, ``DEFAULT_REMOTE`` for others, as many as asked with ``concurrency=``), which
  a 429 halves and holds shut for the server's ``Retry-After`` (``back_off``);
- ``Allowance``: an experiment's budget (dollars or tokens): each running try holds a share
  of what is left, which is its run's own budget, and the shares never add up to more than
  the budget, so no mix of tries can pass it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

import anyio

from cortex_jupyter.runtime.core.cost.budget import Budget

__all__ = ["DEFAULT_REMOTE", "DEFAULT_SCRIPT", "Allowance", "Gates", "endpoint_of", "is_local"]

#: Tries at once against a remote server when ``concurrency`` is not given (pydantic_evals
#: has no default bound, Inspect AI 10 connections, promptfoo 4, ADK 4).
DEFAULT_REMOTE = 4
#: Tries at once for models that ask no server (scripts): the machine is the bound.
DEFAULT_SCRIPT = 8
_LOCAL_HOSTS = ("127.0.0.1", "localhost", "[::1]", "0.0.0.0")


def endpoint_of(model: Any) -> str:
    """The server ``model`` reaches (``host:port``), or ``"script"`` for a model that asks
    none (a script or a replay, which cost nothing)."""
    if getattr(model, "free", None) or model is None:
        return "script"
    endpoint = getattr(model, "endpoint", None)
    return str(endpoint) if endpoint else f"model:{getattr(model, 'name', type(model).__name__)}"


def is_local(endpoint: str) -> bool:
    """Whether ``endpoint`` is a server on this machine (a llama.cpp server runs one reply at
    a time: more at once only queue there)."""
    host = endpoint.split("//")[-1].rsplit(":", 1)[0]
    return host in _LOCAL_HOSTS


@dataclass
class Gates:
    """Per endpoint: how many tries may run at once (``concurrency``: an int for every
    endpoint, a mapping endpoint -> int, or None for the defaults)."""

    concurrency: int | dict[str, int] | None = None
    _limiters: dict[str, anyio.CapacityLimiter] = field(default_factory=dict)
    _closed_until: dict[str, float] = field(default_factory=dict)

    def limit(self, endpoint: str) -> int:
        given = self.concurrency
        if isinstance(given, dict) and endpoint in given:
            return given[endpoint]
        if isinstance(given, int):
            return given
        if endpoint == "script":
            return DEFAULT_SCRIPT
        return 1 if is_local(endpoint) else DEFAULT_REMOTE

    def limiter(self, endpoint: str) -> anyio.CapacityLimiter:
        found = self._limiters.get(endpoint)
        if found is None:
            found = self._limiters[endpoint] = anyio.CapacityLimiter(self.limit(endpoint))
        return found

    async def wait_open(self, endpoint: str) -> None:
        """Wait out a ``Retry-After`` the endpoint asked for."""
        until = self._closed_until.get(endpoint, 0.0)
        while (left := until - time.monotonic()) > 0:
            await anyio.sleep(left)
            until = self._closed_until.get(endpoint, 0.0)

    def back_off(self, endpoint: str, retry_after: float | None, attempt: int) -> float:
        """The server said 429: halve its tries at once (never below one) and hold it shut
        for ``retry_after`` seconds (else 1, 2, 4... s by ``attempt``, at most 60).
        Returns the wait."""
        limiter = self.limiter(endpoint)
        limiter.total_tokens = max(1, math.ceil(limiter.total_tokens / 2))
        wait = retry_after if retry_after is not None and retry_after >= 0 else 2.0**attempt
        wait = min(float(wait), 60.0)
        self._closed_until[endpoint] = max(
            self._closed_until.get(endpoint, 0.0), time.monotonic() + wait
        )
        return wait


@dataclass
class Allowance:
    """An experiment's budget, as tries start and end (see the module docstring).

    Each running try holds a share of what is left (``held``), which is also its run's own
    budget: the shares never add up to more than the budget, so no mix of tries can pass
    it. Until a try has spent something, tries run one at a time with the whole of what is
    left (what a try costs is not known yet); after that a try's share is ``HEADROOM``
    times the dearest try so far, and a try starts only when such a share is left. When
    none is left and no try runs that could give some back, scheduling stops (``stopped``).
    """

    budget: Budget | None
    spent: float = 0.0
    dearest: float = 0.0
    held: list[float] = field(default_factory=list)
    finished: int = 0
    stopped: str | None = None

    #: A try may spend up to this many times the dearest try so far.
    HEADROOM: ClassVar[float] = 1.25

    @classmethod
    def of(cls, value: Any) -> Allowance:
        return cls(Budget.parse(value))

    @property
    def running(self) -> int:
        return len(self.held)

    def amount(self, cost: float | None, tokens: int) -> float:
        if self.budget is None:
            return 0.0
        return float(tokens) if self.budget.unit == "tok" else float(cost or 0.0)

    def _left(self) -> float:
        assert self.budget is not None
        return self.budget.limit - self.spent - sum(self.held)

    def may_start(self) -> bool:
        """Whether another try may start now; False also while running tries hold what it
        needs (they give back what they did not spend). ``stopped`` says when none ever will."""
        if self.budget is None:
            return True
        if self.stopped is not None:
            return False
        if self.held and self.dearest <= 0:
            return False  # one at a time until a try has said what a try costs
        want = self.dearest * self.HEADROOM
        left = self._left()
        if left > 0 and left >= want:
            return True
        if self.held:
            return False
        if self.spent >= self.budget.limit:
            self.stopped = f"the experiment's budget of {self.budget} is spent"
        else:
            self.stopped = (
                f"the experiment's budget of {self.budget} would be passed: "
                f"{self.budget.show(self.spent)} spent, a try costs up to "
                f"{self.budget.show(self.dearest)}"
            )
        return False

    def grant(self) -> Budget | None:
        """The share of a try starting now (its run's budget), held until ``ended``."""
        if self.budget is None:
            self.held.append(0.0)
            return None
        left = max(self._left(), 0.0)
        amount = left if self.dearest <= 0 else min(left, self.dearest * self.HEADROOM)
        if self.budget.unit == "tok":
            amount = float(max(1, math.floor(amount)))
        self.held.append(amount)  # above 0: ``may_start`` let it start only with room left
        return Budget(amount, self.budget.unit)

    def ended(self, granted: Budget | None, cost: float | None, tokens: int) -> None:
        """A try that held ``granted`` ended, having spent ``cost`` / ``tokens``."""
        self.held.remove(0.0 if granted is None else granted.limit)
        self.finished += 1
        amount = self.amount(cost, tokens)
        self.spent += amount
        self.dearest = max(self.dearest, amount)

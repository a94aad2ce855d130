"""How many tries run at once, and when an experiment stops starting them.

- ``endpoint_of(model)``: the server a model reaches (its ``endpoint``), ``"script"`` for a
  model that asks no server, so limits hold per server, not per agent column;
- ``Gates``: one ``anyio.CapacityLimiter`` per endpoint (one at a time for a local
  server, ``DEFAULT_REMOTE`` for others, as many as asked with ``concurrency=``), which
  a 429 halves and holds shut for the server's ``Retry-After`` (``back_off``);
- ``Allowance``: an experiment's budget (dollars or tokens): a try starts only when what
  was spent, what running tries may still spend, and what the dearest try so far cost fit
  in it, and each try gets what is left as its own run budget, so no try can pass it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

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
    """An experiment's budget, as tries start and end (see the module docstring)."""

    budget: Budget | None
    spent: float = 0.0
    dearest: float = 0.0
    running: int = 0
    finished: int = 0
    stopped: str | None = None

    @classmethod
    def of(cls, value: Any) -> Allowance:
        return cls(Budget.parse(value))

    def amount(self, cost: float | None, tokens: int) -> float:
        if self.budget is None:
            return 0.0
        return float(tokens) if self.budget.unit == "tok" else float(cost or 0.0)

    def may_start(self) -> bool:
        """Whether another try fits; once one does not, none does (``stopped`` says why)."""
        if self.budget is None:
            return True
        if self.stopped is not None:
            return False
        if self.running and self.dearest <= 0:
            # Tries run alone until one has spent something: it says what a try costs (a
            # first try that failed before its request spent nothing and says nothing).
            return False
        need = self.spent + (self.running + 1) * self.dearest
        if self.finished and need > self.budget.limit:
            self.stopped = (
                f"the experiment's budget of {self.budget} would be passed: "
                f"{self.budget.show(self.spent)} spent, a try costs up to "
                f"{self.budget.show(self.dearest)}"
            )
            return False
        if self.spent >= self.budget.limit:
            self.stopped = f"the experiment's budget of {self.budget} is spent"
            return False
        return True

    def share(self) -> Budget | None:
        """The run budget of a try starting now: what is left, less what running tries may
        still spend."""
        if self.budget is None:
            return None
        left = self.budget.limit - self.spent - self.running * self.dearest
        left = max(left, 1.0 if self.budget.unit == "tok" else 1e-9)
        return Budget(math.floor(left) if self.budget.unit == "tok" else left, self.budget.unit)

    def started(self) -> None:
        self.running += 1

    def ended(self, cost: float | None, tokens: int) -> None:
        self.running -= 1
        self.finished += 1
        amount = self.amount(cost, tokens)
        self.spent += amount
        self.dearest = max(self.dearest, amount)

"""What calling one tool means: where its function runs, how a generator's partial
results stream, how a tool that exits is told apart from one that fails, and how a
failure reads on its node. The scheduler decides when; this module does the call."""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
from typing import Any

import anyio
import anyio.to_thread

from cortex_jupyter.runtime.core.calls.registry import Registry, ToolSpec
from cortex_jupyter.runtime.core.errors import CortexRuntimeError, ToolExited
from cortex_jupyter.runtime.core.record.run import summarize
from cortex_jupyter.runtime.core.trust.bounded import message
from cortex_jupyter.runtime.core.trust.secrets import redact
from cortex_jupyter.runtime.scheduler.capture import current

__all__ = ["call_tool", "drain_generator", "error_text"]


def error_text(exc: BaseException) -> str:
    """How a failure reads on a node: our own errors as they are, others with their type;
    secrets redacted (an exception may quote a key). A task group's ``ExceptionGroup``
    of one error reads as that error."""
    while (inner := getattr(exc, "exceptions", None)) and isinstance(inner, tuple):
        if len(inner) != 1:
            break
        exc = inner[0]
    if isinstance(exc, CortexRuntimeError):
        return redact(message(exc))
    text = redact(message(exc))
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def call_tool(
    spec: ToolSpec, args: list[Any], kwargs: dict[str, Any], limiter: anyio.CapacityLimiter
) -> Any:
    """Call a tool's function: on the loop when it is async, in a worker thread (bounded by
    ``limiter``) when it is not, off the process when it has an ``executor``. A generator
    streams partial results. A tool that exits (``SystemExit``, its own Ctrl-C) fails
    with ``ToolExited`` instead of ending the kernel; cancellation passes through."""
    try:
        if spec.executor is not None:
            # Off the kernel's process: the executors integration passes its runner in.
            elsewhere = Registry.run_elsewhere
            if elsewhere is None:
                raise CortexRuntimeError(
                    f"{spec.name}: executor= needs cortex_jupyter.runtime.integrations."
                    "executors, which is not loaded"
                )
            return await elsewhere(spec.executor, spec.func, args, kwargs)
        if spec.is_async or spec.type == "internal":
            result = spec.func(*args, **kwargs)
        else:
            call = functools.partial(spec.func, *args, **kwargs)
            result = await anyio.to_thread.run_sync(call, abandon_on_cancel=True, limiter=limiter)
        if inspect.isawaitable(result):
            return await result
        if inspect.isasyncgen(result) or inspect.isgenerator(result):
            return await drain_generator(result, limiter)
        return result
    except anyio.get_cancelled_exc_class():
        raise  # the run is being stopped: not the tool's failure
    except Exception:
        raise
    except BaseException as exc:  # SystemExit from argparse, the tool's own Ctrl-C...
        raise ToolExited(exc) from exc


async def drain_generator(gen: Any, limiter: anyio.CapacityLimiter) -> Any:
    """A generator tool streams partial results: each yielded value is the node's
    latest output (shown live, coalesced); the return value, or else the last
    yielded one, is the output. Sync generators advance in a worker thread."""
    capture = current()
    last: Any = None
    done = object()
    if inspect.isasyncgen(gen):
        try:
            async for item in gen:
                last = item
                if capture is not None:
                    capture.node.output = item
                    capture.partial(summarize(item))
        finally:
            await gen.aclose()
        return last

    # A timeout or Stop abandons the worker thread of a running step: closing the
    # generator under it raises "generator already executing". Whichever side comes
    # last closes it: this coroutine when no step runs, else the step as it returns.
    lock = threading.Lock()
    state = {"stepping": False, "stopped": False}

    def step() -> Any:
        with lock:
            if state["stopped"]:
                return (done, None)
            state["stepping"] = True
        try:
            return next(gen)
        except StopIteration as stop:
            return (done, stop.value)
        finally:
            stepped()

    def stepped() -> None:
        with lock:
            state["stepping"] = False
            last_one = state["stopped"]
        if last_one:
            _close_abandoned(gen)

    try:
        while True:
            item = await anyio.to_thread.run_sync(step, abandon_on_cancel=True, limiter=limiter)
            if isinstance(item, tuple) and len(item) == 2 and item[0] is done:
                return item[1] if item[1] is not None else last
            last = item
            if capture is not None:
                capture.node.output = item
                capture.partial(summarize(item))
    finally:
        with lock:
            state["stopped"] = True
            running = state["stepping"]
        if not running:
            gen.close()


def _close_abandoned(gen: Any) -> None:
    """Close a generator whose run stopped waiting for it (in the thread of its last
    step): nothing is left to report a failure to."""
    with contextlib.suppress(Exception):
        gen.close()

"""The runtime's errors: built from their fields, they pickle whole (a tool's error
raised in a worker process crosses back to the kernel)."""

from __future__ import annotations

import pickle

import pytest

from cortex_jupyter.runtime.core import errors
from cortex_jupyter.runtime.integrations.executors import (
    ClusterUnavailable,
    NotSendable,
    WorkerDied,
)

CASES: list[errors.CortexRuntimeError] = [
    errors.UnknownVariable("x", ["xa", "xb"]),
    errors.BadReference("a.b", "b", "int"),
    errors.UnknownAction("tool", "t", ["b", "a"]),
    errors.InvalidArguments("tool", "t", ["a"], ["c"], "a, b"),
    errors.ActionTimeout("a1", 2.5, 2),
    errors.InternalActionRefused("i", True, []),
    errors.TranscriptError(3, "bad"),
    errors.AgentDidNotAnswer("a", "failed", "its model failed"),
    errors.ToolExited(SystemExit(2)),
    errors.ParameterTypeError("t", "p", "$x", "an int", "a bool", "which is never converted"),
    NotSendable("arg", "Lock", "a worker", "cannot pickle '_thread.lock' object"),
    WorkerDied("t", "a worker", "killed"),
    ClusterUnavailable(None, "default", "no ports"),
]


@pytest.mark.parametrize("error", CASES, ids=lambda v: type(v).__name__)
def test_a_runtime_error_survives_pickling_with_its_message_and_fields(
    error: errors.CortexRuntimeError,
) -> None:
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error)
    assert str(back) == str(error)
    assert {k: repr(v) for k, v in vars(back).items()} == {
        k: repr(v) for k, v in vars(error).items()
    }


def test_a_message_names_the_values_it_was_built_from() -> None:
    error = errors.UnknownAction("tool", "serch", {"search", "fetch"})
    assert str(error) == (
        "no tool named 'serch' is registered; registered tool names: fetch, search"
    )
    assert error.registered == ("fetch", "search")

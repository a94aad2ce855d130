"""One step of ``$name.path`` (``runtime.core.trust.reach``): what a step may go through, what it
may start from or land on, and the names of the refusals."""

from __future__ import annotations

import logging
import os
import sys
import types
from collections import ChainMap
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest

from cortex_jupyter.runtime.core.trust.reach import Refused, machinery, namespace, step


@dataclass
class Fields:
    kept: int = 1
    shared: ClassVar[int] = 2
    hidden: list[int] = field(default_factory=list)


class Slots:
    __slots__ = ("a",)

    def __init__(self) -> None:
        self.a = 5


def _frame() -> types.FrameType:
    return sys._getframe()


@pytest.mark.parametrize(
    ("value", "what"),
    [
        (os, "a module"),
        (int, "a class"),
        (len, "a function or method"),
        ([].append, "a function or method"),
        (_frame(), "a frame"),
        (_frame.__code__, "a code object"),
        (globals(), "a namespace"),
        (vars(os), "a namespace"),
        (os.environ, "a namespace"),
        (sys.modules, "a namespace"),
        (ChainMap({}, globals()), "a namespace"),
        (vars(Fields), "a class's namespace"),
    ],
)
def test_machinery_is_named(value: Any, what: str) -> None:
    assert what in (machinery(value) or "")


@pytest.mark.parametrize("value", [1, "text", [1], {"a": 1}, Fields(), Slots(), ChainMap({})])
def test_data_is_not_machinery(value: Any) -> None:
    assert machinery(value) is None and not namespace(value)


@pytest.mark.parametrize(
    ("value", "part", "expected"),
    [
        ({"a": 1}, "a", 1),
        ({1: "one"}, "1", "one"),
        ([10, 20], "1", 20),
        (Fields(), "kept", 1),
        (Fields(), "shared", 2),  # a notebook class's public attribute
        (Slots(), "a", 5),
        (types.SimpleNamespace(x=3), "x", 3),
        (3, "real", 3),
        (ValueError("boom"), "args", ("boom",)),
    ],
)
def test_allowed_steps(value: Any, part: str, expected: Any) -> None:
    assert step(value, part) == expected


@pytest.mark.parametrize(
    ("value", "part", "why"),
    [
        ("text", "upper", "it is a function or method"),
        ([1], "append", "'append' is not data of list"),
        (logging.getLogger("x"), "root", "'root' is not data of Logger"),
        (Fields(), "__dict__", "names starting with '_' are private"),
        (_frame(), "f_globals", "nothing inside a frame is reachable"),
        (types.SimpleNamespace(g=globals()), "g", "it is a namespace"),
        (types.SimpleNamespace(m=os), "m", "it is a module"),
    ],
)
def test_refused_steps_say_why(value: Any, part: str, why: str) -> None:
    with pytest.raises(Refused) as refused:
        step(value, part)
    assert why in refused.value.why


@pytest.mark.parametrize(("value", "part"), [(types.SimpleNamespace(), "missing"), ("text", "0")])
def test_a_step_that_finds_nothing_says_nothing(value: Any, part: str) -> None:
    with pytest.raises(Refused) as refused:
        step(value, part)
    assert refused.value.why == ""


def test_an_instance_dict_that_is_a_namespace_is_not_own_data() -> None:
    class Sneaky:
        pass

    sneaky = Sneaky()
    sneaky.__dict__ = globals()  # type: ignore[assignment]
    with pytest.raises(Refused):
        step(sneaky, "pytest")

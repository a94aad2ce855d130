"""What travels between the kernel and the process that runs a tool, and how.

Why a module of its own: both sides of a call (``call`` in the kernel, ``worker`` on
the other process) must agree on it. The function and its arguments are pickled with
cloudpickle, so functions defined in a notebook or a test body travel by value; the
answer is an ``Outcome``. A tool's exception comes back with its remote traceback, in
which the kernel puts back the file names and source lines cloudpickle lost on the way.
"""

from __future__ import annotations

import functools
import inspect
import linecache
import re
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cortex_jupyter.runtime.core.errors import type_label

__all__ = [
    "Outcome",
    "RemoteTraceback",
    "dumps",
    "dumps_or_why",
    "exception_label",
    "loads",
    "type_label",
    "with_sources",
]


@dataclass
class Outcome:
    """What comes back from the worker. The value (or the exception) is pickled on its
    own, so one that cannot be loaded here still leaves the output and a clear error.
    ``label`` is the exception as ``Type: message`` (or what could not be sent),
    ``detail`` its remote traceback (or why it could not be pickled)."""

    kind: str  # "ok" | "raised" | "unsendable" | "cancelled"
    blob: bytes | None = None
    label: str = ""
    detail: str = ""
    batches: list[dict[str, Any]] = field(default_factory=list)
    progress: tuple[float, float | None, str] | None = None
    partial: str | None = None


def dumps(value: Any) -> bytes:
    """``cloudpickle.dumps``, typed: functions defined in ``__main__`` (a notebook, a
    test body) travel by value. Imported on first use, as the engines are."""
    import cloudpickle  # type: ignore[import-untyped]  # 3.1 ships no py.typed or stubs

    return bytes(cloudpickle.dumps(value))


def loads(blob: bytes | None) -> Any:
    """``cloudpickle.loads`` (``None`` for no blob)."""
    if blob is None:
        return None
    import cloudpickle

    return cloudpickle.loads(blob)


def dumps_or_why(value: Any) -> bytes | str:
    """``value`` pickled, or why it cannot be."""
    try:
        return dumps(value)
    except Exception as exc:
        return str(exc) or type(exc).__name__


def exception_label(exc: BaseException) -> str:
    """``Type: message``, or just ``Type`` when the message is empty."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class RemoteTraceback(Exception):
    """The traceback of a tool's exception on the worker (its ``__cause__`` here)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return self.text


_DYNAMIC_FRAME = re.compile(r'^(\s*)File "<dynamic-code>", line (\d+), in (\S+)$')


def with_sources(detail: str, func: Callable[..., Any]) -> str:
    """The worker's traceback with the kernel's file names and source lines put back.

    cloudpickle (3.1.3 on) names the file of a function pickled by value
    ``<dynamic-code>``, so the worker cannot show the line that raised; the line
    numbers survive, and the kernel has the function's own code objects and source."""
    files = _code_files(func)
    if not files:
        return detail
    out: list[str] = []
    lines = detail.splitlines(keepends=True)
    for i, line in enumerate(lines):
        match = _DYNAMIC_FRAME.match(line.rstrip("\n"))
        filename = files.get(match.group(3)) if match else None
        if match is None or filename is None:
            out.append(line)
            continue
        indent, number = match.group(1), int(match.group(2))
        out.append(f'{indent}File "{filename}", line {number}, in {match.group(3)}\n')
        source = linecache.getline(filename, number).strip()
        shown = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if source and shown != source:  # the worker could not read it
            out.append(f"{indent}    {source}\n")
    return "".join(out)


def _code_files(func: Any) -> dict[str, str]:
    """The file of each code object a tool carries, by its name (nested ones too)."""
    while isinstance(func, functools.partial):
        func = func.func
    code = getattr(inspect.unwrap(func), "__code__", None)
    files: dict[str, str] = {}
    stack = [code] if isinstance(code, types.CodeType) else []
    while stack:
        code = stack.pop()
        if not code.co_filename.startswith("<"):
            files.setdefault(code.co_name, code.co_filename)
        stack.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    return files

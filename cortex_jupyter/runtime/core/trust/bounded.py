"""Bounded text of any value: what every summary, description and note shows of it.

A tool may return something huge (200 MB of ``bytes``, a long string, a big list): its
full ``repr`` costs several times its size in memory and seconds of time, only to be
cut to one line. ``reprlib`` bounds strings and the builtin containers, but looks up
its helpers by type *name*, so ``bytes``, big ``int``\\ s and subclasses of ``str`` or
``list`` fall through to a full ``repr``. ``BoundedRepr`` dispatches on the type
itself and reads only the part it shows. An object with its own ``__repr__`` (of
unknown cost) is still asked for it, since nothing else knows what it wants to show,
and its answer is cut; one whose ``__repr__`` raises shows as
``<Name: repr failed: ValueError: ...>``.
"""

from __future__ import annotations

import builtins
import reprlib
from collections import deque
from collections.abc import Callable
from typing import Any

__all__ = ["BoundedRepr", "bounded_repr", "bounded_str", "failed", "message", "whole_repr"]


class BoundedRepr(reprlib.Repr):
    """``reprlib.Repr`` that never makes the full repr of strings, bytes, big ints or
    subclasses of the builtin containers."""

    def __init__(self, limit: int = 160, items: int = 8, level: int = 3) -> None:
        super().__init__()
        self.maxstring = self.maxother = self.maxlong = limit
        self.maxlist = self.maxtuple = self.maxset = self.maxfrozenset = items
        self.maxdict = self.maxdeque = self.maxarray = items
        self.maxlevel = level
        #: What stands for the cut part (``reprlib``'s own attribute since 3.11, which
        #: typeshed does not list): ``secrets.Repr`` sets a marker it can find.
        self.fillvalue: str = "..."

    def repr1(self, x: Any, level: int) -> str:
        if isinstance(x, str):
            return str(self.repr_str(str.__getitem__(x, slice(0, self.maxstring + 1)), level))
        if isinstance(x, bytes | bytearray):
            return self._bytes(x)
        if isinstance(x, int) and not isinstance(x, bool) and x.bit_length() > 4 * self.maxlong:
            return f"<int of {x.bit_length():,} bits>"
        for base, method in _CONTAINERS:
            if isinstance(x, base):
                own: object = type(x).__repr__
                if own is not base.__repr__:
                    break  # its own __repr__: asked, then cut
                return str(getattr(self, method)(x, level))
        return super().repr1(x, level)

    def _bytes(self, x: bytes | bytearray) -> str:
        head = builtins.repr(memoryview(x)[: self.maxstring].tobytes())
        if len(x) <= self.maxstring and len(head) <= self.maxstring:
            shown = head
        else:
            shown = f"{head[: max(self.maxstring - 3, 0)]}{self.fillvalue} ({len(x):,} bytes)"
        return f"bytearray({shown})" if isinstance(x, bytearray) else shown

    def repr_instance(self, x: Any, level: int) -> str:
        try:
            s = builtins.repr(x)
        except Exception as exc:
            return failed(x, "repr", exc)
        if len(s) > self.maxother:
            s = s[: max(self.maxother - 3, 0)] + self.fillvalue
        return s


#: Builtin containers whose ``reprlib`` helper is used for their subclasses too (when
#: a subclass keeps the builtin ``__repr__``); dict subclasses before the rest.
_CONTAINERS: tuple[tuple[type, str], ...] = (
    (dict, "repr_dict"),
    (list, "repr_list"),
    (tuple, "repr_tuple"),
    (set, "repr_set"),
    (frozenset, "repr_frozenset"),
    (deque, "repr_deque"),
)


def message(exc: BaseException) -> str:
    """``str(exc)``, or ``<unprintable Name>`` when its ``__str__`` raises (an exception
    a tool raised is untrusted: reading it never raises another)."""
    try:
        return str(exc)
    except Exception:
        return f"<unprintable {type(exc).__name__}>"


def failed(value: Any, what: str, exc: BaseException) -> str:
    """``<Name: repr failed: ValueError: message>``, the message itself bounded."""
    text = " ".join(message(exc)[:200].split())
    detail = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return f"<{type(value).__name__}: {what} failed: {detail}>"


def bounded_repr(value: Any, limit: int = 160, items: int = 8, level: int = 3) -> str:
    """A repr of ``value`` that reads only what it shows (strings and bytes cut at
    ``limit`` characters, containers at ``items`` entries and ``level`` deep) and never
    raises."""
    try:
        return BoundedRepr(limit, items, level).repr(value)
    except Exception as exc:
        return failed(value, "repr", exc)


def bounded_str(value: Any, limit: int = 160) -> str:
    """``str(value)`` cut to ``limit`` characters, without making the whole ``str`` of
    text, bytes, big ints or builtin containers; an object's own ``__str__`` is asked
    and its answer cut. Never raises."""
    if isinstance(value, str):
        text = str.__getitem__(value, slice(0, limit + 1))
    elif isinstance(value, bytes | bytearray | int | dict | list | tuple | set | frozenset):
        text = bounded_repr(value, limit=limit)
    else:
        try:
            text = str(value)
        except Exception as exc:
            return failed(value, "str", exc)
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


class _Full(Exception):
    """Raised inside ``whole_repr`` when its text reached the limit."""


#: Containers nested deeper than this are shown by ``other`` (no stack overflow).
_WHOLE_DEPTH = 64


def whole_repr(
    value: Any,
    limit: int,
    text: Callable[[str, int], tuple[str, bool]],
    other: Callable[[Any, int], str],
) -> tuple[str, bool]:
    """``repr(value)`` of builtin containers as Python writes it, whole up to ``limit``
    characters and never made further; and whether it was cut. Each string is first
    passed through ``text(string, room)`` (which redacts and cuts it, saying whether it
    cut), every value that is not a builtin container nor a string through
    ``other(value, room)`` (a bounded repr)."""
    out: list[str] = []
    room = [limit + 1]

    def emit(piece: str, cut: bool = False) -> None:
        out.append(piece)
        room[0] -= len(piece)
        if cut or room[0] <= 0:
            raise _Full

    try:
        _whole(value, emit, room, text, other, ())
    except _Full:
        return "".join(out), True
    return "".join(out), False


_OPEN: dict[type, tuple[str, str]] = {
    list: ("[", "]"),
    tuple: ("(", ")"),
    set: ("{", "}"),
    frozenset: ("frozenset({", "})"),
}
_EMPTY: dict[type, str] = {
    dict: "{}",
    list: "[]",
    tuple: "()",
    set: "set()",
    frozenset: "frozenset()",
}


def _whole(
    value: Any,
    emit: Callable[..., None],
    room: list[int],
    text: Callable[[str, int], tuple[str, bool]],
    other: Callable[[Any, int], str],
    stack: tuple[int, ...],
) -> None:
    kind = type(value)
    if kind is str:
        shown, cut = text(value, room[0])
        emit(builtins.repr(shown), cut)
        return
    if kind not in (dict, *_OPEN) or len(stack) >= _WHOLE_DEPTH:
        emit(other(value, room[0]))
        return
    if id(value) in stack:
        emit("{...}" if kind is dict else "[...]")
        return
    stack = (*stack, id(value))
    if not value:
        emit(_EMPTY[kind])
        return
    if kind is dict:
        emit("{")
        for i, (key, item) in enumerate(value.items()):
            emit(", " * (i > 0))
            _whole(key, emit, room, text, other, stack)
            emit(": ")
            _whole(item, emit, room, text, other, stack)
        emit("}")
        return
    opening, closing = _OPEN[kind]
    emit(opening)
    for i, item in enumerate(value):
        emit(", " * (i > 0))
        _whole(item, emit, room, text, other, stack)
    emit("," * (kind is tuple and len(value) == 1) + closing)

"""Objects whose protocol methods raise: what a tool may return or a notebook may hold.

Each class breaks one thing Python or a library calls without asking (``items``,
``__len__``, ``__eq__``, ``__hash__``, ``__bool__``, ``__iter__``, ``__getattr__``,
``__repr__``, ``__str__``); cortex must show such a value in one line, never fail a run
or a command over it.
"""

from __future__ import annotations

from typing import Any, NoReturn


class Broken(RuntimeError):
    """What every odd object raises."""


def _fail(*_: object) -> NoReturn:
    raise Broken("this object refuses")


class ItemsDict(dict[str, int]):
    items = _fail  # type: ignore[assignment]


class IterDict(dict[str, int]):
    __iter__ = _fail  # type: ignore[assignment]
    keys = _fail  # type: ignore[assignment]


class LenList(list[int]):
    __len__ = _fail  # type: ignore[assignment]


class IterList(list[int]):
    __iter__ = _fail  # type: ignore[assignment]


class EqObject:
    __eq__ = _fail  # type: ignore[assignment]
    __hash__ = object.__hash__


class HashObject:
    __hash__ = _fail  # type: ignore[assignment]


class BoolObject:
    __bool__ = _fail


class GetattrObject:
    def __getattr__(self, name: str) -> Any:
        _fail()


class ReprObject:
    __repr__ = _fail  # type: ignore[assignment]
    __str__ = _fail  # type: ignore[assignment]


class ReprList(list[int]):
    __repr__ = _fail  # type: ignore[assignment]
    __str__ = _fail  # type: ignore[assignment]


def odd_objects() -> dict[str, Any]:
    """One of each, by a name for a test id."""
    return {
        "items": ItemsDict(a=1),
        "dict_iter": IterDict(a=1),
        "len": LenList([1, 2]),
        "list_iter": IterList([1, 2]),
        "eq": EqObject(),
        "hash": HashObject(),
        "bool": BoolObject(),
        "getattr": GetattrObject(),
        "repr": ReprObject(),
        "list_repr": ReprList([1]),
    }


class ClassObject:
    """``isinstance`` reads ``__class__`` whenever the type alone does not answer."""

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # type: ignore[override]
        _fail()


class AttributeObject:
    """Every attribute lookup raises, ``__class__`` and ``__dict__`` included."""

    def __getattribute__(self, name: str) -> Any:
        _fail()


def notebook_only_objects() -> dict[str, Any]:
    """Objects a notebook may hold that no tool can hand back whole (calling a tool asks
    its result whether it is awaitable, and these refuse to say): one of each."""
    return {"class": ClassObject(), "getattribute": AttributeObject()}

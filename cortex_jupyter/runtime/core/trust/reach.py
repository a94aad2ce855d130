"""What one step of a ``$name.path`` may go through: the rule, written as an allow-list.

Model text is untrusted, and a path through public attributes reaches the interpreter
(``$slider.comm.kernel.shell.user_ns``, ``$gen.gi_frame.f_globals``): every deny-list of
names has been walked around. So a step is allowed only when it is one of:

1. a **key** of a mapping or an **index** of a sequence (not of a string) or of a data
   library's array, index or series (``$arr.0``, ``$df.columns.1``);
2. an object's **own data**: an attribute in its instance ``__dict__``, a ``__slots__``
   field, a declared field of a dataclass, attrs class, pydantic model or namedtuple;
3. a **widget's state**: a trait an ipywidget syncs to the front end (``value``,
   ``description``, ``layout``...; never ``comm``, ``keys`` or ``log``);
4. a public **attribute or property of a data type**: one a class defined in the
   notebook (``__main__`` or the user's own modules, not installed libraries) declares,
   or one of the data libraries (numpy, pandas, polars, pyarrow, xarray), the standard
   library's value types (datetime, decimal, fractions, pathlib, uuid, ipaddress, enum,
   collections), Python's numbers, strings, ranges and exceptions.

And whatever a step starts from or lands on is never interpreter machinery (``machinery``):
a module, class, function or method, descriptor, code object, frame, traceback,
generator, coroutine, cell, weak reference (its target is never checked), a namespace
mapping (a module's or the notebook's globals, a
class's ``__dict__``, ``os.environ``, ``sys.modules``), or an object of the kernel or the
shell (IPython, ipykernel, jupyter_client, comm, zmq, tornado, traitlets). Names
starting with ``_`` are never a step. What is hidden from the model is checked by the
caller (``variables``: the value of a name the model may not see).

What a step lands on is also looked inside (``holds``): a tuple, a dict, an object
column or a notebook object *holding* machinery or a hidden name's value is refused as
the thing it holds would be (``$err.args`` holding a hidden string, a property returning
a copy of ``globals()``, ``$df.iloc.0`` a row holding a module). The look is bounded:
``HOLDS_DEPTH`` levels, ``HOLDS_ITEMS`` objects in all; an array or a frame of numbers
(any dtype but ``object``) is not walked at all.

Pure: reads objects, never changes them; the only code it runs is a trusted class's
property or ``__getattr__`` and a mapping's or sequence's item lookup.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import types
import weakref
from collections import ChainMap, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import lru_cache
from itertools import islice
from typing import Any

__all__ = ["DATA_LIBRARIES", "KERNEL_PACKAGES", "Refused", "holds", "machinery", "step"]

#: Libraries whose classes' public attributes and properties are data (``$df.shape``).
DATA_LIBRARIES = frozenset(("numpy", "pandas", "polars", "pyarrow", "xarray"))
#: The standard library's value types, read the same way (``$when.year``, ``$path.name``).
VALUE_MODULES = frozenset(
    ("datetime", "decimal", "fractions", "pathlib", "uuid", "ipaddress", "enum", "collections")
)
#: Packages of the kernel and the shell: nothing of theirs is a value a path may hold.
KERNEL_PACKAGES = frozenset(
    [
        *("IPython", "ipykernel", "jupyter_client", "jupyter_core", "comm"),
        *("zmq", "tornado", "traitlets", "debugpy"),
    ]
)
#: Python's own types whose public attributes are data (``$n.real``, ``$err.args``).
_VALUE_TYPES = (int, float, complex, str, bytes, range, slice, BaseException)

_CODE = (
    (types.FrameType, "a frame"),
    (types.CodeType, "a code object"),
    (types.TracebackType, "a traceback"),
    (types.GeneratorType, "a generator"),
    (types.CoroutineType, "a coroutine"),
    (types.AsyncGeneratorType, "an async generator"),
    (types.CellType, "a closure cell"),
    (types.ModuleType, "a module"),
    (type, "a class"),
    (types.MappingProxyType, "a class's namespace"),
    # A proxy stands for an object it is not (its type is the proxy's), a ref hands it
    # out when called: either would carry a module, a function or a hidden value past
    # every check on what a step lands on.
    ((weakref.ProxyType, weakref.CallableProxyType, weakref.ReferenceType), "a weak reference"),
)
_ROUTINES = (
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.MethodWrapperType,
    types.WrapperDescriptorType,
    types.MethodDescriptorType,
    types.ClassMethodDescriptorType,
    types.GetSetDescriptorType,
    types.MemberDescriptorType,
    staticmethod,
    classmethod,
    property,
)
_MISSING = object()
#: How far ``holds`` looks inside what a step lands on: levels, and objects in all.
HOLDS_DEPTH = 3
HOLDS_ITEMS = 400


class Refused(Exception):
    """Raised when a step is not allowed (``why``) or finds nothing (``why`` empty);
    the caller turns it into its ``BadReference``."""

    def __init__(self, why: str = "") -> None:
        super().__init__(why)
        self.why = why


def step(value: Any, part: str) -> Any:
    """What ``value.part`` (a key, an index or an attribute) holds, when the rule allows
    the step; else raises ``Refused`` saying why."""
    start = machinery(value)
    if start is not None:
        raise Refused(f"nothing inside {start} is reachable")
    found = _item(value, part)
    if found is _MISSING:
        if part.startswith("_"):
            raise Refused("names starting with '_' are private")
        found = _attribute(value, part)
    landed = machinery(found)
    if landed is not None:
        raise Refused(f"it is {landed}, never a value a model may reach")
    return found


def holds(value: Any, hidden: Callable[[Any], str | None]) -> str | None:
    """Why ``value`` may not be reached for what it holds, or None: the first object
    inside it (breadth first, ``HOLDS_DEPTH`` levels, ``HOLDS_ITEMS`` objects) that is
    machinery or whose hidden name ``hidden`` gives. ``value`` itself is the caller's to
    check. Reads containers without running their code (but a data library's own
    iteration of an object column)."""
    seen = {id(value)}
    queue: deque[tuple[Any, int]] = deque([(value, 0)])
    budget = HOLDS_ITEMS
    while queue and budget > 0:
        current, depth = queue.popleft()
        for item in islice(_inside(current), budget):
            budget -= 1
            if id(item) in seen:
                continue
            seen.add(id(item))
            kind = machinery(item)
            if kind is not None:
                return f"it holds {kind}"
            name = hidden(item)
            if name is not None:
                return f"it holds the value of ${name}, which the model may not see"
            if depth + 1 < HOLDS_DEPTH:
                queue.append((item, depth + 1))
    return None


def _inside(value: Any) -> Iterator[Any]:
    """The objects ``value`` holds: a mapping's keys and values, a collection's items,
    an exception's ``args``, an object column's cells, an object's own public data."""
    kind = type(value)
    try:
        if issubclass(kind, str | bytes | bytearray | int | float | complex) or value is None:
            return iter(())
        if issubclass(kind, dict):
            return _pairs(dict.items(value))
        if issubclass(kind, list | tuple | set | frozenset | deque):
            return iter(list(islice(_native_iter(value), HOLDS_ITEMS)))
        if issubclass(kind, BaseException):
            return iter(_tuple(BaseException.__dict__["args"].__get__(value)))
        if _root(kind) in DATA_LIBRARIES:
            return _cells(value)
        if issubclass(kind, Mapping):
            return _pairs(islice(value.items(), HOLDS_ITEMS))
        return _fields(value)
    except Exception:  # an odd object refused to be read: nothing found inside it
        return iter(())


def _native_iter(value: Any) -> Iterator[Any]:
    """``value``'s items by its built-in base's iteration (a subclass's ``__iter__`` is
    never run)."""
    base: Any = next(b for b in (list, tuple, set, frozenset, deque) if isinstance(value, b))
    iterate: Callable[[Any], Iterator[Any]] = base.__iter__
    return iterate(value)


def _pairs(items: Iterable[tuple[Any, Any]]) -> Iterator[Any]:
    for key, item in items:
        yield key
        yield item


def _cells(value: Any) -> Iterator[Any]:
    """The cells of a data library's object array, series, index or frame; nothing for
    one of numbers, dates or strings of a fixed width (never walked element by element)."""
    kind = type(value)
    if not hasattr(kind, "dtype") and hasattr(kind, "dtypes") and hasattr(kind, "items"):
        if any(getattr(d, "kind", "O") == "O" for d in list(value.dtypes)):
            return (column for _, column in value.items())
        return iter(())
    dtype = getattr(value, "dtype", None)
    if getattr(dtype, "kind", None) != "O":
        return iter(())
    if getattr(value, "ndim", 1) == 0:
        return iter((value[()],))
    return iter(list(islice(iter(value), HOLDS_ITEMS)))


def _fields(value: Any) -> Iterator[Any]:
    """An object's own public data: its instance ``__dict__`` and declared fields."""
    own = _own_data(value)
    if own is None:
        try:  # a namespace as the instance dict is itself what it holds
            space = object.__getattribute__(value, "__dict__")
        except Exception:
            space = None
        if space is not None and type(space) is dict:
            yield space
    else:
        yield from (item for name, item in list(own.items()) if not name.startswith("_"))
    for name in _declared(value):
        if own is None or not dict.__contains__(own, name):
            try:
                yield object.__getattribute__(value, name)
            except Exception:
                continue


# ---- what a value is -------------------------------------------------------------------


def machinery(value: Any) -> str | None:
    """What ``value`` is when it is interpreter machinery (see the module docstring), as
    a phrase (``"a frame"``), or None when it is data. Asks ``type(value)``, never the
    value (whose ``__class__`` may lie or raise)."""
    kind = type(value)
    for cls, phrase in _CODE:
        if issubclass(kind, cls):
            return phrase
    if issubclass(kind, _ROUTINES):
        return "a function or method"
    if namespace(value):
        return "a namespace (the variables of a module, the notebook or the process)"
    root = _root(kind)
    if root in KERNEL_PACKAGES:
        return f"part of the kernel or the shell ({kind.__module__}.{kind.__qualname__})"
    return None


def namespace(value: Any) -> bool:
    """Whether ``value`` is a namespace mapping: a module's or the notebook's globals
    (a dict holding ``__builtins__`` or ``__name__``), ``os.environ``, ``sys.modules``,
    a frame's locals, or a ``ChainMap`` over one of them."""
    if value is os.environ or value is sys.modules or value is getattr(os, "environb", None):
        return True
    kind = type(value)
    if issubclass(kind, dict):
        return dict.__contains__(value, "__builtins__") or dict.__contains__(value, "__name__")
    if issubclass(kind, ChainMap):
        own = _own_data(value)
        maps = own.get("maps") if own is not None else None
        return isinstance(maps, list) and any(namespace(m) for m in maps if m is not value)
    return kind.__name__ == "FrameLocalsProxy"


def _module(kind: type) -> str:
    """``kind``'s module name, read as ``type`` defines it (a metaclass cannot lie)."""
    module = type.__dict__["__module__"].__get__(kind)
    return module if isinstance(module, str) else ""


def _root(kind: type) -> str:
    return _module(kind).split(".", 1)[0]


# ---- 1. keys and indexes ----------------------------------------------------------------


def _item(value: Any, part: str) -> Any:
    kind = type(value)
    try:
        if issubclass(kind, Mapping):
            if part in value:
                return value[part]
            if part.isdigit() and int(part) in value:
                return value[int(part)]
        elif (
            issubclass(kind, Sequence)
            and not issubclass(kind, str)
            and part.isdigit()
            and int(part) < len(value)
        ):
            return value[int(part)]
        elif part.isdigit() and _root(kind) in DATA_LIBRARIES and _owner(kind, "__getitem__"):
            return _indexed(value, int(part))
    except Refused:
        raise
    except Exception as exc:  # an odd container refused: the step finds nothing
        raise Refused(f"looking it up raised {type(exc).__name__}") from None
    return _MISSING


def _indexed(value: Any, index: int) -> Any:
    """``value[index]`` of a data library's array, index or series (``$arr.0``,
    ``$df.columns.1``), or nothing when it has no such item."""
    try:
        return value[index]
    except (IndexError, KeyError, TypeError, ValueError):
        return _MISSING


# ---- 2-4. attributes ---------------------------------------------------------------------


def _attribute(value: Any, part: str) -> Any:
    own = _own_data(value)
    if own is not None and dict.__contains__(own, part):
        return own[part]
    if part in _declared(value) or part in _widget_state(value):
        return _get(value, part)
    owner = _owner(type(value), part)
    if owner is None:
        owner = _owner(type(value), "__getattr__")
        if owner is None:
            raise Refused()  # nothing of that name anywhere
    if not trusted(owner):
        raise Refused(
            f"{part!r} is not data of {type(value).__name__} (a path steps through keys, "
            "indexes, an object's own fields, a widget's state and the public attributes "
            "of notebook classes and data libraries)"
        )
    return _get(value, part)


def _get(value: Any, part: str) -> Any:
    try:
        return getattr(value, part)
    except AttributeError:
        raise Refused() from None
    except Exception as exc:  # a property that raised: the step reached nothing
        raise Refused(f"reading it raised {type(exc).__name__}") from None


def _own_data(value: Any) -> dict[str, Any] | None:
    """The instance ``__dict__`` (read without running the class's code), unless it is a
    namespace (``obj.__dict__ = globals()``)."""
    try:
        own = object.__getattribute__(value, "__dict__")
    except Exception:
        return None
    if type(own) is not dict or namespace(own):
        return None
    return own


def _declared(value: Any) -> set[str]:
    """The names ``value``'s class declares as fields: ``__slots__``, dataclass, attrs,
    pydantic and namedtuple fields (read from the classes, never from the value)."""
    names: set[str] = set()
    for cls in _mro(type(value)):
        space = cls.__dict__
        slots = space.get("__slots__", ())
        names.update((slots,) if isinstance(slots, str) else _strings(slots))
        fields = space.get("__dataclass_fields__")
        if isinstance(fields, dict):  # ClassVar and InitVar pseudo-fields are not data
            names.update(
                n for n, f in fields.items() if repr(getattr(f, "_field_type", None)) == "_FIELD"
            )
        attrs = _tuple(space.get("__attrs_attrs__"))
        names.update(_strings([getattr(a, "name", None) for a in attrs]))
        if issubclass(cls, tuple):
            names.update(_strings(space.get("_fields", ())))
        pydantic = space.get("__pydantic_fields__")
        if isinstance(pydantic, dict):
            names.update(_strings(pydantic))
    return {n for n in names if isinstance(n, str) and not n.startswith("_")}


def _widget_state(value: Any) -> frozenset[str]:
    """An ipywidget's synced traits (what its front end shows), else nothing."""
    if not any(_is(cls, "ipywidgets.widgets.widget", "Widget") for cls in _mro(type(value))):
        return frozenset()
    try:
        return frozenset(value.traits(sync=True))
    except Exception:
        return frozenset()


def _owner(kind: type, part: str) -> type | None:
    """The first class of ``kind``'s MRO whose own namespace has ``part``."""
    return next((cls for cls in _mro(kind) if part in cls.__dict__), None)


def trusted(cls: type) -> bool:
    """Whether ``cls``'s public attributes are data: a notebook class, or one of the data
    libraries, the standard library's value types or Python's value types."""
    if cls in _VALUE_TYPES or (_module(cls) == "builtins" and issubclass(cls, BaseException)):
        return True
    root = _root(cls)
    return root in DATA_LIBRARIES or root in VALUE_MODULES or _notebook_module(_module(cls))


@lru_cache(maxsize=512)
def _notebook_module(name: str) -> bool:
    """Whether module ``name`` is the notebook's (``__main__``) or the user's own: a file
    outside the standard library and every installed package (cortex_jupyter is one)."""
    if name == "__main__":
        return True
    if name.split(".", 1)[0] in ("builtins", "cortex_jupyter", *sys.builtin_module_names):
        return False
    module = sys.modules.get(name)
    path = getattr(module, "__file__", None) if module is not None else None
    if not isinstance(path, str):
        return False
    path = os.path.realpath(path)
    if any(part in ("site-packages", "dist-packages") for part in path.split(os.sep)):
        return False
    return not any(path.startswith(os.path.realpath(p) + os.sep) for p in _library_paths())


@lru_cache(maxsize=1)
def _library_paths() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    found = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths}
    found.add(os.path.dirname(os.__file__))
    return tuple(sorted(found))


def _mro(kind: type) -> tuple[type, ...]:
    mro = type.__dict__["__mro__"].__get__(kind)
    return mro if isinstance(mro, tuple) else (kind,)


def _is(cls: type, module: str, name: str) -> bool:
    return _module(cls) == module and cls.__name__ == name


def _strings(items: Any) -> list[str]:
    try:
        return [item for item in items if isinstance(item, str)]
    except Exception:
        return []


def _tuple(items: Any) -> tuple[Any, ...]:
    return tuple(items) if isinstance(items, tuple | list) else ()

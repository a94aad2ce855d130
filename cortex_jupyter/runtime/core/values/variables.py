"""``$name`` references in action parameters: finding them and resolving them.

Pure functions, no I/O. Resolution happens at dispatch time over a list of scopes
searched in order (outputs of this run, context feeds, the notebook namespace):

- a string that is exactly ``"$name"`` (or ``"$name.key.attr"``) becomes the object
  itself, identity preserved;
- ``$name`` inside a longer string is replaced by ``str(value)``;
- ``$name.key`` / ``$name.attr`` / ``$name.0`` reach inside, one step at a time, by the
  allow-list in ``reach`` (keys, indexes, an object's own fields, a widget's state, the
  public attributes of notebook classes and data libraries; never interpreter
  machinery), and never land on the value of a notebook name the run's ``Scope`` hides,
  nor end on a container or an object holding one or holding machinery (``reach.holds``;
  model text is untrusted: ``$gen.gi_frame.f_globals`` must lead nowhere);
- ``$$`` is a literal ``$``; a ``$`` not followed by a name is left as it is.

Lists, tuples and dict values are walked recursively; dict keys are left alone.
"""

from __future__ import annotations

import builtins
import difflib
import keyword
import re
from collections import ChainMap
from collections.abc import Mapping, Sequence
from typing import Any

from cortex_jupyter.protocol import MAX_JSON_DEPTH
from cortex_jupyter.runtime.core.errors import (
    BadReference,
    InvalidVariableName,
    NestedTooDeep,
    NotVisible,
    UnknownVariable,
)
from cortex_jupyter.runtime.core.trust.reach import Refused, holds, namespace, step
from cortex_jupyter.runtime.core.trust.scope import NEVER_VISIBLE, Scope

#: One ``$name[.path]`` reference (group 1: the name, group 2: ``.path``), or ``$$``.
#: The one place the pattern lives: the display fills the same references.
REFERENCE = re.compile(r"\$\$|\$([A-Za-z_][A-Za-z0-9_]*)((?:\.[A-Za-z0-9_]+)*)")
_MISSING = object()

# Names IPython itself keeps in the user namespace; binding over them breaks the shell.
RESERVED_NAMES: frozenset[str] = frozenset(("In", "Out", "get_ipython", "exit", "quit"))


def find_references(value: Any) -> set[str]:
    """The top-level names referenced by ``$name`` anywhere inside ``value`` (no deeper
    than ``MAX_JSON_DEPTH``: ``resolve`` refuses deeper values)."""
    found: set[str] = set()
    _collect(value, found, 0)
    return found


def _collect(value: Any, found: set[str], depth: int) -> None:
    if isinstance(value, str):
        if "$" in value:
            found.update(m.group(1) for m in REFERENCE.finditer(value) if m.group(1))
    elif depth >= MAX_JSON_DEPTH:
        return
    elif isinstance(value, Mapping):
        for item in value.values():
            _collect(item, found, depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            _collect(item, found, depth + 1)


def resolve(value: Any, scopes: Sequence[Mapping[str, Any]], depth: int = 0) -> Any:
    """``value`` with every reference replaced, looked up in ``scopes`` in order.

    Raises ``UnknownVariable`` (with the closest existing names), ``BadReference``, or
    ``NestedTooDeep`` for containers nested deeper than ``MAX_JSON_DEPTH``. Values
    without references come back as the same objects.
    """
    if isinstance(value, str):
        return _resolve_string(value, scopes) if "$" in value else value
    if not isinstance(value, Mapping | list | tuple):
        return value
    if depth >= MAX_JSON_DEPTH:
        raise NestedTooDeep(MAX_JSON_DEPTH)
    depth += 1
    if isinstance(value, Mapping):
        return {key: resolve(item, scopes, depth) for key, item in value.items()}
    if isinstance(value, list):
        return [resolve(item, scopes, depth) for item in value]
    return tuple(resolve(item, scopes, depth) for item in value)


def _resolve_string(text: str, scopes: Sequence[Mapping[str, Any]]) -> Any:
    whole = REFERENCE.fullmatch(text)
    if whole is not None and whole.group(1):
        return _lookup(whole.group(1), whole.group(2), scopes)

    def replace(match: re.Match[str]) -> str:
        if not match.group(1):
            return "$"
        return str(_lookup(match.group(1), match.group(2), scopes))

    return REFERENCE.sub(replace, text)


def _lookup(name: str, path: str, scopes: Sequence[Mapping[str, Any]]) -> Any:
    value = _MISSING
    for scope in scopes:
        if name in scope:
            value = scope[name]
            break
    if value is _MISSING:
        for scope in scopes:
            hidden = getattr(scope, "hidden", None)
            why = hidden(name) if hidden is not None else None
            if why:
                raise NotVisible(name, why)
        raise UnknownVariable(name, suggest(name, scopes))
    if namespace(value):  # the notebook's globals() under another name: all it hides
        raise BadReference(name, name, type(value).__name__, _NAMESPACE)
    if not path:
        return value
    guard = _Hidden(scopes)
    reached = name
    for part in path.split(".")[1:]:
        ref = f"{reached}.{part}"
        try:
            value = step(value, part)
        except Refused as refused:
            raise BadReference(ref, part, type(value).__name__, refused.why) from None
        owner = guard.owner(value)
        if owner is not None:
            why = f"it is the value of ${owner}, which the model may not see"
            raise BadReference(ref, part, type(value).__name__, why)
        reached = ref
    # What the path hands on is looked inside (a step passing through a container that
    # holds machinery elsewhere is not: only what it lands on is given to anyone).
    held = holds(value, guard.owner)
    if held is not None:
        raise BadReference(reached, path.rsplit(".", 1)[1], type(value).__name__, held)
    return value


_NAMESPACE = "it is a namespace (the variables of a module, the notebook or the process)"


class _Hidden:
    """The objects a path may never land on: the values of the notebook names the run's
    ``Scope`` does not show (numbers, booleans, ``None`` and one-character strings
    aside: Python shares equal ones, so they say nothing about where a value came
    from). Which names hold what is read once, on first use, for one reference; a
    name's visibility only for the names holding the object landed on."""

    def __init__(self, scopes: Sequence[Mapping[str, Any]]) -> None:
        self._scopes = [s for s in _flat(scopes) if isinstance(s, Scope)]
        self._holders: list[dict[int, list[str]]] | None = None

    def owner(self, value: Any) -> str | None:
        """The hidden name whose value ``value`` is (and no visible name's), or None."""
        if not self._scopes or _shared(value):
            return None
        if self._holders is None:
            self._holders = [_holders(scope.namespace) for scope in self._scopes]
        hidden = None
        for scope, holders in zip(self._scopes, self._holders, strict=True):
            for name in holders.get(id(value), ()):
                if scope.why(name) is not None:
                    return None  # also a name the model sees: it may hold it
                hidden = hidden or name
        return hidden


def _holders(namespace: Mapping[str, Any]) -> dict[int, list[str]]:
    """Which names of ``namespace`` hold each object, by the object's id; IPython's
    output caches (``_``, ``_7``...) aside: they hold whatever a cell showed last, so an
    exposed object's field shown once would be refused ever after."""
    holders: dict[int, list[str]] = {}
    for name, held in list(namespace.items()):
        if not NEVER_VISIBLE.fullmatch(name):
            holders.setdefault(id(held), []).append(name)
    return holders


def _flat(scopes: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """``scopes`` with each ``ChainMap`` opened into the mappings it chains."""
    out: list[Mapping[str, Any]] = []
    for scope in scopes:
        out.extend(_flat(scope.maps) if isinstance(scope, ChainMap) else (scope,))
    return out


def _shared(value: Any) -> bool:
    kind = type(value)
    if value is None or issubclass(kind, bool | int | float | complex):
        return True
    return issubclass(kind, str | bytes) and len(value) <= 1


def suggest(name: str, scopes: Sequence[Mapping[str, Any]], n: int = 3) -> list[str]:
    """The names closest to ``name`` that do exist (public names only)."""
    known = {key for scope in scopes for key in scope if isinstance(key, str)}
    public = [key for key in known if not key.startswith("_")]
    return difflib.get_close_matches(name, public, n=n, cutoff=0.6)


def check_variable_name(name: str) -> None:
    """Raise ``InvalidVariableName`` unless ``name`` may be bound in a notebook namespace.

    Refused: non-identifiers, keywords, IPython's own names (``In``, ``Out``,
    ``get_ipython``, ``exit``, ``quit``), names starting with ``_`` and Python's builtins
    (``print``, ``list``...: shadowing one breaks the notebook in confusing ways).
    """
    if not name.isidentifier():
        raise InvalidVariableName(name, "it is not a Python identifier")
    if keyword.iskeyword(name):
        raise InvalidVariableName(name, "it is a Python keyword")
    if name.startswith("_"):
        raise InvalidVariableName(name, "names starting with '_' belong to IPython")
    if name in RESERVED_NAMES:
        raise InvalidVariableName(name, "it would overwrite IPython's own name")
    if hasattr(builtins, name):
        raise InvalidVariableName(name, f"it would shadow Python's builtin {name!r}")

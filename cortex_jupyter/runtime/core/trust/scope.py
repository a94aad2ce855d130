"""What a model may reach with ``$name``: the part of a notebook namespace it is given.

Model text is untrusted: anything a tool fetched (a web page, an email) can steer it
(prompt injection). So a model does not see the notebook; it sees a ``Scope``: the names
the user wrote as ``$name`` in the cell, the names earlier cortex runs bound, and the
names the user exposed on purpose (``%cortex expose``). Everything else resolves as if
it were hidden, with a message saying how to expose it. IPython's history and caches
(``In``, ``Out``, ``_``, ``_i3``, ``_oh``...) and modules are never visible, not even
exposed by a pattern. A ``Scope`` is a read-only ``Mapping`` of just the visible names,
so everything that resolves ``$name`` (parameters, feeds, ``llm`` prompts, nested agents,
the response's filled-in values) gets the same rule by being given the scope instead of
the namespace.

A name is a run's only while it still holds the object the run bound (``Binding``) and no
cell of the user's assigned it (``session.names`` reads each cell's code and releases the
binding, whatever the value): once the user assigns it, it is the user's again, hidden
like any other notebook name. ``%cortex
expose`` and ``%cortex hide`` add ``Rule``s, names or glob patterns; the latest rule whose
pattern matches a name decides for it, so ``expose data_*`` then ``hide data_b`` leaves
``data_b`` hidden and the other ``data_`` names visible, and a hide also covers names runs
bound (it holds when a later run binds the name again, until a later expose).

Pure: no I/O. ``why(name)`` says why a name is visible; ``hidden(name)`` why an existing
name is not (for the error message).
"""

from __future__ import annotations

import fnmatch
import re
import types
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["NEVER_VISIBLE", "Binding", "Rule", "Scope", "never_visible"]

# IPython's own names: history, output caches, directory history, the shell itself.
NEVER_VISIBLE = re.compile(r"In|Out|_+|_i+|_i\d+|_\d+|_ih|_oh|_dh|exit|quit|get_ipython")

#: What a released ``Binding`` holds: an object no namespace has.
_RELEASED = object()

_REASONS = {
    "prompt": "written as $name in the prompt",
    "script": "written in the --script cell",
}


@dataclass(frozen=True, eq=False)
class Binding:
    """What a cortex run bound to a notebook name: the run's id and the object itself.

    The name is the run's while it holds this very object (``is``): then it is visible and
    a later run may bind it again. Once the user assigns the name, it is theirs: a value
    of their own fails the ``is``, and a cell that assigns it (the same value too) makes
    the session release the binding (``released``).
    """

    run: str
    value: Any

    def holds(self, namespace: Mapping[str, Any], name: str) -> bool:
        """Whether ``name`` in ``namespace`` still holds the object the run bound."""
        return name in namespace and namespace[name] is self.value

    def released(self) -> Binding:
        """This binding once the user took the name back: it remembers the run but no
        longer keeps the object alive, and never holds again."""
        return Binding(self.run, _RELEASED)


@dataclass(frozen=True)
class Rule:
    """One ``%cortex expose`` (``expose=True``) or ``%cortex hide`` of a name or glob
    pattern; among the rules matching a name, the latest decides."""

    pattern: str
    expose: bool

    def matches(self, name: str) -> bool:
        return fnmatch.fnmatchcase(name, self.pattern)

    def __str__(self) -> str:
        return f"{'expose' if self.expose else 'hide'} {self.pattern}"


def is_pattern(name: str) -> bool:
    """Whether ``name`` is a glob pattern (``df_*``) rather than one name."""
    return any(c in name for c in "*?[")


def add_rule(rules: Sequence[Rule], rule: Rule) -> list[Rule]:
    """``rules`` with ``rule`` last; an earlier rule of the same pattern is dropped (the
    new one decides for every name it matched)."""
    return [r for r in rules if r.pattern != rule.pattern] + [rule]


def never_visible(name: str, value: Any = None) -> str | None:
    """Why ``name`` (holding ``value``) may never be given to a model, or None."""
    if NEVER_VISIBLE.fullmatch(name):
        return (
            f"${name} is IPython's own (history, caches or the shell) and is never "
            "visible to a model"
        )
    if name.startswith("_"):
        return f"${name} starts with '_' and is never visible to a model"
    if _is_module(value):
        return f"${name} is a module; modules are never visible to a model"
    return None


def _is_module(value: Any) -> bool:
    """Whether ``value`` is a module, asked of its type too: ``isinstance`` reads a
    value's ``__class__``, which an object may make raise."""
    try:
        return isinstance(value, types.ModuleType)
    except Exception:
        return issubclass(type(value), types.ModuleType)


class Scope(Mapping[str, Any]):
    """The names of ``namespace`` a model may reach (see the module docstring).

    ``prompt`` are the names the cell wrote as ``$name`` (``script=True`` when the cell
    is a ``--script`` the user wrote, which changes only how the reason reads); they
    are visible whatever the rules say: the user wrote them there. ``bound`` maps the
    names cortex runs bound to their ``Binding``; ``rules`` are the user's exposes and
    hides, oldest first. For any other name, the latest matching rule decides; with no
    rule, a name is visible while it holds the object a run bound.
    """

    def __init__(
        self,
        namespace: Mapping[str, Any],
        *,
        prompt: Iterable[str] = (),
        bound: Mapping[str, Binding] | None = None,
        rules: Sequence[Rule] = (),
        script: bool = False,
    ) -> None:
        self.namespace = namespace
        self._prompt = frozenset(prompt)
        self._bound = dict(bound or {})
        self._rules = tuple(rules)
        self._prompt_reason = "script" if script else "prompt"

    def rule(self, name: str) -> Rule | None:
        """The latest expose or hide whose pattern matches ``name``, or None."""
        return next((r for r in reversed(self._rules) if r.matches(name)), None)

    def owner(self, name: str) -> str | None:
        """The id of the run ``name`` belongs to (it holds what that run bound), or None."""
        binding = self._bound.get(name)
        return binding.run if binding and binding.holds(self.namespace, name) else None

    # ---- the rule ------------------------------------------------------------------

    def why(self, name: str) -> str | None:
        """Why ``name`` is visible (a short phrase), or None when it is not."""
        if name not in self.namespace or never_visible(name, self.namespace[name]):
            return None
        if name in self._prompt:
            return _REASONS[self._prompt_reason]
        rule = self.rule(name)
        if rule is not None and not rule.expose:
            return None
        run = self.owner(name)
        if run is not None:
            return f"bound by cortex run {run}"
        if rule is not None:
            return f"exposed with %cortex expose {rule.pattern}"
        return None

    def hidden(self, name: str) -> str | None:
        """Why an existing notebook name is not visible (a sentence), or None when it is
        visible or does not exist. IPython's own names are named as such even when this
        shell has not made them yet (``_i7`` before the seventh cell)."""
        if name not in self.namespace:
            return never_visible(name) if NEVER_VISIBLE.fullmatch(name) else None
        if self.why(name) is not None:
            return None
        never = never_visible(name, self.namespace[name])
        if never is not None:
            return never
        rule = self.rule(name)
        if rule is not None:
            return (
                f"${name} was hidden with %cortex hide {rule.pattern}; %cortex expose {name} "
                "gives it back"
            )
        binding = self._bound.get(name)
        if binding is not None:
            return (
                f"${name} is yours again: cortex run {binding.run} bound it, then you "
                f"assigned it; %cortex expose {name} (or cortex_jupyter.expose({name!r})) "
                "lets models reach it"
            )
        return (
            f"${name} is a notebook variable the model may not see: a model sees only the "
            "names the prompt writes as $name, outputs of cortex runs and names exposed with "
            f"%cortex expose {name} (or cortex_jupyter.expose({name!r}))"
        )

    def reasons(self) -> dict[str, str]:
        """Every visible name with why, in namespace order (``%cortex vars``)."""
        out = {}
        for name in list(self.namespace):
            why = self.why(name)
            if why is not None:
                out[name] = why
        return out

    def withheld(self) -> dict[str, str]:
        """Names cortex has a say over that a model may not reach, with why (a short
        phrase), in namespace order: hidden by a rule, or taken back by the user after
        a run bound them (``%cortex vars``)."""
        out = {}
        for name in list(self.namespace):
            if self.why(name) is not None or never_visible(name, self.namespace[name]):
                continue
            rule = self.rule(name)
            binding = self._bound.get(name)
            if rule is not None:
                out[name] = f"hidden with %cortex hide {rule.pattern}"
            elif binding is not None:
                out[name] = f"yours: you assigned it after cortex run {binding.run} bound it"
        return out

    # ---- the mapping ---------------------------------------------------------------

    def __getitem__(self, name: str) -> Any:
        if self.why(name) is None:
            raise KeyError(name)
        return self.namespace[name]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.why(name) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self.reasons())

    def __len__(self) -> int:
        return len(self.reasons())

    def __repr__(self) -> str:
        return f"<Scope: {', '.join(self.reasons()) or 'nothing visible'}>"

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

Pure: no I/O. ``why(name)`` says why a name is visible; ``hidden(name)`` why an existing
name is not (for the error message).
"""

from __future__ import annotations

import fnmatch
import re
import types
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

__all__ = ["NEVER_VISIBLE", "Scope", "never_visible"]

# IPython's own names: history, output caches, directory history, the shell itself.
NEVER_VISIBLE = re.compile(r"In|Out|_+|_i+|_i\d+|_\d+|_ih|_oh|_dh|exit|quit|get_ipython")

_REASONS = {
    "prompt": "written as $name in the prompt",
    "script": "written in the --script cell",
    "bound": "bound by a cortex run",
    "exposed": "exposed with %cortex expose",
}


def never_visible(name: str, value: Any = None) -> str | None:
    """Why ``name`` (holding ``value``) may never be given to a model, or None."""
    if NEVER_VISIBLE.fullmatch(name):
        return (
            f"${name} is IPython's own (history, caches or the shell) and is never "
            "visible to a model"
        )
    if name.startswith("_"):
        return f"${name} starts with '_' and is never visible to a model"
    if isinstance(value, types.ModuleType):
        return f"${name} is a module; modules are never visible to a model"
    return None


class Scope(Mapping[str, Any]):
    """The names of ``namespace`` a model may reach (see the module docstring).

    ``prompt`` are the names the cell wrote as ``$name`` (``script=True`` when the cell
    is a ``--script`` the user wrote, which changes only how the reason reads);
    ``bound`` the names earlier cortex runs bound; ``exposed`` names or glob patterns
    the user exposed; ``hidden`` names the user hid again (they win over ``bound`` and
    ``exposed``, not over what the prompt itself names).
    """

    def __init__(
        self,
        namespace: Mapping[str, Any],
        *,
        prompt: Iterable[str] = (),
        bound: Iterable[str] = (),
        exposed: Iterable[str] = (),
        hidden: Iterable[str] = (),
        script: bool = False,
    ) -> None:
        self.namespace = namespace
        self._prompt = frozenset(prompt)
        self._bound = frozenset(bound)
        self._exposed = tuple(exposed)
        self._hidden = frozenset(hidden)
        self._prompt_reason = "script" if script else "prompt"

    # ---- the rule ------------------------------------------------------------------

    def why(self, name: str) -> str | None:
        """Why ``name`` is visible (a short phrase), or None when it is not."""
        if name not in self.namespace or never_visible(name, self.namespace[name]):
            return None
        if name in self._prompt:
            return _REASONS[self._prompt_reason]
        if name in self._hidden:
            return None
        if name in self._bound:
            return _REASONS["bound"]
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in self._exposed):
            return _REASONS["exposed"]
        return None

    def hidden(self, name: str) -> str | None:
        """Why an existing notebook name is not visible (a sentence), or None when it is
        visible or does not exist. IPython's own names are named as such even when this
        shell has not made them yet (``_i7`` before the seventh cell)."""
        if name not in self.namespace:
            return never_visible(name) if NEVER_VISIBLE.fullmatch(name) else None
        if self.why(name) is not None:
            return None
        rule = never_visible(name, self.namespace[name])
        if rule is not None:
            return rule
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

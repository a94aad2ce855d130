"""The notebook names a model may reach, and the names runs bound.

Its own module because this is the notebook's half of ``runtime.core.scope``
(ARCHITECTURE.md, "Scope"): which names cortex runs bound (a name is the run's while it
holds what the run bound), the ``%cortex expose`` / ``hide`` rules in order, and the
check that an action's ``output_key`` never takes a name that is the user's. A run sees
the ``Scope`` made here; nothing else in the session decides what a model may reach.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from cortex_jupyter.runtime.core.errors import InvalidVariableName
from cortex_jupyter.runtime.core.scope import (
    Binding,
    Rule,
    Scope,
    add_rule,
    is_pattern,
    never_visible,
)
from cortex_jupyter.runtime.core.variables import find_references

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell


class Names:
    """One notebook's bindings and expose/hide rules, over its shell's namespace."""

    def __init__(self, shell: InteractiveShell) -> None:
        self.shell = shell
        #: notebook names bound by runs -> the run and the object it bound (the name is
        #: the run's while it holds that object; see ``runtime.core.scope``)
        self.bound: dict[str, Binding] = {}
        #: ``%cortex expose`` and ``%cortex hide``, oldest first: the latest match decides
        self.rules: list[Rule] = []

    def scope(self, prompt: str, *, script: bool = False) -> Scope:
        """The notebook names a run of ``prompt`` may reach with ``$name``: the ones the
        prompt writes, the ones cortex runs bound, the ones exposed (ARCHITECTURE.md,
        "Scope"). For a ``--script`` cell ``prompt`` is the script, the user's own text."""
        self._release_taken_back()
        return Scope(
            self.shell.user_ns,
            prompt=find_references(prompt),
            bound=self.bound,
            rules=self.rules,
            script=script,
        )

    def _release_taken_back(self) -> None:
        """Forget the objects of names the user assigned since a run bound them (the
        name is theirs now), and the bindings of names deleted since."""
        namespace = self.shell.user_ns
        for name, binding in list(self.bound.items()):
            if name not in namespace:
                del self.bound[name]
            elif not binding.holds(namespace, name):
                self.bound[name] = binding.released()

    def expose(self, names: Iterable[str]) -> list[str]:
        """Let models reach ``names`` (names or glob patterns such as ``df_*``); returns
        the ones that can never be exposed, with why (IPython's own names, modules).
        A pattern covers every name it matches, also names a later ``hide`` named
        before: the latest expose or hide that matches a name decides."""
        refused = []
        for name in names:
            value = self.shell.user_ns.get(name)
            why = never_visible(name, value) if not is_pattern(name) else None
            if why is not None:
                refused.append(why)
                continue
            self.rules = add_rule(self.rules, Rule(name, expose=True))
        return refused

    def hide(self, names: Iterable[str]) -> None:
        """Take ``names`` (names or glob patterns) out of what models may reach: every
        name a pattern matches, exposed or bound by a run, now or bound later, until a
        later ``expose`` matches it. A prompt that writes ``$name`` still reaches it:
        the user wrote it there."""
        for name in names:
            self.rules = add_rule(self.rules, Rule(name, expose=False))

    def bind(self, run_id: str, name: str, value: Any, overwrite: bool) -> None:
        """Bind ``name`` to an action's output for the run ``run_id``; refused
        (``InvalidVariableName``) when the name is the user's, unless ``overwrite``."""
        namespace = self.shell.user_ns
        binding = self.bound.get(name)
        if name in namespace and not overwrite:
            if binding is None:
                raise InvalidVariableName(
                    name,
                    f"the notebook already has {name!r}, which cortex did not bind "
                    "(%%cortex --overwrite replaces it on purpose)",
                )
            if not binding.holds(namespace, name):
                raise InvalidVariableName(
                    name,
                    f"the notebook's {name!r} is yours: you assigned it after cortex run "
                    f"{binding.run} bound it (%%cortex --overwrite replaces it on purpose)",
                )
        namespace[name] = value
        self.bound[name] = Binding(run_id, value)

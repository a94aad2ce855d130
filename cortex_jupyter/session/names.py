"""The notebook names a model may reach, and the names runs bound.

Its own module because this is the notebook's half of ``runtime.core.trust.scope``
(ARCHITECTURE.md, "Scope"): which names cortex runs bound (a name is the run's while it
holds what the run bound), the ``%cortex expose`` / ``hide`` rules in order, and the
check that an action's ``output_key`` never takes a name that is the user's. A run sees
the ``Scope`` made here; nothing else in the session decides what a model may reach.

A name a run bound is the user's once they assign it, whatever the value: ``n = 6``
after a run bound ``n = 6`` is theirs although the object is the same. IPython hands
every cell's code to the shell's ``ast_transformers`` before it runs; ``Assignments``
is one that changes nothing and reads which notebook names the cell binds or deletes
(``assigned_names``). A ``%%cortex`` cell is a call of the magic, so it assigns
nothing: a run's own binding stays the run's. Names a cell's code binds some other
way (``globals()[...]``, ``%run``) are the user's when they hold another object.
"""

from __future__ import annotations

import ast
import contextlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from cortex_jupyter.runtime.core.errors import InvalidVariableName
from cortex_jupyter.runtime.core.trust.scope import (
    Binding,
    Rule,
    Scope,
    add_rule,
    is_pattern,
    never_visible,
)
from cortex_jupyter.runtime.core.values.variables import find_references

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell


class Names:
    """One notebook's bindings and expose/hide rules, over its shell's namespace."""

    def __init__(self, shell: InteractiveShell) -> None:
        self.shell = shell
        #: notebook names bound by runs -> the run and the object it bound (the name is
        #: the run's while it holds that object and no cell assigned it since; see
        #: ``runtime.core.trust.scope``)
        self.bound: dict[str, Binding] = {}
        #: ``%cortex expose`` and ``%cortex hide``, oldest first: the latest match decides
        self.rules: list[Rule] = []
        self._watch = Assignments(self)
        shell.ast_transformers.append(self._watch)

    def close(self) -> None:
        """Stop reading the shell's cells (``%unload_ext``)."""
        if self._watch in self.shell.ast_transformers:
            self.shell.ast_transformers.remove(self._watch)

    def assigned(self, names: Iterable[str]) -> None:
        """A cell of the user's assigns (or deletes) ``names``: those a run bound are
        the user's now, whatever they hold."""
        for name in names:
            binding = self.bound.get(name)
            if binding is not None:
                self.bound[name] = binding.released()

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
        self.check(name, overwrite)
        self.shell.user_ns[name] = value
        self.bound[name] = Binding(run_id, value)

    def check(self, name: str, overwrite: bool) -> None:
        """Raise ``InvalidVariableName`` unless a run may bind ``name`` now: the name is
        not the user's (unless ``overwrite``). The name's own rules (an identifier, no
        builtin...) are ``check_variable_name``'s."""
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


class Assignments(ast.NodeTransformer):
    """An IPython AST transformer that changes nothing: it tells ``names`` which notebook
    names each cell's code binds or deletes, before the cell runs."""

    def __init__(self, names: Names) -> None:
        self._names = names

    def visit(self, node: ast.AST) -> ast.AST:
        # Never break a cell (and IPython drops a transformer that raises).
        with contextlib.suppress(Exception):
            self._names.assigned(assigned_names(node))
        return node


# What opens a scope of its own: what it binds inside is not the notebook's.
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def assigned_names(tree: ast.AST) -> set[str]:
    """The notebook (module-level) names the code ``tree`` binds or deletes: targets of
    assignments (plain, augmented, annotated, ``:=``, ``for``, ``with``, ``except``,
    ``match``), ``del``, imports, ``def`` and ``class``, and names a function declares
    ``global``. What a function, class, lambda or comprehension binds for itself is not
    counted (a ``:=`` in a comprehension binds outside it, so it is)."""
    found: set[str] = set()
    _collect(tree, found)
    return found


def _collect(node: ast.AST, found: set[str]) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, _DEFINITIONS):
            _definition(child, found)
            continue
        if isinstance(child, ast.comprehension):  # its target is the comprehension's own
            for part in (child.iter, *child.ifs):
                _collect_node(part, found)
            continue
        name = _bound_name(child)
        if name is not None:
            found.add(name)
        _collect(child, found)


def _collect_node(node: ast.AST, found: set[str]) -> None:
    name = _bound_name(node)
    if name is not None:
        found.add(name)
    _collect(node, found)


def _bound_name(node: ast.AST) -> str | None:
    """The name ``node`` itself binds in the scope it is in, if it binds one."""
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
        return node.id
    if isinstance(node, ast.alias):  # `import a.b` binds `a`; `from m import *`: unknown
        name = (node.asname or node.name).split(".")[0]
        return None if name == "*" else name
    if isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar):
        return node.name
    if isinstance(node, ast.MatchMapping):
        return node.rest
    return None


def _definition(node: ast.AST, found: set[str]) -> None:
    """A ``def``, ``class`` or ``lambda``: its name, what is evaluated where it is written
    (decorators, defaults, bases) and the names declared ``global`` inside it."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        found.add(node.name)
        outside: list[ast.AST] = list(node.decorator_list)
        if isinstance(node, ast.ClassDef):
            outside += [*node.bases, *node.keywords]
        else:
            outside += [*node.args.defaults, *(d for d in node.args.kw_defaults if d)]
    else:
        assert isinstance(node, ast.Lambda)
        outside = [*node.args.defaults, *(d for d in node.args.kw_defaults if d)]
    for part in outside:
        _collect_node(part, found)
    for inner in ast.walk(node):
        if isinstance(inner, ast.Global):
            found.update(inner.names)

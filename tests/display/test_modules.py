"""The display package reads one way: no import circle, no import hidden in a function,
no module too long to read (issue 21)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import cortex_jupyter.display

PACKAGE = Path(cortex_jupyter.display.__file__).parent
MODULES = sorted(PACKAGE.glob("*.py"))
#: The one import a function may make: ``WidgetView`` (ipywidgets, IPython) on demand.
LAZY = {("__init__", "widget")}


def imports(path: Path) -> list[tuple[str, bool]]:
    """The display modules ``path`` imports, each with whether a function imports it."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    in_function: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            in_function.update(id(inner) for inner in ast.walk(node) if inner is not node)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            names = [node.module] if node.module else [alias.name for alias in node.names]
            out += [(name.split(".")[0], id(node) in in_function) for name in names]
    return out


def test_no_display_module_imports_another_inside_a_function() -> None:
    hidden = [
        (path.stem, name)
        for path in MODULES
        for name, lazy in imports(path)
        if lazy and (path.stem, name) not in LAZY
    ]
    assert hidden == []


def test_the_display_modules_import_each_other_without_a_circle() -> None:
    graph = {path.stem: {name for name, _ in imports(path)} for path in MODULES}
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, " → ".join((*path, module))
        if module in done:
            return
        for name in sorted(graph.get(module, ())):
            visit(name, (*path, module))
        done.add(module)

    for module in graph:
        visit(module, ())


@pytest.mark.parametrize("path", MODULES, ids=[p.stem for p in MODULES])
def test_no_display_module_is_over_800_lines(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= 800, f"{path.name}: {lines} lines"

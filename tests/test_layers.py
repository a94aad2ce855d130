"""The package reads one way: no module imports, however indirectly, one that imports it.

The layers themselves are import-linter contracts in pyproject.toml, which
scripts/test.sh checks; this test finds any circle, inside a layer too.
"""

from __future__ import annotations

import grimp


def test_no_module_of_the_package_is_part_of_an_import_circle() -> None:
    graph = grimp.build_graph("cortex_jupyter")
    circles = []
    for module in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            back = graph.find_shortest_chain(importer=imported, imported=module)
            if back is not None:
                circles.append(" -> ".join((module, *back)))
    assert circles == []

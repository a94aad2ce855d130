"""Fail when a shipped notebook would not open unchanged: saved with outputs or execution
counts, or without the metadata a kernel fills in when it starts.

Notebooks are committed clean so diffs stay readable and nbval runs them fresh. They are
also committed with the ``kernelspec`` and ``language_info`` JupyterLab writes once the
kernel has told it what it is (``kernel_info_reply``): a notebook without them is changed
by the kernel as it opens, so closing it asks to save changes the user never made
(issue 37). ``--fix`` writes the kernel's ``language_info`` (this Python's) and the
standard kernelspec into each notebook, the way JupyterLab saves it.

Usage: python scripts/check_notebooks.py [--fix] DIR_OR_FILE...
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

#: The kernelspec JupyterLab writes for the default Python kernel.
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def kernel_language_info() -> dict[str, Any]:
    """What ipykernel tells the front end about its language (its ``kernel_info_reply``)."""
    from ipykernel.ipkernel import IPythonKernel

    return dict(IPythonKernel.language_info)


def dirty_cells(notebook: dict[str, Any]) -> list[int]:
    return [
        index
        for index, cell in enumerate(notebook["cells"])
        if cell.get("outputs") or cell.get("execution_count") is not None
    ]


def metadata_problems(notebook: dict[str, Any], expected: dict[str, Any]) -> list[str]:
    """What a starting kernel would change in the notebook's metadata. The Python
    ``version`` must be there; its value is the machine's own (not compared)."""
    metadata = notebook.get("metadata", {})
    problems = []
    if metadata.get("kernelspec") != KERNELSPEC:
        problems.append(f"kernelspec is {metadata.get('kernelspec')!r}, not {KERNELSPEC!r}")
    found = metadata.get("language_info", {})
    for key, value in expected.items():
        if key not in found:
            problems.append(f"language_info has no {key!r}")
        elif key != "version" and found[key] != value:
            problems.append(f"language_info {key!r} is {found[key]!r}, not {value!r}")
    return problems


def fix(path: Path, expected: dict[str, Any]) -> None:
    """Write the kernel's metadata into ``path``, formatted as JupyterLab saves it."""
    notebook = json.loads(path.read_text(encoding="utf-8"))
    notebook["metadata"]["kernelspec"] = dict(KERNELSPEC)
    notebook["metadata"]["language_info"] = expected
    text = json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False)
    path.write_text(text + "\n", encoding="utf-8")


def main(args: list[str]) -> int:
    fixing = "--fix" in args
    paths: list[Path] = []
    for arg in (Path(a) for a in args if a != "--fix"):
        paths.extend(sorted(arg.rglob("*.ipynb")) if arg.is_dir() else [arg])
    expected = kernel_language_info()
    status = 0
    for path in paths:
        if ".ipynb_checkpoints" in path.parts:
            continue
        if fixing:
            fix(path, expected)
        notebook = json.loads(path.read_text(encoding="utf-8"))
        cells = dirty_cells(notebook)
        if cells:
            print(f"{path}: cells {cells} have outputs; clear them before committing.")
            status = 1
        for problem in metadata_problems(notebook, expected):
            print(f"{path}: {problem}; scripts/check_notebooks.py --fix writes it.")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

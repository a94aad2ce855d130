"""Fail when a notebook is saved with outputs or execution counts.

Notebooks are committed clean so diffs stay readable and nbval runs them fresh.
Usage: python scripts/check_notebooks.py DIR_OR_FILE...
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def dirty_cells(path: Path) -> list[int]:
    notebook = json.loads(path.read_text(encoding="utf-8"))
    return [
        index
        for index, cell in enumerate(notebook["cells"])
        if cell.get("outputs") or cell.get("execution_count") is not None
    ]


def main(args: list[str]) -> int:
    paths: list[Path] = []
    for arg in map(Path, args):
        paths.extend(sorted(arg.rglob("*.ipynb")) if arg.is_dir() else [arg])
    status = 0
    for path in paths:
        if ".ipynb_checkpoints" in path.parts:
            continue
        cells = dirty_cells(path)
        if cells:
            print(f"{path}: cells {cells} have outputs; clear them before committing.")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The shipped notebooks open unchanged (issue 37, item 6): saved clean and with the
metadata a starting kernel fills in, so JupyterLab marks nothing changed on opening."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "check_notebooks", ROOT / "scripts/check_notebooks.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda p: p.name)
def test_a_shipped_notebook_holds_what_the_kernel_would_fill_in(path: Path) -> None:
    check = checker()
    notebook = json.loads(path.read_text(encoding="utf-8"))
    assert check.metadata_problems(notebook, check.kernel_language_info()) == []
    assert check.dirty_cells(notebook) == []


def test_a_notebook_the_kernel_would_change_is_reported_and_fixed(tmp_path: Path) -> None:
    check = checker()
    path = tmp_path / "bare.ipynb"
    path.write_text(json.dumps({
        "cells": [], "nbformat": 4, "nbformat_minor": 5,
        "metadata": {"kernelspec": check.KERNELSPEC, "language_info": {"name": "python"}},
    }))  # fmt: skip
    assert check.main([str(path)]) == 1
    assert check.main(["--fix", str(path)]) == 0
    assert json.loads(path.read_text())["metadata"]["language_info"]["pygments_lexer"] == "ipython3"

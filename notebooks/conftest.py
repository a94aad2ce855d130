"""pytest hooks for the notebooks, which run under nbval (``pytest notebooks --nbval-lax``).

``03_openai.ipynb`` talks to a real model, so without ``OPENAI_API_KEY`` its cells are
skipped (with the reason) rather than failed: CI has no key and no network.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
NEEDS_API_KEY = HERE / "03_openai.ipynb"
NO_KEY = "set OPENAI_API_KEY to run 03_openai.ipynb against a real endpoint"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if os.environ.get("OPENAI_API_KEY"):
        return
    skip = pytest.mark.skip(reason=NO_KEY)
    for item in items:  # nbval's items are the notebook's cells: "03_openai.ipynb::Cell 0"...
        if Path(item.path).resolve() == NEEDS_API_KEY:
            item.add_marker(skip)

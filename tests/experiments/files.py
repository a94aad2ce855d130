"""Dataset files as a person writes them, for the tests that load them."""

from __future__ import annotations

from pathlib import Path


def written(path: Path, text: str) -> Path:
    """``path``, holding ``text`` (UTF-8)."""
    path.write_text(text, encoding="utf-8")
    return path

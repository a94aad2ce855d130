"""What the benchmarks share: their markdown tables, PASS/FAIL, milliseconds and quantiles.

The scripts put the repository root on ``sys.path`` and import this as ``bench._common``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Row = Sequence[Any]


def table(title: str, header: Row, rows: Sequence[Row]) -> str:
    """A markdown table under a ``###`` heading."""
    lines = [f"### {title}", "", "| " + " | ".join(map(str, header)) + " |"]
    lines.append("|" + "---|" * len(header))
    lines += ["| " + " | ".join(map(str, row)) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def ms(seconds: float, digits: int = 1) -> str:
    return f"{seconds * 1000:.{digits}f} ms"


def quantile(values: Sequence[float], q: float) -> float:
    """The value at ``q`` (0 to 1) of the sorted values, the nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]

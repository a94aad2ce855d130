"""What the path rule costs: resolving ``$name.path`` through a notebook's ``Scope``.

Each step is checked against the allow-list (``runtime.core.trust.reach``), and a path's first
landing on an object collects the ids of every hidden notebook name's value once (for the
rule "never the value of a name the model may not see"): a cost that grows with the size
of the namespace. Prints one table: microseconds per reference, for namespaces of 10, 1,000
and 10,000 names. Run: ``.venv/bin/python bench/scope_bench.py``.
"""

from __future__ import annotations

import timeit
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from bench._common import table
from cortex_jupyter.runtime import resolve
from cortex_jupyter.runtime.core.trust.scope import Scope


@dataclass
class Order:
    prices: list[float]

    @property
    def total(self) -> float:
        return sum(self.prices)


REFERENCES = ("$df", "$df.shape.0", "$arr.dtype", "$order.total", "$trip.legs.0.city")


def namespace(size: int) -> dict[str, Any]:
    space: dict[str, Any] = {"__name__": "__main__", "__builtins__": __builtins__}
    space.update({f"hidden_{i}": [i] for i in range(size)})
    space.update(
        df=pd.DataFrame({"a": [1, 2, 3]}),
        arr=np.zeros(4),
        order=Order([1.0, 2.5]),
        trip={"legs": [{"city": "Oslo"}]},
    )
    return space


def main() -> None:
    rows = []
    for size in (10, 1_000, 10_000):
        space = namespace(size)
        scope = Scope(space, prompt=["df", "arr", "order", "trip"])
        row: list[Any] = [f"{size:,}"]
        for ref in REFERENCES:
            runs = 2_000 if size < 10_000 else 50
            call = lambda ref=ref, scope=scope: resolve(ref, [scope])  # noqa: E731
            seconds = min(timeit.repeat(call, number=runs, repeat=3))
            row.append(f"{seconds / runs * 1e6:,.0f} µs")
        rows.append(row)
    print(table("Resolving one $name.path through a Scope", ["names", *REFERENCES], rows))


if __name__ == "__main__":
    main()

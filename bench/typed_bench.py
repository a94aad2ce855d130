"""Benchmark of a typed answer in the view: a growing JSON object parsed and drawn live.

    python bench/typed_bench.py [--size 50000] [--chunk 16]

A simulated model writes a typed answer of ``--size`` characters (an object of rows, in a
```json fence after a line of text), ``--chunk`` characters per delta. Every delta goes
through the real parser and ``ViewState.apply`` (which only appends: ``typed.py`` parses
at redraw time); a view redraws the typed answer at most 25 times a second of simulated
time (a delta every 4 ms: a fast local model), as the widget does, and at ``slow_hz`` (4)
once its HTML is past ``widget.BIG_OUTPUT``.

The rows compare what that costs in all with parsing on every delta, which is what the
design avoids: its cost grows with the square of the answer's length. Prints markdown
tables; CPU time (``time.thread_time``), best of three.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import ms, table
from cortex_jupyter.display import ViewState
from cortex_jupyter.display.typed import parse_partial, split_answer, typed_html
from cortex_jupyter.display.widget import BIG_OUTPUT
from cortex_jupyter.protocol import Parser
from cortex_jupyter.runtime.core.events import OutputExpected, Turn

DELTA_SECONDS = 0.004
FAST, SLOW = 1 / 25, 1 / 4


def answer(size: int) -> str:
    rows: dict[str, Any] = {}
    i = 0
    while len(json.dumps(rows)) < size:
        rows[f"row{i}"] = {"name": f"item {i}", "tags": ["a", "b"], "n": i, "ok": i % 2 == 0}
        i += 1
    return "Here is the table:\n```json\n" + json.dumps(rows, indent=1) + "\n```"


def chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def live(text: str, chunk: int) -> dict[str, float]:
    """Reduce every delta; draw at 25 Hz (4 Hz once large), parsing then."""
    state = ViewState(model="bench")
    state.apply(OutputExpected(type="Table", time=0.0), 0.0)
    state.apply(Turn(number=1, time=0.0), 0.0)
    parser = Parser("cortex")
    reduce_s = draw_s = 0.0
    draws, largest, last, size = 0, 0, -1.0, 0
    now = 0.0
    for piece in chunks(f"<response>{text}</response>", chunk):
        now += DELTA_SECONDS
        start = time.thread_time()
        for event in parser.feed(piece):
            state.apply(event, now)
        reduce_s += time.thread_time() - start
        if now - last >= (SLOW if size > BIG_OUTPUT else FAST) - 1e-9:
            assert state.typed is not None
            start = time.thread_time()
            html = typed_html(state.typed)
            draw_s += time.thread_time() - start
            size, last, draws = len(html), now, draws + 1
            largest = max(largest, size)
    return {
        "reduce": reduce_s,
        "draw": draw_s,
        "draws": draws,
        "largest": largest,
        "seconds": now,
        "deltas": len(chunks(text, chunk)),
    }


def every_delta(text: str, chunk: int) -> float:
    """What parsing the growing JSON on every delta would cost (the design avoids it)."""
    spent, grown = 0.0, ""
    for piece in chunks(text, chunk):
        grown += piece
        start = time.thread_time()
        split = split_answer(grown)
        if split.started:
            parse_partial(split.json)
        spent += time.thread_time() - start
    return spent


def best(runs: int, fn: Any, *args: Any) -> Any:
    results = [fn(*args) for _ in range(runs)]
    if isinstance(results[0], dict):
        return min(results, key=lambda r: r["reduce"] + r["draw"])
    return min(results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=50_000)
    parser.add_argument("--chunk", type=int, default=16)
    args = parser.parse_args()
    rows = []
    for size in (args.size // 5, args.size, args.size * 2):
        text = answer(size)
        got = best(3, live, text, args.chunk)
        naive = best(3, every_delta, text, args.chunk)
        rows.append(
            (
                f"{len(text):,}",
                f"{got['deltas']:,}",
                f"{got['seconds']:.1f} s",
                got["draws"],
                ms(got["reduce"]),
                ms(got["draw"]),
                ms(got["draw"] / max(got["draws"], 1), 2),
                f"{got['largest']:,}",
                ms(naive),
            )
        )
    header = (
        "answer (chars)",
        "deltas",
        "streamed over",
        "draws",
        "reducing all deltas",
        "drawing (parse + tree)",
        "a draw",
        "largest HTML (chars)",
        "parsing per delta instead",
    )
    print(table(f"a typed answer streamed in {args.chunk}-character deltas", header, rows))


if __name__ == "__main__":
    main()

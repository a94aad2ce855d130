"""The diff of a ``--compare`` cell on huge answers (issue 35, gap 1).

    python bench/compare_diff_bench.py [--mb N]

Two answers of ``--mb`` megabytes each (default 10), in three shapes: prose in lines of
about 80 characters that differ in one line of a hundred; one line of words with no line
break; lines that all differ; and two small answers that were ``SequenceMatcher``'s
worst before whitespace was junk (1,450 words that all differ, words apart by single
spaces; 1,450 lines apart by blank lines). For each, the time of
``compare_diff`` (the difflib run), of ``diff_html`` and ``diff_text`` (what the view and
the static copy render), and how many characters the HTML holds.

**Goal**: each shape's diff and rendering under 1 s, and its HTML under 1 MB, whatever
the answers' size (the answers are cut to ``ANSWER_CHARS`` before the diff).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import ms, table, verdict
from cortex_jupyter.display.compare_diff import compare_diff, diff_html, diff_text

GOAL_SECONDS = 1.0
GOAL_HTML = 1_000_000


def prose(size: int, seed: str) -> str:
    lines, total, i = [], 0, 0
    while total < size:
        line = f"line {i} of the answer says {'something else' if i % 100 == 7 else 'the same'}"
        line = (line + f" {seed if i % 100 == 7 else ''} " + "word " * 10)[:79] + "\n"
        lines.append(line)
        total += len(line)
        i += 1
    return "".join(lines)


def one_line(size: int, seed: str) -> str:
    return " ".join(f"{seed}{i % 97}" for i in range(size // 4))[:size]


def distinct(size: int, seed: str) -> str:
    return "".join(f"{seed} {i}\n" for i in range(size // 12))[:size]


def words(size: int, seed: str) -> str:
    return " ".join(f"{seed}{i}" for i in range(1450))  # 2,899 tokens: a word diff


def blank_lines(size: int, seed: str) -> str:
    return "".join(f"{seed} {i}\n\n" for i in range(1450))  # under LINE_LIMIT lines


SHAPES: dict[str, Callable[[int, str], str]] = {
    "prose, one line in 100 differs": prose,
    "one line, no break": one_line,
    "every line differs": distinct,
    "1,450 words, every word differs": words,
    "1,450 lines apart by blank lines": blank_lines,
}


def timed(call: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    value = call()
    return time.perf_counter() - start, value


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=float, default=10.0)
    size = int(parser.parse_args().mb * 1_000_000)
    rows = []
    ok = True
    for shape, make in SHAPES.items():
        a, b = make(size, "alpha"), make(size, "beta")
        diff_s, d = timed(lambda a=a, b=b: compare_diff([("a", None, a), ("b", None, b)]))
        html_s, html = timed(lambda d=d: diff_html(d))  # type: ignore[arg-type]
        text_s, _ = timed(lambda d=d: diff_text(d))  # type: ignore[arg-type]
        by = d.answers[0].by  # type: ignore[attr-defined]
        total = diff_s + html_s + text_s
        good = total < GOAL_SECONDS and len(str(html)) < GOAL_HTML
        ok = ok and good
        rows.append([shape, f"{len(a):,}", by, ms(diff_s), ms(html_s), ms(text_s),
                     f"{len(str(html)):,}", verdict(good)])  # fmt: skip
    header = ["answers", "chars each", "diffed by", "compare_diff", "diff_html", "diff_text",
              "HTML chars", "goal"]  # fmt: skip
    print(table(f"The diff of two {size / 1e6:g} MB answers", header, rows))
    print(f"Goal: under {GOAL_SECONDS:g} s and {GOAL_HTML:,} HTML characters each: {verdict(ok)}")


if __name__ == "__main__":
    main()

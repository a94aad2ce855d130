#!/usr/bin/env python
"""Protocol parser benchmark: the real incremental parser against the baseline.

Run from the repository root::

    python bench/protocol_bench.py [--quick] [--runs N] [--seed S]

Prints machine info, the verification result and two markdown tables (paste
them into a README or a PR as they are). A benchmark, not a test: it exits 0
whatever the numbers are, and 2 only when the parsers disagree on the corpus
(timing a parser that gives wrong answers would be meaningless).

Why the measurement is set up this way:

* Small chunks (4 characters, about one token; and 1 character, the worst case)
  because that is how model output arrives, and because per-``feed`` overhead,
  not per-character work, is what dominates a streaming parser in Python.
* Single process, ``time.perf_counter``, best of N with GC left on: the best run
  is the least disturbed by other work on the machine, and a real session runs
  with GC on. On a busy machine (other processes taking the cores) wall time swings
  by tens of percent between identical runs; ``--cpu-time`` times with
  ``time.thread_time`` (this thread's CPU time) instead, which the other work does
  not count into. The loop slices the chunk from the text on every iteration, as a
  model client produces a fresh string per chunk; its cost (shown as "harness
  overhead") is included for both parsers alike.
* Events are counted and dropped, as a consumer handling them as they come
  would; nothing keeps them alive, so the memory figure is the parser's own.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import random
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

_BENCH = Path(__file__).resolve().parent
for _p in (str(_BENCH.parent), str(_BENCH)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from baseline_parser import BaselineParser  # noqa: E402
from corpus import MIB, action_ids, count_actions, generate  # noqa: E402

from cortex_jupyter.protocol.events import (  # noqa: E402
    ResponseDelta,
    TextDelta,
    ThoughtDelta,
    action_to_dict,
)

_TEXT_EVENTS = (ThoughtDelta, ResponseDelta, TextDelta)

# Targets for the real parser; the baseline is measured on the same lines for
# information only.
TARGET_MCPS_4 = 5.0  # million characters per second at 4-character chunks
TARGET_LINEAR = 12.0  # time(10 MiB) / time(1 MiB), 4-character chunks
TARGET_MEMORY = 3.0  # peak traced bytes / input size in UTF-8 bytes
CHUNK_SIZES = (4, 1)


class StreamParser(Protocol):
    def feed(self, chunk: str) -> list[Any]: ...
    def close(self) -> list[Any]: ...


ParserFactory = Callable[[], StreamParser]


# --------------------------------------------------------------------------
# Running a parser
# --------------------------------------------------------------------------


#: The clock ``timed_run`` reads: wall time, or this thread's CPU time (``--cpu-time``).
CLOCK: list[Callable[[], float]] = [time.perf_counter]


def timed_run(factory: ParserFactory, text: str, size: int) -> tuple[float, int]:
    """One pass over ``text`` in ``size``-character chunks: (seconds, events).

    The chunks are cut before the clock starts: in a real run they arrive from the
    model client as ready strings, and cutting them is not the parser's work. The
    loop is written out (no generator, bound method hoisted) so the harness adds as
    little as possible per chunk; construction and ``close`` are timed.
    """
    chunks = [text[i : i + size] for i in range(0, len(text), size)]
    gc.collect()
    events = 0
    t0 = CLOCK[0]()
    parser = factory()
    feed = parser.feed
    for chunk in chunks:
        events += len(feed(chunk))
    events += len(parser.close())
    return CLOCK[0]() - t0, events


def best_of(runs: int, factory: ParserFactory, text: str, size: int) -> tuple[float, int]:
    results = [timed_run(factory, text, size) for _ in range(runs)]
    return min(r[0] for r in results), results[0][1]


class _NullParser:
    """Does nothing: timing it gives the cost of the harness loop (the call included)."""

    def feed(self, chunk: str) -> list[Any]:
        return []

    def close(self) -> list[Any]:
        return []


def peak_memory(factory: ParserFactory, text: str, size: int) -> int:
    """Peak bytes traced by ``tracemalloc`` during one pass (events dropped).

    Tracing starts after the corpus exists, so the input string itself is not
    counted; what is counted is everything the parser (and the chunk slices)
    allocate while it runs.
    """
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        parser = factory()
        feed = parser.feed
        for i in range(0, len(text), size):
            feed(text[i : i + size])
        parser.close()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# --------------------------------------------------------------------------
# Verification: what both parsers made of the corpus
# --------------------------------------------------------------------------


@dataclass
class Outcome:
    """The parts of an event stream the parsers must agree on, chunking aside."""

    thought: str = ""
    response: str = ""
    text: str = ""
    actions: list[dict[str, Any]] = field(default_factory=list)
    starts: list[tuple[str, str, str, bool]] = field(default_factory=list)
    errors: list[tuple[str, str | None, str]] = field(default_factory=list)
    ends: list[tuple[str, bool | None]] = field(default_factory=list)
    kinds: dict[str, int] = field(default_factory=dict)


def outcome(factory: ParserFactory, text: str, sizes: list[int]) -> Outcome:
    """Parse ``text`` cut into chunks of ``sizes`` (cycled) and collect the result."""
    parser = factory()
    events: list[Any] = []
    i = k = 0
    while i < len(text):
        size = sizes[k % len(sizes)]
        events.extend(parser.feed(text[i : i + size]))
        i += size
        k += 1
    events.extend(parser.close())
    texts: dict[str, list[str]] = {"thought": [], "response": [], "text": []}
    out = Outcome()
    for e in events:
        out.kinds[e.kind] = out.kinds.get(e.kind, 0) + 1
        if e.kind in texts:
            texts[e.kind].append(e.text)
        elif e.kind == "action":
            out.actions.append(action_to_dict(e.action))
        elif e.kind == "action_start":
            out.starts.append((e.id, e.type, e.mode, e.in_thought))
        elif e.kind == "error":
            out.errors.append((e.code, e.id, e.message))
        elif e.kind in ("thought_end", "response_end"):
            out.ends.append((e.kind, getattr(e, "final", None)))
    out.thought, out.response, out.text = (
        "".join(texts[k]) for k in ("thought", "response", "text")
    )
    return out


def _first_difference(a: str | list[Any], b: str | list[Any]) -> int:
    return next(
        (k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


def _input_offset(corpus: str, kind: str, index: int) -> int:
    """The input offset where the baseline's joined ``kind`` text reaches ``index``.

    Joined text is not contiguous in the input (tags and actions sit between its
    parts) and the corpus repeats phrases, so searching for the text cannot place
    a difference; bisecting on how much input the baseline needs to produce that
    much text can.
    """

    def produced(end: int) -> int:
        parser = BaselineParser()
        events = parser.feed(corpus[:end]) + parser.close()
        return sum(len(e.text) for e in events if isinstance(e, _TEXT_EVENTS) and e.kind == kind)

    lo, hi = 0, len(corpus)
    while lo < hi:
        mid = (lo + hi) // 2
        if produced(mid) > index:
            hi = mid
        else:
            lo = mid + 1
    return lo


def diff_text(kind: str, corpus: str, expected: str, got: str) -> str | None:
    """A report of the first difference between two joined texts, or None."""
    if expected == got:
        return None
    i = _first_difference(expected, got)
    at = _input_offset(corpus, kind, i)
    return (
        f"joined {kind!r} deltas differ at char {i} "
        f"(baseline {len(expected)} chars, parser {len(got)} chars)\n"
        f"    baseline: {expected[max(0, i - 40) : i + 40]!r}\n"
        f"    parser:   {got[max(0, i - 40) : i + 40]!r}\n"
        f"    input near offset {at}: {corpus[max(0, at - 100) : at + 60]!r}"
    )


def _action_fragment(corpus: str, aid: str) -> str:
    for q in ('"', "'"):
        pos = corpus.find(f"id={q}{aid}{q}")
        if pos >= 0:
            start = corpus.rfind("<action", 0, pos)
            return f"input offset {start}: {corpus[start : start + 300]!r}"
    return "(id not found in the input)"


def diff_list(
    label: str, corpus: str, expected: list[Any], got: list[Any], id_of: Callable[[Any], Any]
) -> str | None:
    """A report of the first differing item of two event lists, or None."""
    if expected == got:
        return None
    i = _first_difference(expected, got)
    exp = expected[i] if i < len(expected) else "(none)"
    gotv = got[i] if i < len(got) else "(none)"
    aid = id_of(exp if i < len(expected) else gotv)
    where = _action_fragment(corpus, aid) if isinstance(aid, str) else ""
    return (
        f"{label} differ (baseline {len(expected)}, parser {len(got)}); "
        f"first difference at #{i}\n"
        f"    baseline: {exp!r:.400}\n"
        f"    parser:   {gotv!r:.400}\n"
        f"    {where}"
    )


def _first_item(x: Any) -> Any:
    return x[0] if isinstance(x, tuple) else None


def compare(corpus: str, base: Outcome, real: Outcome) -> tuple[list[str], list[str]]:
    """(required mismatches, other differences) between baseline and parser outcomes.

    Required: what both must agree on for the timing to mean anything (joined
    thought and response text, action ids and names). Others are reported but
    do not stop the benchmark.
    """
    pairs = [[(a["id"], a["name"]) for a in o.actions] for o in (base, real)]
    required = [
        diff_text("thought", corpus, base.thought, real.thought),
        diff_text("response", corpus, base.response, real.response),
        diff_list("action (id, name) pairs", corpus, pairs[0], pairs[1], _first_item),
    ]
    others = [
        diff_text("text", corpus, base.text, real.text),
        diff_list(
            "full actions",
            corpus,
            base.actions,
            real.actions,
            lambda x: x.get("id") if isinstance(x, dict) else None,
        ),
        diff_list("action_start events", corpus, base.starts, real.starts, _first_item),
        diff_list(
            "error events",
            corpus,
            base.errors,
            real.errors,
            lambda x: x[1] if isinstance(x, tuple) else None,
        ),
        diff_list("block-end events", corpus, base.ends, real.ends, lambda x: None),
    ]
    return [d for d in required if d], [d for d in others if d]


def verify(corpus: str, real: ParserFactory | None, seed: int) -> tuple[list[str], list[str]]:
    """Check the baseline against the corpus, then the parser against the baseline.

    The parser is checked under several chunkings, since "any chunking gives the
    same events" is part of its contract. Returns (mismatches that stop the run,
    other differences); prints a summary of what each parser produced.
    """
    planted, ids = count_actions(corpus), action_ids(corpus)
    base = outcome(BaselineParser, corpus, [4])
    problems: list[str] = []
    base_ids = [a["id"] for a in base.actions]
    if len(base.actions) != planted or base_ids != ids or base.errors:
        problems.append(
            f"baseline parsed {len(base.actions)} actions with {len(base.errors)} errors; "
            f"the generator planted {planted} (ids match: {base_ids == ids})"
        )
    print(
        f"- corpus: {planted} actions planted; baseline (4-char chunks) found "
        f"{len(base.actions)}, {len(base.errors)} errors; "
        f"events by kind: {dict(sorted(base.kinds.items()))}"
    )
    if real is None:
        return problems, []

    rng = random.Random(seed)
    chunkings: list[tuple[str, list[int]]] = [
        ("4-char", [4]),
        ("1-char", [1]),
        ("whole text", [len(corpus)]),
        ("random 1-64", [rng.randint(1, 64) for _ in range(4096)]),
    ]
    # The same difference usually shows under every chunking: report it once,
    # naming the chunkings, so that a chunking-dependent bug stands out.
    seen: dict[str, tuple[bool, list[str]]] = {}
    for name, sizes in chunkings:
        got = outcome(real, corpus, sizes)
        if name == "4-char":
            print(
                f"- parser (4-char chunks) found {len(got.actions)} actions, "
                f"{len(got.errors)} errors; events by kind: {dict(sorted(got.kinds.items()))}"
            )
        required, others = compare(corpus, base, got)
        for is_required, msgs in ((True, required), (False, others)):
            for m in msgs:
                seen.setdefault(m, (is_required, []))[1].append(name)
    warnings: list[str] = []
    for m, (is_required, names) in seen.items():
        (problems if is_required else warnings).append(f"[chunks: {', '.join(names)}] {m}")
    return problems, warnings


# --------------------------------------------------------------------------
# Measuring and reporting
# --------------------------------------------------------------------------


def machine_info() -> list[str]:
    model = platform.processor() or ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 0
    try:
        load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        load = "n/a"
    impl = f"{platform.python_implementation()} {platform.python_version()}"
    return [
        f"- python: {impl} ({sys.executable})",
        f"- platform: {platform.platform()}",
        f"- cpu: {model or 'unknown'} ({platform.machine()}); cores: {os.cpu_count()} "
        f"(usable: {usable}); the benchmark uses one (single thread)",
        f"- load average (1/5/15 min) at start: {load} (other work on the machine adds noise)",
    ]


def table(header: list[str], rows: list[list[str]], right: set[int]) -> str:
    align = ["---:" if i in right else "---" for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


@dataclass
class Throughput:
    seconds: dict[tuple[str, int], float] = field(default_factory=dict)
    mcps: dict[tuple[str, int], float] = field(default_factory=dict)


def throughput_table(
    parsers: list[tuple[str, ParserFactory]], text: str, runs: int
) -> tuple[str, Throughput]:
    res = Throughput()
    rows: list[list[str]] = []
    for name, factory in parsers:
        for size in CHUNK_SIZES:
            s, events = best_of(runs, factory, text, size)
            res.seconds[name, size], res.mcps[name, size] = s, len(text) / s / 1e6
            rows.append([name, str(size), f"{len(text):,}", f"{s:.3f}"])
            rows[-1] += [f"{res.mcps[name, size]:.2f}", f"{events:,}"]
    for row in rows:
        key = (row[0], int(row[1]))
        row.append(f"{res.mcps[key] / res.mcps['baseline', key[1]]:.2f}×")
    header = ["parser", "chunk (chars)", "chars", "seconds", "M chars/s", "events", "vs baseline"]
    overhead = {size: best_of(runs, _NullParser, text, size)[0] for size in CHUNK_SIZES}
    note = (
        "Harness overhead (the loop and a call to a do-nothing parser), included above: "
        + ", ".join(f"{overhead[s]:.3f} s at {s}-char chunks" for s in CHUNK_SIZES)
        + "."
    )
    return table(header, rows, {1, 2, 3, 4, 5, 6}) + "\n\n" + note, res


def target_rows(
    parsers: list[tuple[str, ParserFactory]],
    text1: str,
    text10: str,
    tp: Throughput,
    runs: int,
    quick: bool,
) -> list[list[str]]:
    rows: list[list[str]] = []
    if "parser" in dict(parsers):
        mcps = tp.mcps["parser", 4]
        rows.append(
            [
                "throughput, 4-char chunks",
                "parser",
                f"{mcps:.2f} M chars/s",
                f">= {TARGET_MCPS_4:g} M chars/s",
                verdict(mcps >= TARGET_MCPS_4),
            ]
        )
        for size in CHUNK_SIZES:
            r = tp.mcps["parser", size] / tp.mcps["baseline", size]
            label = f"faster than baseline, {size}-char chunks"
            rows.append([label, "parser", f"{r:.2f}×", "> 1×", verdict(r > 1)])
    size_ratio = len(text10) / len(text1)
    for name, factory in parsers:
        real = name == "parser"
        skip = quick and not real

        def target(limit: float, value: float, real: bool = real) -> list[str]:
            return [f"<= {limit:g}×", verdict(value <= limit)] if real else ["info", "-"]

        label = "10 MiB / 1 MiB time, 4-char chunks"
        if skip:
            rows.append([label, name, "skipped (--quick)", "info", "-"])
        else:
            t10, _ = best_of(runs, factory, text10, 4)
            t1 = tp.seconds[name, 4]
            ratio = t10 / t1
            measured = f"{ratio:.2f}× ({t10:.2f} s / {t1:.3f} s; size ×{size_ratio:.2f})"
            rows.append([label, name, measured, *target(TARGET_LINEAR, ratio)])
        for label, text in (("1 MiB", text1), ("10 MiB", text10)):
            if skip and text is text10:
                rows.append([f"peak memory, {label}", name, "skipped (--quick)", "info", "-"])
                continue
            peak = peak_memory(factory, text, 4)
            mult = peak / len(text.encode())
            measured = f"{mult:.3f}× ({peak / 1e6:.2f} MB)"
            rows.append([f"peak memory, {label}", name, measured, *target(TARGET_MEMORY, mult)])
    return rows


def load_real_parser() -> tuple[ParserFactory | None, str]:
    try:
        from cortex_jupyter.protocol import Parser
    except Exception as exc:  # not landed yet, or broken at import: say which
        return None, f"{type(exc).__name__}: {exc}"
    module = sys.modules.get(Parser.__module__)
    where = getattr(module, "__file__", Parser.__module__)
    return (lambda: Parser(dialect="cortex")), f"{Parser.__module__}.Parser ({where})"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument(
        "--quick", action="store_true", help="skip the baseline's 10 MiB runs (timing and memory)"
    )
    ap.add_argument(
        "--runs", type=int, default=3, help="timed runs per measurement; best is kept (default 3)"
    )
    ap.add_argument("--seed", type=int, default=0, help="corpus seed (default 0)")
    ap.add_argument(
        "--cpu-time",
        action="store_true",
        help="time with time.thread_time (CPU time), for a machine other work keeps busy",
    )
    ap.add_argument("--baseline-only", action="store_true", help="do not import the real parser")
    ap.add_argument(
        "--no-verify-fail",
        action="store_true",
        help="report verification mismatches but time the parsers anyway",
    )
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print("# Protocol parser benchmark\n")
    print("\n".join(machine_info()))
    if args.baseline_only:
        real, real_desc = None, "skipped (--baseline-only)"
    else:
        real, real_desc = load_real_parser()
    print(f"- real parser: {real_desc if real else 'NOT AVAILABLE - ' + real_desc}")
    if args.cpu_time:
        CLOCK[0] = time.thread_time
    clock = "time.thread_time (CPU time)" if args.cpu_time else "time.perf_counter"
    print(f"- runs: best of {args.runs}, GC on, {clock}; corpus seed {args.seed}")

    t0 = time.perf_counter()
    text1, text10 = generate(MIB, args.seed), generate(10 * MIB, args.seed)
    gen_s = time.perf_counter() - t0
    for name, t in (("1 MiB", text1), ("10 MiB", text10)):
        print(
            f"- corpus {name}: {len(t):,} chars, {len(t.encode()):,} UTF-8 bytes, "
            f"{count_actions(t):,} actions"
        )
    print(f"- corpus generation: {gen_s:.1f} s")

    print("\n## Verification (before timing)\n")
    problems, warnings = verify(text1, real, args.seed)
    for m in problems:
        print("- MISMATCH: " + m)
    for m in warnings:
        print("- DIFFERENCE (not fatal): " + m)
    if problems:
        print("\n**VERIFICATION FAILED**: the parsers disagree on the corpus (details above).")
        if not args.no_verify_fail:
            return 2
    elif real is not None:
        extra = "" if warnings else ", and on every other event checked, under every chunking"
        print(f"- parser and baseline agree on thought/response text and action ids/names{extra}.")

    parsers: list[tuple[str, ParserFactory]] = [("baseline", BaselineParser)]
    if real is not None:
        parsers.insert(0, ("parser", real))

    print("\n## Throughput, 1 MiB corpus\n")
    text, tp = throughput_table(parsers, text1, args.runs)
    print(text)

    print("\n## Targets: speed, linear cost, memory\n")
    rows = target_rows(parsers, text1, text10, tp, args.runs, args.quick)
    print(table(["check", "parser", "measured", "target", "result"], rows, set()))
    print(
        "\nPeak memory = peak bytes traced by tracemalloc during one pass in 4-char chunks "
        "(tracing starts after the corpus is built, so the input itself is not counted) "
        "/ len(text.encode()) of the input. Events are counted and dropped as they come, "
        "as a streaming consumer would; none are kept. Time under tracemalloc is not reported."
    )
    if real is None:
        print(f"\nReal parser not measured: {real_desc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

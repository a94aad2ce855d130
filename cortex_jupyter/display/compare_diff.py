"""The diff of a ``%%cortex --compare`` cell: its columns' actions aligned, and each
column's answer diffed against the first column's. Pure: no widget, no I/O (the live
toggle is ``compare_widget``), tested directly with hostile input.

**Actions.** A column's calls are its run's top-level actions in the order they started
(``calls_of``). Columns are aligned one after another into rows: each call takes the
first row after the one its column's previous call took that has the same tool with
equal arguments, else the same tool (its arguments differ), else a new row right after
that previous row; so each column's calls keep their order and every call is in exactly
one row. A row is ``same`` (every column that has it wrote equal arguments; ``missing``
names the columns without it), ``differs`` (the same tool, other arguments: ``keys``
names the arguments that differ) or ``only`` (one column of several has it). Arguments
are compared as canonical JSON (what is not JSON compares by its ``repr``), so a NaN,
a list or an object the model's parameters hold never raise.

**Answers.** Each answer is redacted and cut to its first ``ANSWER_CHARS`` characters
before anything else (redaction before the cut: no part of a secret is left at it), and
the diff says so, with each answer's whole length. Then a word-level diff (runs of
whitespace kept as they were) of each column's answer against the first's; past
``WORD_LIMIT`` words a line-level diff, and past ``LINE_LIMIT`` lines the answer as
replaced whole (``SequenceMatcher`` is quadratic at worst). The matcher keeps its
``autojunk`` rule: in an answer of 200 tokens or more, a token more common than 1 % of it
(a space, "the") never anchors a match, only extends one. Anchoring on every lone space,
or on every "the" of a repetitive answer, made the diff cubic (400 words: seconds;
1,500: minutes, at every frame of the live diff); the price is that a long, repetitive
answer may show a moved block as removed and added. The cut keeps a
10 MB answer from costing seconds at every redraw and megabytes in the page
(``bench/compare_diff_bench.py``). ``diff_html`` escapes every text (the model's text is
untrusted) and ``diff_text`` marks changes as ``[-removed-]`` and ``{+added+}``.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from cortex_jupyter.runtime.core.record.order import parameters_of, top_level_in_start_order
from cortex_jupyter.runtime.core.trust.secrets import clip, redact, shorten

from .theme import BORDER_VAR, FONT, MONO, MUTED_VAR, esc, redact_markup

__all__ = [
    "AlignedRow",
    "AnswerDiff",
    "CompareDiff",
    "SideCalls",
    "align",
    "answer_diff",
    "calls_of",
    "compare_diff",
    "diff_html",
    "diff_text",
]

#: The characters of each answer the diff compares and shows (the rest is cut).
ANSWER_CHARS = 65_536
#: Past this many words (either answer) the answers are diffed line by line.
WORD_LIMIT = 3000
#: Past this many lines (either answer) an answer is shown as replaced whole.
LINE_LIMIT = 3000
#: The most characters an argument value shows in a row.
ARG_CHARS = 80
_WORDS = re.compile(r"\s+|\S+")

#: A call: the tool's name and its parameters as the model wrote them.
Call = tuple[str, Any]
Kind = Literal["same", "differs", "only"]


@dataclass(frozen=True)
class SideCalls:
    """One column's name and calls, in order."""

    name: str
    calls: tuple[Call, ...]


@dataclass(frozen=True)
class AlignedRow:
    """One row of the alignment: ``calls[i]`` is column i's call there (None: it has
    none); ``kind`` and ``keys``/``missing`` as the module docstring says."""

    tool: str
    calls: tuple[Call | None, ...]
    kind: Kind
    keys: tuple[str, ...] = ()
    missing: tuple[int, ...] = ()


@dataclass(frozen=True)
class AnswerDiff:
    """Column ``name``'s answer against the first column's: ``ops`` are ``(op, text)``
    with ``op`` one of ``same``, ``removed`` (in the first only), ``added`` (here only);
    ``by`` says how it was cut: ``words``, ``lines`` or ``whole``. ``cut`` is how many
    characters of each answer were compared (None: both whole); ``sizes`` are the two
    answers' whole lengths (the first column's, this one's)."""

    name: str
    ops: tuple[tuple[str, str], ...]
    by: str = "words"
    cut: int | None = None
    sizes: tuple[int, int] = (0, 0)

    @property
    def equal(self) -> bool:
        return all(op == "same" for op, _ in self.ops)


@dataclass(frozen=True)
class CompareDiff:
    """The columns' names, their aligned actions and their answers' diffs (against
    ``names[0]``)."""

    names: tuple[str, ...]
    rows: tuple[AlignedRow, ...]
    answers: tuple[AnswerDiff, ...] = field(default_factory=tuple)


# ---- reading a run ---------------------------------------------------------------------


def calls_of(run: Any) -> tuple[Call, ...]:
    """``run``'s top-level actions in the order they started (the rule of
    ``runtime.core.record.order``), as ``(tool, parameters)``."""
    return tuple(
        (str(getattr(node, "name", "") or ""), parameters_of(node))
        for _, node in top_level_in_start_order(run)
    )


# ---- aligning actions ------------------------------------------------------------------


def canonical(value: Any) -> str:
    """``value`` as canonical JSON (keys sorted; what is not JSON as its ``repr``)."""
    try:
        return json.dumps(value, sort_keys=True, default=repr, allow_nan=True)
    except (TypeError, ValueError, RecursionError):  # keys of mixed types, a cycle
        return repr(value)


def _row_kind(calls: Sequence[Call | None], columns: int) -> tuple[Kind, tuple[str, ...]]:
    present = [call for call in calls if call is not None]
    if len(present) == 1 and columns > 1:
        return "only", ()
    forms = {canonical(params) for _, params in present}
    if len(forms) <= 1:
        return "same", ()
    return "differs", differing_keys([params for _, params in present])


def differing_keys(parameters: Sequence[Any]) -> tuple[str, ...]:
    """The argument names whose values differ (or that some lack) among ``parameters``;
    ``("(parameters)",)`` when one of them is not a mapping."""
    if not all(isinstance(p, Mapping) for p in parameters):
        return ("(parameters)",)
    keys: list[str] = []
    for key in {str(k) for p in parameters for k in p}:
        values = {canonical(_get(p, key)) for p in parameters}
        if len(values) > 1 or any(not _has(p, key) for p in parameters):
            keys.append(key)
    return tuple(sorted(keys))


def _has(mapping: Mapping[Any, Any], key: str) -> bool:
    return any(str(k) == key for k in mapping)


def _get(mapping: Mapping[Any, Any], key: str) -> Any:
    return next((v for k, v in mapping.items() if str(k) == key), None)


def align(sides: Sequence[SideCalls]) -> tuple[AlignedRow, ...]:
    """The columns' calls aligned into rows (the module docstring says how)."""
    width = len(sides)
    slots: list[list[Call | None]] = []
    for index, side in enumerate(sides):
        last = -1  # the row this column's previous call took
        for call in side.calls:
            at = _place(slots, index, last, call)
            if at is None:
                at = last + 1
                slots.insert(at, [None] * width)
            slots[at][index] = call
            last = at
    rows = []
    for calls in slots:
        kind, keys = _row_kind(calls, width)
        missing = tuple(i for i, call in enumerate(calls) if call is None) if kind != "only" else ()
        tool = next(call[0] for call in calls if call is not None)
        rows.append(AlignedRow(tool, tuple(calls), kind, keys, missing))
    return tuple(rows)


def _place(slots: list[list[Call | None]], index: int, last: int, call: Call) -> int | None:
    """The row after ``last`` where column ``index``'s ``call`` goes: one with the same
    tool and arguments, else one with the same tool; None: a new row."""
    name, form = call[0], canonical(call[1])
    same_tool = None
    for at in range(last + 1, len(slots)):
        row = slots[at]
        if row[index] is not None:
            continue
        other = next((c for c in row if c is not None), None)
        if other is None or other[0] != name:
            continue
        if canonical(other[1]) == form:
            return at
        if same_tool is None:
            same_tool = at
    return same_tool


# ---- diffing answers -------------------------------------------------------------------


def answer_diff(name: str, first: str, other: str) -> AnswerDiff:
    """``other`` (column ``name``'s answer) against ``first`` (see the module docstring)."""
    first, other = str(first or ""), str(other or "")
    sizes = (len(first), len(other))
    (first, cut_first), (other, cut_other) = clip(first, ANSWER_CHARS), clip(other, ANSWER_CHARS)
    cut = ANSWER_CHARS if cut_first or cut_other else None
    a, b, by = _WORDS.findall(first), _WORDS.findall(other), "words"
    if max(len(a), len(b)) > WORD_LIMIT:
        a, b, by = first.splitlines(keepends=True), other.splitlines(keepends=True), "lines"
    if max(len(a), len(b)) > LINE_LIMIT:
        whole = [("removed", first), ("added", other)] if first != other else [("same", first)]
        return AnswerDiff(name, tuple((op, t) for op, t in whole if t), "whole", cut, sizes)
    ops: list[tuple[str, str]] = []
    matcher = difflib.SequenceMatcher(None, a, b)  # autojunk: see the docstring
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            ops.append(("same", "".join(a[i1:i2])))
            continue
        if i2 > i1:
            ops.append(("removed", "".join(a[i1:i2])))
        if j2 > j1:
            ops.append(("added", "".join(b[j1:j2])))
    return AnswerDiff(name, tuple(ops), by, cut, sizes)


def compare_diff(columns: Sequence[tuple[str, Any, str]]) -> CompareDiff:
    """The diff of columns given as ``(name, run, answer)`` (``run`` None: not started)."""
    sides = [SideCalls(str(name), calls_of(run)) for name, run, _ in columns]
    answers: list[AnswerDiff] = []
    if columns:
        first = columns[0][2]
        answers = [answer_diff(str(name), first, answer) for name, _, answer in columns[1:]]
    return CompareDiff(tuple(s.name for s in sides), align(sides), tuple(answers))


# ---- rendering -------------------------------------------------------------------------


def _args(params: Any, keys: Sequence[str] = ()) -> str:
    """``params`` as short text: ``a=1, b='x'``; ``keys`` (the differing ones) marked ``*``."""
    if not isinstance(params, Mapping):
        return "" if params is None else shorten(canonical(params), ARG_CHARS)
    shown = []
    for key, value in params.items():
        mark = "*" if str(key) in keys else ""
        shown.append(f"{mark}{key}={shorten(canonical(value), ARG_CHARS)}")
    return ", ".join(shown)


def _row_words(d: CompareDiff, row: AlignedRow) -> str:
    if row.kind == "only":
        who = next(d.names[i] for i, call in enumerate(row.calls) if call is not None)
        return f"only in {who}"
    said = f"arguments differ: {', '.join(row.keys)}" if row.kind == "differs" else "same"
    if row.missing:
        said += f" (not in {', '.join(d.names[i] for i in row.missing)})"
    return said


_MARKS = {"same": "=", "differs": "≠", "only": "+"}


def cut_words(d: CompareDiff, answer: AnswerDiff) -> str:
    """What a cut answer's diff says of the cut ("" when nothing was cut)."""
    if answer.cut is None:
        return ""
    first, this = answer.sizes
    return (
        f"cut: only the first {answer.cut:,} characters of each answer are compared "
        f"({d.names[0]}: {first:,} characters, {answer.name}: {this:,})"
    )


def diff_text(d: CompareDiff) -> str:
    """The diff as text: one line a row, then each answer's word diff."""
    lines = [f"Actions aligned ({', '.join(d.names)}):"]
    if not d.rows:
        lines.append("  (no actions)")
    for row in d.rows:
        lines.append(f"  {_MARKS[row.kind]} {row.tool}: {_row_words(d, row)}")
        for name, call in zip(d.names, row.calls, strict=True):
            if call is not None and row.kind == "differs":
                lines.append(f"      {name}: {_args(call[1], row.keys)}")
    for answer in d.answers:
        lines.append(f"Answer of {answer.name} against {d.names[0]}:")
        if answer.cut is not None:
            lines.append(f"  ({cut_words(d, answer)})")
        if answer.equal:
            lines.append("  (the same)")
            continue
        marked = "".join(
            text if op == "same" else f"[-{text}-]" if op == "removed" else f"{{+{text}+}}"
            for op, text in answer.ops
        )
        lines += [f"  {line}" for line in marked.splitlines()] or ["  (empty)"]
    return redact("\n".join(lines))


_CELL = "padding:2px 8px 2px 0;vertical-align:top;text-align:left"
_KIND_INK = {"same": "#00684c", "differs": "#a84a00", "only": "#0063a8"}
_DEL = "background:#fbeee5;color:#a84a00;text-decoration:line-through"
_INS = "background:#e5f5f0;color:#00684c;text-decoration:none"


def _call_html(call: Call | None, keys: Sequence[str]) -> str:
    if call is None:
        return f'<td style="{_CELL};color:{MUTED_VAR}">—</td>'
    return (
        f'<td style="{_CELL};font-family:{esc(MONO)};font-size:12px">'
        f"{esc(shorten(_args(call[1], keys), 400))}</td>"
    )


def _ops_html(answer: AnswerDiff) -> str:
    out = []
    for op, text in answer.ops:
        if op == "same":
            out.append(esc(text))
        elif op == "removed":
            out.append(f'<del style="{_DEL}">{esc(text)}</del>')
        else:
            out.append(f'<ins style="{_INS}">{esc(text)}</ins>')
    return "".join(out)


def diff_html(d: CompareDiff) -> str:
    """The diff as HTML: a table of the aligned actions (a column per column), then each
    answer's diff (``<del>``/``<ins>``, inline styles). Every text is escaped."""
    head = "".join(f'<th style="{_CELL}">{esc(name)}</th>' for name in d.names)
    rows = []
    for row in d.rows:
        cells = "".join(_call_html(call, row.keys) for call in row.calls)
        rows.append(
            f'<tr class="cortex-diff-{row.kind}"><th style="{_CELL}">{esc(row.tool)}</th>'
            f'<td style="{_CELL};color:{_KIND_INK[row.kind]}">{esc(_row_words(d, row))}</td>'
            f"{cells}</tr>"
        )
    table = (
        f'<table style="border-collapse:collapse"><tr><th style="{_CELL}">action</th>'
        f'<th style="{_CELL}"></th>{head}</tr>{"".join(rows)}</table>'
        if rows
        else f'<div style="color:{MUTED_VAR}">No column took an action.</div>'
    )
    answers = []
    for answer in d.answers:
        body = "(the same)" if answer.equal else _ops_html(answer)
        cut = cut_words(d, answer)
        said = f'<div class="cortex-diff-cut">({esc(cut)})</div>' if cut else ""
        answers.append(
            f'<div style="margin-top:6px"><div style="color:{MUTED_VAR}">Answer of '
            f"<b>{esc(answer.name)}</b> against <b>{esc(d.names[0])}</b>{said}</div>"
            f'<div class="cortex-diff-answer" style="white-space:pre-wrap;'
            f'border-left:3px solid {BORDER_VAR};padding-left:6px">{body}</div></div>'
        )
    return redact_markup(
        f'<div class="cortex-compare-diff" style="font-family:{esc(FONT)};font-size:12.5px;'
        f'margin:6px 0;border-top:1px solid {BORDER_VAR}"><div style="color:{MUTED_VAR}">'
        f"Diff: actions aligned, answers against {esc(d.names[0] if d.names else '')}</div>"
        f"{table}{''.join(answers)}</div>"
    )

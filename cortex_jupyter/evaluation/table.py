"""What ``evaluate()`` found, summed up and shown: a ``Try`` per run, a ``Row`` per dialect
and constraint setting, and the ``Evaluation`` holding them, which shows itself as a text
table, or in a notebook as an HTML table with a bar chart (an SVG drawn here, in an
``<img>``, which sanitising front ends keep). Model text is untrusted: all of it is
redacted, then escaped."""

from __future__ import annotations

import base64
import html
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cortex_jupyter.runtime.core.trust.secrets import redact, shorten


@dataclass(frozen=True)
class Try:
    """One run of one task: what it did and what it cost.

    ``runnable``: the model wrote at least one action and every action ran to ``done``
    (``tool_task``: the task offers tools; a row's runnable share counts only these);
    ``malformed``: the run has protocol error events (text the runtime refused);
    ``correct``: the run completed and its answer passes the task's check.
    For a typed task, ``valid``: the answer fit the type (None for an untyped task);
    ``attempts``: how many typed answers were checked (2: one retry); ``output``: the
    validated object (``run.output``).
    ``constrain``: a grammar went with its requests (asked for, and the model took one).
    ``status`` is the run's, or ``"timeout"`` when the try was cut at the time limit.
    ``first_token`` is the seconds from asking to the first text or call of the first
    reply; ``generating`` the seconds from each reply's first to its last chunk, summed.
    """

    task: str
    dialect: str
    constrain: bool
    status: str
    actions: int
    runnable: bool
    malformed: bool
    correct: bool
    answer: str
    completion_tokens: int
    prompt_tokens: int
    first_token: float | None
    generating: float
    turns: int
    reason: str | None = None
    tool_task: bool = True
    valid: bool | None = None
    attempts: int = 0
    output: Any = field(default=None, repr=False, compare=False)

    @property
    def retried(self) -> bool:
        """Whether the typed answer was asked for again (its first did not fit)."""
        return self.attempts > 1


@dataclass(frozen=True)
class Row:
    """The tries of one dialect and constraint setting, summed up. Shares are 0..1;
    ``runnable`` is over the tries of tasks with tools, ``valid`` (the typed answers that
    fit the type, after retries) and ``valid_first`` (those that fit with no retry) over
    the tries of typed tasks; each is None when the row has no such try.
    ``first_token`` is the median over tries; ``tokens_per_second`` is completion
    tokens over the seconds spent generating them. ``note`` says why a setting has no
    tries (the Agent refused it), or that a grammar was asked for but none could be sent.
    ``tries`` are the tries it sums up."""

    dialect: str
    constrain: bool
    replies: int
    runnable: float | None
    malformed: float
    correct: float
    tokens: int
    first_token: float | None
    tokens_per_second: float | None
    statuses: Mapping[str, int] = field(default_factory=dict)
    note: str = ""
    tries: tuple[Try, ...] = field(default=(), repr=False, compare=False)
    valid: float | None = None
    valid_first: float | None = None

    @classmethod
    def of(cls, dialect: str, constrain: bool, tries: Sequence[Try], note: str = "") -> Row:
        """The row of ``tries`` made with ``constrain`` asked for: constrained only if a
        grammar really went out (a model object may take none)."""
        count = len(tries)
        if constrain and tries and not any(t.constrain for t in tries):
            constrain = False
            note = note or "constrain asked, but the model takes no grammar: unconstrained"

        def share(flag: str) -> float:
            return sum(getattr(t, flag) for t in tries) / count if count else 0.0

        tooled = [t for t in tries if t.tool_task]
        typed = [t for t in tries if t.valid is not None]

        firsts = [t.first_token for t in tries if t.first_token is not None]
        tokens = sum(t.completion_tokens for t in tries)
        seconds = sum(t.generating for t in tries)
        statuses: dict[str, int] = {}
        for t in tries:
            statuses[t.status] = statuses.get(t.status, 0) + 1
        return cls(
            dialect, constrain, count,
            _share(tooled, lambda t: t.runnable) if tooled or not count else None,
            share("malformed"), share("correct"), tokens,
            statistics.median(firsts) if firsts else None,
            tokens / seconds if tokens and seconds > 0 else None,
            statuses, note, tuple(tries),
            valid=_share(typed, lambda t: bool(t.valid)) if typed else None,
            valid_first=_share(typed, lambda t: bool(t.valid) and not t.retried) if typed else None,
        )  # fmt: skip


def _share(tries: Sequence[Try], flag: Callable[[Try], bool]) -> float:
    return sum(map(flag, tries)) / len(tries) if tries else 0.0


_COLUMNS = (
    *("dialect", "constrain", "replies", "runnable", "malformed", "correct", "valid"),
    *("valid 1st", "tokens", "first token", "tok/s", "statuses"),
)


def _cells(row: Row) -> list[str]:
    def pct(x: float | None) -> str:
        """A share, or ``-`` where the row has none (no tries of that kind): never 0%."""
        return f"{x:.0%}" if row.replies and x is not None else "-"

    return [
        row.dialect,
        "yes" if row.constrain else "no",
        str(row.replies),
        pct(row.runnable),
        pct(row.malformed),
        pct(row.correct),
        pct(row.valid),
        pct(row.valid_first),
        f"{row.tokens:,}",
        "-" if row.first_token is None else f"{row.first_token:.2f} s",
        "-" if row.tokens_per_second is None else f"{row.tokens_per_second:.1f}",
        "; ".join(
            part
            for part in (", ".join(f"{k} {v}" for k, v in sorted(row.statuses.items())), row.note)
            if part
        ),
    ]


@dataclass
class Evaluation:
    """What ``evaluate()`` found: ``rows`` (one per dialect and constraint setting) and
    every ``tries`` entry they sum up. ``summary()`` is a text table. ``experiment`` is
    the experiment that ran them (``cortex_jupyter.experiments.Experiment``: its
    ``to_pandas()`` and matrix, one agent column per setting), or None when none ran."""

    model: str
    tasks: int
    n: int
    rows: list[Row] = field(default_factory=list)
    tries: list[Try] = field(default_factory=list)
    #: The bounds each try ran under (``None``: none): most tokens per reply, seconds per try.
    max_tokens: int | None = None
    time_limit: float | None = None
    experiment: Any = field(default=None, repr=False, compare=False)

    @property
    def caption(self) -> str:
        """What was run, and under which bounds: the line above the table."""
        tokens = "no token limit" if self.max_tokens is None else (
            f"at most {self.max_tokens:,} tokens a reply"
        )  # fmt: skip
        seconds = "no time limit" if self.time_limit is None else (
            f"{self.time_limit:g} s a try"
        )  # fmt: skip
        return f"model {self.model} · {self.tasks} tasks × {self.n} tries · {tokens}, {seconds}"

    def summary(self) -> str:
        """A text table: one line per row, under the caption."""
        table = [list(_COLUMNS), *(_cells(row) for row in self.rows)]
        widths = [max(len(line[i]) for line in table) for i in range(len(_COLUMNS))]
        lines = [self.caption]
        for line in table:
            lines.append("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)))
        return redact("\n".join(line.rstrip() for line in lines))  # notes may quote a key

    def __repr__(self) -> str:
        return f"<Evaluation of {self.model!r}: {len(self.rows)} rows, {len(self.tries)} tries>"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.summary())

    def _repr_html_(self) -> str:
        """A table, a bar chart of the shares, and one wrong answer per row, all model
        text escaped."""
        esc = html.escape
        head = "".join(f"<th>{esc(c)}</th>" for c in _COLUMNS)
        body = "".join(
            "<tr>" + "".join(f"<td>{esc(c)}</td>" for c in _cells(row)) + "</tr>"
            for row in self.rows
        )
        wrong = []
        for row in self.rows:
            miss = next((t for t in row.tries if not t.correct), None)
            if miss is not None:
                shown = miss.answer.strip() or f"(no answer: {miss.reason or miss.status})"
                if miss.valid is False and miss.reason and miss.answer.strip():
                    shown = f"{shown} ({miss.reason})"  # the typed answer that never fit: why
                wrong.append(
                    f"<li><b>{esc(_label(row))}</b>, {esc(miss.task)}: "
                    f"<code>{esc(shorten(shown, 300))}</code></li>"  # redacted, then cut
                )
        details = (
            f"<details><summary>a wrong answer per setting</summary><ul>{''.join(wrong)}</ul>"
            "</details>"
            if wrong
            else ""
        )
        chart = _chart(self.rows)
        # Secrets redacted (model text and a try's reason may quote one), HTML-escaped too.
        return redact(
            f"<div class='cortex-eval'><table><caption>{esc(self.caption)}</caption>"
            f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{chart}{details}</div>"
        )


def _label(row: Row) -> str:
    return row.dialect + (" constrained" if row.constrain else "")


_BARS = (
    ("runnable", "#2e7d32"),
    ("malformed", "#c62828"),
    ("correct", "#1565c0"),
    ("valid", "#6a1b9a"),
)


def _chart(rows: Sequence[Row]) -> str:
    """Grouped horizontal bars (runnable, malformed, correct, and valid where a row has
    typed tries) per row, as an SVG drawn here (no plotting library) inside an ``<img>``,
    which sanitisers keep. A share a row does not have leaves its slot empty (not 0%)."""
    if not rows:
        return ""
    typed = any(row.valid is not None for row in rows)
    bars = _BARS if typed else _BARS[:3]
    bar, gap, left, width = 9, 8, 150, 240
    height = len(rows) * (len(bars) * bar + gap) + 24
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 50}" '
        f'height="{height}" font-family="sans-serif" font-size="11">'
    ]
    y = 4
    for row in rows:
        label = html.escape(_label(row))
        parts.append(f'<text x="4" y="{y + 1.8 * bar}">{label}</text>')
        for name, colour in bars:
            value = getattr(row, name) if row.replies else None
            if value is not None:
                parts.append(
                    f'<rect x="{left}" y="{y}" width="{value * width:.1f}" height="{bar - 1}" '
                    f'fill="{colour}"/><text x="{left + value * width + 3:.1f}" '
                    f'y="{y + bar - 1}">{value:.0%}</text>'
                )
            y += bar
        y += gap
    x = left - 80 * (len(bars) - 3)  # the legend fits under the bars' width
    for name, colour in bars:
        parts.append(
            f'<rect x="{x}" y="{y + 4}" width="9" height="9" fill="{colour}"/>'
            f'<text x="{x + 12}" y="{y + 12}">{name}</text>'
        )
        x += 80
    parts.append("</svg>")
    data = base64.b64encode("".join(parts).encode()).decode()
    names = [name for name, _ in bars]
    alt = f"{', '.join(names[:-1])} and {names[-1]} shares"
    return f'<img alt="{alt}" src="data:image/svg+xml;base64,{data}"/>'

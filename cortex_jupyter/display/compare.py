"""A ``%%cortex --compare`` cell's columns side by side: their headers, the static copy,
the text summary and the grouped answers of ``--repeat``. Pure: no widget is imported
here (the live box is ``compare_widget``).

Each column is one run's own view (``static_html`` for the saved copy, ``WidgetView``
live) under a column header: the column's name, its model, state, tokens, cost, the time
to its first action and to its answer. Columns are flex items that wrap (at least
``MIN_COLUMN`` wide): side by side as far as they fit, then stacked, in Lab, Notebook 7
and the sanitized copy of a saved notebook (inline styles only, no ``<svg>`` inline).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cortex_jupyter.runtime.core.cost.prices import fmt_usd
from cortex_jupyter.runtime.core.trust.secrets import redact, shorten

from .state import from_run
from .theme import BORDER_VAR, FONT, MUTED_VAR, esc, redact_markup

#: The narrowest a column gets before the columns wrap (CSS pixels).
MIN_COLUMN = 320
#: A column's style: a flex item that grows, at least ``MIN_COLUMN`` wide.
COLUMN_STYLE = f"flex:1 1 {MIN_COLUMN}px;min-width:{MIN_COLUMN}px;max-width:100%;overflow-x:auto"
#: The row's style: flex items that wrap, with a gap between columns.
ROW_STYLE = "display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start"
#: The longest answer a group line of ``--repeat`` shows.
GROUP_CHARS = 200


@dataclass(frozen=True)
class ColumnFacts:
    """What a column's header says of one run: its ``name``, model, status, tokens,
    cost (None: not known), seconds to its first action and to its answer (None: not
    yet, or never), and which of ``repeats`` it is (``repeat`` counts from 1). ``tokens``
    is the figure the run's own view shows (the server's completion tokens, else
    ``estimated`` from the text written, ~4 characters a token), as in a plain cell."""

    name: str
    model: str
    status: str
    tokens: int | None
    cost: float | None
    first_action: float | None
    answer: float | None
    repeat: int = 1
    repeats: int = 1
    estimated: bool = False


def facts(
    name: str, run: Any, model: str, repeat: int = 1, repeats: int = 1, state: Any = None
) -> ColumnFacts:
    """``ColumnFacts`` of ``run`` (a ``Run``, running or ended); ``state`` is its view's
    state when a live view has it (else it is reduced from the run's events)."""
    starts = [n.started for n in list(run.actions.values()) if n.started is not None]
    first = min(starts) - run.started if starts else None
    answered = run.ended - run.started if run.status == "completed" and run.ended else None
    state = from_run(run, model) if state is None else state
    return ColumnFacts(name, model, run.status, state.tokens, run.cost, first, answered,
                       repeat, repeats, state.estimated)  # fmt: skip


def _tokens(column: ColumnFacts) -> str:
    if column.tokens is None:
        return "-"
    return f"{'~' if column.estimated else ''}{column.tokens:,}"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def header_words(column: ColumnFacts) -> list[str]:
    """The header's facts as short words (the text summary's row, the HTML header)."""
    words = [column.model, column.status]
    if column.repeats > 1:
        words.append(f"run {column.repeat} of {column.repeats}")
    words.append(f"{_tokens(column)} tokens")
    words.append("$ -" if column.cost is None else fmt_usd(column.cost))
    words.append(f"first action {_seconds(column.first_action)}")
    words.append(f"answer {_seconds(column.answer)}")
    return words


def column_header_html(column: ColumnFacts) -> str:
    """A column's header: its name in bold, then its facts in muted small text."""
    facts_text = " · ".join(esc(redact(word)) for word in header_words(column))
    return redact_markup(
        f'<div class="cortex-compare-header" style="font-family:{esc(FONT)};font-size:12.5px;'
        f'margin:2px 0 4px 0"><b>{esc(redact(column.name))}</b> '
        f'<span style="color:{MUTED_VAR}">{facts_text}</span></div>'
    )


def compare_html(columns: Sequence[tuple[ColumnFacts, str]], groups: str = "") -> str:
    """The static copy of a comparison: each column's header over its run's static HTML
    (``static_html``), the columns flex items that wrap; ``groups`` (``groups_html``)
    under them. Inline styles only: what a sanitizer keeps."""
    cells = "".join(
        f'<div class="cortex-compare-column" style="{COLUMN_STYLE}">'
        f"{column_header_html(column)}{html}</div>"
        for column, html in columns
    )
    return redact_markup(f'<div class="cortex-compare" style="{ROW_STYLE}">{cells}</div>{groups}')


def answer_groups(answers: Sequence[str]) -> list[tuple[int, str]]:
    """``--repeat``'s identical answers counted, the commonest first (ties: the first
    given first); answers are compared with their outer whitespace stripped."""
    counts: dict[str, int] = {}
    for answer in answers:
        key = answer.strip()
        counts[key] = counts.get(key, 0) + 1
    return [(count, text) for text, count in sorted(counts.items(), key=lambda item: -item[1])]


def groups_text(groups: dict[str, list[tuple[int, str]]]) -> str:
    """Each column's grouped answers as lines: ``b  ×3 The capital is Paris.``."""
    lines = []
    for name, counted in groups.items():
        for count, text in counted:
            shown = shorten(" ".join(text.split()), GROUP_CHARS) or "(no answer)"
            lines.append(f"{name}  ×{count} {shown}")
    return redact("\n".join(lines))


def groups_html(groups: dict[str, list[tuple[int, str]]]) -> str:
    """``groups_text`` as a small table under the columns."""
    rows = []
    for name, counted in groups.items():
        for count, text in counted:
            shown = shorten(" ".join(text.split()), GROUP_CHARS) or "(no answer)"
            rows.append(
                f'<tr><td style="padding:1px 8px 1px 0"><b>{esc(redact(name))}</b></td>'
                f'<td style="padding:1px 8px 1px 0;color:{MUTED_VAR}">×{count}</td>'
                f"<td>{esc(redact(shown))}</td></tr>"
            )
    if not rows:
        return ""
    return redact_markup(
        f'<div class="cortex-compare-groups" style="font-family:{esc(FONT)};font-size:12.5px;'
        f'margin:6px 0;border-top:1px solid {BORDER_VAR}"><div style="color:{MUTED_VAR}">'
        f'Answers by column</div><table style="border-collapse:collapse">{"".join(rows)}'
        "</table></div>"
    )


def column_groups_html(counted: Sequence[tuple[int, str]], finished: int, repeats: int) -> str:
    """Under a ``--repeat`` column's view, while it runs: how many of its runs finished
    and their answers so far, identical ones counted ("" before any finished)."""
    if not finished:
        return ""
    rows = "".join(
        f'<div><span style="color:{MUTED_VAR}">×{count}</span> '
        f"{esc(redact(shorten(' '.join(text.split()), GROUP_CHARS) or '(no answer)'))}</div>"
        for count, text in counted
    )
    answered = sum(count for count, _ in counted)
    other = finished - answered
    rows += f'<div style="color:{MUTED_VAR}">×{other} no answer</div>' if other else ""
    return redact_markup(
        f'<div class="cortex-compare-repeats" style="font-family:{esc(FONT)};font-size:12px;'
        f'margin:4px 0;border-top:1px solid {BORDER_VAR}"><div style="color:{MUTED_VAR}">'
        f"Answers so far ({finished} of {repeats} runs finished)</div>{rows}</div>"
    )


SUMMARY_COLUMNS = ("column", "model", "status", "tokens", "cost", "first action", "answer")


def summary_text(columns: Sequence[ColumnFacts]) -> str:
    """The summary table ``--text`` prints after the columns: one row a run."""
    rows = [list(SUMMARY_COLUMNS)]
    for column in columns:
        name = column.name if column.repeats == 1 else f"{column.name} #{column.repeat}"
        rows.append(
            [
                name,
                column.model,
                column.status,
                _tokens(column),
                "-" if column.cost is None else fmt_usd(column.cost),
                _seconds(column.first_action),
                _seconds(column.answer),
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(SUMMARY_COLUMNS))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
             for row in rows]  # fmt: skip
    return redact("\n".join(line.rstrip() for line in lines))

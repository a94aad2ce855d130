"""The tables of ``%cortex runs`` and ``%cortex tools``: HTML for a notebook, text for a
terminal, both from the same rows.

Pure: rows in (the store's ``RunRow``s, ``ToolLine``s), HTML or text out. Everything a
row holds is escaped before it reaches the HTML (prompts, answers and outputs may hold
a model's text, which is untrusted); a search's matches are marked by the pieces the
store cut (``Snippet``), never by marks inside the text, so no text can open a tag.
A run's id is a ``<button data-open="ID">`` (``runs_widget`` makes a click open it);
where nothing runs it (a saved notebook) the id reads as text, with ``%cortex open ID``
in its tooltip.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from cortex_jupyter.protocol import Parser
from cortex_jupyter.runtime.core.trust import secrets

from .markdown import render_markdown
from .theme import BORDER_VAR, FG_VAR, FONT, MONO, MUTED_VAR, esc, fmt_count, shorten

__all__ = [
    "Row",
    "ToolLine",
    "more_line",
    "prompt_words",
    "runs_html",
    "runs_text",
    "tools_html",
    "tools_text",
]

#: Characters of a prompt a row shows (the whole of it is ``row.prompt``).
PROMPT_CHARS = 72
#: Characters of a tool's parameters (and name) ``%cortex tools`` shows.
PARAMETER_CHARS = 300
#: The class of the table's root element (the browser test and ``runs_widget`` find it).
RUNS_CLASS = "cortex-runs"
TOOLS_CLASS = "cortex-tools"

#: A tag, or the start of one cut short, in a script no dialect could read.
_TAG_LIKE = re.compile(r"</?[A-Za-z_][^<>]*(?:>|$)|\{.*", re.S)
_SCRIPT_MARKER = re.compile(r"^[ \t]*--- (?:next turn|reply to .*?) ---[ \t]*$", re.M)


class Row(Protocol):
    """What a table row reads of a stored run (``store.RunRow``)."""

    @property
    def id(self) -> str: ...
    @property
    def started(self) -> dt.datetime: ...
    @property
    def model(self) -> str | None: ...
    @property
    def status(self) -> str: ...
    @property
    def turns(self) -> int: ...
    @property
    def actions(self) -> int: ...
    @property
    def cost(self) -> float | None: ...
    @property
    def tokens(self) -> int: ...
    @property
    def estimated(self) -> bool: ...
    @property
    def title(self) -> str: ...
    @property
    def snippet(self) -> Any: ...


def prompt_words(prompt: str, *, script: bool = False) -> str:
    """``prompt`` on one line. For a script cell (the cell is the model's reply, in
    the protocol) its text without the tags: what the thought, the response and any text
    say, in order; the action names when it says nothing else."""
    if not script:
        return " ".join(prompt.split())
    first_turn = _SCRIPT_MARKER.split(prompt, maxsplit=1)[0]
    rest = _SCRIPT_MARKER.sub(" ", prompt[len(first_turn) :])
    names: list[str] = []
    for text in (first_turn, rest):  # the first turn's words, else the later turns'
        words: list[str] = []
        parser = Parser(dialect="auto")  # a script may be written in any dialect
        for event in [*parser.feed(text), *parser.close()]:
            if event.kind in ("thought", "response", "text"):
                words.append(str(getattr(event, "text", "")))
            elif event.kind in ("thought_end", "response_end"):
                words.append(" ")
            elif event.kind == "action":
                names.append(str(event.action.name))  # type: ignore[union-attr]
        said = " ".join("".join(words).split())
        if said:
            return said
    if names:
        return f"actions: {', '.join(names)}"
    # Nothing the parser could read (an action cut short, say): what is left of the text
    # without anything that looks like a tag, never the protocol itself.
    return " ".join(_TAG_LIKE.sub(" ", prompt).split()) or "(no text)"


# ---- %cortex runs ---------------------------------------------------------------------

_HEADINGS = ("id", "when", "model", "status", "turns", "actions", "tokens", "cost", "prompt")


def _cells(row: Row) -> tuple[str, ...]:
    cost = "unknown" if row.cost is None else f"${row.cost:.4g}"
    tokens = ("~" if row.estimated else "") + fmt_count(row.tokens)
    return (
        row.id, row.started.strftime("%Y-%m-%d %H:%M"), row.model or "", row.status,
        str(row.turns), str(row.actions), tokens, cost,
    )  # fmt: skip


def more_line(shown: int, more: int, query: str | None) -> str:
    """The line under the table: how many more runs there are and how to see them."""
    if more <= 0:
        return ""
    what = f"runs {query} " if query else "runs "
    return (
        f"{more:,} more {'run matches' if more == 1 else 'runs match'}"
        if query
        else f"{more:,} older {'run' if more == 1 else 'runs'}"
    ) + f": %cortex {what}--limit {shown + more} shows {'it' if more == 1 else 'them'}."


def runs_text(rows: Sequence[Row], *, query: str | None = None, more: int = 0) -> str:
    """The runs as a plain-text table, one line a run (the prompt cut to fit), and under
    a search's row the snippet where its words were found (``[word]`` marks them)."""
    if not rows:
        return "no stored runs match." if query else "no runs are stored yet."
    table = [_HEADINGS[:-1], *(_cells(row) for row in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(_HEADINGS) - 1)]
    lines = []
    for at, line in enumerate(table):
        first = "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True))
        row = rows[at - 1] if at else None
        title = "prompt" if row is None else shorten(row.title, PROMPT_CHARS)
        lines.append(f"{first}  {title}".rstrip())
        snippet = None if row is None else row.snippet
        if snippet is not None:
            lines.append(" " * (widths[0] + 2) + f"{snippet.field}: {shorten(str(snippet), 100)}")
    tail = more_line(len(rows), more, query)
    return "\n".join([*lines, *([secrets.redact(tail)] if tail else [])])


_TABLE = f"border-collapse:collapse;font-family:{FONT};font-size:12.5px;color:{FG_VAR};margin:2px 0"
_TH = (
    f"text-align:left;padding:3px 10px 3px 0;border-bottom:1px solid {BORDER_VAR};"
    f"color:{MUTED_VAR};font-weight:600;white-space:nowrap;"
)
_TD = "text-align:left;padding:3px 10px 3px 0;vertical-align:top;white-space:nowrap;"
_PROMPT_TD = (
    "text-align:left;padding:3px 0;vertical-align:top;max-width:46em;overflow:hidden;"
    "text-overflow:ellipsis;white-space:nowrap"
)
_ID = (
    f"font-family:{MONO};font-size:12px;padding:1px 6px;border:1px solid {BORDER_VAR};"
    "border-radius:4px;background:transparent;color:inherit;cursor:pointer"
)
_MARK = "background:#fff3b0;color:#1f2328;padding:0 1px;border-radius:2px"
_NUMERIC = {"turns", "actions", "tokens", "cost"}


def _marked(snippet: Any) -> str:
    """A snippet's pieces, escaped, the matched ones in ``<mark>``."""
    return "".join(
        f'<mark style="{_MARK}">{esc(text)}</mark>' if hit else esc(text)
        for text, hit in snippet.pieces
    )


def _snippet_html(snippet: Any) -> str:
    pieces = _marked(snippet)
    return (
        f'<div class="cortex-snippet" style="color:{MUTED_VAR};white-space:normal;'
        f'font-size:12px"><span style="font-style:italic">{esc(snippet.field)}:</span> '
        f"{pieces}</div>"
    )


def _row_html(row: Row, buttons: bool) -> str:
    cells = _cells(row)
    hint = f"%cortex open {row.id}"
    opener = (
        f'<button class="cortex-open" data-open="{esc(row.id)}" title="{esc("open: " + hint)}" '
        f'style="{_ID}">{esc(row.id)}</button>'
        if buttons
        else f'<code title="{esc(hint)}" style="font-family:{MONO}">{esc(row.id)}</code>'
    )
    tds = [f'<td style="{_TD}">{opener}</td>']
    for name, cell in zip(_HEADINGS[1:], cells[1:], strict=False):
        align = "text-align:right;" if name in _NUMERIC else ""
        tip = (
            ' title="estimated: ~4 characters a token"'
            if name == "tokens" and row.estimated
            else ""
        )
        tds.append(f'<td style="{_TD}{align}"{tip}>{esc(cell)}</td>')
    title = shorten(row.title, 400)
    snippet = row.snippet
    if snippet is not None and snippet.field == "prompt":  # the words found in the prompt
        shown, snippet = _marked(snippet), None
    else:
        shown = esc(title)
    under = "" if snippet is None else _snippet_html(snippet)
    tds.append(f'<td style="{_PROMPT_TD}" title="{esc(title)}">{shown}{under}</td>')
    return f'<tr data-run="{esc(row.id)}">{"".join(tds)}</tr>'


def runs_html(
    rows: Sequence[Row], *, query: str | None = None, more: int = 0, buttons: bool = False
) -> str:
    """The runs as an HTML table, one row a run, newest first. ``buttons``: each id is a
    button a ``runs_widget`` opens; else the id as text (``%cortex open ID`` in its tip)."""
    if not rows:
        said = "No stored runs match." if query else "No runs are stored yet."
        return f'<div class="{RUNS_CLASS}" style="font-family:{FONT}">{esc(said)}</div>'
    head = "".join(
        f'<th style="{_TH}{"text-align:right;" if h in _NUMERIC else ""}">{esc(h)}</th>'
        for h in _HEADINGS
    )
    body = "".join(_row_html(row, buttons) for row in rows)
    tail = more_line(len(rows), more, query)
    foot = (
        f'<div style="color:{MUTED_VAR};font-size:12px;margin-top:3px">'
        f"{esc(secrets.redact(tail))}</div>"
    )
    searched = (
        f'<div style="color:{MUTED_VAR};font-size:12px;margin-bottom:2px">runs matching '
        f"<b>{esc(secrets.redact(query))}</b>, newest first</div>"
        if query
        else ""
    )
    return (
        f'<div class="{RUNS_CLASS}" style="font-family:{FONT};overflow-x:auto">{searched}'
        f'<table style="{_TABLE}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody>'
        f"</table>{foot if tail else ''}</div>"
    )


# ---- %cortex tools ----------------------------------------------------------------------


@dataclass(frozen=True)
class ToolLine:
    """One registered tool as ``%cortex tools`` lists it."""

    name: str
    kind: str
    description: str
    parameters: str
    builtin: bool = False

    @property
    def summary(self) -> str:
        """The description's first paragraph, on one line, secrets redacted (an MCP
        server's description is its own text, and may quote a key it was given)."""
        first = secrets.redact(self.description).strip().split("\n\n", 1)[0]
        return " ".join(first.split())

    @property
    def shown_name(self) -> str:
        return shorten(self.name, PARAMETER_CHARS)

    @property
    def shown_parameters(self) -> str:
        """The parameters, bounded, secrets redacted before the cut (a default argument
        read from the environment is a key)."""
        return shorten(self.parameters, PARAMETER_CHARS)


def tools_text(lines: Sequence[ToolLine]) -> str:
    """The tools as text: one line each (name, kind, summary), its parameters under it;
    the built-ins last, under one heading."""
    own = [t for t in lines if not t.builtin]
    builtins = [t for t in lines if t.builtin]
    out: list[str] = []
    for title, group in (("", own), ("built in (cortex's own):", builtins)):
        if not group:
            continue
        if title:
            out.append(title)
        width = max(len(t.shown_name) for t in group)
        kinds = max(len(t.kind) for t in group)
        for t in group:
            name = t.shown_name.ljust(width)
            out.append(f"  {name}  {t.kind.ljust(kinds)}  {t.summary}".rstrip())
            out.append(f"  {' ' * width}  {' ' * kinds}  ({t.shown_parameters})")
    return "\n".join(out) if out else "No tools are registered."


def _tool_rows(group: Sequence[ToolLine]) -> str:
    rows = []
    for t in group:
        summary = render_markdown(t.summary) if t.summary else ""
        summary = re.sub(r"^<p>(.*)</p>\s*$", r"\1", summary.strip(), flags=re.S)
        rows.append(
            f'<tr><td style="{_TD}"><code style="font-family:{MONO}">'
            f"{esc(t.shown_name)}</code></td>"
            f'<td style="{_TD}color:{MUTED_VAR}">{esc(t.kind)}</td>'
            f'<td style="{_TD}white-space:normal">{summary}</td>'
            f'<td style="{_TD}white-space:normal"><code style="font-family:{MONO};'
            f'font-size:12px">{esc(t.shown_parameters)}</code></td></tr>'
        )
    return "".join(rows)


def tools_html(lines: Sequence[ToolLine]) -> str:
    """The tools as an HTML table (name, kind, the description's first line rendered as
    markdown, parameters); the built-ins folded under one ``<details>`` line."""
    own = [t for t in lines if not t.builtin]
    builtins = [t for t in lines if t.builtin]
    head = "".join(
        f'<th style="{_TH}">{h}</th>' for h in ("name", "kind", "description", "parameters")
    )

    def table(group: Sequence[ToolLine]) -> str:
        return (
            f'<table style="{_TABLE}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{_tool_rows(group)}</tbody></table>"
        )

    mine = (
        table(own)
        if own
        else (
            f'<div style="color:{MUTED_VAR}">No tools of yours yet: @cortex_jupyter.tool '
            "registers a function.</div>"
        )
    )
    folded = (
        f'<details style="margin-top:6px"><summary style="cursor:pointer;color:{MUTED_VAR}">'
        f"{len(builtins)} built in (cortex's own: {esc(_kinds(builtins))})</summary>"
        f"{table(builtins)}</details>"
        if builtins
        else ""
    )
    return f'<div class="{TOOLS_CLASS}" style="font-family:{FONT}">{mine}{folded}</div>'


def _kinds(group: Sequence[ToolLine]) -> str:
    counts: dict[str, int] = {}
    for t in group:
        counts[t.kind] = counts.get(t.kind, 0) + 1
    return ", ".join(f"{n} {kind}{'s' if n > 1 else ''}" for kind, n in counts.items())

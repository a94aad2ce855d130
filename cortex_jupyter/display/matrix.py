"""An experiment's matrix: cases as rows, agents as columns, each cell the pass fraction
over its repeats; a summary row per agent, the paired comparison, progress.

Three renderings of one ``matrix_data.Matrix``:

- ``matrix_html(m, filter)``: the static copy. A plain ``<table>`` with inline styles,
  no script, no ``<svg>`` (an untrusted notebook's sanitizer strips inline SVG, NOTES.md),
  every text escaped: case names and failure reasons are the user's and the model's text.
  Without its colours (GitHub drops style attributes) it still reads: marks are words.
- ``matrix_text(m)``: the same as a terminal table (``repr``, nbval, a diff).
- ``MatrixView``: the live widget for a running experiment. ``update(m)`` on every
  finished try, at most ``10`` redraws a second reach the front end (the last matrix is
  held and sent by the next update after the interval, or by ``flush()``); the filter
  buttons and a click on a cell (a repeat in it) come back as messages, and only a
  (case, agent, repeat) the current matrix holds is opened: a message is the front
  end's text, and any code on the page can send one. ``close()`` leaves the static copy.

Which cases a filter shows is decided in one place, ``shown_cases``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from cortex_jupyter.runtime.core.cost.prices import fmt_usd

from .clickable import ClickableHtml, clickable_esm
from .matrix_data import AgentSummary, Matrix, MatrixCell
from .matrix_try import TryView, try_view
from .static import STATIC_CLASS, SWITCH_CSS, VIEW_CLASS
from .theme import (
    BORDER_VAR,
    FG_VAR,
    FONT,
    MUTED_VAR,
    STATUS_STYLES,
    TEXT,
    clean,
    esc,
    fmt_count,
    redact_markup,
    shorten,
)

__all__ = [
    "FILTERS",
    "MatrixView",
    "TryView",
    "matrix_html",
    "matrix_text",
    "shown_cases",
    "try_view",
]

#: The filters, and what their buttons say.
FILTERS: dict[str, str] = {
    "all": "All",
    "failures": "Failures",
    "flaky": "Flaky",
    "different": "Different between agents",
}

FLAKY_MARK = "≈ flaky"
CHANGE_MARKS = {"improved": "▲ improved", "regressed": "▼ regressed"}
_REASON_CHARS = 80
_DASH = "\u2013"  # an en dash: 53\u201389%
_CASE_CHARS = 60
# The statuses' Okabe-Ito fills: all passed (done), some (awaiting), none (failed),
# nothing finished yet (pending).
_FILL_ALL = STATUS_STYLES["done"].fill
_FILL_SOME = STATUS_STYLES["awaiting"].fill
_FILL_NONE = STATUS_STYLES["failed"].fill
_FILL_NOTHING = STATUS_STYLES["pending"].fill
_INK = TEXT
_CHANGE_INK = {"improved": STATUS_STYLES["done"].ink, "regressed": STATUS_STYLES["failed"].ink}


# ---- which cases show ------------------------------------------------------------------


def _cells(m: Matrix, case: str) -> list[MatrixCell]:
    return [m.cells[(case, agent)] for agent in m.agents if (case, agent) in m.cells]


def _case_shown(m: Matrix, case: str, filter: str) -> bool:
    cells = [cell for cell in _cells(m, case) if cell.total > 0]
    if filter == "failures":  # a failed try in one of its cells
        return any(cell.passed < cell.total for cell in cells)
    if filter == "flaky":
        return any(cell.flaky for cell in cells)
    if filter == "different":  # the agents' pass fractions are not all the same
        return len({cell.passed / cell.total for cell in cells}) > 1
    return True


def shown_cases(m: Matrix, filter: str = "all") -> tuple[str, ...]:
    """The cases ``filter`` shows, in the matrix's order: ``all``; ``failures`` (a cell
    with a failed try); ``flaky`` (a cell whose repeats disagree); ``different`` (the
    agents' finished cells do not pass the same fraction of tries). Cells with no
    finished try count for none of them. ``ValueError`` names an unknown filter."""
    if filter not in FILTERS:
        raise ValueError(f"no filter {filter!r:.40}; the filters are {', '.join(FILTERS)}")
    return tuple(case for case in m.cases if _case_shown(m, case, filter))


def filter_counts(m: Matrix) -> dict[str, int]:
    """How many cases each filter shows (the buttons say it)."""
    return {name: len(shown_cases(m, name)) for name in FILTERS}


# ---- figures as words ------------------------------------------------------------------


def _percent(value: float) -> str:
    return f"{100 * value:.0f}%"


def _seconds(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.2f} s" if value < 10 else f"{value:.1f} s"


def _cost(value: float | None) -> str:
    return "cost unknown" if value is None else fmt_usd(value)


def cell_figures(cell: MatrixCell) -> str:
    """``$0.0012 · 1.2k tok · 0.84 s`` (median time)."""
    parts = []
    if cell.cost is not None:
        parts.append(fmt_usd(cell.cost))
    if cell.tokens:
        parts.append(f"{fmt_count(cell.tokens)} tok")
    if cell.seconds is not None:
        parts.append(_seconds(cell.seconds))
    return " · ".join(parts)


def summary_words(s: AgentSummary) -> str:
    """``75% (53-89%) of 20 · $0.12 · p50 1.20 s · p95 3.40 s``."""
    if s.total == 0:
        rate = "no try finished"
    else:
        rate = f"{_percent(s.rate)} ({100 * s.low:.0f}{_DASH}{_percent(s.high)}) of {s.total}"
    words = [rate, _cost(s.cost), f"p50 {_seconds(s.p50)}", f"p95 {_seconds(s.p95)}"]
    if s.unfinished:
        words.append(f"{s.unfinished} unfinished")
    return " · ".join(words)


def _fraction(cell: MatrixCell | None) -> str:
    if cell is None or (cell.total == 0 and not cell.tries):
        return "…"
    return f"{cell.passed}/{cell.total}"


def _fill(cell: MatrixCell | None) -> str:
    if cell is None or cell.total == 0:
        return _FILL_NOTHING
    if cell.passed == cell.total:
        return _FILL_ALL
    return _FILL_SOME if cell.passed else _FILL_NONE


def _progress(m: Matrix) -> str:
    return f"{m.done}/{m.total} tries done"


# ---- the static table -----------------------------------------------------------------

_SMALL = f"font-size:11px;color:{MUTED_VAR}"
_TD = f"padding:4px 8px;border:1px solid {BORDER_VAR};vertical-align:top;text-align:left"


def _marks(cell: MatrixCell) -> str:
    out = []
    if cell.flaky:
        out.append(
            f' <span class="cortex-flaky" title="the repeats disagree" '
            f'style="font-size:11px;color:#5e5500">{FLAKY_MARK}</span>'
        )
    if cell.change in CHANGE_MARKS:
        out.append(
            f' <span class="cortex-{cell.change}" style="font-size:11px;'
            f'color:{_CHANGE_INK[cell.change]}">{CHANGE_MARKS[cell.change]}</span>'
        )
    return "".join(out)


def _repeat_buttons(cell: MatrixCell) -> str:
    """The live view's buttons: the whole fraction opens the one try; with repeats, one
    small button per repeat."""
    data = f'data-case="{esc(cell.case)}" data-agent="{esc(cell.agent)}"'
    style = (
        "font:inherit;font-size:11px;padding:0 4px;margin:1px 2px 0 0;cursor:pointer;"
        f"border:1px solid {BORDER_VAR};border-radius:3px;background:#ffffff;color:{_INK}"
    )
    return "".join(
        f'<button class="cortex-try" {data} data-repeat="{repeat}" style="{style}" '
        f'title="open this try">#{repeat + 1}</button>'
        for repeat, _run_id in cell.tries
    )


def cell_html(cell: MatrixCell | None, live: bool = False) -> str:
    """One cell: the fraction and its marks, the figures, the first failure's reason
    (all of the reasons in its ``title``)."""
    style = f"{_TD};background:{_fill(cell)};color:{_INK}"
    if cell is None:
        return f'<td style="{style}">…</td>'
    parts = [
        f'<div style="font-weight:600;white-space:nowrap">{_fraction(cell)}{_marks(cell)}</div>'
    ]
    figures = cell_figures(cell)
    if figures:
        parts.append(f'<div style="font-size:11px;color:#4d4d4d">{esc(figures)}</div>')
    title = ""
    if cell.reasons:
        first = shorten(cell.reasons[0], _REASON_CHARS)
        more = f" (+{len(cell.reasons) - 1})" if len(cell.reasons) > 1 else ""
        parts.append(f'<div class="cortex-reason" style="font-size:11px;color:#a84a00">'
                     f"{esc(first)}{more}</div>")  # fmt: skip
        title = f' title="{esc(shorten(" | ".join(cell.reasons), 600))}"'
    if live and cell.tries:
        parts.append(f"<div>{_repeat_buttons(cell)}</div>")
    return f'<td class="cortex-cell"{title} style="{style}">{"".join(parts)}</td>'


def _summary_row(m: Matrix) -> str:
    by_agent = {s.agent: s for s in m.summaries}
    cells = []
    for agent in m.agents:
        s = by_agent.get(agent)
        text = summary_words(s) if s is not None else "—"
        cells.append(f'<td style="{_TD};{_SMALL};font-weight:600">{esc(text)}</td>')
    return f'<tr class="cortex-summary"><th style="{_TD}">summary</th>{"".join(cells)}</tr>'


def _filter_bar(m: Matrix, filter: str) -> str:
    counts = filter_counts(m)
    buttons = []
    for name, label in FILTERS.items():
        pressed = "true" if name == filter else "false"
        weight = "700" if name == filter else "400"
        buttons.append(
            f'<button class="cortex-filter" data-filter="{name}" aria-pressed="{pressed}" '
            f'style="font:inherit;font-size:12px;font-weight:{weight};margin:0 4px 4px 0;'
            f"padding:1px 8px;cursor:pointer;border:1px solid {BORDER_VAR};border-radius:4px;"
            f'background:#ffffff;color:{_INK}">{label} ({counts[name]})</button>'
        )
    return f'<div class="cortex-filters">{"".join(buttons)}</div>'


def matrix_html(m: Matrix, filter: str = "all", *, live: bool = False) -> str:
    """The matrix as HTML (see the module docstring); ``filter`` picks the rows
    (``shown_cases``). ``live`` adds the widget's buttons (filters, one per try)."""
    cases = shown_cases(m, filter)
    head = "".join(f'<th style="{_TD}">{esc(agent)}</th>' for agent in m.agents)
    rows = []
    for case in cases:
        cells = "".join(cell_html(m.cells.get((case, agent)), live) for agent in m.agents)
        name = esc(shorten(case, _CASE_CHARS))
        rows.append(
            f'<tr><th scope="row" title="{esc(case)}" style="{_TD};font-weight:500">'
            f"{name}</th>{cells}</tr>"
        )
    hidden = len(m.cases) - len(cases)
    lines = [f"{esc(_progress(m))}"]
    if filter != "all":
        lines.append(
            f"showing {esc(FILTERS[filter].lower())}: {len(cases)} of {len(m.cases)} cases"
        )
    if m.paired:
        lines.append(esc(m.paired))
    if m.note:
        lines.append(esc(m.note))
    foot = "".join(f'<div style="{_SMALL}" class="cortex-paired">{line}</div>' for line in lines)
    title = f'<div style="font-weight:600;margin:2px 0 4px">{esc(m.title)}</div>' if m.title else ""
    empty = ""
    if not cases:
        empty = f'<div style="{_SMALL};margin:4px 0">no case to show ({hidden} hidden)</div>'
    table = (
        f'<table class="cortex-matrix" style="border-collapse:collapse;font-size:12.5px;'
        f'margin:2px 0 4px"><thead><tr><th style="{_TD}">case</th>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}{_summary_row(m)}</tbody></table>"
    )
    bar = _filter_bar(m, filter) if live else ""
    return redact_markup(
        f'<div class="cortex-experiment" style="font-family:{esc(FONT)};color:{FG_VAR};'
        f'overflow-x:auto">{title}{bar}{table}{empty}{foot}</div>'
    )


def saved_bundle(m: Matrix, filter: str = "all") -> tuple[dict[str, Any], dict[str, Any]]:
    """The static copy as an output: ``(data, metadata)`` with text/html (``SWITCH_CSS``
    hides it while the live matrix shows in the same cell) and text/plain."""
    body = matrix_html(m, filter)
    return (
        {
            "text/html": f'<style>{SWITCH_CSS}</style><div class="{STATIC_CLASS}">{body}</div>',
            "text/plain": matrix_text(m),
        },
        {},
    )


# ---- the terminal table ---------------------------------------------------------------


def _text_cell(cell: MatrixCell | None) -> str:
    if cell is None:
        return "…"
    words = [_fraction(cell)]
    if cell.flaky:
        words.append("≈")
    if cell.change == "improved":
        words.append("▲")
    elif cell.change == "regressed":
        words.append("▼")
    return " ".join(words)


def matrix_text(m: Matrix, filter: str = "all") -> str:
    """The matrix as a plain-text table; marks: ``≈`` repeats disagree, ``▲`` improved,
    ``▼`` regressed. Each agent's summary and the first failure reasons follow."""
    cases = shown_cases(m, filter)
    names = [" ".join(shorten(case, _CASE_CHARS).split()) for case in cases]
    rows = [["case", *m.agents]]
    rows += [[name, *(_text_cell(m.cells.get((case, a))) for a in m.agents)]
             for name, case in zip(names, cases, strict=True)]  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [m.title] if m.title else []
    for i, row in enumerate(rows):
        lines.append(
            "  ".join(text.ljust(width) for text, width in zip(row, widths, strict=True)).rstrip()
        )
        if i == 0:
            lines.append("  ".join("-" * width for width in widths))
    for s in m.summaries:
        lines.append(f"{s.agent}: {summary_words(s)}")
    if m.paired:
        lines.append(m.paired)
    lines.append(_progress(m))
    failures = [(case, cell) for case in cases for cell in _cells(m, case) if cell.reasons]
    for case, cell in failures[:10]:
        reason = shorten(cell.reasons[0], _REASON_CHARS)
        lines.append(f"  ✗ {shorten(case, 40)} / {cell.agent}: {reason}")
    if m.note:
        lines.append(m.note)
    return "\n".join(lines)


# ---- the live widget ------------------------------------------------------------------

_ESM = clickable_esm("""
    if (target.dataset.filter !== undefined) {
      model.send({ filter: target.dataset.filter });
    } else if (target.dataset.repeat !== undefined) {
      el.querySelectorAll("button.cortex-try").forEach((b) => b.removeAttribute("aria-pressed"));
      target.setAttribute("aria-pressed", "true");
      model.send({ open: { case: target.dataset.case, agent: target.dataset.agent,
                           repeat: Number(target.dataset.repeat) } });
    }
""")


def _as_page(text: str) -> str:
    """``text`` as a page's script reads it back from an escaped attribute."""
    return clean(text).replace("\r\n", "\n").replace("\r", "\n")


class MatrixWidget(ClickableHtml):
    """The front end of ``MatrixView``: ``value`` is the matrix's HTML with its buttons;
    clicks come back as ``{"filter": NAME}`` and ``{"open": {case, agent, repeat}}``."""

    _esm = _ESM


#: At most this many redraws a second reach the front end.
UPDATES_PER_SECOND = 10


class MatrixView:
    """The live matrix of a running experiment (see the module docstring).

    ``on_open(case, agent, repeat, run_id)`` is called for a clicked try; ``clock``
    (seconds, ``time.monotonic``) decides when an update is sent. Display it
    (``_repr_mimebundle_``); the runner calls ``update(m)`` on every finished try and
    ``flush()`` at the end; ``close()`` closes the widget and returns the static copy
    ``(data, metadata)`` to show under it, as a finished run's view does.
    """

    def __init__(
        self,
        on_open: Callable[[str, str, int, str | None], None],
        *,
        clock: Callable[[], float] = time.monotonic,
        matrix: Matrix | None = None,
    ) -> None:
        self._on_open = on_open
        self._clock = clock
        self._interval = 1.0 / UPDATES_PER_SECOND
        self.filter = "all"
        self.matrix = matrix or Matrix("", (), (), {}, (), None, 0, 0)
        self._sent_at: float | None = None
        self._pending = False
        self.closed = False
        self.widget = MatrixWidget(
            value=self._html(), _dom_classes=(VIEW_CLASS, "cortex-matrix-view")
        )
        self.widget.on_msg(self._message)

    def _html(self) -> str:
        return matrix_html(self.matrix, self.filter, live=True)

    def _send(self) -> None:
        self._pending = False
        self._sent_at = self._clock()
        if not self.closed:
            self.widget.value = self._html()

    def update(self, m: Matrix) -> None:
        """Show ``m``: now, unless the last redraw was under a tenth of a second ago
        (then it is held, and sent by a later ``update`` or by ``flush``)."""
        self.matrix = m
        self._pending = True
        if self._sent_at is None or self._clock() - self._sent_at >= self._interval:
            self._send()

    def flush(self) -> None:
        """Send the matrix ``update`` held back, if any."""
        if self._pending:
            self._send()

    def set_filter(self, name: str) -> None:
        """Show only the cases of filter ``name`` (``shown_cases``)."""
        if name not in FILTERS:
            raise ValueError(f"no filter {name!r:.40}; the filters are {', '.join(FILTERS)}")
        self.filter = name
        self._send()

    def _try(self, case: Any, agent: Any, repeat: Any) -> tuple[str, str, int, str | None] | None:
        """The try the matrix holds at (case, agent, repeat), as (its case, its agent,
        repeat, run id), or None."""
        if not (isinstance(case, str) and isinstance(agent, str)):
            return None
        if isinstance(repeat, bool) or not isinstance(repeat, int):
            return None
        cell = self.matrix.cells.get((case, agent))
        if cell is None:
            cell = self._as_sent(case, agent)
        if cell is None:
            return None
        found = next((t for t in cell.tries if t[0] == repeat), None)
        return None if found is None else (cell.case, cell.agent, found[0], found[1])

    def _as_sent(self, case: str, agent: str) -> MatrixCell | None:
        """The one cell whose names read ``case`` and ``agent`` once in the page: a
        button's ``data-case`` holds its name without the characters HTML cannot carry
        (``clean``: a control character becomes U+FFFD) and the page's parser makes
        ``\r`` a ``\n``, so a case named so came back as another text and opened nothing."""
        found = [
            c for (c_case, c_agent), c in self.matrix.cells.items()
            if (_as_page(c_case), _as_page(c_agent)) == (case, agent)
        ]  # fmt: skip
        return found[0] if len(found) == 1 else None

    def _message(self, _widget: Any, content: Any, _buffers: Any) -> None:
        if not isinstance(content, dict):
            return
        name = content.get("filter")
        if isinstance(name, str) and name in FILTERS:
            self.set_filter(name)
            return
        wanted = content.get("open")
        if not isinstance(wanted, dict):
            return
        found = self._try(wanted.get("case"), wanted.get("agent"), wanted.get("repeat"))
        if found is not None:
            self._on_open(*found)

    def saved_bundle(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The static copy of the latest matrix, as an output ``(data, metadata)``."""
        return saved_bundle(self.matrix, self.filter)

    def close(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """Send what is held, close the widget, and return the static copy."""
        if not self.closed:
            self.flush()
            self.closed = True
            self.widget.close()
        return self.saved_bundle()

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        if self.closed:
            return self.saved_bundle()[0]
        bundle: Any = self.widget._repr_mimebundle_() or {}
        data: dict[str, Any] = dict(bundle[0] if isinstance(bundle, tuple) else bundle)
        data["text/plain"] = matrix_text(self.matrix, self.filter)
        return data

    def __repr__(self) -> str:
        return matrix_text(self.matrix, self.filter)


class MatrixPanel:
    """A running experiment's matrix with the opened try under it: ``open_try(case, agent,
    repeat, run_id)`` makes what a click shows (a ``TryView``), and it replaces the last one.
    ``box`` is what to display; ``view`` the ``MatrixView`` to update."""

    def __init__(
        self,
        open_try: Callable[[str, str, int, str | None], Any],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        import ipywidgets

        self._open_try = open_try
        self.output = ipywidgets.Output()
        self.view = MatrixView(self._open, clock=clock)
        self.box = ipywidgets.VBox([self.view.widget, self.output])

    def _open(self, case: str, agent: str, repeat: int, run_id: str | None) -> None:
        shown = self._open_try(case, agent, repeat, run_id)
        self.output.clear_output()
        if shown is not None:
            self.output.append_display_data(shown)

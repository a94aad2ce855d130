"""The live box of a ``%%cortex --compare`` cell: one ``WidgetView`` a column, each under
its header, in one flex box that wraps (``display.compare`` says how it is laid out), and
a bar with the diff toggle (``display.compare_diff``).

A column's view is the single run's own (its graph, thought, answer, approvals, Stop);
this module only places the views and redraws the headers when their words change (a
header is one small widget: each change is one message). A ``--repeat`` column's next
run gets a fresh view in the same place (``replace``), and under it the answers of its
runs that finished, counted as they finish (``repeats``).

The buttons come back as messages, handled in the kernel as ``MatrixView``'s are: the
toggle sends ``{"view": "diff"}`` or ``{"view": "columns"}``, a column header's keep
button ``{"keep": NAME}``. A message is the front end's text and any code on the page can
send one: only a known view, and only the name of the header's own column, do anything.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import ipywidgets

from .clickable import ClickableHtml, clickable_esm
from .compare import MIN_COLUMN, ColumnFacts, column_header_html
from .theme import BORDER_VAR, esc, redact_markup
from .widget import WidgetView

#: The views the toggle switches between, and what its button says to go to each.
VIEWS = {"columns": "Side by side", "diff": "Diff"}

_ESM = clickable_esm("""
    if (target.dataset.view !== undefined) {
      model.send({ view: target.dataset.view });
    } else if (target.dataset.keep !== undefined) {
      model.send({ keep: target.dataset.keep });
    }
""")

_BUTTON = (
    "font:inherit;font-size:11.5px;padding:0 6px;margin:0 0 0 6px;cursor:pointer;"
    f"border:1px solid {BORDER_VAR};border-radius:3px;background:#ffffff;color:#1f2328"
)


class ClickHTML(ClickableHtml):
    """HTML whose buttons come back as ``{"view": ...}`` or ``{"keep": ...}``."""

    _esm = _ESM


def toggle_html(view: str) -> str:
    """The bar: a button to the other view."""
    other = "columns" if view == "diff" else "diff"
    return (
        f'<div class="cortex-compare-bar"><button data-view="{other}" style="{_BUTTON}" '
        f'title="switch the view">{VIEWS[other]}</button></div>'
    )


def header_html(column: ColumnFacts, note: str = "") -> str:
    """A column's header with its keep button (and what the last keep said)."""
    said = f'<div style="font-size:11.5px">{esc(note)}</div>' if note else ""
    button = (
        f'<button data-keep="{esc(column.name)}" style="{_BUTTON}" title="add this column\'s '
        f'run to the dataset kept in the notebook name kept">keep</button>'
    )
    return redact_markup(
        f'<div style="display:flex;align-items:baseline">{column_header_html(column)}'
        f"{button}</div>{said}"
    )


class CompareBox:
    """The columns' views side by side; ``widget`` is the box to display.

    ``diff()`` makes the diff's HTML when the toggle shows it; ``keep(name)`` keeps a
    column and returns the line to show in its header (None: no keep button works)."""

    def __init__(
        self,
        views: Sequence[WidgetView],
        headers: Sequence[ColumnFacts],
        diff: Callable[[], str] | None = None,
        keep: Callable[[str], str] | None = None,
    ) -> None:
        self.views = list(views)
        self.view = "columns"
        self._diff, self._keep = diff, keep
        self._facts = list(headers)
        self._notes = ["" for _ in headers]
        self._headers = [ClickHTML(value=header_html(h)) for h in headers]
        for index, header in enumerate(self._headers):
            header.on_msg(self._keeper(index))
        self._shown = [h.value for h in self._headers]
        #: Under each column's view: its finished ``--repeat`` runs' answers, counted.
        self._repeats = [ipywidgets.HTML("") for _ in headers]
        self._columns = [
            ipywidgets.VBox(
                [header, view.widget, repeats],
                layout=ipywidgets.Layout(
                    flex=f"1 1 {MIN_COLUMN}px", min_width=f"{MIN_COLUMN}px", max_width="100%"
                ),
            )
            for header, view, repeats in zip(self._headers, self.views, self._repeats, strict=True)
        ]
        self.row = ipywidgets.Box(
            self._columns,
            layout=ipywidgets.Layout(
                display="flex", flex_flow="row wrap", align_items="flex-start", grid_gap="12px"
            ),
        )
        self.row.add_class("cortex-compare-row")
        self.bar = ClickHTML(value=toggle_html(self.view))
        self.bar.on_msg(self._message)
        self.diff_pane = ipywidgets.HTML("")
        self.widget = ipywidgets.VBox([self.bar, self.row])
        self.widget.add_class("cortex-compare")

    # ---- messages -----------------------------------------------------------------

    def _message(self, _widget: Any, content: Any, _buffers: Any) -> None:
        if isinstance(content, dict) and set(content) == {"view"}:
            wanted = content["view"]
            if isinstance(wanted, str) and wanted in VIEWS:
                self.show(wanted)

    def _keeper(self, index: int) -> Callable[[Any, Any, Any], None]:
        def message(_widget: Any, content: Any, _buffers: Any) -> None:
            name = self._facts[index].name
            if isinstance(content, dict) and set(content) == {"keep"} and content["keep"] == name:
                self.keep(index)

        return message

    def keep(self, index: int) -> None:
        """Keep column ``index`` (``keep``), and say what came of it in its header."""
        if self._keep is None:
            return
        self._notes[index] = self._keep(self._facts[index].name)
        self.header(index, self._facts[index])

    def show(self, view: str) -> None:
        """Show ``"columns"`` (side by side) or ``"diff"``."""
        if view not in VIEWS:
            raise ValueError(f"no view {view!r:.40}; the views are {', '.join(VIEWS)}")
        self.view = view
        self.bar.value = toggle_html(view)
        if view == "diff":
            self.redraw_diff()
            self.widget.children = (self.bar, self.diff_pane)
        else:
            self.widget.children = (self.bar, self.row)

    def redraw_diff(self) -> None:
        """Redraw the diff, if it shows."""
        if self.view == "diff" and self._diff is not None:
            html = self._diff()
            if html != self.diff_pane.value:
                self.diff_pane.value = html

    # ---- columns --------------------------------------------------------------------

    def header(self, index: int, column: ColumnFacts) -> None:
        """Redraw column ``index``'s header when its words changed."""
        self._facts[index] = column
        html = header_html(column, self._notes[index])
        if html != self._shown[index]:
            self._shown[index] = html
            self._headers[index].value = html

    def repeats(self, index: int, html: str) -> None:
        """Show ``html`` (``column_groups_html``) under column ``index``'s view, when it
        changed."""
        if html != self._repeats[index].value:
            self._repeats[index].value = html

    def replace(self, index: int, view: WidgetView) -> None:
        """Column ``index`` shows ``view`` from now on (its next ``--repeat`` run); the
        view it showed is closed."""
        old, self.views[index] = self.views[index], view
        self._columns[index].children = (self._headers[index], view.widget,
                                         self._repeats[index])  # fmt: skip
        old.close()

    def close(self) -> int:
        """Close every widget of the box and of its views; returns how many."""
        closed = sum(view.close() or 0 for view in self.views)
        for widget in [*self._headers, *self._repeats, *self._columns, self.row, self.bar,
                       self.diff_pane, self.widget]:  # fmt: skip
            if widget.comm is not None:
                closed += 1
            widget.close()
        return closed

    def bundle(self) -> dict[str, Any]:
        """The box's widget reference (its ``_repr_mimebundle_``)."""
        return dict(self.widget._repr_mimebundle_() or {})

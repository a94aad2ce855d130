"""The live box of a ``%%cortex --compare`` cell: one ``WidgetView`` a column, each under
its header, in one flex box that wraps (``display.compare`` says how it is laid out).

A column's view is the single run's own (its graph, thought, answer, approvals, Stop);
this module only places the views and redraws the headers when their words change (a
header is one HTML widget: each change is one message). A ``--repeat`` column's next
run gets a fresh view in the same place (``replace``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ipywidgets

from .compare import MIN_COLUMN, ColumnFacts, column_header_html
from .widget import WidgetView


class CompareBox:
    """The columns' views side by side; ``widget`` is the box to display."""

    def __init__(self, views: Sequence[WidgetView], headers: Sequence[ColumnFacts]) -> None:
        self.views = list(views)
        self._headers = [ipywidgets.HTML(column_header_html(h)) for h in headers]
        self._shown = [h.value for h in self._headers]
        self._columns = [
            ipywidgets.VBox(
                [header, view.widget],
                layout=ipywidgets.Layout(
                    flex=f"1 1 {MIN_COLUMN}px", min_width=f"{MIN_COLUMN}px", max_width="100%"
                ),
            )
            for header, view in zip(self._headers, self.views, strict=True)
        ]
        self.widget = ipywidgets.Box(
            self._columns,
            layout=ipywidgets.Layout(
                display="flex", flex_flow="row wrap", align_items="flex-start", grid_gap="12px"
            ),
        )
        self.widget.add_class("cortex-compare")

    def header(self, index: int, column: ColumnFacts) -> None:
        """Redraw column ``index``'s header when its words changed."""
        html = column_header_html(column)
        if html != self._shown[index]:
            self._shown[index] = html
            self._headers[index].value = html

    def replace(self, index: int, view: WidgetView) -> None:
        """Column ``index`` shows ``view`` from now on (its next ``--repeat`` run); the
        view it showed is closed."""
        old, self.views[index] = self.views[index], view
        self._columns[index].children = (self._headers[index], view.widget)
        old.close()

    def close(self) -> None:
        """Close every widget of the box and of its views."""
        for view in self.views:
            view.close()
        for widget in [*self._headers, *self._columns, self.widget]:
            widget.close()

    def bundle(self) -> dict[str, Any]:
        """The box's widget reference (its ``_repr_mimebundle_``)."""
        return dict(self.widget._repr_mimebundle_() or {})

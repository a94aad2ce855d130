"""``%cortex runs`` as a live table: each run's id is a button that opens its view in
place, under the table (``%cortex open ID``'s view; ``_cortex`` becomes that run).

An ``anywidget`` whose ``value`` is ``listing.runs_html(..., buttons=True)``; its few
lines of front-end code send ``{"open": ID}`` back when a ``[data-open]`` button is
clicked, and the kernel shows the run in the ``ipywidgets.Output`` below the table.
A saved notebook (or one whose kernel is gone) shows the static copy instead
(``static.SWITCH_CSS`` hides whichever cannot show), where the ids read as text.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import ipywidgets

from .clickable import ClickableHtml, clickable_esm
from .static import VIEW_CLASS

_ESM = clickable_esm(
    """
    el.querySelectorAll("[data-open]").forEach((b) => b.removeAttribute("aria-pressed"));
    target.setAttribute("aria-pressed", "true");
    model.send({ open: target.dataset.open });
""",
    selector="[data-open]",
)


class RunsTable(ClickableHtml):
    """The table; ``on_open(id)`` is called with the id of a clicked run, one of the
    ``ids`` it lists: a message naming anything else (another run, an id's first letters
    that ``%cortex open`` would complete) opens nothing."""

    _esm = _ESM

    def __init__(
        self, html: str, on_open: Callable[[str], None], ids: Iterable[str], **kwargs: Any
    ) -> None:
        super().__init__(value=html, _dom_classes=("cortex-runs-table",), **kwargs)
        self._on_open = on_open
        self._ids = frozenset(ids)
        self.on_msg(self._message)

    def _message(self, _widget: Any, content: Any, _buffers: Any) -> None:
        run_id = content.get("open") if isinstance(content, dict) else None
        if isinstance(run_id, str) and run_id in self._ids:
            self._on_open(run_id)


def runs_view(html: str, open_run: Callable[[str], None], ids: Iterable[str]) -> ipywidgets.VBox:
    """The table (of the runs ``ids``) and, under it, where a clicked run's view shows
    (one at a time)."""
    shown = ipywidgets.Output()

    def on_open(run_id: str) -> None:
        shown.clear_output()
        with shown:
            open_run(run_id)

    box = ipywidgets.VBox([RunsTable(html, on_open, ids), shown])
    box.add_class(VIEW_CLASS)
    box.add_class("cortex-runs-view")
    return box

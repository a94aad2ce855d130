"""What a person can press in a live view: its Stop button and the approval rows.

Apart from ``widget.py`` because it is the one part of the view that talks back to the
run (``decide``, ``stop``) and answers clicks at any time, during the run or after it;
the rest of the view only draws. The rules it keeps:

- A row per action waiting for approval: its parameters, Approve, Deny. A click calls
  ``decide(node_id, approved)``; a row whose node no longer waits, or whose run has
  ended, answers nothing (its buttons are disabled, a stale click is ignored).
- Stop calls ``stop()`` (the session makes it the kernel's interrupt) and leaves the
  view when the run ends.
- Every widget costs messages (``widget.py``'s budget): what is made while drawing is
  returned as a count or ``charge``d; what a click sends is ``count``ed (a person's
  click is worth a message or two over the budget). Widgets that left the page are
  closed later, when the budget allows (``close_stale``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ipywidgets
from ipywidgets.widgets.widget_string import HTMLStyle

from cortex_jupyter.runtime.core.trust import secrets

from .inspector import waiting_html
from .pieces import set_traits
from .state import ViewState
from .theme import redact_markup

#: What one approval row costs: its box, its text and two buttons.
ROW_COST = 4


class Controls:
    """The Stop button (with ``stop``) and the approval rows of one view (``decide``).

    ``top`` is what heads the view: the ``header`` alone, or the header and Stop in a
    row. ``state`` is the view's state, read when drawing and when a click comes.
    """

    def __init__(
        self,
        state: ViewState,
        header: ipywidgets.HTML,
        *,
        decide: Callable[[str, bool], object] | None,
        stop: Callable[[], None] | None,
        style: HTMLStyle,
        plain: ipywidgets.Layout,
        charge: Callable[[int], None],
        count: Callable[[int], None],
    ) -> None:
        self.state, self._header = state, header
        self._decide, self._stop = decide, stop  # what the buttons call
        self._style, self._plain = style, plain  # the view's shared style and layout
        self._charge, self._count = charge, count  # messages: drawing, and clicks
        self.rows: dict[str, ipywidgets.HBox] = {}
        self.box: ipywidgets.VBox | None = None
        self.cut = False  # the final frame came without the run's end: rows answer nothing
        self._rows_layout: ipywidgets.Layout | None = None
        self._button_style: ipywidgets.ButtonStyle | None = None
        self._button_layout: ipywidgets.Layout | None = None
        self._stale: list[ipywidgets.Widget] = []  # left the page; closed when the budget allows
        self.top: ipywidgets.Widget = header
        self._top: ipywidgets.HBox | None = None
        self.stop_button: ipywidgets.Button | None = None
        if stop is not None:
            style_, layout = self._buttons(charged=False)  # paid with the view's creation
            self.stop_button = ipywidgets.Button(
                description="Stop",
                icon="stop",
                tooltip="Stop the run (as the kernel's interrupt does); what arrived is kept",
                layout=layout,
                style=style_,
                _dom_classes=("cortex-stop",),
            )
            self.stop_button.on_click(self._on_stop)
            self._top = ipywidgets.HBox(
                [header, self.stop_button],
                layout=ipywidgets.Layout(align_items="center", margin="0"),
                _dom_classes=("cortex-top",),
            )
            self.top = self._top

    # ---- approvals ----------------------------------------------------------------

    def awaiting(self) -> list[str]:
        """The actions waiting for approval, in the order they appeared."""
        return [i for i in self.state.order if self.state.nodes[i].status == "awaiting"]

    def behind(self) -> bool:
        """Whether an action waits for approval without its row yet."""
        return any(node_id not in self.rows for node_id in self.awaiting())

    def moved(self) -> bool:
        """Whether the rows shown differ from the actions waiting."""
        return list(self.rows) != self.awaiting() or self.behind()

    def draw(self, allowance: float) -> int:
        """One row per action waiting for approval (its parameters, Approve, Deny), as
        many new rows as the allowance pays for; rows of answered actions leave.
        Returns the messages that cost; a new ``box`` is the caller's to place."""
        want = self.awaiting()
        for node_id in [k for k in self.rows if k not in want]:
            self._stale.append(self.rows.pop(node_id))
        sent = 0
        room = allowance - 1 - (2 if self.box is None else 0)
        for node_id in want:
            # At least one new row a redraw, whatever the allowance: the run waits for it.
            if node_id not in self.rows and (room >= ROW_COST or not sent):
                self.rows[node_id] = self._row(node_id)
                sent += ROW_COST
                room -= ROW_COST
        children = tuple(self.rows[k] for k in want if k in self.rows)
        if self.box is None:
            if not children:
                return sent
            self.box = ipywidgets.VBox(
                children, layout=self._plain, _dom_classes=("cortex-approvals",)
            )
            return sent + 1
        return sent + set_traits(self.box, children=children)

    def settle(self) -> int:
        """The final frame: rows whose run has ended answer nothing. Returns messages."""
        sent = 0
        for node_id, row in self.rows.items():
            for button in row.children[1:]:
                sent += set_traits(button, disabled=not self._answerable(node_id))
        return sent

    def _row(self, node_id: str) -> ipywidgets.HBox:
        node = self.state.nodes[node_id]
        text = ipywidgets.HTML(
            value=redact_markup(waiting_html(node)),
            layout=self._plain,
            style=self._style,
            _dom_classes=("cortex-approval-text",),
        )
        buttons = []
        if self._decide is not None:
            style, layout = self._buttons()
            for label, icon, kind, approved in (
                ("Approve", "check", "success", True),
                ("Deny", "times", "danger", False),
            ):
                button = ipywidgets.Button(
                    description=label,
                    icon=icon,
                    button_style=kind,
                    disabled=not self._answerable(node_id),
                    layout=layout,
                    style=style,
                    _dom_classes=(f"cortex-{label.lower()}",),
                )
                button.on_click(lambda b, a=approved: self._answer(node_id, a, b))
                buttons.append(button)
        else:
            text.value += "<i>(no way to answer from this view)</i>"
        return ipywidgets.HBox(
            [text, *buttons], layout=self._row_layout(), _dom_classes=("cortex-approval",)
        )

    def _row_layout(self) -> ipywidgets.Layout:
        """The layout every approval row shares (made once)."""
        if self._rows_layout is None:
            self._rows_layout = ipywidgets.Layout(align_items="center", margin="2px 0")
            self._charge(1)
        return self._rows_layout

    def _buttons(self, charged: bool = True) -> tuple[ipywidgets.ButtonStyle, ipywidgets.Layout]:
        """The style and layout every button of the view shares (made once)."""
        if self._button_style is None or self._button_layout is None:
            self._button_style = ipywidgets.ButtonStyle()
            self._button_layout = ipywidgets.Layout(width="auto", height="24px", margin="0 0 0 8px")
            if charged:
                self._charge(2)
        return self._button_style, self._button_layout

    def _answer(self, node_id: str, approved: bool, button: ipywidgets.Button) -> None:
        """Approve or Deny clicked: the session's ``decide`` gets the node's id in this
        view (an agent's sub-run action: ``agent/inner``, as its question was asked).
        A stale click (the node no longer waits, or the view's run has ended) answers
        nothing."""
        row = self.rows.get(node_id)
        answered: object = False
        if self._answerable(node_id):
            try:
                assert self._decide is not None
                answered = self._decide(node_id, approved)
            except Exception as exc:
                answered = False
                button.tooltip = secrets.redact(f"could not answer: {exc!r}")
        word = ("Approved" if approved else "Denied") if answered is not False else "Not waiting"
        for child in row.children[1:] if row is not None else (button,):
            self._count(set_traits(child, disabled=True))
        self._count(set_traits(button, description=word))

    def _answerable(self, node_id: str) -> bool:
        """Whether a row may answer for ``node_id``: its node waits, and its run has not
        ended (a ``fire_and_forget`` action, which outlives its run by design, excepted;
        nothing, once the final frame came without the run's end: it failed)."""
        nodes = self.state.nodes
        node = nodes.get(node_id)
        if node is None or node.status != "awaiting" or self.cut:
            return False
        if self.state.end_status is None:
            return True
        while node.parent is not None and node.parent in nodes:
            node = nodes[node.parent]
        return node.mode == "fire_and_forget"

    # ---- stop ---------------------------------------------------------------------

    def _on_stop(self, _button: Any) -> None:
        """The view's Stop: the session's ``stop`` (the kernel's interrupt, in effect)."""
        if self.stop_button is not None:
            self._count(set_traits(self.stop_button, disabled=True, description="Stopping…"))
        if self._stop is not None:
            self._stop()

    def drop_stop(self) -> int:
        """The run ended: its Stop button leaves the view (one message; closing it waits
        with the other widgets that left)."""
        if self._top is None or self.stop_button is None:
            return 0
        self._stale.append(self.stop_button)
        self.stop_button = None
        self._top.children = (self._header,)
        return 1

    # ---- what left the page -------------------------------------------------------

    @property
    def stale(self) -> bool:
        """Whether widgets that left the page still wait to be closed."""
        return bool(self._stale)

    def close_stale(self, limit: int | None) -> int:
        """Close widgets that left the page (answered rows, Stop): a message each, and
        each row's own widgets."""
        sent = 0
        while self._stale and (limit is None or sent < limit):
            widget = self._stale.pop(0)
            for child in getattr(widget, "children", ()):
                child.close()
                sent += 1
            widget.close()
            sent += 1
        return sent

    def widgets(self) -> list[Any]:
        """Every widget the controls made and hold (for closing the view)."""
        return [
            *self._stale,
            *self.rows.values(),
            self.stop_button,
            self.box,
            self._rows_layout,
            self._button_style,
            self._button_layout,
        ]

    def close(self) -> None:
        """Let go of the widgets, the run's state and its callbacks (the view closed)."""
        self.rows, self._stale = {}, []
        self.box = self.stop_button = self._top = None
        self._decide = self._stop = None
        self.state = ViewState(model=self.state.model, started=self.state.started)

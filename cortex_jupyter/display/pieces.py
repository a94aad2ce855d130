"""Widgets that cost few messages: a message budget, growing text sent in pieces.

Apart from ``widget.py`` because these are the view's accounting, not its picture: they
know what ipywidgets sends (every trait change is one iopub message carrying the whole
value, NOTES.md "Streaming text into widgets") and nothing of a run. ``widget.py``
composes them into the live view: a ``Budget`` per view, a ``Pieces`` per growing text
(the thought, the response), ``set_traits`` for every update.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import ipywidgets
from ipywidgets.widgets.widget_string import (  # not re-exported at the top
    HTMLMathStyle,
    HTMLStyle,
)

from .theme import redact_markup

#: Characters of settled HTML the live tail may hold before they move into a piece.
FREEZE_CHARS = 1024
#: Shortest time between two freezes of one text: each costs three messages.
FREEZE_INTERVAL = 0.5


def widget_tree(roots: Sequence[Any]) -> list[ipywidgets.Widget]:
    """Every widget in ``roots`` and inside them (children, layouts, styles), once each."""
    found: dict[int, ipywidgets.Widget] = {}
    todo = [w for w in roots if isinstance(w, ipywidgets.Widget)]
    while todo:
        widget = todo.pop()
        if id(widget) in found:
            continue
        found[id(widget)] = widget
        inside = [*getattr(widget, "children", ())]
        inside += [getattr(widget, "layout", None), getattr(widget, "style", None)]
        todo += [w for w in inside if isinstance(w, ipywidgets.Widget)]
    return list(found.values())


class Pieces:
    """A growing HTML text shown as settled pieces, each sent once, plus a live tail.

    ``show(stable, rest, now, allowance)`` shows ``stable + rest``, where ``stable`` only
    grows. Settled HTML moves out of the tail in pieces of at least ``freeze_chars`` and
    at most every ``FREEZE_INTERVAL`` seconds, when the allowance covers it: a freeze
    costs three messages, re-sending the tail one.

    When ``stable`` does not start with what the pieces hold, the text was re-rendered
    (a ``$name`` got its value): the pieces that still match stay, the rest leave the box
    in the same message, and closing them waits for ``close_stale`` (a message each).
    """

    def __init__(
        self,
        style_css: str,
        classes: Sequence[str] = (),
        box_class: str | None = None,
        *,
        style: HTMLStyle | HTMLMathStyle,
        layout: ipywidgets.Layout,
        widget: Any = ipywidgets.HTML,
        freeze_chars: int = FREEZE_CHARS,
    ) -> None:
        self._freeze_chars = freeze_chars
        self._style = style_css
        self._classes = tuple(classes)
        # Shared by every piece, so a new piece is one comm message, not three.
        self._layout = layout
        self._html_style = style
        self._widget = widget
        self._tail = widget(layout=self._layout, style=self._html_style, _dom_classes=self._classes)
        self._pieces: list[ipywidgets.HTML] = []
        self._texts: list[str] = []  # what each piece holds, unwrapped
        self._frozen = ""
        self._frozen_at = -math.inf
        self._stale: list[ipywidgets.HTML] = []
        self.box = ipywidgets.VBox(
            [self._tail], layout=layout, _dom_classes=(box_class,) if box_class else ()
        )

    @property
    def pieces(self) -> int:
        """How many settled pieces are shown (the tail not counted)."""
        return len(self._pieces)

    def show(self, stable: str, rest: str, now: float, allowance: float = math.inf) -> int:
        """Show ``stable + rest``; returns the number of messages that cost."""
        sent = 0
        if not stable.startswith(self._frozen):
            sent += self._keep_matching(stable)
        settled = len(stable) - len(self._frozen)
        if (
            settled >= self._freeze_chars
            and now - self._frozen_at >= FREEZE_INTERVAL
            and allowance - sent >= 3
        ):
            # The tail becomes a piece; a new tail takes the rest. Children first: for a
            # moment the rest shows twice rather than not at all (no jump in the page).
            text = stable[len(self._frozen) :]
            piece, self._tail = self._tail, self._piece(self._wrap(rest))
            self._pieces.append(piece)
            self._texts.append(text)
            self.box.children = (*self._pieces, self._tail)
            sent += 2 + set_traits(piece, value=self._wrap(text))
            self._frozen, self._frozen_at = stable, now
            return sent
        return sent + set_traits(self._tail, value=self._wrap(stable[len(self._frozen) :] + rest))

    def widgets(self) -> list[ipywidgets.HTML]:
        """Every widget the text is made of: pieces, tail, and replaced pieces not closed."""
        return [*self._pieces, self._tail, *self._stale]

    @property
    def stale(self) -> int:
        """How many replaced pieces still wait to be closed."""
        return len(self._stale)

    def close_stale(self, limit: int | None) -> int:
        """Close up to ``limit`` (``None``: all) pieces a re-render replaced; returns
        how many (a comm_close message each)."""
        count = len(self._stale) if limit is None else min(limit, len(self._stale))
        for piece in self._stale[:count]:
            piece.close()
        del self._stale[:count]
        return count

    def _keep_matching(self, stable: str) -> int:
        """Keep the pieces ``stable`` still starts with; the others leave the box."""
        kept, at = 0, 0
        for text in self._texts:
            if not stable.startswith(text, at):
                break
            kept, at = kept + 1, at + len(text)
        self._stale += self._pieces[kept:]
        del self._pieces[kept:], self._texts[kept:]
        self._frozen = stable[:at]
        self.box.children = (*self._pieces, self._tail)
        return 1

    def _wrap(self, inner: str) -> str:
        return f'<div style="{self._style}">{inner}</div>' if inner else ""

    def _piece(self, value: str) -> ipywidgets.HTML:
        return self._widget(
            value=redact_markup(value),
            layout=self._layout,
            style=self._html_style,
            _dom_classes=self._classes,
        )


class Budget:
    """A token bucket: ``rate`` messages a second on average, ``burst`` at most at once.

    Spending may overdraw it (creating the view, the final frame); later redraws wait.
    """

    def __init__(self, rate: float, burst: float, now: float) -> None:
        self.rate, self.burst, self.tokens = rate, burst, burst
        self._at = now

    def refill(self, now: float) -> None:
        # Rounded: a clock's float steps must not leave 0.9999... where 1 was earned.
        gained = max(now - self._at, 0.0) * self.rate
        self.tokens = min(self.burst, round(self.tokens + gained, 6))
        self._at = max(now, self._at)

    def spend(self, messages: int) -> None:
        self.tokens -= messages


def set_traits(widget: ipywidgets.Widget, **traits: Any) -> int:
    """Set the traits that differ, in one message; returns how many messages (0 or 1).
    Texts are sent with secrets redacted."""
    traits = {k: redact_markup(v) if isinstance(v, str) else v for k, v in traits.items()}
    changes = {name: value for name, value in traits.items() if getattr(widget, name) != value}
    if not changes:
        return 0
    with widget.hold_sync():
        for name, value in changes.items():
            setattr(widget, name, value)
    return 1

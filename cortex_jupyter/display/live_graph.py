"""The live graph component: the action graph as a widget that sends only what changed.

An SVG inside an ``ipywidgets.HTML`` cannot be clicked back to the kernel, and every
update re-sends the whole picture (a 110-action run: 1.3 MB, one update of 95 KB). This
is an ``anywidget`` (a widget with its own front-end module and no build step) whose
``value`` trait carries a *patch*: a frame element (size, the kernel's clock) and the SVG
pieces (``svg.draw``) that changed since the last patch, by key; the front end
(``live_graph.js``) puts them in place, ticks running durations itself and sends clicks
back (``on_msg``: ``{"act": "select" | "toggle" | "close", "id": ...}``).

A front end that asks for the whole state (a page reloaded while the run goes on, a
second view of the output) gets the whole picture as one frame: ``get_state`` puts it
in place of the last patch.

The module text and the CSS are package data (``live_graph.js``, ``live_graph.css``). They
cross the wire once per kernel session, in one shared ``GraphCode`` widget; each graph's
own ``_esm`` is a small loader (``live_graph_loader.js``) that imports them from it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import resources
from typing import Any

import anywidget
import ipywidgets
import traitlets

from .theme import esc

#: Largest patch sent in one message (characters); what does not fit goes next time.
PATCH_LIMIT = 16_000


def _asset(name: str) -> str:
    return resources.files("cortex_jupyter.display").joinpath(name).read_text(encoding="utf-8")


def _strip_comments(code: str) -> str:
    """``code`` without its whole-line ``//`` comments (sent with every graph)."""
    return "".join(line for line in code.splitlines(True) if not line.lstrip().startswith("//"))


class GraphCode(ipywidgets.Widget):  # type: ignore[misc]
    """The graph component's front-end module and CSS, sent once per kernel session.

    A plain widget model (no view) that every ``LiveGraph`` names in its ``code`` trait;
    each graph's own module is a loader of a few hundred bytes that imports this code
    once per page. Like any live widget it is in the widget state a notebook saves and
    in what a reloaded page fetches from the kernel, so both still find the code.
    """

    code = traitlets.Unicode(_asset("live_graph.js")).tag(sync=True)
    css = traitlets.Unicode(_asset("live_graph.css")).tag(sync=True)


_shared: GraphCode | None = None


def graph_code() -> tuple[GraphCode, bool]:
    """The kernel's ``GraphCode``, and whether it was made now (one ``comm_open``)."""
    global _shared
    if _shared is not None and _shared.comm is not None:
        return _shared, False
    _shared = GraphCode()
    return _shared, True


class LiveGraph(anywidget.AnyWidget):
    """The graph widget (see the module docstring). ``full()`` returns the whole picture
    as a patch, for a front end that asks for the whole state. Its module is a loader;
    the real one is in ``code`` (``GraphCode``), sent once whatever the number of views."""

    _esm = _strip_comments(_asset("live_graph_loader.js"))
    value = traitlets.Unicode("").tag(sync=True)
    code = traitlets.Instance(GraphCode).tag(sync=True, **ipywidgets.widget_serialization)

    def __init__(self, full: Callable[[], str], **kwargs: Any) -> None:
        self._full = full
        kwargs.setdefault("code", graph_code()[0])
        super().__init__(**kwargs)

    def get_state(self, key: Any = None, drop_defaults: bool = False) -> dict[str, Any]:
        state: dict[str, Any] = super().get_state(key, drop_defaults)
        if key is None and "value" in state:  # the whole state: the whole picture
            state["value"] = self._full()
        return state


def frame(kind: str, width: int, height: int, now: float) -> str:
    """The element that opens a patch: ``full`` (replace everything) or ``patch``."""
    return (
        f'<g data-cxj-frame="{kind}" data-w="{width}" data-h="{height}" data-now="{now:.3f}"></g>'
    )


def patch(
    sent: dict[str, str],
    pieces: Mapping[str, str],
    head: str,
    limit: int = PATCH_LIMIT,
) -> tuple[str, bool]:
    """The patch that takes the front end from ``sent`` to ``pieces`` (``sent`` is
    updated to what it sends), and whether something had to wait for the next one
    (the patch holds at most about ``limit`` characters, ``head`` and one piece always).

    Empty when nothing changed.
    """
    gone = [key for key in sent if key not in pieces]
    changed = [key for key, piece in pieces.items() if sent.get(key) != piece]
    if not gone and not changed:
        return "", False
    out = [head]
    size = len(head)
    for key in gone:
        marker = f'<g data-key="{esc(key)}" data-gone=""></g>'
        out.append(marker)
        size += len(marker)
        del sent[key]
    waiting = False
    for key in changed:
        piece = pieces[key]
        if size + len(piece) > limit and len(out) > 1:
            waiting = True
            continue
        out.append(piece)
        size += len(piece)
        sent[key] = piece
    return "".join(out), waiting

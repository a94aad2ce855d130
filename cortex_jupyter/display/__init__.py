"""The display layer: run state in, what a person sees out. Renders; never drives a run.

Events (the parser's and the runtime's) are reduced into a ``ViewState``; pure renderers
turn it into HTML, SVG or text. The ipywidgets view (``widget``, with its graph component
``live_graph``, its buttons ``controls`` and its message accounting ``pieces``: the
modules here that import ipywidgets) redraws the parts whose
``ViewState.versions`` moved, at most ~25 times a second; everything exported below is
pure and imports no widget or IPython code. A typed run's answer (``--output T``) is
``typed``'s: the object filling in, parsed when drawn, as the inspector's tree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cortex_jupyter.runtime.core.values.answer import fill_references
from cortex_jupyter.runtime.core.values.answer import value_text as short_str

from .inspector import inspector_html
from .markdown import IncrementalMarkdown, render_markdown
from .nodes import NodeView
from .rich import rich_html, sanitize_html
from .state import PARTS, Segment, ViewState, from_run, reduce
from .static import (
    endpoint_host,
    header_html,
    response_html,
    run_metadata,
    static_html,
    static_text,
    thought_html,
)
from .svg import details_html, graph_svg, node_tooltip
from .text import TextRenderer, header_parts, render_text, status_line
from .timeline import timeline_svg

if TYPE_CHECKING:
    from .widget import WidgetView

__all__ = [
    "PARTS",
    "IncrementalMarkdown",
    "NodeView",
    "Segment",
    "TextRenderer",
    "ViewState",
    "WidgetView",
    "details_html",
    "endpoint_host",
    "fill_references",
    "from_run",
    "graph_svg",
    "header_html",
    "header_parts",
    "inspector_html",
    "node_tooltip",
    "reduce",
    "render_markdown",
    "render_text",
    "response_html",
    "rich_html",
    "run_metadata",
    "sanitize_html",
    "short_str",
    "static_html",
    "static_text",
    "status_line",
    "thought_html",
    "timeline_svg",
]


def __getattr__(name: str) -> Any:
    # WidgetView imports ipywidgets (and with it IPython, ~0.2 s): only when asked for.
    if name == "WidgetView":
        from .widget import WidgetView

        return WidgetView
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

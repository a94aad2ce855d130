"""The HTML pieces of a run's view, and the copy a finished run leaves for saved notebooks.

The live view draws ``header_html``, ``thought_html``, ``response_html`` plus
``svg.graph_svg`` and ``svg.details_html``; the saved copy is made of the same pieces, so
it looks like the last frame the user saw.

**Why a second output** (issue 12). A notebook is read in places with very different
rules (NOTES.md, "Saved notebooks" and "Measured in the second round"), and a Jupyter
mimebundle shows exactly one of its representations, chosen by each renderer alone:

- JupyterLab and Notebook 7 render the widget-view mimetype first whenever an output is
  *trusted*. A trusted notebook reopened without its kernel (the user's own notebook the
  next day: Lab signs what it saves) or after a kernel restart has no widget model, and
  ``@jupyter-widgets/jupyterlab-manager``'s renderer then writes "Error displaying
  widget: model not found" (or, after a restart, hides the output). It never falls back
  to another representation of the bundle, so a static copy *in the widget's own
  bundle* is never seen there.
- An *untrusted* output (a notebook run by nbclient/papermill, or received) gets only
  the "safe" renderers: text/html, sanitized (inline ``<svg>``, ``<style>`` and scripts
  removed; ``<img src="data:...">``, inline styles, ``<details>`` kept), markdown, PNG,
  plain text. ``image/svg+xml`` and the widget view are unsafe there.
- GitHub sanitizes like that too (no ``<style>``, no style attributes); nbviewer and
  ``nbconvert --to html`` keep the HTML as it is and skip a widget view whose state was
  not saved (nbconvert inlines ``image/svg+xml`` as ``<svg>``, which breaks pages);
  VS Code falls back to the next representation when the kernel has no such model.

So a finished run leaves **two outputs** (``saved_copy``):

1. The live view's own output, updated to ``{widget-view, text/plain: ""}`` with the
   run's record in its metadata (``{"cortex": run_metadata}``): while a kernel holds
   the model it is the live, clickable view; everywhere else it shows (almost) nothing.
2. A second output, the **static copy** (``saved_bundle``): text/html with the graph as
   ``<img src="data:image/svg+xml;base64,...">`` (a self-contained picture every
   sanitizer keeps), the actions and their details as text, the thought and the rendered
   response; text/plain with the same run as text.

The copy's HTML starts with a small ``<style>`` (``SWITCH_CSS``) that sanitizers strip
and the unsanitized renderers apply: it hides the copy while the live view shows in the
same cell (JupyterLab, Notebook 7, VS Code), and hides the widget output that could not
show its view, so a trusted notebook without its kernel reads the copy and no error
placeholder (xarray's HTML repr hides its text fallback with embedded CSS the same way).
What each renderer shows is listed in ``RENDERERS``; the JupyterLab and Notebook 7 rows
(untrusted; trusted without the model; trusted and run again) and nbconvert's are
checked in a real browser by tests/browser/test_saved_notebooks.py. The GitHub, nbviewer
and VS Code rows follow from their documented behaviour, not from a test.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from cortex_jupyter.runtime.core.trust.bounded import bounded_repr, bounded_str
from cortex_jupyter.runtime.core.trust.secrets import redact, redact_value
from cortex_jupyter.runtime.core.trust.secrets import tail as secret_tail

from .markdown import render_markdown
from .nodes import NodeView
from .state import ViewState
from .svg import details_html, graph_svg
from .text import header_parts, render_text
from .theme import (
    BORDER_VAR,
    FG_VAR,
    FONT,
    MONO,
    MUTED_VAR,
    clean,
    esc,
    fmt_duration,
    redact_markup,
    shorten,
    style_for,
)
from .typed import typed_html, typed_shows

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
#: The class of the live view's root widget (``WidgetView``'s ``_dom_classes``).
VIEW_CLASS = "cortex-view"
#: The class of the static copy's root element.
STATIC_CLASS = "cortex-static"

#: What each renderer shows of a finished run (the README's table is made from this).
RENDERERS: dict[str, str] = {
    "JupyterLab / Notebook 7, kernel running": "the live view; the copy is hidden",
    "JupyterLab / Notebook 7, trusted, no kernel or restarted": (
        "the static copy; the widget output is hidden (no 'model not found')"
    ),
    "JupyterLab / Notebook 7, the kernel restarted under an open page": (
        "the static copy; the disconnected view is hidden"
    ),
    "JupyterLab / Notebook 7, an older view let go (CortexMagics.live_views)": (
        "the static copy; the view's output is an empty text, hidden"
    ),
    "JupyterLab / Notebook 7, untrusted (nbclient, papermill, received)": (
        "the static copy, sanitized (no <style>): the graph as a picture, the rest as text"
    ),
    "GitHub": "the static copy, sanitized (no colours): picture and text",
    "nbviewer, nbconvert --to html": "the static copy as it is",
    "VS Code": "the live view with its kernel, else the static copy (not tested here)",
    "a terminal, nbval, a diff": "text/plain: the run as text",
}

_PHASE_STATUS = {
    "streaming": "running",
    "running actions": "running",
    "done": "done",
    "failed": "failed",
    "interrupted": "cancelled",
    "truncated": "cancelled",
    "turn limit": "cancelled",
    "budget": "cancelled",
}

# Hides the copy where the live view shows in the same cell, and a widget output that
# shows no view (its model is gone) where a copy follows it. The rules need ``:has()``
# (Chrome 105, Safari 15.4, Firefox 121); without it both stay visible. Sanitizers drop
# the whole <style> element, and with it these rules.
# In JupyterLab and Notebook 7 the widget renderer is a Lumino panel without the
# ``data-mime-type`` every rendermime renderer sets; with no view in it, it holds only
# the text "Loading widget..." or "Error displaying widget: model not found" (seen in
# JupyterLab 4.6 with @jupyter-widgets/jupyterlab-manager 5). ``:has()`` may not nest,
# and one invalid selector drops its whole rule: one rule per case.
#
# A view is *live* while its widgets are connected to a kernel. After a kernel restart
# the front end keeps the old views on the page, each marked with ipywidgets' class
# ``jupyter-widgets-disconnected`` (the broken-link icon; clicks then throw "Cannot
# send"): such a view is hidden and the copy shows, as in a saved notebook. A view that
# let go (``CortexMagics.live_views``) left an empty text output in its place: hidden
# too, the copy shows.
_WIDGET_OUTPUT = ".jp-OutputArea-output.lm-Panel:not([data-mime-type])"
_DEAD = "jupyter-widgets-disconnected"
_LIVE = f".{VIEW_CLASS}:not(.{_DEAD})"
_COPY_AFTER = f":has(~.jp-OutputArea-child .{STATIC_CLASS})"
_EMPTY_TEXT = '.jp-OutputArea-output[data-mime-type="text/plain"]>pre:empty'
_HIDE = "{display:none}"
SWITCH_CSS = (
    f".jp-OutputArea-child:has({_LIVE})~.jp-OutputArea-child:has(.{STATIC_CLASS}){_HIDE}"
    f".cell_container:has({_LIVE}) .output:has(.{STATIC_CLASS}){_HIDE}"
    f".jp-OutputArea-child:has(>{_WIDGET_OUTPUT}):not(:has(.{VIEW_CLASS})){_COPY_AFTER}{_HIDE}"
    f".jp-OutputArea-child:has(.{VIEW_CLASS}.{_DEAD}){_COPY_AFTER}{_HIDE}"
    f".jp-OutputArea-child:has(>{_EMPTY_TEXT}){_COPY_AFTER}{_HIDE}"
)

# How much of a node's captured text the copy keeps (the run record keeps all of it).
_TAIL_LINES = 6
_TAIL_CHARS = 800
_FIELD_CHARS = 400
_ALT_CHARS = 600
#: Up to this many actions, their list is open in the copy (a longer one is folded).
_OPEN_ACTIONS = 20
_PICTURE_BACKGROUND = "#ffffff"


def header_html(state: ViewState, now: float | None = None) -> str:
    """The header: the state word as a badge (``data-phase``), then model, turn, elapsed,
    tokens, tokens/s and action counts, in the theme's own text colours."""
    style = style_for(_PHASE_STATUS.get(state.phase, "pending"))
    model, *rest = header_parts(state, now)
    del rest[1 if state.turn > 1 else 0]  # the state word, drawn as the badge
    badge = (
        f'<span data-phase="{esc(state.phase)}" style="background:{style.fill};'
        f"color:{style.ink};border:1px solid {style.stroke};border-radius:9px;"
        f'padding:0 7px;font-weight:600;white-space:nowrap">{style.icon} {esc(state.phase)}</span>'
    )
    fields = " · ".join(esc(part) for part in rest)
    return (
        f'<div style="font-family:{esc(FONT)};font-size:12.5px;line-height:1.7;color:{FG_VAR};'
        f'display:flex;flex-wrap:wrap;align-items:center;gap:0 8px">{badge}'
        f'<b>{esc(model)}</b><span style="color:{MUTED_VAR}">{fields}</span></div>'
    )


def callout(details: str) -> str:
    """The details list (``svg.details_html``) on a light fill of the "failed" colour:
    its dark text then reads in a dark theme too."""
    if not details:
        return ""
    style = style_for("failed")
    return (
        f'<div style="background:{style.fill};border-left:3px solid {style.stroke};'
        f'border-radius:4px;padding:2px 10px;line-height:1.45;margin:0 0 4px">{details}</div>'
    )


def thought_html(state: ViewState) -> str:
    """The thought as escaped, wrapped text (it is notes, not a document to format)."""
    return (
        f'<div style="white-space:pre-wrap;word-break:break-word;font-family:{esc(FONT)};'
        f'font-size:12.5px;color:{MUTED_VAR};font-style:italic">{esc(state.thought)}</div>'
    )


def response_html(state: ViewState, values: Mapping[str, Any] | None = None) -> str:
    """The answer rendered once, in full (the live view uses ``IncrementalMarkdown``)."""
    return _response_box(render_markdown(state.body, values))


def _response_box(inner: str) -> str:
    # overflow-wrap: a long URL or hash wraps rather than widening the cell.
    return (
        f'<div style="font-family:{esc(FONT)};color:{FG_VAR};line-height:1.5;'
        f'overflow-wrap:anywhere">{inner}</div>'
    )


# ---- pictures -------------------------------------------------------------------------


def picture_uri(svg: str) -> str:
    """``svg`` as a ``data:image/svg+xml;base64,...`` URI, secrets redacted first (once
    encoded, a secret could no longer be found in the notebook's text)."""
    encoded = base64.b64encode(redact(svg).encode("utf-8")).decode("ascii")
    return f"data:image/svg+xml;base64,{encoded}"


def on_background(svg: str, colour: str = _PICTURE_BACKGROUND) -> str:
    """``svg`` with a rectangle of ``colour`` under everything: an ``<img>`` shows an SVG
    on whatever is behind it, and grey edges and labels vanish on a dark theme."""
    end = svg.find(">") + 1  # the root tag: its attribute values are escaped, no ">"
    if end <= 0 or not svg.startswith("<svg"):
        return svg
    return f'{svg[:end]}<rect width="100%" height="100%" fill="{colour}"/>{svg[end:]}'


def picture_html(svg: str, alt: str, css_class: str = "") -> str:
    """An ``<img>`` showing ``svg`` from a data URI, ``alt`` its text for screen readers
    and for renderers that show no images. It keeps the SVG's own width and height,
    shrinking to fit a narrower cell."""
    width, height = _svg_size(svg)
    size = f' width="{width}" height="{height}"' if width and height else ""
    klass = f' class="{esc(css_class)}"' if css_class else ""
    return (
        f'<img{klass} src="{picture_uri(on_background(svg))}" alt="{esc(shorten(alt, _ALT_CHARS))}"'
        f'{size} style="max-width:100%;height:auto;border-radius:4px"/>'
    )


def _svg_size(svg: str) -> tuple[str, str]:
    """The root's ``width`` and ``height`` attributes (digits only), or empty strings."""
    head = svg[: svg.find(">") + 1]
    found = []
    for name in ("width", "height"):
        start = head.find(f' {name}="')
        value = "" if start < 0 else head[start + len(name) + 3 :].split('"', 1)[0]
        found.append(value if value.replace(".", "", 1).isdigit() else "")
    return found[0], found[1]


@dataclass(frozen=True)
class SvgPicture:
    """An SVG picture for a notebook cell: shown through an ``<img>`` data URI, the one
    form every renderer keeps (``image/svg+xml`` is unsafe in an untrusted JupyterLab
    notebook, which then shows the text instead, and nbconvert inlines it). ``data`` is
    the SVG text, as in ``IPython.display.SVG``."""

    data: str
    alt: str

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return {"text/html": picture_html(self.data, self.alt), "text/plain": self.alt}


# ---- the static copy ------------------------------------------------------------------


def graph_picture(state: ViewState, now: float | None = None) -> str:
    """The action graph as an ``<img>`` (empty when there are no actions)."""
    svg = graph_svg(state, now)
    if not svg:
        return ""
    return picture_html(svg, _graph_alt(state), "cortex-graph")


def _graph_alt(state: ViewState) -> str:
    nodes = [state.nodes[i] for i in state.order]
    listed = "; ".join(f"{n.label} ({n.id}) {n.shown_status}" for n in nodes)
    return f"action graph: {listed}"


def actions_html(state: ViewState, now: float | None = None) -> str:
    """Every action as text: a line each (status, name, id, type, mode, duration), which
    opens onto what the live inspector shows of it (parameters, output, error, captured
    output, progress, attempts). The picture holds the same names, but no sanitizer
    lets a reader search or copy the text of a picture."""
    if not state.order:
        return ""
    rows = [_action_row(state, state.nodes[i], now) for i in state.order]
    shown = ' open=""' if len(rows) <= _OPEN_ACTIONS else ""  # XML-parseable too
    return (
        f'<details class="cortex-actions"{shown} style="margin:2px 0 4px;font-family:{esc(FONT)};'
        f'font-size:12.5px;color:{FG_VAR}"><summary style="cursor:pointer;color:{MUTED_VAR}">'
        f"Actions ({len(rows)})</summary>"
        f'<ul style="list-style:none;padding:0 0 0 6px;margin:2px 0">{"".join(rows)}</ul>'
        "</details>"
    )


def _action_row(state: ViewState, node: NodeView, now: float | None) -> str:
    style = style_for(node.shown_status)
    depth = state.depth(node)
    duration = fmt_duration(node.duration(now))
    head = (
        f'<span style="color:{style.stroke};font-weight:600">{style.icon}</span> '
        f"<b>{esc(node.label)}</b> ({esc(node.id)}) · {esc(node.type)} {esc(node.mode)} · "
        f"{esc(style.label)}{' ' + esc(duration) if duration else ''}"
    )
    body = "".join(_node_fields(node))
    pad = f"margin:1px 0 1px {depth * 16}px"
    if not body:
        return f'<li style="{pad}">{head}</li>'
    return (
        f'<li style="{pad}"><details><summary style="cursor:pointer">{head}</summary>'
        f'<div style="margin:0 0 4px 18px">{body}</div></details></li>'
    )


def _node_fields(node: NodeView) -> list[str]:
    fields: list[tuple[str, str]] = []
    if node.parameters:
        fields.append(("parameters", _json(node.parameters)))
    if node.resolved:
        fields.append(("called with", node.resolved))
    if node.output is not None:
        fields.append(("output", node.output))
    if node.error:
        fields.append(("error", node.error))
    if node.note:
        fields.append(("note", node.note))
    for attempt, error in node.attempts:
        fields.append((f"attempt {attempt}", error))
    if node.progress is not None:
        fields.append(("progress", str(node.progress)))
    for stream in ("stdout", "stderr"):
        text = getattr(node, stream)
        if text.strip():
            fields.append((stream, _tail(text)))
    if node.logs:
        fields.append(("logs", _tail("\n".join(node.logs))))
    if node.partial is not None:
        fields.append(("latest value", node.partial))
    return [_field(name, value) for name, value in fields]


def _field(name: str, value: str) -> str:
    shown = value if "\n" in value else shorten(value, _FIELD_CHARS)
    return (
        f'<div><span style="color:{MUTED_VAR}">{esc(name)}:</span> '
        f'<code style="font-family:{esc(MONO)};font-size:11.5px;white-space:pre-wrap;'
        f'word-break:break-word">{esc(shown)}</code></div>'
    )


def _json(value: Mapping[str, Any]) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=bounded_str)
    except (ValueError, RecursionError):  # a circular or very deep structure
        return bounded_repr(value, limit=2000)


def _tail(text: str) -> str:
    """The last lines of ``text``, at most ``_TAIL_CHARS`` characters of them."""
    lines = text.rstrip("\n").split("\n")
    kept = secret_tail("\n".join(lines[-_TAIL_LINES:]), _TAIL_CHARS)  # redacted, then cut
    return kept if len(lines) <= _TAIL_LINES else f"…\n{kept}"


def static_html(
    state: ViewState, values: Mapping[str, Any] | None = None, now: float | None = None
) -> str:
    """A self-contained snapshot of the final view: header, thought (folded), the graph
    as a picture, the actions as text, the failures, the response. Inline styles, no
    scripts, nothing to fetch; secrets redacted. It reads without a kernel."""
    parts = [header_html(state, now)]
    thought = state.thought.strip()
    if thought:
        parts.append(
            f'<details style="margin:4px 0"><summary style="cursor:pointer;color:{MUTED_VAR};'
            f'font-family:{esc(FONT)};font-size:12.5px">Thought ({len(thought):,} characters)'
            f"</summary>{thought_html(state)}</details>"
        )
    picture = graph_picture(state, now)
    if picture:
        parts.append(f'<div style="overflow-x:auto;margin:6px 0">{picture}</div>')
    parts.append(actions_html(state, now))
    parts.append(callout(details_html(state)))
    if state.body.strip():
        parts.append(response_html(state, values))
    if typed_shows(state.typed):
        assert state.typed is not None
        parts.append(typed_html(state.typed, live=False))
    return redact_markup(
        f'<div class="{STATIC_CLASS} cortex-run" style="border-left:3px solid {BORDER_VAR};'
        'padding:4px 0 4px 10px">' + "".join(parts) + "</div>"
    )


def static_text(
    state: ViewState, now: float | None = None, values: Mapping[str, Any] | None = None
) -> str:
    """The same snapshot as text/plain (``values`` fill ``$name`` in the response)."""
    return redact(render_text(state, now, values))


# ---- what a finished run leaves in the cell -------------------------------------------

Bundle = tuple[dict[str, Any], dict[str, Any]]


@dataclass(frozen=True)
class SavedCopy:
    """The two outputs a finished run leaves (see the module docstring): ``live`` is the
    final ``(data, metadata)`` of the live view's own display (an update of it, carrying
    the run's ``cortex`` record), and ``static`` the ``(data, metadata)`` of a second
    display holding the static copy (shown once, then updated if late actions change
    the run)."""

    live: Bundle
    static: Bundle


def saved_copy(
    state: ViewState,
    values: Mapping[str, Any] | None = None,
    now: float | None = None,
    *,
    widget: Mapping[str, Any] | None,
) -> SavedCopy:
    """What a finished run leaves in the cell; ``widget`` is the live view's own widget
    reference (``widget._repr_mimebundle_()[WIDGET_MIME]``; None once it is closed)."""
    return SavedCopy(
        live=live_bundle(widget, run_metadata(state)), static=saved_bundle(state, values, now)
    )


def live_bundle(widget: Mapping[str, Any] | None, record: Mapping[str, Any]) -> Bundle:
    """The live view's output at the end: its widget, an empty text for every renderer
    that cannot show the widget (the static copy follows it), and ``{"cortex": record}``."""
    data: dict[str, Any] = {} if widget is None else {WIDGET_MIME: dict(widget)}
    data["text/plain"] = ""
    return data, {"cortex": redact_value(dict(record))}


def saved_bundle(
    state: ViewState, values: Mapping[str, Any] | None = None, now: float | None = None
) -> Bundle:
    """The static copy's output: ``(data, metadata)`` with text/html (``SWITCH_CSS`` and
    ``static_html``) and text/plain; no widget, so every renderer shows one of these."""
    data = {
        "text/html": f"<style>{SWITCH_CSS}</style>{static_html(state, values, now)}",
        "text/plain": static_text(state, now, values),
    }
    return data, {}


def endpoint_host(endpoint: str | None) -> str | None:
    """``host[:port]`` of an endpoint URL: no scheme, credentials, path or query."""
    if not endpoint:
        return None
    parts = urlsplit(endpoint if "//" in endpoint else f"//{endpoint}")
    try:
        port = parts.port
    except ValueError:
        port = None
    host = parts.hostname or ""
    return f"{host}:{port}" if host and port else host or None


def run_metadata(state: ViewState, endpoint: str | None = None) -> dict[str, Any]:
    """What the cell output's metadata records about the run (JSON-ready).

    Times are seconds from the start of the run; ``endpoint`` is reduced to its host.
    """
    t0 = state.started or 0.0

    def rel(t: float | None) -> float | None:
        return None if t is None else round(t - t0, 3)

    actions = []
    for node_id in state.order:
        node = state.nodes[node_id]
        duration = node.duration(None)
        actions.append(
            {
                "id": clean(node.id),
                "name": clean(node.name),
                "type": clean(node.type),
                "mode": clean(node.mode),
                "status": node.status,
                "parent": None if node.parent is None else clean(node.parent),
                "started": rel(node.started),
                "finished": rel(node.finished),
                "duration": None if duration is None else round(duration, 3),
                "attempts": node.attempt,
                "error": None if node.error is None else clean(node.error),
            }
        )
    return {
        "model": clean(state.model) or None,
        "endpoint": endpoint_host(endpoint),
        "turn": state.turn,
        "status": state.phase,
        "elapsed": round(state.elapsed(), 3),
        "tokens": {
            "prompt": state.prompt_tokens,
            "cached": state.cached_tokens,
            "completion": state.completion_tokens,
            "estimated_completion": state.tokens if state.estimated else None,
        },
        "cost_usd": state.cost if state.priced else None,
        "actions": actions,
        "errors": [clean(e) for e in state.errors],
    }

"""The HTML pieces of a run's view, and the static copy left in a saved notebook.

Widget state does not survive on GitHub, in nbviewer or in VS Code (NOTES.md, "Saved
notebooks"), so when a run ends the cell also keeps a self-contained snapshot: inline
styles only, no scripts, no external resources. The live view draws the same pieces
(``header_html``, ``thought_html``, ``response_html`` plus ``svg.graph_svg`` and
``svg.details_html``), so the saved copy looks like the last frame the user saw.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from .markdown import render_markdown
from .state import ViewState
from .svg import details_html, graph_svg
from .text import header_parts, render_text
from .theme import BORDER_VAR, FG_VAR, FONT, MUTED_VAR, clean, esc, style_for

_PHASE_STATUS = {
    "streaming": "running",
    "running actions": "running",
    "done": "done",
    "failed": "failed",
    "interrupted": "cancelled",
}


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
    return f'<div style="font-family:{esc(FONT)};color:{FG_VAR};line-height:1.5">{inner}</div>'


def static_html(
    state: ViewState, values: Mapping[str, Any] | None = None, now: float | None = None
) -> str:
    """A self-contained snapshot of the final view (header, thought folded away, graph,
    details, response). Inline styles, no scripts: it reads without a kernel."""
    parts = [header_html(state, now)]
    thought = state.thought.strip()
    if thought:
        parts.append(
            f'<details style="margin:4px 0"><summary style="cursor:pointer;color:{MUTED_VAR};'
            f'font-family:{esc(FONT)};font-size:12.5px">Thought ({len(thought):,} characters)'
            f"</summary>{thought_html(state)}</details>"
        )
    graph = graph_svg(state, now)
    if graph:
        parts.append(f'<div style="overflow-x:auto;margin:6px 0">{graph}</div>')
    parts.append(callout(details_html(state)))
    if state.body.strip():
        parts.append(response_html(state, values))
    return (
        f'<div class="cortex-run" style="border-left:3px solid {BORDER_VAR};'
        'padding:4px 0 4px 10px">' + "".join(parts) + "</div>"
    )


def static_text(
    state: ViewState, now: float | None = None, values: Mapping[str, Any] | None = None
) -> str:
    """The same snapshot as text/plain (``values`` fill ``$name`` in the response)."""
    return render_text(state, now, values)


WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def saved_bundle(
    state: ViewState,
    values: Mapping[str, Any] | None = None,
    now: float | None = None,
    *,
    widget: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """What a finished run leaves in the cell's output: ``(data, metadata)`` for its final
    display update. ``widget`` is the live view's own widget reference (kept so a front end
    with the kernel keeps showing the live widgets); the static copies are what every
    other renderer shows."""
    data: dict[str, Any] = {}
    if widget is not None:
        data[WIDGET_MIME] = dict(widget)
    data["text/html"] = static_html(state, values, now)
    data["text/plain"] = static_text(state, now, values)
    return data, {"cortex": run_metadata(state)}


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
            "completion": state.completion_tokens,
            "estimated_completion": state.tokens if state.estimated else None,
        },
        "actions": actions,
        "errors": [clean(e) for e in state.errors],
    }

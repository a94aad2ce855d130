"""The inspector: everything about one action, opened by clicking it in the live view.

What it shows, in order: the action's status and timings; for an action waiting for
approval, that it waits (the Approve / Deny buttons sit just above it); its error and
every failed attempt; the parameters it is called with (resolved) and as the model
wrote them, with the ``$name`` references and dependencies that made its edges; its
output in its richest form (``rich.rich_html``: a table, an image, a tree) or, while it
runs, its progress and a generator's latest value; what it printed, wrote to stderr and
logged; its note; the exact text the model wrote for it; and for an agent or a workflow
its own graph, thought and answer.

Most of it comes from the view state (reduced from events, so it is there live and in a
replay). The kernel-side run record (``_cortex``), when the view is given it, adds what
events only summarise: the output object itself (for its rich form), the resolved
parameters in full and all of the captured text (``ActionNode.resolved``, ``.output``,
``.stdout``...). Everything is escaped or rebuilt (``rich``); the only markup that is
not text is our own.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

from cortex_jupyter.runtime.core.trust import secrets
from cortex_jupyter.runtime.core.values.variables import find_references

from .nodes import NodeView
from .rich import pre, rich_html, tree_html
from .state import ViewState
from .svg import subgraph_svg
from .theme import (
    BORDER_VAR,
    FG_VAR,
    FONT,
    MUTED_VAR,
    esc,
    fmt_duration,
    redact_markup,
    shorten,
    style_for,
)

#: Characters of each captured stream the inspector shows (the newest).
SHOWN_TEXT = 16_000


def record_node(record: Any, node_id: str) -> Any:
    """The run record's node for ``node_id`` (``parent/inner`` ids go into an agent's
    sub-run), or None."""
    actions = getattr(record, "actions", None)
    if not isinstance(actions, Mapping):
        return None
    if node_id in actions:
        return actions[node_id]
    head, _, rest = node_id.partition("/")
    parent = actions.get(head)
    sub = getattr(parent, "subrun", None) if parent is not None else None
    return record_node(sub, rest) if rest and sub is not None else None


def inspector_html(
    state: ViewState,
    node_id: str,
    now: float | None = None,
    *,
    record: Any = None,
    live: bool = True,
    cache: MutableMapping[Any, str] | None = None,
) -> str:
    """The inspector of ``node_id`` (empty when there is no such node). ``record`` is
    the run record; ``cache`` keeps rich outputs between redraws (a repr can be slow)."""
    node = state.nodes.get(node_id)
    if node is None:
        return ""
    full = record_node(record, node_id) if record is not None else None
    sections = [
        _title(node, live),
        _timings(state, node, now, live),
        _waiting(node),
        _error(node),
        _parameters(node, full),
        _edges(state, node, live),
        _output(node, full, cache),
        _progress(node),
        _captured(node, full),
        _section("note", "Note", esc(node.note), bool(node.note)) if node.note else "",
        _source(node),
        _nested(state, node, now, live),
    ]
    # Secrets redacted (the record's objects are exact: a tool's output may hold a key).
    return redact_markup(
        f'<div class="cxj-inspector" data-id="{esc(node.id)}" style="font-family:{esc(FONT)};'
        f"font-size:12.5px;color:{FG_VAR};border:1px solid {BORDER_VAR};border-radius:6px;"
        f'padding:4px 10px 6px;margin:4px 0;line-height:1.45">' + "".join(sections) + "</div>"
    )


def _title(node: NodeView, live: bool) -> str:
    style = style_for(node.shown_status)
    badge = (
        f'<span data-status="{esc(node.shown_status)}" style="background:{style.fill};'
        f"color:{style.ink};border:1px solid {style.stroke};border-radius:9px;padding:0 7px;"
        f'font-weight:600;white-space:nowrap">{style.icon} {esc(style.label)}</span>'
    )
    close = (
        '<span data-cxj-act="close" role="button" tabindex="0" title="close the inspector" '
        f'style="cursor:pointer;color:{MUTED_VAR};padding:0 4px">✕</span>'
        if live
        else ""
    )
    return (
        '<div style="display:flex;align-items:center;gap:8px;flex-wrap:wrap">'
        f"{badge}<b>{esc(node.label)}</b>"
        f'<span style="color:{MUTED_VAR}">{esc(node.id)} · {esc(node.type)} · {esc(node.mode)}'
        f'</span><span style="flex:1"></span>{close}</div>'
    )


def _timings(state: ViewState, node: NodeView, now: float | None, live: bool) -> str:
    t0 = state.started or 0.0

    def at(t: float | None) -> str:
        return f"+{fmt_duration(t - t0)}" if t is not None else "-"

    bits = [f"written at {at(node.seen)}"]
    if node.awaited is not None:
        bits.append(f"asked for approval at {at(node.awaited)}")
    if node.started is not None:
        bits.append(f"started at {at(node.started)}")
        if node.seen is not None:
            bits.append(f"waited {fmt_duration(max(node.started - node.seen, 0.0))}")
    if node.finished is not None:
        bits.append(f"ended at {at(node.finished)}")
    duration = fmt_duration(node.duration(now))
    if node.status == "running" and node.started is not None:
        label = f"{style_for('running').icon} running"
        ticking = (
            f' data-cxj-since="{node.started - t0:.3f}" data-cxj-label="{esc(label)}"'
            if live
            else ""
        )
        bits.append(f"<span{ticking}>{esc(label)} · {esc(duration)}</span>")
    elif duration:
        bits.append(f"ran {esc(duration)}")
    if node.attempt > 1:
        bits.append(f"attempt {node.attempt}")
    text = " · ".join(b if b.startswith("<span") else esc(b) for b in bits)
    return f'<div style="color:{MUTED_VAR};margin:2px 0 4px">{text}</div>'


def _section(key: str, title: str, body: str, opened: bool = True) -> str:
    """A part of the inspector that opens and closes (``data-cxj-section`` lets the live
    view keep it as the person left it across redraws)."""
    state = ' open=""' if opened else ""
    return (
        f'<details data-cxj-section="{esc(key)}"{state} style="margin:3px 0">'
        f'<summary style="cursor:pointer;font-weight:600">{esc(title)}</summary>'
        f'<div style="margin:2px 0 4px 1em">{body}</div></details>'
    )


def _waiting(node: NodeView) -> str:
    if node.status != "awaiting":
        return ""
    style = style_for("awaiting")
    return (
        f'<div style="background:{style.fill};color:{style.ink};border-left:3px solid '
        f'{style.stroke};padding:2px 8px;margin:2px 0">{style.icon} This action waits for your '
        "approval: Approve or Deny it with the buttons above.</div>"
    )


def _error(node: NodeView) -> str:
    parts = []
    if node.error and node.status in ("failed", "skipped", "cancelled"):
        parts.append(pre(node.error))
    earlier = [(n, e) for n, e in node.attempts if not (n == node.attempt and e == node.error)]
    if earlier or (node.retry_error and node.status == "running"):
        rows = "".join(
            f"<li>attempt {n} failed: {pre(error, 4000)}</li>" for n, error in node.attempts
        )
        if node.status == "running" and node.retry_error:
            wait = f" in {node.retry_in:.2f} s" if node.retry_in is not None else ""
            rows += f"<li>attempt {node.attempt} running{esc(wait)}</li>"
        parts.append(f'<ul style="margin:0;padding-left:1.2em">{rows}</ul>')
    if not parts:
        return ""
    title = {"skipped": "Why it was skipped", "cancelled": "Why it was cancelled"}
    return _section("error", title.get(node.status, "Error and attempts"), "".join(parts))


def _parameters(node: NodeView, full: Any) -> str:
    resolved = getattr(full, "resolved", None) if full is not None else None
    parts = []
    if isinstance(resolved, Mapping):
        parts.append(f'<div style="color:{MUTED_VAR}">as the tool is called:</div>')
        parts.append(tree_html(resolved))
    elif node.resolved:
        parts.append(f'<div style="color:{MUTED_VAR}">as the tool is called:</div>')
        parts.append(pre(node.resolved))
    # As written too when that differs: ``$name`` references, or no resolved form yet.
    if not parts or find_references(node.parameters):
        parts.append(f'<div style="color:{MUTED_VAR}">as the model wrote them:</div>')
        parts.append(tree_html(dict(node.parameters)))
    return _section("parameters", "Parameters", "".join(parts))


def _edges(state: ViewState, node: NodeView, live: bool) -> str:
    rows = []
    via = {dep: name for name, dep in node.refs}
    for dep in node.depends_on:
        other = state.nodes.get(dep)
        what = f" ({other.label}, {other.shown_status})" if other is not None else ""
        how = [] if dep in node.references else ["<code>depends_on</code>"]
        if dep in via:
            how.append(f"uses <code>${esc(via[dep])}</code>")
        rows.append(f"<li>{_link(dep, live)}{esc(what)}: {' and '.join(how)}</li>")
    users = [n for n in state.nodes.values() if node.id in n.depends_on]
    if users:
        names = ", ".join(_link(n.id, live) for n in users[:30])
        more = f" and {len(users) - 30} more" if len(users) > 30 else ""
        rows.append(f"<li>used by {names}{esc(more)}</li>")
    if node.output_key:
        rows.append(f"<li>its output is bound to <code>{esc(node.output_key)}</code></li>")
    if not rows:
        return ""
    body = f'<ul style="margin:0;padding-left:1.2em">{"".join(rows)}</ul>'
    return _section("edges", "Dependencies", body)


def _link(node_id: str, live: bool) -> str:
    """An action id that opens that action's inspector when clicked (live)."""
    if not live:
        return f"<code>{esc(node_id)}</code>"
    return (
        f'<a data-cxj-act="select" data-cxj-id="{esc(node_id)}" role="button" tabindex="0" '
        f'style="cursor:pointer;text-decoration:underline dotted">{esc(node_id)}</a>'
    )


def _output(node: NodeView, full: Any, cache: MutableMapping[Any, str] | None) -> str:
    if node.status == "done" and full is not None and getattr(full, "status", "") == "done":
        value = getattr(full, "output", None)
        key = (node.id, id(value))
        shown = cache.get(key) if cache is not None else None
        if shown is None:
            shown = redact_markup(rich_html(value))
            if cache is not None:
                cache[key] = shown
        return _section("output", f"Output ({type(value).__name__})", shown)
    if node.status == "done" and node.output is not None:
        return _section("output", "Output", pre(node.output))
    if node.partial is not None:
        title = "Latest value" if not node.final else "Last value before it ended"
        return _section("output", title, pre(node.partial))
    return ""


def _progress(node: NodeView) -> str:
    progress = node.progress
    if progress is None:
        return ""
    fraction = progress.fraction
    style = style_for("running" if not node.final else node.shown_status)
    bar = ""
    if fraction is not None:
        bar = (
            f'<div class="cxj-progress" style="height:6px;width:16em;border:1px solid '
            f"{style.stroke};border-radius:3px;display:inline-block;vertical-align:middle;"
            f'margin-right:6px"><div style="height:100%;width:{fraction * 100:.1f}%;'
            f'background:{style.stroke}"></div></div>'
        )
    return _section("progress", "Progress", f"{bar}<span>{esc(str(progress))}</span>")


def _captured(node: NodeView, full: Any) -> str:
    out = []
    for key, title, attr in (("stdout", "Printed", "stdout"), ("stderr", "stderr", "stderr")):
        text = getattr(full, attr, None) if full is not None else None
        dropped = 0
        if not isinstance(text, str) or len(text) < len(getattr(node, attr)):
            text, dropped = getattr(node, attr), node.dropped.get(attr, 0)
        if text:
            out.append(_section(key, title, _tail(text, dropped)))
    logs = getattr(full, "logs", None) if full is not None else None
    lines = list(logs) if isinstance(logs, list) and len(logs) >= len(node.logs) else node.logs
    if lines:
        dropped = node.dropped.get("logs", 0) if lines is node.logs else 0
        note = f"… {dropped:,} earlier lines\n" if dropped else ""
        out.append(
            _section("logs", f"Logs and warnings ({len(lines):,})", pre(note + "\n".join(lines)))
        )
    return "".join(out)


def _tail(text: str, dropped: int) -> str:
    text = secrets.redact(text)  # before the cut: no part of a secret stays at its edge
    if len(text) > SHOWN_TEXT:
        dropped += len(text) - SHOWN_TEXT
        text = secrets.tail(text, SHOWN_TEXT)
    note = f"… {dropped:,} earlier characters\n" if dropped else ""
    return pre(note + text)


def _source(node: NodeView) -> str:
    if not node.source:
        return ""
    refused = node.status == "failed" and node.started is None
    title = "What the model wrote (refused)" if refused else "What the model wrote"
    return _section("source", title, pre(node.source), opened=refused)


def _nested(state: ViewState, node: NodeView, now: float | None, live: bool) -> str:
    parts = []
    graph = subgraph_svg(state, node.id, now, live=live)
    if graph:
        parts.append(_section("subgraph", f"Its actions ({len(node.children)})", graph))
    if node.thought:
        parts.append(_section("subthought", "Its thought", pre(node.thought), opened=False))
    if node.response:
        # Every reply as written, interim ones too; its answer is the node's output.
        parts.append(_section("subresponse", "Its replies", pre(node.response)))
    return "".join(parts)


def waiting_html(node: NodeView) -> str:
    """One line of the approvals bar: what waits, with the parameters it would run with."""
    style = style_for("awaiting")
    params = shorten(node.resolved or "", 600) if node.resolved else "(no parameters)"
    return redact_markup(
        f'<div style="font-family:{esc(FONT)};font-size:12.5px;color:{style.ink};'
        f"background:{style.fill};border-left:3px solid {style.stroke};padding:2px 8px;"
        f'line-height:1.5;white-space:pre-wrap;word-break:break-word">{style.icon} '
        f"<b>{esc(node.label)}</b> ({esc(node.id)}) wants to run with "
        f"<code>{esc(params)}</code></div>"
    )

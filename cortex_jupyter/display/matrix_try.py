"""One try of an experiment, opened from its matrix cell: the run's view (what
``%cortex open ID`` shows of a stored run) with its expectations laid over it.

Above the graph, each verdict (✓/✗, its label, score and reason) and what its
``details`` name: the tool calls missing, extra or out of order, the ``before`` edges
broken and the actions that should have overlapped; a typed answer's difference as a
table. The actions named are outlined in the graph, one colour per kind, with a legend
beside it in words (the picture is an ``<img>``: a colour alone would not reach a
screen reader, and GitHub drops the legend's colours but keeps its words).

Verdicts are ``experiments.results.Verdict``; the display may not import experiments,
so they are read through ``VerdictLike``: ``passed``, ``score``, ``reason``, ``details``.
The ``details`` keys read (every one optional): ``missing``, ``extra``, ``out_of_order``
(action names), ``broken`` (``[action, the one it had to wait for]`` pairs),
``not_parallel`` (pairs or groups of actions that did not overlap), ``fields`` or ``diff``
(a typed answer's difference: ``{field: [got, expected]}`` as ``expect.output`` gives
it, ``{field: {"expected": .., "actual": ..}}``, or rows).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from cortex_jupyter.runtime.core.trust.bounded import bounded_repr

from .state import ViewState, from_run
from .static import STATIC_CLASS, actions_html, callout, header_html, picture_html, response_html
from .svg import BOX_H, BOX_W, arrange, details_html, draw, svg_open
from .text import render_text
from .theme import BORDER_VAR, FG_VAR, FONT, MUTED_VAR, esc, redact_markup, shorten, style_for

__all__ = ["MARKS", "TryView", "VerdictLike", "marked_nodes", "try_view"]


class VerdictLike(Protocol):
    """What the view reads of a verdict (``experiments.results.Verdict``)."""

    @property
    def passed(self) -> bool: ...
    @property
    def score(self) -> float: ...
    @property
    def reason(self) -> str: ...
    @property
    def details(self) -> Mapping[str, Any]: ...


#: The kinds of marks laid on the graph: (details keys, colour, words in the legend).
MARKS: dict[str, tuple[tuple[str, ...], str, str]] = {
    "extra": (("extra",), "#d55e00", "extra: called, not expected"),
    "out_of_order": (("out_of_order", "out-of-order"), "#cc79a7", "out of order"),
    "broken": (("broken", "broken_before"), "#0072b2", "a before edge broken"),
    "not_parallel": (("not_parallel", "not-parallel"), "#e69f00", "should have overlapped"),
}
_MISSING_KEYS = ("missing",)
_DIFF_KEYS = ("diff", "difference", "fields")
_VALUE_CHARS = 120


def _names(value: Any) -> list[str]:
    """Action names from a list of names, of pairs/groups of names, or of mappings with
    a ``name``; anything else gives none."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        name = value.get("name")
        return [name] if isinstance(name, str) else []
    if isinstance(value, Iterable):
        return [name for item in value for name in _names(item)]
    return []


def _entries(details: Mapping[str, Any], keys: Iterable[str]) -> list[Any]:
    found: list[Any] = []
    for key in keys:
        value = details.get(key)
        if isinstance(value, list | tuple):
            found.extend(value)
    return found


def _entry_words(entry: Any, joiner: str) -> str:
    names = _names(entry)
    return joiner.join(names) if names else bounded_repr(entry, 80)


def marked_nodes(verdicts: Mapping[str, VerdictLike]) -> dict[str, set[str]]:
    """Each mark kind's action names (or ids), over every failed verdict."""
    marked: dict[str, set[str]] = {kind: set() for kind in MARKS}
    for verdict in verdicts.values():
        details = verdict.details if isinstance(verdict.details, Mapping) else {}
        for kind, (keys, _colour, _words) in MARKS.items():
            marked[kind].update(_names(_entries(details, keys)))
    return marked


# ---- the verdicts ---------------------------------------------------------------------


def _detail_lines(details: Mapping[str, Any]) -> list[str]:
    lines = []
    missing = _names(_entries(details, _MISSING_KEYS))
    if missing:
        lines.append("missing: " + esc(", ".join(missing)))
    for kind, (keys, colour, words) in MARKS.items():
        entries = _entries(details, keys)
        if not entries:
            continue
        joiner = {"not_parallel": " ∥ ", "broken": " did not wait for "}.get(kind, ", ")
        said = "; ".join(_entry_words(entry, joiner) for entry in entries)
        lines.append(f'<span style="color:{colour}">■</span> {esc(words)}: {esc(said)}')
    return lines


def _diff_rows(value: Any) -> list[tuple[str, Any, Any]]:
    """``(field, expected, actual)`` rows from a typed answer's difference."""
    rows: list[tuple[str, Any, Any]] = []
    if isinstance(value, Mapping):
        for name, pair in value.items():
            if isinstance(pair, Mapping):
                rows.append((str(name), pair.get("expected"), pair.get("actual", pair.get("got"))))
            elif isinstance(pair, list | tuple) and len(pair) == 2:  # expect.output's [got, want]
                rows.append((str(name), pair[1], pair[0]))
    elif isinstance(value, list | tuple):
        for row in value:
            if isinstance(row, Mapping):
                actual = row.get("actual", row.get("got"))
                rows.append((str(row.get("field", "")), row.get("expected"), actual))
            elif isinstance(row, list | tuple) and len(row) == 3:
                rows.append((str(row[0]), row[1], row[2]))
    return rows


def diff_html(details: Mapping[str, Any]) -> str:
    """A typed answer's difference as a table: field, expected, got."""
    rows = [row for key in _DIFF_KEYS for row in _diff_rows(details.get(key))]
    if not rows:
        return ""
    td = f"padding:2px 8px;border:1px solid {BORDER_VAR};text-align:left;vertical-align:top"
    body = "".join(
        f'<tr><td style="{td}">{esc(name)}</td>'
        f'<td style="{td}"><code>{esc(bounded_repr(expected, _VALUE_CHARS))}</code></td>'
        f'<td style="{td}"><code>{esc(bounded_repr(actual, _VALUE_CHARS))}</code></td></tr>'
        for name, expected, actual in rows
    )
    return (
        '<table class="cortex-diff" style="border-collapse:collapse;font-size:12px;'
        'margin:2px 0 4px 18px">'
        f'<thead><tr><th style="{td}">field</th><th style="{td}">expected</th>'
        f'<th style="{td}">got</th></tr></thead><tbody>{body}</tbody></table>'
    )


def verdicts_html(verdicts: Mapping[str, VerdictLike]) -> str:
    """Each verdict on a line, then what its details name."""
    items = []
    for label, verdict in verdicts.items():
        style = style_for("done" if verdict.passed else "failed")
        icon = "✓" if verdict.passed else "✗"
        score = "" if verdict.score in (0.0, 1.0) else f" ({verdict.score:.2f})"
        reason = f" — {esc(shorten(verdict.reason, 400))}" if verdict.reason else ""
        details = verdict.details if isinstance(verdict.details, Mapping) else {}
        lines = "".join(f'<div style="margin-left:18px;color:{MUTED_VAR}">{line}</div>'
                        for line in _detail_lines(details))  # fmt: skip
        items.append(
            f'<li class="cortex-verdict" data-passed="{str(verdict.passed).lower()}">'
            f'<span style="color:{style.ink};font-weight:700">{icon}</span> '
            f"<b>{esc(label)}</b>{esc(score)}{reason}{lines}{diff_html(details)}</li>"
        )
    if not items:
        return ""
    return (
        f'<ul class="cortex-verdicts" style="list-style:none;padding:0;margin:2px 0 6px;'
        f'font-size:12.5px">{"".join(items)}</ul>'
    )


# ---- the graph, marked ----------------------------------------------------------------


def _outline(x: int, y: int, colours: list[str], words: list[str]) -> str:
    rings = []
    for i, colour in enumerate(colours):
        pad = 3 + 4 * i
        rings.append(
            f'<rect x="{x - pad}" y="{y - pad}" width="{BOX_W + 2 * pad}" '
            f'height="{BOX_H + 2 * pad}" rx="8" fill="none" stroke="{colour}" stroke-width="3"/>'
        )
    return f'<g class="cxj-mark"><title>{esc("; ".join(words))}</title>{"".join(rings)}</g>'


def marked_graph_svg(state: ViewState, marked: Mapping[str, set[str]], now: float | None) -> str:
    """The run's graph with each marked action outlined (an empty string: no actions)."""
    picture = arrange(state)
    if not picture.items:
        return ""
    pieces = list(draw(state, picture, now if now is not None else state.clock).values())
    for item in picture.items:
        members = (item.node,) if item.node is not None else item.members
        kinds = [kind for kind, names in marked.items()
                 if any(m.name in names or m.id in names for m in members)]  # fmt: skip
        if kinds:
            pieces.append(_outline(item.x, item.y, [MARKS[k][1] for k in kinds],
                                   [MARKS[k][2] for k in kinds]))  # fmt: skip
    return svg_open(picture.width, picture.height) + "".join(pieces) + "</svg>"


def _legend(marked: Mapping[str, set[str]]) -> str:
    rows = [
        f'<div><span style="color:{MARKS[kind][1]}">■</span> {esc(MARKS[kind][2])}: '
        f"{esc(', '.join(sorted(names)))}</div>"
        for kind, names in marked.items()
        if names
    ]
    if not rows:
        return ""
    return (
        f'<div class="cortex-legend" style="font-size:12px;margin:4px 0 4px 10px;'
        f'color:{FG_VAR}"><div style="color:{MUTED_VAR}">outlined in the graph</div>'
        f"{''.join(rows)}</div>"
    )


# ---- the view -------------------------------------------------------------------------


@dataclass(frozen=True)
class TryView:
    """An opened try: ``html`` (self-contained, inline styles, no script) and ``text``."""

    html: str
    text: str

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return {"text/html": self.html, "text/plain": self.text}


def _alt(state: ViewState) -> str:
    names = "; ".join(
        f"{state.nodes[i].label} ({i}) {state.nodes[i].shown_status}" for i in state.order
    )
    return f"action graph: {names}"


def try_view(run: Any, verdicts: Mapping[str, VerdictLike], title: str = "") -> TryView:
    """The try's run (a live ``Run`` or a ``StoredRun``) as ``%cortex open`` shows it,
    with ``verdicts`` (label -> verdict) laid over it. ``run`` None: the verdicts only
    (a try that could not run)."""
    head = f'<div style="font-weight:600;margin:2px 0">{esc(title)}</div>' if title else ""
    parts = [head, verdicts_html(verdicts)]
    text = [title] if title else []
    text += [f"{'✓' if v.passed else '✗'} {label}: {v.reason}" for label, v in verdicts.items()]
    if run is not None:
        state = from_run(run, model=getattr(run, "model", None) or "")
        end = run.ended if run.ended is not None else max(run.event_times, default=run.started)
        marked = marked_nodes(verdicts)
        svg = marked_graph_svg(state, marked, end)
        picture = picture_html(svg, _alt(state), "cortex-graph") if svg else ""
        parts.append(header_html(state, end))
        parts.append(
            f'<div style="display:flex;flex-wrap:wrap;align-items:flex-start;margin:6px 0">'
            f'<div style="overflow-x:auto">{picture}</div>{_legend(marked)}</div>'
        )
        parts.append(actions_html(state, end))
        parts.append(callout(details_html(state)))
        if state.body.strip():
            parts.append(response_html(state, getattr(run, "variables", None)))
        text.append(render_text(state, end))
    html = redact_markup(
        f'<div class="{STATIC_CLASS} cortex-try-view" style="font-family:{esc(FONT)};'
        f'color:{FG_VAR};border-left:3px solid {BORDER_VAR};padding:4px 0 4px 10px">'
        + "".join(parts)
        + "</div>"
    )
    return TryView(html, "\n".join(text))

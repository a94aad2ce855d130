"""Colours, labels and the text-safety helpers every renderer shares.

Statuses are told apart by an icon and a word as well as by colour, so the picture reads
for colour-blind people and in a black-and-white print. The palette is Okabe-Ito (safe
for the common colour-vision deficiencies); ``ink`` is a darker shade of each colour with
at least 4.5:1 contrast on its ``fill``, for text.

Everything here is pure. ``esc`` is the one door model text goes through into HTML or
SVG: it drops the characters XML 1.0 forbids (control characters, lone surrogates) —
an SVG holding one of them does not render at all — and escapes ``& < > " '``.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass

from cortex_jupyter.runtime.core.trust import secrets


@dataclass(frozen=True, slots=True)
class StatusStyle:
    """How one node status looks: border colour, box fill, text colour, icon, word."""

    stroke: str
    fill: str
    ink: str
    icon: str
    label: str


STATUS_STYLES: dict[str, StatusStyle] = {
    # "starting": the opening tag arrived, the body is still being written.
    "starting": StatusStyle("#8c8c8c", "#f4f4f4", "#4d4d4d", "…", "starting"),
    "pending": StatusStyle("#8c8c8c", "#f4f4f4", "#4d4d4d", "○", "pending"),
    # "awaiting": a tool marked approve=True waits for the person (Okabe-Ito yellow, with a
    # dark olive ink: the one status that asks for something, so it must stand out).
    "awaiting": StatusStyle("#c8b400", "#fdf9d8", "#5e5500", "⚑", "awaiting"),
    "running": StatusStyle("#0072b2", "#e6f1f8", "#005282", "▶", "running"),
    "done": StatusStyle("#009e73", "#e5f5f0", "#00684c", "✓", "done"),
    "failed": StatusStyle("#d55e00", "#fbeee5", "#a84a00", "✗", "failed"),
    "skipped": StatusStyle("#e69f00", "#fdf5e5", "#855c00", "↷", "skipped"),
    "cancelled": StatusStyle("#cc79a7", "#f9eef4", "#94456f", "■", "cancelled"),
}
UNKNOWN_STATUS = StatusStyle("#8c8c8c", "#f4f4f4", "#4d4d4d", "?", "unknown")

# The segments of the model's stream in the timeline.
STREAM_COLOURS: dict[str, str] = {
    # Lavender and tan: no action status uses them (the status colours are Okabe-Ito's,
    # and "skipped" orange beside an "action" orange read as one; issue 37).
    "thought": "#9d8ec7",
    "action": "#a0785a",
    # Okabe-Ito sky blue: no action status uses it (done's green would read as an action).
    "response": "#56b4e9",
    "text": "#999999",
}

FONT = "-apple-system, BlinkMacSystemFont, 'Segoe UI', Helvetica, Arial, sans-serif"
MONO = "SFMono-Regular, Menlo, Consolas, 'Liberation Mono', monospace"
TEXT = "#1f2328"
MUTED = "#59636e"
# Text with no fill of its own: JupyterLab's theme colour, then VS Code's, then the light
# theme's (GitHub, nbviewer), so it reads on a dark background too.
FG_VAR = f"var(--jp-ui-font-color1,var(--vscode-foreground,{TEXT}))"
MUTED_VAR = f"var(--jp-ui-font-color2,var(--vscode-descriptionForeground,{MUTED}))"
BORDER_VAR = "var(--jp-border-color2,var(--vscode-panel-border,#d0d7de))"
EDGE = "#8c959f"
CODE_BG = "#f6f8fa"
# A Pygments style whose inline colours stay readable on CODE_BG.
PYGMENTS_STYLE = "default"


def style_for(status: str) -> StatusStyle:
    return STATUS_STYLES.get(status, UNKNOWN_STATUS)


_NOT_XML = secrets.NOT_XML  # (secrets.py: a secret as ``clean`` shows it is one of its forms)


def clean(text: str) -> str:
    """``text`` without the characters an XML (SVG) document may not hold."""
    return _NOT_XML.sub("\ufffd", text) if _NOT_XML.search(text) else text


def esc(text: object) -> str:
    """Any value as text that is safe inside HTML/SVG content and quoted attributes."""
    return html.escape(clean(str(text)), quote=True)


def shorten(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters with an ellipsis; secrets
    redacted before the cut, none of one left at it (``secrets.shorten``)."""
    if "\n" in text or "\t" in text or "\r" in text:
        # Redacted before the spaces are joined: a secret holding a line break is
        # another text once it is flattened.
        text = " ".join(secrets.redact(text).split())
    return secrets.shorten(text, limit)


def redact_markup(text: str) -> str:
    """``redact`` for HTML: also a secret as HTML escaping wrote it (``a&amp;b``). What
    the live view sends, the inspector and the static copy pass through it."""
    return secrets.redact(text)  # HTML escaping is one of the forms it redacts


def shorten_middle(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters in its middle: names and ids
    of one tool often differ only at their end (``fetch_page_11``, ``fetch_page_12``)."""
    flat = shorten(text, len(text))
    if len(flat) <= limit:
        return flat
    tail = (limit - 1) // 2
    return flat[: limit - 1 - tail] + "…" + flat[len(flat) - tail :]


def fmt_duration(seconds: float | None) -> str:
    """``0.42 s``, ``12.3 s``, ``2 m 05 s``; empty for no value."""
    if seconds is None or math.isnan(seconds):
        return ""
    seconds = max(seconds, 0.0)
    if seconds < 10:
        return f"{seconds:.2f} s"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} m {rest:02d} s"


#: (below, unit, decimals, suffix): a value under ``below`` is shown in ``unit``s.
_K = ((1000, 1, 0, ""), (10_000, 1000, 1, "k"), (1_000_000, 1000, 0, "k"))
_COUNT = ((1000, 1, 0, ""), (1_000_000, 1000, 1, "k"))


def fmt_k(value: float) -> str:
    """``950``, ``2.1k``, ``21k``, ``1.2M``: token counts side by side (``ctx 21k/32k``)."""
    return _scaled(value, _K)


def fmt_count(value: float) -> str:
    """``950``, ``1.2k``, ``3.4M``: counts that fit in a header."""
    return _scaled(value, _COUNT)


def _scaled(value: float, scales: tuple[tuple[int, int, int, str], ...]) -> str:
    for below, unit, decimals, suffix in scales:
        if value < below:
            return f"{value / unit:.{decimals}f}{suffix}"
    return f"{value / 1_000_000:.1f}M"

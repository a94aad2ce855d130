"""An action's output as something to look at: a table, a picture, a tree, or text.

The inspector shows what a tool returned with the object's own rich representation, the
way a notebook would show it: an image for ``_repr_png_`` / ``_repr_jpeg_`` /
``_repr_svg_`` and for figures (anything with ``savefig``), a table for a DataFrame's
``_repr_html_``, a collapsible tree for dicts, lists and tuples, and text otherwise.

Outputs are the user's tools' data, but what is in them often came from the model or
from the web (a scraped page, a search result), so nothing here trusts them:

- **Text is escaped**, always (``theme.esc``).
- **HTML from a repr is sanitized by rebuilding it**: ``sanitize_html`` parses it with
  the standard library's HTML parser and writes out only an allow-list of inert tags
  (tables, lists, headings, text formatting) with an allow-list of attributes
  (``colspan``, ``rowspan``, ``title``...), every text and attribute value escaped by us.
  Scripts, styles, event handlers, links, forms, frames, ``class`` and ``style``
  (which could lay content over the page) are dropped; the text inside unknown tags is
  kept. What comes out is markup we wrote ourselves, so no difference between this
  parser and the browser's can smuggle anything through. An HTML repr too large to
  rebuild is shown as text instead.
- **Images become ``<img src="data:...">``** with a checked base64 body: raster images
  as they are, SVG as an image too (a browser runs no script inside an ``<img>``).
- **A repr that fails** (raises, returns the wrong type) falls back to the next form, and
  finally to ``repr()``; nothing a tool returns can break the view.

Everything has a size limit, so one huge output cannot flood the channel.
"""

from __future__ import annotations

import base64
import binascii
import io
import re
from collections.abc import Callable, Mapping
from html.parser import HTMLParser
from typing import Any

from markdown_it import MarkdownIt

from cortex_jupyter.runtime.core.trust.bounded import failed
from cortex_jupyter.runtime.core.trust.secrets import Repr, head, redact
from cortex_jupyter.runtime.core.trust.secrets import shown as redacted_frame

from . import commonmark
from .theme import MONO, MUTED, esc, shorten

#: Largest HTML repr rebuilt (characters); larger ones are shown as text.
MAX_HTML = 200_000
#: Largest image shown (bytes, before base64).
MAX_IMAGE = 2_000_000
#: Largest text shown (characters); the rest is cut with a note.
MAX_TEXT = 20_000
#: A tree shows at most this many entries in all, this many per container, this deep.
TREE_ENTRIES, TREE_WIDTH, TREE_DEPTH = 1500, 100, 8

_INERT = frozenset(
    (
        "table", "thead", "tbody", "tfoot", "tr", "th", "td", "caption", "colgroup", "col",
        "div", "span", "p", "br", "hr", "b", "i", "u", "s", "em", "strong", "small", "sub",
        "sup", "code", "pre", "kbd", "samp", "var", "ul", "ol", "li", "dl", "dt", "dd", "h1",
        "h2", "h3", "h4", "h5", "h6", "blockquote", "abbr", "mark", "details", "summary",
        "figure", "figcaption",
    )
)  # fmt: skip
_VOID = frozenset(("br", "hr", "col"))
#: Tags whose content is dropped with them (it is code or styling, not text).
_DROP_CONTENT = frozenset(
    (
        "script", "style", "template", "noscript", "iframe", "object", "embed", "svg", "math",
        "textarea", "select", "title", "head",
    )
)  # fmt: skip
_ATTRIBUTES = frozenset(("colspan", "rowspan", "title", "align", "valign", "abbr", "scope"))
_NUMBER = re.compile(r"^\d{1,4}$")
_BASE64 = re.compile(r"^[A-Za-z0-9+/=\s]+$")

# Bounded (never the full repr of a large value), secrets redacted before their cuts.
_repr = Repr(limit=400, items=20)
#: A value that is not a container shows up to ``MAX_TEXT`` characters of its repr.
_long_repr = Repr(limit=MAX_TEXT, items=20)


class _Rebuilder(HTMLParser):
    """Writes back only allowed tags and attributes, with everything escaped."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self._open: list[str] = []
        self._dropping = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _DROP_CONTENT:
            self._dropping += 1
            return
        if self._dropping or tag not in _INERT:
            return
        kept = "".join(
            f' {name}="{esc(value)}"'
            for name, value in attrs
            if name in _ATTRIBUTES
            and value is not None
            and (name not in ("colspan", "rowspan") or _NUMBER.match(value))
        )
        if tag in _VOID:
            self.out.append(f"<{tag}{kept}/>")
            return
        self.out.append(f"<{tag}{kept}>")
        self._open.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _VOID and not self._dropping:
            self.handle_starttag(tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        if tag in _DROP_CONTENT:
            self._dropping = max(self._dropping - 1, 0)
            return
        if self._dropping or tag not in self._open:
            return
        while self._open:  # close whatever the source left open inside it
            inner = self._open.pop()
            self.out.append(f"</{inner}>")
            if inner == tag:
                break

    def handle_data(self, data: str) -> None:
        if not self._dropping:
            self.out.append(esc(data))

    def close(self) -> None:
        super().close()
        self.out.extend(f"</{tag}>" for tag in reversed(self._open))
        self._open.clear()


def sanitize_html(markup: str) -> str:
    """``markup`` rebuilt from an allow-list of inert tags (see the module docstring)."""
    parser = _Rebuilder()
    parser.feed(markup)
    parser.close()
    return "".join(parser.out)


# ---- the rich representation --------------------------------------------------------------


def rich_html(value: Any) -> str:
    """``value`` as safe HTML, in the richest form it offers (see the module docstring)."""
    value = redacted_frame(value)  # a frame's cells redacted before pandas cuts them
    for render in (_image, _html, _markdown):
        try:
            shown = render(value)
        except Exception:  # a repr that raises: try the next form
            shown = None
        if shown:
            return shown
    if isinstance(value, str):
        return pre(value)
    if isinstance(value, Mapping | list | tuple):
        return tree_html(value)
    return pre(safe_repr(value))


def safe_repr(value: Any) -> str:
    """``repr(value)``, shortened for containers, bounded for everything (never the full
    repr of a large value), never raising."""
    shorter = _repr if isinstance(value, Mapping | list | tuple | set) else _long_repr
    try:
        return shorter.repr(value)
    except Exception as exc:
        return failed(value, "repr", exc)


def pre(text: str, limit: int = MAX_TEXT) -> str:
    """Text in a ``<pre>`` block: escaped, wrapped, cut after ``limit`` characters."""
    cut, text = "", redact(text)  # before the cut: no part of a secret stays at its edge
    if len(text) > limit:
        cut = f"\n… {len(text) - limit:,} more characters"
        text = head(text, limit)
    return (
        f'<pre style="font-family:{esc(MONO)};font-size:11.5px;white-space:pre-wrap;'
        f'word-break:break-word;margin:2px 0;max-height:24em;overflow:auto">{esc(text)}'
        f'<span style="color:{MUTED}">{esc(cut)}</span></pre>'
    )


def _method(value: Any, name: str) -> Callable[..., Any] | None:
    if isinstance(value, type):  # a class's _repr_html_ is an unbound function
        return None
    method = getattr(value, name, None)
    return method if callable(method) else None


def _image(value: Any) -> str | None:
    for name, mime in (("_repr_png_", "image/png"), ("_repr_jpeg_", "image/jpeg")):
        method = _method(value, name)
        if method is not None:
            data = method()
            if isinstance(data, tuple):  # (data, metadata)
                data = data[0]
            shown = _img(data, mime)
            if shown:
                return shown
    svg = _method(value, "_repr_svg_")
    if svg is not None:
        data = svg()
        if isinstance(data, str) and len(data) <= MAX_IMAGE:
            return _img(data.encode(), "image/svg+xml")
    savefig = _method(value, "savefig")
    if savefig is not None:  # a figure (matplotlib's and friends'), drawn as a PNG
        buffer = io.BytesIO()
        savefig(buffer, format="png", bbox_inches="tight")
        return _img(buffer.getvalue(), "image/png")
    return None


def _img(data: Any, mime: str) -> str | None:
    if isinstance(data, str):  # already base64 (IPython's convention for some reprs)
        if not _BASE64.match(data):
            return None
        try:
            raw = base64.b64decode(data, validate=False)
        except (binascii.Error, ValueError):
            return None
    elif isinstance(data, bytes | bytearray):
        raw = bytes(data)
    else:
        return None
    if not raw or len(raw) > MAX_IMAGE:
        return None
    encoded = base64.b64encode(raw).decode("ascii")
    return (
        f'<img alt="output" src="data:{mime};base64,{encoded}" '
        'style="max-width:100%;max-height:32em;display:block;margin:2px 0"/>'
    )


def _repr_text(value: Any, name: str) -> str | None:
    """What ``value``'s text repr ``name`` (``_repr_html_``...) gives, when it is a
    non-blank text (IPython's ``(data, metadata)`` form unwrapped), else None."""
    method = _method(value, name)
    if method is None:
        return None
    text = method()
    if isinstance(text, tuple):  # (data, metadata)
        text = text[0]
    return text if isinstance(text, str) and text.strip() else None


def _html(value: Any) -> str | None:
    markup = _repr_text(value, "_repr_html_")
    if markup is None or len(markup) > MAX_HTML:
        return None
    return (
        '<div class="jp-RenderedHTMLCommon" style="overflow:auto;max-height:32em;'
        f'padding:0;font-size:12px">{sanitize_html(markup)}</div>'
    )


_markdown_parser: MarkdownIt | None = None


def _markdown(value: Any) -> str | None:
    text = _repr_text(value, "_repr_markdown_")
    if text is None:
        return None
    global _markdown_parser
    if _markdown_parser is None:  # no rich values: this markdown has no ``$name`` to fill
        _markdown_parser = commonmark.make_parser()
    return commonmark.render(_markdown_parser, head(text, MAX_TEXT))  # raw HTML off: text escaped


# ---- a collapsible tree ----------------------------------------------------------------


def tree_html(value: Any, open_levels: int = 2) -> str:
    """Nested dicts, lists and tuples as ``<details>`` that open and close; the first
    ``open_levels`` are open. Bounded (``TREE_ENTRIES`` in all)."""
    budget = [TREE_ENTRIES]
    inner = _tree(value, 0, open_levels, budget, set())
    return (
        f'<div style="font-family:{esc(MONO)};font-size:11.5px;line-height:1.5;'
        f'max-height:32em;overflow:auto">{inner}</div>'
    )


def _tree(value: Any, depth: int, open_levels: int, budget: list[int], seen: set[int]) -> str:
    container = isinstance(value, Mapping | list | tuple)
    if not container or depth >= TREE_DEPTH or id(value) in seen:
        return f"<span>{esc(shorten(safe_repr(value), 500))}</span>"
    if isinstance(value, Mapping):
        entries = list(value.items())
        what = f"{type(value).__name__} ({len(entries)} key{'s' * (len(entries) != 1)})"
    else:
        entries = list(enumerate(value))
        what = f"{type(value).__name__} ({len(entries)} item{'s' * (len(entries) != 1)})"
    if not entries:
        return f"<span>{esc(safe_repr(value))}</span>"
    seen = seen | {id(value)}
    rows = []
    for key, item in entries[:TREE_WIDTH]:
        if budget[0] <= 0:
            break
        budget[0] -= 1
        label = esc(shorten(safe_repr(key), 120))
        child = _tree(item, depth + 1, open_levels, budget, seen)
        rows.append(f'<li><span style="color:{MUTED}">{label}:</span> {child}</li>')
    hidden = len(entries) - len(rows)
    if hidden:
        rows.append(f'<li style="color:{MUTED}">… {hidden:,} more</li>')
    state = ' open=""' if depth < open_levels else ""
    return (
        f'<details{state}><summary style="cursor:pointer;color:{MUTED}">{esc(what)}</summary>'
        f'<ul style="list-style:none;margin:0;padding-left:1.2em">{"".join(rows)}</ul></details>'
    )

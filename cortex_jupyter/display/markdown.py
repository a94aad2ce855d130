"""The response as HTML: safe markdown, highlighted code, ``$name`` filled in, streamed cheaply.

Safety: markdown-it-py's CommonMark with raw HTML off, so ``<script>`` written by the
model comes out as text; links and images only with ``http``, ``https``, ``mailto`` (and
``data:image/...`` for images) or no scheme at all; code highlighted by Pygments into
inline styles, so a saved notebook shows colours with no stylesheet.

Streaming: rendering a 16 KB document costs ~35 ms (NOTES.md), and a reply is redrawn up
to 25 times a second, so ``IncrementalMarkdown`` renders finished blocks once and on each
update re-parses only the tail. A block is finished when the next top-level block starts
on a complete line after a blank line: CommonMark can then no longer change it (nothing
re-opens a closed block after a blank line, and the next block's start line is fixed).
Two things reach across blocks and are handled by starting over: link reference
definitions (``[x]: url`` anywhere defines ``[x]`` everywhere) and ``$name`` values that
changed since a block was cached. The output equals a full render at every step; the
tests check that over many chunkings.

``$name`` / ``$name.key`` in the text (not in code) show the value's short ``str`` when
``values`` has it and stay as written when not; ``$$`` is a literal ``$``.
"""

from __future__ import annotations

import re
import reprlib
from collections.abc import Mapping, Sequence
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.rules_core import StateCore
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict
from pygments import highlight as pygments_highlight
from pygments.formatters import HtmlFormatter
from pygments.lexer import Lexer
from pygments.lexers import get_lexer_by_name
from pygments.util import ClassNotFound

from cortex_jupyter.runtime.variables import REFERENCE, resolve

from . import theme
from .theme import clean, esc

_SAFE_SCHEME = re.compile(r"^(?:https?|mailto):", re.IGNORECASE)
_SAFE_IMAGE_DATA = re.compile(r"^data:image/(?:gif|png|jpeg|webp);", re.IGNORECASE)
_HAS_SCHEME = re.compile(r"^[a-z][a-z0-9+.\-]*:", re.IGNORECASE)
_MAYBE_DEFINITION = re.compile(r"^ {0,3}\[", re.MULTILINE)
_MAX_HIGHLIGHT = 200_000  # characters; beyond this a code block is shown plain
_VALUE_LIMIT = 200

_PRE_CODE_STYLE = "background:none;color:inherit;padding:0"
_PRE_STYLE = (
    f"background:{theme.CODE_BG};color:{theme.TEXT};padding:8px 10px;border-radius:6px;"
    f"overflow-x:auto;font-family:{theme.MONO};font-size:12.5px;line-height:1.45;margin:0 0 1em"
)
_CODE_STYLE = (
    f"background:{theme.CODE_BG};color:{theme.TEXT};padding:0.1em 0.3em;border-radius:4px;"
    f"font-family:{theme.MONO};font-size:0.92em"
)

_short = reprlib.Repr()
_short.maxstring = _short.maxother = _VALUE_LIMIT
_short.maxlist = _short.maxdict = _short.maxtuple = _short.maxset = 10


def short_str(value: Any, limit: int = _VALUE_LIMIT) -> str:
    """The text a ``$name`` shows: ``str`` of strings and scalars, a short repr of
    containers (never the ``str`` of a million-item list), cut to ``limit``."""
    try:
        if isinstance(value, str | int | float | bool) or value is None:
            text = str(value)
        elif isinstance(value, list | tuple | dict | set | frozenset):
            text = _short.repr(value)
        else:
            text = str(value)
    except Exception as exc:  # a broken __str__ must not break the response
        text = f"<{type(value).__name__} (str failed: {type(exc).__name__})>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def fill_references(text: str, values: Mapping[str, Any]) -> tuple[str, dict[str, str | None]]:
    """``text`` with each ``$name[.path]`` that ``values`` can resolve replaced.

    Returns the new text and what each reference showed (``None``: left as written),
    which is how a cache knows when a value change makes its HTML stale. The longest
    resolvable part of a dotted path is used, so ``see $report.`` or
    ``$report.Then`` still show ``report``.
    """
    used: dict[str, str | None] = {}

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if not name:
            return "$"
        parts = match.group(2).split(".")[1:]
        for keep in range(len(parts), -1, -1):
            ref = ".".join([name, *parts[:keep]])
            shown = _lookup(ref, values)
            used[ref] = shown
            if shown is not None:
                rest = "".join("." + p for p in parts[keep:])
                return shown + rest
        return match.group(0)

    return REFERENCE.sub(replace, text), used


def _lookup(ref: str, values: Mapping[str, Any]) -> str | None:
    if ref.split(".", 1)[0] not in values:
        return None
    try:
        return short_str(resolve("$" + ref, [values]))
    except Exception:  # BadReference, or a property that raised: show the name as written
        return None


# --------------------------------------------------------------------------- code


class _Highlighter:
    """Pygments with inline styles; lexers are looked up once per language name."""

    def __init__(self) -> None:
        self._formatter = HtmlFormatter(nowrap=True, noclasses=True, style=theme.PYGMENTS_STYLE)
        self._lexers: dict[str, Lexer | None] = {}

    def __call__(self, code: str, lang: str) -> str:
        lexer = self._lexer(lang) if lang and len(code) <= _MAX_HIGHLIGHT else None
        inner = esc(code) if lexer is None else pygments_highlight(code, lexer, self._formatter)
        label = f' data-lang="{esc(lang)}"' if lang else ""
        # The inner <code> is styled too: JupyterLab's dark theme paints a bare one black.
        code = f'<code style="{_PRE_CODE_STYLE}">{inner}</code>'
        return f'<pre style="{_PRE_STYLE}"{label}>{code}</pre>\n'

    def _lexer(self, lang: str) -> Lexer | None:
        key = lang.lower()
        if key not in self._lexers:
            try:
                self._lexers[key] = get_lexer_by_name(key, stripnl=False, ensurenl=False)
            except ClassNotFound:
                self._lexers[key] = None
        return self._lexers[key]


# --------------------------------------------------------------------------- the parser


def _validate_link(url: str) -> bool:
    url = url.strip()
    if _SAFE_SCHEME.match(url) or _SAFE_IMAGE_DATA.match(url):
        return True
    return not _HAS_SCHEME.match(url)  # relative links and anchors carry no scheme


def _fill_values(state: StateCore) -> None:
    """Core rule: ``$name`` in text tokens (never in code) from ``env["cortex_values"]``."""
    values = state.env.get("cortex_values")
    if not values:
        values = {}
    used = state.env.setdefault("cortex_used", {})
    for token in state.tokens:
        if token.type != "inline" or not token.children:
            continue
        for child in token.children:
            if child.type == "text" and "$" in child.content:
                child.content, refs = fill_references(child.content, values)
                used.update(refs)


def make_parser(highlight: bool = True) -> MarkdownIt:
    """A markdown-it parser with our safety settings, tables, strikethrough and code."""
    md = MarkdownIt("commonmark", {"html": False})
    md.enable(["table", "strikethrough"])
    md.validateLink = _validate_link  # type: ignore[method-assign]
    md.core.ruler.after("text_join", "cortex_values", _fill_values)
    highlighter = _Highlighter()

    def fence(
        self: Any, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType
    ) -> str:
        token = tokens[idx]
        lang = token.info.strip().split(maxsplit=1)[0] if token.info.strip() else ""
        return highlighter(token.content, lang if highlight else "")

    def code_block(
        self: Any, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType
    ) -> str:
        return highlighter(tokens[idx].content, "")

    def code_inline(
        self: Any, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType
    ) -> str:
        return f'<code style="{_CODE_STYLE}">{esc(tokens[idx].content)}</code>'

    def link_open(
        self: Any, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType
    ) -> str:
        # A click must not navigate the notebook's own page away.
        tokens[idx].attrSet("target", "_blank")
        tokens[idx].attrSet("rel", "noopener noreferrer nofollow")
        return str(self.renderToken(tokens, idx, options, env))

    for name, rule in (
        ("fence", fence),
        ("code_block", code_block),
        ("code_inline", code_inline),
        ("link_open", link_open),
    ):
        md.add_render_rule(name, rule)
    return md


_default_parser: MarkdownIt | None = None


def render_markdown(text: str, values: Mapping[str, Any] | None = None) -> str:
    """The whole of ``text`` as HTML in one go (a saved snapshot, or a reference)."""
    global _default_parser
    if _default_parser is None:
        _default_parser = make_parser()
    env: dict[str, Any] = {"cortex_values": values or {}}
    return str(_default_parser.render(_normalize(text), env))


def _normalize(text: str) -> str:
    """What markdown-it does to its input first (line breaks), done up front so offsets
    agree, and the characters no HTML document may hold (control characters, lone
    surrogates, which would also break saving the notebook as UTF-8) replaced."""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return clean(text)


# --------------------------------------------------------------------------- streaming


class IncrementalMarkdown:
    """Renders a growing markdown document, re-parsing only its unfinished tail.

    Call ``render(text, values)`` with the whole text so far on every redraw. Counters
    for the benchmark and the tests: ``renders`` (calls), ``restarts`` (full re-renders
    forced by a new link definition, a changed value or a text that is not an
    extension of the last one), ``parsed_chars`` (characters parsed, in total) and
    ``last_parsed`` (in the last call).
    """

    def __init__(self, parser: MarkdownIt | None = None) -> None:
        self._md = parser if parser is not None else make_parser()
        self.renders = 0
        self.restarts = 0
        self.parsed_chars = 0
        self.last_parsed = 0
        self.reset()

    def reset(self) -> None:
        """Forget every cached block."""
        self._done_src = ""
        self._done_html = ""  # the HTML of the cached (finished) blocks
        self._committed_refs: dict[str, Any] = {}  # link labels defined in cached blocks
        self._render_refs: dict[str, Any] = {}  # all labels the cached HTML was made with
        self._used: dict[str, str | None] = {}

    @property
    def cached_chars(self) -> int:
        """Characters of source whose HTML is cached (not parsed again)."""
        return len(self._done_src)

    @property
    def cached_html(self) -> str:
        """The HTML of the blocks already finished: settled until the next restart.

        Every ``render`` returns it as a prefix, so a view may send it once and then
        only what follows it.
        """
        return self._done_html

    def render(self, text: str, values: Mapping[str, Any] | None = None) -> str:
        self.renders += 1
        text = _normalize(text)
        values = values or {}
        if self._done_src and (not text.startswith(self._done_src) or self._stale(values)):
            self.restarts += 1
            self.reset()
        html = self._render_tail(text, values)
        if html is None:  # the tail defined a link label the cached blocks may use
            self.restarts += 1
            self.reset()
            html = self._render_tail(text, values)
            assert html is not None
        return html

    def _stale(self, values: Mapping[str, Any]) -> bool:
        return any(_lookup(ref, values) != shown for ref, shown in self._used.items())

    def _render_tail(self, text: str, values: Mapping[str, Any]) -> str | None:
        tail = text[len(self._done_src) :]
        env: dict[str, Any] = {
            "references": dict(self._committed_refs),
            "cortex_values": values,
            "cortex_used": {},
        }
        tokens = self._md.parse(tail, env)
        self.parsed_chars += len(tail)
        self.last_parsed = len(tail)
        if not self._done_src:
            self._render_refs = dict(env["references"])
        elif env["references"] != self._render_refs:
            return None  # a link label appeared or changed: cached blocks may use it
        cut = _finished(tokens, tail)
        options = self._md.options
        if cut is None:
            return self._done_html + str(self._md.renderer.render(tokens, options, env))
        index, offset = cut
        self._done_html += str(self._md.renderer.render(tokens[:index], options, env))
        self._commit(tail[:offset])
        self._used.update(env["cortex_used"])
        return self._done_html + str(self._md.renderer.render(tokens[index:], options, env))

    def _commit(self, source: str) -> None:
        self._done_src += source
        if _MAYBE_DEFINITION.search(source):
            env: dict[str, Any] = {"references": dict(self._committed_refs)}
            self._md.parse(source, env)
            self._committed_refs = env["references"]


def _finished(tokens: Sequence[Token], tail: str) -> tuple[int, int] | None:
    """Where the finished blocks of ``tail`` end: (token index, character offset).

    The cut goes before the last top-level block that starts on a complete line right
    after a blank line; ``None`` when there is no such block yet.
    """
    lines = tail.split("\n")
    complete = len(lines) - 1  # the last line may still be growing
    for index in range(len(tokens) - 1, 0, -1):
        token = tokens[index]
        if token.level != 0 or token.nesting == -1 or token.map is None:
            continue
        line = token.map[0]
        if 0 < line < complete and not lines[line - 1].strip(" \t"):
            offset = sum(len(lines[i]) + 1 for i in range(line))
            return index, offset
    return None

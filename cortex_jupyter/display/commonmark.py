"""The markdown parser the display renders with: CommonMark, made safe, with math and ``$name``.

It is apart from ``markdown.py`` (the answer, streamed) because two renderers build on it
that must not import each other: ``rich.py`` shows an output's ``_repr_markdown_`` with it,
and ``markdown.py`` shows an answer whose ``$name`` may be such a rich output. The parser
takes the renderer of rich values as an argument (``make_parser(rich=...)``), so the
answer's parser gets ``rich.rich_html`` and ``rich.py``'s own needs none. The rules
themselves (safe links, images not loaded, math kept for MathJax, code highlighted with
inline styles) are ``markdown.py``'s docstring.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
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

from cortex_jupyter.runtime.core.values.answer import rich_value, scan, show

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
    """Inline rule: math, the protocol's ``$$`` and ``$name`` references (see
    ``markdown.py``'s docstring). Runs before the escape rule, which would read ``\\(``
    as ``(``."""
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


#: What renders a rich value (a DataFrame, a figure) that a ``$name`` stands for.
RichRenderer = Callable[[Any], str]
#: A render rule of ours: the token list and the index, as markdown-it passes them.
_Rule = Callable[[Sequence[Token], int], str]


def make_parser(highlight: bool = True, rich: RichRenderer | None = None) -> MarkdownIt:
    """A markdown-it parser with our safety settings, tables, strikethrough, code, math
    and ``$name`` references. ``rich`` renders a value whose rich form a ``$name``
    shows (safe HTML); without it such a value shows its text."""
    md = MarkdownIt("commonmark", {"html": False})
    md.enable(["table", "strikethrough"])
    md.validateLink = _validate_link  # type: ignore[method-assign]
    md.inline.ruler.before("escape", "cortex_dollars", _dollars)
    md.core.ruler.after("text_join", "cortex_values", _fill_values)
    highlighter = _Highlighter()

    def fence(tokens: Sequence[Token], idx: int) -> str:
        token = tokens[idx]
        lang = token.info.strip().split(maxsplit=1)[0] if token.info.strip() else ""
        return highlighter(token.content, lang if highlight else "")

    def cortex_rich(tokens: Sequence[Token], idx: int) -> str:
        if rich is None:
            return _text_html(tokens[idx].content)
        # Whatever `$` or `\\` a table holds is text: MathJax skips this class. A block
        # (a browser would end a <p> at the table anyway), so the class stays on it.
        return f'<div class="{LITERAL_CLASS}">{rich(tokens[idx].meta["value"])}</div>'

    rules: dict[str, _Rule] = {
        "fence": fence,
        "code_block": lambda tokens, idx: highlighter(tokens[idx].content, ""),
        "code_inline": lambda tokens, idx: (
            f'<code style="{_CODE_STYLE}">{esc(tokens[idx].content)}</code>'
        ),
        "text": lambda tokens, idx: _text_html(tokens[idx].content),
        "math": lambda tokens, idx: _math_html(
            tokens[idx].markup, tokens[idx].content, tokens[idx].info
        ),
        "cortex_rich": cortex_rich,
    }
    for name, rule in rules.items():
        md.add_render_rule(name, _plain_rule(rule))
    md.add_render_rule("link_open", _link_open)
    md.add_render_rule("image", _image)
    return md


def _plain_rule(rule: _Rule) -> Callable[..., str]:
    """``rule`` as markdown-it calls a render rule (renderer, tokens, index, options, env)."""

    def render(
        self: Any, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType
    ) -> str:
        return rule(tokens, idx)

    return render


def _link_open(
    self: Any, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType
) -> str:
    # A click must not navigate the notebook's own page away.
    tokens[idx].attrSet("target", "_blank")
    tokens[idx].attrSet("rel", _LINK_REL)
    return str(self.renderToken(tokens, idx, options, env))


def _image(self: Any, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType) -> str:
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
        f'<a href="{escapeHtml(src)}" target="_blank" rel="{_LINK_REL}" title="{hint}">{label}</a>'
    )


def render(parser: MarkdownIt, text: str, values: Mapping[str, Any] | None = None) -> str:
    """The whole of ``text`` as HTML in one go, ``$name`` filled from ``values``."""
    env: dict[str, Any] = {"cortex_values": values or {}}
    return str(parser.render(normalize(text), env))


def normalize(text: str) -> str:
    """What markdown-it does to its input first (line breaks), done up front so offsets
    agree, and the characters no HTML document may hold (control characters, lone
    surrogates, which would also break saving the notebook as UTF-8) replaced."""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return clean(text)

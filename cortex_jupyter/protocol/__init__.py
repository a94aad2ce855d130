"""The protocol layer: model text in, events out. Pure, synchronous, stdlib only.

``Parser(dialect="cortex")`` reads the Cortex streaming execution protocol (and the
sigil, cogency and hermes dialects) incrementally; see ARCHITECTURE.md for the
semantics.
"""

from __future__ import annotations

from . import events
from .actions import MAX_JSON_DEPTH
from .auto import AutoParser
from .base import MAX_ACTION_CHARS, MAX_TEXT_CHARS, Parser, ParserClosedError
from .events import *  # noqa: F403 - the event vocabulary, as events.__all__ lists it
from .sigil import SigilParser
from .xml import XmlParser

Parser._dialects.update(
    cortex=XmlParser, cogency=XmlParser, hermes=XmlParser, sigil=SigilParser, auto=AutoParser
)


def parse(text: str, dialect: str = "cortex") -> list[events.Event]:
    """All events of a complete text (a convenience for tests and notebooks)."""
    parser = Parser(dialect)
    return parser.feed(text) + parser.close()


__all__ = [
    "MAX_ACTION_CHARS",
    "MAX_JSON_DEPTH",
    "MAX_TEXT_CHARS",
    "Parser",
    "ParserClosedError",
    "parse",
]
__all__ += events.__all__

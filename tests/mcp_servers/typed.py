"""An MCP server (the SDK's ``MCPServer``) whose tools declare their parameters the way
pydantic writes them, not as a plain ``"type"``: ``int | None`` is ``anyOf`` with
``null``, an enum is a ``$ref`` into ``$defs``, a union of two numbers ``anyOf`` without
null (and a list of numbers, a plain array). Each tool answers with what it received,
type and value, so a test sees what a ``$name`` value became on the way. ``python
typed.py`` serves over stdio.
"""

from __future__ import annotations

import enum
import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("typed")


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


def _seen(value: object) -> str:
    return f"{type(value).__name__}:{value!r}"


@server.tool()
def page(number: int | None = None) -> str:
    """The page asked for (an optional whole number)."""
    return _seen(number)


@server.tool()
def scale(factor: float | int) -> str:
    """A factor, written as either kind of number."""
    return _seen(factor)


@server.tool()
def level(value: Level) -> str:
    """A level: 1 or 2."""
    return _seen(value)


@server.tool()
def label(text: str | None) -> str:
    """A label, or none."""
    return _seen(text)


@server.tool()
def total(values: list[float]) -> str:
    """Some numbers."""
    return _seen(values)


if __name__ == "__main__":
    print("typed: server starting", file=sys.stderr, flush=True)
    server.run("stdio")

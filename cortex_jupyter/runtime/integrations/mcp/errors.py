"""The errors of MCP servers and their tools, in one place: every other module of this
package raises them, and notebooks catch them (``cortex_jupyter.mcp`` re-exports them).
Each is a ``CortexRuntimeError`` whose message is one line naming the server, the tool
or the config entry that was wrong."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from cortex_jupyter.runtime.core.errors import CortexRuntimeError, InvalidArguments

__all__ = [
    "InvalidMcpArguments",
    "McpConfigError",
    "McpServerError",
    "McpToolError",
    "UnknownMcpServer",
]


class McpServerError(CortexRuntimeError):
    """Raised when an MCP server will not start, crashes, hangs or is not running; its
    tools fail with this error too."""

    def __init__(self, name: str, what: str, reason: str) -> None:
        self.name, self.what, self.reason = name, what, reason
        super().__init__(f"MCP server {name!r} {what}: {reason}")


class McpToolError(CortexRuntimeError):
    """Raised when an MCP tool reports an error (an ``isError`` result or an error
    response): the message is the server's own text."""

    def __init__(self, server: str, tool: str, message: str) -> None:
        self.server, self.tool, self.message = server, tool, message
        super().__init__(f"MCP tool {tool!r} of server {server!r} failed: {message}")


class InvalidMcpArguments(InvalidArguments):
    """Raised when an action's parameters do not fit an MCP tool's input schema (checked
    before the call, so the server never sees them). An ``InvalidArguments``, with each
    problem the schema validator found in ``problems``."""

    def __init__(
        self,
        name: str,
        problems: Sequence[str],
        takes: str,
        missing: Sequence[str] = (),
        unexpected: Sequence[str] = (),
    ) -> None:
        self.type = "tool"
        self.name = name
        self.problems = tuple(problems)
        self.missing = tuple(missing)
        self.unexpected = tuple(unexpected)
        self.takes = takes
        # Not InvalidArguments.__init__: the message lists the schema's problems.
        CortexRuntimeError.__init__(
            self,
            f"MCP tool {name!r} cannot be called: {'; '.join(self.problems)}; it takes ({takes})",
        )


class McpConfigError(CortexRuntimeError):
    """Raised when an MCP server's configuration is wrong (a bad name, both or neither of
    command and url, an unset ``${VARIABLE}``, an unreadable config file)."""

    def __init__(self, where: str, problem: str) -> None:
        self.where, self.problem = where, problem
        super().__init__(f"MCP configuration {where}: {problem}")


class UnknownMcpServer(CortexRuntimeError):
    """Raised when a server name names no added MCP server."""

    def __init__(self, name: str, known: Iterable[str]) -> None:
        self.name = name
        self.known = tuple(sorted(known))
        listed = ", ".join(self.known) if self.known else "none"
        super().__init__(f"no MCP server named {name!r} was added; servers: {listed}")

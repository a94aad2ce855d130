"""A small MCP server written with the SDK's ``MCPServer`` (FastMCP before mcp 2).

``python demo.py`` serves over stdio; ``python demo.py --http PORT`` over streamable
HTTP on 127.0.0.1, where every request must carry ``Authorization: Bearer $DEMO_TOKEN``
when that variable is set (a 401 otherwise). Each tool pins one behaviour the client
must handle: structured output (a dict, a wrapped plain value), text, several text parts,
an image, concurrent calls, ``isError``, a crash, a hang, log messages and progress, a
destructive tool, tools that appear and disappear (``tools/list_changed``), and a
resource. ``--hang`` never answers; ``--linger`` outlives its stdin (only a kill ends it).
"""

from __future__ import annotations

import argparse
import base64
import os
import sys
import warnings
from typing import Any

if __name__ == "__main__":
    # Said before the imports below, which take seconds on a loaded machine: a test of a
    # hung server waits for this line, and it must not depend on how fast mcp imports.
    print("demo: server starting", file=sys.stderr, flush=True)

import anyio
from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.types import TextContent, ToolAnnotations

# Log messages are what this server exists to send, deprecated in the 2026 protocol or not.
warnings.filterwarnings("ignore", category=MCPDeprecationWarning)

# 1×1 transparent PNG.
PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="
)

server = MCPServer("demo")
# What the server saw being cancelled: the client must send notifications/cancelled.
seen = {"cancelled": 0, "calls": 0}


@server.tool()
def add(a: int, b: int) -> int:
    """Add two whole numbers."""
    return a + b


@server.tool()
def stats(values: list[float]) -> dict[str, float]:
    """Count, total and mean of some numbers."""
    total = sum(values)
    return {"count": len(values), "total": total, "mean": total / len(values) if values else 0}


@server.tool(structured_output=False)
def shout(text: str) -> str:
    """The text in capitals (text content only)."""
    return text.upper()


@server.tool(structured_output=False)
def parts(n: int = 2) -> list[TextContent]:
    """n text parts: part 1, part 2..."""
    return [TextContent(type="text", text=f"part {i}") for i in range(1, n + 1)]


@server.tool(structured_output=False)
def picture() -> list[Any]:
    """A tiny PNG image and a caption."""
    return ["a pixel", Image(data=PIXEL, format="png")]


@server.tool()
def fail(message: str) -> str:
    """Always fails with the message (an isError result)."""
    raise ToolError(message)


@server.tool()
def crash() -> str:
    """Exits the server process in the middle of the call."""
    print("demo: crashing on purpose", file=sys.stderr, flush=True)
    os._exit(3)


@server.tool()
async def sleep(seconds: float, ctx: Context) -> str:
    """Sleeps, then answers; counts the calls the client cancelled."""
    seen["calls"] += 1
    await ctx.info("sleeping")  # the client knows the call has arrived
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        seen["cancelled"] += 1
        raise
    return f"slept {seconds:g}"


_groups: dict[str, tuple[list[int], anyio.Event]] = {}


@server.tool()
async def meet(group: str, n: int) -> int:
    """Returns once n calls of the same group run at the same time (calls made one after
    another never return)."""
    arrived, everyone = _groups.setdefault(group, ([0], anyio.Event()))
    arrived[0] += 1
    if arrived[0] >= n:
        everyone.set()
    await everyone.wait()
    return arrived[0]


@server.tool()
def cancellations() -> dict[str, int]:
    """How many sleep calls were started and how many were cancelled by the client."""
    return dict(seen)


@server.tool()
async def chatty(n: int, ctx: Context) -> str:
    """Sends n log messages and progress reports while it runs."""
    for i in range(1, n + 1):
        await ctx.info(f"step {i} of {n}")
        await ctx.report_progress(i, n, f"step {i}")
    return "done"


@server.tool(annotations=ToolAnnotations(destructiveHint=True))
def wipe(path: str) -> str:
    """Pretends to delete a path (marked destructive)."""
    return f"wiped {path}"


async def _extra(x: int) -> int:
    return x * 10


@server.tool()
async def grow(name: str, ctx: Context) -> str:
    """Adds a tool called name (it multiplies x by 10) and says the list changed."""
    server.add_tool(_extra, name=name, description=f"Added at run time as {name}.")
    await ctx.session.send_tool_list_changed()
    return f"added {name}"


@server.tool()
async def shrink(name: str, ctx: Context) -> str:
    """Removes the tool called name and says the list changed."""
    server.remove_tool(name)
    await ctx.session.send_tool_list_changed()
    return f"removed {name}"


@server.resource("demo://readme", mime_type="text/markdown")
def readme() -> str:
    """The demo server's readme."""
    return "# Demo\nA server for tests."


class _RequireBearer:
    """ASGI middleware: a 401 unless the request carries the expected bearer token."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        sent = dict(scope.get("headers", ())).get(b"authorization")
        if scope["type"] == "http" and sent != self.expected:
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b"missing or wrong bearer token"})
            return
        await self.app(scope, receive, send)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP")
    parser.add_argument("--hang", action="store_true", help="never answer (a hung server)")
    parser.add_argument("--tag", help="ignored: lets a test find this process")
    parser.add_argument(
        "--linger", action="store_true", help="keep running after stdin closes (until killed)"
    )
    args = parser.parse_args()
    if args.hang:
        anyio.run(anyio.sleep_forever)
    if args.http is None:
        server.run("stdio")
        if args.linger:
            anyio.run(anyio.sleep_forever)
        return
    import uvicorn

    app: Any = server.streamable_http_app()
    token = os.environ.get("DEMO_TOKEN")
    if token:
        app = _RequireBearer(app, token)
    uvicorn.run(app, host="127.0.0.1", port=args.http, log_level="warning")


if __name__ == "__main__":
    main()

"""Tools from Model Context Protocol servers, for notebooks: ``cortex_jupyter.mcp.add(...)``.

Each server's tools become ``NAME.TOOL`` tools of the default registry (the one
``%%cortex`` cells use), so the model can call them like any other tool::

    import cortex_jupyter.mcp as mcp

    mcp.add("fs", ["npx", "-y", "@modelcontextprotocol/server-filesystem", "."])
    mcp.add("gh", url="https://api.githubcopilot.com/mcp/",
            headers={"Authorization": "Bearer ${GITHUB_TOKEN}"})
    mcp.load_config("mcp.json")   # {"mcpServers": {...}} (Claude Desktop) or {"servers": ...}
    mcp.servers()                 # state, tools and last error of each server
    print(mcp.status("fs").details())
    mcp.remove("fs")

This module is the public name of ``cortex_jupyter.runtime.integrations.mcp``: it
re-exports that package's names, so both say the same thing and only one lists them.
The functions above work on one ``McpManager`` shared by the notebook (its
``notebook`` module); the classes are documented where they are defined.
"""

from __future__ import annotations

from cortex_jupyter.runtime.integrations.mcp import *  # noqa: F403
from cortex_jupyter.runtime.integrations.mcp import __all__ as __all__

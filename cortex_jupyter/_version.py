"""The package's version, in a module of its own so that any layer can read it (the MCP
client sends it in its handshake) without importing the package's root, which names
every layer."""

__version__ = "0.1.0"

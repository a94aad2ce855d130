"""Registry names as native function-calling names (``fs.read_file`` as
``fs__read_file``) and back.

MCP tools are where dotted names come from, which is why this lives here for now; the
loop's native tool calls use it for every tool, so it is kept apart from the client
(it needs no server) and can move down to the core as it is.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

__all__ = ["NATIVE_NAME", "NativeNames"]

#: What OpenAI-style native tool names may look like.
NATIVE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class NativeNames:
    """Registry names (``fs.read_file``) to native function names (``fs__read_file``,
    matching ``NATIVE_NAME``) and back, unique within one table.

    A dot becomes ``__`` and any other character outside ``[A-Za-z0-9_-]`` ``_``; a name
    that is then too long or already taken ends in a short hash of the original instead.
    """

    def __init__(self, names: Iterable[str] = ()) -> None:
        self._native: dict[str, str] = {}
        self._original: dict[str, str] = {}
        # Names that are native already keep themselves: they go first.
        for name in sorted(names, key=lambda name: not NATIVE_NAME.match(name)):
            self.native(name)

    def native(self, name: str) -> str:
        """The native name for ``name`` (the same one every time)."""
        if name in self._native:
            return self._native[name]
        base = re.sub(r"[^A-Za-z0-9_-]", "_", name.replace(".", "__")) or "_"
        native = base
        if len(native) > 64 or native in self._original:
            digest = hashlib.sha256(name.encode()).hexdigest()[:10]
            native = f"{base[:53]}_{digest}"
        self._native[name] = native
        self._original[native] = name
        return native

    def original(self, native: str) -> str:
        """The registry name a native name stands for (an unknown one as it is)."""
        return self._original.get(native, native)

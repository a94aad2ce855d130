"""MCP's data in the registry's terms, both ways: a server's tool becomes an ``McpTool``
(a ``ToolSpec`` whose input schema checks the arguments before the call), and a tool's
result becomes what a node keeps (``tool_output``: structured content, text, or an
``McpContent`` with images, audio and resources).

Kept apart from the client because none of it talks to a server: it is pure conversion,
testable on the SDK's types alone.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cortex_jupyter.runtime.core.calls.registry import ToolSpec
from cortex_jupyter.runtime.core.trust.secrets import truncate
from cortex_jupyter.runtime.core.values.schema import Kinds, schema_kinds
from cortex_jupyter.runtime.integrations.mcp.errors import InvalidMcpArguments

if TYPE_CHECKING:
    from jsonschema.protocols import Validator
    from mcp.types import CallToolResult

__all__ = ["McpContent", "McpResource", "McpTool", "tool_output"]

_MAX_PROBLEMS = 8
# How deep _json_ready looks for numpy values inside arguments.
_MAX_DEPTH = 64


@dataclass(frozen=True)
class McpResource:
    """A resource an MCP tool returned: embedded (``text`` or base64 ``blob``) or only
    linked (neither)."""

    uri: str
    mime_type: str | None = None
    text: str | None = None
    blob: str | None = None
    name: str | None = None

    def __repr__(self) -> str:
        if self.text is not None:
            body = f"{len(self.text):,} characters"
        elif self.blob is not None:
            body = f"{_decoded_size(self.blob):,} bytes"
        else:
            body = "link"
        mime = f" {self.mime_type}" if self.mime_type else ""
        return f"<resource {self.uri}{mime}: {body}>"


@dataclass(frozen=True)
class McpContent:
    """What an MCP tool returned when it is more than text: its text parts joined
    (``text``), its ``images`` and ``audio`` as ``(mime type, base64 data)`` pairs, and
    the ``resources`` it embedded or linked.

    The repr says what is there without the data (the model reads it); in a notebook the
    first PNG, JPEG or GIF image is shown (``_repr_mimebundle_``).
    """

    text: str = ""
    images: tuple[tuple[str, str], ...] = ()
    audio: tuple[tuple[str, str], ...] = ()
    resources: tuple[McpResource, ...] = ()

    def __repr__(self) -> str:
        shown = [f"text={truncate(self.text, 2000)!r}"] if self.text else []
        for label, items in (("images", self.images), ("audio", self.audio)):
            if items:
                sizes = ", ".join(f"{mime} {_decoded_size(data):,} bytes" for mime, data in items)
                shown.append(f"{label}=[{sizes}]")
        if self.resources:
            shown.append(f"resources={list(self.resources)!r}")
        return f"McpContent({', '.join(shown)})"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        bundle: dict[str, Any] = {"text/plain": repr(self)}
        for mime, data in self.images:
            if mime in ("image/png", "image/jpeg", "image/gif") and mime not in bundle:
                bundle[mime] = data
        return bundle


def _decoded_size(data: str) -> int:
    return len(data) * 3 // 4 - data[-2:].count("=")


def tool_output(result: CallToolResult, output_schema: Mapping[str, Any] | None = None) -> Any:
    """The output of a successful call, as a node keeps it.

    Structured content is the output (a dict; a plain value the server wrapped as
    ``{"result": value}``, as the SDK's ``MCPServer`` does for non-object return types,
    is unwrapped); otherwise text parts joined by newlines (a ``str``); with images,
    audio or resources an ``McpContent``; no content at all is ``None``.
    """
    if result.structured_content is not None:
        data = result.structured_content
        return data["result"] if _wraps_result(data, output_schema) else data
    texts: list[str] = []
    images: list[tuple[str, str]] = []
    audio: list[tuple[str, str]] = []
    resources: list[McpResource] = []
    for part in result.content:
        kind = part.type
        if kind == "text":
            texts.append(part.text)  # type: ignore[union-attr]
        elif kind in ("image", "audio"):
            media: Any = part
            (images if kind == "image" else audio).append((str(media.mime_type), str(media.data)))
        elif kind == "resource":
            inner: Any = part.resource  # type: ignore[union-attr]
            text, blob = getattr(inner, "text", None), getattr(inner, "blob", None)
            resources.append(McpResource(str(inner.uri), inner.mime_type, text, blob))
        elif kind == "resource_link":
            link: Any = part
            resources.append(McpResource(str(link.uri), link.mime_type, name=link.name))
    if images or audio or resources:
        return McpContent("\n".join(texts), tuple(images), tuple(audio), tuple(resources))
    return "\n".join(texts) if texts else None


def _wraps_result(data: Mapping[str, Any], schema: Mapping[str, Any] | None) -> bool:
    """Whether ``data`` is a plain value wrapped as ``{"result": value}``: its only key,
    and the only property its output schema (when there is one) declares."""
    if list(data) != ["result"]:
        return False
    if not schema:
        return True
    properties = schema.get("properties")
    return isinstance(properties, Mapping) and list(properties) == ["result"]


def _error_text(result: CallToolResult) -> str:
    texts = [part.text for part in result.content if part.type == "text"]
    return "\n".join(texts) or "the server reported an error without a message"


@dataclass(frozen=True)
class McpTool(ToolSpec):
    """An MCP server's tool as a registry entry named ``SERVER.TOOL``.

    ``parameters`` is the tool's input schema, ``check`` validates against it (raising
    ``InvalidMcpArguments``) and ``func(arguments)`` calls the tool.
    """

    server: str = ""
    #: The server's own name for the tool.
    tool: str = ""
    annotations: Mapping[str, Any] = field(default_factory=dict)
    output_schema: Mapping[str, Any] | None = None

    @functools.cached_property
    def _validator(self) -> Validator | None:
        """A validator for the input schema, or None when the schema is itself invalid
        (the server checks then)."""
        from jsonschema import SchemaError
        from jsonschema.validators import Draft202012Validator, validator_for

        cls = validator_for(self.parameters, default=Draft202012Validator)
        try:
            cls.check_schema(self.parameters)
        except SchemaError:
            return None
        return cls(self.parameters)

    def check(self, params: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        """``([arguments], {})`` for ``func``; raises ``InvalidMcpArguments``."""
        arguments = {key: _json_ready(value) for key, value in params.items()}
        validator = self._validator
        if validator is not None:
            errors = sorted(validator.iter_errors(arguments), key=lambda e: list(map(str, e.path)))
            if errors:
                problems = [_problem(error) for error in errors[:_MAX_PROBLEMS]]
                if len(errors) > _MAX_PROBLEMS:
                    problems.append(f"and {len(errors) - _MAX_PROBLEMS} more")
                missing, unexpected = self._missing_and_unexpected(arguments)
                raise InvalidMcpArguments(self.name, problems, self.takes(), missing, unexpected)
        return [arguments], {}

    def _missing_and_unexpected(self, arguments: Mapping[str, Any]) -> tuple[list[str], list[str]]:
        """Top-level names the schema requires and lacks, and names it does not allow."""
        required = self.parameters.get("required")
        missing = [k for k in required if k not in arguments] if isinstance(required, list) else []
        properties = self.parameters.get("properties")
        closed = self.parameters.get("additionalProperties") is False
        if (
            not closed
            or not isinstance(properties, Mapping)
            or "patternProperties" in self.parameters
        ):
            return missing, []
        return missing, [k for k in arguments if k not in properties]

    def wants(self, name: str) -> Kinds | None:
        """The JSON types the input schema declares for ``name`` (None: unchecked)."""
        properties = self.parameters.get("properties")
        if not isinstance(properties, Mapping):
            return None
        return schema_kinds(properties.get(name), self.parameters)

    def takes(self) -> str:
        """The parameters from the schema, e.g. ``a: integer, n: integer = 2``."""
        properties = self.parameters.get("properties")
        if not isinstance(properties, Mapping):
            return "any arguments"
        required = set(self.parameters.get("required") or ())
        shown = []
        for key, prop in properties.items():
            prop = prop if isinstance(prop, Mapping) else {}
            label = f"{key}: {'|'.join(schema_kinds(prop, self.parameters) or ['any'])}"
            if key in required:
                shown.append(label)
            elif "default" in prop:
                shown.append(f"{label} = {json.dumps(prop['default'])}")
            else:
                shown.append(f"{label} (optional)")
        return ", ".join(shown) or "no parameters"


def _json_ready(value: Any, depth: int = 0, path: frozenset[int] = frozenset()) -> Any:
    """``value`` with numpy's numbers and arrays, at any depth, as the Python values they
    hold: the arguments travel as JSON, which the SDK cannot write numpy's types in (and
    the schema check would refuse an ``np.int64`` for an ``integer``). A container that
    holds itself is left as it is at the loop (the schema check or JSON refuses it): each
    container on ``path`` is walked once, however often it is reached."""
    if type(value).__module__ == "numpy" and callable(getattr(value, "tolist", None)):
        return value.tolist()  # a scalar's Python value, an array's nested lists
    if depth >= _MAX_DEPTH or not isinstance(value, Mapping | list | tuple):
        return value
    if id(value) in path:
        return value
    inner = path | {id(value)}
    if isinstance(value, Mapping):
        return {key: _json_ready(item, depth + 1, inner) for key, item in value.items()}
    return [_json_ready(item, depth + 1, inner) for item in value]


def _problem(error: Any) -> str:
    """One validation error as a line: where (``items[0].name``) and what."""
    where = ""
    for part in error.absolute_path:
        where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else str(part))
    text = f"{where}: {error.message}" if where else str(error.message)
    return truncate(text, 300)

"""The one interface every model implements: stream typed chunks of a reply.

The agent loop (in this layer) consumes ``StreamingModel.stream(...)``; the clients in
``cortex_jupyter.models`` implement it. It lives here, not in ``models``, because the
runtime must not import ``models`` (ARCHITECTURE.md, "Layers").

Chunks are frozen dataclasses with a class-level ``kind`` string, like the parser's
events, so consumers dispatch on ``chunk.kind``. A reply that ends cleanly ends with
exactly one ``Finish``; a failure is raised as an exception after every chunk that did
arrive has been yielded, so the caller keeps the partial reply.

Native tool calls arrive in two steps: ``ToolCallStart`` as soon as the server names
the call (for the UI), ``ToolCallReady`` the moment its arguments are complete - as soon
as they form a whole JSON object, else when the next call begins or the choice finishes,
never only at the end of the reply - so the runtime can start it while the model is
still writing. Call ids are unique across every reply of one model object and every id
in the messages it was sent, even when the server sends none or the same one each time.

Cancellation is the consumer's: stop iterating (and close the iterator, e.g. with
``contextlib.aclosing``) or cancel the surrounding cancel scope. Implementations close
their HTTP stream promptly then.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol, TypedDict, Union

from cortex_jupyter.runtime.core.model.client import Message, ModelClient

__all__ = [
    "NATIVE_NAME",
    "ChatMessage",
    "Finish",
    "FunctionCallPayload",
    "FunctionDefinition",
    "Message",
    "ModelChunk",
    "NativeNames",
    "ReasoningChunk",
    "RefusalChunk",
    "StreamingModel",
    "TextChunk",
    "ToolCallPayload",
    "ToolCallReady",
    "ToolCallStart",
    "ToolDefinition",
    "Usage",
    "close_stream",
    "text_client",
    "tool_definition",
]


# --------------------------------------------------------------------------- wire shapes


class FunctionCallPayload(TypedDict):
    """The function part of a tool call in an assistant message (OpenAI wire shape)."""

    name: str
    arguments: str


class ToolCallPayload(TypedDict):
    """One tool call in an assistant message (OpenAI wire shape)."""

    id: str
    type: Literal["function"]
    function: FunctionCallPayload


class ChatMessage(Message, total=False):
    """A chat message that may carry tool calls or a tool's result (OpenAI wire shape).

    A ``Message`` plus the optional keys native tool calling needs: an assistant message
    with ``tool_calls`` (its ``content`` may be ``""``), and a ``role="tool"`` message
    answering one call by ``tool_call_id``. Any ``ChatMessage`` is a ``Message``, so both
    can be passed to ``StreamingModel.stream``; keys are sent to the server as they are.
    """

    tool_calls: list[ToolCallPayload]
    tool_call_id: str
    name: str


class _FunctionDefinitionRequired(TypedDict):
    name: str


class FunctionDefinition(_FunctionDefinitionRequired, total=False):
    """A function the model may call: its name, what it does, its JSON-schema parameters."""

    description: str
    parameters: dict[str, Any]
    strict: bool


class ToolDefinition(TypedDict):
    """One entry of a request's ``tools`` list (OpenAI wire shape).

    Not the runtime's ``registry.ToolSpec`` (a registered Python function); see
    ``tool_definition`` to build one from a name, description and schema.
    """

    type: Literal["function"]
    function: FunctionDefinition


def tool_definition(
    name: str, description: str = "", parameters: dict[str, Any] | None = None
) -> ToolDefinition:
    """The wire shape of a function tool (``parameters`` defaults to "no arguments")."""
    function: FunctionDefinition = {"name": name}
    if description:
        function["description"] = description
    function["parameters"] = (
        parameters if parameters is not None else {"type": "object", "properties": {}}
    )
    return {"type": "function", "function": function}


# --------------------------------------------------------------------------- chunks


@dataclass(frozen=True, slots=True)
class TextChunk:
    """Text of the reply, as it arrives (the protocol text the parser reads)."""

    text: str
    kind: ClassVar[str] = "text"


@dataclass(frozen=True, slots=True)
class ReasoningChunk:
    """Reasoning the server streams apart from the reply; shown as thought text."""

    text: str
    kind: ClassVar[str] = "reasoning"


@dataclass(frozen=True, slots=True)
class RefusalChunk(TextChunk):
    """Text the model wrote to refuse the request, instead of an answer (as it arrives).

    OpenAI streams a refusal in ``delta.refusal`` with ``content`` null (and some servers
    as a ``{"type": "refusal"}`` content part). It is what the model said, so it must be
    shown: as the reply's response, marked as a refusal. It is not protocol text: a
    consumer that knows refusals neither parses it nor looks for actions in it.

    A subclass of ``TextChunk`` on purpose, so a consumer that does not know refusals
    still shows it as the reply's text rather than losing it; one that does must check
    ``RefusalChunk`` (or ``kind == "refusal"``) before ``TextChunk``.
    """

    kind: ClassVar[str] = "refusal"


@dataclass(frozen=True, slots=True)
class ToolCallStart:
    """A native tool call began; its arguments are still streaming (for the UI).

    ``index`` is the call's position in this reply; ``name`` is as far as it arrived
    with the first fragment (complete on every server seen so far).
    """

    index: int
    id: str
    name: str
    kind: ClassVar[str] = "tool_call_start"


@dataclass(frozen=True, slots=True)
class ToolCallReady:
    """A native tool call is complete: ``arguments`` is the whole JSON text the model wrote.

    Emitted as soon as the arguments form a whole JSON object (their braces balance
    outside strings and they parse), else when the next call begins or the choice
    finishes. ``arguments`` is not parsed further here: invalid JSON is the runtime's to
    report, like a malformed action body. Text the server sends for a call after it was
    reported ready is never amended into it: whitespace is dropped, anything else is
    reported as a call of its own (same name, a new id), so the runtime runs or refuses
    it visibly.
    """

    index: int
    id: str
    name: str
    arguments: str
    kind: ClassVar[str] = "tool_call_ready"


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts of the reply, when the server reports them; just before ``Finish``.

    Servers that report usage in every chunk give running totals: the last one is kept.

    ``cached_tokens`` is the part of ``prompt_tokens`` the server read from its prompt
    cache (OpenAI's ``prompt_tokens_details.cached_tokens``), which providers bill at a
    lower price; 0 when it reported none. The counts are the server's, untrusted: a
    cached count that is not a whole number from 1 to ``prompt_tokens`` (a string, a
    bool, a negative, more than the prompt) is taken as not reported, so it can never
    make a price wrong.
    """

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    kind: ClassVar[str] = "usage"

    def __post_init__(self) -> None:
        cached, prompt = self.cached_tokens, self.prompt_tokens
        whole = isinstance(cached, int) and not isinstance(cached, bool)
        if not (whole and isinstance(prompt, int) and 0 < cached <= prompt):
            object.__setattr__(self, "cached_tokens", 0)


@dataclass(frozen=True, slots=True)
class Finish:
    """The reply ended cleanly; always the last chunk.

    ``reason`` is the server's ``finish_reason`` (``stop``, ``length``, ``tool_calls``,
    ``content_filter``...), or ``unknown`` when a server ended without saying. A server's
    ``error`` finish is not a clean end: it is raised as a ``ModelError`` instead.

    ``model`` is the model the server says answered (the ``model`` of its chunks), when
    it said one: often a more exact name than the one asked for (``gpt-4o-mini`` is
    answered by ``gpt-4o-mini-2024-07-18``; a router names the model it chose). It is
    the server's text, untrusted: redact it before showing it. It is not part of a
    ``Finish``'s equality (two replies that end the same way are equal, whoever answered).
    """

    reason: str
    model: str | None = field(default=None, compare=False)
    kind: ClassVar[str] = "finish"


ModelChunk = Union[  # noqa: UP007 - a runtime alias, like protocol.events.Event
    TextChunk, ReasoningChunk, RefusalChunk, ToolCallStart, ToolCallReady, Usage, Finish
]


# --------------------------------------------------------------------------- the seam


class StreamingModel(Protocol):
    """A model that streams its reply to chat ``messages`` as ``ModelChunk`` values.

    ``name`` is what the user sees (the model's name, or ``script``). ``tools`` are
    offered only when given; ``temperature`` and ``max_tokens`` are sent only when set.
    ``request`` holds extra request fields (``runtime.loop.request``; the explicit
    ``temperature``/``max_tokens`` win over the same fields there); callers pass it only
    when it holds some, so a model that sends nothing extra may leave it out.
    Failures are raised (``cortex_jupyter.models.ModelError`` subclasses) after every
    chunk that arrived has been yielded.

    Models with a fixed number of turns (script, replay) may also have a
    ``remaining_turns`` attribute: when it is 0 after a turn that is not final, the
    agent loop ends the run there instead of asking for a turn that does not exist.
    """

    name: str

    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolDefinition] | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        request: Mapping[str, Any] | None = None,
    ) -> AsyncIterator[ModelChunk]: ...


async def close_stream(chunks: AsyncIterator[Any]) -> None:
    """Close a model's stream now (its HTTP response), not when it is garbage-collected.

    ``StreamingModel.stream`` returns an ``AsyncIterator``, which need not have
    ``aclose``; every implementation here is an async generator, which does.
    """
    aclose = getattr(chunks, "aclose", None)
    if aclose is not None:
        await aclose()


class _TextClient:
    """A ``StreamingModel`` seen through the text-only ``ModelClient`` seam."""

    def __init__(
        self,
        model: StreamingModel,
        request: Mapping[str, Any] | None = None,
        on_end: ReplyEnd | None = None,
    ) -> None:
        self.model = model
        self.request = dict(request or {})
        self.on_end = on_end
        #: The last reply's ``finish_reason`` (None: it sent none).
        self.finish: str | None = None

    async def stream(self, messages: Sequence[Message], /) -> AsyncIterator[str]:
        # Extra fields only when there are some: a model need not know the keyword.
        extra: dict[str, Any] = {"request": self.request} if self.request else {}
        chunks = self.model.stream(messages, **extra)
        usage: Usage | None = None
        replied = False
        try:
            async for chunk in chunks:
                replied = True
                if isinstance(chunk, Usage):
                    usage = chunk
                elif isinstance(chunk, TextChunk):  # a refusal too: it is the answer given
                    yield chunk.text
                elif isinstance(chunk, Finish):
                    self.finish = chunk.reason
        finally:
            await close_stream(chunks)
            if self.on_end is not None:
                self.on_end(usage, replied)

    def __repr__(self) -> str:
        return f"text_client({self.model!r})"


#: Called when a text-only request ends: the usage the server reported (None: none), and
#: whether anything came back (how the request is priced: ``runtime.core.cost.prices``).
ReplyEnd = Callable[["Usage | None", bool], None]


def text_client(
    model: StreamingModel,
    request: Mapping[str, Any] | None = None,
    on_end: ReplyEnd | None = None,
) -> ModelClient:
    """``model`` as a ``ModelClient`` (``llm`` actions): its text (and refusal) chunks
    only; ``request`` is sent as extra request fields (``runtime.loop.request``);
    ``on_end`` hears what the request used, however it ended."""
    return _TextClient(model, request, on_end)


#: What a native tool call's function name may be (OpenAI's rule: servers refuse others).
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

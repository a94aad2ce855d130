"""OpenAI and OpenAI-compatible servers (vLLM, Ollama, llama.cpp, LM Studio) as a model.

``OpenAIModel`` implements ``runtime.chunks.StreamingModel`` over the ``openai`` SDK's
streaming chat completions. The SDK does the HTTP work - authentication, retries of 429
and 5xx honouring the server's ``retry-after``, server-sent events - and this module
turns its chunks into ``ModelChunk`` values and its exceptions into ``ModelError``
subclasses whose messages say what to do and never show the API key.

Each ``stream()`` call uses its own SDK client and closes it before it returns, so no
connection outlives the event loop that opened it (a notebook may run every cell on a
fresh loop) and nothing is left for the garbage collector to close.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast
from urllib.parse import urlsplit

import anyio
import anyio.to_thread
import openai

from ..runtime.chunks import (
    Finish,
    Message,
    ModelChunk,
    ReasoningChunk,
    TextChunk,
    ToolCallReady,
    ToolCallStart,
    ToolDefinition,
    Usage,
)
from ._redact import endpoint_of, host_port, redact
from .errors import (
    AuthenticationFailed,
    BadRequest,
    CannotConnect,
    MissingAPIKey,
    ModelError,
    ModelTimeout,
    PermissionDenied,
    RateLimited,
    ServerError,
    StreamDropped,
    UnexpectedReply,
    UnknownModel,
)

__all__ = ["DEFAULT_BASE_URL", "OpenAIModel"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"

# Extra delta fields in which servers stream reasoning, in order of preference: DeepSeek
# and older vLLM send `reasoning_content`; newer vLLM, Ollama and OpenRouter `reasoning`.
# Some send both with the same text, so only the first one present is used.
_REASONING_FIELDS = ("reasoning_content", "reasoning")
# How long closing a stream may take when the consumer stops or is cancelled.
_CLOSE_TIMEOUT = 1.0
# Connecting should not take as long as waiting for a slow model's next token.
_CONNECT_TIMEOUT = 10.0
# Server text quoted in a message is cut to this many characters.
_MAX_QUOTE = 500
# What _next returns at the end of the stream.
_END = object()


class _Secret:
    """A value that does not show itself in reprs, tracebacks or variable inspectors."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "<hidden>"


# --------------------------------------------------------------------------- chunks


@dataclass
class _Call:
    """A native tool call whose arguments are still arriving."""

    index: int
    id: str
    name: str
    arguments: list[str] = field(default_factory=list)

    def ready(self) -> ToolCallReady:
        return ToolCallReady(self.index, self.id, self.name, "".join(self.arguments))


@dataclass
class _ReplyAssembler:
    """The server's streamed chunks -> ``ModelChunk`` values. Pure: no I/O.

    Reads fields with ``getattr`` and defaults, because OpenAI-compatible servers leave
    out fields OpenAI always sends (the SDK builds chunks without validating them).
    """

    chunks: int = 0
    characters: int = 0
    finish_reason: str | None = None
    usage: Usage | None = None
    _open: dict[int, _Call] = field(default_factory=dict)  # by the server's index
    _seen: set[int] = field(default_factory=set)
    _count: int = 0

    def feed(self, chunk: object) -> list[ModelChunk]:
        self.chunks += 1
        usage = getattr(chunk, "usage", None)
        if usage is not None:
            self.usage = Usage(
                int(getattr(usage, "prompt_tokens", 0) or 0),
                int(getattr(usage, "completion_tokens", 0) or 0),
            )
        out: list[ModelChunk] = []
        for choice in getattr(chunk, "choices", None) or ():
            if (getattr(choice, "index", 0) or 0) != 0:
                continue  # only one choice is asked for (n=1)
            delta = getattr(choice, "delta", None)
            if delta is not None:
                out += self._delta(delta)
            reason = getattr(choice, "finish_reason", None)
            if reason:
                out += self._ready_all()
                self.finish_reason = str(reason)
        return out

    def close(self) -> list[ModelChunk]:
        """What the end of a clean stream adds: the last calls, usage, ``Finish``."""
        out = self._ready_all()
        if self.usage is not None:
            out.append(self.usage)
        out.append(Finish(self.finish_reason or "unknown"))
        return out

    def _delta(self, delta: object) -> list[ModelChunk]:
        out: list[ModelChunk] = []
        reasoning = _reasoning(delta)
        if reasoning:
            self.characters += len(reasoning)
            out.append(ReasoningChunk(reasoning))
        content = getattr(delta, "content", None)
        if isinstance(content, str) and content:
            self.characters += len(content)
            out.append(TextChunk(content))
        for call in getattr(delta, "tool_calls", None) or ():
            out += self._tool_call(call)
        return out

    def _tool_call(self, call: object) -> list[ModelChunk]:
        function = getattr(call, "function", None)
        call_id = getattr(call, "id", None) or ""
        name = getattr(function, "name", None) or ""
        arguments = getattr(function, "arguments", None) or ""
        key = self._key(getattr(call, "index", None), call_id)
        self.characters += len(arguments)
        current = self._open.get(key)
        if current is not None and call_id in ("", current.id):
            # Servers send the name once; some repeat it in every fragment.
            if name and name != current.name:
                current.name += name
            current.arguments.append(arguments)
            return []
        if current is None and key in self._seen and not call_id:
            # A late fragment of a call already reported ready: no server interleaves
            # calls, and a ready call cannot be amended.
            return []
        # A new call (a new index, or a new id on an old one: servers that number every
        # call 0): the open one is complete.
        out = self._ready_all()
        self._seen.add(key)
        new = _Call(self._count, call_id or f"call_{self._count}", name, [arguments])
        self._count += 1
        self._open[key] = new
        out.append(ToolCallStart(new.index, new.id, new.name))
        return out

    def _key(self, index: object, call_id: str) -> int:
        """The server's index of a fragment; for servers that send none, made up."""
        if isinstance(index, int):
            return index
        # A fragment without an index continues the open call unless it brings a new id.
        if self._open and (not call_id or call_id == next(iter(self._open.values())).id):
            return next(iter(self._open))
        return -1 - self._count  # negative: cannot clash with a server's index

    def _ready_all(self) -> list[ModelChunk]:
        out: list[ModelChunk] = [call.ready() for call in self._open.values()]
        self._open.clear()
        return out


def _reasoning(delta: object) -> str:
    for name in _REASONING_FIELDS:
        value = getattr(delta, name, None)
        if isinstance(value, str) and value:
            return value
    return ""


# --------------------------------------------------------------------------- the model


class OpenAIModel:
    """A model behind an OpenAI-compatible chat completions endpoint, streamed.

    ``api_key`` and ``base_url`` default to the SDK's own environment variables,
    ``OPENAI_API_KEY`` and ``OPENAI_BASE_URL``; a server that needs no key still needs a
    placeholder (``api_key="none"``), so a forgotten key is reported at once rather than
    as a 401 from OpenAI. ``max_retries`` is how often a 429, a 5xx or a failed
    connection is retried (the SDK waits what the server's ``retry-after`` says, or backs
    off); ``timeout`` is how long the server may stay silent, before and during the reply.
    ``extra_body`` adds server-specific request fields (e.g. ``{"top_k": 20}``).
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        max_retries: int = 2,
        timeout: float = 60.0,
        name: str | None = None,
        extra_body: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ValueError(f"model must be a model name such as 'gpt-4o-mini'; got {model!r}")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError(f"max_retries must be a whole number, 0 or more; got {max_retries!r}")
        if not _positive_number(timeout):
            raise ValueError(f"timeout must be a number of seconds above 0; got {timeout!r}")
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        if not key:
            raise MissingAPIKey(model)
        url = base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        _check_base_url(url, "base_url" if base_url else "OPENAI_BASE_URL")
        self.model = model
        self.name = name or model
        self.endpoint = endpoint_of(url)
        self.max_retries = max_retries
        self.timeout = float(timeout)
        self._base_url = url
        self._key = _Secret(key)
        self._extra_body = dict(extra_body or {})
        # Adapted once a server rejects them (see _adapt), then kept for this model.
        self._ask_usage = True
        self._max_tokens_field = "max_tokens"

    def __repr__(self) -> str:
        return f"OpenAIModel({self.model!r}, endpoint={self.endpoint!r})"

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolDefinition] | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> AsyncIterator[ModelChunk]:
        """The reply to ``messages``, chunk by chunk (see ``StreamingModel``)."""
        # Building a client loads the TLS certificate store (~50 ms of blocking file I/O):
        # done in a thread so running actions and the display are not held up meanwhile.
        client = await anyio.to_thread.run_sync(self._new_client)
        response: openai.AsyncStream[Any] | None = None
        try:
            response = await self._open(client, messages, tools, temperature, max_tokens)
            assembler = _ReplyAssembler()
            while (raw := await self._next(response, assembler)) is not _END:
                for chunk in assembler.feed(raw):
                    yield chunk
            if not assembler.chunks:
                raise UnexpectedReply(self.model, self.endpoint, "it sent no events at all")
            for chunk in assembler.close():
                yield chunk
        finally:
            # Shielded: a cancelled consumer must still close the connection, promptly.
            with anyio.move_on_after(_CLOSE_TIMEOUT, shield=True):
                if response is not None:
                    await response.close()
                await client.close()

    def _new_client(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            api_key=self._key.reveal(),
            base_url=self._base_url,
            max_retries=self.max_retries,
            timeout=openai.Timeout(self.timeout, connect=min(self.timeout, _CONNECT_TIMEOUT)),
        )

    async def _next(self, response: openai.AsyncStream[Any], assembler: _ReplyAssembler) -> Any:
        """The server's next chunk, ``_END`` at the end; a failure as a ``ModelError``."""
        try:
            return await response.__anext__()
        except StopAsyncIteration:
            return _END
        except openai.APIError as err:
            if assembler.finish_reason is not None:
                return _END  # the reply was complete; only its tail (usage, [DONE]) was lost
            raise self._mid_reply_error(err, assembler) from _cause(err)
        except json.JSONDecodeError as err:
            what = f"an event is not JSON: {self._said(err.doc[:80])!r}"
            raise UnexpectedReply(self.model, self.endpoint, what) from None

    async def _open(
        self,
        client: openai.AsyncOpenAI,
        messages: Sequence[Message],
        tools: Sequence[ToolDefinition] | None,
        temperature: float | None,
        max_tokens: int | None,
    ) -> openai.AsyncStream[Any]:
        """Start the request; adapt once to a server that rejects an optional field."""
        while True:
            extra = dict(self._extra_body)
            if max_tokens is not None:
                extra[self._max_tokens_field] = max_tokens
            try:
                return await client.chat.completions.create(
                    model=self.model,
                    messages=cast(Any, list(messages)),
                    stream=True,
                    tools=cast(Any, list(tools)) if tools else openai.omit,
                    temperature=temperature if temperature is not None else openai.omit,
                    stream_options={"include_usage": True} if self._ask_usage else openai.omit,
                    extra_body=extra or None,
                )
            except (openai.BadRequestError, openai.UnprocessableEntityError) as err:
                if not self._adapt(err, max_tokens is not None):
                    raise self._error(err) from None
            except openai.APIError as err:
                raise self._error(err) from _cause(err)

    def _adapt(self, err: openai.APIStatusError, sent_max_tokens: bool) -> bool:
        """Whether the request can be retried without what the server rejected."""
        text = f"{err.message} {_server_message(err.body)}"
        if self._ask_usage and "stream_options" in text:
            # Servers from before usage in streams (and strict proxies) refuse the field;
            # such a reply simply has no Usage chunk.
            self._ask_usage = False
            return True
        renamed = "max_completion_tokens" in text and self._max_tokens_field == "max_tokens"
        if sent_max_tokens and renamed:
            # OpenAI's reasoning models refuse max_tokens and name its replacement.
            self._max_tokens_field = "max_completion_tokens"
            return True
        return False

    # ----------------------------------------------------------------------- errors

    def _error(self, err: openai.OpenAIError) -> ModelError:
        """The ``ModelError`` for a failure before the reply began."""
        if isinstance(err, openai.APIStatusError):
            return self._status_error(err)
        if isinstance(err, openai.APITimeoutError):
            return ModelTimeout(self.model, self.endpoint, self.timeout)
        if isinstance(err, openai.APIConnectionError):
            return CannotConnect(self.model, host_port(self._base_url), self._reason(err))
        if isinstance(err, openai.APIError):
            return ServerError(self.model, self.endpoint, None, 1, self._said(err.message))
        return ModelError(self._said(str(err)) or type(err).__name__)

    def _status_error(self, err: openai.APIStatusError) -> ModelError:
        status = err.status_code
        said = self._said(_server_message(err.body) or err.message)
        if status == 401:
            return AuthenticationFailed(self.model, self.endpoint, said)
        if status == 403:
            return PermissionDenied(self.model, self.endpoint, said)
        if status == 404:
            return UnknownModel(self.model, self.endpoint, said)
        tries = _tries(err)
        if status == 429:
            quota = isinstance(err.body, Mapping) and err.body.get("code") == "insufficient_quota"
            retry_after = _retry_after(err.response.headers)
            return RateLimited(self.model, self.endpoint, tries, retry_after, said, quota=quota)
        if status >= 500:
            return ServerError(self.model, self.endpoint, status, tries, said)
        return BadRequest(self.model, self.endpoint, status, said)

    def _mid_reply_error(self, err: openai.APIError, assembler: _ReplyAssembler) -> ModelError:
        if isinstance(err, openai.APIConnectionError):
            stalled = self.timeout if isinstance(err, openai.APITimeoutError) else None
            return StreamDropped(
                self.model, self.endpoint, assembler.chunks, assembler.characters, stalled
            )
        return ServerError(self.model, self.endpoint, None, 1, self._said(err.message))

    def _said(self, text: str) -> str:
        text = redact(" ".join(text.split()), self._key.reveal())
        return text if len(text) <= _MAX_QUOTE else text[: _MAX_QUOTE - 1] + "…"

    def _reason(self, err: openai.APIConnectionError) -> str:
        cause = err.__cause__
        return self._said(str(cause)) if cause is not None and str(cause) else ""


def _cause(err: openai.OpenAIError) -> BaseException | None:
    """What to chain a ``ModelError`` to: connection failures only.

    Status and API errors carry the server's body (which may echo a key) and the request
    (which carries the ``Authorization`` header), so they are not chained.
    """
    return err if isinstance(err, openai.APIConnectionError) else None


def _server_message(body: object) -> str:
    """The human part of an error body, in the shapes servers use."""
    if isinstance(body, str):
        return body
    if isinstance(body, Mapping):
        for key in ("message", "error", "detail"):
            value = body.get(key)
            if isinstance(value, str) and value:
                return value
            if isinstance(value, Mapping | list) and value:
                return _server_message(value) if isinstance(value, Mapping) else str(value)
    return ""


def _tries(err: openai.APIStatusError) -> int:
    """How many requests the SDK made: it numbers each retry in a request header."""
    try:
        return int(err.response.request.headers.get("x-stainless-retry-count", "0")) + 1
    except (ValueError, RuntimeError):
        return 1


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """The server's retry delay in seconds (``retry-after-ms`` or ``retry-after``)."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            continue  # an HTTP date: rare, and not worth quoting
        if math.isfinite(seconds) and seconds >= 0:
            return seconds
    return None


def _positive_number(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def _check_base_url(url: str, source: Literal["base_url", "OPENAI_BASE_URL"]) -> None:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"{source} must be an http(s) URL such as http://localhost:11434/v1; "
            f"got {redact(url)!r}"
        )

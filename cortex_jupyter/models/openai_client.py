"""OpenAI and OpenAI-compatible servers (vLLM, Ollama, llama.cpp, LM Studio) as a model.

``OpenAIModel`` implements ``runtime.core.model.chunks.StreamingModel`` over the ``openai`` SDK's
streaming chat completions. The SDK does the HTTP work - authentication, retries of 429
and 5xx honouring the server's ``retry-after``, server-sent events - and this module
turns its chunks into ``ModelChunk`` values and its exceptions into ``ModelError``
subclasses whose messages say what to do and never show the API key.

Each ``stream()`` call uses its own SDK client and closes it before it returns, so no
connection outlives the event loop that opened it (a notebook may run every cell on a
fresh loop) and nothing is left for the garbage collector to close. How each server's
stream is read (reasoning fields, content parts, tool-call fragments, in-stream errors)
is ``_reply``'s; what reaches the network and how failures read is this module's.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import math
import os
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Literal, cast
from urllib.parse import urlsplit

import anyio
import anyio.to_thread
import openai
from openai._models import FinalRequestOptions
from openai.types.chat import ChatCompletionChunk

from cortex_jupyter.runtime.core.cost.prices import Price
from cortex_jupyter.runtime.core.model.chunks import Message, ModelChunk, ToolDefinition, Usage
from cortex_jupyter.runtime.core.trust.secrets import secrets

from ._limits import Refused, known_reply_limit, learn, refused_cap
from ._redact import endpoint_of, host_port, redact
from ._reply import ReplyAssembler, ServerFailure, call_ids_in, failure_of
from ._tls import certificate_file, tls_context, tls_context_ready
from ._window import known_window, server_window
from .errors import (
    AuthenticationFailed,
    BadCertificates,
    BadRequest,
    CannotConnect,
    ContextTooLong,
    GrammarRefused,
    MissingAPIKey,
    ModelError,
    ModelTimeout,
    PermissionDenied,
    RateLimited,
    ReplyRejected,
    ServerError,
    StreamDropped,
    UnexpectedReply,
    UnknownModel,
    is_context_length,
)

__all__ = ["DEFAULT_BASE_URL", "OpenAIModel"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"

# How long closing a stream may take when the consumer stops or is cancelled.
_CLOSE_TIMEOUT = 1.0
# Connecting should not take as long as waiting for a slow model's next token.
_CONNECT_TIMEOUT = 10.0
# Server text quoted in a message is cut to this many characters.
_MAX_QUOTE = 500
# A 400 that refuses a grammar (the field is unknown, or grammars are unsupported).
_GRAMMAR_REFUSED = re.compile(
    r"grammar|structured.?output|guided|extra.?(?:inputs|forbidden|fields?)|unrecogni[sz]ed|"
    r"unknown (?:field|param)|not (?:supported|permitted|allowed)|unsupported",
    re.IGNORECASE,
)
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
    ``free`` says why its requests cost nothing (the local model); otherwise they are
    priced with genai-prices (``price``).

    Native tool call ids are unique across every reply of one model object and every id
    in the messages it is sent: a server's id is kept unless one of those already used
    it (servers that send ``call_0`` every turn), and a call with none gets a new one.
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
        free: str | None = None,
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
        self._free = free
        # Adapted once a server rejects them (see _adapt), then kept for this model.
        self._ask_usage = True
        self._max_tokens_field = "max_tokens"
        # Every tool call id this model reported or was sent: a server that sends no id,
        # or the same one in every reply (`call_0`), still gets ids the run can tell apart.
        self._call_ids: set[str] = set()

    def __repr__(self) -> str:
        return f"OpenAIModel({self.model!r}, endpoint={self.endpoint!r})"

    def price(self, usage: Usage | None) -> Price:
        """The price of one request that used ``usage`` (``models.pricing``): by the model's
        name, at the provider the base URL names; nothing for a model known to be free
        (``free=`` says why: the model ``cortex_jupyter.local`` serves)."""
        if self._free:
            return Price(0.0, f"{self._free}: it runs on this machine, nothing is paid", "local")
        from . import pricing  # genai-prices' tables take ~0.4 s to load: only when priced

        return pricing.price(self.model, self._base_url, usage)

    @property
    def context_window(self) -> int | None:
        """The window the server serves this model with, once ``learn_context_window``
        found it (llama.cpp's ``/props``, vLLM's ``/v1/models``); None while unknown."""
        return known_window(self._base_url, self.model)

    @property
    def max_reply(self) -> int | None:
        """The most completion tokens the server allows a reply of this model, once it
        said so (refusing a larger ``max_tokens``: ``_limits``); None while unknown. A
        larger cap is sent as this one; a budget reserves no more than this."""
        return known_reply_limit(self._base_url, self.model)

    async def learn_context_window(self) -> int | None:
        """Ask the server its window (once per endpoint and model, cached, a short
        timeout); None when it does not say. Never raises."""
        return await server_window(self._base_url, self.model, self._key.reveal())

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolDefinition] | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        request: Mapping[str, Any] | None = None,
        constraint: Mapping[str, Any] | None = None,
    ) -> AsyncIterator[ModelChunk]:
        """The reply to ``messages``, chunk by chunk (see ``StreamingModel``).

        ``request`` holds extra request fields (``runtime.loop.request``), over the model's
        own ``extra_body``; ``temperature`` and ``max_tokens`` win over the same fields.
        ``constraint``: the request fields that carry a grammar (``runtime.loop.grammar``),
        put in the body over those; never sent together with ``tools``.
        """
        if constraint and tools:
            raise ValueError(
                "constrain: a grammar cannot go with native tools= (servers refuse the "
                "pair); use one or the other"
            )
        # The first client of a process loads the TLS certificate store (30-100 ms of
        # blocking file I/O): in a thread, so running actions and the display go on
        # meanwhile. Later clients reuse it and take well under a millisecond.
        if tls_context_ready():
            client = self._new_client()
        else:
            client = await anyio.to_thread.run_sync(self._new_client)
        response: openai.AsyncStream[Any] | None = None
        self._call_ids |= call_ids_in(cast(Sequence[Mapping[str, Any]], messages))
        assembler = ReplyAssembler(self._call_ids)
        try:
            fields = {**self._extra_body, **(request or {})}
            if temperature is not None:
                fields["temperature"] = temperature
            if max_tokens is not None:
                fields["max_tokens"] = max_tokens
            response = await self._open(client, messages, tools, fields, constraint)
            try:
                while (raw := await self._next(response, assembler)) is not _END:
                    for chunk in assembler.feed(raw):
                        yield chunk
                    if assembler.failure is not None:  # raised after what arrived with it
                        await _read_tail(response, assembler)
                        raise self._reported(assembler.failure)
            except ModelError:
                # The failed reply still cost tokens (OpenRouter reports them in the chunk
                # that carries its error, others in the usage chunk after it): the run
                # counts them.
                if assembler.usage is not None:
                    yield assembler.usage
                raise
            if not assembler.chunks:
                raise UnexpectedReply(self.model, self.endpoint, "it sent no events at all")
            for chunk in assembler.close():
                yield chunk
        finally:
            # Shielded: a cancelled consumer must still close the connection, promptly.
            with anyio.move_on_after(_CLOSE_TIMEOUT, shield=True):
                if response is not None:
                    await _close_stream(response)
                await client.close()

    def _new_client(self) -> _Client:
        try:
            verify = tls_context()
        except OSError as err:  # ssl.SSLError is one: a file holding no certificate
            if (path := certificate_file()) is None:
                raise
            reason = err.strerror or str(err) or type(err).__name__
            raise BadCertificates(self.model, "SSL_CERT_FILE", path, reason) from None
        return _Client(
            api_key=self._key.reveal(),
            base_url=self._base_url,
            max_retries=self.max_retries,
            timeout=openai.Timeout(self.timeout, connect=min(self.timeout, _CONNECT_TIMEOUT)),
            http_client=openai.DefaultAsyncHttpxClient(verify=verify),
        )

    async def _next(self, response: openai.AsyncStream[Any], assembler: ReplyAssembler) -> Any:
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
        except UnicodeDecodeError as err:  # the SDK decodes each line as UTF-8, strictly
            near = err.object[max(0, err.start - 40) : err.end + 40]
            what = f"an event is not UTF-8 text: {self._said(near.decode(errors='replace'))!r}"
            raise UnexpectedReply(self.model, self.endpoint, what) from None

    async def _open(
        self,
        client: openai.AsyncOpenAI,
        messages: Sequence[Message],
        tools: Sequence[ToolDefinition] | None,
        fields: Mapping[str, Any],
        constraint: Mapping[str, Any] | None = None,
    ) -> openai.AsyncStream[Any]:
        """Start the request; adapt once to a server that rejects an optional field.

        The body is sent as built: ``fields`` (the request's own and extra fields alike),
        then the ``constraint``'s grammar fields over them. Through the client's ``post``
        rather than ``chat.completions.create``, which walks every message against the
        SDK's type hints before sending (a few milliseconds a request, and the body a
        server receives is the same)."""
        ceiling = self.max_reply  # a reply cap a server refused before, lowered
        limited = False
        while True:
            body = dict(fields)
            max_tokens = body.pop("max_tokens", None)
            if max_tokens is not None:
                body[self._max_tokens_field] = max_tokens
            sent = _lower_cap(body, ceiling)
            body.update(constraint or {})
            body.update(model=self.model, messages=list(messages), stream=True)
            if tools:
                body["tools"] = list(tools)
            if self._ask_usage:
                body["stream_options"] = {"include_usage": True}
            try:
                opened = await client.post(
                    "/chat/completions",
                    body=body,
                    cast_to=ChatCompletionChunk,
                    stream=True,
                    stream_cls=openai.AsyncStream[ChatCompletionChunk],
                )
                return cast(openai.AsyncStream[Any], opened)
            except (openai.BadRequestError, openai.UnprocessableEntityError) as err:
                refused = None if limited or sent is None else self._refused_cap(err, sent)
                if refused is not None:
                    # Sent again, once, with the cap the server allows: a lower cap only
                    # lowers the reply's worst case, so the run's reservation still holds.
                    ceiling, limited = refused.cap, True
                    continue
                if not self._adapt(err, max_tokens is not None):
                    said = self._said(_server_message(err.body) or err.message)
                    if constraint and _GRAMMAR_REFUSED.search(said):
                        raise GrammarRefused(
                            self.model, self.endpoint, err.status_code, said
                        ) from None
                    raise self._error(err) from None
            except openai.APIError as err:
                raise self._error(err) from _cause(err)

    def _refused_cap(self, err: openai.APIStatusError, sent: int) -> Refused | None:
        """What the server allows when ``err`` refused the reply cap ``sent`` as too
        large (OpenAI's, vLLM's 400), learned for later requests; None otherwise."""
        refused = refused_cap(f"{err.message} {_server_message(err.body)}", sent)
        if refused is not None:
            learn(self._base_url, self.model, refused)
        return refused

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
        code = err.body.get("code") if isinstance(err.body, Mapping) else None
        if is_context_length(said, str(code or "")):
            return ContextTooLong(self.model, self.endpoint, said)
        return BadRequest(self.model, self.endpoint, status, said)

    def _mid_reply_error(self, err: openai.APIError, assembler: ReplyAssembler) -> ModelError:
        if isinstance(err, openai.APIConnectionError):
            stalled = self.timeout if isinstance(err, openai.APITimeoutError) else None
            return StreamDropped(
                self.model, self.endpoint, assembler.chunks, assembler.characters, stalled
            )
        # An SDK without `stream_mode` (see _Client) raises this itself for an event whose
        # data has an `error` key: its `body` is that error; what else the event held
        # (the usage) is lost.
        return self._reported(failure_of(err.body, err.message))

    def _reported(self, failure: ServerFailure) -> ModelError:
        """The ``ModelError`` for an error the server reported inside the stream."""
        said = self._said(failure.message)
        code = self._said(failure.code) if failure.code else None
        if failure.rejected and is_context_length(said, code):
            return ContextTooLong(self.model, self.endpoint, said)
        if failure.rejected:
            return ReplyRejected(self.model, self.endpoint, said, code)
        return ServerError(self.model, self.endpoint, None, 1, said, code=code)

    def _said(self, text: str) -> str:
        # The key, anything key-like, and the secrets of the process (request fields
        # that look like credentials: a server's 400 may quote the body it refused).
        text = redact(secrets.redact(" ".join(text.split())), self._key.reveal())
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


class _Client(openai.AsyncOpenAI):
    """The SDK's client, handing over every event of a stream as it was sent.

    By default (its ``"legacy"`` stream mode) the SDK raises on an event whose data has an
    ``error`` key and stops reading: the rest of that event is lost (OpenRouter's error
    chunk carries the ``usage``, what the reply cost), and so is everything after it
    (the usage chunk, or the rest of a reply that had already finished: OpenRouter sends
    ``finish_reason: "length"``, then an error chunk saying the token limit was reached).
    In ``"events"`` mode it passes such events on like any other, and ``ReplyAssembler``
    reads them: one place decides what an error in a stream means.
    """

    async def _prepare_options(self, options: FinalRequestOptions) -> FinalRequestOptions:
        options = await super()._prepare_options(options)
        if hasattr(options, "stream_mode"):  # an older SDK raises (see _mid_reply_error)
            options.stream_mode = "events"
        return options

    def _process_response_data(
        self, *, data: object, cast_to: Any, response: Any, **more: Any
    ) -> Any:
        """A streamed chunk as the JSON the server sent, not an SDK model.

        ``ReplyAssembler`` reads fields from mappings as well as objects, and building the
        SDK's ``ChatCompletionChunk`` (``construct_type`` walking its type hints) cost
        about two thirds of the CPU a short reply takes here: with eight replies at once
        that, not the network, set an experiment's pace.

        The method is the SDK's own (private): were it renamed, chunks would arrive as SDK
        models again, which ``ReplyAssembler`` reads as well (only slower); ``**more``
        takes any keyword a later SDK adds, so that cannot break every stream."""
        if cast_to is ChatCompletionChunk:
            return data
        return super()._process_response_data(data=data, cast_to=cast_to, response=response, **more)


async def _close_stream(response: openai.AsyncStream[Any]) -> None:
    """Close a reply read only in part (a Stop, an error, a turn ended at its marker).

    ``AsyncStream.close()`` releases the connection but leaves the SDK's own async
    generators (the SSE decoder over httpx's ``aiter_raw``) suspended: collected later,
    after their event loop closed or in another thread, each is an "async generator
    never closed" (an unraisable exception). Closing the stream's iterator here, on its
    own loop, finalizes the chain while that loop still runs."""
    await response.close()
    iterator = getattr(response, "_iterator", None)  # the SDK's generator, if it has one
    if inspect.isasyncgen(iterator):
        with contextlib.suppress(Exception):
            await iterator.aclose()


async def _read_tail(response: openai.AsyncStream[Any], assembler: ReplyAssembler) -> None:
    """After an error, the rest of the stream, for the usage a later chunk may report: for
    at most ``_CLOSE_TIMEOUT`` seconds, and nothing it says is an error of its own."""
    with anyio.move_on_after(_CLOSE_TIMEOUT):
        try:
            async for raw in response:
                assembler.count_usage(raw)
        except (openai.APIError, ValueError):
            pass  # a broken tail changes nothing: the error is what is reported


def _lower_cap(extra: dict[str, Any], ceiling: int | None) -> int | None:
    """The reply cap ``extra`` holds (``max_tokens`` or ``max_completion_tokens``),
    each lowered to ``ceiling`` in place; None when it holds none."""
    caps = []
    for name in ("max_tokens", "max_completion_tokens"):
        value = extra.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            if ceiling is not None and value > ceiling:
                extra[name] = value = ceiling
            caps.append(value)
    return max(caps) if caps else None


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

"""An OpenAI-compatible server's streamed chunks -> ``ModelChunk`` values. Pure: no I/O.

Servers that call themselves OpenAI-compatible each stream a little differently (see
NOTES.md, "Real servers' SSE"). Everything here reads fields defensively - ``Mapping.get`` or
``getattr``, with defaults - because chunks arrive as the JSON the server sent (the client
builds no SDK model from them): any field may be missing or of another JSON type. The
prompt and completion counts are read from an integer, a float with no fraction
(``12.0``) or a string of digits (``"12"``), as the SDK's validation read them; a cached
count only from an integer. What each server does, and where it is read:

- reasoning in ``reasoning_content`` (DeepSeek, Z.ai, older vLLM), ``reasoning`` (newer
  vLLM, Ollama, Groq, OpenRouter), ``thinking``, ``reasoning_details`` (OpenRouter, a list
  of typed parts beside ``reasoning``), or ``content`` on a reasoning ``channel``
  (gpt-oss's harmony format): ``_reasoning``, ``_delta``;
- ``content`` as a list of ``text``/``thinking`` parts (Mistral's magistral): ``_parts``;
- a refusal in ``delta.refusal`` (OpenAI): a ``RefusalChunk``;
- tool calls in fragments (OpenAI), whole (Ollama), with the name in every fragment, with
  no ``index`` or no ``id`` (llama.cpp, some vLLM), or with the same id in every reply:
  ``ReplyAssembler._tool_call``;
- usage in a last chunk with ``"choices": []``, after ``finish_reason``, in every chunk, or
  in the chunk that carries an error (OpenRouter): ``ReplyAssembler.count_usage``; the
  prompt tokens read from a cache in ``prompt_tokens_details.cached_tokens`` (OpenAI,
  OpenRouter, vLLM and llama.cpp with prompt caching) or ``prompt_cache_hit_tokens``
  (DeepSeek): ``_cached``;
- errors inside an ordinary chunk (OpenRouter, vLLM), as an ``event: error`` frame (Groq)
  or as ``finish_reason: "error"``: ``ReplyAssembler.failure``, classified by
  ``failure_of``. An error after a ``finish_reason`` is the reply's tail, not its failure
  (OpenRouter sends ``"length"``, then ``{"error": "Token limit reached", "usage": ...}``).
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from cortex_jupyter.runtime.core.model.chunks import (
    Finish,
    ModelChunk,
    ReasoningChunk,
    RefusalChunk,
    TextChunk,
    ToolCallReady,
    ToolCallStart,
    Usage,
)

from ..protocol.actions import too_deep

__all__ = ["ReplyAssembler", "ServerFailure", "call_ids_in", "failure_of"]

_Kind = Literal["text", "reasoning", "refusal"]
_CHUNKS: dict[_Kind, type[TextChunk] | type[ReasoningChunk]] = {
    "text": TextChunk,
    "reasoning": ReasoningChunk,
    "refusal": RefusalChunk,
}

# Delta fields in which servers stream reasoning, in order of preference. Servers that
# send several (both names, or `reasoning` beside `reasoning_details`) repeat the same text
# in each, so only the first one that holds text is used.
_REASONING_FIELDS = ("reasoning_content", "reasoning", "thinking")
# OpenRouter's `reasoning_details` parts that hold readable text, and the key holding it
# (`reasoning.encrypted` parts hold none).
_DETAIL_TEXT = {"reasoning.text": "text", "reasoning.summary": "summary"}
# `channel` values (gpt-oss's harmony format) whose `content` is reasoning, not the reply.
_REASONING_CHANNELS = frozenset({"analysis", "thinking", "reasoning"})
# Content part types that hold reasoning (Mistral's magistral: "thinking").
_THINKING_PARTS = frozenset({"thinking", "reasoning"})
# Content parts nested deeper than this are not read (no server nests more than 3).
_MAX_DEPTH = 8
# The longest model name a reply keeps (real ones are tens of characters).
_MAX_MODEL_NAME = 256
# The longest count read from a string of digits (a token count has at most a dozen).
_MAX_DIGITS = 20
# The characters that matter when watching JSON text for the end of an object.
_JSON_SPECIAL = re.compile(r'["\\{}]')


# --------------------------------------------------------------------------- errors


@dataclass(frozen=True, slots=True)
class ServerFailure:
    """An error the server reported inside the stream, and whose fault it is.

    ``rejected`` is true when the request itself causes it (a context window exceeded,
    moderation, an invalid request): asking again unchanged would get the same error.
    """

    message: str
    code: str | None = None
    rejected: bool = False


# Words in an error's code or type that mean the request caused it.
_REJECTED_WORDS = (
    "context_length",
    "context_window",
    "context_size",
    "content_filter",
    "content_policy",
    "moderation",
    "flagged",
    "safety",
    "guardrail",
    "invalid_request",
    "badrequest",
    "bad_request",
    "tool_use_failed",
    "insufficient_quota",
    "billing",
    "invalid_api_key",
    "authentication",
    "permission",
    "not_found",
)
# Phrases in an error's message that mean the same, for servers that give no code.
_REJECTED_PHRASES = ("context length", "context window", "context size")
# HTTP statuses as codes in an error body: 4xx are the request's fault except these.
_PASSING_4XX = frozenset({408, 409, 425, 429})


def failure_of(body: object, fallback: str = "") -> ServerFailure:
    """What an in-stream error body says: ``{"message", "code", "type"}``, or a string.

    OpenRouter sends ``{"code": 502 | "server_error", "message": ...}``; Groq
    ``{"message", "type", "code"}``; vLLM ``{"object": "error", "message", "type",
    "code": 400}``; Ollama a bare string. ``fallback`` is the message when it has none.
    """
    if not isinstance(body, Mapping):
        said = body if isinstance(body, str) and body.strip() else fallback
        return ServerFailure(said, None, _says_rejected(said))
    given = body.get("message")
    message = given if isinstance(given, str) and given.strip() else fallback
    code = next(
        (str(body[key]) for key in ("code", "type") if body.get(key) not in (None, "")), None
    )
    return ServerFailure(message, code, _rejected(body) or _says_rejected(message))


def _rejected(body: Mapping[str, Any]) -> bool:
    for key in ("code", "status"):
        status = _http_status(body.get(key))
        if status is not None:
            return 400 <= status < 500 and status not in _PASSING_4XX
    words = " ".join(str(body.get(key) or "") for key in ("code", "type")).lower()
    return any(word in words for word in _REJECTED_WORDS)


def _says_rejected(message: str) -> bool:
    lowered = message.lower()
    return any(phrase in lowered for phrase in _REJECTED_PHRASES)


def _http_status(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and len(value) == 3 and value.isdigit():
        number = int(value)
    else:
        return None
    return number if 100 <= number < 600 else None


# The failure a bare `finish_reason: "error"` (OpenRouter) stands for.
_ERROR_FINISH = ServerFailure("", 'finish_reason "error"')


# --------------------------------------------------------------------------- tool calls


@dataclass
class _ObjectEnd:
    """Watches streamed JSON text for the end of one object: its braces balance, outside
    strings. Text that does not start with ``{`` (after whitespace) never ends early."""

    state: Literal["before", "object", "other"] = "before"
    depth: int = 0
    in_string: bool = False
    offset: int = 0  # characters seen so far
    escaped_at: int = -1  # the offset of the character a backslash escapes

    def feed(self, text: str) -> bool:
        """Whether ``text`` brought the object's braces back into balance."""
        if self.state == "before":
            start = text.lstrip()
            if start:
                self.state = "object" if start[0] == "{" else "other"
        if self.state != "object":
            self.offset += len(text)
            return False
        closed = False
        for match in _JSON_SPECIAL.finditer(text):
            at = self.offset + match.start()
            if at == self.escaped_at:
                continue
            char = match.group()
            if self.in_string:
                if char == "\\":
                    self.escaped_at = at + 1
                elif char == '"':
                    self.in_string = False
            elif char == '"':
                self.in_string = True
            elif char == "{":
                self.depth += 1
            elif char == "}":
                self.depth -= 1
                closed = closed or self.depth == 0
        self.offset += len(text)
        return closed and self.depth == 0


@dataclass
class _Call:
    """A native tool call of this reply, while and after its arguments arrive."""

    index: int  # its position in this reply
    id: str  # the id reported: the server's, or a new one when it sent none or a used one
    server_id: str  # as the server sent it ("" for none): later fragments may repeat it
    name: str
    arguments: list[str] = field(default_factory=list)
    end: _ObjectEnd = field(default_factory=_ObjectEnd)
    done: bool = False  # reported ready

    def ready(self) -> ToolCallReady:
        self.done = True
        return ToolCallReady(self.index, self.id, self.name, "".join(self.arguments))


def _new_call_id(taken: set[str]) -> str:
    while True:
        candidate = f"call_{secrets.token_hex(6)}"
        if candidate not in taken:
            return candidate


def call_ids_in(messages: Iterable[Mapping[str, Any]]) -> set[str]:
    """The tool call ids a conversation already uses (assistant calls, tool answers)."""
    ids: set[str] = set()
    for message in messages:
        for call in message.get("tool_calls") or ():
            if isinstance(call, Mapping) and isinstance(call.get("id"), str):
                ids.add(call["id"])
        if isinstance(message.get("tool_call_id"), str):
            ids.add(message["tool_call_id"])
    return ids


# --------------------------------------------------------------------------- the reply


@dataclass
class ReplyAssembler:
    """Feed it the server's chunks in order; it returns the ``ModelChunk`` values to yield.

    ``taken`` are call ids that must not be reported again (every id earlier replies of
    the same model reported, and those in the conversation sent): the caller passes its
    own set, and the ids this reply reports are added to it. After a ``feed``, a
    ``failure`` means the server reported an error: raise it, after yielding what that
    ``feed`` returned (the chunk may carry text too).
    """

    taken: set[str] = field(default_factory=set)
    chunks: int = 0
    characters: int = 0
    finish_reason: str | None = None
    usage: Usage | None = None
    model: str | None = None  # the model the server says answered (its chunks' ``model``)
    failure: ServerFailure | None = None
    _calls: list[_Call] = field(default_factory=list)
    _by_index: dict[int, _Call] = field(default_factory=dict)  # by the server's index

    def feed(self, chunk: object) -> list[ModelChunk]:
        self.chunks += 1
        self.count_usage(chunk)
        self._note_model(chunk)
        out: list[ModelChunk] = []
        for choice in _items(_field(chunk, "choices")):
            if (_field(choice, "index") or 0) != 0:
                continue  # only one choice is asked for; a server that sends more: the first
            delta = _field(choice, "delta")
            if delta is not None:
                out += self._delta(delta)
            reason = _field(choice, "finish_reason")
            if reason == "error":  # OpenRouter: the reply failed, not ended
                self.failure = self.failure or _ERROR_FINISH
            elif reason:
                out += self._ready_all()
                self.finish_reason = str(reason)
        if self.finish_reason is None:
            self.failure = _failure_in(chunk) or self.failure
        # else the reply has ended as its finish_reason says, and an error after it is its
        # tail: OpenRouter follows "length" with {"error": "Token limit reached", "usage"}.
        return out

    def count_usage(self, chunk: object) -> None:
        """Keep the ``usage`` a chunk reports (the last report wins: some servers send one
        every chunk). Also for a chunk that is not fed: the stream's tail after an error."""
        usage = _field(chunk, "usage")
        if usage is not None:
            prompt, completion = (
                _tokens(usage, "prompt_tokens"),
                _tokens(usage, "completion_tokens"),
            )
            self.usage = Usage(prompt, completion, _cached(usage))

    def _note_model(self, chunk: object) -> None:
        """Keep the first model name the server gives (every chunk repeats it); a name
        that is not text, or too long to be one, is not kept: no name beats a made-up one."""
        if self.model is None:
            name = _field(chunk, "model")
            if isinstance(name, str) and 0 < len(name.strip()) <= _MAX_MODEL_NAME:
                self.model = name.strip()

    def close(self) -> list[ModelChunk]:
        """What the end of a clean stream adds: the last calls, usage, ``Finish``."""
        out = self._ready_all()
        if self.usage is not None:
            out.append(self.usage)
        out.append(Finish(self.finish_reason or "unknown", self.model))
        return out

    # ----------------------------------------------------------------------- text

    def _delta(self, delta: object) -> list[ModelChunk]:
        pieces: list[tuple[_Kind, str]] = []
        reasoning = _reasoning(delta)
        if reasoning:
            pieces.append(("reasoning", reasoning))
        channel = _field(delta, "channel")
        kind: _Kind = (
            "reasoning"
            if isinstance(channel, str) and channel.lower() in _REASONING_CHANNELS
            else "text"
        )
        for piece in _parts(_field(delta, "content"), kind):
            if piece != ("reasoning", reasoning):  # the same reasoning, sent twice
                pieces.append(piece)
        pieces += _parts(_field(delta, "refusal"), "refusal")
        out: list[ModelChunk] = []
        for piece_kind, text in _merged(pieces):
            self.characters += len(text)
            out.append(_CHUNKS[piece_kind](text))
        for call in _items(_field(delta, "tool_calls")):
            out += self._tool_call(call)
        return out

    # ----------------------------------------------------------------------- tool calls

    def _tool_call(self, call: object) -> list[ModelChunk]:
        function = _field(call, "function")
        server_id = _string(_field(call, "id"))
        name = _string(_field(function, "name"))
        arguments = _arguments(_field(function, "arguments"))
        index = _whole_number(_field(call, "index"))
        self.characters += len(arguments)
        # Servers that send no index continue the last call.
        previous = self._by_index.get(index) if index is not None else self._last()
        if previous is None or server_id not in ("", previous.server_id):
            # A new call: a new index, or a new id on an old one (servers that number
            # every call 0). The open calls are complete.
            return self._start(index, server_id, name, arguments)
        if not previous.done:
            return self._extend(previous, name, arguments)
        if not arguments.strip():
            return []  # whitespace after a call's whole object: nothing is lost
        # More text for a call already reported ready (perhaps already running): it
        # cannot be amended, and dropping it would lose it silently, so it is a call of
        # its own, which the runtime runs or refuses (quoting it) where the user sees it.
        return self._start(index, previous.server_id, name or previous.name, arguments)

    def _start(
        self, index: int | None, server_id: str, name: str, arguments: str
    ) -> list[ModelChunk]:
        out = self._ready_all()
        if server_id and server_id not in self.taken:
            call_id = server_id
        else:  # none, or one already used (servers that send `call_0` in every reply)
            call_id = _new_call_id(self.taken)
        self.taken.add(call_id)
        call = _Call(len(self._calls), call_id, server_id, name)
        self._calls.append(call)
        if index is not None:
            self._by_index[index] = call
        out.append(ToolCallStart(call.index, call.id, call.name))
        return out + self._extend(call, "", arguments)

    def _extend(self, call: _Call, name: str, arguments: str) -> list[ModelChunk]:
        # Servers send the name once; some repeat it whole in every fragment.
        if name and name != call.name:
            call.name += name
        call.arguments.append(arguments)
        if call.end.feed(arguments) and _is_object("".join(call.arguments)):
            return [call.ready()]
        return []

    def _last(self) -> _Call | None:
        return self._calls[-1] if self._calls else None

    def _ready_all(self) -> list[ModelChunk]:
        return [call.ready() for call in self._calls if not call.done]


# --------------------------------------------------------------------------- reading fields


def _field(obj: object, name: str) -> Any:
    """``obj[name]`` or ``obj.name``: extra fields arrive as dicts or as objects."""
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def _items(value: object) -> list[object]:
    return list(value) if isinstance(value, list | tuple) else []


def _string(value: object) -> str:
    return value if isinstance(value, str) else ""


def _whole_number(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _count(value: object) -> int | None:
    """A token count: an integer, or one sent as ``12.0`` or ``"12"`` (servers built on
    JavaScript, proxies that re-encode numbers), as the SDK's validation read them; None
    for anything else, ``true`` included."""
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, str):
        text = value.strip()
        digits = text[1:] if text.startswith("-") else text
        if digits.isascii() and digits.isdigit() and len(digits) <= _MAX_DIGITS:
            return int(text)
        return None
    return _whole_number(value)


def _tokens(usage: object, name: str) -> int:
    count = _count(_field(usage, name))
    return count if count is not None and count > 0 else 0  # a count is never negative


def _cached(usage: object) -> int:
    """The prompt tokens the server read from its cache: ``prompt_tokens_details.
    cached_tokens`` (OpenAI, OpenRouter, vLLM, llama.cpp), else DeepSeek's
    ``prompt_cache_hit_tokens``; 0 when neither is a whole number (``Usage`` also drops a
    count larger than the prompt's)."""
    count = _whole_number(_field(_field(usage, "prompt_tokens_details"), "cached_tokens"))
    if count is None:
        count = _whole_number(_field(usage, "prompt_cache_hit_tokens"))
    return count or 0


def _arguments(value: object) -> str:
    """A call's arguments as text: servers send a string; a few send the object itself."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping | list):
        return json.dumps(value)
    return str(value)


def _is_object(text: str) -> bool:
    """Whether balanced call text is a whole JSON object; text nested too deep to decode
    counts as whole (it is complete, and the runtime refuses it with a clear error)."""
    if too_deep(text):
        return True
    try:
        return isinstance(json.loads(text), dict)
    except RecursionError:
        return True
    except ValueError:
        return False


def _failure_in(chunk: object) -> ServerFailure | None:
    """An error reported in a chunk, if any: an ``error`` key (OpenRouter's chunks, Groq's
    ``event: error`` frame), or vLLM's ``{"object": "error", "message": ...}``."""
    error = _field(chunk, "error")
    if error:
        return failure_of(error, "the server reported an error")
    if _field(chunk, "object") == "error":
        body = {key: _field(chunk, key) for key in ("message", "code", "type")}
        return failure_of(body, "the server reported an error")
    return None


def _reasoning(delta: object) -> str:
    for name in _REASONING_FIELDS:
        text = "".join(text for _, text in _parts(_field(delta, name), "reasoning"))
        if text:
            return text
    texts = []
    for detail in _items(_field(delta, "reasoning_details")):
        key = _DETAIL_TEXT.get(_string(_field(detail, "type")))
        texts.append(_string(_field(detail, key)) if key else "")
    return "".join(texts)


def _parts(value: object, kind: _Kind, depth: int = 0) -> Iterator[tuple[_Kind, str]]:
    """The texts in a content value - a string, a part, or a list of parts, nested - with
    their kind: ``thinking`` parts are reasoning, ``refusal`` parts a refusal."""
    if isinstance(value, str):
        if value:
            yield kind, value
        return
    if depth >= _MAX_DEPTH or value is None:
        return
    if isinstance(value, list | tuple):
        for item in value:
            yield from _parts(item, kind, depth + 1)
        return
    part_type = _field(value, "type")
    keys: tuple[str, ...] = ("text", "content")
    if part_type in _THINKING_PARTS:
        kind, keys = "reasoning", (cast(str, part_type), "text", "content")
    elif part_type == "refusal":
        kind, keys = "refusal", ("refusal", "text")
    for key in keys:
        inner = _field(value, key)
        if inner:
            yield from _parts(inner, kind, depth + 1)
            return


def _merged(pieces: list[tuple[_Kind, str]]) -> list[tuple[_Kind, str]]:
    """Consecutive pieces of one kind as one."""
    out: list[tuple[_Kind, str]] = []
    for kind, text in pieces:
        if out and out[-1][0] == kind:
            out[-1] = (kind, out[-1][1] + text)
        else:
            out.append((kind, text))
    return out

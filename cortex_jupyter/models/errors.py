"""Errors of the model clients: one class per way a model call fails.

Each message is built from typed fields, says what happened (with the model, the
endpoint as ``scheme://host:port`` and what the server said) and what to do next. None
ever contains an API key or any part of one: server text is passed through
``_redact.redact`` by the client before it gets here, and no class keeps the SDK's
exception (whose request carries the ``Authorization`` header).
"""

from __future__ import annotations

__all__ = [
    "AuthenticationFailed",
    "BadRequest",
    "CannotConnect",
    "ContextTooLong",
    "GrammarRefused",
    "MissingAPIKey",
    "ModelError",
    "ModelTimeout",
    "NoReplyScripted",
    "PermissionDenied",
    "RateLimited",
    "ReplyRejected",
    "ScriptExhausted",
    "ServerError",
    "StreamDropped",
    "UnexpectedReply",
    "UnknownModel",
]


def _said(server_message: str) -> str:
    return f" The server said: {server_message}" if server_message else ""


def _seconds(value: float) -> str:
    return f"{value:g} s"


def _code(code: str | None) -> str:
    return f" ({code})" if code else ""


def _tries(tries: int) -> str:
    return "1 try" if tries == 1 else f"{tries} tries"


class ModelError(Exception):
    """Raised when a model cannot produce its reply (base class).

    ``continuable`` says whether the same request may succeed later (a dropped stream,
    a busy or failing server): the agent loop then ends the run ``interrupted``, to be
    continued. When it is false (a refused key, an unknown model, a rejected request, a
    used-up quota) asking again unchanged cannot help, and the run ends ``failed``.
    """

    continuable = True


class MissingAPIKey(ModelError):
    """Raised when an OpenAI-compatible model is created without an API key."""

    continuable = False

    def __init__(self, model: str) -> None:
        self.model = model
        super().__init__(
            f"No API key for model {model!r}: set the OPENAI_API_KEY environment variable "
            "(in a notebook: %env OPENAI_API_KEY=...) or pass api_key=... . "
            "To use another OpenAI-compatible server (vLLM, Ollama, llama.cpp, LM Studio), "
            "point OPENAI_BASE_URL at it (e.g. http://localhost:11434/v1); if it needs no "
            "key, set OPENAI_API_KEY to any placeholder such as 'none'."
        )


class AuthenticationFailed(ModelError):
    """Raised when the server refuses the API key (HTTP 401)."""

    continuable = False

    def __init__(self, model: str, endpoint: str, server_message: str = "") -> None:
        self.model = model
        self.endpoint = endpoint
        self.server_message = server_message
        super().__init__(
            f"The server at {endpoint} refused the API key (HTTP 401) for model {model!r}. "
            "Check OPENAI_API_KEY (or api_key=...) is a valid key for this server, and that "
            f"OPENAI_BASE_URL points at the server the key belongs to.{_said(server_message)}"
        )


class PermissionDenied(ModelError):
    """Raised when the key is valid but may not use this model or endpoint (HTTP 403)."""

    continuable = False

    def __init__(self, model: str, endpoint: str, server_message: str = "") -> None:
        self.model = model
        self.endpoint = endpoint
        self.server_message = server_message
        super().__init__(
            f"The server at {endpoint} does not allow this API key to use model {model!r} "
            "(HTTP 403). Use a model the key's project or organisation has access to, or a "
            f"key that has access to this one.{_said(server_message)}"
        )


class UnknownModel(ModelError):
    """Raised when the server has no such model, or no such API path (HTTP 404)."""

    continuable = False

    def __init__(self, model: str, endpoint: str, server_message: str = "") -> None:
        self.model = model
        self.endpoint = endpoint
        self.server_message = server_message
        super().__init__(
            f"The server at {endpoint} has no model {model!r} (HTTP 404). Check the model "
            "name against the server's model list, and that OPENAI_BASE_URL ends with the "
            f"API root (usually /v1).{_said(server_message)}"
        )


class BadRequest(ModelError):
    """Raised when the server rejects the request as written (HTTP 400, 413, 422...)."""

    continuable = False

    def __init__(self, model: str, endpoint: str, status: int, server_message: str = "") -> None:
        self.model = model
        self.endpoint = endpoint
        self.status = status
        self.server_message = server_message
        super().__init__(
            f"The server at {endpoint} rejected the request for model {model!r} "
            f"(HTTP {status}). Change what its message names (a parameter this model does "
            "not support, a prompt longer than its context window...) and run it again."
            f"{_said(server_message)}"
        )


class RateLimited(ModelError):
    """Raised when the server is still rate-limiting after every retry (HTTP 429)."""

    def __init__(
        self,
        model: str,
        endpoint: str,
        tries: int,
        retry_after: float | None = None,
        server_message: str = "",
        *,
        quota: bool = False,
    ) -> None:
        self.model = model
        self.endpoint = endpoint
        self.tries = tries
        self.retry_after = retry_after
        self.server_message = server_message
        self.quota = quota
        self.continuable = not quota  # waiting will not refill a quota
        if quota:
            advice = (
                "The account's quota is used up: check its plan and billing; waiting will not help."
            )
        else:
            wait = (
                f"it asked to wait {_seconds(retry_after)} before retrying"
                if retry_after is not None
                else "it gave no retry delay"
            )
            advice = (
                f"{wait[0].upper()}{wait[1:]}. Wait and run it again, or allow more retries "
                "(max_retries=...)."
            )
        super().__init__(
            f"The server at {endpoint} is rate-limiting model {model!r} (HTTP 429) after "
            f"{_tries(tries)}. {advice}{_said(server_message)}"
        )


class ServerError(ModelError):
    """Raised when the server fails (HTTP 5xx after every retry, or an error event mid-reply).

    ``status`` is ``None`` when the server reported the error inside the stream (an
    ``error`` event or an ``error`` key in a chunk); ``code`` is then the code or type the
    server gave it, if any. Raised after every chunk that arrived was yielded.
    """

    def __init__(
        self,
        model: str,
        endpoint: str,
        status: int | None,
        tries: int = 1,
        server_message: str = "",
        *,
        code: str | None = None,
    ) -> None:
        self.model = model
        self.endpoint = endpoint
        self.status = status
        self.tries = tries
        self.server_message = server_message
        self.code = code
        what = (
            f"failed (HTTP {status}) after {_tries(tries)}"
            if status is not None
            else f"reported an error in the middle of the reply{_code(code)}"
        )
        super().__init__(
            f"The server at {endpoint} {what} for model {model!r}. This is the server's "
            "fault, not the request's: run it again later, or check the server's logs if it "
            f"is yours.{_said(server_message)}"
        )


class ReplyRejected(ModelError):
    """Raised when the server stops a reply midway for a reason the request itself causes.

    The server reported, inside the stream, an error it will give again for the same
    request: the conversation outgrew the model's context window, its moderation or
    content filter stopped the reply, it called the request invalid (Groq's
    ``tool_use_failed``). Raised after every chunk that arrived was yielded, so the
    partial reply is the caller's. Asking again unchanged cannot help: not continuable.
    """

    continuable = False

    def __init__(
        self, model: str, endpoint: str, server_message: str = "", code: str | None = None
    ) -> None:
        self.model = model
        self.endpoint = endpoint
        self.server_message = server_message
        self.code = code
        super().__init__(
            f"The server at {endpoint} stopped the reply of model {model!r} midway with an "
            f"error{_code(code)} that asking again unchanged will not fix. Change what its "
            "message names (a conversation longer than the model's context window, content "
            "its filters flag, a malformed tool call...) and run it again."
            f"{_said(server_message)}"
        )


class ContextTooLong(ModelError):
    """Raised when the server refuses a request longer than the model's context window
    (a 400 such as OpenAI's ``context_length_exceeded``, or the same error mid-stream).

    The conversation continues across cells; cortex fits each request into the agent's
    context budget, so this means the budget is larger than the model's real window.
    """

    continuable = False

    def __init__(self, model: str, endpoint: str, server_message: str = "") -> None:
        self.model = model
        self.endpoint = endpoint
        self.server_message = server_message
        super().__init__(
            f"The conversation no longer fits model {model!r}'s context window (the server "
            f"at {endpoint} refused it). Start afresh with %cortex reset, or set a budget "
            "below the model's window, e.g. %config CortexMagics.context_tokens = 8000 "
            "(Agent(context_tokens=...)): older exchanges are then condensed to fit."
            f"{_said(server_message)}"
        )


def is_context_length(*texts: str | None) -> bool:
    """Whether a server's error code or message says the prompt is over the context."""
    said = " ".join(t for t in texts if t).lower()
    return any(phrase in said for phrase in _CONTEXT_PHRASES)


_CONTEXT_PHRASES = (
    "context_length",
    "context length",
    "context window",
    "context_window",
    "maximum context",
    "prompt is too long",
    "too many tokens",
    "exceeds the context",
)


class CannotConnect(ModelError):
    """Raised when no connection to the server can be made (refused, unreachable, DNS)."""

    def __init__(self, model: str, host_port: str, reason: str = "") -> None:
        self.model = model
        self.host_port = host_port
        self.reason = reason
        detail = f" ({reason})" if reason else ""
        super().__init__(
            f"Cannot connect to {host_port} for model {model!r}{detail}. Check the server is "
            "running and listening there, and that OPENAI_BASE_URL (or base_url=...) names "
            "the right host and port."
        )


class ModelTimeout(ModelError):
    """Raised when the server sends nothing for ``timeout`` seconds before the reply starts."""

    def __init__(self, model: str, endpoint: str, timeout: float) -> None:
        self.model = model
        self.endpoint = endpoint
        self.timeout = timeout
        super().__init__(
            f"The server at {endpoint} did not answer within {_seconds(timeout)} for model "
            f"{model!r}. It may be overloaded or still loading the model: run it again, or "
            "allow longer (timeout=...)."
        )


class StreamDropped(ModelError):
    """Raised when the connection ends, or goes silent, in the middle of a reply.

    Raised after every chunk that arrived was yielded: the partial reply is the caller's.
    ``stalled_for`` is set when the server stopped sending (a read timeout) rather than
    closing the connection.
    """

    def __init__(
        self,
        model: str,
        endpoint: str,
        chunks: int,
        characters: int,
        stalled_for: float | None = None,
    ) -> None:
        self.model = model
        self.endpoint = endpoint
        self.chunks = chunks
        self.characters = characters
        self.stalled_for = stalled_for
        what = (
            f"the server sent nothing more for {_seconds(stalled_for)}"
            if stalled_for is not None
            else "the connection dropped"
        )
        super().__init__(
            f"The reply of model {model!r} from {endpoint} broke off after {chunks} chunks "
            f"({characters} characters): {what}. The reply is incomplete. Run it again; if "
            "it keeps happening, check the network, and a proxy's or the server's timeouts."
        )


class UnexpectedReply(ModelError):
    """Raised when the server answers, but not with an OpenAI chat completion stream."""

    def __init__(self, model: str, endpoint: str, what: str) -> None:
        self.model = model
        self.endpoint = endpoint
        self.what = what
        super().__init__(
            f"The server at {endpoint} answered the request for model {model!r}, but not with "
            f"an OpenAI chat completion stream: {what}. Check that OPENAI_BASE_URL (or "
            "base_url=...) is the API root of an OpenAI-compatible server, usually ending in "
            "/v1."
        )


class NoReplyScripted(ModelError):
    """Raised when an ``llm`` or ``agent`` action of a script asks for its reply and the
    script has no ``--- reply to ID ---`` section for that action."""

    continuable = False

    def __init__(self, action_id: str, sections: list[str]) -> None:
        self.action_id = action_id
        self.sections = sections
        have = ", ".join(sections) if sections else "none"
        super().__init__(
            f"The script has no reply for action {action_id!r}: add a section starting with "
            f"a line '--- reply to {action_id} ---' after the main script (what the model "
            f"answers that action; it may hold '--- next turn ---' lines). Sections: {have}."
        )


class ScriptExhausted(ModelError):
    """Raised when a script model is asked for more turns than its script has."""

    def __init__(self, turn: int, turns: int) -> None:
        self.turn = turn
        self.turns = turns
        has = "1 turn" if turns == 1 else f"{turns} turns"
        super().__init__(
            f"The script has no turn {turn}; it has only {has}. Each reply the run asks the "
            "model for takes the next turn (the agent asks again after action results): add "
            f"turn {turn} after a line '--- next turn ---', or pass a list with one text per "
            "turn."
        )


class GrammarRefused(BadRequest):
    """Raised when the server rejects a request that carries a grammar (``constrain``):
    it does not take grammars, or not in the form sent."""

    def __init__(self, model: str, endpoint: str, status: int, server_message: str = "") -> None:
        super().__init__(model, endpoint, status, server_message)
        self.args = (
            f"The server at {endpoint} refused the grammar sent for constrained decoding "
            f"(HTTP {status}): llama.cpp takes constrain='gbnf', vLLM constrain='vllm'; "
            f"other servers take none, so run without constrain.{_said(server_message)}",
        )

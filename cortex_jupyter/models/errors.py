"""Errors of the model clients: one class per way a model call fails.

Each class is a row of the table: the fields its message names and a ``template`` of
how it reads (``runtime.errors.CortexError`` builds the message, once, and pickles it).
Each message says what happened (with the model, the endpoint as ``scheme://host:port``
and what the server said) and what to do next. None ever contains an API key or any
part of one: server text is passed through ``_redact.redact`` by the client before it
gets here, and no class keeps the SDK's exception (whose request carries the
``Authorization`` header).
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass

from cortex_jupyter.runtime.core.errors import CortexError, count

__all__ = [
    "AuthenticationFailed",
    "BadCertificates",
    "BadRequest",
    "CannotConnect",
    "ContextTooLong",
    "GrammarRefused",
    "MissingAPIKey",
    "ModelError",
    "ModelTimeout",
    "NoReplyScripted",
    "NoScriptForPrompt",
    "PermissionDenied",
    "RateLimited",
    "ReplyRejected",
    "ScriptExhausted",
    "ServerError",
    "StreamDropped",
    "UnexpectedReply",
    "UnknownModel",
]


class ModelError(CortexError):
    """Raised when a model cannot produce its reply (base class).

    ``continuable`` says whether the same request may succeed later (a dropped stream,
    a busy or failing server): the agent loop then ends the run ``interrupted``, to be
    continued. When it is false (a refused key, an unknown model, a rejected request, a
    used-up quota) asking again unchanged cannot help, and the run ends ``failed``.
    """

    continuable = True
    #: What the server said about the failure ("" when it said nothing).
    server_message: str = ""

    @property
    def said(self) -> str:
        """What the server said, as the message's last sentence."""
        return f" The server said: {self.server_message}" if self.server_message else ""


@dataclass(eq=False, repr=False)
class MissingAPIKey(ModelError):
    """Raised when an OpenAI-compatible model is created without an API key."""

    continuable = False
    model: str
    template = (
        "No API key for model {e.model!r}: set the OPENAI_API_KEY environment variable "
        "(in a notebook: %env OPENAI_API_KEY=...) or pass api_key=... . "
        "To use another OpenAI-compatible server (vLLM, Ollama, llama.cpp, LM Studio), "
        "point OPENAI_BASE_URL at it (e.g. http://localhost:11434/v1); if it needs no "
        "key, set OPENAI_API_KEY to any placeholder such as 'none'."
    )


@dataclass(eq=False, repr=False)
class RequestRefused(ModelError):
    """Raised when the server at ``endpoint`` refuses the request for ``model`` for a
    reason asking again unchanged cannot fix (base class): not continuable."""

    continuable = False
    model: str
    endpoint: str
    server_message: str = ""


class AuthenticationFailed(RequestRefused):
    """Raised when the server refuses the API key (HTTP 401)."""

    template = (
        "The server at {e.endpoint} refused the API key (HTTP 401) for model {e.model!r}. "
        "Check OPENAI_API_KEY (or api_key=...) is a valid key for this server, and that "
        "OPENAI_BASE_URL points at the server the key belongs to.{e.said}"
    )


class PermissionDenied(RequestRefused):
    """Raised when the key is valid but may not use this model or endpoint (HTTP 403)."""

    template = (
        "The server at {e.endpoint} does not allow this API key to use model {e.model!r} "
        "(HTTP 403). Use a model the key's project or organisation has access to, or a "
        "key that has access to this one.{e.said}"
    )


class UnknownModel(RequestRefused):
    """Raised when the server has no such model, or no such API path (HTTP 404)."""

    template = (
        "The server at {e.endpoint} has no model {e.model!r} (HTTP 404). Check the model "
        "name against the server's model list, and that OPENAI_BASE_URL ends with the "
        "API root (usually /v1).{e.said}"
    )


@dataclass(eq=False, repr=False)
class BadRequest(ModelError):
    """Raised when the server rejects the request as written (HTTP 400, 413, 422...)."""

    continuable = False
    model: str
    endpoint: str
    status: int
    server_message: str = ""
    template = (
        "The server at {e.endpoint} rejected the request for model {e.model!r} "
        "(HTTP {e.status}). Change what its message names (a parameter this model does "
        "not support, a prompt longer than its context window...) and run it again.{e.said}"
    )


@dataclass(eq=False, repr=False)
class RateLimited(ModelError):
    """Raised when the server is still rate-limiting after every retry (HTTP 429)."""

    model: str
    endpoint: str
    tries: int
    retry_after: float | None = None
    server_message: str = ""
    _: KW_ONLY
    quota: bool = False
    template = (
        "The server at {e.endpoint} is rate-limiting model {e.model!r} (HTTP 429) after "
        "{e.tried}. {e.advice}{e.said}"
    )

    def __post_init__(self) -> None:
        self.continuable = not self.quota  # waiting will not refill a quota
        super().__post_init__()

    @property
    def tried(self) -> str:
        return count(self.tries, "try", "tries")

    @property
    def advice(self) -> str:
        if self.quota:
            return (
                "The account's quota is used up: check its plan and billing; waiting will not help."
            )
        if self.retry_after is None:
            wait = "It gave no retry delay"
        else:
            wait = f"It asked to wait {self.retry_after:g} s before retrying"
        return f"{wait}. Wait and run it again, or allow more retries (max_retries=...)."


@dataclass(eq=False, repr=False)
class ServerError(ModelError):
    """Raised when the server fails (HTTP 5xx after every retry, or an error event mid-reply).

    ``status`` is ``None`` when the server reported the error inside the stream (an
    ``error`` event or an ``error`` key in a chunk); ``code`` is then the code or type the
    server gave it, if any. Raised after every chunk that arrived was yielded.
    """

    model: str
    endpoint: str
    status: int | None
    tries: int = 1
    server_message: str = ""
    _: KW_ONLY
    code: str | None = None
    template = (
        "The server at {e.endpoint} {e.what} for model {e.model!r}. This is the server's "
        "fault, not the request's: run it again later, or check the server's logs if it "
        "is yours.{e.said}"
    )

    @property
    def what(self) -> str:
        if self.status is None:
            return f"reported an error in the middle of the reply{_code(self.code)}"
        return f"failed (HTTP {self.status}) after {count(self.tries, 'try', 'tries')}"


def _code(code: str | None) -> str:
    return f" ({code})" if code else ""


@dataclass(eq=False, repr=False)
class ReplyRejected(RequestRefused):
    """Raised when the server stops a reply midway for a reason the request itself causes.

    The server reported, inside the stream, an error it will give again for the same
    request: the conversation outgrew the model's context window, its moderation or
    content filter stopped the reply, it called the request invalid (Groq's
    ``tool_use_failed``). Raised after every chunk that arrived was yielded, so the
    partial reply is the caller's. Asking again unchanged cannot help: not continuable.
    """

    code: str | None = None
    template = (
        "The server at {e.endpoint} stopped the reply of model {e.model!r} midway with an "
        "error{e.coded} that asking again unchanged will not fix. Change what its "
        "message names (a conversation longer than the model's context window, content "
        "its filters flag, a malformed tool call...) and run it again.{e.said}"
    )

    @property
    def coded(self) -> str:
        return _code(self.code)


class ContextTooLong(RequestRefused):
    """Raised when the server refuses a request longer than the model's context window
    (a 400 such as OpenAI's ``context_length_exceeded``, or the same error mid-stream).

    The conversation continues across cells; cortex fits each request into the agent's
    context budget, so this means the budget is larger than the model's real window.
    """

    template = (
        "The conversation no longer fits model {e.model!r}'s context window (the server "
        "at {e.endpoint} refused it). Start afresh with %cortex reset, or set a budget "
        "below the model's window, e.g. %config CortexMagics.context_tokens = 8000 "
        "(Agent(context_tokens=...)): older exchanges are then condensed to fit.{e.said}"
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


@dataclass(eq=False, repr=False)
class CannotConnect(ModelError):
    """Raised when no connection to the server can be made (refused, unreachable, DNS)."""

    model: str
    host_port: str
    reason: str = ""
    template = (
        "Cannot connect to {e.host_port} for model {e.model!r}{e.detail}. Check the server is "
        "running and listening there, and that OPENAI_BASE_URL (or base_url=...) names "
        "the right host and port."
    )

    @property
    def detail(self) -> str:
        return f" ({self.reason})" if self.reason else ""


@dataclass(eq=False, repr=False)
class BadCertificates(ModelError):
    """Raised when the certificates ``SSL_CERT_FILE`` names cannot be loaded (a missing
    or unreadable file, or one holding no certificate): no request is sent."""

    continuable = False
    model: str
    variable: str
    path: str
    reason: str
    template = (
        "Cannot load the TLS certificates {e.variable}={e.path!r} names, for model "
        "{e.model!r} ({e.reason}). Point {e.variable} at a PEM file of CA certificates, "
        "or unset it (in a notebook: %env {e.variable}=) to use the system's."
    )


@dataclass(eq=False, repr=False)
class ModelTimeout(ModelError):
    """Raised when the server sends nothing for ``timeout`` seconds before the reply starts."""

    model: str
    endpoint: str
    timeout: float
    template = (
        "The server at {e.endpoint} did not answer within {e.timeout:g} s for model "
        "{e.model!r}. It may be overloaded or still loading the model: run it again, or "
        "allow longer (timeout=...)."
    )


@dataclass(eq=False, repr=False)
class StreamDropped(ModelError):
    """Raised when the connection ends, or goes silent, in the middle of a reply.

    Raised after every chunk that arrived was yielded: the partial reply is the caller's.
    ``stalled_for`` is set when the server stopped sending (a read timeout) rather than
    closing the connection.
    """

    model: str
    endpoint: str
    chunks: int
    characters: int
    stalled_for: float | None = None
    template = (
        "The reply of model {e.model!r} from {e.endpoint} broke off after {e.chunks} chunks "
        "({e.characters} characters): {e.what}. The reply is incomplete. Run it again; if "
        "it keeps happening, check the network, and a proxy's or the server's timeouts."
    )

    @property
    def what(self) -> str:
        if self.stalled_for is None:
            return "the connection dropped"
        return f"the server sent nothing more for {self.stalled_for:g} s"


@dataclass(eq=False, repr=False)
class UnexpectedReply(ModelError):
    """Raised when the server answers, but not with an OpenAI chat completion stream."""

    model: str
    endpoint: str
    what: str
    template = (
        "The server at {e.endpoint} answered the request for model {e.model!r}, but not with "
        "an OpenAI chat completion stream: {e.what}. Check that OPENAI_BASE_URL (or "
        "base_url=...) is the API root of an OpenAI-compatible server, usually ending in "
        "/v1."
    )


@dataclass(eq=False, repr=False)
class NoReplyScripted(ModelError):
    """Raised when an ``llm`` or ``agent`` action of a script asks for its reply and the
    script has no ``--- reply to ID ---`` section for that action."""

    continuable = False
    action_id: str
    sections: list[str]
    template = (
        "The script has no reply for action {e.action_id!r}: add a section starting with "
        "a line '--- reply to {e.action_id} ---' after the main script (what the model "
        "answers that action; it may hold '--- next turn ---' lines). Sections: {e.have}."
    )

    @property
    def have(self) -> str:
        return ", ".join(self.sections) if self.sections else "none"


@dataclass(eq=False, repr=False)
class NoScriptForPrompt(ModelError):
    """Raised when a ``ScriptModel`` made from a mapping of prompts to scripts is asked
    about a prompt the mapping does not hold."""

    continuable = False
    prompt: str
    prompts: int
    template = (
        "The script has no entry for the prompt {e.shown}: its mapping holds "
        "{e.held}, and a prompt is looked up exactly as the run sends it. Add this prompt "
        "to the mapping, or give ScriptModel a function of the prompt instead."
    )

    @property
    def shown(self) -> str:
        text = " ".join(self.prompt.split())
        return repr(text if len(text) <= 60 else text[:59] + "\u2026")

    @property
    def held(self) -> str:
        return count(self.prompts, "prompt", "prompts")


@dataclass(eq=False, repr=False)
class OutOfTurns(ModelError):
    """Raised when a model that plays recorded or written turns is asked for turn
    ``turn`` and has only ``turns`` (base class)."""

    turn: int
    turns: int

    @property
    def has(self) -> str:
        return count(self.turns, "turn", "turns")


class ScriptExhausted(OutOfTurns):
    """Raised when a script model is asked for more turns than its script has."""

    template = (
        "The script has no turn {e.turn}; it has only {e.has}. Each reply the run asks the "
        "model for takes the next turn (the agent asks again after action results): add "
        "turn {e.turn} after a line '--- next turn ---', or pass a list with one text per "
        "turn."
    )


class ReplayExhausted(OutOfTurns):
    """Raised when a replay is asked for more turns than its transcripts hold (exported
    with ``ReplayModel``, by ``models.replay``)."""

    template = (
        "The replay has no turn {e.turn}; its transcripts hold only {e.has}. A replayed run "
        "asks for the turns in the order they were recorded: replay the same prompt with "
        "the same tools, or give the transcripts of the later runs too."
    )


class GrammarRefused(BadRequest):
    """Raised when the server rejects a request that carries a grammar (``constrain``):
    it does not take grammars, or not in the form sent."""

    template = (
        "The server at {e.endpoint} refused the grammar sent for constrained decoding "
        "(HTTP {e.status}): llama.cpp takes constrain='gbnf', vLLM constrain='vllm'; "
        "other servers take none, so run without constrain.{e.said}"
    )

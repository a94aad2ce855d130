"""Model clients behind one small async interface (``runtime.chunks.StreamingModel``).

``OpenAIModel`` talks to OpenAI and any OpenAI-compatible server (the only package that
imports ``openai``); ``ScriptModel`` streams protocol text written by hand; ``ReplayModel``
streams a saved run again with its timing. Failures are
``ModelError`` subclasses whose messages say what to do and never show an API key.
"""

from .errors import (
    AuthenticationFailed,
    BadRequest,
    CannotConnect,
    ContextTooLong,
    MissingAPIKey,
    ModelError,
    ModelTimeout,
    NoReplyScripted,
    PermissionDenied,
    RateLimited,
    ReplyRejected,
    ScriptExhausted,
    ServerError,
    StreamDropped,
    UnexpectedReply,
    UnknownModel,
)
from .openai_client import DEFAULT_BASE_URL, OpenAIModel
from .replay import ReplayExhausted, ReplayModel
from .script import TURN_SEPARATOR, ScriptModel, split_replies, split_turns

__all__ = [
    "DEFAULT_BASE_URL",
    "TURN_SEPARATOR",
    "AuthenticationFailed",
    "BadRequest",
    "CannotConnect",
    "ContextTooLong",
    "MissingAPIKey",
    "ModelError",
    "ModelTimeout",
    "NoReplyScripted",
    "OpenAIModel",
    "PermissionDenied",
    "RateLimited",
    "ReplayExhausted",
    "ReplayModel",
    "ReplyRejected",
    "ScriptExhausted",
    "ScriptModel",
    "ServerError",
    "StreamDropped",
    "UnexpectedReply",
    "UnknownModel",
    "split_replies",
    "split_turns",
]

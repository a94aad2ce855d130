"""Model clients behind one small async interface (``runtime.core.model.chunks.StreamingModel``).

``OpenAIModel`` talks to OpenAI and any OpenAI-compatible server (the only package that
imports ``openai``); ``ScriptModel`` streams protocol text written by hand; ``ReplayModel``
streams a saved run again with its timing. ``pricing`` prices a request with genai-prices
(the only module that imports it; loaded when a request is first priced). Failures are
``ModelError`` subclasses whose messages say what to do and never show an API key.

``openai`` takes about half a second to import, and a ``--script`` cell never needs it:
``OpenAIModel`` and ``DEFAULT_BASE_URL`` are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import errors
from .errors import *  # noqa: F403  (every model error, as listed in errors.__all__)
from .replay import ReplayExhausted, ReplayModel
from .script import TURN_SEPARATOR, ScriptModel, split_replies, split_turns

__all__ = [
    "DEFAULT_BASE_URL",
    "TURN_SEPARATOR",
    "OpenAIModel",
    "ReplayExhausted",
    "ReplayModel",
    "ScriptModel",
    "split_replies",
    "split_turns",
]
__all__ += errors.__all__

if TYPE_CHECKING:
    from .openai_client import DEFAULT_BASE_URL, OpenAIModel

#: Names from ``openai_client``, imported (with ``openai``) only when asked for.
_LAZY = frozenset(("DEFAULT_BASE_URL", "OpenAIModel"))


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from . import openai_client

    return getattr(openai_client, name)

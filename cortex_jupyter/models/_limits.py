"""The longest reply a server allows, learned from the 400 that refused a longer cap.

Under a budget each reply is sent with the cap the budget leaves it (``max_tokens``), and
that cap can be more than the model may write: OpenAI refuses it (``max_tokens is too
large: 20000. This model supports at most 16384 completion tokens, whereas you provided
20000.``), and so does vLLM (``'max_tokens' or 'max_completion_tokens' is too large: 8000.
This model's maximum context length is 4096 tokens and your request has 2778 input tokens
(8000 > 4096 - 2778).``). Both say what would have been accepted: the request is sent
again with that cap (``OpenAIModel._open``), and what it learned is kept for the process,
per endpoint and model, as the context window is (``_window``): OpenAI's limit on every
reply here, vLLM's window there (what a reply may take then depends on its prompt).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ._window import learn_window

__all__ = ["Refused", "known_reply_limit", "learn", "refused_cap"]

# (base URL, model) -> the most completion tokens the model allows in one reply.
_LIMITS: dict[tuple[str, str], int] = {}

# The refusal: a reply cap named, said to be too large.
# (At most 200 characters apart: unbounded, every "max_tokens" in a long body scanned to
# its end, quadratic in the body's length.)
_TOO_LARGE = re.compile(r"max_(?:completion_)?tokens\W[^.]{0,200}?\btoo large\b", re.IGNORECASE)
# OpenAI: "This model supports at most 16384 completion tokens".
_AT_MOST = re.compile(r"\bat most (\d+) completion tokens\b", re.IGNORECASE)
# vLLM: "maximum context length is 4096 tokens and your request has 2778 input tokens".
_WINDOW = re.compile(
    r"maximum context length is (\d+) tokens,? and your request has (\d+) input tokens",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class Refused:
    """What a server's refusal of a reply cap says: ``cap``, the most this request may
    ask for; ``reply``, the model's limit on every reply (OpenAI's) when it says one;
    ``window``, its context window (vLLM's) when it says that instead."""

    cap: int
    reply: int | None = None
    window: int | None = None


def refused_cap(text: str, sent: int) -> Refused | None:
    """What ``text`` (a 400's message) says the request, sent with a reply cap of
    ``sent``, may ask for instead; None when it does not refuse the cap, or when what
    it allows is not less (or leaves no reply at all: the prompt is too long)."""
    if not _TOO_LARGE.search(text):
        return None
    if match := _AT_MOST.search(text):
        refused = Refused(int(match.group(1)), reply=int(match.group(1)))
    elif match := _WINDOW.search(text):
        window, prompt = int(match.group(1)), int(match.group(2))
        refused = Refused(window - prompt, window=window)
    else:
        return None
    return refused if 0 < refused.cap < sent else None


def learn(base_url: str, model: str, refused: Refused) -> None:
    """Keep what ``refused`` says of ``model`` at ``base_url`` for later requests."""
    if refused.reply is not None:
        _LIMITS[(base_url.rstrip("/"), model)] = refused.reply
    if refused.window is not None:
        learn_window(base_url, model, refused.window)


def known_reply_limit(base_url: str, model: str) -> int | None:
    """The most completion tokens a reply of ``model`` at ``base_url`` may take, once a
    server said so (None: not known)."""
    return _LIMITS.get((base_url.rstrip("/"), model))

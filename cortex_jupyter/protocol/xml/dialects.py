"""Which tags mean something, per dialect and per block: the tag dialects as data.

One state machine (``parser.XmlParser``) serves cortex (``<thought>``/``<action>``/
``<response>``), cogency (``<think>``/``<execute>``/``<respond>``/``<end>``) and
hermes (``<think>``/``<tool_call>``); what tells them apart is only which tags each
knows in each block, kept here. ``auto`` starts with the tables merged and narrows
to one dialect at the first tag only that dialect has (``decided_by``).

**Hermes** (Qwen, Hermes and many local models): ``<think>`` is the thought,
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` one tool action (a
generated id, async) started at its closing tag, and all other text is the response,
decided like a cortex response without ``final``: final when no tool call follows
it. ``<tool_response>`` written by the model is a forgery. A reply may start inside
its thought with no ``<think>`` (a chat template that writes the opener into the prompt,
as Qwen3's does): text before a lone ``</think>`` is the thought. So the leading text
of a hermes reply is held until it is decided: a ``</think>`` makes it the thought,
any other tag or the end of the stream makes it what it is without one (past
``OPENERLESS_HOLD`` characters it is let go as that, and a later ``</think>`` is text).
"""

from __future__ import annotations

from typing import Final

from ..base import FEED, RESPONSE, THOUGHT, TOP

THOUGHT_OPEN: Final = frozenset(("thought", "think", "thinking"))
THOUGHT_CLOSE: Final = frozenset(("/thought", "/think", "/thinking"))
#: Every tag that opens a forged block (a model writing what only the run may write).
#: <tool_response> is what chat templates wrap native results in: a model that echoes
#: one (hermes, or native tool calls in any dialect) forges a result just as with <result>.
FORGED_TAGS: Final = frozenset(("result", "results", "turn", "tool_response"))
#: Forged results inside a response: the answer never quotes a result the run did not
#: produce (a <turn> there is prose about a conversation, kept as text).
RESPONSE_FORGED: Final = frozenset(("result", "results", "tool_response"))

#: Which tags mean something, per dialect and per text sink.
TABLES: Final[dict[str, dict[int, frozenset[str]]]] = {
    "cortex": {
        TOP: THOUGHT_OPEN | FORGED_TAGS | {"action", "response", "context_feed"},
        THOUGHT: THOUGHT_CLOSE | FORGED_TAGS | {"action"},
        RESPONSE: RESPONSE_FORGED | {"/response"},
        FEED: frozenset({"/context_feed"}),
    },
    "cogency": {
        TOP: THOUGHT_OPEN | FORGED_TAGS | {"execute", "respond", "end", "/end"},
        THOUGHT: THOUGHT_CLOSE | FORGED_TAGS | {"execute"},
        RESPONSE: RESPONSE_FORGED | {"/respond"},
        FEED: frozenset(),
    },
    "hermes": {
        TOP: THOUGHT_OPEN | FORGED_TAGS | {"tool_call"},
        THOUGHT: THOUGHT_CLOSE | FORGED_TAGS | {"tool_call"},
        RESPONSE: frozenset(),
        FEED: frozenset(),
    },
}
TABLES["auto"] = {
    sink: TABLES["cortex"][sink] | TABLES["cogency"][sink] | TABLES["hermes"][sink]
    for sink in (TOP, THOUGHT, RESPONSE, FEED)
}

# The tags only one dialect has: the first of them decides an ``auto`` stream.
_ONLY: Final = (
    ("cortex", frozenset(("thought", "thinking", "action", "response", "context_feed"))),
    ("cogency", frozenset(("execute", "respond", "end", "/end"))),
    ("hermes", frozenset(("tool_call",))),
)

#: Characters of a hermes reply's leading text held while a lone ``</think>`` may still
#: make it the thought (see the module docstring).
OPENERLESS_HOLD: Final = 65_536


def decided_by(name: str) -> str | None:
    """The dialect a tag (by name, ``/`` included) belongs to alone, if one."""
    for dialect, names in _ONLY:
        if name in names:
            return dialect
    return None

"""A context budget: what is sent to the model fits its window, however long the notebook.

Every ``%%cortex`` cell continues one conversation, and every message and results block
would otherwise be sent again on every later turn until the server refuses the request
(or silently drops its start). Before each model call the messages are fitted into the
budget, keeping room for the reply (``max_tokens``):

1. always whole: the system prompt, the current cell's prompt and the current run's turns;
2. then older exchanges (one cell's prompt, replies and results each), newest first:
   whole while they fit, else condensed (every result body cut to one line, tool
   messages too; what the model wrote stays), and what still does not fit is replaced by
   one short summary of everything older (written by the model, a plain cut when it
   cannot: a ``--script`` with no reply for it).

An exchange is kept, condensed or summarised as a whole, so a native tool call is never
separated from its result. Tokens are counted cheaply: characters divided by a ratio
that starts at 4 and is calibrated against the ``prompt_tokens`` each reply reports
(``TokenCounter``), so the estimate tracks the server's own tokenizer after one turn.

Pure apart from the summary call, which the loop makes; no I/O here.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from cortex_jupyter.runtime.core.cost.budget import DEFAULT_WINDOW, wide_tokens
from cortex_jupyter.runtime.core.model.chunks import ChatMessage
from cortex_jupyter.runtime.core.trust.secrets import head, redact, shorten

__all__ = [
    "DEFAULT_BUDGET",
    "Fit",
    "TokenCounter",
    "condense",
    "exchanges",
    "fit_messages",
    "plain_summary",
]

#: The budget when neither the agent nor the model says (tokens).
DEFAULT_BUDGET = DEFAULT_WINDOW  # (the window a budget reserves for an uncapped reply too)
#: Room kept for the reply when the agent sets no ``max_tokens``.
DEFAULT_REPLY_ROOM = 1_024
#: What one message costs beyond its text (role, separators), in tokens.
MESSAGE_OVERHEAD = 4
#: A condensed result keeps this many characters of its first line.
CONDENSED_LINE = 100

_RESULT = re.compile(r"(<result\b[^>]*>)(.*?)(</result>)", re.DOTALL)
_HERMES_RESULT = re.compile(r"(<tool_response>\s*)(.*?)(\s*</tool_response>)", re.DOTALL)
_SIGIL_RESULT = re.compile(r"^(\[[^\]\n]+\] [^\n]*?: )(.*)$", re.MULTILINE)


@dataclass
class TokenCounter:
    """Tokens from characters: ``chars_per_token`` starts at 4 and moves towards what the
    server's ``prompt_tokens`` say (each report weighs half); a character outside ASCII
    adds ``wide_tokens`` (a budget reserves this count: it must not fall short of the
    server's for a prompt in Chinese or emoji)."""

    chars_per_token: float = 4.0
    calibrated: bool = False

    def count(self, message: ChatMessage) -> int:
        chars, wide = _size(message)
        return MESSAGE_OVERHEAD + round(chars / self.chars_per_token) + wide

    def total(self, messages: Sequence[ChatMessage]) -> int:
        return sum(self.count(m) for m in messages)

    def calibrate(self, messages: Sequence[ChatMessage], prompt_tokens: int) -> None:
        """The server counted ``prompt_tokens`` for ``messages``: learn the ratio (of the
        characters, what the wide ones add aside)."""
        sizes = [_size(m) for m in messages]
        text_tokens = prompt_tokens - MESSAGE_OVERHEAD * len(messages) - sum(w for _, w in sizes)
        chars = sum(c for c, _ in sizes)
        if text_tokens <= 0 or chars <= 0:
            return
        measured = min(max(chars / text_tokens, 1.0), 12.0)
        if self.calibrated:
            measured = (self.chars_per_token + measured) / 2
        self.chars_per_token = measured
        self.calibrated = True


def _size(message: ChatMessage) -> tuple[int, int]:
    """``message``'s characters, and the tokens its wide ones add (``wide_tokens``)."""
    content = message.get("content") or ""
    size, wide = len(content), wide_tokens(content)
    for call in message.get("tool_calls") or ():
        name, arguments = call["function"]["name"], call["function"]["arguments"]
        size += len(name) + len(arguments) + 10
        wide += wide_tokens(name) + wide_tokens(arguments)
    return size, wide


def exchanges(messages: Sequence[ChatMessage], starts: Sequence[int]) -> list[range]:
    """The index ranges of ``messages`` that make one exchange each: from a run's prompt
    (an index in ``starts``) to the next one. Messages before the first start (a
    conversation rebuilt without marks) make one exchange."""
    bounds = sorted({s for s in starts if 0 <= s < len(messages)} | {0, len(messages)})
    return [range(a, b) for a, b in itertools.pairwise(bounds) if b > a]


def condense(message: ChatMessage) -> ChatMessage:
    """A message with what actions returned cut to one line each (results blocks and tool
    messages); what the model or the user wrote is kept as it is."""
    content = message.get("content") or ""
    out: ChatMessage = dict(message)  # type: ignore[assignment]
    if message["role"] == "tool":
        out["content"] = _one_line(content)
    elif message["role"] == "user" and content.lstrip().startswith(_RESULTS_OPENERS):
        if content.lstrip().startswith("<results>"):
            out["content"] = _RESULT.sub(lambda m: m[1] + _one_line(m[2]) + m[3], content)
        elif content.lstrip().startswith("<tool_response>"):
            out["content"] = _HERMES_RESULT.sub(lambda m: m[1] + _hermes_line(m[2]) + m[3], content)
        else:
            out["content"] = _SIGIL_RESULT.sub(lambda m: m[1] + _one_line(m[2]), content)
    return out


#: How a results message starts, per dialect (cortex, hermes, sigil).
_RESULTS_OPENERS = ("<results>", "<tool_response>", "§RESULTS:")


def _hermes_line(body: str) -> str:
    """A hermes ``<tool_response>`` body (``{"id", "name", "status", "content"}`` as
    JSON) with its ``content`` cut to one line; the rest stays for the model to read."""
    try:
        data = json.loads(body)
    except ValueError:
        return _one_line(body)
    if not isinstance(data, dict) or "content" not in data:
        return body  # an error report: short, and JSON the model should still read
    content = data["content"]
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    line = _one_line(text)
    if line == text:
        return body
    return json.dumps({**data, "content": line}, ensure_ascii=False)


def _one_line(text: str) -> str:
    text = redact(text)  # before the cut: no part of a secret stays at its edge
    first = text.strip().split("\n", 1)[0]
    if len(first) > CONDENSED_LINE:
        first = head(first, CONDENSED_LINE).rstrip()
    cut = len(text.strip()) - len(first)
    return f"{first} … [{cut:,} characters cut to fit the context]" if cut > 0 else first


def plain_summary(messages: Sequence[ChatMessage], limit_chars: int) -> str:
    """A summary without a model: each older prompt and answer's first line, in order,
    cut to ``limit_chars``."""
    lines = []
    for message in messages:
        content = (message.get("content") or "").strip()
        if not content or message["role"] == "tool" or content.startswith((*_RESULTS_OPENERS, "§")):
            continue
        who = "User" if message["role"] == "user" else "You"
        lines.append(f"- {who}: {_one_line(content)}")
    text = "\n".join(lines)
    return shorten(text, limit_chars)


SUMMARY_HEAD = "Summary of the earlier conversation (condensed to fit the context):"


def summary_prompt(messages: Sequence[ChatMessage], words: int) -> str:
    """What the model is asked when it writes the summary of ``messages``."""
    shown = [
        {"role": m["role"], "content": head(m.get("content") or "", 2000)}
        for m in messages
        if m["role"] != "system"
    ]
    return (
        f"Summarise this conversation between a user and an agent in at most {words} words: "
        "what the user asked, what was found or decided, and any names, numbers or "
        "variables later messages may refer to. Write only the summary.\n\n"
        + json.dumps(shown, ensure_ascii=False)
    )


@dataclass
class Fit:
    """The messages to send, and what fitting did to the conversation.

    ``marks`` maps a conversation index to ``"condensed"`` or ``"summarised"`` (left out
    of what is sent, in the summary instead); ``summarised`` is the index range the
    summary stands for (None: no summary); ``tokens`` the estimate of what is sent;
    ``over`` whether even what is always kept exceeds the budget.
    """

    messages: list[ChatMessage]
    tokens: int
    budget: int
    marks: dict[int, str] = field(default_factory=dict)
    summarised: range | None = None
    over: bool = False

    @property
    def changed(self) -> bool:
        return bool(self.marks)


def fit_messages(
    system: ChatMessage,
    history: Sequence[ChatMessage],
    *,
    current: int,
    starts: Sequence[int],
    budget: int,
    reply_room: int,
    counter: TokenCounter,
    summaries: dict[tuple[int, int], str] | None = None,
) -> Fit:
    """Fit ``system`` + ``history`` into ``budget`` tokens minus ``reply_room``.

    ``history[current:]`` is the current run (always sent whole); ``starts`` are the
    indices where earlier runs' prompts begin. ``summaries`` holds summaries already
    made, by the ``(start, end)`` range they stand for; without one for the range that
    must be summarised, ``Fit.summarised`` says which, and a plain cut stands in.
    """
    room = budget - reply_room
    kept_tail = list(history[current:])
    required = counter.count(system) + counter.total(kept_tail)
    older = exchanges(history[:current], starts)
    chosen, folded = _choose(history, older, room - required, counter)
    if folded is not None:
        chosen, folded = _refold(history, older, room - required, counter, summaries or {})
    used = required + sum(cost for _, _, cost in chosen)
    marks: dict[int, str] = {}
    for block, how, _ in chosen:
        if how == "condensed":
            marks.update(dict.fromkeys(block, "condensed"))
    messages: list[ChatMessage] = [system]
    if folded is not None:
        marks.update(dict.fromkeys(folded, "summarised"))
        summary = _summary_message(history, folded, summaries, room - used, counter)
        if summary is not None:
            messages.append(summary)
            used += counter.count(summary)
    for block, how, _ in reversed(chosen):
        for i in block:
            messages.append(condense(history[i]) if how == "condensed" else _copy(history[i]))
    messages.extend(kept_tail)
    return Fit(messages, used, budget, marks, summarised=folded, over=required > room)


def _refold(
    history: Sequence[ChatMessage],
    older: list[range],
    room: int,
    counter: TokenCounter,
    summaries: dict[tuple[int, int], str],
) -> tuple[list[tuple[range, str, int]], range]:
    """Something must be summarised: which older exchanges to keep, and the range the
    summary stands for. The last summary is reused while everything newer still fits
    beside it; else the fold moves so that kept exchanges use half the room, leaving the
    next cells slack, so the summary is not rewritten after every cell."""
    stops = {block.stop for block in older}
    made = [stop for (start, stop) in summaries if start == 0 and stop in stops]
    if made:
        stop = max(made)
        text = summaries[(0, stop)]
        cost = counter.count({"role": "user", "content": f"{SUMMARY_HEAD}\n{text}"})
        newer = [block for block in older if block.start >= stop]
        chosen, folded = _choose(history, newer, room - cost, counter)
        if folded is None:
            return chosen, range(0, stop)
    chosen, folded = _choose(history, older, room // 2, counter)
    return chosen, folded if folded is not None else range(0, older[0].stop)


def _choose(
    history: Sequence[ChatMessage], older: list[range], room: int, counter: TokenCounter
) -> tuple[list[tuple[range, str, int]], range | None]:
    """Older exchanges that fit in ``room``, newest first, each with how it is sent and
    its cost; and the range of those that must be summarised (None: all fit).

    All whole when they all fit. Otherwise the newest stay whole within half the room,
    older ones are condensed into the rest, and the first that does not fit even
    condensed starts what is summarised: recent detail, older gist, oldest summary.
    """
    whole = [counter.total([history[i] for i in block]) for block in older]
    if sum(whole) <= room:
        return [(block, "whole", cost) for block, cost in zip(older, whole, strict=True)][
            ::-1
        ], None
    chosen: list[tuple[range, str, int]] = []
    whole_room, condensing = room // 2, False
    for block, cost in reversed(list(zip(older, whole, strict=True))):
        if not condensing and cost <= whole_room:
            chosen.append((block, "whole", cost))
            whole_room -= cost
            room -= cost
            continue
        condensing = True
        cost = counter.total([condense(history[i]) for i in block])
        if cost > room:
            return chosen, range(0, block.stop)
        chosen.append((block, "condensed", cost))
        room -= cost
    return chosen, None


def _copy(message: ChatMessage) -> ChatMessage:
    return dict(message)  # type: ignore[return-value]


def _summary_message(
    history: Sequence[ChatMessage],
    folded: range,
    summaries: dict[tuple[int, int], str] | None,
    room: int,
    counter: TokenCounter,
) -> ChatMessage | None:
    """The user message carrying the summary of ``history[folded]``, within ``room``."""
    if room <= MESSAGE_OVERHEAD + 8:
        return None
    text = (summaries or {}).get((folded.start, folded.stop))
    limit = int((room - MESSAGE_OVERHEAD) * counter.chars_per_token) - len(SUMMARY_HEAD) - 2
    if text is None:
        text = plain_summary([history[i] for i in folded], limit)
    elif len(text) > limit:
        text = shorten(text, limit)
    if not text.strip():
        return None
    return {"role": "user", "content": f"{SUMMARY_HEAD}\n{text}"}


def budget_for(agent_budget: int | None, model: Any) -> int:
    """The budget: the agent's, else the model's own window where it says, else 32,000."""
    if agent_budget:
        return int(agent_budget)
    window = getattr(model, "context_window", None)
    return int(window) if isinstance(window, int) and window > 0 else DEFAULT_BUDGET

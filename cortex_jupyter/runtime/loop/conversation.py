"""A ``Conversation``: the messages an agent's runs have sent and received, which runs
given the same one continue. It can be forked, rebuilt from run records or saved
transcripts, and read as text."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from typing import cast

from cortex_jupyter.runtime.core.model.chunks import ChatMessage, Message, ToolCallPayload
from cortex_jupyter.runtime.core.record.run import Run
from cortex_jupyter.runtime.core.trust.secrets import head
from cortex_jupyter.runtime.loop.context import TokenCounter
from cortex_jupyter.runtime.loop.transcript import RunSource, load_runs, run_messages

__all__ = ["Conversation"]


class Conversation:
    """One conversation with the model, across runs: the messages it is sent.

    The system prompt is not part of it (each turn builds a fresh one, with current
    feeds). Runs given the same ``Conversation`` continue it; ``reset()`` forgets
    everything, ``fork()`` branches off a copy. ``from_run`` / ``from_transcript``
    rebuild one from run records or saved transcripts.
    """

    def __init__(self, messages: Iterable[Message] = (), starts: Iterable[int] = ()) -> None:
        self._messages: list[ChatMessage] = [_copy(m) for m in messages]
        #: Names this conversation in traces (``gen_ai.conversation.id``): the runs
        #: that continue it share it.
        self.id = uuid.uuid4().hex[:12]
        #: Where each run's prompt begins (an exchange: what the context budget keeps,
        #: condenses or summarises as a whole).
        self.starts: list[int] = sorted(set(starts))
        #: What the last fit did to each message: "condensed" or "summarised".
        self.marks: dict[int, str] = {}
        #: Summaries the model wrote, by the (start, end) range of messages they replace.
        self.summaries: dict[tuple[int, int], str] = {}
        #: Tokens from characters, calibrated against the server's counts.
        self.counter = TokenCounter()

    @property
    def history(self) -> list[ChatMessage]:
        """The messages so far (copies: changing them does not change the conversation)."""
        return [_copy(m) for m in self._messages]

    def append(self, message: Message) -> None:
        self._messages.append(_copy(message))

    def begin(self) -> int:
        """A new exchange (a run's prompt) starts with the next message; its index."""
        start = len(self._messages)
        if start not in self.starts:
            self.starts.append(start)
        return start

    def drop_unanswered(self) -> bool:
        """Forget the last exchange if the model never answered it: its run failed (or
        was stopped) before the model wrote anything, so all it holds is the prompt.
        Kept, the next cell's prompt would follow it, and a prompt tried again would be
        sent twice. An exchange the model answered, even in part, is kept whole (what
        ran, ran). True when one was dropped."""
        if not self.starts:
            return False
        start = self.starts[-1]
        if any(m["role"] == "assistant" for m in self._messages[start:]):
            return False
        self.drop_last()
        return True

    def drop_last(self) -> None:
        """Forget the last exchange (a resumed run puts its own, as recorded, instead)."""
        if self.starts:
            start = self.starts.pop()
            del self._messages[start:]
            self.marks = {i: mark for i, mark in self.marks.items() if i < start}
            self.summaries = {k: v for k, v in self.summaries.items() if k[1] <= start}

    def reset(self) -> None:
        """Forget every message: the next run starts a fresh conversation."""
        self._messages.clear()
        self.starts.clear()
        self.marks.clear()
        self.summaries.clear()

    def fork(self) -> Conversation:
        """An independent copy to continue differently."""
        copy = Conversation(self._messages, self.starts)
        copy.summaries = dict(self.summaries)
        copy.counter = TokenCounter(self.counter.chars_per_token, self.counter.calibrated)
        return copy

    @classmethod
    def from_run(cls, *runs: Run) -> Conversation:
        """The conversation the given runs had, in order (each run an exchange)."""
        messages: list[ChatMessage] = []
        starts = []
        for run in runs:
            starts.append(len(messages))
            messages.extend(run_messages(run))
        return cls(messages, starts)

    @classmethod
    def from_transcript(cls, *sources: RunSource) -> Conversation:
        """The conversation of saved transcripts (paths or JSONL text), in order."""
        return cls.from_run(*load_runs(sources))

    def __len__(self) -> int:
        return len(self._messages)

    def __iter__(self) -> Iterator[ChatMessage]:
        return iter(self.history)

    def __repr__(self) -> str:
        return f"<Conversation: {len(self._messages)} messages>"

    def __str__(self) -> str:
        """The conversation as text: one paragraph per message, long ones shortened."""
        lines = []
        for index, message in enumerate(self._messages):
            content = message.get("content") or ""
            if len(content) > 600:  # (already redacted: ``_say``; a cut hides the rest)
                content = head(content, 600) + f" … [{len(content) - 600:,} more characters]"
            calls = message.get("tool_calls")
            if calls:
                content += "".join(
                    f"\n→ {c['function']['name']}({c['function']['arguments']})" for c in calls
                )
            who = message["role"]
            if message.get("tool_call_id"):
                who += f" ({message['tool_call_id']})"
            mark = self.marks.get(index)
            if mark == "condensed":
                who += " · condensed to fit the context: results cut to a line each"
            elif mark == "summarised":
                who += " · not sent: in the summary of the earlier conversation"
            lines.append(f"[{who}]\n{content}")
        return "\n\n".join(lines)


def _copy(message: Message) -> ChatMessage:
    out = cast(ChatMessage, dict(message))
    if "tool_calls" in out:
        out["tool_calls"] = [cast(ToolCallPayload, dict(call)) for call in out["tool_calls"]]
    return out

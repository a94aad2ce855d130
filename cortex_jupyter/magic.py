"""The ``%%cortex`` cell magic.

The magic stays thin: it parses its arguments, hands the cell to one function and
prints the result. In this version the only thing a cell can do is ``--script``:
the cell body is parsed as if a model had written it, and the parser's events are
listed as plain text, which is how the protocol is explored before the runtime,
the models and the live display exist.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from typing import Any

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import Magics, cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from cortex_jupyter.protocol import Parser
from cortex_jupyter.protocol.events import (
    Action,
    ActionReady,
    ContextFeedEvent,
    Event,
    ProtocolError,
    ResponseDelta,
    ResponseEnd,
    TextDelta,
    ThoughtDelta,
    action_to_dict,
)

DIALECTS = ("cortex", "sigil", "cogency", "auto")
DEFAULT_CHUNK_SIZE = 16
EVENTS_VARIABLE = "_cortex_events"

_NO_MODEL_YET = (
    "Sending a cell to a model is not available yet in this version of cortex_jupyter. "
    "Use `%%cortex --script` to parse the cell body as if a model had written it."
)


@magics_class
class CortexMagics(Magics):
    """The ``%%cortex`` magic.

    A ``Configurable`` (through ``Magics``), so defaults such as the model can later
    be set with ``%config CortexMagics.<name> = ...``.
    """

    @magic_arguments()
    @argument(
        "--script",
        action="store_true",
        help="Parse the cell body as if a model had written it and list the events.",
    )
    @argument(
        "--dialect",
        default="cortex",
        metavar="NAME",
        help="Protocol dialect: cortex (default), sigil, cogency or auto.",
    )
    @argument(
        "--chunk-size",
        default=str(DEFAULT_CHUNK_SIZE),
        metavar="N",
        help=f"Feed the text to the parser N characters at a time (default {DEFAULT_CHUNK_SIZE}).",
    )
    @cell_magic
    def cortex(self, line: str, cell: str) -> None:
        """Run a cell through the Cortex streaming execution protocol.

        With ``--script`` the cell body is treated as a model's output: it is fed to
        the protocol parser in chunks, the events are listed as text, and the list of
        events is stored in the notebook variable ``_cortex_events``.
        """
        dialect, chunk_size = _parse_options(line)
        events = _parse_script(cell, dialect=dialect, chunk_size=chunk_size)
        if self.shell is not None:
            self.shell.user_ns[EVENTS_VARIABLE] = events
        print(_format_events(events), end="")


def register(shell: InteractiveShell) -> None:
    """Add the ``%%cortex`` magic to a shell."""
    shell.register_magics(CortexMagics)


def unregister(shell: InteractiveShell) -> None:
    """Take the ``%%cortex`` magic out of a shell again (for ``%unload_ext``)."""
    manager = shell.magics_manager
    magics = manager.registry.pop(CortexMagics.__name__, None)
    if magics is None:
        return
    cell_magics = manager.magics["cell"]
    if getattr(cell_magics.get("cortex"), "__self__", None) is magics:
        del cell_magics["cortex"]
    if magics in shell.configurables:
        shell.configurables.remove(magics)


def _parse_options(line: str) -> tuple[str, int]:
    """The dialect and chunk size asked for on the magic's line, checked."""
    try:
        args = parse_argstring(CortexMagics.cortex, line)
    except UsageError as error:
        raise UsageError(f"%%cortex: {error}. See `%%cortex?` for the options.") from None
    if not args.script:
        raise UsageError(_NO_MODEL_YET)
    dialect = str(args.dialect)
    if dialect not in DIALECTS:
        raise UsageError(
            f"%%cortex: unknown dialect {dialect!r}. Use one of: {', '.join(DIALECTS)}."
        )
    chunk_size = str(args.chunk_size)
    if not chunk_size.isdigit() or int(chunk_size) < 1:
        raise UsageError(
            f"%%cortex: --chunk-size must be a whole number of 1 or more, not {chunk_size!r}."
        )
    return dialect, int(chunk_size)


def _parse_script(text: str, *, dialect: str, chunk_size: int) -> list[Event]:
    """Every event the parser produces for ``text`` arriving ``chunk_size`` characters at a time."""
    parser = Parser(dialect=dialect)
    events: list[Event] = []
    for start in range(0, len(text), chunk_size):
        events.extend(parser.feed(text[start : start + chunk_size]))
    events.extend(parser.close())
    return events


_TextEvent = ThoughtDelta | ResponseDelta | TextDelta
_TEXT_EVENT_TYPES = (ThoughtDelta, ResponseDelta, TextDelta)


def _join_text_deltas(events: Iterable[Event]) -> list[Event]:
    """The events with each run of consecutive text deltas of one kind joined into one.

    Where the parser splits a block's text depends on how the text was chunked; joined,
    the events are the same for every chunking (ARCHITECTURE.md, "Contracts").
    """
    joined: list[Event] = []
    run: list[_TextEvent] = []
    for event in events:
        if run and not _same_block(run[-1], event):
            joined.append(_join(run))
            run = []
        if isinstance(event, _TEXT_EVENT_TYPES):
            run.append(event)
        else:
            joined.append(event)
    if run:
        joined.append(_join(run))
    return joined


def _same_block(delta: _TextEvent, event: Event) -> bool:
    # Response deltas of different finality belong to different responses.
    return type(event) is type(delta) and getattr(event, "final", None) == getattr(
        delta, "final", None
    )


def _join(run: Sequence[_TextEvent]) -> _TextEvent:
    return dataclasses.replace(run[0], text="".join(delta.text for delta in run))


def _format_events(events: Iterable[Event]) -> str:
    """A plain-text listing of what the parser understood, for people to read."""
    joined = _join_text_deltas(events)
    lines: list[str] = []
    for index, event in enumerate(joined):
        if isinstance(event, ResponseDelta):
            final = _response_is_final(joined, after=index, default=event.final)
            lines.extend(_block("response" if final else "response (not final)", event.text))
        else:
            lines.extend(_describe(event))
    if not lines:
        return "(no thought, action, response or error in this text)\n"
    return "\n".join(lines) + "\n"


def _response_is_final(events: Sequence[Event], *, after: int, default: bool) -> bool:
    # Sigil and cogency learn a response's finality only where it ends (ResponseEnd).
    ends = (events[i] for i in range(after + 1, len(events)))
    return next((e.final for e in ends if isinstance(e, ResponseEnd)), default)


def _describe(event: Event) -> list[str]:
    if isinstance(event, ThoughtDelta):
        return _block("thought", event.text)
    if isinstance(event, TextDelta):
        # Whitespace between blocks is kept by the parser but says nothing to a reader.
        return _block("text outside any block", event.text) if event.text.strip() else []
    if isinstance(event, ActionReady):
        return _describe_action(event.action)
    if isinstance(event, ContextFeedEvent):
        return _block(f"context_feed {event.id}", event.text)
    if isinstance(event, ProtocolError):
        about = f" (action {event.id})" if event.id is not None else ""
        return _block(f"error {event.code}{about}", event.message)
    # Block ends and action starts: the listing's order already shows them.
    return []


def _describe_action(action: Action) -> list[str]:
    fields = action_to_dict(action)
    lines = [
        f"action {action.id}: {action.name} (type={action.type}, mode={action.mode})",
        f"  parameters: {_json(action.parameters)}",
    ]
    for key in ("id", "type", "mode", "name", "parameters"):
        fields.pop(key)
    lines.extend(f"  {key}: {_json(value)}" for key, value in fields.items())
    return lines


def _block(title: str, text: str) -> list[str]:
    body = text.strip()
    if not body:
        return [title, "  (empty)"]
    return [title, *(f"  {line}" if line else "" for line in body.splitlines())]


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=repr)

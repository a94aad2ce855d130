"""Golden protocol cases: each file in ``cases/`` holds an input and its events.

Format (one case per file, read whole by a person)::

    # what the case pins, in a sentence or two
    # dialect: cortex                      (optional; default cortex)
    # options: max_action_chars=40         (optional; Parser keyword arguments)
    <the protocol text, exactly as the model wrote it>
    === events ===
    {"kind": "thought", "text": "..."}     (one JSON event per line)

The protocol text ends at the newline before ``=== events ===`` (that newline is not
part of it). Events are normalised: consecutive text deltas of one block joined.

``python -m tests.protocol.golden --update [NAME...]`` rewrites the expected events
from the current parser, for writing a new case; review the diff before committing.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cortex_jupyter.protocol import Event, Parser, event_to_dict

CASES_DIR = Path(__file__).parent / "cases"
SEPARATOR = "=== events ==="
TEXT_KINDS = ("thought", "response", "text")


@dataclass
class Case:
    name: str
    path: Path
    description: str
    text: str
    expected: list[dict[str, Any]]
    dialect: str = "cortex"
    options: dict[str, Any] = field(default_factory=dict)


def normalise(events: list[Event]) -> list[dict[str, Any]]:
    """Events as dicts, with consecutive text deltas of one block joined."""
    out: list[dict[str, Any]] = []
    for event in events:
        record = event_to_dict(event)
        last = out[-1] if out else None
        if (
            last is not None
            and record["kind"] in TEXT_KINDS
            and last["kind"] == record["kind"]
            and last.get("final") == record.get("final")
        ):
            last["text"] += record["text"]
        else:
            out.append(record)
    return out


def parse_chunks(case: Case, chunks: list[str]) -> list[dict[str, Any]]:
    parser = Parser(case.dialect, **case.options)
    events: list[Event] = []
    for chunk in chunks:
        events.extend(parser.feed(chunk))
    events.extend(parser.close())
    return normalise(events)


def split_every(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def load_case(path: Path) -> Case:
    raw = path.read_bytes().decode("utf-8")
    head, sep, tail = raw.partition("\n" + SEPARATOR + "\n")
    if not sep:
        raise ValueError(f"{path.name}: no '{SEPARATOR}' line")
    lines = head.split("\n")
    meta: list[str] = []
    while lines and lines[0].startswith("#"):
        meta.append(lines.pop(0)[1:].strip())
    text = "\n".join(lines)
    description: list[str] = []
    dialect = "cortex"
    options: dict[str, Any] = {}
    for line in meta:
        if line.startswith("dialect:"):
            dialect = line.split(":", 1)[1].strip()
        elif line.startswith("options:"):
            for item in line.split(":", 1)[1].split():
                key, value = item.split("=")
                options[key] = json.loads(value)
        else:
            description.append(line)
    expected = [json.loads(line) for line in tail.splitlines() if line.strip()]
    return Case(path.stem, path, " ".join(description), text, expected, dialect, options)


def load_cases() -> list[Case]:
    return [load_case(p) for p in sorted(CASES_DIR.glob("*.case"))]


def _compact(value: Any) -> str:
    # An option's value is one word of the options line: no spaces in its JSON.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def render(case: Case, events: list[dict[str, Any]]) -> str:
    head = "\n".join(
        [f"# {case.description}"]
        + ([f"# dialect: {case.dialect}"] if case.dialect != "cortex" else [])
        + (
            [f"# options: {' '.join(f'{k}={_compact(v)}' for k, v in case.options.items())}"]
            if case.options
            else []
        )
    )
    body = "\n".join(json.dumps(e, ensure_ascii=False) for e in events)
    return f"{head}\n{case.text}\n{SEPARATOR}\n{body}\n"


def update(names: list[str]) -> None:
    for case in load_cases():
        if names and case.name not in names:
            continue
        events = parse_chunks(case, [case.text])
        case.path.write_bytes(render(case, events).encode("utf-8"))
        print(f"updated {case.name}: {len(events)} events")


if __name__ == "__main__":
    if sys.argv[1:2] != ["--update"]:
        sys.exit("usage: python -m tests.protocol.golden --update [NAME...]")
    update(sys.argv[2:])

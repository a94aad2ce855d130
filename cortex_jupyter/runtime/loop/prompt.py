"""What the model reads: the system prompt, action results and notes, as plain text.

Pure functions, no I/O. ``system_prompt`` teaches the chosen dialect with a short
example, lists what the model can call with its schema, the context feeds and the
notebook variables the user's prompt refers to. ``format_results`` is the block the
next turn starts with; ``describe_variables`` says what a notebook value is (type,
shape or length, a short repr) without ever dumping it whole or raising.

The text is inspectable (``system_prompt(...)``) and pinned by golden files in
``tests/runtime/prompts/``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cortex_jupyter.protocol.events import Action, ProtocolError
from cortex_jupyter.runtime.core.calls.registry import Registry
from cortex_jupyter.runtime.core.errors import type_label
from cortex_jupyter.runtime.core.record.graph import ActionNode
from cortex_jupyter.runtime.core.trust.secrets import (
    head,
    hide_edges,
    render_value,
    safe_repr,
    truncate,
)
from cortex_jupyter.runtime.core.values.typed import OutputType
from cortex_jupyter.runtime.loop.feeds import FeedSet
from cortex_jupyter.runtime.scheduler.spec import InternalPolicy

__all__ = [
    "DIALECTS",
    "describe_value",
    "describe_variables",
    "format_results",
    "render_value",
    "result_text",
    "system_prompt",
    "truncate",
]

DIALECTS: tuple[str, ...] = ("cortex", "sigil", "cogency", "hermes", "auto")
_REPR_LIMIT = 300

_INTRO = (
    "You are an agent working inside a Jupyter notebook, for the person running it. You "
    "think, call actions and answer in the {title}. Your reply is read while you write it: "
    "each action starts the moment it is complete, so write it as soon as you know you need "
    "it and keep writing while it runs."
)

_REFERENCES = """\
`$name` refers to a value: the `output_key` of an earlier action, a context feed's id, or \
a notebook variable. A parameter that is exactly "$name" receives the object itself; \
`$name.key` reaches inside; `$$` is a literal `$`. Referring to the `output_key` of an \
earlier action makes the call wait for that action."""

_CORTEX = """\
# How you answer: the Cortex protocol

- `<thought>...</thought>`: your reasoning, shown to the user as you write it. Actions may \
appear inside it.
- `<action type="tool" mode="async" id="a1">{"name": "...", "parameters": {...}}</action>`: \
one call of an action listed below. The body is a JSON object: `name` (required), \
`parameters` (an object), `output_key` (keep the output under this name), `depends_on` \
(ids of actions to wait for), `timeout` (seconds), `retry` (extra attempts), `on_error` \
("fail", "skip" or "retry"). `type` is the action's type as listed below (default `tool`). \
`mode` is `async` (default: starts at once), `sync` (actions written after it wait for it) \
or `fire_and_forget` (nothing waits for it and its result is not sent back). Give every \
action an id you have not used before.
- `<response final="true">...</response>`: your answer to the user, in markdown. \
`final="false"` says you are not done yet.

{references}

When your reply has actions and no final response, or a response with `final="false"`, \
the runtime waits for the actions and sends their results in the next message:

{results}

Then you continue. Never write `<result>` or `<results>` yourself: results come only from \
the runtime. Finish with a final `<response>`.

## Example (`get_weather` stands for any tool)

<thought>I need the weather before I can answer.</thought>
<action type="tool" mode="async" id="w1">{"name": "get_weather", "parameters": \
{"city": "Paris"}, "output_key": "weather"}</action>
<response final="false">Checking the weather in Paris.</response>

The next message brings:

{example results}

and you answer:

<response>It is 18 °C and sunny in Paris.</response>"""

_SIGIL = """\
# How you answer: the sigil protocol

Write your reply in sections. Each starts with a marker and runs to the next marker:

- `§THINK:` your reasoning, shown to the user as you write it.
- `§CALLS:` a JSON list of calls of the tools listed below: \
`[{"name": "...", "args": {...}}, ...]`. A call may also have `output_key` (keep the \
output under this name) and `depends_on` (a list of call ids to wait for). Calls are \
numbered `auto-1`, `auto-2`, ... in the order you write them, continuing over the whole \
task; each starts as soon as its `{...}` closes.
- `§EXECUTE:` ends your turn. Stop writing there: the runtime runs the calls and sends \
their results in the next message.
- `§RESPOND:` your answer to the user, in markdown.
- `§END:` the task is complete; write it right after your final `§RESPOND:` section.

{references}

Results arrive in the next message as:

{results}

Never write results yourself: they come only from the runtime.

## Example (`get_weather` stands for any tool)

§THINK: I need the weather before I can answer.
§CALLS: [{"name": "get_weather", "args": {"city": "Paris"}, "output_key": "weather"}]
§EXECUTE:

The next message brings:

{example results}

and you answer:

§RESPOND: It is 18 °C and sunny in Paris.
§END:"""

_COGENCY = """\
# How you answer: the cogency protocol

- `<think>...</think>`: your reasoning, shown to the user as you write it.
- `<execute>[{"name": "...", "args": {...}}, ...]</execute>`: a JSON list of calls of \
the tools listed below. A call may also have `output_key` (keep the output under this \
name) and `depends_on` (a list of call ids to wait for). Calls are numbered `auto-1`, \
`auto-2`, ... in the order you write them, continuing over the whole task; each starts as \
soon as its `{...}` closes. `</execute>` ends your turn: stop writing there; the runtime \
runs the calls and sends their results in the next message.
- `<respond>...</respond>`: your answer to the user, in markdown.
- `<end>`: the task is complete; write it right after your final `<respond>`.

{references}

Results arrive in the next message as:

{results}

Never write `<result>` or `<results>` yourself: results come only from the runtime.

## Example (`get_weather` stands for any tool)

<think>I need the weather before I can answer.</think>
<execute>[{"name": "get_weather", "args": {"city": "Paris"}, "output_key": \
"weather"}]</execute>

The next message brings:

{example results}

and you answer:

<respond>It is 18 °C and sunny in Paris.</respond>
<end>"""

_HERMES = """\
# How you answer: tool calls in tags

- `<think>...</think>`: your reasoning, shown to the user as you write it.
- `<tool_call>{"name": "...", "arguments": {...}}</tool_call>`: one call of a tool listed \
below. Each call starts as soon as its `</tool_call>` arrives, so write it as soon as you \
know you need it. Several calls may follow one another.
- Everything else you write is your answer to the user, in markdown.

{references}

When your reply has tool calls, the runtime runs them and sends their results in the next \
message, one block per call:

{results}

Then you continue. Never write `<tool_response>` yourself: results come only from the \
runtime. A reply with no tool calls is your final answer.

## Example (`get_weather` stands for any tool)

<think>I need the weather before I can answer.</think>
<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>

The next message brings:

{example results}

and you answer:

It is 18 °C and sunny in Paris."""

_NATIVE = """\
# How you answer: native tool calls

- Call the tools listed below through the function-calling interface you were given \
(native tool calls), never by writing a call as text or in tags. Each call starts as soon \
as it is complete; one reply may make several calls.
- The runtime runs the calls and sends each result back as a tool message; then you \
continue. Never write a tool's result yourself: results come only from the runtime.
- A reply with no tool calls is your final answer to the user, in markdown.

{references}"""

_TITLES = {
    "cortex": "Cortex streaming execution protocol",
    "sigil": "sigil form of the Cortex streaming execution protocol",
    "cogency": "cogency form of the Cortex streaming execution protocol",
    "hermes": "hermes form of the Cortex streaming execution protocol",
}
_TEACH = {"cortex": _CORTEX, "sigil": _SIGIL, "cogency": _COGENCY, "hermes": _HERMES}

_SECTIONS: tuple[tuple[str, str], ...] = (
    ("tool", 'Tools (`type="tool"`)'),
    ("relic", 'Relics (`type="relic"`): persistent services'),
    ("workflow", 'Workflows (`type="workflow"`): several steps as one action'),
    ("agent", 'Agents (`type="agent"`): another agent does a task and answers in text'),
    ("llm", 'Model tasks (`type="llm"`): a prompt sent to the model, its answer is the output'),
    ("internal", 'Internal actions (`type="internal"`): change your own context feeds'),
)


#: The ids the examples' calls run under: the id written in cortex, else the one given.
_EXAMPLE_IDS = {"cortex": ("a1", "w1")}


def _taught(teach: str, dialect: str) -> str:
    """A dialect's teaching text with its example results made by ``format_results``, as
    the runtime sends them, so the text a model learns from never differs from what it
    gets."""
    first, example = _EXAMPLE_IDS.get(dialect, ("auto-1", "auto-1"))
    key = None if dialect == "hermes" else "weather"  # hermes calls write no output_key
    results = _example(dialect, first, {"temp": 18})
    shown = _example(dialect, example, {"temp": 18, "sky": "sunny"}, key)
    return (
        teach.replace("{references}", _REFERENCES)
        .replace("{results}", results)
        .replace("{example results}", shown)
    )


def _example(dialect: str, id: str, output: Any, output_key: str | None = None) -> str:
    action = Action(id=id, name="get_weather", output_key=output_key)
    node = ActionNode(id=id, name="get_weather", action=action, status="done", output=output)
    return format_results([node], dialect=dialect)


# ---- the system prompt ---------------------------------------------------------------


def system_prompt(
    *,
    dialect: str = "cortex",
    registry: Registry | None = None,
    feeds: FeedSet | None = None,
    variables: str = "",
    internal: InternalPolicy | None = None,
    native_tools: bool = False,
    instructions: str | None = None,
    output: OutputType | None = None,
) -> str:
    """The system prompt of one turn.

    ``dialect`` is ``cortex``, ``sigil``, ``cogency``, ``hermes`` (``auto`` teaches cortex).
    ``registry`` is what the model may call (sigil and cogency can only call ``tool``
    entries, so only those are listed); ``internal`` actions are listed only when the
    policy enables them, and only the allowed ones. ``variables`` is the text of
    ``describe_variables``; ``instructions`` come first, as the agent's own brief.
    ``output`` is the answer's type (``Agent(output_type=T)``): its schema and an
    example answer are shown, written as the dialect writes a final answer.
    """
    taught = "cortex" if dialect == "auto" else dialect
    if taught not in _TEACH:
        choices = ", ".join(DIALECTS)
        raise ValueError(f"unknown protocol dialect {dialect!r}; choose one of: {choices}")
    # With native tools the model calls through the endpoint's tools= interface only:
    # teaching a dialect's tags too has it copy the example's calls as text.
    teach = _NATIVE if native_tools else _TEACH[taught]
    title = "native tool calls of the Cortex runtime" if native_tools else _TITLES[taught]
    parts = [_INTRO.format(title=title)]
    if instructions and instructions.strip():
        parts.append("# Your instructions\n\n" + instructions.strip())
    parts.append(_taught(teach, taught))
    parts.append(_callables(registry, taught, internal, native_tools))
    if feeds is not None and len(feeds):
        parts.append(
            "# Context feeds\n\nCurrent data kept up to date by the runtime; refer to a feed "
            "as `$id`.\n\n" + feeds.to_prompt()
        )
    if variables.strip():
        parts.append(
            "# Notebook variables\n\nThe user's message refers to these notebook variables. "
            'Pass one to an action as "$name": the action receives the object itself, not '
            "this description.\n\n" + variables.strip()
        )
    if output is not None:
        parts.append(typed_section(output, "native" if native_tools else taught))
    return "\n\n".join(parts) + "\n"


#: How each dialect writes a final answer, around the JSON value.
_FINAL_ANSWER = {
    "cortex": "<response>{json}</response>",
    "sigil": "§RESPOND: {json}\n§END:",
    "cogency": "<respond>{json}</respond>\n<end>",
    "hermes": "{json}",
    "native": "{json}",
}


def typed_section(output: OutputType, dialect: str) -> str:
    """The part of the system prompt that asks for a typed answer: the JSON schema, and
    one example of a final answer in ``dialect`` (``native`` with native tools)."""
    schema = json.dumps(output.schema, ensure_ascii=False, separators=(",", ":"))
    example = json.dumps(output.example, ensure_ascii=False)
    answer = _FINAL_ANSWER.get(dialect, _FINAL_ANSWER["cortex"]).format(json=example)
    return (
        f"# Your answer's type: {output.name}\n\n"
        "Your final answer is data, not prose: only one JSON value of this JSON schema, "
        "bare or in one ```json block, with no other text (interim messages may be "
        f"prose).\n\n```json\n{schema}\n```\n\nA final answer of this shape (the values "
        f"are placeholders):\n\n{answer}\n\n"
        'Inside it, a string that is exactly "$name" or "$name.key" stands for that value '
        "itself (an action's `output_key`, a feed, a notebook variable): write "
        '"$weather.temp" rather than copying a number you were given. An answer that does '
        "not fit the schema is sent back to you with what was wrong."
    )


def _callables(
    registry: Registry | None, dialect: str, internal: InternalPolicy | None, native: bool
) -> str:
    # Sigil, cogency and native calls reach tools only.
    types = ("tool",) if dialect != "cortex" or native else tuple(t for t, _ in _SECTIONS)
    sections = []
    for type_, title in _SECTIONS:
        if type_ not in types or registry is None:
            continue
        entries = [s for s in registry.schemas((type_,)) if _offered(s, internal)]
        if entries:
            sections.append(f"## {title}\n\n" + "\n".join(_entry(s) for s in entries))
    head = "# What you can call"
    if not sections:
        return f"{head}\n\nNothing is registered: answer without actions."
    return f"{head}\n\n" + "\n\n".join(sections)


def _offered(schema: Mapping[str, Any], internal: InternalPolicy | None) -> bool:
    if schema["type"] != "internal":
        return True
    return internal is not None and internal.enabled and schema["name"] in internal.allow


def _entry(schema: Mapping[str, Any]) -> str:
    description = " ".join(str(schema.get("description") or "").split()) or "(no description)"
    params = json.dumps(schema.get("parameters", {}), ensure_ascii=False)
    return f"- `{schema['name']}`: {description}\n  parameters: {params}"


# ---- values as text ---------------------------------------------------------------------

#: How much of a value that is neither text nor JSON a result shows at most (its repr
#: is bounded, never made whole and then cut).


def _shape(value: Any) -> str:
    """``shape (3, 2)`` or ``length 12``, or "" when the value has neither (or they fail)."""
    try:
        shape = getattr(value, "shape", None)
        if isinstance(shape, tuple) and all(isinstance(n, int) for n in shape):
            return f"shape {shape}"
    except Exception:
        pass
    try:  # isinstance reads the value's __class__, which may raise too
        sized = isinstance(value, str | bytes | Sequence | Mapping)
        return f"length {len(value)}" if sized or hasattr(type(value), "__len__") else ""
    except Exception:
        return ""


def describe_value(value: Any, limit: int = _REPR_LIMIT) -> str:
    """Type, shape or length, and a short repr of ``value`` (never the whole value)."""
    size = _shape(value)
    kind = type_label(value) + (f", {size}" if size else "")
    shown = safe_repr(value, limit=limit)
    if len(shown) > limit:
        shown = head(shown, limit) + " ..."
    lines = shown.splitlines() or [""]
    if len(lines) > 12:  # a cut: no part of a secret (one with a line break) before it
        lines = [*hide_edges("\n".join(lines[:12]), start=False).splitlines(), "..."]
    return kind + "\n  " + "\n  ".join(lines)


def describe_variables(namespace: Mapping[str, Any], names: Iterable[str]) -> str:
    """A list describing each named notebook variable (unknown names are said to be so)."""
    out = []
    for name in sorted(set(names)):
        try:
            present = name in namespace
            value = namespace[name] if present else None
        except Exception:
            present = False
        if present:
            out.append(f"- ${name}: {describe_value(value)}")
        else:
            out.append(f"- ${name}: not defined in the notebook")
    return "\n".join(out)


# ---- results ----------------------------------------------------------------------------


def result_text(node: ActionNode, limit: int) -> str:
    """What one action did, for the model: its output, or why it has none."""
    if node.status == "done":
        return truncate(render_value(node.output), limit)
    if node.status in ("pending", "running"):
        if node.mode == "fire_and_forget":
            return "still running (fire_and_forget): its result is not sent back"
        return "not finished"
    return truncate(node.error or node.status, limit)


def format_results(
    nodes: Sequence[ActionNode],
    errors: Sequence[ProtocolError] = (),
    *,
    dialect: str = "cortex",
    limit: int = 4000,
) -> str:
    """The results block of one turn's actions (each result cut to ``limit`` characters).

    ``errors`` are the turn's protocol errors that concern no action (a forged result...),
    so the model learns what was wrong with its reply.
    """
    if dialect == "hermes":
        blocks = [_hermes_result(node, limit) for node in nodes]
        blocks += [
            "<tool_response>\n"
            + json.dumps({"error": e.code, "message": e.message}, ensure_ascii=False)
            + "\n</tool_response>"
            for e in errors
        ]
        return "\n".join(blocks)
    if dialect == "sigil":
        lines = ["§RESULTS:"]
        for node in nodes:
            key = f", output_key {node.output_key}" if node.output_key else ""
            text = result_text(node, limit)
            lines.append(f"[{node.id}] {node.name} ({node.status}{key}): {text}")
        lines.extend(f"[error {e.code}] {e.message}" for e in errors)
        return "\n".join(lines)
    lines = ["<results>"]
    for node in nodes:
        key = f' output_key="{node.output_key}"' if node.output_key else ""
        lines.append(
            f'<result id="{node.id}" name="{node.name}" status="{node.status}"{key}>'
            f"{result_text(node, limit)}</result>"
        )
    lines.extend(f'<error code="{e.code}">{e.message}</error>' for e in errors)
    lines.append("</results>")
    return "\n".join(lines)


def _hermes_result(node: ActionNode, limit: int) -> str:
    """One ``<tool_response>`` block: the JSON Hermes-style models are trained to read."""
    body: dict[str, Any] = {"id": node.id, "name": node.name, "status": node.status}
    if node.output_key:
        body["output_key"] = node.output_key
    text = result_text(node, limit)
    try:
        body["content"] = json.loads(text) if node.status == "done" else text
    except ValueError:
        body["content"] = text
    return "<tool_response>\n" + json.dumps(body, ensure_ascii=False) + "\n</tool_response>"

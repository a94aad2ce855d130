"""Grammars that only admit replies the runtime can run (protocol-constrained decoding).

Pure functions, no I/O. ``reply_grammar`` builds a GBNF grammar (llama.cpp's grammar
format, which vLLM's xgrammar backend also reads) from a dialect and the registered
tools' schemas; ``schema_rules`` turns one JSON schema into GBNF rules. ``Constraint``
is what a model client sends: the grammar and the request field it goes in.

Turn-aware: the first turn of a run must call tools (``actions``: one or more calls of
known tools, parameters that fit each tool's schema or are a ``"$name"`` reference, an
id, ``output_key`` and ``depends_on``); a turn after results must answer (``answer``).
A grammar on every turn that admits actions made a small model repeat its action until
the turn limit, so the later turns admit a response only.

JSON schema support: objects (required properties in order, then the optional ones,
each optional, in order), strings, numbers, integers, booleans, null, arrays, ``enum``,
``const``, ``anyOf``/``oneOf`` and lists of types; anything else is any JSON value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "CONSTRAIN_FORMS",
    "GRAMMAR_DIALECTS",
    "Constraint",
    "reply_grammar",
    "schema_rules",
]

#: Where a grammar goes in the request body: llama.cpp's ``grammar`` field, or vLLM's
#: ``structured_outputs: {"grammar": ...}`` (vLLM 0.10.2 and later; ``guided_grammar``
#: before it, removed in 0.12).
CONSTRAIN_FORMS: tuple[str, ...] = ("gbnf", "vllm")
#: The dialects a grammar can be built for.
GRAMMAR_DIALECTS: tuple[str, ...] = ("cortex", "hermes", "sigil", "cogency")

Stage = Literal["actions", "answer", "either"]
#: What a turn after results may write: "answer" (a final response only) or "either"
#: (more actions, or a response). Measured with SmolLM2-135M (bench/constrain_bench.py,
#: n=10): with "either", 5 of 10 hermes runs repeated the action until the turn limit;
#: with "answer", none did, and every action ran in 10 of 10 runs (cortex and hermes).
LATER_STAGE: Stage = "answer"


@dataclass(frozen=True)
class Constraint:
    """A grammar for one turn and the request form it is sent in."""

    grammar: str
    form: str = "gbnf"
    stage: Stage = "actions"

    def body(self) -> dict[str, Any]:
        """The request-body fields that carry the grammar."""
        if self.form == "vllm":
            return {"structured_outputs": {"grammar": self.grammar}}
        return {"grammar": self.grammar}


# ---- JSON schema -> GBNF ------------------------------------------------------------

_BASE = r"""
ws ::= " "?
nl ::= ("\n" | " ")?
json-string ::= "\"" json-char* "\""
json-char ::= [^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" hex hex hex hex)
hex ::= [0-9a-fA-F]
json-integer ::= "-"? ("0" | [1-9] [0-9]*)
json-number ::= json-integer ("." [0-9]+)? ([eE] [-+]? [0-9]+)?
json-boolean ::= "true" | "false"
json-null ::= "null"
json-value ::= json-object | json-array | json-string | json-number | json-boolean | json-null
json-object ::= "{" ws ( json-pair ( ws "," ws json-pair )* )? ws "}"
json-pair ::= json-string ws ":" ws json-value
json-array ::= "[" ws ( json-value ( ws "," ws json-value )* )? ws "]"
reference ::= "\"$" [a-zA-Z_] [a-zA-Z0-9_.]* "\""
identifier ::= [a-zA-Z_] [a-zA-Z0-9_]*
action-id ::= [a-zA-Z] [a-zA-Z0-9_-]*
"""


def literal(text: str) -> str:
    """``text`` as a GBNF string literal."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped.replace(chr(13), chr(92) + "r").replace(chr(9), chr(92) + "t")}"'


def _json_literal(value: Any) -> str:
    return literal(json.dumps(value, ensure_ascii=False))


class _Rules:
    """Named GBNF rules, each name made unique and GBNF-safe."""

    def __init__(self) -> None:
        self.rules: dict[str, str] = {}

    def add(self, hint: str, body: str) -> str:
        base = re.sub(r"[^a-zA-Z0-9-]+", "-", hint).strip("-").lower() or "r"
        name, n = base, 1
        while name in self.rules:
            n += 1
            name = f"{base}-{n}"
        self.rules[name] = body
        return name

    def text(self) -> str:
        return "\n".join(f"{name} ::= {body}" for name, body in self.rules.items())


def schema_rules(schema: Any, rules: _Rules, hint: str, *, references: bool = True) -> str:
    """A GBNF expression (usually a rule name) admitting JSON values that fit ``schema``.

    ``references``: a value may also be a ``"$name"`` reference string (what the
    runtime resolves to an earlier output, a feed or a notebook variable).
    """
    expr = _schema(schema, rules, hint)
    if references and expr not in ("json-string", "json-value"):
        return rules.add(hint, f"{expr} | reference")
    return expr


def _schema(schema: Any, rules: _Rules, hint: str) -> str:
    if not isinstance(schema, Mapping):
        return "json-value"
    if "const" in schema:
        return _json_literal(schema["const"])
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return rules.add(hint, " | ".join(_json_literal(v) for v in schema["enum"]))
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            parts = [_schema(o, rules, f"{hint}-{i}") for i, o in enumerate(options)]
            return rules.add(hint, " | ".join(parts))
    kind = schema.get("type")
    if isinstance(kind, list):
        parts = [_schema({**schema, "type": k}, rules, f"{hint}-{k}") for k in kind]
        return rules.add(hint, " | ".join(parts)) if parts else "json-value"
    if kind == "string":
        return "json-string"
    if kind == "integer":
        return "json-integer"
    if kind == "number":
        return "json-number"
    if kind == "boolean":
        return "json-boolean"
    if kind == "null":
        return "json-null"
    if kind == "array":
        items = schema.get("items")
        item = _schema(items, rules, f"{hint}-item") if items is not None else "json-value"
        return rules.add(hint, f'"[" ws ( {item} ( ws "," ws {item} )* )? ws "]"')
    if kind == "object" or (kind is None and isinstance(schema.get("properties"), Mapping)):
        return _object(schema, rules, hint)
    return "json-value"


def _object(schema: Mapping[str, Any], rules: _Rules, hint: str) -> str:
    props = schema.get("properties")
    if not isinstance(props, Mapping) or not props:
        return "json-object"
    required = [n for n in schema.get("required") or () if n in props]
    optional = [n for n in props if n not in required]

    def pair(name: str) -> str:
        value = schema_rules(props[name], rules, f"{hint}-{name}")
        return f'{_json_literal(name)} ws ":" ws {value}'

    # Optional properties in declared order, each optional: the tail after the i-th.
    tails: list[str] = [""] * (len(optional) + 1)
    for i in range(len(optional) - 1, -1, -1):
        rest = f" {tails[i + 1]}" if tails[i + 1] else ""
        tails[i] = rules.add(f"{hint}-rest", f'( ws "," ws {pair(optional[i])} )?{rest}')
    if required:
        head = ' ws "," ws '.join(pair(n) for n in required)
        tail = f" {tails[0]}" if tails[0] else ""
        inner = f"{head}{tail}"
    else:
        starts = []
        for i, name in enumerate(optional):
            rest = f" {tails[i + 1]}" if tails[i + 1] else ""
            starts.append(f"{pair(name)}{rest}")
        inner = f"( {' | '.join(starts)} )?"
    return rules.add(hint, f'"{{" ws {inner} ws "}}"')


# ---- replies ------------------------------------------------------------------------


def _calls(
    tools: Sequence[Mapping[str, Any]], rules: _Rules, args_key: str, known_ids: Sequence[str]
) -> str:
    """A rule admitting one call object of any of ``tools``: ``name``, its arguments
    under ``args_key``, and the optional ``output_key`` and ``depends_on`` (ids of
    ``known_ids`` only: a made-up id leaves the call waiting for nothing that exists)."""
    extras = '( ws "," ws "\\"output_key\\"" ws ":" ws "\\"" identifier "\\"" )?'
    if known_ids:
        known = rules.add("known-id", " | ".join(_json_literal(i) for i in known_ids))
        extras += (
            f' ( ws "," ws "\\"depends_on\\"" ws ":" ws "[" ws ( {known} '
            f'( ws "," ws {known} )* )? ws "]" )?'
        )
    extras = rules.add("call-extras", extras)
    options = []
    for tool in tools:
        name = str(tool["name"])
        params = tool.get("parameters") or {"type": "object", "properties": {}}
        args = schema_rules(params, rules, f"args-{name}", references=False)
        options.append(
            rules.add(
                f"call-{name}",
                f'"{{" ws "\\"name\\"" ws ":" ws {_json_literal(name)} ws "," ws '
                f'{_json_literal(args_key)} ws ":" ws {args} {extras} ws "}}"',
            )
        )
    return rules.add("call", " | ".join(options))


def reply_grammar(
    dialect: str,
    tools: Sequence[Mapping[str, Any]],
    stage: Stage = "actions",
    *,
    max_actions: int = 1,
    known_ids: Sequence[str] = (),
) -> str:
    """A GBNF grammar for one reply in ``dialect``.

    ``tools`` are registry schemas (``{"name", "description", "parameters"}``).
    ``stage`` ``"actions"``: the reply calls one or more of ``tools`` and ends there
    (the runtime sends the results back); ``"answer"``: the reply is a final answer;
    ``"either"``: one or the other. ``max_actions`` bounds the calls in one reply: a
    small model, free to go on, writes the same call again until its token limit.
    ``known_ids`` are the ids of the run's earlier actions: what ``depends_on`` may name.
    Raises ``ValueError`` for a dialect with no grammar, or ``"actions"`` with no tools.
    """
    if dialect not in GRAMMAR_DIALECTS:
        raise ValueError(
            f"constrain: no grammar for the {dialect!r} dialect; "
            f"use one of: {', '.join(GRAMMAR_DIALECTS)}"
        )
    rules = _Rules()
    text = "[^<]"
    if stage == "either":
        actions = (
            reply_grammar(dialect, tools, "actions", max_actions=max_actions, known_ids=known_ids)
            if tools
            else ""
        )
        answer = reply_grammar(dialect, tools, "answer")
        if not actions:
            return answer
        body = "\n".join(
            [_rename_root(actions, "actions-root"), _rename_root(answer, "answer-root")]
        )
        return "root ::= actions-root | answer-root\n" + _dedupe(body)
    if stage == "answer":
        if dialect == "cortex":
            root = f'nl "<response>" {text}+ "</response>"'
        elif dialect == "hermes":
            root = f"nl {text}+"
        elif dialect == "sigil":
            root = 'nl "§RESPOND: " [^§]+ "§END:"'
        else:
            root = f'nl "<respond>" {text}+ "</respond>" nl "<end>"'
        rules.add("root", root)
        return rules.text() + _BASE
    if not tools:
        raise ValueError("constrain: no tools are registered, so there is no action to constrain")
    rules.add("root", "")  # first, filled in below
    if dialect == "cortex":
        call = _calls(tools, rules, "parameters", known_ids)
        action = rules.add(
            "action",
            '"<action type=\\"tool\\" mode=\\"async\\" id=\\"" action-id "\\">" '
            f'{call} "</action>"',
        )
        root = f"nl {action}{_more(f'nl {action}', max_actions)}"
    elif dialect == "hermes":
        call = _calls(tools, rules, "arguments", known_ids)
        action = rules.add("action", f'"<tool_call>" nl {call} nl "</tool_call>"')
        root = f"nl {action}{_more(f'nl {action}', max_actions)}"
    else:
        call = _calls(tools, rules, "args", known_ids)
        more = _more(f'ws "," ws {call}', max_actions)
        calls = f'"[" ws {call}{more} ws "]"'
        if dialect == "sigil":
            root = f'nl "§CALLS: " {calls} "\\n§EXECUTE:"'
        else:
            root = f'nl "<execute>" {calls} "</execute>"'
    rules.rules["root"] = root
    return rules.text() + _BASE


def _rename_root(text: str, name: str) -> str:
    return text.replace("root ::= ", f"{name} ::= ", 1)


def _dedupe(text: str) -> str:
    """Rules once each (two grammars built from the same tools share their rules)."""
    seen: dict[str, str] = {}
    for line in text.splitlines():
        if line.strip():
            seen.setdefault(line.split(" ::= ", 1)[0], line)
    return "\n".join(seen.values()) + "\n"


def _more(item: str, max_actions: int) -> str:
    """Up to ``max_actions - 1`` more of ``item``, nested: ``( item ( item )? )?``."""
    more = ""
    for _ in range(max(0, max_actions - 1)):
        more = f" ( {item}{more} )?"
    return more

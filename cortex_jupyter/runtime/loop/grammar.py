"""Grammars that only admit replies the runtime can run (protocol-constrained decoding).

Pure functions, no I/O. ``reply_grammar`` builds a GBNF grammar (llama.cpp's grammar
format, which vLLM's xgrammar backend also reads) from a dialect and the registered
tools' schemas; ``schema_rules`` turns one JSON schema into GBNF rules. ``Constraint``
is what a model client sends: the grammar and the request field it goes in.

Turn-aware: the first turn of a run must call tools (``actions``: one or more calls of
known tools, parameters that fit each tool's schema or are a ``"$name"`` reference, an
id, ``output_key`` and ``depends_on``); a turn after results may call tools again or
answer (``either``, ``later_stage``), so a task that needs a second tool after the first
one's result can do it. What keeps a small model from calling the same thing until the
turn limit: a later turn's grammar leaves out the tools that take no parameters and have
run (their only call is a repeat, ``later_tools``), the loop does not run an exact repeat
of a call that ran (it tells the model so), and the turn after a reply of repeats only
may answer only.

A typed run (``Agent(output_type=T)``, ``TypedAnswer``): wherever a reply may answer, the
answer is JSON of ``T``'s schema alone in the dialect's answer block (``schema_rules``
again), and a typed run's first reply may call a tool or answer (``"either"``).

What a grammar admits is what the runtime runs, no more and no less (sampled and checked
both ways in tests/runtime/test_grammar.py), with two stated bounds:

- JSON: whitespace (spaces, tabs, newlines) between tokens, at most ``WS_LIMIT``
  characters in a row (``llama.cpp``'s own JSON grammar bounds it too: a small model,
  left free, writes newlines until its token limit); a ``"$name"`` or ``"$name.path"``
  reference wherever a value goes, array items and nested values too (the runtime
  resolves it); object properties in any order.
- Objects: with ``ORDER_LIMIT`` properties or fewer, every order and subset that holds
  the required ones (one rule per set of properties written so far: 2**n rules, 64 at
  the limit). Above it, the required ones in any order when there are ``ORDER_LIMIT`` or
  fewer of them, the optional ones anywhere and possibly twice (JSON keeps the last, so
  the call still runs); with more required ones than that, they come in declared order.
  ``additionalProperties: false``, or a schema without it that declares properties, admits
  no other key (a tool with no parameters gets ``{}`` only); ``true`` or a schema (a
  ``**kwargs`` tool) admits other keys (unescaped, none of the declared names).

JSON schema support: objects, strings, numbers, integers, booleans, null, arrays (and
``minItems``/``maxItems`` up to ``ITEMS_LIMIT``, ``prefixItems``: a tuple), ``enum``,
``const``, ``anyOf``/``oneOf``, ``allOf`` (merged), local ``$ref`` (recursive ones too:
FastMCP writes a pydantic model parameter as one) and lists of types; anything else is
any JSON value. Keywords on values (``pattern``, ``minimum``, ``minLength``, ``format``...)
are not written: the grammar admits such values and the tool's own check refuses them,
with its message, as without a grammar.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from cortex_jupyter.runtime.core.values.schema import resolve_ref
from cortex_jupyter.runtime.core.values.typed import PYTHON_OBJECT

__all__ = [
    "CONSTRAIN_FORMS",
    "GRAMMAR_DIALECTS",
    "ITEMS_LIMIT",
    "ORDER_LIMIT",
    "WS_LIMIT",
    "Constraint",
    "TypedAnswer",
    "later_stage",
    "later_tools",
    "reply_grammar",
    "schema_rules",
]

#: Where a grammar goes in the request body: llama.cpp's ``grammar`` field, or vLLM's
#: ``structured_outputs: {"grammar": ...}`` (vLLM 0.10.2 and later; ``guided_grammar``
#: before it, removed in 0.12).
CONSTRAIN_FORMS: tuple[str, ...] = ("gbnf", "vllm")
#: The dialects a grammar can be built for.
GRAMMAR_DIALECTS: tuple[str, ...] = ("cortex", "hermes", "sigil", "cogency")
#: Most whitespace characters in a row between JSON tokens.
WS_LIMIT = 20
#: Most properties of an object whose every order the grammar spells out (2**n rules).
ORDER_LIMIT = 6

Stage = Literal["actions", "answer", "either"]
T = TypeVar("T", bound=Mapping[str, Any])
#: What a turn after results may write: "either" (more actions, or a response) or
#: "answer" (a final response only: what it was before multi-step tasks could run under
#: a grammar; ``bench/constrain_bench.py --later answer`` measures it).
LATER_STAGE: Stage = "either"


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


def later_tools(tools: Sequence[T], ran: Sequence[str]) -> list[T]:
    """``tools`` a turn after results may call: not one that takes no parameters and has
    run (``ran``: the names of the tools called so far), whose every call is a repeat."""
    return [t for t in tools if not (t["name"] in ran and _takes_nothing(t.get("parameters")))]


def later_stage(tools: Sequence[Mapping[str, Any]], *, repeated: bool) -> Stage:
    """A later turn's stage: an answer only when no tool is left to call, or the last
    reply only repeated calls that had run (the model is going round in a loop)."""
    return "answer" if repeated or not tools else LATER_STAGE


def _takes_nothing(params: Any) -> bool:
    return (
        isinstance(params, Mapping)
        and not params.get("properties")
        and params.get("additionalProperties") is False
    )


# ---- JSON schema -> GBNF ------------------------------------------------------------


def _bounded(item: str, limit: int) -> str:
    """Up to ``limit`` of ``item``, nested so that each text has one parse."""
    out = ""
    for _ in range(limit):
        out = f"( {item}{' ' + out if out else ''} )?"
    return out


_WS = _bounded(r"[ \t\n\r]", WS_LIMIT)
_BASE = rf"""
ws ::= {_WS}
json-string ::= "\"" json-char* "\""
json-char ::= [^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" hex hex hex hex)
key-char ::= [^"\\\x00-\x1F]
hex ::= [0-9a-fA-F]
json-integer ::= "-"? ("0" | [1-9] [0-9]*)
json-number ::= json-integer ("." [0-9]+)? ([eE] [-+]? [0-9]+)?
json-boolean ::= "true" | "false"
json-null ::= "null"
json-value ::= json-object | json-array | json-string | json-number | json-boolean | json-null
json-object ::= "{{" ws ( json-pair ( ws "," ws json-pair )* )? ws "}}"
json-pair ::= json-string ws ":" ws json-value
json-array ::= "[" ws ( json-value ( ws "," ws json-value )* )? ws "]"
reference ::= "\"$" [a-zA-Z_] [a-zA-Z0-9_]* ( "." [a-zA-Z0-9_]+ )* "\""
identifier ::= [a-zA-Z_] [a-zA-Z0-9_]*
action-id ::= [a-zA-Z] [a-zA-Z0-9_-]*
"""


def literal(text: str) -> str:
    """``text`` as a GBNF string literal."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped.replace(chr(13), chr(92) + "r").replace(chr(9), chr(92) + "t")}"'


def _json_literal(value: Any) -> str:
    return literal(json.dumps(value, ensure_ascii=False))


def _class_char(char: str) -> str:
    """``char`` inside a GBNF character class: a hex escape unless a letter or digit
    (llama.cpp reads only a few backslash escapes, and ``-`` or ``^`` mean ranges)."""
    if char.isascii() and char.isalnum():
        return char
    if ord(char) < 0x100:
        return f"\\x{ord(char):02X}"
    if ord(char) < 0x10000:
        return f"\\u{ord(char):04X}"
    return f"\\U{ord(char):08X}"


class _Rules:
    """Named GBNF rules, each name made unique and GBNF-safe."""

    def __init__(self) -> None:
        self.rules: dict[str, str] = {}
        #: The whole schema a ``$ref`` is read in (one tool's parameters), and the rule
        #: made for each ``$ref`` in it (a recursive one names its own rule).
        self.root: Any = None
        self.refs: dict[tuple[int, str], str] = {}
        self.made: dict[tuple[int, bool, str | None, str], str] = {}  # ``schema_rules``' rules
        self.roots: list[Any] = []  # each root read: kept, so no other takes its id
        self.depth = 0  # brackets (objects, arrays) around the value being read
        self.building: dict[tuple[int, str], int] = {}  # $ref being read -> its depth
        #: The dialect whose typed answer is being written (``_typed_answer``), or None
        #: (a call's parameters): inside one, JSON text holds nothing that would end the
        #: answer block early (``_STOPS``).
        self.answer: str | None = None
        self.references = True  # False: no "$name" anywhere (a typed answer with no names)

    def base(self, name: str) -> str:
        """The base rule ``name`` (``json-string``...) in the value being written: inside
        a typed answer, its variant that holds no answer-ending text."""
        return _ANSWER_BASE.get(name, name) if self.answer is not None else name

    def json(self, value: Any) -> str:
        """``value`` as a GBNF literal of its JSON text; inside a typed answer with the
        characters that could end it early written as ``\\uXXXX`` (JSON reads it the same)."""
        text = json.dumps(value, ensure_ascii=False)
        for char in _STOPS.get(self.answer or "", ""):
            text = text.replace(char, f"\\u{ord(char):04x}")
        return literal(text)

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
    runtime resolves to an earlier output, a feed or a notebook variable), here and in
    every value inside it. A ``$ref`` is read in ``rules.root`` (``schema`` when unset).
    """
    if rules.root is None:
        rules.root = schema
        rules.roots.append(schema)
    references = references and rules.references
    # The same schema twice (a list of one model, one type in many tools) is one rule:
    # an object's rules grow with its properties' orders, and would be written again.
    key = (
        id(rules.root),
        references,
        rules.answer,
        json.dumps(schema, sort_keys=True, default=repr),
    )
    if key not in rules.made:
        expr = _schema(schema, rules, hint)
        if references and expr not in (rules.base("json-string"), rules.base("json-value")):
            expr = rules.add(hint, f"{expr} | {rules.base('reference')}")
        rules.made[key] = expr
    return rules.made[key]


def _schema(schema: Any, rules: _Rules, hint: str) -> str:
    if not isinstance(schema, Mapping):
        return rules.base("json-value")
    if isinstance(schema.get("$ref"), str):
        return _ref(schema["$ref"], rules, hint)
    if isinstance(schema.get("allOf"), list) and schema["allOf"]:
        return _schema(_all_of(schema, rules), rules, hint)
    if "const" in schema:
        return rules.json(schema["const"])
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return rules.add(hint, " | ".join(rules.json(v) for v in schema["enum"]))
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            parts = [_schema(o, rules, f"{hint}-{i}") for i, o in enumerate(options)]
            return rules.add(hint, " | ".join(parts))
    kind = schema.get("type")
    if isinstance(kind, list):
        parts = [_schema({**schema, "type": k}, rules, f"{hint}-{k}") for k in kind]
        return rules.add(hint, " | ".join(parts)) if parts else rules.base("json-value")
    simple = {
        "string": rules.base("json-string"),
        "integer": "json-integer",
        "number": "json-number",
        "boolean": "json-boolean",
        "null": "json-null",
    }
    if kind == "string" and schema.get("pattern") == PYTHON_OBJECT and rules.answer is not None:
        # A DataFrame field of a typed answer: no text fits it, only a bound name.
        return rules.base("reference") if rules.references else simple[kind]
    if kind in simple:
        return simple[kind]
    if kind == "array" and isinstance(schema.get("prefixItems"), list) and schema["prefixItems"]:
        return rules.add(hint, _tuple(schema, rules, hint))
    if kind == "array":
        items = schema.get("items")
        rules.depth += 1
        any_value = rules.base("json-value")
        item = schema_rules(items, rules, f"{hint}-item") if items is not None else any_value
        rules.depth -= 1
        return rules.add(hint, _array(item, schema.get("minItems"), schema.get("maxItems")))
    if kind == "object" or (kind is None and isinstance(schema.get("properties"), Mapping)):
        return _object(schema, rules, hint)
    return rules.base("json-value")


def _ref(ref: str, rules: _Rules, hint: str) -> str:
    """A rule for the schema a local ``$ref`` points to, made once per ``$ref`` (so one
    that refers to itself is a recursive rule); one that points nowhere is any value."""
    key = (id(rules.root), ref)
    if rules.building.get(key) == rules.depth:
        # Reached again before a bracket: its rule would start with itself, which
        # llama.cpp refuses ("left recursion"); the schema says nothing more here.
        return rules.base("json-value")
    if key not in rules.refs:
        target = resolve_ref(ref, rules.root)
        if not isinstance(target, Mapping):
            return rules.base("json-value")
        name = rules.refs[key] = rules.add(f"ref-{ref.rsplit('/', 1)[-1]}", "")
        rules.building[key] = rules.depth
        rules.rules[name] = _schema(target, rules, f"{hint}-of")
        del rules.building[key]
    return rules.refs[key]


def _all_of(schema: Mapping[str, Any], rules: _Rules) -> dict[str, Any]:
    """``allOf``'s schemas as one: their keys together, properties merged and required
    ones joined (a ``$ref`` among them is read in its place). Where two say different
    things of one key the last one's is kept: the grammar may then admit more than the
    schema, never less."""
    merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
    for part in schema["allOf"]:
        if isinstance(part, Mapping) and isinstance(part.get("$ref"), str):
            target = resolve_ref(part["$ref"], rules.root)
            # One level: a target that is itself (or holds) an allOf of $ref is read as
            # it is, so a cycle of them ends.
            part = (
                {k: v for k, v in target.items() if k != "allOf"}
                if isinstance(target, Mapping)
                else {}
            )
        if not isinstance(part, Mapping):
            continue
        props = {**(merged.get("properties") or {}), **(part.get("properties") or {})}
        required = [*(merged.get("required") or ()), *(part.get("required") or ())]
        merged.update({k: v for k, v in part.items() if v is not None})
        if props:
            merged["properties"] = props
        if required:
            merged["required"] = list(dict.fromkeys(required))
    return merged


#: Most items ``minItems``/``maxItems`` are spelled out to: past it the bound is not
#: written (the grammar admits more than the schema then, never less).
ITEMS_LIMIT = 32


def _array(item: str, low: Any, high: Any) -> str:
    """``[item, ...]`` with from ``low`` to ``high`` items (``minItems``/``maxItems``)."""
    low = low if isinstance(low, int) and 0 <= low <= ITEMS_LIMIT else 0
    high = high if isinstance(high, int) and low <= high <= ITEMS_LIMIT else None
    if high == 0:
        return '"[" ws "]"'
    more = f'ws "," ws {item}'
    if high is None:
        rest = " ".join([more] * max(0, low - 1) + [f"( {more} )*"])
    else:
        rest = " ".join([more] * max(0, low - 1)) + _more(more, high - max(low, 1) + 1)
    body = f"{item} {rest}".strip()
    return f'"[" ws {body} ws "]"' if low else f'"[" ws ( {body} )? ws "]"'


def _tuple(schema: Mapping[str, Any], rules: _Rules, hint: str) -> str:
    """``prefixItems`` (a ``tuple[int, str]``): each place its own schema, in order, the
    first ``minItems`` of them written; then ``items`` (any number) unless the schema
    says no more (``items: false``, or ``maxItems`` reached)."""
    prefix = schema["prefixItems"]
    rules.depth += 1
    places = [schema_rules(p, rules, f"{hint}-{i}") for i, p in enumerate(prefix)]
    items, high = schema.get("items"), schema.get("maxItems")
    tail = ""
    if items is not False and not (isinstance(high, int) and high <= len(places)):
        item = schema_rules(items, rules, f"{hint}-item") if isinstance(items, Mapping) else None
        tail = f'( ws "," ws {item or rules.base("json-value")} )*'
    rules.depth -= 1
    low = schema.get("minItems")
    low = low if isinstance(low, int) and 0 <= low <= len(places) else 0
    body = tail
    for i in range(len(places) - 1, -1, -1):  # from the last place: ( , p2 ( , p3 )? )?
        head = places[i] if i == 0 else f'ws "," ws {places[i]}'
        body = f"{head} {body}".strip()
        if i >= low:
            body = f"( {body} )?"
    return f'"[" ws {body} ws "]"'


def _object(schema: Mapping[str, Any], rules: _Rules, hint: str) -> str:
    rules.depth += 1
    try:
        return _object_in(schema, rules, hint)
    finally:
        rules.depth -= 1


def _object_in(schema: Mapping[str, Any], rules: _Rules, hint: str) -> str:
    props = schema.get("properties")
    props = props if isinstance(props, Mapping) else {}
    # A required name the properties leave out is still required, with any value.
    listed = schema.get("required")
    required = [n for n in listed if isinstance(n, str)] if isinstance(listed, list) else []
    props = {**props, **{n: {} for n in required if n not in props}}
    extra = schema.get("additionalProperties", not props)
    if not props and extra is True:
        return rules.base("json-object")
    pairs = {  # one rule each: the orders of an object name each pair many times
        name: rules.add(
            f"{hint}-{name}-pair",
            f'{rules.json(name)} ws ":" ws {schema_rules(value, rules, f"{hint}-{name}")}',
        )
        for name, value in props.items()
    }
    other = None
    if extra is not False:
        key = _key_other_than(list(props), rules, f"{hint}-key")
        value = (
            schema_rules(extra, rules, f"{hint}-extra")
            if extra is not True
            else rules.base("json-value")
        )
        other = rules.add(f"{hint}-other", f'{key} ws ":" ws {value}')
    return _pairs(pairs, list(dict.fromkeys(required)), other, rules, hint)


def _pairs(
    pairs: Mapping[str, str], required: Sequence[str], other: str | None, rules: _Rules, hint: str
) -> str:
    """A rule for ``{...}`` holding ``pairs`` (name -> GBNF of one ``"name": value``): the
    ``required`` ones always, the others at most once, in any order, and any number of
    ``other`` pairs (keys outside ``pairs``); see the module docstring for the bounds."""
    names = list(pairs)
    if len(names) <= ORDER_LIMIT:
        tracked = names
    elif len(required) <= ORDER_LIMIT:
        tracked = list(required)
    else:
        return _pairs_in_order(pairs, required, other, rules, hint)
    free = [pairs[n] for n in names if n not in tracked] + ([other] if other else [])
    free_rule = rules.add(f"{hint}-free", " | ".join(free)) if free else ""
    states: dict[frozenset[str], str] = {}

    def after(used: frozenset[str]) -> str:
        """The rest of the object once the properties in ``used`` were written ("" when
        nothing may follow)."""
        if used not in states:
            options = [
                f'ws "," ws {pairs[n]} {after(used | {n})}' for n in tracked if n not in used
            ]
            if free_rule:
                name = rules.add(f"{hint}-after", "")
                states[used] = name
                options.append(f'ws "," ws {free_rule} {name}')
            body = " | ".join(o.rstrip() for o in options)
            if body and set(required) <= used:
                body = f"( {body} )?"
            if free_rule:
                rules.rules[states[used]] = body
            else:
                states[used] = rules.add(f"{hint}-after", body) if body else ""
        return states[used]

    firsts = [f"{pairs[n]} {after(frozenset([n]))}".rstrip() for n in tracked]
    if free_rule:
        firsts.append(f"{free_rule} {after(frozenset())}")
    inner = " | ".join(firsts)
    if inner and required:
        inner = f"( {inner} ) ws"
    elif inner:
        inner = f"( {inner} )? ws"
    return rules.add(hint, f'"{{" ws {inner} "}}"')


def _pairs_in_order(
    pairs: Mapping[str, str], required: Sequence[str], other: str | None, rules: _Rules, hint: str
) -> str:
    """More required properties than ``ORDER_LIMIT``: they come in declared order, the
    optional ones (and ``other`` pairs) anywhere between them."""
    free = [pairs[n] for n in pairs if n not in required] + ([other] if other else [])
    head = gap = ""
    if free:
        free_rule = rules.add(f"{hint}-free", " | ".join(free))
        gap = f' ( ws "," ws {free_rule} )*'
        head = f'( {free_rule} ws "," ws )* '
    body = ' ws "," ws '.join(f"{pairs[n]}{gap}" for n in required)
    return rules.add(hint, f'"{{" ws {head}{body} ws "}}"')


def _key_other_than(names: Sequence[str], rules: _Rules, hint: str) -> str:
    """A JSON string (no escapes) that is none of ``names``: a walk down their trie (a
    name that needs an escape in JSON is never such a string, so it needs no branch)."""
    stops = _STOPS.get(rules.answer or "", "")
    # In a typed answer a name holding a stop character is written escaped, so no
    # unescaped key is it either.
    names = [n for n in names if not re.search(r'["\\\x00-\x1f]', n) and not set(n) & set(stops)]
    char = rules.base("key-char")

    def rest(prefix: str) -> str:
        following = sorted({n[len(prefix)] for n in names if n.startswith(prefix) and n != prefix})
        options = [] if prefix in names else ['"\\""']
        options += [f"{literal(c)} {rest(prefix + c)}" for c in following]
        banned = "".join(_class_char(c) for c in [*following, *stops])
        options.append(f'[^{banned}\\"\\\\\\x00-\\x1F] {char}* "\\""')
        return rules.add(f"{hint}-{len(prefix)}", " | ".join(options))

    return rules.add(hint, f'"\\"" {rest("")}')


# ---- replies ------------------------------------------------------------------------


def _calls(
    tools: Sequence[Mapping[str, Any]], rules: _Rules, args_key: str, known_ids: Sequence[str]
) -> str:
    """A rule admitting one call object of any of ``tools``: ``name``, its arguments
    under ``args_key`` (which may be left out when none is required), and the optional
    ``output_key`` and ``depends_on`` (ids of ``known_ids`` only: a made-up id leaves the
    call waiting for nothing that exists), in any order."""
    shared = {
        "output_key": rules.add("output-key", '"\\"output_key\\"" ws ":" ws "\\"" identifier "\\""')
    }
    if known_ids:
        known = rules.add("known-id", " | ".join(_json_literal(i) for i in known_ids))
        shared["depends_on"] = rules.add(
            "depends-on",
            f'"\\"depends_on\\"" ws ":" ws "[" ws ( {known} ( ws "," ws {known} )* )? ws "]"',
        )
    options = []
    for tool in tools:
        name = str(tool["name"])
        params = tool.get("parameters") or {"type": "object", "additionalProperties": False}
        rules.root = params
        rules.roots.append(params)
        args = schema_rules(params, rules, f"args-{name}", references=False)
        pairs = {
            "name": f'"\\"name\\"" ws ":" ws {_json_literal(name)}',
            args_key: f'{_json_literal(args_key)} ws ":" ws {args}',
            **shared,
        }
        needs = isinstance(params, Mapping) and bool(params.get("required"))
        required = ["name", args_key] if needs else ["name"]
        options.append(_pairs(pairs, required, None, rules, f"call-{name}"))
    return rules.add("call", " | ".join(options))


@dataclass(frozen=True)
class TypedAnswer:
    """What a typed run's answer must be (``Agent(output_type=T)``): JSON of ``schema``
    (``T``'s JSON schema, as pydantic's ``TypeAdapter(T).json_schema()`` writes it).

    ``names`` are the ``$name`` references the answer may use (the run's bound outputs, its
    feeds and the notebook names the model may see): a string that is exactly ``"$name"`` or
    ``"$name.path"`` of one of them is admitted wherever a value goes (the runtime puts the
    object itself there before validating; whether it fits is the validation's to say). No
    other reference is admitted where the schema wants a non-string: a small model, free to,
    writes ``"$temp"`` for a number it was never given.
    """

    schema: Mapping[str, Any]
    names: Sequence[str] = ()


def reply_grammar(
    dialect: str,
    tools: Sequence[Mapping[str, Any]],
    stage: Stage = "actions",
    *,
    max_actions: int = 1,
    known_ids: Sequence[str] = (),
    typed: TypedAnswer | None = None,
) -> str:
    """A GBNF grammar for one reply in ``dialect``.

    ``tools`` are registry schemas (``{"name", "description", "parameters"}``).
    ``stage`` ``"actions"``: the reply calls one or more of ``tools`` and ends there
    (the runtime sends the results back); ``"answer"``: the reply is a final answer
    (not a blank one); ``"either"``: one or the other. ``max_actions`` bounds the calls
    in one reply: a small model, free to go on, writes the same call again until its
    token limit. ``known_ids`` are the ids of the run's earlier actions: what
    ``depends_on`` may name. ``typed``: the answer is JSON of a type's schema, in the
    dialect's answer block (see ``TypedAnswer``). Raises ``ValueError`` for a dialect with
    no grammar, or ``"actions"`` with no tools.
    """
    if dialect not in GRAMMAR_DIALECTS:
        raise ValueError(
            f"constrain: no grammar for the {dialect!r} dialect; "
            f"use one of: {', '.join(GRAMMAR_DIALECTS)}"
        )
    if not tools and stage == "actions":
        raise ValueError("constrain: no tools are registered, so there is no action to constrain")
    rules = _Rules()
    rules.add("root", "")  # first, filled in below
    parts = []
    if tools and stage != "answer":
        parts.append(_actions(dialect, tools, rules, max_actions, known_ids))
    if stage != "actions":
        answer = _answer(dialect, rules) if typed is None else _typed_answer(dialect, typed, rules)
        parts.append(answer)
    if len(parts) == 1:
        rules.rules["root"] = parts[0]
    else:
        actions, answer = parts
        rules.rules["root"] = (
            f"{rules.add('actions-root', actions)} | {rules.add('answer-root', answer)}"
        )
    return rules.text() + _BASE


def _actions(
    dialect: str,
    tools: Sequence[Mapping[str, Any]],
    rules: _Rules,
    max_actions: int,
    known_ids: Sequence[str],
) -> str:
    """The GBNF of a reply of one to ``max_actions`` calls of ``tools`` in ``dialect``."""
    if dialect == "cortex":
        call = _calls(tools, rules, "parameters", known_ids)
        action = rules.add(
            "action",
            '"<action type=\\"tool\\" mode=\\"async\\" id=\\"" action-id "\\">" '
            f'ws {call} ws "</action>"',
        )
        return f"ws {action}{_more(f'ws {action}', max_actions)}"
    if dialect == "hermes":
        call = _calls(tools, rules, "arguments", known_ids)
        action = rules.add("action", f'"<tool_call>" ws {call} ws "</tool_call>"')
        return f"ws {action}{_more(f'ws {action}', max_actions)}"
    call = _calls(tools, rules, "args", known_ids)
    more = _more(f'ws "," ws {call}', max_actions)
    calls = f'"[" ws {call}{more} ws "]"'
    if dialect == "sigil":
        return f'ws "§CALLS: " {calls} "\\n§EXECUTE:"'
    return f'ws "<execute>" {calls} "</execute>"'


# A final answer holds a character other than whitespace: a blank one says nothing. What
# is whitespace is what the parser strips (``str.strip``: a no-break space, a line
# separator too). A ``<`` that starts no tag (``3 < 4``) is text, as the parser reads it.
_SPACES = "".join(_class_char(c) for c in map(chr, range(0x3001)) if c.isspace())
_ANSWERS = {
    "cortex": f'ws "<response>" blank [^<{_SPACES}] answer-char* "</response>"',
    "hermes": f"blank [^<{_SPACES}] answer-char*",
    "sigil": f'ws "§RESPOND: " blank [^§{_SPACES}] [^§]* "§END:"',
    "cogency": f'ws "<respond>" blank [^<{_SPACES}] answer-char* "</respond>" ws "<end>"',
}
_ANSWER_RULES = {
    "blank": _bounded(f"[{_SPACES}]", WS_LIMIT),
    "answer-char": '[^<] | "<" [^a-zA-Z/!<]',
}


def _answer(dialect: str, rules: _Rules) -> str:
    """A text answer: what the dialect's answer block holds, not blank."""
    for name, body in _ANSWER_RULES.items():
        rules.add(name, body)
    return _ANSWERS[dialect]


# ---- typed answers ------------------------------------------------------------------
# The JSON sits where the dialect's text answer does, alone (no fence, no prose): the
# runtime reads the answer block's text as the value. A JSON string may hold any text,
# so inside one what would end the block early (a ``<`` that starts a tag, sigil's ``§``)
# is admitted only written as ``\uXXXX``: the same text once JSON is read. Keys of
# ``additionalProperties`` hold no ``<``/``§`` at all (an escaped one is not admitted).

#: Characters that may end a dialect's answer block (written escaped in a JSON literal).
_STOPS = {"cortex": "<", "hermes": "<", "cogency": "<", "sigil": "§"}
#: Where a typed answer opens and closes, around ``ws`` + the JSON + ``ws``.
_TYPED = {
    "cortex": ('ws "<response>"', '"</response>"'),
    "hermes": ("", ""),
    "sigil": ('ws "§RESPOND: "', '"§END:"'),
    "cogency": ('ws "<respond>"', '"</respond>" ws "<end>"'),
}
#: The base rules a typed answer's values use instead of ``_BASE``'s (``_Rules.base``).
_ANSWER_BASE = {
    "json-string": "answer-string",
    "json-value": "answer-value",
    "json-object": "answer-object",
    "key-char": "answer-key-char",
    "reference": "output-reference",
}
#: An escape in a typed answer's string: ``\\uXXXX`` names a character, never half of one
#: (pydantic's JSON reader refuses a lone surrogate; Python's ``json`` would take it).
_ESCAPE = (
    '"\\\\" (["\\\\/bfnrt] | "u" ( [0-9a-cA-Ce-fE-F] hex hex hex | [dD] [0-7] hex hex'
    ' | [dD] [89abAB] hex hex "\\\\u" [dD] [c-fC-F] hex hex ) )'
)
#: A character of a JSON string in a typed answer, by dialect: a ``<`` only before what
#: starts no tag (as the text answer's ``answer-char``), sigil's ``§`` never.
_STRING_CHARS = {
    "<": '[^"\\\\\\x00-\\x1F<] | answer-escape'
    ' | "<" ( [^a-zA-Z/!<"\\\\\\x00-\\x1F] | answer-escape )',
    "§": f'[^"\\\\\\x00-\\x1F{_class_char("§")}] | answer-escape',
}
_ANSWER_JSON = {
    "answer-value": "answer-object | answer-array | answer-string | json-number | json-boolean"
    " | json-null",
    "answer-object": '"{" ws ( answer-pair ( ws "," ws answer-pair )* )? ws "}"',
    "answer-pair": 'answer-string ws ":" ws answer-value',
    "answer-array": '"[" ws ( answer-value ( ws "," ws answer-value )* )? ws "]"',
    "answer-string": '"\\"" answer-string-char* "\\""',
    "answer-escape": _ESCAPE,
}


def _typed_answer(dialect: str, typed: TypedAnswer, rules: _Rules) -> str:
    """A typed answer: the dialect's answer block holding JSON of ``typed.schema`` only."""
    stop = _STOPS[dialect]
    for name, body in _ANSWER_JSON.items():
        rules.add(name, body)
    rules.add("answer-string-char", _STRING_CHARS[stop])
    rules.add("answer-key-char", f'[^"\\\\\\x00-\\x1F{_class_char(stop)}]')
    names = sorted({n for n in typed.names if _NAME.fullmatch(n)})
    if names:
        choice = " | ".join(literal(n) for n in names)
        rules.add("output-reference", f'"\\"$" ( {choice} ) ( "." [a-zA-Z0-9_]+ )* "\\""')
    rules.root = typed.schema
    rules.roots.append(typed.schema)
    rules.answer, rules.references = dialect, bool(names)
    try:
        value = schema_rules(typed.schema, rules, "output")
    finally:
        rules.answer, rules.references = None, True
    opening, closing = _TYPED[dialect]
    return " ".join(p for p in (opening, "ws", value, "ws", closing) if p)


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _more(item: str, max_actions: int) -> str:
    """Up to ``max_actions - 1`` more of ``item``, nested: ``( item ( item )? )?``."""
    more = ""
    for _ in range(max(0, max_actions - 1)):
        more = f" ( {item}{more} )?"
    return more

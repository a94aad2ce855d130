"""A small GBNF recognizer and sampler for tests: does a grammar (as runtime.loop.grammar
writes them) admit a text (``accepts``), and what texts does it admit (``sample``)? Rules,
string literals, character classes (ranges, ``^``, escapes), groups, alternatives and
``? * +``; no left recursion. Every way to match is followed, so the answer does not
depend on which alternative a greedy matcher would try first."""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from functools import cache
from typing import Any

_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "]": "]", "[": "[", "-": "-"}


def _char(text: str, i: int) -> tuple[str, int]:
    if text[i] != "\\":
        return text[i], i + 1
    c = text[i + 1]
    width = {"x": 2, "u": 4, "U": 8}.get(c)
    if width:
        return chr(int(text[i + 2 : i + 2 + width], 16)), i + 2 + width
    return _ESCAPES.get(c, c), i + 2


class _Parser:
    def __init__(self, text: str) -> None:
        self.text, self.i = text, 0

    def skip(self) -> None:
        while self.i < len(self.text) and self.text[self.i] in " \t":
            self.i += 1

    def alt(self) -> Any:
        options = [self.seq()]
        self.skip()
        while self.i < len(self.text) and self.text[self.i] == "|":
            self.i += 1
            options.append(self.seq())
            self.skip()
        return ("alt", options)

    def seq(self) -> Any:
        items = []
        while True:
            self.skip()
            if self.i >= len(self.text) or self.text[self.i] in "|)":
                return ("seq", items)
            item = self.atom()
            if self.i < len(self.text) and self.text[self.i] in "?*+":
                op = self.text[self.i]
                self.i += 1
                item = ("rep", item, 0 if op in "?*" else 1, 1 if op == "?" else None)
            items.append(item)

    def atom(self) -> Any:
        t, i = self.text, self.i
        if t[i] == '"':
            i += 1
            out = []
            while t[i] != '"':
                c, i = _char(t, i)
                out.append(c)
            self.i = i + 1
            return ("lit", "".join(out))
        if t[i] == "[":
            i += 1
            negated = t[i] == "^"
            i += negated
            ranges = []
            while t[i] != "]":
                lo, i = _char(t, i)
                hi = lo
                if t[i] == "-" and t[i + 1] != "]":
                    hi, i = _char(t, i + 1)
                ranges.append((lo, hi))
            self.i = i + 1
            return ("cls", negated, tuple(ranges))
        if t[i] == "(":
            self.i += 1
            inner = self.alt()
            assert self.text[self.i] == ")", self.text[self.i :]
            self.i += 1
            return inner
        name = re.match(r"[a-zA-Z0-9-]+", t[i:])
        assert name, f"cannot read GBNF at {t[i:]!r}"
        self.i += len(name.group())
        return ("ref", name.group())


def parse(grammar: str) -> dict[str, Any]:
    rules = {}
    for line in grammar.splitlines():
        if line.strip():
            name, body = line.split(" ::= ", 1)
            parser = _Parser(body)
            rules[name.strip()] = parser.alt()
            assert parser.i == len(body), f"{name}: unread {body[parser.i :]!r}"
    return rules


@cache
def _parsed(grammar: str) -> dict[str, Any]:
    return parse(grammar)


def accepts(grammar: str, text: str) -> bool:
    """Whether ``grammar``'s ``root`` admits all of ``text``."""
    rules = _parsed(grammar)

    @cache
    def rule_ends(name: str, pos: int) -> frozenset[int]:
        return ends(rules[name], pos)

    def ends(node: Any, pos: int) -> frozenset[int]:
        kind = node[0]
        if kind == "lit":
            return frozenset([pos + len(node[1])]) if text.startswith(node[1], pos) else frozenset()
        if kind == "cls":
            if pos >= len(text):
                return frozenset()
            inside = any(lo <= text[pos] <= hi for lo, hi in node[2])
            return frozenset([pos + 1]) if inside != node[1] else frozenset()
        if kind == "ref":
            return rule_ends(node[1], pos)
        if kind == "alt":
            return frozenset().union(*(ends(o, pos) for o in node[1]))
        if kind == "seq":
            current = frozenset([pos])
            for item in node[1]:
                current = frozenset().union(*(ends(item, p) for p in current))
                if not current:
                    break
            return current
        _, item, low, high = node
        result: set[int] = {pos} if low == 0 else set()
        frontier, count = {pos}, 0
        while frontier and (high is None or count < high):
            count += 1
            step = frozenset().union(*(ends(item, p) for p in frontier))
            frontier = {p for p in step if p not in result or count < low}
            if count >= low:
                result |= step
        return frozenset(result)

    return len(text) in rule_ends("root", 0)


# ---- sampling ---------------------------------------------------------------------------

#: Characters a negated class may give (each only where the class admits it): letters,
#: digits, JSON's and the protocol's punctuation, whitespace, ``$``, non-ASCII.
POOL = 'abcxyzABCZ0123456789 _-.,:;$$$"\\{}[]<>/\n\t é°中§\U0001f600'


def _size(node: Any, best: dict[str, int]) -> int:
    """The length of ``node``'s shortest text, rules' lengths as in ``best``."""
    kind = node[0]
    if kind == "lit":
        return len(node[1])
    if kind == "cls":
        return 1
    if kind == "ref":
        return best[node[1]]
    if kind == "alt":
        return min(_size(o, best) for o in node[1])
    if kind == "seq":
        return sum(_size(i, best) for i in node[1])
    return int(node[2] * _size(node[1], best))


def _shortest(rules: dict[str, Any]) -> dict[str, int]:
    """The length of each rule's shortest text (a fixed point), to end a deep sample."""
    best = dict.fromkeys(rules, 10**9)
    changed = True
    while changed:
        changed = False
        for name, node in rules.items():
            n = min(_size(node, best), 10**9)
            if n < best[name]:
                best[name], changed = n, True
    return best


def _pick(node: Any, rng: random.Random) -> str:
    negated, ranges = node[1], node[2]
    if not negated:
        lo, hi = rng.choice(ranges)
        return chr(rng.randint(ord(lo), ord(hi)))
    pool = [c for c in POOL if not any(lo <= c <= hi for lo, hi in ranges)]
    return rng.choice(pool)


class _Sampler:
    """Random texts of a grammar: alternatives and repeat counts are random; past
    ``depth`` nested rules a text takes its shortest way out, so it ends."""

    def __init__(self, grammar: str, depth: int) -> None:
        self.rules = _parsed(grammar)
        self.best = _shortest(self.rules)
        self.depth = depth

    def __call__(self, rng: random.Random) -> str:
        out: list[str] = []
        self.walk(self.rules["root"], rng, 0, out)
        return "".join(out)

    def walk(self, node: Any, rng: random.Random, level: int, out: list[str]) -> None:
        kind = node[0]
        if kind == "lit":
            out.append(node[1])
        elif kind == "cls":
            out.append(_pick(node, rng))
        elif kind == "ref":
            self.walk(self.rules[node[1]], rng, level + 1, out)
        elif kind == "alt":
            options = node[1]
            if level > self.depth:
                least = min(_size(o, self.best) for o in options)
                options = [o for o in options if _size(o, self.best) == least]
            self.walk(rng.choice(options), rng, level, out)
        elif kind == "seq":
            for item in node[1]:
                self.walk(item, rng, level, out)
        else:
            _, item, count, high = node
            while level <= self.depth and (high is None or count < high) and rng.random() < 0.5:
                count += 1
            for _ in range(count):
                self.walk(item, rng, level, out)


def sampler(grammar: str, *, depth: int = 12) -> Callable[[random.Random], str]:
    """A function of a ``random.Random`` giving one text ``grammar``'s root admits."""
    return _Sampler(grammar, depth)


def left_recursive(grammar: str) -> list[str]:
    """The rules that can reach themselves before reading a character (llama.cpp refuses
    a grammar with one: "left recursion detected")."""
    rules = _parsed(grammar)
    best = _shortest(rules)

    def nullable(node: Any) -> bool:
        return _size(node, best) == 0

    def firsts(node: Any) -> set[str]:
        kind = node[0]
        if kind == "ref":
            return {node[1]}
        if kind == "alt":
            return set().union(*(firsts(o) for o in node[1]))
        if kind == "seq":
            out: set[str] = set()
            for item in node[1]:
                out |= firsts(item)
                if not nullable(item):
                    break
            return out
        if kind == "rep":
            return firsts(node[1])
        return set()

    edges = {name: firsts(node) for name, node in rules.items()}
    found = []
    for start in rules:
        seen, todo = set(), list(edges[start])
        while todo:
            name = todo.pop()
            if name == start:
                found.append(start)
                break
            if name not in seen:
                seen.add(name)
                todo.extend(edges[name])
    return found

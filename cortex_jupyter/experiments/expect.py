"""What a try must show: ``expect.answer``, ``output``, ``tools``, ``graph``, ``limits``,
``judge`` and the always-on ``protocol`` check.

Each is a small frozen dataclass (a ``results.Expectation`` with a ``kind``) whose
``check(run)`` reads the finished run's record alone (a live ``Run`` or one ``open_run``
read back) and returns a ``Verdict``: pass or fail, a score in [0, 1], a short reason and
plain ``details`` a view lays over the try's graph. A check never raises for what a run
holds or a user's predicate does: that is a failed verdict saying why. ``to_data()`` is
the plain form a saved dataset keeps; a function cannot be saved, so one holding a
function raises ``ValueError`` naming the field.

    from cortex_jupyter.experiments import expect
    expect.answer(contains="Paris")
    expect.tools(["lookup", ("refund", {"amount": 20})], order="in_order")
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import regex  # type: ignore[import-untyped]  # the package ships no type hints

from cortex_jupyter.experiments import _match
from cortex_jupyter.experiments._judge import Judge
from cortex_jupyter.experiments.results import Expectation, Verdict
from cortex_jupyter.runtime.core.trust.secrets import safe_repr, shorten

__all__ = [
    "ORDERS",
    "Answer",
    "Graph",
    "Judge",
    "Limits",
    "Output",
    "Protocol",
    "Tools",
    "answer",
    "graph",
    "judge",
    "limits",
    "output",
    "protocol",
    "tools",
]

ORDERS = ("in_order", "exact", "any_order", "subset", "superset")
ARGS = ("subset", "exact", "ignore")
_SHORT = 60


def short(value: Any, limit: int = _SHORT) -> str:
    """A text as a reason quotes it: secrets redacted, cut to ``limit`` characters."""
    text = value if isinstance(value, str) else safe_repr(value, limit=limit * 2)
    return shorten(" ".join(text.split()), limit)


def shown(value: Any) -> str:
    """Any value as a difference shows it: its short repr (a text quoted)."""
    return short(safe_repr(value, limit=_SHORT * 2))


def _quoted(value: Any) -> str:
    return f"'{short(value)}'" if isinstance(value, str) else short(value)


def _no_functions(kind: str, fields: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` naming the first field holding a function (not savable)."""
    for name, value in fields.items():
        for inner, each in _walk(name, value):
            if callable(each):
                raise ValueError(
                    f"expect.{kind}: {inner} holds a function, which a saved dataset cannot "
                    "keep; give a value instead, or keep this expectation in code"
                )


def _walk(name: str, value: Any) -> list[tuple[str, Any]]:
    if isinstance(value, Mapping):
        return [pair for k, v in value.items() for pair in _walk(f"{name}[{k!r}]", v)]
    if isinstance(value, list | tuple):
        return [pair for i, v in enumerate(value) for pair in _walk(f"{name}[{i}]", v)]
    return [(name, value)]


def _data(kind: str, **fields: Any) -> dict[str, Any]:
    _no_functions(kind, fields)
    return {"kind": kind, **{k: v for k, v in fields.items() if v is not None}}


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


# --------------------------------------------------------------------------- answer


#: The most seconds ``expect.answer(regex=...)`` searches one answer.
REGEX_SECONDS = 1.0


@dataclass(frozen=True)
class Answer(Expectation):
    """The run's answer text: ``equals`` (whitespace at the ends ignored), ``contains``
    (every text given), ``regex`` (searched), ``check`` (a function of the answer giving a
    bool, a score or ``(bool, reason)``; a float passes at 0.5 or more)."""

    kind = "answer"
    equals: str | None = None
    contains: tuple[str, ...] = ()
    regex: str | None = None
    check_: Callable[[str], Any] | None = None
    case_sensitive: bool = True
    name: str | None = None
    _pattern: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.regex is not None:
            flags = 0 if self.case_sensitive else regex.IGNORECASE
            try:
                object.__setattr__(self, "_pattern", regex.compile(self.regex, flags))
            except (regex.error, TypeError) as exc:
                raise ValueError(
                    f"expect.answer: regex {self.regex!r:.80} is not valid: {exc}"
                ) from None

    def check(self, run: Any) -> Verdict:
        text = getattr(run, "answer", "")
        text = text if isinstance(text, str) else str(text)
        fold = (lambda s: s) if self.case_sensitive else str.casefold
        parts: list[tuple[float, str]] = []  # (score, reason when failed)
        if self.equals is not None:
            held = fold(text.strip()) == fold(self.equals.strip())
            parts.append(
                (float(held), f"answer is {_quoted(text)}, expected {_quoted(self.equals)}")
            )
        for piece in self.contains:
            parts.append((float(fold(piece) in fold(text)), f"answer lacks {_quoted(piece)}"))
        if self._pattern is not None:
            parts.append(self._searched(text))
        if self.check_ is not None:
            parts.append(_called(self.check_, text))
        if not parts:
            return Verdict.of(True, "nothing to check")
        failed = [reason for score, reason in parts if score < 0.5]
        score = sum(score for score, _ in parts) / len(parts)
        return Verdict(not failed, score, "; ".join(failed))

    def _searched(self, text: str) -> tuple[float, str]:
        """Whether the regex is found, searched for at most ``REGEX_SECONDS``: a pattern
        from a dataset file is untrusted text, and one such as ``^(a+)+$`` can take hours
        on the wrong answer (Python's ``re`` has no time limit; the ``regex`` package has)."""
        try:
            found = self._pattern.search(text, timeout=REGEX_SECONDS) is not None
        except TimeoutError:
            return 0.0, (
                f"the regex /{short(self.regex)}/ took over {REGEX_SECONDS:g} s on this answer: "
                "not matched (simplify the pattern)"
            )
        return float(found), f"answer does not match /{short(self.regex)}/"

    def to_data(self) -> dict[str, Any]:
        return _data(
            self.kind, equals=self.equals, contains=list(self.contains) or None,
            regex=self.regex, check=self.check_, name=self.name,
            case_sensitive=None if self.case_sensitive else False,
        )  # fmt: skip

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Answer:
        return answer(
            equals=data.get("equals"), contains=data.get("contains"), regex=data.get("regex"),
            case_sensitive=data.get("case_sensitive", True), name=data.get("name"),
        )  # fmt: skip


def _called(check: Callable[[str], Any], text: str) -> tuple[float, str]:
    """(score, reason) from a user's ``check``: a bool, a number, or (bool, reason)."""
    what = getattr(check, "__name__", "check")
    try:
        got = check(text)
    except Exception as exc:
        return 0.0, f"{what} raised {type(exc).__name__}: {short(str(exc))}"
    reason = f"{what} said no"
    if isinstance(got, tuple) and len(got) == 2:
        got, reason = got[0], short(str(got[1]))
    got = _scalar(got)
    if isinstance(got, bool) or got is None:
        return float(bool(got)), reason
    score = _number(got)
    if score is None:
        return 0.0, f"{what} returned {short(got)}, not a bool or a score"
    return min(max(score, 0.0), 1.0), f"{what} scored {score:.2f}"


def _scalar(value: Any) -> Any:
    """A numpy scalar as the Python one it holds (``np.isclose`` gives ``np.bool_``, which
    is no ``bool``; ``np.int64`` is no ``int``); anything else as it is."""
    item = getattr(value, "item", None)
    if type(value).__module__ == "numpy" and callable(item) and getattr(value, "ndim", 1) == 0:
        try:
            return item()
        except Exception:
            return value
    return value


def answer(
    equals: str | None = None,
    contains: str | Sequence[str] | None = None,
    regex: str | None = None,
    check: Callable[[str], Any] | None = None,
    case_sensitive: bool = True,
    name: str | None = None,
) -> Answer:
    """The answer text equals, contains or matches what is given (every one given must
    hold); ``check`` is a function of the answer (bool, score, or ``(bool, reason)``)."""
    pieces = (contains,) if isinstance(contains, str) else tuple(contains or ())
    if not all(isinstance(p, str) for p in pieces):
        raise ValueError(f"expect.answer: contains takes texts; got {contains!r:.80}")
    if equals is not None and not isinstance(equals, str):
        raise ValueError(f"expect.answer: equals takes a text; got {equals!r:.80}")
    return Answer(equals, pieces, regex, check, bool(case_sensitive), name)


# --------------------------------------------------------------------------- output


@dataclass(frozen=True)
class Output(Expectation):
    """The typed answer (``run.output``): ``equals`` it, or holds ``fields`` (each a value
    or a predicate of the field's value), as a pydantic model, a dataclass or a mapping."""

    kind = "output"
    equals: Any = None
    fields: Mapping[str, Any] | None = None
    name: str | None = None

    def check(self, run: Any) -> Verdict:
        got = getattr(run, "output", None)
        if got is None:
            why = getattr(run, "reason", None) or getattr(run, "status", "?")
            return Verdict.of(False, f"no typed answer ({short(why)})")
        diff: dict[str, list[str]] = {}
        if self.equals is not None and not _match.same(self.equals, got):
            diff = _differences(_match.plain(self.equals), _match.plain(got))
            if not diff:
                diff = {"": [shown(got), shown(self.equals)]}
        for key, want in (self.fields or {}).items():
            have, present = _field(got, key)
            if not present:
                diff[key] = ["(missing)", shown(want)]
            elif not _match.same(want, have):
                diff[key] = [shown(have), "(a check)" if callable(want) else shown(want)]
        if not diff:
            return Verdict.of(True)
        first, (have_text, want_text) = next(iter(diff.items()))
        where = f"{first} is" if first else "output is"
        more = f" (+{len(diff) - 1} more)" if len(diff) > 1 else ""
        return Verdict.of(False, f"{where} {have_text}, expected {want_text}{more}", fields=diff)

    def to_data(self) -> dict[str, Any]:
        equals = _match.plain(self.equals)
        return _data(self.kind, equals=equals, fields=_plain_map(self.fields), name=self.name)

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Output:
        return output(equals=data.get("equals"), fields=data.get("fields"), name=data.get("name"))


def _plain_map(fields: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if fields is None else {k: _match.plain(v) for k, v in fields.items()}


def _field(value: Any, key: str) -> tuple[Any, bool]:
    """``value``'s field ``key`` (a mapping's item, an object's attribute), and whether
    it has one. Only data: a mapping's items, a dataclass's or a pydantic model's fields."""
    if isinstance(value, Mapping):
        return (value[key], True) if key in value else (None, False)
    names: Any = ()
    if dataclasses.is_dataclass(value):
        names = {f.name for f in dataclasses.fields(value)}
    else:
        names = getattr(type(value), "model_fields", ())
    if key in names:
        try:
            return getattr(value, key), True
        except Exception:
            return None, False
    return None, False


def _differences(want: Any, have: Any) -> dict[str, list[str]]:
    if isinstance(want, Mapping) and isinstance(have, Mapping):
        keys = list(dict.fromkeys([*want, *have]))
        return {
            str(k): [shown(have.get(k, "(missing)")), shown(want.get(k, "(missing)"))]
            for k in keys
            if k not in want or k not in have or not _match.same(want[k], have[k])
        }
    return {}


def output(
    equals: Any = None, fields: Mapping[str, Any] | None = None, name: str | None = None
) -> Output:
    """The typed answer equals ``equals`` (a pydantic model, a dataclass, any value), and
    has each of ``fields`` (a value or a predicate of the field's value)."""
    if fields is not None and not isinstance(fields, Mapping):
        raise ValueError(
            f"expect.output: fields is a mapping of field to value; got {fields!r:.80}"
        )
    return Output(equals, None if fields is None else dict(fields), name)


# --------------------------------------------------------------------------- tools


@dataclass(frozen=True)
class Tools(Expectation):
    """The run's top-level actions match ``calls`` under an ``order`` and an ``args`` rule
    (see ``expect.tools``); the score is partial credit, the details name the missing,
    extra and out-of-order actions."""

    kind = "tools"
    calls: tuple[_match.Expected, ...] = ()
    order: str = "in_order"
    args: str = "subset"
    name: str | None = None

    def check(self, run: Any) -> Verdict:
        calls = _match.calls_of(run)
        want = self.calls

        def fits(expected: _match.Expected, call: _match.Call) -> bool:
            return _match.matches(expected, call, self.args)

        paired = _match.matching(want, calls, fits)
        missing = [want[i].name for i in range(len(want)) if i not in paired]
        used = set(paired.values())
        unused = [c for j, c in enumerate(calls) if j not in used]
        details: dict[str, list[str]] = {"missing": missing, "extra": [], "out_of_order": []}
        if self.order in ("in_order", "exact"):
            aligned = _match.lcs(want, calls, self.args)
            in_line = {j for _, j in aligned}
            details["out_of_order"] = [calls[j].id for j in sorted(used - in_line)]
            if self.order == "exact":
                details["extra"] = [c.id for c in unused]
                total = len(want) + len(calls)
                score = 1.0 if total == 0 else 2 * len(aligned) / total
                held = len(aligned) == len(want) == len(calls)
            else:
                score = 1.0 if not want else len(aligned) / len(want)
                held = len(aligned) == len(want)
        elif self.order == "subset":
            among = [c for c in calls if any(fits(e, c) for e in want)]
            details["extra"] = [c.id for c in calls if c not in among]
            score = 1.0 if not calls else len(among) / len(calls)
            held = len(among) == len(calls)
            details["missing"] = []
        else:  # any_order, superset
            score = 1.0 if not want else len(paired) / len(want)
            held = len(paired) == len(want)
        names = {c.id: c.name for c in calls}
        return Verdict(held, score, "" if held else _tools_reason(details, names), details)

    def to_data(self) -> dict[str, Any]:
        calls = [c.name if c.args is None else [c.name, dict(c.args)] for c in self.calls]
        order = None if self.order == "in_order" else self.order
        args = None if self.args == "subset" else self.args
        return _data(self.kind, calls=calls, order=order, args=args, name=self.name)

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Tools:
        return tools(
            data.get("calls") or [], order=data.get("order", "in_order"),
            args=data.get("args", "subset"), name=data.get("name"),
        )  # fmt: skip


def _tools_reason(details: Mapping[str, list[str]], names: Mapping[str, str]) -> str:
    said = []
    if details["missing"]:
        said.append("missing " + ", ".join(short(n, 40) for n in details["missing"][:5]))
    if details["out_of_order"]:
        shown = (f"{short(names.get(i, i), 40)} ({i})" for i in details["out_of_order"][:5])
        said.append("out of order: " + ", ".join(shown))
    if details["extra"]:
        shown = (f"{short(names.get(i, i), 40)} ({i})" for i in details["extra"][:5])
        said.append("extra: " + ", ".join(shown))
    return "; ".join(said) or "the calls differ"


def tools(
    calls: Sequence[str | tuple[str, Mapping[str, Any]] | list[Any]],
    order: str = "in_order",
    args: str = "subset",
    name: str | None = None,
) -> Tools:
    """The run's top-level actions, in start order, match ``calls``: each a tool name
    (any parameters) or ``(name, {arg: value or predicate})``.

    ``order``: ``in_order`` (the calls appear in this order, others may come between),
    ``exact`` (these calls, this order, nothing else), ``any_order`` (each appears, any
    order, others allowed; ``superset`` is the same), ``subset`` (every action is one of
    these). ``args``: ``subset`` (the parameters given match, others ignored), ``exact``
    (the parameters are these), ``ignore``. A call matches when the parameters as the
    model wrote them or as resolved (``$name`` filled) match.
    """
    if order not in ORDERS:
        raise ValueError(f"expect.tools: order is one of {', '.join(ORDERS)}; got {order!r:.40}")
    if args not in ARGS:
        raise ValueError(f"expect.tools: args is one of {', '.join(ARGS)}; got {args!r:.40}")
    if isinstance(calls, str | Mapping):
        raise ValueError("expect.tools: calls is a list of tool names or (name, {arg: value})")
    wanted = []
    for each in calls:
        if isinstance(each, str):
            wanted.append(_match.Expected(each))
        elif (
            isinstance(each, tuple | list)
            and len(each) == 2
            and isinstance(each[0], str)
            and isinstance(each[1], Mapping)
        ):
            wanted.append(_match.Expected(each[0], dict(each[1])))
        else:
            raise ValueError(
                f"expect.tools: a call is a tool name or (name, {{arg: value}}); got {each!r:.80}"
            )
    return Tools(tuple(wanted), order, args, name)


# --------------------------------------------------------------------------- graph


@dataclass(frozen=True)
class Graph(Expectation):
    """Which actions overlapped in time (``parallel``) and which started only after
    another's output existed (``before``), from the nodes' recorded times."""

    kind = "graph"
    parallel: tuple[tuple[str, ...], ...] = ()
    before: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    name: str | None = None

    def check(self, run: Any) -> Verdict:
        actions = getattr(run, "actions", None)
        nodes = list(actions.values()) if isinstance(actions, Mapping) else []
        details: dict[str, list[Any]] = {"broken": [], "not_parallel": [], "missing": []}
        refs = {r for group in self.parallel for r in group}
        refs |= set(self.before) | {r for after in self.before.values() for r in after}
        found = {ref: _named(nodes, ref) for ref in sorted(refs)}
        details["missing"] = [ref for ref, got in found.items() if not got]
        checked = 0
        for group in self.parallel:
            for i, a in enumerate(group):
                for b in group[i + 1 :]:
                    checked += 1
                    if not _overlap(found[a], found[b]):
                        details["not_parallel"].append([a, b])
        for later, earlier in self.before.items():
            for first in earlier:
                checked += 1
                if not _after(found[later], found[first]):
                    details["broken"].append([later, first])
        problems = len(details["broken"]) + len(details["not_parallel"])
        held = not problems and not details["missing"]
        score = 1.0 if not checked else 1 - problems / checked
        if details["missing"]:
            score = 0.0
        return Verdict(held, max(score, 0.0), "" if held else _graph_reason(details), details)

    def to_data(self) -> dict[str, Any]:
        return _data(
            self.kind, parallel=[list(g) for g in self.parallel] or None,
            before={k: list(v) for k, v in self.before.items()} or None, name=self.name,
        )  # fmt: skip

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Graph:
        return graph(data.get("parallel"), data.get("before"), name=data.get("name"))


def _named(nodes: list[Any], ref: str) -> list[Any]:
    """The nodes ``ref`` names: the one with that id, else every one with that name."""
    by_id = [n for n in nodes if getattr(n, "id", None) == ref]
    return by_id or [n for n in nodes if getattr(n, "name", None) == ref]


def _span(node: Any) -> tuple[float, float] | None:
    start, end = _number(getattr(node, "started", None)), _number(getattr(node, "finished", None))
    return None if start is None or end is None else (start, end)


def _overlap(one: list[Any], other: list[Any]) -> bool:
    """Some node of ``one`` ran while some node of ``other`` ran."""
    for a in filter(None, map(_span, one)):
        for b in filter(None, map(_span, other)):
            if max(a[0], b[0]) < min(a[1], b[1]):
                return True
    return False


def _after(later: list[Any], earlier: list[Any]) -> bool:
    """Every node of ``later`` started after each of ``earlier`` finished."""
    if not later or not earlier:
        return False
    for node in later:
        start = _number(getattr(node, "started", None))
        for first in earlier:
            end = _number(getattr(first, "finished", None))
            if start is None or end is None or start < end:
                return False
    return True


def _graph_reason(details: Mapping[str, list[Any]]) -> str:
    said = []
    if details["missing"]:
        said.append("no action " + ", ".join(_quoted(r) for r in details["missing"][:5]))
    for later, first in details["broken"][:3]:
        said.append(f"{short(later, 30)} started before {short(first, 30)} finished")
    for a, b in details["not_parallel"][:3]:
        said.append(f"{short(a, 30)} and {short(b, 30)} did not overlap")
    return "; ".join(said)


def graph(
    parallel: Sequence[Sequence[str]] | None = None,
    before: Mapping[str, str | Sequence[str]] | None = None,
    name: str | None = None,
) -> Graph:
    """``parallel``: groups of action names (or ids) whose runs must overlap in time,
    pair by pair; ``before``: ``{"refund": ["lookup"]}``, every ``refund`` started after
    each ``lookup`` finished (its output existed)."""
    groups = []
    for group in parallel or ():
        if isinstance(group, str) or not all(isinstance(r, str) for r in group):
            raise ValueError(
                f"expect.graph: parallel is a list of lists of names; got {group!r:.80}"
            )
        groups.append(tuple(group))
    if before is not None and not isinstance(before, Mapping):
        raise ValueError(f"expect.graph: before is {{name: [names]}}; got {before!r:.80}")
    edges: dict[str, tuple[str, ...]] = {}
    for later, earlier in (before or {}).items():
        firsts = (earlier,) if isinstance(earlier, str) else tuple(earlier)
        if not isinstance(later, str) or not all(isinstance(r, str) for r in firsts):
            raise ValueError(f"expect.graph: before is {{name: [names]}}; got {before!r:.80}")
        edges[later] = firsts
    return Graph(tuple(groups), edges, name)


# --------------------------------------------------------------------------- limits


@dataclass(frozen=True)
class Limits(Expectation):
    """The run stayed within a cost (USD), tokens, turns, seconds, and started its first
    action within ``first_action`` seconds."""

    kind = "limits"
    cost: float | None = None
    tokens: int | None = None
    turns: int | None = None
    seconds: float | None = None
    first_action: float | None = None
    name: str | None = None

    def check(self, run: Any) -> Verdict:
        given = {
            k: getattr(self, k) for k in ("cost", "tokens", "turns", "seconds", "first_action")
        }
        given = {k: v for k, v in given.items() if v is not None}
        over: dict[str, list[Any]] = {}
        for key, limit in given.items():
            value, why = _measure(run, key)
            if value is None:
                over[key] = [None, limit, why]
            elif value > limit:
                over[key] = [value, limit, f"{key} {_fmt(key, value)} > {_fmt(key, limit)}"]
        if not given:
            return Verdict.of(True, "no limit given")
        score = 1 - len(over) / len(given)
        reason = "; ".join(str(v[2]) for v in over.values())
        return Verdict(not over, score, reason, {"over": {k: v[:2] for k, v in over.items()}})

    def to_data(self) -> dict[str, Any]:
        return _data(
            self.kind, cost=self.cost, tokens=self.tokens, turns=self.turns,
            seconds=self.seconds, first_action=self.first_action, name=self.name,
        )  # fmt: skip

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Limits:
        keys = ("cost", "tokens", "turns", "seconds", "first_action", "name")
        return limits(**{k: data.get(k) for k in keys})


def _fmt(key: str, value: float) -> str:
    if key == "cost":
        return f"${value:.4f}"
    if key in ("seconds", "first_action"):
        return f"{value:.2f} s"
    return f"{value:g}"


def _measure(run: Any, key: str) -> tuple[float | None, str]:
    """The run's figure for ``key``, or (None, why it is not known)."""
    if key == "cost":
        return _number(getattr(run, "cost", None)), "cost unknown"
    if key == "tokens":
        usage = getattr(run, "usage", None) or {}
        total = usage.get("total_tokens")
        if total is None:
            total = (usage.get("prompt_tokens") or 0) + (usage.get("completion_tokens") or 0)
        return _number(total), "tokens unknown"
    if key == "turns":
        return _number(getattr(run, "turns", None)), "turns unknown"
    start = _number(getattr(run, "started", None))
    if key == "seconds":
        end = _number(getattr(run, "ended", None))
        if start is None or end is None:
            return None, "the run has no end time"
        return end - start, ""
    first = _first_start(run)
    if start is None or first is None:
        return None, "no action started"
    return first - start, ""


def _first_start(run: Any) -> float | None:
    actions = getattr(run, "actions", None)
    nodes = actions.values() if isinstance(actions, Mapping) else ()
    starts = [_number(getattr(n, "started", None)) for n in nodes]
    known = [s for s in starts if s is not None]
    return min(known) if known else None


def limits(
    cost: float | None = None,
    tokens: int | None = None,
    turns: int | None = None,
    seconds: float | None = None,
    first_action: float | None = None,
    name: str | None = None,
) -> Limits:
    """The run cost at most ``cost`` US dollars (an unknown cost fails), used at most
    ``tokens`` tokens and ``turns`` turns, took at most ``seconds``, and started its
    first action within ``first_action`` seconds of its start."""
    for key, value in (("cost", cost), ("tokens", tokens), ("turns", turns),
                       ("seconds", seconds), ("first_action", first_action)):  # fmt: skip
        if value is not None and (_number(value) is None or value < 0):
            raise ValueError(f"expect.limits: {key} is a number, 0 or more; got {value!r:.40}")
    return Limits(cost, tokens, turns, seconds, first_action, name)


# --------------------------------------------------------------------------- judge


def judge(rubric: str, model: Any = None, threshold: float = 0.5, name: str | None = None) -> Judge:
    """An LLM judge: ``model`` (a ``StreamingModel``, a model name for an ``OpenAIModel``
    with the environment's base URL and key, or None: the experiment's judge model) reads
    the rubric, the case's prompt and the run's answer (secrets redacted) and replies
    pass, score and reason. Its requests are counted apart from the agent's."""
    return Judge(rubric, model, threshold, name)


# --------------------------------------------------------------------------- protocol


@dataclass(frozen=True)
class Protocol(Expectation):
    """Always on: no protocol error (malformed text, a forged result...), every
    top-level action done, and the run completed (what ``evaluate()`` measures)."""

    kind = "protocol"
    name: str | None = None

    def check(self, run: Any) -> Verdict:
        errors = list(getattr(run, "errors", None) or ())
        nodes = [n for n in _match.calls_of(run)]
        actions = getattr(run, "actions", None) or {}
        bad = [
            c for c in nodes
            if getattr(actions.get(c.id), "status", None) != "done"
        ]  # fmt: skip
        status = getattr(run, "status", None)
        said = []
        if status != "completed":
            said.append(f"run {short(status, 20)}: {short(getattr(run, 'reason', None) or '')}")
        if errors:
            codes = [str(getattr(e, "code", "error")) for e in errors]
            said.append(f"{len(errors)} protocol error(s): {', '.join(dict.fromkeys(codes))}")
        for call in bad[:3]:
            node = actions.get(call.id)
            what = getattr(node, "status", "?")
            said.append(f"{short(call.name, 30)} ({call.id}) {what}")
        if len(bad) > 3:
            said.append(f"+{len(bad) - 3} more actions")
        problems = len(errors) + len(bad)
        whole = len(nodes) + len(errors)
        score = 0.0 if status != "completed" else max(0.0, 1 - problems / whole) if whole else 1.0
        details = {
            "errors": [
                [str(getattr(e, "code", "")), short(getattr(e, "message", ""))] for e in errors
            ],
            "failed": [c.id for c in bad],
        }
        return Verdict(not said, score, "; ".join(said), details)

    def to_data(self) -> dict[str, Any]:
        return _data(self.kind, name=self.name)

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Protocol:
        return protocol(name=data.get("name"))


def protocol(name: str | None = None) -> Protocol:
    """The always-on protocol check (every case has it; the runner adds it)."""
    return Protocol(name)

"""A dataset's files: YAML and JSONL, written whole or not at all, read as untrusted.

YAML (``.yaml``/``.yml``) holds one mapping::

    name: capitals
    cases:
    - name: france
      prompt: What is the capital of France?
      expect:
      - {kind: answer, contains: Paris}
      metadata: {level: easy}
      vars: {country: France}

(a file that is only the list of cases is read too). JSONL (``.jsonl``) holds one case
per line, in the same form; a first line ``{"dataset": NAME}`` names the dataset. Empty
``expect``, ``metadata`` and ``vars`` are left out. Expectations are written with
``Expectation.to_data()`` and read back with ``results.from_data``.

Saving makes every case plain data before a byte is written, then writes a new file
beside the target and renames it over it: a case that cannot be saved leaves the old
file as it was. Loading uses ``yaml`` safe loading only (no tag makes an object) and
``json``; anything wrong is a ``ValueError`` of one line naming the file, the line or
the case, and what is wrong.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from . import results

__all__ = ["case_data", "load", "save"]

SUFFIXES = (".yaml", ".yml", ".jsonl")
FIELDS = ("name", "prompt", "expect", "metadata", "vars")
MAX_DEPTH = 64
#: Values a YAML file's aliases may add once written out (``_expanded``).
MAX_ALIASED = 100_000
PLAIN = "text, numbers, true/false, null, and lists and mappings of them with text keys"
_Loader: type[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


# ---- plain data ----------------------------------------------------------------------------


def not_plain(value: Any, where: str) -> str | None:
    """Where inside ``value`` (called ``where``) something is not plain data, and what it
    is; None when all of it is. A container shared by several places is checked once (a
    YAML file's aliases cost no more than their text); one that holds itself, or a
    nesting deeper than ``MAX_DEPTH``, is not plain."""
    done: set[int] = set()

    def check(item: Any, at: str, path: set[int]) -> str | None:
        if item is None or isinstance(item, bool | int | str):
            return None
        if isinstance(item, float):
            return None if math.isfinite(item) else f"{at} is {item!r}, which a file cannot hold"
        if not isinstance(item, list | tuple | dict):
            return f"{at} is a {type(item).__name__}, not plain data ({PLAIN})"
        if id(item) in path:
            return f"{at} holds itself"
        if id(item) in done:
            return None
        if len(path) >= MAX_DEPTH:
            return f"{at} is nested more than {MAX_DEPTH} deep"
        if isinstance(item, dict):
            bad = next((key for key in item if not isinstance(key, str)), None)
            if bad is not None:
                return f"{at} has the key {bad!r:.40}, not text"
        inner = item.items() if isinstance(item, dict) else enumerate(item)
        path.add(id(item))
        for key, value in inner:
            problem = check(value, f"{at}[{key!r:.40}]", path)
            if problem:
                return problem
        path.discard(id(item))
        done.add(id(item))
        return None

    return check(value, where, set())


def case_data(case: Any) -> dict[str, Any]:
    """``case`` as plain data; ``ValueError`` names the case and what cannot be saved."""
    data: dict[str, Any] = {"name": case.name, "prompt": case.prompt}
    expect = []
    for position, expectation in enumerate(case.expect, 1):
        try:
            item = expectation.to_data()
        except (ValueError, TypeError, NotImplementedError) as error:
            raise ValueError(
                f"case {case.name!r}: expectation {position} ({expectation.label}) cannot be "
                f"saved: {error or 'it has no plain-data form'}"
            ) from None
        problem = not_plain(item, "its data")
        if problem:
            raise ValueError(
                f"case {case.name!r}: expectation {position} ({expectation.label}) cannot "
                f"be saved: {problem}"
            )
        expect.append(item)
    if expect:
        data["expect"] = expect
    for part in ("metadata", "vars"):
        value = getattr(case, part)
        problem = not_plain(value, part)
        if problem:
            raise ValueError(f"case {case.name!r} cannot be saved: {problem}")
        if value:
            data[part] = value
    return data


# ---- writing ----------------------------------------------------------------------------


class _Dumper(yaml.SafeDumper):
    """Safe YAML with multi-line text as ``|`` blocks (the emitter quotes what a block
    cannot hold exactly), and no anchors: a value shared by two cases is written twice."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


#: Line breaks YAML knows besides "\n" (a plain or block scalar would fold them away).
_OTHER_BREAKS = ("\r", "\x85", "\u2028", "\u2029")


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    if any(mark in value for mark in _OTHER_BREAKS):
        style = '"'  # escaped, so read back exactly
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text)


def _suffix(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise ValueError(
            f"{path.name}: a dataset file ends in .yaml, .yml or .jsonl; got {suffix or 'none'!r}"
        )
    return suffix


def render(dataset: Any, suffix: str) -> str:
    """The file's whole text (every case made plain data first)."""
    cases = [case_data(case) for case in dataset]
    if suffix == ".jsonl":
        lines = [json.dumps({"dataset": dataset.name}, ensure_ascii=False)] if dataset.name else []
        lines += [json.dumps(case, ensure_ascii=False, allow_nan=False) for case in cases]
        return "".join(line + "\n" for line in lines)
    whole: dict[str, Any] = {"name": dataset.name} if dataset.name else {}
    whole["cases"] = cases
    text: str = yaml.dump(whole, Dumper=_Dumper, allow_unicode=True, sort_keys=False, width=100)
    return text


def save(dataset: Any, path: str | os.PathLike[str]) -> None:
    """Write ``dataset`` to ``path`` whole, or leave it as it was."""
    target = Path(path)
    text = render(dataset, _suffix(target))
    try:
        mode = target.stat().st_mode & 0o777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    handle, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="\n") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temp, mode)
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


# ---- reading ----------------------------------------------------------------------------


def _known_kinds() -> None:
    """Register the built-in expectation kinds (``expect`` defines them) before reading."""
    with contextlib.suppress(ModuleNotFoundError):
        importlib.import_module("cortex_jupyter.experiments.expect")


def load(
    path: str | os.PathLike[str], make_case: Callable[..., Any], make_dataset: Callable[..., Any]
) -> Any:
    """The dataset in ``path``, made with ``make_dataset(cases, name)`` from cases made
    with ``make_case(prompt, name, expect, metadata, vars)`` (``Dataset`` and ``Case``);
    ``ValueError`` (one line) says what is wrong with it."""
    source = Path(path)
    suffix = _suffix(source)
    try:
        text = source.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(
            f"{source}: not UTF-8 text ({error.reason} at byte {error.start})"
        ) from None
    _known_kinds()
    if suffix == ".jsonl":
        name, raw = _read_jsonl(source, text)
    else:
        name, raw = _read_yaml(source, text)
    cases = [_case(source, where, data, make_case) for where, data in raw]
    if name is None:
        name = source.stem
    try:
        return make_dataset(cases, name)
    except (ValueError, TypeError) as error:
        raise ValueError(f"{source}: {error}") from None


def from_data(
    data: Any, make_case: Callable[..., Any], make_dataset: Callable[..., Any], source: str
) -> Any:
    """A dataset from ``Dataset.to_data()``'s form (as the store keeps an experiment's);
    ``source`` names where it came from in a refusal."""
    _known_kinds()
    if not isinstance(data, dict) or not isinstance(data.get("cases"), list):
        raise ValueError(f"{source}: a dataset is a mapping with a list of cases")
    cases = [
        _case(Path(source), f"case {i}", item, make_case) for i, item in enumerate(data["cases"], 1)
    ]
    return make_dataset(cases, data.get("name"))


def _case(source: Path, where: str, data: Any, make_case: Callable[..., Any]) -> Any:
    """A case from its plain data; ``where`` is "line 4" or similar."""

    def wrong(what: str) -> ValueError:
        label = f" ({data['name']!r:.60})" if isinstance(data, dict) and "name" in data else ""
        return ValueError(f"{source}, {where}: case{label}: {what}")

    if not isinstance(data, dict):
        raise ValueError(f"{source}, {where}: a case is a mapping; got {type(data).__name__}")
    unknown = sorted(str(key) for key in data if key not in FIELDS)
    if unknown:
        raise wrong(f"unknown field {unknown[0]!r:.40}; a case's fields are {', '.join(FIELDS)}")
    if "prompt" not in data:
        raise wrong("it has no prompt")
    name = data.get("name")
    if name is not None and not isinstance(name, str):
        name = str(name) if isinstance(name, int | float) and not isinstance(name, bool) else name
    expect_data = data.get("expect") or []
    if not isinstance(expect_data, list):
        raise wrong(f"expect is a list of expectations; got {type(expect_data).__name__}")
    expect = []
    for position, item in enumerate(expect_data, 1):
        try:
            expect.append(results.from_data(item))
        except (ValueError, TypeError, KeyError) as error:
            raise wrong(f"expectation {position}: {error}") from None
    for part in ("metadata", "vars"):
        value = data.get(part)
        problem = None if value is None else not_plain(value, part)
        if problem:
            raise wrong(str(problem))
    try:
        return make_case(data["prompt"], name, expect, data.get("metadata"), data.get("vars"))
    except (ValueError, TypeError) as error:
        raise wrong(str(error)) from None


def _read_jsonl(source: Path, text: str) -> tuple[str | None, list[tuple[str, Any]]]:
    name: str | None = None
    cases: list[tuple[str, Any]] = []
    # Only "\n" ends a line: a case's text may hold U+2028 or U+0085 unescaped.
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except (ValueError, RecursionError) as error:
            what = (
                error.msg if isinstance(error, json.JSONDecodeError) else str(error) or "too deep"
            )
            raise ValueError(f"{source}, line {number}: not JSON ({what})") from None
        if isinstance(data, dict) and "dataset" in data and "prompt" not in data:
            if cases or name is not None or set(data) != {"dataset"}:
                raise ValueError(
                    f'{source}, line {number}: a {{"dataset": NAME}} line comes first, alone'
                )
            if not isinstance(data["dataset"], str | None):
                raise ValueError(f"{source}, line {number}: the dataset's name is text")
            name = data["dataset"]
            continue
        cases.append((f"line {number}", data))
    return name, cases


def _expanded(root: yaml.Node) -> int:
    """How many values more than its own nodes the document ``root`` holds once each alias
    is written out (a node shared by aliases is counted at each place; a node that holds
    itself once, ``not_plain`` refuses it). A billion-laughs file of 1 KB loads cheaply,
    its lists shared, but every copy of it (an experiment's stored dataset, a save) would
    write each of them out."""
    sizes: dict[int, int] = {}
    nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    path: set[int] = set()
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        if children_done:
            path.discard(key)
            sizes[key] = 1 + sum(sizes.get(id(child), 0) for child in children)
            if sizes[key] > MAX_ALIASED + len(nodes):
                return sizes[key] - len(nodes)
            continue
        if key in sizes or key in path:
            continue
        nodes.add(key)
        path.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in children)
    return sizes.get(id(root), 0) - len(nodes)


def _read_yaml(source: Path, text: str) -> tuple[str | None, list[tuple[str, Any]]]:
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is not None and _expanded(node) > MAX_ALIASED:
            raise ValueError(
                f"{source}: its aliases (*name) repeat more than {MAX_ALIASED:,} values: "
                "a dataset file holds its cases written out"
            )
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        at = f", line {mark.line + 1}" if mark is not None else ""
        what = " ".join(str(error.problem or error.context or "malformed YAML").split())
        raise ValueError(f"{source}{at}: not a dataset's YAML ({what})") from None
    except (yaml.YAMLError, RecursionError) as error:
        raise ValueError(f"{source}: not a dataset's YAML ({error or 'too deep'})") from None
    finally:
        loader.dispose()
    items, name = data, None
    lines = node.value if isinstance(node, yaml.SequenceNode) else []
    if isinstance(data, dict):
        unknown = sorted(str(key) for key in data if key not in ("name", "cases"))
        if unknown or "cases" not in data:
            raise ValueError(
                f"{source}: a dataset's YAML is a mapping with 'cases' (and 'name')"
                + (f"; it has {unknown[0]!r:.40}" if unknown else "")
            )
        items, name = data["cases"], data.get("name")
        if name is not None:
            name = str(name)
        assert isinstance(node, yaml.MappingNode)
        lines = next(
            (value.value for key, value in node.value if key.value == "cases"
             and isinstance(value, yaml.SequenceNode)), [],
        )  # fmt: skip
    if not isinstance(items, list):
        raise ValueError(f"{source}: a dataset's YAML holds a list of cases under 'cases'")
    cases = []
    for position, item in enumerate(items):
        at = f"line {lines[position].start_mark.line + 1}" if position < len(lines) else ""
        cases.append((at or f"case {position + 1}", item))
    return name, cases

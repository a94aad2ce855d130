"""``%%cortex --replay`` of a transcript someone edited by hand, or wrote to harm.

A transcript is a file: it may have been edited, cut short, written by another version,
or written to harm. Each such file is one ``cortex:`` line naming the file and the line
that is wrong (never a traceback, never the secret or the megabyte a field held), and
the kernel goes on; a model name holding a secret is replayed, and kept redacted.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from IPython.core.interactiveshell import InteractiveShell

from cortex_jupyter import store
from cortex_jupyter.models import ReplayModel
from cortex_jupyter.runtime.core.model.chunks import TextChunk
from cortex_jupyter.session import CortexRunError
from tests.otel_spans import recorded

BODY = "<thought>thinking</thought><response>Four.</response>"
SECRET = "sk-HOSTILEsecret0123456789abcdef"
Lines = list[dict[str, Any]]


def saved(ip: InteractiveShell, tmp_path: Path) -> Lines:
    """The transcript of a real run, as JSON lines to edit."""
    ip.run_cell_magic("cortex", "--script --delay 0 --chunk-size 7", BODY)
    path = tmp_path / "run.jsonl"
    ip.run_line_magic("cortex", f"save {path}")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def events(kind: str, change: Callable[[dict[str, Any]], None]) -> Callable[[Lines], str]:
    def edit(lines: Lines) -> str:
        for line in lines:
            if line.get("kind") == kind:
                change(line)
        return "".join(json.dumps(line) + "\n" for line in lines)

    return edit


def header(change: Callable[[dict[str, Any]], None]) -> Callable[[Lines], str]:
    def edit(lines: Lines) -> str:
        change(lines[0])
        return "".join(json.dumps(line) + "\n" for line in lines)

    return edit


def cut_short(lines: Lines) -> str:
    return "".join(json.dumps(line) + "\n" for line in lines)[:-20]


def nested_too_deeply(lines: Lines) -> str:
    text = "".join(json.dumps(line) + "\n" for line in lines)
    return text + '{"record": "variables", "values": {"a": ' + "[" * 10**5 + "]" * 10**5 + "}}\n"


def variables_not_a_mapping(lines: Lines) -> str:
    lines[-1] = {"record": "variables", "values": [1], "repr": 5}
    return "".join(json.dumps(line) + "\n" for line in lines)


# (how the file was harmed, what the one line says)
HARMED: dict[str, tuple[Callable[[Lines], str], str]] = {
    "no time": (events("turn", lambda line: line.pop("t")), "line {turn}: bad 'event' line"),
    "a time in words": (events("turn", lambda line: line.update(t="soon")), "line {turn}"),
    "chunk text a number": (events("chunk", lambda line: line.update(text=5)), "text"),
    "chunk text a list": (events("chunk", lambda line: line.update(text=["a"])), "text"),
    "a chunk of no known type": (events("chunk", lambda line: line.update(type="zzz")), "zzz"),
    "model a list": (events("turn", lambda line: line.update(model=["a", 1])), "model"),
    "model a dict": (events("turn", lambda line: line.update(model={"x": 1})), "model"),
    "model a number": (events("turn", lambda line: line.update(model=42)), "model"),
    "header model a dict": (header(lambda line: line.update(model={"x": 1})), "line 1"),
    "no id": (header(lambda line: line.pop("id")), "line 1"),
    "started in words": (header(lambda line: line.update(started="x")), "line 1"),
    "another version": (header(lambda line: line.update(version=2)), "unsupported version 2"),
    "a secret for a version": (header(lambda line: line.update(version=SECRET)), "line 1"),
    "a megabyte for a version": (header(lambda line: line.update(version="v" * 10**6)), "line 1"),
    "cut short": (cut_short, "not JSON"),
    "variables not a mapping": (variables_not_a_mapping, "variables"),
    "a line nested too deeply": (nested_too_deeply, "nested too deeply"),
}


@pytest.mark.parametrize("harm", list(HARMED))
def test_a_harmed_transcript_is_one_cortex_line_naming_what_is_wrong(
    ip: InteractiveShell,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    harm: str,
) -> None:
    monkeypatch.setenv("MY_API_KEY", SECRET)
    edit, says = HARMED[harm]
    path = tmp_path / "harmed.jsonl"
    lines = saved(ip, tmp_path)
    turn = 1 + next(n for n, line in enumerate(lines) if line.get("kind") == "turn")
    says = says.format(turn=turn)
    path.write_text(edit(lines), encoding="utf-8")
    capsys.readouterr()
    with recorded() as spans:
        result = ip.run_cell(f"%%cortex --replay {path} --speed 1000\nx")
    out = capsys.readouterr()
    text = out.out + out.err
    lines = [line for line in text.splitlines() if line.startswith("cortex:")]
    assert isinstance(result.error_in_exec, CortexRunError), text[-2000:]
    assert "Traceback" not in text and "Error" not in text.replace("CortexRunError", "")
    assert len(lines) == 1, text[-2000:]
    assert str(path) in lines[0] and says in lines[0], lines[0]
    assert len(lines[0]) < 1000 and SECRET not in text
    assert not any(SECRET in json.dumps(dict(s.attributes or {})) for s in spans)
    ip.run_cell_magic("cortex", "--script --delay 0", "<response>Still here.</response>")
    assert ip.user_ns["_cortex"].response == "Still here."  # the kernel goes on


def _store_bytes(path: Path) -> bytes:
    parts = [Path(f"{path}{suffix}") for suffix in ("", "-wal", "-shm")]
    return b"".join(part.read_bytes() for part in parts if part.exists())


def test_a_model_name_holding_a_secret_is_replayed_and_kept_redacted(
    ip: InteractiveShell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_API_KEY", SECRET)
    edit = events("turn", lambda line: line.update(model=SECRET))
    path = tmp_path / "named.jsonl"
    path.write_text(edit(saved(ip, tmp_path)), encoding="utf-8")
    kept = tmp_path / "runs.db"
    ip.run_line_magic("config", f"CortexMagics.store = {str(kept)!r}")
    with recorded() as spans:
        ip.run_cell_magic("cortex", f"--replay {path} --speed 1000", "x")
    run = ip.user_ns["_cortex"]
    assert run.response == "Four."
    assert store.open_store(kept).flush()
    assert store.take_problem() is None
    (row,) = store.runs(store=kept)
    assert row.id == run.id and row.status == "completed"
    assert SECRET.encode() not in _store_bytes(kept)  # runs.model held it whole
    assert not any(SECRET in json.dumps(dict(s.attributes or {})) for s in spans)


def test_a_megabyte_model_name_is_replayed_under_a_short_name(
    ip: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The name was shown whole in the view's header, set on every span (their names
    # too) and kept in the store: a megabyte each, two in `%cortex runs`.
    edit = events("turn", lambda line: line.update(model="m" * 10**6))
    path = tmp_path / "big.jsonl"
    path.write_text(edit(saved(ip, tmp_path)), encoding="utf-8")
    kept = tmp_path / "runs.db"
    ip.run_line_magic("config", f"CortexMagics.store = {str(kept)!r}")
    capsys.readouterr()
    with recorded() as spans:
        ip.run_cell_magic("cortex", f"--replay {path} --speed 1000", "x")
    assert ip.user_ns["_cortex"].response == "Four."
    out = capsys.readouterr()
    assert "mmmmmmmmmm" in out.out and len(out.out + out.err) < 2000
    assert spans and all(len(json.dumps(dict(s.attributes or {}))) < 5000 for s in spans)
    assert all(len(s.name) < 500 for s in spans)
    assert store.open_store(kept).flush()
    (row,) = store.runs(store=kept)
    assert row.model is not None and 0 < len(row.model) < 500


@pytest.mark.parametrize("gap", [1e9, 1e300])
def test_a_chunk_recorded_ages_after_the_one_before_does_not_hang_the_replay(
    ip: InteractiveShell, tmp_path: Path, gap: float
) -> None:
    # One chunk's time moved by hand: the replay slept gap / speed seconds (for ever).
    lines = saved(ip, tmp_path)
    last = max(n for n, line in enumerate(lines) if line.get("kind") == "chunk")
    lines[last]["t"] += gap
    path = tmp_path / "late.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    model = ReplayModel(path, speed=1000)

    async def chunks() -> list[Any]:
        with anyio.fail_after(60):  # a guard against the hang, not a measure of speed
            return [chunk async for chunk in model.stream([])]

    assert any(isinstance(c, TextChunk) and "Four" in c.text for c in anyio.run(chunks))


@pytest.mark.parametrize("when", ["NaN", "Infinity", "-Infinity"])
def test_a_time_that_is_not_a_finite_number_is_one_line(
    ip: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str], when: str
) -> None:
    lines = saved(ip, tmp_path)
    turn = next(n for n, line in enumerate(lines) if line.get("kind") == "turn")
    text = "".join(json.dumps(line) + "\n" for line in lines)
    moved = json.dumps(lines[turn]).replace(f'"t": {json.dumps(lines[turn]["t"])}', f'"t": {when}')
    path = tmp_path / "nan.jsonl"
    path.write_text(text.replace(json.dumps(lines[turn]), moved), encoding="utf-8")
    capsys.readouterr()
    result = ip.run_cell(f"%%cortex --replay {path} --speed 1000\nx")
    assert isinstance(result.error_in_exec, CortexRunError)
    out = capsys.readouterr()
    (line,) = [x for x in (out.out + out.err).splitlines() if x.startswith("cortex:")]
    assert f"line {turn + 1}" in line and "time" in line, line


@pytest.mark.parametrize("tokens", [10**30, 10**400])
def test_a_usage_of_more_tokens_than_sqlite_counts_is_still_stored(
    ip: InteractiveShell, tmp_path: Path, tokens: int
) -> None:
    # The store failed the whole run ("Python int too large to convert to SQLite INTEGER").
    lines = saved(ip, tmp_path)
    last = max(n for n, line in enumerate(lines) if line.get("kind") == "chunk")
    usage = dict(lines[last], type="usage", prompt_tokens=tokens, completion_tokens=tokens)
    usage.pop("text", None)
    lines.insert(last + 1, usage)
    path = tmp_path / "usage.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    kept = tmp_path / "runs.db"
    ip.run_line_magic("config", f"CortexMagics.store = {str(kept)!r}")
    ip.run_cell_magic("cortex", f"--replay {path} --speed 1000", "x")
    run = ip.user_ns["_cortex"]
    assert store.open_store(kept).flush()
    assert store.take_problem() is None
    (row,) = store.runs(store=kept)
    assert row.id == run.id and row.status == "completed" and row.prompt_tokens > 10**15

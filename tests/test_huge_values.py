"""Huge values are never printed whole (issue 19 §6): a 50 MB output goes through a
``%%cortex --script`` cell (its summary, the results sent back, the view, the static
copy, ``%cortex vars``) without anything asking for its full repr or str."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Iterator

import pytest
from IPython.core.interactiveshell import InteractiveShell

from cortex_jupyter import default_registry
from cortex_jupyter.runtime.core.record.run import brief_json, summarize
from cortex_jupyter.runtime.loop.prompt import describe_value, render_value
from cortex_jupyter.store import open_store

SIZE = 50_000_000

#: Every time something asked a ``Blob`` for its whole repr or str.
ASKED: list[str] = []


class Blob(bytes):
    """50 MB of bytes that notes (and refuses) a request for its full repr or str."""

    def __repr__(self) -> str:
        ASKED.append("repr")
        raise AssertionError("the full repr of 50 MB was asked for")

    def __str__(self) -> str:
        ASKED.append("str")
        raise AssertionError("the full str of 50 MB was asked for")


class Refuses:
    def __repr__(self) -> str:
        raise ValueError("no repr today")


SCRIPT = (
    '<action id="b">{"name": "huge_blob", "output_key": "huge_out"}</action>\n'
    "--- next turn ---\n"
    "<response>Got it.</response>"
)


@pytest.fixture
def blob() -> Iterator[Blob]:
    value = Blob(b"\x00" * SIZE)

    @default_registry.tool(name="huge_blob")
    def huge_blob() -> bytes:
        """Return 50 MB of bytes."""
        return value

    ASKED.clear()
    yield value
    default_registry.remove("tool", "huge_blob")


@pytest.mark.parametrize("display", ["text", "widgets"])
def test_a_50_mb_output_goes_through_a_cell_without_a_full_repr(
    ip: InteractiveShell, blob: Blob, display: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ip.run_line_magic("config", f"CortexMagics.display = {display!r}")
    try:
        ip.run_cell_magic("cortex", "--script", SCRIPT)
        run = ip.user_ns["_cortex"]
        assert run.status == "completed", run.reason
        assert run.actions["b"].status == "done" and run.actions["b"].output is blob
        assert ip.user_ns["huge_out"] is blob
        run.to_jsonl()
        ip.user_ns["refuses"] = Refuses()
        ip.run_line_magic("cortex", "expose huge_out refuses")
        capsys.readouterr()
        ip.run_line_magic("cortex", "vars")
        shown = capsys.readouterr().out
    finally:
        ip.run_line_magic("config", "CortexMagics.display = 'auto'")
    assert ASKED == []
    line = next(line for line in shown.splitlines() if line.strip().startswith("huge_out ="))
    assert line.strip().startswith("huge_out = b'\\x00\\x00")
    assert len(line) < 200
    refused = next(line for line in shown.splitlines() if line.strip().startswith("refuses ="))
    assert "<Refuses: repr failed: ValueError: no repr today>" in refused


def test_summaries_and_descriptions_read_only_what_they_show() -> None:
    from cortex_jupyter.runtime.core.trust.bounded import bounded_repr, bounded_str

    data = b"\x01" * SIZE
    text = "y" * SIZE
    # tracemalloc counts every thread: the store's writer may still be keeping an earlier
    # test's 50 MB output (order decides), so it is done before the peak is measured.
    open_store().flush(timeout=120)
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        shown = [
            summarize(data),
            summarize(text),
            summarize([data, {"k": text}]),
            describe_value(data),
            render_value(data),
            brief_json({"data": text}),
            bounded_str(data),
            bounded_repr(10**20_000),
        ]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < SIZE // 50  # well under one copy of either value
    assert "(50,000,000 bytes)" in shown[0] and len(shown[0]) < 250
    assert all(len(line) < 25_000 for line in shown)
    assert shown[-1] == "<int of 66,439 bits>"

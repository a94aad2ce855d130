"""``%cortex keep COLUMN --to DATASET`` (issue 35, item 5): a compare cell's column kept as
a test case, into a notebook ``Dataset`` or a saved file; and the column's keep button.

The case is what ``Dataset.from_runs`` makes of a run: the cell's prompt, the actions the
column took and its answer as the expectations. The columns ask fake servers (one a model).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from cortex_jupyter import default_registry
from cortex_jupyter.experiments import Case, Dataset
from tests.models.fake_openai_server import Error, FakeOpenAIServer
from tests.test_magic_compare import compare, reply
from tests.test_magic_compare import servers as servers  # the fixture

PROMPT = "What is 2 + 3? Use a tool."
ACT = '<action id="s">{"name": "keep_add", "parameters": {"a": 2, "b": 3}}</action>'


@pytest.fixture
def add_tool() -> Iterator[None]:
    @default_registry.tool(name="keep_add")
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    yield
    default_registry.remove("tool", "keep_add")


@pytest.fixture
def compared(ip: InteractiveShell, servers: list[FakeOpenAIServer], add_tool: None) -> Any:
    """A compare cell: column ma added with the tool and answered; mb failed."""
    a, b, _ = servers
    a.script(reply(ACT), reply("<response>5</response>"))
    b.script(*[Error(400, {"error": {"message": "model mb is not here"}})] * 3)
    return compare(ip, "--compare ma,mb", PROMPT)


def kinds(case: Case) -> list[str]:
    return [item["kind"] for item in case.to_data()["expect"]]


def test_keep_adds_the_columns_run_as_a_case_to_a_notebook_dataset(
    ip: InteractiveShell, compared: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    ip.run_line_magic("cortex", "keep ma --to cases")
    first = ip.user_ns["cases"]
    assert isinstance(first, Dataset) and first.name == "cases" and len(first) == 1
    (case,) = first
    assert case.prompt == PROMPT
    data = case.to_data()
    tools, answer = data["expect"]
    assert tools["kind"] == "tools" and answer["kind"] == "answer"
    assert "keep_add" in str(tools) and "'a': 2" in str(tools)
    assert answer.get("equals") == "5"
    assert case.metadata["run"] == compared["ma"].run.id
    assert case.metadata["column"] == "ma" and case.metadata["model"] == "ma"
    assert "kept column ma as case" in capsys.readouterr().out
    # Kept into a dataset that has a case of that name (another run's): a new dataset
    # replaces the name, the duplicate name gets a suffix.
    other = Dataset([Case(PROMPT, name=case.name)], name="cases")
    ip.user_ns["cases"] = other
    ip.run_line_magic("cortex", "keep ma --to cases")
    second = ip.user_ns["cases"]
    assert len(other) == 1 and len(second) == 2  # the dataset it held is unchanged
    assert second.names == [case.name, f"{case.name} (2)"]


def test_keep_appends_to_a_yaml_file_and_saves_it_whole(
    ip: InteractiveShell, compared: Any, tmp_path: Path
) -> None:
    path = tmp_path / "mine.yaml"
    Dataset([Case("an older case", name="old")], name="mine").save(path)
    ip.run_line_magic("cortex", f"keep ma --to {path}")
    loaded = Dataset.load(path)
    assert loaded.name == "mine" and loaded.names[0] == "old" and len(loaded) == 2
    assert loaded[1].prompt == PROMPT and kinds(loaded[1]) == ["tools", "answer"]
    # A new .jsonl file is made; no temporary file is left beside either.
    fresh = tmp_path / "new.jsonl"
    ip.run_line_magic("cortex", f"keep ma --to {fresh}")
    assert len(Dataset.load(fresh)) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.yaml", "new.jsonl"]


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("keep zz --to cases", "no column 'zz'; its columns: ma, mb"),
        ("keep mb --to cases", "column mb cannot be kept: its run ended"),
        ("keep ma --to taken", "taken is a str, not a Dataset"),
        ("keep ma --to cases.txt", "ends in .yaml, .yml or .jsonl"),
        ("keep ma", "--to"),
        ("keep ma --to {bad}", "not a dataset"),
    ],
)
def test_what_cannot_be_kept_is_one_line(
    ip: InteractiveShell, compared: Any, tmp_path: Path, line: str, says: str
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("just: [a, list\n", encoding="utf-8")
    ip.user_ns["taken"] = "mine"
    with pytest.raises(UsageError) as caught:
        ip.run_line_magic("cortex", line.format(bad=bad))
    message = str(caught.value)
    assert says in message and "\n" not in message
    assert bad.read_text(encoding="utf-8") == "just: [a, list\n"  # never half-written
    assert "cases" not in ip.user_ns and ip.user_ns["taken"] == "mine"


def test_keep_before_any_compare_cell_is_one_line(ip: InteractiveShell) -> None:
    ip.user_ns.pop("_compare", None)
    with pytest.raises(UsageError, match="no comparison yet"):
        ip.run_line_magic("cortex", "keep a --to cases")


def test_the_keep_button_adds_its_own_comparisons_column_to_kept(
    ip: InteractiveShell, compared: Any
) -> None:
    # A later comparison does not change what an older cell's button keeps.
    ip.user_ns["_compare"] = None
    said = compared._keep("ma")  # what the column's keep button calls
    assert said.startswith("kept column ma") and len(ip.user_ns["kept"]) == 1
    assert [c.metadata["run"] for c in ip.user_ns["kept"]] == [compared["ma"].run.id]
    # A second press (a double click) keeps nothing more, and says so.
    assert "already" in compared._keep("ma") and len(ip.user_ns["kept"]) == 1
    # A failed column's button says why in the column, and keeps nothing.
    assert "cannot be kept" in compared._keep("mb") and len(ip.user_ns["kept"]) == 1
